"""The ``resource.k8s.io/v1`` calls the scheduler makes (`gpusched.scheduler.dra.book.ClaimApi`).

Claims are written with PUT and their ``resourceVersion``: an allocation must never land on a
claim that changed since it was read (another scheduler may have allocated it meanwhile).
Every write is fenced as binds are (`KubeClusterApi._write`): the replica's own fence and the
decision's are asked as the request body goes out, and a write either refuses is never sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpusched.api.dra import DRA_API_VERSION
from gpusched.k8s.client import STRATEGIC_PATCH, KubeClusterApi
from gpusched.scheduler.ports import ApiError, Fence

BASE = f"/apis/{DRA_API_VERSION}"


class KubeClaimApi:
    def __init__(self, api: KubeClusterApi) -> None:
        self.api = api

    async def _list(self, path: str) -> list[dict[str, Any]]:
        document = await self.api._request("GET", f"{BASE}/{path}")
        items: list[dict[str, Any]] = document.get("items") or []
        return items

    async def list_resource_slices(self) -> list[dict[str, Any]]:
        return await self._list("resourceslices")

    async def list_device_classes(self) -> list[dict[str, Any]]:
        return await self._list("deviceclasses")

    async def list_resource_claims(self) -> list[dict[str, Any]]:
        return await self._list("resourceclaims")

    @staticmethod
    def _path(body: Mapping[str, Any]) -> str:
        metadata = body["metadata"]
        return f"{BASE}/namespaces/{metadata['namespace']}/resourceclaims/{metadata['name']}"

    async def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return await self.api._request(
                "GET", f"{BASE}/namespaces/{namespace}/resourceclaims/{name}"
            )
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    async def update_claim(
        self, body: Mapping[str, Any], fence: Fence | None = None
    ) -> dict[str, Any]:
        return await self.api._write("PUT", self._path(body), dict(body), fence=fence)

    async def update_claim_status(
        self, body: Mapping[str, Any], fence: Fence | None = None
    ) -> dict[str, Any]:
        path = f"{self._path(body)}/status"
        return await self.api._write("PUT", path, dict(body), fence=fence)

    async def create_claim(
        self, body: Mapping[str, Any], fence: Fence | None = None
    ) -> dict[str, Any]:
        path = f"{BASE}/namespaces/{body['metadata']['namespace']}/resourceclaims"
        return await self.api._write("POST", path, dict(body), fence=fence)

    async def delete_claim(
        self, namespace: str, name: str, uid: str, fence: Fence | None = None
    ) -> None:
        path = f"{BASE}/namespaces/{namespace}/resourceclaims/{name}"
        options = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
        try:
            await self.api._write("DELETE", path, options, fence=fence)
        except ApiError as error:
            if error.status != 404:
                raise

    async def patch_pod_status(
        self, namespace: str, name: str, status: Mapping[str, Any], fence: Fence | None = None
    ) -> None:
        path = f"/api/v1/namespaces/{namespace}/pods/{name}/status"
        await self.api._write("PATCH", path, {"status": dict(status)}, STRATEGIC_PATCH, fence=fence)

"""The ``resource.k8s.io/v1`` calls the scheduler makes (`gpusched.scheduler.dra.book.ClaimApi`).

Claims are written with PUT and their ``resourceVersion``: an allocation must never land on a
claim that changed since it was read (another scheduler may have allocated it meanwhile).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpusched.api.dra import DRA_API_VERSION
from gpusched.k8s.client import KubeClusterApi
from gpusched.scheduler.ports import ApiError

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

    async def update_claim(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self.api._request("PUT", self._path(body), dict(body))

    async def update_claim_status(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self.api._request("PUT", f"{self._path(body)}/status", dict(body))

    async def create_claim(self, body: Mapping[str, Any]) -> dict[str, Any]:
        namespace = body["metadata"]["namespace"]
        return await self.api._request(
            "POST", f"{BASE}/namespaces/{namespace}/resourceclaims", dict(body)
        )

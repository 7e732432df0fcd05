"""What the scheduling service needs from the API server, as a protocol."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol


class ApiError(Exception):
    """The API server refused a request, or could not be reached (``status`` 0)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}" if status else message)
        self.status = status
        self.message = message

    @property
    def transient(self) -> bool:
        """Worth retrying as it is: throttled, timed out, server-side or network failure."""
        return self.status in (0, 408, 429) or self.status >= 500


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """Names the object an Event or status patch is about."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class ClusterApi(Protocol):
    async def bind(self, pod: ObjectRef, node: str, annotations: Mapping[str, str]) -> None:
        """POSTs ``pods/{name}/binding``; the annotations land on the pod with the bind."""

    async def get_pod(self, pod: ObjectRef) -> Mapping[str, Any] | None:
        """The pod's body as the API server has it now; None when it does not exist."""

    async def patch_status(self, obj: ObjectRef, status: Mapping[str, Any]) -> None:
        """Merge-patches the status subresource of one of our custom objects."""

    async def create_event(self, body: Mapping[str, Any]) -> str:
        """Creates a core/v1 Event; returns its name."""

    async def patch_event(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        """Merge-patches an Event (its count and lastTimestamp, for aggregation)."""

    async def create_custom(self, body: Mapping[str, Any]) -> None:
        """Creates one of our custom objects (ApiError 409 when it exists)."""

    async def list_pods(self) -> list[dict[str, Any]]:
        """Every pod of the cluster (a new leader's first step, and the periodic resync)."""

    async def list_nodes(self) -> list[dict[str, Any]]:
        """Every Node of the cluster (the periodic resync)."""

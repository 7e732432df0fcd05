"""What the scheduling service needs from the API server, as a protocol."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
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


Fence = Callable[[], bool]
"""Whether this replica may write now; asked by the client at the last moment before a
write's bytes go out (see `gpusched.k8s.client.KubeClusterApi`)."""


class FencedError(ApiError):
    """A write this replica refused itself because its fence said no: not one byte of its
    body was sent, so the server cannot have applied it."""

    def __init__(self, what: str) -> None:
        super().__init__(0, f"not sent, this replica may not write now: {what}")


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


@dataclass(frozen=True, slots=True)
class Listing:
    """A list of objects and the ``metadata.resourceVersion`` of the list: the state it shows
    (empty when the server gave none)."""

    items: list[dict[str, Any]]
    version: str = ""


class ClusterApi(Protocol):
    async def bind(
        self,
        pod: ObjectRef,
        node: str,
        annotations: Mapping[str, str],
        fence: Fence | None = None,
    ) -> None:
        """POSTs ``pods/{name}/binding``; the annotations land on the pod with the bind.
        ``fence``, besides the client's own, is asked at the moment the request is written
        (`FencedError` when it says no)."""

    async def get_pod(self, pod: ObjectRef) -> Mapping[str, Any] | None:
        """The pod's body as the API server has it now; None when it does not exist."""

    async def evict(self, pod: ObjectRef, fence: Fence | None = None) -> None:
        """POSTs a policy/v1 Eviction for ``pod`` (preconditioned on its uid): ApiError 429
        when a PodDisruptionBudget refuses it, 404 when the pod is gone."""

    async def annotate_pod(
        self, pod: ObjectRef, annotations: Mapping[str, str | None], fence: Fence | None = None
    ) -> None:
        """Merge-patches the pod's annotations (None removes one); only this very pod (its
        uid): ApiError 409 for a new pod of the name, 404 when it is gone."""

    async def delete_pod(self, pod: ObjectRef, fence: Fence | None = None) -> None:
        """DELETEs ``pod`` (preconditioned on its uid); ApiError 404 when it is gone."""

    async def patch_pod_status(
        self,
        pod: ObjectRef,
        status: Mapping[str, Any],
        fence: Fence | None = None,
        *,
        version: str = "",
    ) -> None:
        """Strategic-merge-patches ``pods/{name}/status`` (conditions merge by type);
        ``version``: only if the pod is still at this ``resourceVersion`` (ApiError 409 else)."""

    async def get_job(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """A ``batch/v1`` Job as the API server has it; None when it does not exist."""

    async def patch_status(self, obj: ObjectRef, status: Mapping[str, Any]) -> None:
        """Merge-patches the status subresource of one of our custom objects."""

    async def create_event(self, body: Mapping[str, Any]) -> str:
        """Creates a core/v1 Event; returns its name."""

    async def patch_event(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        """Merge-patches an Event (its count and lastTimestamp, for aggregation)."""

    async def create_custom(self, body: Mapping[str, Any]) -> None:
        """Creates one of our custom objects (ApiError 409 when it exists)."""

    def pages(self, plural: str, *, cached: bool = False) -> AsyncIterator[Listing]:
        """Every pod (``"pods"``) or Node (``"nodes"``) of the cluster, page by page: the
        pages of one list, each with the list's resourceVersion, which the caller takes in
        one at a time rather than holding them all (43 MB at 15,000 pods). A consistent
        read (a new leader's first step); ``cached``: as the API server's watch cache holds
        them (``resourceVersion=0``), cheap to repeat but perhaps a little behind what a
        watch has shown (the periodic resync)."""

    async def list_groups(self) -> list[dict[str, Any]]:
        """Every PodGroup and CompositePodGroup of the cluster (a new leader's first step:
        its group watch may lag, and a gang it does not know is no gang to it)."""

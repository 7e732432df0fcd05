"""Fakes of the operator's ports, for tests that run the scheduling service without a server."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpusched.scheduler.ports import ApiError, Fence, FencedError, Listing, ObjectRef


@dataclass
class FakeApi:
    """Records every call; ``failures[pod]`` lists the errors its next binds raise (and
    ``evict_failures`` / ``delete_failures`` those of its next evictions and deletes)."""

    binds: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    failures: dict[str, list[ApiError]] = field(default_factory=dict)
    pods: dict[str, Mapping[str, Any] | None] = field(default_factory=dict)
    statuses: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    event_patches: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    created: list[dict[str, Any]] = field(default_factory=list)
    evictions: list[str] = field(default_factory=list)
    evict_failures: dict[str, list[ApiError]] = field(default_factory=dict)
    deleted: list[str] = field(default_factory=list)
    delete_failures: dict[str, list[ApiError]] = field(default_factory=dict)
    pod_statuses: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    annotations: list[tuple[str, dict[str, str | None]]] = field(default_factory=list)
    scheduled_conditions: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    jobs: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    """``batch/v1`` Jobs by ``namespace/name``, for `get_job`."""
    """``PodScheduled`` conditions patched onto pods (the rest goes to ``pod_statuses``)."""

    async def bind(
        self,
        pod: ObjectRef,
        node: str,
        annotations: Mapping[str, str],
        fence: Fence | None = None,
    ) -> None:
        if fence is not None and not fence():
            raise FencedError(f"bind of {pod.key}")
        pending = self.failures.get(pod.key)
        if pending:
            raise pending.pop(0)
        known = self.pods.get(pod.key)
        if known is not None and (known.get("spec") or {}).get("nodeName"):
            raise ApiError(409, f"pod {pod.name} is already assigned to a node")
        self.binds.append((pod.key, node, dict(annotations)))

    async def get_pod(self, pod: ObjectRef) -> Mapping[str, Any] | None:
        return self.pods.get(pod.key)

    async def evict(self, pod: ObjectRef, fence: Fence | None = None) -> None:
        if fence is not None and not fence():
            raise FencedError(f"eviction of {pod.key}")
        pending = self.evict_failures.get(pod.key)
        if pending:
            raise pending.pop(0)
        self.evictions.append(pod.key)

    async def delete_pod(self, pod: ObjectRef, fence: Fence | None = None) -> None:
        pending = self.delete_failures.get(pod.key)
        if pending:
            raise pending.pop(0)
        self.deleted.append(pod.key)

    async def annotate_pod(
        self, pod: ObjectRef, annotations: Mapping[str, str | None], fence: Fence | None = None
    ) -> None:
        self.annotations.append((pod.key, dict(annotations)))

    async def patch_pod_status(
        self,
        pod: ObjectRef,
        status: Mapping[str, Any],
        fence: Fence | None = None,
        *,
        version: str = "",
    ) -> None:
        conditions = status.get("conditions") or []
        if conditions and all(c.get("type") == "PodScheduled" for c in conditions):
            self.scheduled_conditions.append((pod.key, dict(conditions[0])))
            return
        self.pod_statuses.append((pod.key, dict(status)))

    async def get_job(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.jobs.get(f"{namespace}/{name}")

    async def patch_status(self, obj: ObjectRef, status: Mapping[str, Any]) -> None:
        self.statuses.append((obj.kind, obj.key, dict(status)))

    async def create_event(self, body: Mapping[str, Any]) -> str:
        self.events.append(dict(body))
        return f"event-{len(self.events)}"

    async def patch_event(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        self.event_patches.append((name, dict(patch)))

    async def create_custom(self, body: Mapping[str, Any]) -> None:
        self.created.append(dict(body))

    async def list_nodes(self) -> list[dict[str, Any]]:
        return []

    async def list_groups(self) -> list[dict[str, Any]]:
        return []

    async def pages(self, plural: str, *, cached: bool = False) -> AsyncIterator[Listing]:
        """What the test's ``list_pods`` (set on the instance) or `list_nodes` answers, as
        one page, from the watch cache or not."""
        lister = self.list_pods if plural == "pods" else self.list_nodes  # type: ignore[attr-defined]
        yield Listing(await lister())

    def last_status(self, key: str) -> dict[str, Any]:
        return next(s for _, k, s in reversed(self.statuses) if k == key)

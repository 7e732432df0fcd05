"""Watch events into the scheduling service: one thin adapter per kind, and the table of the
kinds the operator watches (`watched`), each fed by its own `gpusched.k8s.watch.Watch`.

An adapter takes the service and one event (``{"type": ..., "object": body}``; type None for
an object of a (re)started watch's list) and calls one service method."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from gpusched.api.crds import GROUP, VERSION
from gpusched.engine.groups import GroupKind
from gpusched.k8s.watch import Event, Kind
from gpusched.scheduler.service import Scheduler

Adapter = Callable[[Scheduler, Event], Awaitable[None]]


def key(body: Any) -> str:
    """``namespace/name`` of a namespaced object (``default`` when it names none)."""
    metadata = body["metadata"]
    return f"{metadata.get('namespace') or 'default'}/{metadata['name']}"


async def node_event(scheduler: Scheduler, event: Event) -> None:
    body = event["object"]
    if event["type"] == "DELETED":
        scheduler.node_deleted(body["metadata"]["name"])
    else:
        scheduler.node_changed(body)


async def pod_event(scheduler: Scheduler, event: Event) -> None:
    body = event["object"]
    if event["type"] == "DELETED":
        scheduler.pod_deleted(key(body), str(body["metadata"].get("uid") or "") or None)
    else:
        # A (re)started watch's list (type None) never tells what was deleted meanwhile.
        scheduler.pod_changed(body, listed=event["type"] is None)


def group_event(kind: GroupKind) -> Adapter:
    async def adapt(scheduler: Scheduler, event: Event) -> None:
        body = event["object"]
        if event["type"] == "DELETED":
            scheduler.group_deleted(key(body))
        else:
            scheduler.group_changed(kind, body)

    return adapt


async def priority_class_event(scheduler: Scheduler, event: Event) -> None:
    body = event["object"]
    if event["type"] == "DELETED":
        scheduler.priority_class_deleted(body["metadata"]["name"])
    else:
        scheduler.priority_class_changed(body)


async def budget_event(scheduler: Scheduler, event: Event) -> None:
    body = event["object"]
    if event["type"] == "DELETED":
        scheduler.budget_deleted(key(body))
    else:
        scheduler.budget_changed(body)


async def workload_event(scheduler: Scheduler, event: Event) -> None:
    body = event["object"]
    if event["type"] == "DELETED":
        scheduler.workload_deleted(key(body))
    else:
        scheduler.workload_changed(body)


CORE: tuple[tuple[Kind, Adapter], ...] = (
    (Kind("", "v1", "nodes", "Node"), node_event),
    (Kind("", "v1", "pods", "Pod"), pod_event),
    (Kind(GROUP, VERSION, "podgroups", "PodGroup"), group_event(GroupKind.POD_GROUP)),
    (
        Kind(GROUP, VERSION, "compositepodgroups", "CompositePodGroup"),
        group_event(GroupKind.COMPOSITE),
    ),
    (Kind(GROUP, VERSION, "workloads", "Workload"), workload_event),
    (Kind("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass"), priority_class_event),
    (Kind("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget"), budget_event),
)
"""The kinds every operator watches, with their adapters."""

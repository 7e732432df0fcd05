"""Watch events of the DRA objects gpusched allocates by into the scheduling service:
ResourceSlices (a node's devices), DeviceClasses (what a request asks for) and ResourceClaims
(the ledger of DRA GPUs). `WATCHED` is added to the operator's watches at start."""

from __future__ import annotations

from gpusched.api.dra import DRA_GROUP, DRA_VERSION
from gpusched.handlers.events import Adapter, key
from gpusched.k8s.watch import Event, Kind
from gpusched.scheduler.service import Scheduler


async def resource_slice_event(scheduler: Scheduler, event: Event) -> None:
    body = event["object"]
    if event["type"] == "DELETED":
        scheduler.slice_deleted(body["metadata"]["name"])
    else:
        scheduler.slice_changed(body)


async def device_class_event(scheduler: Scheduler, event: Event) -> None:
    body = event["object"]
    if event["type"] == "DELETED":
        scheduler.device_class_deleted(body["metadata"]["name"])
    else:
        scheduler.device_class_changed(body)


async def resource_claim_event(scheduler: Scheduler, event: Event) -> None:
    body = event["object"]
    if event["type"] == "DELETED":
        scheduler.claim_deleted(key(body))
    else:
        scheduler.claim_changed(body)


WATCHED: tuple[tuple[Kind, Adapter], ...] = (
    (Kind(DRA_GROUP, DRA_VERSION, "resourceslices", "ResourceSlice"), resource_slice_event),
    (Kind(DRA_GROUP, DRA_VERSION, "deviceclasses", "DeviceClass"), device_class_event),
    (Kind(DRA_GROUP, DRA_VERSION, "resourceclaims", "ResourceClaim"), resource_claim_event),
)
"""The DRA kinds the operator watches, with their adapters."""

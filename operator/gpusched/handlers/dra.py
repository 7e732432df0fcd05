"""Watch events of the DRA objects gpusched allocates by into the scheduling service:
ResourceSlices (a node's devices), DeviceClasses (what a request asks for) and ResourceClaims
(the ledger of DRA GPUs), and the NVIDIA driver's ComputeDomains. `WATCHED` is added to the
operator's watches at start."""

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


async def compute_domain_event(scheduler: Scheduler, event: Event) -> None:
    """The NVIDIA driver's ComputeDomains: which namespace each is in (its channel claims
    must be in it)."""
    book = scheduler.claims.book
    if event["type"] == "DELETED":
        book.delete_compute_domain(event["object"])
    else:
        book.upsert_compute_domain(event["object"])
    scheduler.wake()


COMPUTE_DOMAINS = Kind("resource.nvidia.com", "v1beta1", "computedomains", "ComputeDomain")
"""The NVIDIA DRA driver's ComputeDomain (watched where its CRD is served)."""

WATCHED: tuple[tuple[Kind, Adapter], ...] = (
    (Kind(DRA_GROUP, DRA_VERSION, "resourceslices", "ResourceSlice"), resource_slice_event),
    (Kind(DRA_GROUP, DRA_VERSION, "deviceclasses", "DeviceClass"), device_class_event),
    (Kind(DRA_GROUP, DRA_VERSION, "resourceclaims", "ResourceClaim"), resource_claim_event),
    (COMPUTE_DOMAINS, compute_domain_event),
)
"""The DRA kinds the operator watches, with their adapters."""

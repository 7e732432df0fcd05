"""Kopf handlers for the DRA objects gpusched allocates by: ResourceSlices (a node's devices),
DeviceClasses (what a request asks for) and ResourceClaims (the ledger of DRA GPUs)."""

from __future__ import annotations

from typing import Any

import kopf

from gpusched.api.dra import DRA_GROUP, DRA_VERSION
from gpusched.handlers import _scheduler, registry


@kopf.on.event(DRA_GROUP, DRA_VERSION, "resourceslices", registry=registry)
async def resource_slice_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    scheduler = _scheduler(memo)
    body = event["object"]
    if event["type"] == "DELETED":
        scheduler.slice_deleted(body["metadata"]["name"])
    else:
        scheduler.slice_changed(body)


@kopf.on.event(DRA_GROUP, DRA_VERSION, "deviceclasses", registry=registry)
async def device_class_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    scheduler = _scheduler(memo)
    body = event["object"]
    if event["type"] == "DELETED":
        scheduler.device_class_deleted(body["metadata"]["name"])
    else:
        scheduler.device_class_changed(body)


@kopf.on.event(DRA_GROUP, DRA_VERSION, "resourceclaims", registry=registry)
async def resource_claim_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    scheduler = _scheduler(memo)
    body = event["object"]
    if event["type"] == "DELETED":
        metadata = body["metadata"]
        scheduler.claim_deleted(f"{metadata.get('namespace') or 'default'}/{metadata['name']}")
    else:
        scheduler.claim_changed(body)

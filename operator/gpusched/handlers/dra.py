"""Kopf handlers for the DRA objects gpusched allocates by: ResourceSlices (a node's devices),
DeviceClasses (what a request asks for) and ResourceClaims (the ledger of DRA GPUs)."""

from __future__ import annotations

from typing import Any

import kopf

from gpusched.api.dra import DRA_GROUP, DRA_VERSION
from gpusched.handlers import _scheduler, registry


def _key(body: Any) -> tuple[str, str]:
    metadata = body["metadata"]
    return str(metadata.get("namespace") or "default"), str(metadata["name"])


@kopf.on.event(DRA_GROUP, DRA_VERSION, "resourceslices", registry=registry)
async def resource_slice_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    scheduler = _scheduler(memo)
    body = event["object"]
    if event["type"] == "DELETED":
        scheduler.claims.book.delete_slice(body["metadata"]["name"])
    else:
        scheduler.claims.book.upsert_slice(body)
    scheduler.wake()


@kopf.on.event(DRA_GROUP, DRA_VERSION, "deviceclasses", registry=registry)
async def device_class_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    scheduler = _scheduler(memo)
    body = event["object"]
    if event["type"] == "DELETED":
        scheduler.claims.book.delete_class(body["metadata"]["name"])
    else:
        scheduler.claims.book.upsert_class(body)
    scheduler.wake()


@kopf.on.event(DRA_GROUP, DRA_VERSION, "resourceclaims", registry=registry)
async def resource_claim_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    scheduler = _scheduler(memo)
    body = event["object"]
    if event["type"] == "DELETED":
        namespace, name = _key(body)
        scheduler.claims.book.delete_claim(f"{namespace}/{name}")
    else:
        scheduler.claims.book.upsert_claim(body)
    scheduler.wake()

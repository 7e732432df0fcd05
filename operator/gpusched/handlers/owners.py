"""Kopf handlers for the objects that own pods, for owner groups (``ownerGroups``,
`gpusched.scheduler.ownergroups`): Jobs, and the kinds whose size gpusched reads. Kinds the
API server does not serve are named once in the log and not watched. With ``ownerGroups``
off, the events are dropped at once."""

from __future__ import annotations

from typing import Any

import kopf

from gpusched.handlers import _scheduler, registry

OWNER_KINDS = (
    ("batch", "v1", "jobs", "Job"),
    ("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet"),
    ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "LeaderWorkerSet"),
    ("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob"),
    ("kubeflow.org", "v2beta1", "mpijobs", "MPIJob"),
    ("ray.io", "v1", "rayclusters", "RayCluster"),
)
"""(API group, version, plural, kind) of each owner kind watched."""


def _handler(api_version: str, kind: str) -> Any:
    async def owner_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
        scheduler = _scheduler(memo)
        body = event["object"]
        if event["type"] == "DELETED":
            metadata = body["metadata"]
            namespace = metadata.get("namespace") or "default"
            scheduler.owner_deleted(api_version, kind, namespace, metadata["name"])
        else:
            scheduler.owner_changed(api_version, kind, body)

    return owner_event


for _group, _version, _plural, _kind in OWNER_KINDS:
    kopf.on.event(_group, _version, _plural, registry=registry, id=f"{_plural}.{_group}")(
        _handler(f"{_group}/{_version}", _kind)
    )

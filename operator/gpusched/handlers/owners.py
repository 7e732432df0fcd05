"""Watch events of the objects that own pods into the scheduling service, for owner groups
(`gpusched.scheduler.ownergroups`): Jobs, StatefulSets (a LeaderWorkerSet's pods are owned by
one), the kinds whose size gpusched reads, and Namespaces (their label
``scheduling.gpusched.io/owner-groups`` turns owner groups on or off there). Kinds the API
server does not serve at start are named once in the log and watched once it serves them
(`gpusched.handlers.discovery`)."""

from __future__ import annotations

from gpusched.handlers.events import Adapter
from gpusched.k8s.watch import Event, Kind
from gpusched.scheduler.service import Scheduler

OWNER_KINDS = (
    Kind("batch", "v1", "jobs", "Job"),
    Kind("apps", "v1", "statefulsets", "StatefulSet"),
    Kind("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet"),
    Kind("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "LeaderWorkerSet"),
    Kind("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob"),
    Kind("kubeflow.org", "v2beta1", "mpijobs", "MPIJob"),
    Kind("ray.io", "v1", "rayclusters", "RayCluster"),
)
"""Each owner kind watched."""
NAMESPACES = Kind("", "v1", "namespaces", "Namespace")


def _adapter(api_version: str, kind: str) -> Adapter:
    async def owner_event(scheduler: Scheduler, event: Event) -> None:
        body = event["object"]
        if event["type"] == "DELETED":
            metadata = body["metadata"]
            namespace = metadata.get("namespace") or "default"
            scheduler.owner_deleted(api_version, kind, namespace, metadata["name"])
        else:
            scheduler.owner_changed(api_version, kind, body)

    return owner_event


async def namespace_event(scheduler: Scheduler, event: Event) -> None:
    metadata = event["object"]["metadata"]
    labels = None if event["type"] == "DELETED" else (metadata.get("labels") or {})
    scheduler.namespace_changed(metadata["name"], labels)


WATCHED: tuple[tuple[Kind, Adapter], ...] = (
    *((kind, _adapter(f"{kind.group}/{kind.version}", kind.kind)) for kind in OWNER_KINDS),
    (NAMESPACES, namespace_event),
)
"""Each owner kind watched, with its adapter, and Namespaces."""

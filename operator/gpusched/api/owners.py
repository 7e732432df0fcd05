"""Implicit gangs for pods that name no group: one per top owner, as KAI's podgrouper makes them.

A pod of ours with no group reference (`gpusched.api.grouprefs`), in a namespace where owner
grouping is on, belongs to the group of its top owner: its controller's controller's ...
controller, found by walking ``ownerReferences`` through the objects known. The group is a gang
sized from the owner's spec:

- Job (``batch/v1``): ``parallelism`` (default 1), at most ``completions``;
- JobSet (``jobset.x-k8s.io``): Σ over ``replicatedJobs`` of ``replicas`` × the Job's size;
- LeaderWorkerSet (``leaderworkerset.x-k8s.io``): ``leaderWorkerTemplate.size``, one group per
  replica (the pod label ``leaderworkerset.sigs.k8s.io/group-index`` tells them apart). Its
  controller makes the workers only once the leader is scheduled (exclusive placement, the
  annotation `LWS_EXCLUSIVE_ANNOTATION`) or Ready (``startupPolicy: LeaderReady``): such a
  LeaderWorkerSet is `TopOwner.staged`, the leader a gang of one and its workers a gang of
  ``size - 1`` (one gang of ``size`` would wait for workers that come only after it);
- PyTorchJob, MPIJob (``kubeflow.org``): Σ of their replica specs' ``replicas`` (default 1);
- RayCluster (``ray.io``): 1 head + Σ of ``workerGroupSpecs[].replicas``.

Knobs are annotations on the top owner: `MIN_MEMBERS_ANNOTATION` replaces the size, and
`TOPOLOGY_ANNOTATION` (the same key as on Volcano's and coscheduling's PodGroups) puts the
gang in one domain of that node label. An owner of a kind not listed makes a gang of one (and
the operator says so in an Event); an owner chain that loops is an error naming the objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpusched.api.errors import InvalidObjectError
from gpusched.api.foreign import TOPOLOGY_ANNOTATION

MIN_MEMBERS_ANNOTATION = "scheduling.gpusched.io/min-members"
LWS_GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
"""``0`` on a LeaderWorkerSet's leader pod, ``1``… on its workers."""
LWS_EXCLUSIVE_ANNOTATION = "leaderworkerset.sigs.k8s.io/exclusive-topology"
MAX_OWNER_DEPTH = 16
"""Owner chains are a few links long (Pod → Job → JobSet); longer is a loop or a mistake."""

OwnerKey = tuple[str, str, str]
"""(API group/Kind, namespace, name) of an owner, as ``ownerReferences`` name it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TopOwner:
    """The top owner of a pod and the gang it makes."""

    kind: str
    """``Kind`` alone (``Job``, ``JobSet``); the engine names the group ``owner:<kind>.<name>``."""
    name: str
    size: int
    known: bool
    """False for a kind without a sizing rule: a gang of one."""
    topology_key: str | None = None
    staged: bool = False
    """Its controller makes the rest of a gang only once the first pod is placed (a
    LeaderWorkerSet whose workers wait for their leader): see the module's note."""


def owner_key(api_version: str, kind: str, namespace: str, name: str) -> OwnerKey:
    return (f"{api_version.partition('/')[0]}/{kind}", namespace, name)


def controller_of(metadata: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """(apiVersion, kind, name) of the object's controller (the reference with
    ``controller: true``, else the only one), or None."""
    references = [r for r in metadata.get("ownerReferences") or [] if isinstance(r, Mapping)]
    chosen = [r for r in references if r.get("controller")] or references[:1]
    if not chosen:
        return None
    ref = chosen[0]
    return str(ref.get("apiVersion") or ""), str(ref.get("kind") or ""), str(ref.get("name") or "")


def top_owner(
    obj: str,
    namespace: str,
    metadata: Mapping[str, Any],
    owners: Mapping[OwnerKey, Mapping[str, Any]],
) -> TopOwner | None:
    """The top owner of an object with ``metadata`` (None when it has no owner). Raises
    `InvalidObjectError` for ``obj`` when the owner chain loops or is too deep."""
    seen: list[str] = []
    found: tuple[str, str, Mapping[str, Any] | None] | None = None
    current = metadata
    while (ref := controller_of(current)) is not None:
        api_version, kind, name = ref
        seen.append(f"{kind} {namespace}/{name}")
        if len(seen) != len(set(seen)) or len(seen) > MAX_OWNER_DEPTH:
            raise InvalidObjectError(
                obj, "metadata.ownerReferences", f"the owner chain loops: {' → '.join(seen)}"
            )
        body = owners.get(owner_key(api_version, kind, namespace, name))
        found = (kind, name, body)
        if body is None:
            break  # not known (not watched, or gone): the top we can see
        meta = body.get("metadata")
        current = meta if isinstance(meta, Mapping) else {}
    if found is None:
        return None
    kind, name, body = found
    return _sized(kind, name, body)


def _sized(kind: str, name: str, body: Mapping[str, Any] | None) -> TopOwner:
    spec = _map(body, "spec")
    rule = SIZES.get(kind)
    size = rule(spec) if rule is not None and body is not None else 1
    annotations = _map(_map(body, "metadata"), "annotations")
    wanted = annotations.get(MIN_MEMBERS_ANNOTATION)
    if isinstance(wanted, str) and wanted.strip().isdigit() and int(wanted) >= 1:
        size = int(wanted)
    topology = annotations.get(TOPOLOGY_ANNOTATION)
    known = rule is not None and body is not None
    staged = kind == "LeaderWorkerSet" and (
        spec.get("startupPolicy") == "LeaderReady" or LWS_EXCLUSIVE_ANNOTATION in annotations
    )
    return TopOwner(
        kind=kind,
        name=name,
        size=max(size, 1),
        known=known,
        topology_key=topology if isinstance(topology, str) else None,
        staged=staged,
    )


def _map(body: Any, key: str) -> Mapping[str, Any]:
    found = body.get(key) if isinstance(body, Mapping) else None
    return found if isinstance(found, Mapping) else {}


def _int(value: Any, default: int) -> int:
    return (
        value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else default
    )


def _job(spec: Mapping[str, Any]) -> int:
    parallelism = _int(spec.get("parallelism"), 1)
    completions = spec.get("completions")
    return min(parallelism, _int(completions, parallelism))


def _jobset(spec: Mapping[str, Any]) -> int:
    total = 0
    for replicated in spec.get("replicatedJobs") or []:
        if isinstance(replicated, Mapping):
            job = _map(_map(replicated, "template"), "spec")
            total += _int(replicated.get("replicas"), 1) * _job(job)
    return total


def _lws(spec: Mapping[str, Any]) -> int:
    return _int(_map(spec, "leaderWorkerTemplate").get("size"), 1)


def _replica_specs(field: str) -> Any:
    def size(spec: Mapping[str, Any]) -> int:
        replicas = _map(spec, field)
        return sum(_int(_map(replicas, role).get("replicas"), 1) for role in replicas)

    return size


def _raycluster(spec: Mapping[str, Any]) -> int:
    workers = [w for w in spec.get("workerGroupSpecs") or [] if isinstance(w, Mapping)]
    return 1 + sum(_int(w.get("replicas"), _int(w.get("minReplicas"), 1)) for w in workers)


SIZES = {
    "Job": _job,
    "JobSet": _jobset,
    "LeaderWorkerSet": _lws,
    "PyTorchJob": _replica_specs("pytorchReplicaSpecs"),
    "MPIJob": _replica_specs("mpiReplicaSpecs"),
    "RayCluster": _raycluster,
}
"""The owner kinds whose size gpusched reads, by Kind."""

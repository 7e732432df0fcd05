"""Groups that other projects define, as the `GroupSpec` the engine places.

A foreign group object (`gpusched.api.foreign`) becomes the spec our own object with the same
fields would become, keyed by its engine name (``ml/volcano:train``, see
`gpusched.api.grouprefs`), its parent keyed the same way. A Kueue plain-pod group has no
object: its spec is made from its pods' label and total count (`implicit_spec`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from gpusched.api.crds import PodGroup
from gpusched.api.foreign import ForeignGroup
from gpusched.api.grouprefs import KUEUE_TOTAL_ANNOTATION, GroupRef, GroupSource, group_name
from gpusched.api.owners import LWS_GROUP_INDEX_LABEL, LWS_WORKER_INDEX_LABEL, TopOwner
from gpusched.api.priority import PriorityClass
from gpusched.engine import wording
from gpusched.engine.groups import GroupKey, GroupKind, GroupSpec


def foreign_spec(
    found: ForeignGroup, classes: Mapping[str, PriorityClass] | None = None
) -> GroupSpec:
    """The spec of a foreign group, keyed by its engine name."""
    group = found.group
    if isinstance(group, PodGroup):
        spec = GroupSpec.from_pod_group(group, classes)
    else:
        spec = GroupSpec.from_composite(group, classes)
        if found.basic:  # children independent: none waits for, or is undone with, another
            spec = replace(spec, gang=False)
    namespace = group.metadata.namespace
    parent = group.spec.parent_composite_pod_group_name
    return replace(
        spec,
        min_resources=found.min_resources,
        task_minimums=found.task_minimums,
        key=foreign_key(found.source, namespace, group.metadata.name),
        parent=foreign_key(found.source, namespace, parent) if parent else None,
    )


def foreign_key(source: GroupSource, namespace: str, name: str) -> str:
    return str(GroupKey(namespace, group_name(source, name)))


def invalid_spec(source: GroupSource, kind: str, namespace: str, name: str, why: str) -> GroupSpec:
    """A foreign group that failed validation: its pods wait with the reason."""
    return GroupSpec(key=foreign_key(source, namespace, name), kind=GroupKind(kind), invalid=why)


def implicit_spec(namespace: str, ref: GroupRef, created: float) -> GroupSpec:
    """A Kueue plain-pod group: a gang of its total count, no topology of its own (Kueue's
    node selector on each pod keeps them where Kueue admitted them)."""
    assert ref.total is not None, "a Kueue reference carries its total count"
    return GroupSpec(
        key=foreign_key(ref.source, namespace, ref.name),
        kind=GroupKind.POD_GROUP,
        gang=True,
        minimum=ref.total,
        created=created,
    )


Members = Mapping[str, Mapping[str, tuple[GroupRef, float]]]
"""Implicit group key → pod key → (the pod's reference, its creation time)."""


def implicit_specs(members: Members) -> list[GroupSpec]:
    """The spec of each Kueue plain-pod group, from its pods; pods that disagree on the size
    make it invalid, naming one of them and the annotation."""
    specs = []
    for key, pods in members.items():
        refs = sorted(pods.items())
        first_key, (first, _) = refs[0]
        disagreeing = [(k, ref) for k, (ref, _) in refs if ref.total != first.total]
        if disagreeing:
            other_key, other = disagreeing[0]
            why = wording.kueue_size_disagrees(
                other_key, KUEUE_TOTAL_ANNOTATION, other.total, first_key, first.total
            )
            specs.append(GroupSpec(key=key, kind=GroupKind.POD_GROUP, invalid=why))
            continue
        created = min(c for _, (_, c) in refs)
        specs.append(implicit_spec(GroupKey.parse(key).namespace, first, created))
    return specs


def owner_group_name(top: TopOwner, labels: Mapping[str, str]) -> str:
    """The engine name of the implicit group of pods whose top owner is ``top``: one per
    owner, one per replica of a LeaderWorkerSet (its leader apart when it is staged)."""
    name = f"{top.kind}.{top.name}"
    index = labels.get(LWS_GROUP_INDEX_LABEL)
    if top.kind == "LeaderWorkerSet" and index is not None:
        name = f"{name}.{index}"
    if _staged_leader(top, labels):
        name = f"{name}.leader"
    return group_name(GroupSource.OWNER, name)


def owner_gang_size(top: TopOwner, labels: Mapping[str, str]) -> int:
    """The gang's size: the owner's, or for a staged LeaderWorkerSet 1 for its leader and
    the rest for its workers (`TopOwner.staged`)."""
    if not top.staged:
        return top.size
    return 1 if _staged_leader(top, labels) else max(top.size - 1, 1)


def _staged_leader(top: TopOwner, labels: Mapping[str, str]) -> bool:
    return top.staged and labels.get(LWS_WORKER_INDEX_LABEL) == "0"


def owner_spec(
    namespace: str, engine_name: str, top: TopOwner, created: float, size: int | None = None
) -> GroupSpec:
    """A gang of ``size`` (default the owner's), in one domain of its topology annotation
    if it has one."""
    return GroupSpec(
        key=str(GroupKey(namespace, engine_name)),
        kind=GroupKind.POD_GROUP,
        gang=True,
        minimum=top.size if size is None else size,
        topology_key=top.topology_key,
        created=created,
    )

"""The engine's view of PodGroups and CompositePodGroups: what must be placed together where."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from gpusched.api.crds import CompositePodGroup, DisruptionMode, PodGroup, PreemptionPolicy
from gpusched.api.priority import PriorityClass, ResolvedPriority, resolve_priority


@dataclass(frozen=True, slots=True, order=True)
class GroupKey:
    """Which group: its namespace and name. ``str(key)``, ``namespace/name``, is the one
    rendering, which keys groups in the engine's results, in status and in Events."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    @staticmethod
    def parse(text: str) -> GroupKey:
        """The key ``str`` rendered (``namespace/name``)."""
        namespace, _, name = text.partition("/")
        return GroupKey(namespace, name)


class GroupKind(StrEnum):
    POD_GROUP = "PodGroup"
    COMPOSITE = "CompositePodGroup"


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupSpec:
    """A PodGroup or CompositePodGroup reduced to its scheduling rules.

    ``minimum`` is minCount (PodGroup gang), minGroupCount (CompositePodGroup) or 0 (basic).
    ``invalid`` holds the error of an object that failed validation: its pods stay pending
    with reason ``Invalid`` and the message, and nothing else is affected."""

    key: str
    kind: GroupKind
    gang: bool = True
    minimum: int = 1
    topology_key: str | None = None
    parent: str | None = None
    created: float = 0.0
    invalid: str | None = None
    priority: int | None = None
    """The group's resolved priority; None: its pods' own priority decides."""
    priority_problem: str | None = None
    """Why the priority could not be resolved: such a group neither preempts nor is evicted."""
    preemption_policy: PreemptionPolicy = PreemptionPolicy.PREEMPT_LOWER_PRIORITY
    disruption_mode: DisruptionMode = DisruptionMode.SINGLE
    segment_size: int | None = None
    """Pods per segment (`gpusched.engine.segments`): each segment lands inside one domain of
    ``topology_key``; None: the whole group does."""
    min_resources: tuple[tuple[str, int], ...] = ()
    """Volcano's and coscheduling's ``minResources`` (resource, canonical amount): the group
    is tried only once the cluster's free resources could hold them
    (`gpusched.engine.admission`)."""
    task_minimums: tuple[tuple[str, int], ...] = ()
    """Volcano's ``minTaskMember`` (task, minimum): besides ``minimum``, each task needs that
    many of its pods (`PodRequest.task`) placed together, all or nothing."""

    @property
    def namespace(self) -> str:
        return GroupKey.parse(self.key).namespace

    @staticmethod
    def from_pod_group(
        group: PodGroup, classes: Mapping[str, PriorityClass] | None = None
    ) -> GroupSpec:
        """``classes``: the cluster's PriorityClasses by name, to resolve
        ``priorityClassName`` (`resolve_priority`)."""
        spec = group.spec
        gang = spec.scheduling_policy.gang
        resolved = resolve_priority(group, classes)
        return GroupSpec(
            key=group.key,
            kind=GroupKind.POD_GROUP,
            gang=gang is not None,
            minimum=gang.min_count if gang is not None else 0,
            topology_key=_topology_key(spec.scheduling_constraints),
            parent=_parent_key(group.metadata.namespace, spec.parent_composite_pod_group_name),
            created=_created(group),
            priority=resolved.priority,
            priority_problem=_problem(resolved),
            preemption_policy=resolved.preemption_policy,
            disruption_mode=resolved.disruption_mode,
            segment_size=group.segment_size,
        )

    @staticmethod
    def from_composite(
        group: CompositePodGroup, classes: Mapping[str, PriorityClass] | None = None
    ) -> GroupSpec:
        spec = group.spec
        resolved = resolve_priority(group, classes)
        return GroupSpec(
            key=group.key,
            kind=GroupKind.COMPOSITE,
            gang=True,
            minimum=spec.scheduling_policy.gang.min_group_count,
            topology_key=_topology_key(spec.scheduling_constraints),
            parent=_parent_key(group.metadata.namespace, spec.parent_composite_pod_group_name),
            created=_created(group),
            priority=resolved.priority,
            priority_problem=_problem(resolved),
            preemption_policy=resolved.preemption_policy,
            disruption_mode=resolved.disruption_mode,
        )


def _problem(resolved: ResolvedPriority) -> str | None:
    return str(resolved.problem) if resolved.problem is not None else None


def _topology_key(constraints: object) -> str | None:
    topology = getattr(constraints, "topology", None) or []
    return str(topology[0].key) if topology else None


def _parent_key(namespace: str, parent: str | None) -> str | None:
    return str(GroupKey(namespace, parent)) if parent else None


def _created(group: PodGroup | CompositePodGroup) -> float:
    stamp = group.metadata.creation_timestamp
    return stamp.timestamp() if stamp is not None else 0.0


class GroupTree:
    """The PodGroup / CompositePodGroup tree: groups by key, each group's children in key
    order, the roots. Walks are safe on bad input: a parent that is missing ends a walk up,
    and a cycle is walked once."""

    def __init__(self, groups: Iterable[GroupSpec]) -> None:
        self._listed = tuple(groups)
        self.groups: Mapping[str, GroupSpec] = {g.key: g for g in self._listed}
        children: dict[str, list[GroupSpec]] = {}
        for group in sorted(self._listed, key=lambda g: g.key):
            if group.parent is not None:
                children.setdefault(group.parent, []).append(group)
        self._children = children

    def children(self, key: str) -> list[GroupSpec]:
        """The groups whose parent is ``key``, in key order (a new list)."""
        return list(self._children.get(key, ()))

    def roots(self) -> list[GroupSpec]:
        """The groups without a parent, in the order they were given."""
        return [g for g in self._listed if g.parent is None]

    def descendants(self, group: GroupSpec) -> list[GroupSpec]:
        """``group`` and every group under it, each parent before its children, children in
        key order (depth first)."""
        found: list[GroupSpec] = []
        seen: set[str] = set()
        stack = [group]
        while stack:
            current = stack.pop()
            if current.key in seen:
                continue
            seen.add(current.key)
            found.append(current)
            stack.extend(reversed(self.children(current.key)))
        return found

    def chain(self, key: str) -> list[GroupSpec]:
        """The group ``key`` and its ancestors, innermost first; a missing parent or a cycle
        ends it (empty for an unknown group)."""
        found: list[GroupSpec] = []
        seen: set[str] = set()
        group = self.groups.get(key)
        while group is not None and group.key not in seen:
            found.append(group)
            seen.add(group.key)
            group = self.groups.get(group.parent) if group.parent is not None else None
        return found

    def root_of(self, key: str) -> str:
        """The key of the root above ``key``: ``key`` itself for a root or an unknown group;
        where a parent is missing, that parent's key (the root it would be)."""
        seen = {key}
        group = self.groups.get(key)
        while group is not None and group.parent is not None and group.parent not in seen:
            seen.add(group.parent)
            key = group.parent
            group = self.groups.get(key)
        return key

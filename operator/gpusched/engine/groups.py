"""The engine's view of PodGroups and CompositePodGroups: what must be placed together where."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from gpusched.api.crds import CompositePodGroup, DisruptionMode, PodGroup, PreemptionPolicy
from gpusched.api.priority import PriorityClass, ResolvedPriority, resolve_priority


class GroupKind(StrEnum):
    POD_GROUP = "PodGroup"
    COMPOSITE = "CompositePodGroup"


@dataclass(frozen=True, slots=True)
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

    @property
    def namespace(self) -> str:
        return self.key.split("/", 1)[0]

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
    return f"{namespace}/{parent}" if parent else None


def _created(group: PodGroup | CompositePodGroup) -> float:
    stamp = group.metadata.creation_timestamp
    return stamp.timestamp() if stamp is not None else 0.0

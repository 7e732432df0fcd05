"""PriorityClasses, and the priority a PodGroup or CompositePodGroup ends up with.

Resolution follows Kubernetes' own for pods: a ``priorityClassName`` takes the class's value
(and its ``preemptionPolicy`` unless the group sets one); a group with neither a name nor a
``priority`` takes the priority of its pods. A name that names no PriorityClass, or a
``priority`` that disagrees with the class named beside it, cannot be resolved: the result
says so, naming the object and the field, and a group so marked neither preempts nor is
preempted (nothing is evicted on a guess).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpusched.api.crds import (
    PRIORITY_MAX,
    PRIORITY_MIN,
    CompositePodGroup,
    DisruptionMode,
    PodGroup,
    PreemptionPolicy,
)
from gpusched.api.errors import InvalidObjectError, from_validation_error
from gpusched.api.names import DnsSubdomain


class _Meta(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    name: DnsSubdomain


class PriorityClass(BaseModel):
    """``scheduling.k8s.io/v1`` PriorityClass: the fields priority resolution reads."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)

    kind: Literal["PriorityClass"] = "PriorityClass"
    metadata: _Meta
    value: int = Field(ge=PRIORITY_MIN, le=PRIORITY_MAX)
    preemption_policy: PreemptionPolicy = Field(
        default=PreemptionPolicy.PREEMPT_LOWER_PRIORITY, alias="preemptionPolicy"
    )

    @property
    def name(self) -> str:
        return self.metadata.name


def parse_priority_class(raw: object) -> PriorityClass:
    """A PriorityClass from its body; raises `InvalidObjectError` naming it and the field."""
    metadata = raw.get("metadata") if isinstance(raw, Mapping) else None
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    obj = f"PriorityClass {name if isinstance(name, str) and name else '<unnamed>'}"
    try:
        return PriorityClass.model_validate(raw)
    except ValidationError as err:
        raise from_validation_error(obj, err) from None


@dataclass(frozen=True, slots=True)
class ResolvedPriority:
    """What a group's priority fields come to.

    ``priority`` is None when the group leaves it to its pods (no name, no value) or when it
    is unresolved; ``problem`` is the `InvalidObjectError` of an unresolved one."""

    priority: int | None
    preemption_policy: PreemptionPolicy
    disruption_mode: DisruptionMode
    problem: InvalidObjectError | None = None


def resolve_priority(
    group: PodGroup | CompositePodGroup,
    classes: Mapping[str, PriorityClass] | None,
) -> ResolvedPriority:
    """The group's priority, preemption policy and disruption mode. ``classes``: the cluster's
    PriorityClasses by name; None when they are not known (then a name alone is unresolved,
    and a ``priority`` given beside a name is trusted)."""
    spec = group.spec
    mode = spec.disruption_mode or DisruptionMode.SINGLE
    policy = spec.preemption_policy
    name = spec.priority_class_name
    if name is None:
        return ResolvedPriority(
            spec.priority, policy or PreemptionPolicy.PREEMPT_LOWER_PRIORITY, mode
        )
    found = classes.get(name) if classes is not None else None
    if found is None:
        if classes is None and spec.priority is not None:
            return ResolvedPriority(
                spec.priority, policy or PreemptionPolicy.PREEMPT_LOWER_PRIORITY, mode
            )
        return _unresolved(group, "spec.priorityClassName", f"PriorityClass {name!r} not found")
    if spec.priority is not None and spec.priority != found.value:
        message = (
            f"is {spec.priority}, but PriorityClass {name!r} (spec.priorityClassName) has "
            f"value {found.value}; give one or make them agree"
        )
        return _unresolved(group, "spec.priority", message)
    return ResolvedPriority(found.value, policy or found.preemption_policy, mode)


def _unresolved(group: PodGroup | CompositePodGroup, field: str, message: str) -> ResolvedPriority:
    problem = InvalidObjectError(f"{group.kind} {group.key}", field, message)
    mode = group.spec.disruption_mode or DisruptionMode.SINGLE
    return ResolvedPriority(None, PreemptionPolicy.NEVER, mode, problem)


def priority_classes(raws: Iterable[object]) -> dict[str, PriorityClass]:
    """PriorityClasses by name, from their bodies (each parsed with `parse_priority_class`)."""
    parsed = [parse_priority_class(raw) for raw in raws]
    return {pc.name: pc for pc in parsed}

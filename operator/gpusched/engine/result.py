"""What the engine decides: bindings, per-group decisions with reasons, pods left pending."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

# The reasons are the API's vocabulary; re-exported for the rooms that read results.
from gpusched.api.crds import Reason as Reason

ENGINE_REASONS = (
    Reason.SCHEDULED,
    Reason.UNSCHEDULABLE,
    Reason.INVALID,
    Reason.WAITING_FOR_PODS,
    Reason.SCHEDULING_GATED,
)
"""The reasons `schedule` decides; the scheduling service adds the others (its own errors,
timeouts, gangs partly bound)."""


class Phase(StrEnum):
    PENDING = "Pending"
    SCHEDULED = "Scheduled"
    UNSCHEDULABLE = "Unschedulable"


@dataclass(frozen=True, slots=True)
class Binding:
    pod: str
    node: str
    gpus: tuple[int, ...]
    link_tier: str | None = None
    """Worst link among the pod's GPUs (``NVLINK`` … ``SYS``, ``UNKNOWN``); None for < 2 GPUs."""
    best_tier: str | None = None
    """The best worst-link any set of that size on this node could have had."""
    notes: tuple[str, ...] = ()
    """Telemetry facts the decision relied on (unknown or stale GPUs it used)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "pod": self.pod,
            "node": self.node,
            "gpus": list(self.gpus),
            "linkTier": self.link_tier,
            "bestLinkTier": self.best_tier,
            "notes": list(self.notes),
        }


@dataclass(frozen=True, slots=True)
class GroupDecision:
    name: str
    kind: str
    phase: Phase
    reason: Reason
    message: str
    placement: dict[str, str] = field(default_factory=dict)
    attempts: tuple[str, ...] = ()
    """One line per domain tried, saying why it did not fit (or that it did)."""
    explored: int = 0
    """How many (group, domain) pairs the search looked at, backtracking included: each
    trial, and each domain refused before a trial because the pods cannot fit there."""
    left_out: dict[str, str] = field(default_factory=dict)
    """Pods of a placed group left pending (a basic group's extras, a gang's pods beyond
    minCount) → why each did not fit beside the others."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "phase": self.phase.value,
            "placement": dict(self.placement),
            "reason": self.reason.value,
            "message": self.message,
            "attempts": list(self.attempts),
            "explored": self.explored,
        }


@dataclass(frozen=True, slots=True)
class PodFailure:
    pod: str
    reason: Reason
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"pod": self.pod, "reason": self.reason.value, "message": self.message}


@dataclass(slots=True)
class ScheduleResult:
    bindings: list[Binding] = field(default_factory=list)
    groups: list[GroupDecision] = field(default_factory=list)
    unschedulable: list[PodFailure] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The ``simulate -o json`` document (DESIGN §5)."""
        return {
            "bindings": [b.to_dict() for b in self.bindings],
            "podGroups": [g.to_dict() for g in self.groups],
            "unschedulable": [u.to_dict() for u in self.unschedulable],
        }

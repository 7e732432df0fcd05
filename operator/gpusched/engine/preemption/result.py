"""What the preemption planner decides, as data: the plan, the victims, every domain's cost.

`PreemptionPlan.to_dict` is the ``preemptions`` entry of ``simulate -o json``; `message` is the
one sentence ``explain`` and Events print. Nothing else renders these objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from gpusched.engine import wording
from gpusched.engine.request import WHOLE_GPU_MILLI
from gpusched.engine.result import Binding


class Outcome(StrEnum):
    """Why a plan is what it is: the first value plans evictions, the others say why not."""

    PLANNED = "Planned"
    NOT_NEEDED = "NotNeeded"
    """The unit fits without evicting anything."""
    POLICY_NEVER = "PreemptionPolicyNever"
    INVALID = "Invalid"
    """A group of the unit failed validation (its message names the object and field)."""
    PRIORITY_UNRESOLVED = "PriorityUnresolved"
    """The preemptor's priority could not be resolved (see `GroupSpec.priority_problem`)."""
    NO_LOWER_PRIORITY = "NoLowerPriority"
    """No held pod may be evicted for it: none has a strictly lower priority (or those that do
    are protected)."""
    NO_ROOM = "NoRoom"
    """Even evicting every pod it may evict, it fits in no domain."""
    BUDGET_SPENT = "BudgetSpent"
    """The trial budget ran out before any domain gave a plan."""
    DISABLED = "Disabled"
    """``preemption.budget`` is 0."""


class Verdict(StrEnum):
    """What became of one candidate domain."""

    CHOSEN = "Chosen"
    COSTLIER = "Costlier"
    """A plan was found there, dearer than the chosen one."""
    NO_ROOM = "NoRoom"
    NOT_TRIED = "NotTried"
    """Its lower bound could not beat the chosen plan, or the budget ran out first."""


@dataclass(frozen=True, slots=True)
class Cost:
    """A plan's cost, compared in the order of its fields (lower wins)."""

    budget_overrun: int
    """Pods evicted beyond what their PodDisruptionBudgets allow."""
    top_priority: int
    """The highest priority among the victims."""
    gpu_milli: int
    """GPUs evicted, in thousandths."""
    groups: int
    """Victim root groups (a pod without a group counts as one)."""
    oldest: float
    """The oldest victim's creation time: a later one (younger victims) wins."""

    def key(self) -> tuple[int, int, int, int, float]:
        return (self.budget_overrun, self.top_priority, self.gpu_milli, self.groups, -self.oldest)

    def to_dict(self) -> dict[str, Any]:
        return {
            "pdbViolations": self.budget_overrun,
            "highestVictimPriority": self.top_priority,
            "gpusEvicted": self.gpu_milli / WHOLE_GPU_MILLI,
            "victimGroups": self.groups,
            "oldestVictimCreated": self.oldest,
        }

    def describe(self) -> str:
        return wording.plan_cost(
            self.budget_overrun, self.top_priority, gpus_text(self.gpu_milli), self.groups
        )


@dataclass(frozen=True, slots=True)
class Bound:
    """A lower bound on any plan's cost in a domain, known before any trial."""

    top_priority: int
    """No plan there evicts less than this priority: the free GPUs and those of lower victims
    do not cover the demand."""
    gpu_milli: int
    """No plan there evicts fewer GPUs: the demand less the domain's usable free GPUs."""

    def key(self) -> tuple[int, int, int]:
        return (0, self.top_priority, self.gpu_milli)

    def to_dict(self) -> dict[str, Any]:
        return {
            "highestVictimPriority": self.top_priority,
            "gpusEvicted": self.gpu_milli / WHOLE_GPU_MILLI,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Victim:
    pod: str
    node: str
    gpus: tuple[int, ...]
    priority: int
    unit: str
    """What it goes with: its ``disruptionMode: All`` group's key, or its own key."""
    claims: tuple[str, ...] = ()
    """The holdings that are no pod (a ResourceClaim's devices, as `Snapshot.holdings` names
    them) freed once this pod and every other pod they are reserved for are gone; their GPUs
    are in ``gpus``."""


@dataclass(frozen=True, slots=True)
class DomainOption:
    """One domain the planner considered and what it would have cost."""

    domain: str
    verdict: Verdict
    detail: str
    cost: Cost | None = None
    bound: Bound | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "domain": self.domain,
            "verdict": self.verdict.value,
            "detail": self.detail,
            "cost": self.cost.to_dict() if self.cost is not None else None,
            "atLeast": self.bound.to_dict() if self.bound is not None else None,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class PreemptionPlan:
    """For whom, which victims, in which domain, why, what else was weighed, budget used.

    ``bindings`` are where the preemptor's pods go once the victims are gone: what the operator
    nominates and holds for it."""

    preemptor: str
    outcome: Outcome
    message: str
    priority: int | None = None
    placement: dict[str, str] = field(default_factory=dict)
    victims: tuple[Victim, ...] = ()
    bindings: tuple[Binding, ...] = ()
    cost: Cost | None = None
    domains: tuple[DomainOption, ...] = ()
    budget: int = 0
    trials: int = 0

    @property
    def planned(self) -> bool:
        return self.outcome is Outcome.PLANNED

    def to_dict(self) -> dict[str, Any]:
        return {
            "preemptor": self.preemptor,
            "outcome": self.outcome.value,
            "message": self.message,
            "priority": self.priority,
            "placement": dict(self.placement),
            "victims": [
                {
                    "pod": v.pod,
                    "node": v.node,
                    "gpus": list(v.gpus),
                    "priority": v.priority,
                    "evictedWith": v.unit,
                    # Only for a pod holding GPUs through ResourceClaims.
                    **({"claims": list(v.claims)} if v.claims else {}),
                }
                for v in self.victims
            ],
            "nominated": [b.to_dict() for b in self.bindings],
            "cost": self.cost.to_dict() if self.cost is not None else None,
            "domains": [d.to_dict() for d in self.domains],
            "budget": {"trials": self.budget, "used": self.trials},
        }


def gpus_text(milli: int) -> str:
    """A GPU amount for the reports: whole GPUs as an integer, else three digits."""
    whole, part = divmod(milli, WHOLE_GPU_MILLI)
    return str(whole) if not part else f"{milli / WHOLE_GPU_MILLI:.3g}"

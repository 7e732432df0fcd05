"""Gang-aware preemption: which lower-priority pods to evict, in which domain, for a unit that
does not fit. `plan_preemption` is the entry point; see `search` for the phases."""

from gpusched.engine.preemption.result import (
    Bound,
    Cost,
    DomainOption,
    Outcome,
    PreemptionPlan,
    Verdict,
    Victim,
)
from gpusched.engine.preemption.search import plan_preemption
from gpusched.engine.preemption.victims import DisruptionBudget, EvictionUnit, eviction_units

__all__ = [
    "Bound",
    "Cost",
    "DisruptionBudget",
    "DomainOption",
    "EvictionUnit",
    "Outcome",
    "PreemptionPlan",
    "Verdict",
    "Victim",
    "eviction_units",
    "plan_preemption",
]

"""Gang-aware preemption: which lower-priority pods to evict, in which domain, for a unit that
does not fit. `plan_preemption` plans for one unit (see `search` for the phases), `plan_cycle`
for every unit a scheduling cycle left unschedulable."""

from gpusched.engine.preemption.cycle import plan_cycle
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
    "plan_cycle",
    "plan_preemption",
]

"""Phase 4 of preemption planning (`gpusched.engine.preemption.search`): with the unit's
placement held, every piece set aside is put back, most important first, wherever it still fits
beside it; what cannot go back is evicted. And a plan's `Cost`."""

from __future__ import annotations

from collections.abc import Sequence

from gpusched.engine.preemption.result import Cost
from gpusched.engine.preemption.victims import DisruptionBudget, EvictionUnit, budget_overrun
from gpusched.engine.request import PodRequest
from gpusched.engine.result import Binding
from gpusched.engine.snapshot import Holding, Snapshot


def reprieve(
    work: Snapshot,
    pods: Sequence[PodRequest],
    budgets: Sequence[DisruptionBudget],
    aside: list[EvictionUnit],
    bindings: Sequence[Binding],
) -> list[EvictionUnit]:
    """Holds the unit's placement, then puts back every piece that still fits beside it,
    most important first: PDB-covered ones, then the highest priority, the oldest, the
    name. What cannot go back is evicted. Only the nodes the placement uses are checked:
    on every other node, putting all its pieces back restores what was there before."""
    by_key = {p.key: p for p in pods}
    used: set[int] = set()
    for binding in bindings:
        node = work.index[binding.node]
        work.assume(by_key[binding.pod], node, binding.gpus)
        used.add(node)
    covered = {key for b in budgets for key in b.pods}
    touching = [u for u in aside if any(h.node in used for h in u.holdings)]
    order = sorted(
        touching,
        key=lambda u: (not covered.intersection(u.pods), -u.priority, u.created, u.key),
    )
    victims = []
    for piece in order:
        mark = work.checkpoint()
        if all(_put_back(work, h) for h in piece.holdings if h.node in used):
            continue
        work.rollback(mark)
        victims.append(piece)
    return sorted(victims, key=lambda u: u.key)


def _put_back(work: Snapshot, holding: Holding) -> bool:
    free = work.allocatable[holding.node] - work.used[holding.node]
    if any(free[column] < amount for column, amount in holding.vector):
        return False
    base = int(work.gpu_offset[holding.node])
    if any(work.gpu_free[base + g] < holding.milli_per_gpu for g in holding.gpus):
        return False
    work.assume(holding.pod, holding.node, holding.gpus)
    return True


def cost(budgets: Sequence[DisruptionBudget], victims: list[EvictionUnit]) -> Cost:
    pods = [key for u in victims for key in u.pods]
    groups = set().union(*(u.groups for u in victims)) if victims else set()
    return Cost(
        budget_overrun(budgets, pods),
        max((u.priority for u in victims), default=0),
        sum(u.gpu_milli for u in victims),
        len(groups),
        min((u.created for u in victims), default=0.0),
    )

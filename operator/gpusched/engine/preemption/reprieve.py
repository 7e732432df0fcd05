"""Phase 4 of preemption planning (`gpusched.engine.preemption.search`): with the unit's
placement held, every piece set aside is put back, most important first, wherever it still fits
beside it; what cannot go back is evicted. And a plan's `Cost`."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpusched.engine.preemption.result import Cost
from gpusched.engine.preemption.victims import DisruptionBudget, EvictionUnit, budget_overrun
from gpusched.engine.result import Binding
from gpusched.engine.snapshot import Holding, Snapshot


def reprieve(
    work: Snapshot,
    budgets: Sequence[DisruptionBudget],
    aside: list[EvictionUnit],
    bindings: Sequence[Binding],
) -> list[EvictionUnit]:
    """Puts back every piece set aside that still fits beside the unit's placement
    (``bindings``), most important first: PDB-covered ones, then the highest priority, the
    oldest, the name. What cannot go back is evicted. ``work``: the trial's snapshot, where
    ``aside`` is set aside and the placement held. Only the nodes the placement uses are
    checked: on every other node, putting all its pieces back restores what was there
    before. ``work`` is not changed: the room left on the placement's nodes is counted in
    plain lists (`_Room`)."""
    room = _Room(work, sorted({work.index[b.node] for b in bindings}))
    covered = {key for b in budgets for key in b.pods}
    free = room.free
    touching = [u for u in aside if any(h.node in free for h in u.holdings)]
    if covered:
        order = sorted(
            touching,
            key=lambda u: (not covered.intersection(u.pods), -u.priority, u.created, u.key),
        )
    else:  # no PDB: the same order without asking each piece for its pods
        order = sorted(touching, key=lambda u: (-u.priority, u.created, u.key))
    victims = []
    for piece in order:
        back: list[Holding] = []
        for holding in piece.holdings:
            if holding.node not in room.free:
                continue
            if not room.fits(holding):
                break
            room.hold(holding, +1)
            back.append(holding)
        else:
            continue
        for holding in back:  # it does not go back whole: none of it does
            room.hold(holding, -1)
        victims.append(piece)
    return sorted(victims, key=lambda u: u.key)


class _Room:
    """What is free on ``nodes`` (those of a placement): per node, each resource column and
    each GPU's milli, read from `Snapshot.used` and `Snapshot.gpu_free` for all the nodes at
    once (a gang's placement has hundreds), then kept in lists as pieces go back."""

    def __init__(self, work: Snapshot, nodes: list[int]) -> None:
        self.work = work
        rows = (work.allocatable[nodes] - work.used[nodes]).tolist()
        self.free: dict[int, list[int]] = dict(zip(nodes, rows, strict=True))
        starts = work.gpu_offset[nodes].tolist()
        stops = work.gpu_offset[np.asarray(nodes, dtype=np.int64) + 1].tolist()
        free = work.gpu_free
        self.gpus: dict[int, list[int]] = {
            node: free[start:stop].tolist()
            for node, start, stop in zip(nodes, starts, stops, strict=True)
        }

    def fits(self, holding: Holding) -> bool:
        free, gpus = self.free[holding.node], self.gpus[holding.node]
        if any(free[column] < amount for column, amount in holding.vector):
            return False
        return all(gpus[g] >= holding.milli_per_gpu for g in holding.gpus)

    def hold(self, holding: Holding, sign: int) -> None:
        """Puts ``holding`` back (+1) or takes it away again (-1)."""
        free, gpus = self.free[holding.node], self.gpus[holding.node]
        for column, amount in holding.vector:
            free[column] -= sign * amount
        for g in holding.gpus:
            gpus[g] -= sign * holding.milli_per_gpu


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

"""Phase 2 of preemption planning (`gpusched.engine.preemption.search`): per domain, a lower
bound on any plan's cost from counts alone, before any trial (`Bound`: the GPUs missing after
the free ones, the priority the cheapest victims covering them reach), and which nodes setting
pieces aside can help at each priority level."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from gpusched.engine.domains import Domain
from gpusched.engine.groups import GroupKind, GroupSpec
from gpusched.engine.nodes import BoolArray
from gpusched.engine.preemption.result import Bound
from gpusched.engine.preemption.victims import EvictionUnit
from gpusched.engine.request import WHOLE_GPU_MILLI, PodRequest
from gpusched.engine.snapshot import Holding, Snapshot


@dataclass(slots=True)
class Candidate:
    domain: Domain
    bound: Bound | None
    """None: the domain cannot hold the unit whatever is evicted (``short`` says why)."""
    units: list[EvictionUnit] = field(default_factory=list)
    """The evictable pieces with a pod in the domain, cheapest first."""
    short: str = ""
    useful: dict[int, BoolArray] = field(default_factory=dict)
    """Per priority level, the nodes where setting pieces aside can help (see
    `DomainBounds._child_floor`); a level not listed: every node of the domain."""


class DomainBounds:
    """Counts over the working snapshot for one unit (its root group, tree and pending pods)."""

    def __init__(
        self, work: Snapshot, root: GroupSpec, tree: Sequence[GroupSpec], pods: list[PodRequest]
    ) -> None:
        self.work = work
        self.root = root
        self.tree = tree
        self.pods = pods
        self.gpu_nodes = np.repeat(np.arange(len(work.nodes)), np.diff(work.gpu_offset))
        """The node of each GPU, by global GPU id."""

    def candidate(self, domain: Domain, evictable: list[EvictionUnit]) -> Candidate:
        usable = self.usable_free(domain)
        demand = sum(p.gpu_demand_milli for p in self.pods)
        need = max(0, demand - usable)
        inside = [u for u in evictable if any(bool(domain.mask[h.node]) for h in u.holdings)]
        inside.sort(key=lambda u: (u.priority, -u.created, u.key))
        if not inside:
            return Candidate(domain, None, [], "nothing of lower priority is held there")
        freed, top = 0, inside[0].priority
        for piece in inside:
            if freed >= need:
                break
            freed += self.usable_held(piece, domain)
            top = piece.priority
        if freed < need:
            short = (
                f"evicting every lower-priority pod there frees {gpus_text(freed + usable)} of the "
                f"{gpus_text(demand)} GPUs needed"
            )
            return Candidate(domain, None, inside, short)
        useful: dict[int, BoolArray] = {}
        floor = self._child_floor(domain, inside, useful)
        if isinstance(floor, str):
            return Candidate(domain, None, inside, floor)
        return Candidate(domain, Bound(max(top, floor), need), inside, useful=useful)

    def _child_floor(
        self, domain: Domain, inside: list[EvictionUnit], useful: dict[int, BoolArray]
    ) -> int | str:
        """For a CompositePodGroup of PodGroups that share one topology key: the lowest
        priority level at which enough of that key's sub-domains could each hold a child,
        counting GPUs only (a sub-domain with room ``r`` holds at most ``r // smallest``
        children); a string when no level gives enough. The lowest level otherwise.
        Fills ``useful``: per level, the nodes of the sub-domains that could hold a child
        (setting pieces aside anywhere else cannot help at that level)."""
        lowest = inside[0].priority
        children = [g for g in self.tree if g.parent == self.root.key]
        keys = {c.topology_key for c in children}
        if (
            self.root.kind is not GroupKind.COMPOSITE
            or len(keys) != 1
            or any(c.kind is GroupKind.COMPOSITE for c in children)
        ):
            return lowest
        (key,) = keys
        demands = [
            sum(p.gpu_demand_milli for p in self.pods if p.group_key == c.key) for c in children
        ]
        smallest = min((d for d in demands if d > 0), default=0)
        if key is None or smallest == 0:
            return lowest
        codes, _ = self.work.domain_codes(key)
        node_free = np.bincount(
            self.gpu_nodes,
            weights=np.where(self.work.gpu_usable, self.work.gpu_free, 0),
            minlength=len(self.work.nodes),
        )
        inner = domain.mask & (codes >= 0)
        room = np.bincount(
            codes[inner], weights=node_free[inner], minlength=int(codes.max()) + 1
        ).astype(np.int64)
        slots = 0
        for level, pieces in itertools.groupby(inside, key=lambda u: u.priority):
            for piece in pieces:
                for holding in piece.holdings:
                    if inner[holding.node]:
                        room[codes[holding.node]] += self.usable_on(holding)
            holds = room // smallest
            useful[level] = inner & (holds[np.maximum(codes, 0)] > 0)
            slots = int(holds.sum())
            if slots >= self.root.minimum:
                return int(level)
        return (
            f"evicting every lower-priority pod there leaves room for {slots} of the "
            f"{self.root.minimum} child groups (minGroupCount) in its {key} domains"
        )

    def usable_free(self, domain: Domain) -> int:
        per_gpu = np.where(self.work.gpu_usable, self.work.gpu_free, 0)
        return int(per_gpu[domain.mask[self.gpu_nodes]].sum())

    def usable_held(self, piece: EvictionUnit, domain: Domain) -> int:
        """GPU milli the piece frees in ``domain`` on GPUs the unit could use (a hot GPU freed
        is no room)."""
        return sum(self.usable_on(h) for h in piece.holdings if domain.mask[h.node])

    def usable_on(self, holding: Holding) -> int:
        usable = self.work.gpu_usable
        base = int(self.work.gpu_offset[holding.node])
        return sum(holding.milli_per_gpu for g in holding.gpus if usable[base + g])


def bound_key(candidate: Candidate) -> tuple[int, int, int]:
    return candidate.bound.key() if candidate.bound is not None else (0, 0, 0)


def gpus_text(milli: int) -> str:
    whole, part = divmod(milli, WHOLE_GPU_MILLI)
    return str(whole) if not part else f"{milli / WHOLE_GPU_MILLI:.3g}"

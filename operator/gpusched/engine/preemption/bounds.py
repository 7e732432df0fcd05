"""Phase 2 of preemption planning (`gpusched.engine.preemption.search`): per domain, a lower
bound on any plan's cost from counts alone, before any trial (`Bound`: the GPUs missing after
the free ones, the priority the cheapest victims covering them reach), and which nodes setting
pieces aside can help at each priority level."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from gpusched.engine import wording
from gpusched.engine.domains import Domain
from gpusched.engine.groups import GroupKind, GroupSpec
from gpusched.engine.nodes import BoolArray
from gpusched.engine.preemption.result import Bound, gpus_text
from gpusched.engine.preemption.victims import EvictionUnit
from gpusched.engine.request import PodRequest
from gpusched.engine.snapshot import Holding, Snapshot


@dataclass(slots=True, kw_only=True)
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
    freed: dict[str, int] = field(default_factory=dict)
    """Per piece of ``units`` (its key), the GPU milli it frees in the domain on GPUs the
    unit could use (a hot GPU freed is no room)."""

    def fewest_groups(self, level: int, need: int) -> int:
        """The fewest victim groups any plan in the domain evicts to free
        ``need`` GPU milli from pieces of priority ``level`` or lower: the groups that could
        free the most, counted until they cover it (a piece counts for each group it belongs
        to, so this never exceeds what a plan needs). Past every group: one more than all."""
        reach: dict[str, int] = {}
        for piece in self.units:
            if piece.priority <= level:
                held = self.freed[piece.key]
                for group in piece.groups:
                    reach[group] = reach.get(group, 0) + held
        covered = 0
        for count, freed in enumerate(sorted(reach.values(), reverse=True), start=1):
            covered += freed
            if covered >= need:
                return count
        return len(reach) + 1


class DomainBounds:
    """Counts over the working snapshot for one unit (its root group, tree and pending pods)
    and the pieces it may evict.

    The pieces' holdings are indexed once, as flat arrays (node, piece, usable GPU milli), so
    that each domain's counts are a few array operations rather than a loop over every piece:
    on a cluster of thousands of nodes the domains are many and the pieces thousands."""

    def __init__(
        self,
        work: Snapshot,
        root: GroupSpec,
        tree: Sequence[GroupSpec],
        pods: list[PodRequest],
        evictable: list[EvictionUnit],
    ) -> None:
        self.work = work
        self.root = root
        self.tree = tree
        self.pods = pods
        self.gpu_nodes = np.repeat(np.arange(len(work.nodes)), np.diff(work.gpu_offset))
        """The node of each GPU, by global GPU id."""
        self.pieces = sorted(evictable, key=lambda u: (u.priority, -u.created, u.key))
        """Cheapest first: the lowest priority, then the youngest, then the key."""
        self.piece_priority = np.array([u.priority for u in self.pieces], dtype=np.int64)
        holdings = [h for u in self.pieces for h in u.holdings]
        self.holding_piece = np.repeat(
            np.arange(len(self.pieces)), [len(u.holdings) for u in self.pieces]
        )
        self.holding_node = np.array([h.node for h in holdings], dtype=np.int64)
        all_usable = self._nodes_all_usable()
        self.holding_usable = np.array(
            [
                h.milli_per_gpu * len(h.gpus) if all_usable[h.node] else self.usable_on(h)
                for h in holdings
            ],
            dtype=np.int64,
        )
        """Per holding, the GPU milli it frees on GPUs the unit could use (`usable_on`)."""

    def _nodes_all_usable(self) -> list[bool]:
        """Per node, whether every GPU of it is usable (then a holding frees all it holds)."""
        offset = self.work.gpu_offset
        unusable = np.concatenate(([0], np.cumsum(~self.work.gpu_usable)))
        same: list[bool] = (unusable[offset[1:]] == unusable[offset[:-1]]).tolist()
        return same

    def candidate(self, domain: Domain) -> Candidate:
        usable = self.usable_free(domain)
        demand = sum(p.gpu_demand_milli for p in self.pods)
        need = max(0, demand - usable)
        hit = domain.mask[self.holding_node]
        freed_by = np.bincount(
            self.holding_piece[hit],
            weights=self.holding_usable[hit],
            minlength=len(self.pieces),
        ).astype(np.int64)
        present = np.flatnonzero(np.bincount(self.holding_piece[hit], minlength=len(self.pieces)))
        inside = [self.pieces[i] for i in present.tolist()]
        if not inside:
            return Candidate(domain=domain, bound=None, units=[], short=wording.NOTHING_LOWER_HELD)
        freed_in = dict(zip([u.key for u in inside], freed_by[present].tolist(), strict=True))
        # The cheapest pieces, in order, until they cover what is missing: the priority the
        # last of them has is the least any plan there evicts.
        running = np.cumsum(freed_by[present])
        enough = np.flatnonzero(running >= need)
        if need <= 0:
            freed, top = 0, inside[0].priority
        elif enough.size:
            freed, top = int(running[enough[0]]), inside[int(enough[0])].priority
        else:
            freed = int(running[-1])
            short = wording.frees_too_little(gpus_text(freed + usable), gpus_text(demand))
            return Candidate(domain=domain, bound=None, units=inside, short=short, freed=freed_in)
        useful: dict[int, BoolArray] = {}
        floor = self._child_floor(domain, hit, inside, useful)
        if isinstance(floor, str):
            return Candidate(domain=domain, bound=None, units=inside, short=floor, freed=freed_in)
        bound = Bound(max(top, floor), need)
        return Candidate(domain=domain, bound=bound, units=inside, useful=useful, freed=freed_in)

    def _child_floor(
        self,
        domain: Domain,
        hit: BoolArray,
        inside: list[EvictionUnit],
        useful: dict[int, BoolArray],
    ) -> int | str:
        """For a CompositePodGroup of PodGroups that share one topology key: the lowest
        priority level at which enough of that key's sub-domains could each hold a child,
        counting GPUs only (a sub-domain with room ``r`` holds at most ``r // smallest``
        children); a string when no level gives enough. The lowest level otherwise.
        Fills ``useful``: per level, the nodes of the sub-domains that could hold a child
        (setting pieces aside anywhere else cannot help at that level). ``hit``: per indexed
        holding, whether it is in ``domain``."""
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
        size = int(codes.max()) + 1
        room = np.bincount(codes[inner], weights=node_free[inner], minlength=size).astype(np.int64)
        counted = hit & inner[self.holding_node]
        level_of = self.piece_priority[self.holding_piece]
        slots = 0
        for level in sorted({u.priority for u in inside}):
            now = counted & (level_of == level)
            room += np.bincount(
                codes[self.holding_node[now]],
                weights=self.holding_usable[now],
                minlength=size,
            ).astype(np.int64)
            holds = room // smallest
            useful[level] = inner & (holds[np.maximum(codes, 0)] > 0)
            slots = int(holds.sum())
            if slots >= self.root.minimum:
                return int(level)
        return wording.child_room_short(slots, self.root.minimum, key)

    def usable_free(self, domain: Domain) -> int:
        per_gpu = np.where(self.work.gpu_usable, self.work.gpu_free, 0)
        return int(per_gpu[domain.mask[self.gpu_nodes]].sum())

    def usable_on(self, holding: Holding) -> int:
        usable = self.work.gpu_usable
        base = int(self.work.gpu_offset[holding.node])
        return sum(holding.milli_per_gpu for g in holding.gpus if usable[base + g])


def bound_key(candidate: Candidate) -> tuple[int, int, int]:
    return candidate.bound.key() if candidate.bound is not None else (0, 0, 0)

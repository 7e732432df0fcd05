"""The preemption planner: where evicting lower-priority pods lets a unit that does not fit fit.

A unit is a root group with everything under it. Phases:
1. Checks that end it early: an unresolved priority, policy ``Never``, a budget of 0, nothing
   of lower priority to evict.
2. Domains: those of the root's topology key (the cluster when it has none), narrowed to the
   one its bound pods pin it to. For each, a lower bound on any plan's cost from counts alone
   (`Bound`: the GPUs missing after the free ones, the priority the cheapest victims covering
   them reach); a domain whose evictable GPUs cannot cover the demand is refused untried.
3. Trials, cheapest bound first: the pieces (`EvictionUnit`) of the domain up to one priority
   level are set aside on a scratch copy of the snapshot and the unit is placed with the
   engine's own `schedule` (every filter, pin and topology rule, top-down); the levels rise
   until it fits. Each trial costs one unit of ``preemption.budget``. A domain whose bound
   cannot beat the best plan so far is not tried.
4. Reprieve: with the unit's placement from the successful trial held, every piece set aside
   is put back, most important first, wherever it still fits beside it: the victims are only
   the pieces the placement really needs gone, and the placement itself stays what the trial
   chose (the same GPUs, the same link tier).
5. The plan with the lowest `Cost` wins; the others are reported with their costs.
Pure: the caller's snapshot is never changed.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from gpusched.api.crds import PreemptionPolicy
from gpusched.api.topology import LinkTier
from gpusched.engine.domains import Domain, root_domain, subdomains
from gpusched.engine.groups import GroupKind, GroupSpec
from gpusched.engine.nodes import BoolArray
from gpusched.engine.preemption.result import (
    Bound,
    Cost,
    DomainOption,
    Outcome,
    PreemptionPlan,
    Verdict,
    Victim,
)
from gpusched.engine.preemption.victims import (
    DisruptionBudget,
    EvictionUnit,
    budget_overrun,
    eviction_units,
)
from gpusched.engine.request import WHOLE_GPU_MILLI, PodRequest
from gpusched.engine.result import Binding, Phase
from gpusched.engine.schedule import schedule
from gpusched.engine.snapshot import Holding, Snapshot


def plan_preemption(
    snapshot: Snapshot,
    unit: str,
    pods: Sequence[PodRequest],
    groups: Sequence[GroupSpec],
    budgets: Sequence[DisruptionBudget] = (),
    foreign: frozenset[str] = frozenset(),
) -> PreemptionPlan:
    """A plan for the root group ``unit`` (its key) whose pending ``pods`` do not fit.

    ``groups``: every group known, the unit's tree and the victims' groups (for their priority
    and disruption mode); ``budgets``: the PodDisruptionBudgets; ``foreign``: keys of held pods
    another scheduler bound. Raises ``ValueError`` when ``unit`` is not a root group of
    ``groups``."""
    with snapshot.lock:
        work = snapshot.copy()
    return _Search(work, unit, pods, groups, budgets, foreign).run()


@dataclass(slots=True)
class _Found:
    """A plan found in one domain."""

    domain: str
    placement: dict[str, str]
    victims: list[EvictionUnit]
    bindings: tuple[Binding, ...]
    cost: Cost


@dataclass(slots=True)
class _Candidate:
    domain: Domain
    bound: Bound | None
    """None: the domain cannot hold the unit whatever is evicted (``short`` says why)."""
    units: list[EvictionUnit] = field(default_factory=list)
    """The evictable pieces with a pod in the domain, cheapest first."""
    short: str = ""
    useful: dict[int, BoolArray] = field(default_factory=dict)
    """Per priority level, the nodes where setting pieces aside can help (see
    `_Search._child_floor`); a level not listed: every node of the domain."""


class _Search:
    def __init__(
        self,
        work: Snapshot,
        unit: str,
        pods: Sequence[PodRequest],
        groups: Sequence[GroupSpec],
        budgets: Sequence[DisruptionBudget],
        foreign: frozenset[str],
    ) -> None:
        by_key = {g.key: g for g in groups}
        root = by_key.get(unit)
        if root is None or root.parent is not None:
            raise ValueError(f"{unit} is not a root group of the groups given")
        self.work = work
        self.root = root
        self.tree = _tree(root, groups)
        keys = {g.key for g in self.tree}
        self.pods = [p for p in pods if f"{p.namespace}/{p.group}" in keys]
        self.groups = groups
        self.budgets = budgets
        self.foreign = foreign
        self.settings = work.config.preemption
        self.trials = 0
        self.gpu_nodes = np.repeat(np.arange(len(work.nodes)), np.diff(work.gpu_offset))
        """The node of each GPU, by global GPU id."""

    # ----- phase 1 ---------------------------------------------------------------------------

    def run(self) -> PreemptionPlan:
        early = self._early()
        if early is not None:
            return early
        priority = self._priority()
        units = eviction_units(
            self.work,
            self.groups,
            {self.root.key},
            self.foreign,
            self.settings.evict_other_schedulers_pods,
        )
        evictable = [u for u in units if u.protected is None and u.priority < priority]
        if not evictable:
            why = f"no held pod has a priority below {priority}"
            protected = sum(1 for u in units if u.protected is not None and u.priority < priority)
            if protected:
                why += f" but {protected} protected ones (unresolved priority, other schedulers)"
            return self._plan(Outcome.NO_LOWER_PRIORITY, why, priority)
        return self._search(priority, evictable)

    def _early(self) -> PreemptionPlan | None:
        invalid = [g.invalid for g in self.tree if g.invalid is not None]
        if invalid:
            return self._plan(Outcome.INVALID, f"invalid: {invalid[0]}")
        problems = [g.priority_problem for g in self.tree if g.priority_problem is not None]
        if problems:
            return self._plan(Outcome.PRIORITY_UNRESOLVED, f"priority unresolved: {problems[0]}")
        if self.root.preemption_policy is PreemptionPolicy.NEVER:
            return self._plan(Outcome.POLICY_NEVER, "preemptionPolicy is Never")
        if self.settings.budget == 0:
            return self._plan(Outcome.DISABLED, "preemption.budget is 0")
        return None

    def _priority(self) -> int:
        """The group's own priority, else its pods' highest (the queue's order too)."""
        if self.root.priority is not None:
            return self.root.priority
        return max((p.priority for p in self.pods), default=0)

    # ----- phases 2 and 3 --------------------------------------------------------------------

    def _search(self, priority: int, evictable: list[EvictionUnit]) -> PreemptionPlan:
        domains = self._domains()
        if isinstance(domains, str):
            return self._plan(Outcome.NO_ROOM, domains, priority)
        candidates = [self._candidate(d, evictable) for d in domains]
        options: list[DomainOption] = []
        found: list[_Found] = []
        ordered = sorted(candidates, key=lambda c: (c.bound is None, _bound_key(c), c.domain.name))
        for candidate in ordered:
            option = self._try(candidate, found)
            if option is not None:
                options.append(option)
        return self._choose(priority, found, options)

    def _domains(self) -> list[Domain] | str:
        root = root_domain(self.work)
        key = self.root.topology_key
        domains = [root] if key is None else subdomains(self.work, root, key)
        bound = self._bound_nodes()
        if bound:
            domains = [d for d in domains if any(bool(d.mask[n]) for n in bound)]
            if len(domains) > 1:
                return f"its bound pods already span {len(domains)} {key} domains"
        if not domains:
            return f"no node has label {key}" if not bound else "its bound pods are on no domain"
        return domains

    def _bound_nodes(self) -> list[int]:
        keys = {g.key for g in self.tree}
        return [
            h.node
            for h in self.work.holdings.values()
            if h.pod.group is not None and f"{h.pod.namespace}/{h.pod.group}" in keys
        ]

    def _candidate(self, domain: Domain, evictable: list[EvictionUnit]) -> _Candidate:
        usable = self._usable_free(domain)
        demand = sum(p.gpu_demand_milli for p in self.pods)
        need = max(0, demand - usable)
        inside = [u for u in evictable if any(bool(domain.mask[h.node]) for h in u.holdings)]
        inside.sort(key=lambda u: (u.priority, -u.created, u.key))
        if not inside:
            return _Candidate(domain, None, [], "nothing of lower priority is held there")
        freed, top = 0, inside[0].priority
        for piece in inside:
            if freed >= need:
                break
            freed += self._usable_held(piece, domain)
            top = piece.priority
        if freed < need:
            short = (
                f"evicting every lower-priority pod there frees {_gpus(freed + usable)} of the "
                f"{_gpus(demand)} GPUs needed"
            )
            return _Candidate(domain, None, inside, short)
        useful: dict[int, BoolArray] = {}
        floor = self._child_floor(domain, inside, useful)
        if isinstance(floor, str):
            return _Candidate(domain, None, inside, floor)
        return _Candidate(domain, Bound(max(top, floor), need), inside, useful=useful)

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
            sum(p.gpu_demand_milli for p in self.pods if f"{p.namespace}/{p.group}" == c.key)
            for c in children
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
                        room[codes[holding.node]] += self._usable_on(holding)
            holds = room // smallest
            useful[level] = inner & (holds[np.maximum(codes, 0)] > 0)
            slots = int(holds.sum())
            if slots >= self.root.minimum:
                return int(level)
        return (
            f"evicting every lower-priority pod there leaves room for {slots} of the "
            f"{self.root.minimum} child groups (minGroupCount) in its {key} domains"
        )

    def _usable_free(self, domain: Domain) -> int:
        per_gpu = np.where(self.work.gpu_usable, self.work.gpu_free, 0)
        return int(per_gpu[domain.mask[self.gpu_nodes]].sum())

    def _usable_held(self, piece: EvictionUnit, domain: Domain) -> int:
        """GPU milli the piece frees in ``domain`` on GPUs the unit could use (a hot GPU freed
        is no room)."""
        return sum(self._usable_on(h) for h in piece.holdings if domain.mask[h.node])

    def _usable_on(self, holding: Holding) -> int:
        usable = self.work.gpu_usable
        base = int(self.work.gpu_offset[holding.node])
        return sum(holding.milli_per_gpu for g in holding.gpus if usable[base + g])

    def _try(self, candidate: _Candidate, found: list[_Found]) -> DomainOption | None:
        """Trials in one domain, level by level; a plan found goes to ``found``, and the
        domain's option is written once the winner is known (None returned)."""
        name = candidate.domain.name
        if candidate.bound is None:
            return DomainOption(name, Verdict.NO_ROOM, candidate.short)
        best = min((f.cost.key() for f in found), default=None)
        lowest = candidate.bound.top_priority
        levels = sorted({u.priority for u in candidate.units if u.priority >= lowest})
        failure = ""
        base = self.work.checkpoint()
        aside: list[EvictionUnit] = []
        added: set[str] = set()
        try:
            for level in levels:
                floor = Bound(level, candidate.bound.gpu_milli)
                if best is not None and floor.key() > best[:3]:
                    detail = (
                        f"not tried: at best {_describe_bound(floor)}, dearer than the plan found"
                    )
                    return DomainOption(name, Verdict.NOT_TRIED, detail, bound=floor)
                if self.trials >= self.settings.budget:
                    detail = "not tried: the preemption budget was spent"
                    return DomainOption(name, Verdict.NOT_TRIED, detail, bound=floor)
                # Each level adds to what is already set aside (nothing twice): its own pieces,
                # and lower ones where a sub-domain has only now become able to hold a child.
                mask = candidate.useful.get(level)
                more = [
                    u
                    for u in candidate.units
                    if u.priority <= level
                    and u.key not in added
                    and (mask is None or any(bool(mask[h.node]) for h in u.holdings))
                ]
                self._set_aside(more)
                added.update(u.key for u in more)
                aside = [u for u in candidate.units if u.key in added]  # cheapest first
                plan = self._trial(aside)
                if isinstance(plan, _Found):
                    self.work.rollback(base)
                    found.append(self._narrow(candidate, candidate.bound.gpu_milli, aside, plan))
                    return None
                failure = plan
        finally:
            self.work.rollback(base)
        detail = f"even evicting every lower-priority pod there it does not fit: {failure}"
        return DomainOption(name, Verdict.NO_ROOM, detail, bound=candidate.bound)

    def _narrow(
        self, candidate: _Candidate, need: int, upto: list[EvictionUnit], wide: _Found
    ) -> _Found:
        """With everything up to a level set aside the unit fits (``wide``); the trial's
        placement ignores what each piece costs, so the cheapest pieces that cover the demand
        are tried alone, doubling while they do not fit, within the budget. A narrower plan
        counts only with links as good as the wide one's: freeing two GPUs on separate NVLink
        islands is not freeing an island. ``need``: the GPU milli missing after the free ones."""
        freed, count = 0, 0
        for piece in upto:
            if freed >= need and count:
                break
            freed += self._usable_held(piece, candidate.domain)
            count += 1
        while count <= MAX_NARROW_PIECES and count < len(upto):
            if self.trials >= self.settings.budget:
                break
            start = self.work.checkpoint()
            self._set_aside(upto[:count])
            narrow = self._trial(upto[:count], _tiers(wide.bindings))
            self.work.rollback(start)
            if isinstance(narrow, _Found):
                return narrow if narrow.cost.key() < wide.cost.key() else wide
            count *= 2
        return wide

    def _set_aside(self, pieces: Sequence[EvictionUnit]) -> None:
        for piece in pieces:
            for holding in piece.holdings:
                self.work.forget(holding.pod.key)

    def _trial(
        self, aside: list[EvictionUnit], tiers: tuple[int, ...] | None = None
    ) -> _Found | str:
        """Places the unit now that ``aside`` is set aside; on success, the plan after
        reprieve. ``tiers``: the link tiers the placement must match or beat (`_tiers`)."""
        self.trials += 1
        work = self.work
        start = work.checkpoint()
        try:
            result = schedule(work, self.pods, self.tree)
            decision = next((d for d in result.groups if d.name == self.root.key), None)
            if decision is None or decision.phase is not Phase.SCHEDULED:
                return decision.message if decision is not None else "not attempted"
            if tiers is not None and not _as_good(_tiers(result.bindings), tiers):
                return "fits only on worse GPU links"
            victims = self._reprieve(aside, result.bindings)
            placement = dict(decision.placement)
            return _Found(
                "/".join(placement.values()) or "cluster",
                placement,
                victims,
                tuple(result.bindings),
                self._cost(victims),
            )
        finally:
            work.rollback(start)

    # ----- phase 4 ---------------------------------------------------------------------------

    def _reprieve(
        self, aside: list[EvictionUnit], bindings: Sequence[Binding]
    ) -> list[EvictionUnit]:
        """Holds the unit's placement, then puts back every piece that still fits beside it,
        most important first: PDB-covered ones, then the highest priority, the oldest, the
        name. What cannot go back is evicted. Only the nodes the placement uses are checked:
        on every other node, putting all its pieces back restores what was there before."""
        work = self.work
        by_key = {p.key: p for p in self.pods}
        used: set[int] = set()
        for binding in bindings:
            node = work.index[binding.node]
            work.assume(by_key[binding.pod], node, binding.gpus)
            used.add(node)
        covered = {key for b in self.budgets for key in b.pods}
        touching = [u for u in aside if any(h.node in used for h in u.holdings)]
        order = sorted(
            touching,
            key=lambda u: (not covered.intersection(u.pods), -u.priority, u.created, u.key),
        )
        victims = []
        for piece in order:
            mark = work.checkpoint()
            if all(self._put_back(h) for h in piece.holdings if h.node in used):
                continue
            work.rollback(mark)
            victims.append(piece)
        return sorted(victims, key=lambda u: u.key)

    def _put_back(self, holding: Holding) -> bool:
        work = self.work
        free = work.allocatable[holding.node] - work.used[holding.node]
        if any(free[column] < amount for column, amount in holding.vector):
            return False
        base = int(work.gpu_offset[holding.node])
        if any(work.gpu_free[base + g] < holding.milli_per_gpu for g in holding.gpus):
            return False
        work.assume(holding.pod, holding.node, holding.gpus)
        return True

    def _cost(self, victims: list[EvictionUnit]) -> Cost:
        pods = [key for u in victims for key in u.pods]
        groups = set().union(*(u.groups for u in victims)) if victims else set()
        return Cost(
            budget_overrun(self.budgets, pods),
            max((u.priority for u in victims), default=0),
            sum(u.gpu_milli for u in victims),
            len(groups),
            min((u.created for u in victims), default=0.0),
        )

    # ----- phase 5 ---------------------------------------------------------------------------

    def _choose(
        self, priority: int, found: list[_Found], options: list[DomainOption]
    ) -> PreemptionPlan:
        if not found:
            spent = any(o.verdict is Verdict.NOT_TRIED for o in options)
            outcome = Outcome.BUDGET_SPENT if spent else Outcome.NO_ROOM
            why = "the preemption budget ran out" if spent else "no domain can make room"
            return self._plan(
                outcome, f"{why}: " + "; ".join(_line(o) for o in options), priority, options
            )
        ranked = sorted(found, key=lambda f: (f.cost.key(), f.domain))
        best = ranked[0]
        weighed = [DomainOption(best.domain, Verdict.CHOSEN, best.cost.describe(), best.cost)]
        weighed += [
            DomainOption(f.domain, Verdict.COSTLIER, f.cost.describe(), f.cost) for f in ranked[1:]
        ]
        weighed += options
        if not best.victims:
            message = f"fits in {best.domain} without evicting anything"
            return self._plan(Outcome.NOT_NEEDED, message, priority, weighed, best)
        pods = sum(len(u.holdings) for u in best.victims)
        message = (
            f"evict {pods} pods ({len(best.victims)} pieces) in {best.domain}: "
            f"{best.cost.describe()}"
        )
        if len(weighed) > 1:
            message += f"; {len(weighed) - 1} other domains weighed"
        return self._plan(Outcome.PLANNED, message, priority, weighed, best)

    def _plan(
        self,
        outcome: Outcome,
        message: str,
        priority: int | None = None,
        options: Sequence[DomainOption] = (),
        found: _Found | None = None,
    ) -> PreemptionPlan:
        victims: tuple[Victim, ...] = ()
        if found is not None:
            victims = tuple(
                Victim(h.pod.key, self.work.nodes[h.node].name, h.gpus, u.priority, u.key)
                for u in found.victims
                for h in u.holdings
            )
        return PreemptionPlan(
            preemptor=self.root.key,
            outcome=outcome,
            message=message,
            priority=priority,
            placement=found.placement if found is not None else {},
            victims=victims,
            bindings=found.bindings if found is not None else (),
            cost=found.cost if found is not None else None,
            domains=tuple(options),
            budget=self.settings.budget,
            trials=self.trials,
        )


def _tree(root: GroupSpec, groups: Sequence[GroupSpec]) -> list[GroupSpec]:
    children: dict[str, list[GroupSpec]] = {}
    for group in groups:
        if group.parent is not None:
            children.setdefault(group.parent, []).append(group)
    found, stack = [], [root]
    while stack:
        group = stack.pop()
        found.append(group)
        stack.extend(children.get(group.key, []))
    return found


MAX_NARROW_PIECES = 32
"""Narrower sets of victims are tried only up to this many pieces: past it the cheapest
pieces of a domain lie scattered over it, where a gang large enough to need them cannot use
them, and each such trial would cost as much as a successful one."""


def _tiers(bindings: Sequence[Binding]) -> tuple[int, ...]:
    """Each pod's worst GPU link, worst first (`LinkTier` values: lower is better)."""
    tiers = (int(LinkTier[b.link_tier]) for b in bindings if b.link_tier is not None)
    return tuple(sorted(tiers, reverse=True))


def _as_good(tiers: tuple[int, ...], reference: tuple[int, ...]) -> bool:
    return len(tiers) == len(reference) and all(
        t <= r for t, r in zip(tiers, reference, strict=True)
    )


def _bound_key(candidate: _Candidate) -> tuple[int, int, int]:
    return candidate.bound.key() if candidate.bound is not None else (0, 0, 0)


def _describe_bound(bound: Bound) -> str:
    return f"highest victim priority {bound.top_priority}, {_gpus(bound.gpu_milli)} GPUs"


def _line(option: DomainOption) -> str:
    return f"{option.domain}: {option.detail}"


def _gpus(milli: int) -> str:
    whole, part = divmod(milli, WHOLE_GPU_MILLI)
    return str(whole) if not part else f"{milli / WHOLE_GPU_MILLI:.3g}"

"""The preemption planner: where evicting lower-priority pods lets a unit that does not fit fit.

A unit is a root group with everything under it. Phases:
1. Checks that end it early: an unresolved priority, policy ``Never``, a budget of 0, nothing
   of lower priority to evict.
2. Domains: those of the root's topology key (the cluster when it has none), narrowed to the
   one its bound pods pin it to. For each, a lower bound on any plan's cost from counts alone
   (`Bound`: the GPUs missing after the free ones, the priority the cheapest victims covering
   them reach); a domain whose evictable GPUs cannot cover the demand is refused untried
   (`gpusched.engine.preemption.bounds`).
3. Trials, cheapest bound first: the pieces (`EvictionUnit`) of the domain up to one priority
   level are set aside on a scratch copy of the snapshot and the unit is placed with the
   engine's own `schedule` (every filter, pin and topology rule, top-down); the levels rise
   until it fits. Each trial costs one unit of ``preemption.budget``. A domain whose bound
   cannot beat the best plan so far is not tried, nor one whose bound at best ties it on PDB
   violations, victim priority and GPUs and cannot need fewer victim groups
   (`Candidate.fewest_groups`); only the victims' age, the last tie-break, is not weighed
   for a domain not tried.
4. Reprieve: with the unit's placement from the successful trial held, every piece set aside
   is put back, most important first, wherever it still fits beside it: the victims are only
   the pieces the placement really needs gone, and the placement itself stays what the trial
   chose (the same GPUs, the same link tier) (`gpusched.engine.preemption.reprieve`).
   Then narrower trials: the cheapest pieces alone (`_Search._narrow`).
5. The plan with the lowest `Cost` wins; the others are reported with their costs. The winner
   is tried once more sparing single pods where its placement left room freed by an evicted
   gang unused (`_Search._refit`), and that plan is kept when it costs less.
Pure: the caller's snapshot is never changed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpusched.api.crds import PreemptionPolicy
from gpusched.api.topology import LinkTier
from gpusched.engine import wording
from gpusched.engine.collector import collector_paused
from gpusched.engine.domains import Domain, pinned_domains, root_domain, subdomains
from gpusched.engine.groups import GroupSpec, GroupTree
from gpusched.engine.policy import Policy
from gpusched.engine.preemption.bounds import Candidate, DomainBounds, bound_key
from gpusched.engine.preemption.reprieve import cost, reprieve
from gpusched.engine.preemption.result import (
    Bound,
    Cost,
    DomainOption,
    Outcome,
    PreemptionPlan,
    Verdict,
    Victim,
    gpus_text,
)
from gpusched.engine.preemption.victims import (
    DisruptionBudget,
    EvictionUnit,
    eviction_units,
)
from gpusched.engine.request import WHOLE_GPU_MILLI, PodRequest
from gpusched.engine.result import Binding, Phase, PinnedApart
from gpusched.engine.schedule import schedule
from gpusched.engine.snapshot import Snapshot


def plan_preemption(
    snapshot: Snapshot,
    unit: str,
    pods: Sequence[PodRequest],
    groups: Sequence[GroupSpec],
    policy: Policy,
    budgets: Sequence[DisruptionBudget] = (),
    foreign: frozenset[str] = frozenset(),
) -> PreemptionPlan:
    """A plan for the root group ``unit`` (its key) whose pending ``pods`` do not fit, under
    ``policy`` (its ``preemption`` settings, and everything its trials' `schedule` reads).

    ``groups``: every group known, the unit's tree and the victims' groups (for their priority
    and disruption mode); ``budgets``: the PodDisruptionBudgets; ``foreign``: keys of held pods
    another scheduler bound. Raises ``ValueError`` when ``unit`` is not a root group of
    ``groups``.

    The collector is paused for the whole plan, not only inside each trial's `schedule`: the
    scratch copies and set-asides between trials are as short-lived as a trial's own objects,
    and young collections between trials moved them into the old generation and brought on
    full collections (25-165 ms each in a 5,000-node process) inside the plan."""
    with collector_paused(policy.pause_collector):
        with snapshot.lock:
            if policy.scoring.fragmentation_weight:
                # Each trial's `schedule` reads the held pods' task counts: counted once on
                # the caller's snapshot, where `schedule` keeps them too (a cache, exact
                # through every assume and forget), so every copy carries them and the next
                # plan does not count thousands of held pods again.
                snapshot.task_counts()
            work = snapshot.copy()
        return _Search(
            work=work,
            unit=unit,
            pods=pods,
            groups=groups,
            policy=policy,
            budgets=budgets,
            foreign=foreign,
        ).run()


@dataclass(slots=True)
class _Found:
    """A plan found in one domain."""

    domain: str
    placement: dict[str, str]
    victims: list[EvictionUnit]
    bindings: tuple[Binding, ...]
    cost: Cost


class _Search:
    def __init__(
        self,
        *,
        work: Snapshot,
        unit: str,
        pods: Sequence[PodRequest],
        groups: Sequence[GroupSpec],
        policy: Policy,
        budgets: Sequence[DisruptionBudget],
        foreign: frozenset[str],
    ) -> None:
        by_key = {g.key: g for g in groups}
        root = by_key.get(unit)
        if root is None or root.parent is not None:
            raise ValueError(f"{unit} is not a root group of the groups given")
        self.work = work
        self.root = root
        self.tree = GroupTree(groups).descendants(root)
        keys = {g.key for g in self.tree}
        self.pods = [p for p in pods if p.group_key in keys]
        self.groups = groups
        self.budgets = budgets
        self.foreign = foreign
        self.policy = policy
        self.settings = policy.preemption
        self.trials = 0

    # ----- phase 1 ---------------------------------------------------------------------------

    def run(self) -> PreemptionPlan:
        early = _early(self.tree, self.root, self.settings.budget)
        if early is not None:
            return self._plan(*early)
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
            protected = sum(1 for u in units if u.protected is not None and u.priority < priority)
            why = wording.no_lower_priority(priority, protected)
            return self._plan(Outcome.NO_LOWER_PRIORITY, why, priority)
        return self._search(priority, evictable)

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
        bounds = DomainBounds(self.work, self.root, self.tree, self.pods, evictable)
        candidates = [bounds.candidate(d) for d in domains]
        options: list[DomainOption] = []
        found: list[_Found] = []
        ordered = sorted(candidates, key=lambda c: (c.bound is None, bound_key(c), c.domain.name))
        for candidate in ordered:
            option = self._try(candidate, found)
            if option is not None:
                options.append(option)
        return self._choose(priority, found, options)

    def _domains(self) -> list[Domain] | str:
        """The root's domains, narrowed by the planner's own pinned-domains rule."""
        root = root_domain(self.work)
        key = self.root.topology_key
        domains = [root] if key is None else subdomains(self.work, root, key)
        pinned = pinned_domains(self.work, self.root, root, domains, self._bound_nodes())
        if isinstance(pinned, PinnedApart):
            return wording.pinned_apart(pinned)
        if not pinned:
            return wording.no_label_at_all(key)
        return pinned

    def _bound_nodes(self) -> list[int]:
        keys = {g.key for g in self.tree}
        return [h.node for h in self.work.holdings.values() if h.pod.group_key in keys]

    @staticmethod
    def _no_better(
        candidate: Candidate,
        floor: Bound,
        level: int,
        best: tuple[int, int, int, int, float],
    ) -> bool:
        """Whether no plan in the domain at ``level`` can beat ``best`` (a cost key) by the
        issue's order, up to the number of victim groups: its bound is dearer on PDB
        violations, victim priority or GPUs, or ties them and needs at least as many groups.
        Only the victims' age, the last tie-break, is not weighed for a domain not tried."""
        if floor.key() != best[:3]:
            return floor.key() > best[:3]
        return candidate.fewest_groups(level, floor.gpu_milli) >= best[3]

    def _try(self, candidate: Candidate, found: list[_Found]) -> DomainOption | None:
        """Trials in one domain, level by level; a plan found goes to ``found``, and the
        domain's option is written once the winner is known (None returned). The pieces are
        set aside on a scratch copy of the working snapshot, dropped afterwards: a copy costs
        far less than putting hundreds of pods back one by one."""
        name = candidate.domain.name
        if candidate.bound is None:
            return DomainOption(name, Verdict.NO_ROOM, candidate.short)
        best = min((f.cost.key() for f in found), default=None)
        lowest = candidate.bound.top_priority
        levels = sorted({u.priority for u in candidate.units if u.priority >= lowest})
        failure = ""
        scratch = self.work.copy()
        added: set[str] = set()
        for level in levels:
            floor = Bound(level, candidate.bound.gpu_milli)
            if best is not None and self._no_better(candidate, floor, level, best):
                detail = wording.not_tried_no_cheaper(
                    floor.top_priority, gpus_text(floor.gpu_milli)
                )
                return DomainOption(name, Verdict.NOT_TRIED, detail, bound=floor)
            if self.trials >= self.settings.budget:
                detail = wording.NOT_TRIED_BUDGET
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
            _set_aside(scratch, more)
            added.update(u.key for u in more)
            aside = [u for u in candidate.units if u.key in added]  # cheapest first
            plan = self._trial(scratch, aside)
            if isinstance(plan, _Found):
                need = candidate.bound.gpu_milli
                narrowed = self._narrow(candidate, need, aside, plan)
                found.append(narrowed)
                return None
            failure = plan
        detail = wording.never_fits(failure)
        return DomainOption(name, Verdict.NO_ROOM, detail, bound=candidate.bound)

    def _narrow(
        self,
        candidate: Candidate,
        need: int,
        upto: list[EvictionUnit],
        wide: _Found,
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
            freed += candidate.freed[piece.key]
            count += 1
        while count <= MAX_NARROW_PIECES and count < len(upto):
            if self.trials >= self.settings.budget:
                break
            scratch = self.work.copy()
            _set_aside(scratch, upto[:count])
            narrow = self._trial(scratch, upto[:count], _tiers(wide.bindings))
            if isinstance(narrow, _Found):
                return narrow if narrow.cost.key() < wide.cost.key() else wide
            count *= 2
        return wide

    def _refit(self, plan: _Found) -> _Found:
        """The trial placed the unit ignoring what each freed GPU costs: where it left part of
        an evicted piece unused (an ``All`` gang it needs only some nodes of goes whole),
        pieces of one pod it did use there could be spared, the unit taking the unused room
        instead. Those pieces, dearest first, as many as the unused room of their sub-domain
        (`_slack`) could replace, are spared and the unit placed once more, on links as good;
        the result is kept only when it costs less."""
        if self.trials >= self.settings.budget:
            return plan
        slack, code_of = self._slack(plan)
        # Pieces on one node (a pod, with its claims): a gang's across nodes is what leaves
        # room unused, and sparing it would need room in several places at once.
        single = [u for u in plan.victims if len(u.nodes()) == 1]
        spared: set[str] = set()
        for piece in sorted(single, key=lambda u: (-u.priority, u.created, u.key)):
            code = code_of(piece.holdings[0].node)
            if slack.get(code, 0) >= piece.gpu_milli > 0:
                slack[code] -= piece.gpu_milli
                spared.add(piece.key)
        if not spared:
            return plan
        aside = [u for u in plan.victims if u.key not in spared]
        scratch = self.work.copy()
        _set_aside(scratch, aside)
        refit = self._trial(scratch, aside, _tiers(plan.bindings))
        if isinstance(refit, _Found) and refit.cost.key() < plan.cost.key():
            return refit
        return plan

    def _slack(self, plan: _Found) -> tuple[dict[int, int], Callable[[int], int]]:
        """GPU milli the plan frees or finds free but does not use, per sub-domain where the
        unit's child groups are placed (its root's own domain when they have no common
        topology key), and the sub-domain of a node."""
        keys = {g.topology_key for g in self.tree if g.parent == self.root.key}
        key = next(iter(keys)) if len(keys) == 1 else None
        codes = self.work.domain_codes(key)[0] if key is not None else None

        def code_of(node: int) -> int:
            return int(codes[node]) if codes is not None else 0

        offset = self.work.gpu_offset
        room: dict[int, int] = {}
        for piece in plan.victims:
            for holding in piece.holdings:
                freed = len(holding.gpus) * holding.milli_per_gpu
                room[holding.node] = room.get(holding.node, 0) + freed
        for node in list(room):
            free = self.work.gpu_free[int(offset[node]) : int(offset[node + 1])]
            room[node] += int(free.sum())
        by_key = {p.key: p for p in self.pods}
        for binding in plan.bindings:
            node = self.work.index[binding.node]
            if node in room:
                room[node] -= len(binding.gpus) * (by_key[binding.pod].gpu_milli or WHOLE_GPU_MILLI)
        slack: dict[int, int] = {}
        for node, left in room.items():
            if left > 0:
                slack[code_of(node)] = slack.get(code_of(node), 0) + left
        return slack, code_of

    def _trial(
        self, scratch: Snapshot, aside: list[EvictionUnit], tiers: tuple[int, ...] | None = None
    ) -> _Found | str:
        """Places the unit on ``scratch``, where ``aside`` is set aside (and left so, with the
        placement held on success); on success, the plan after reprieve. ``tiers``: the link
        tiers the placement must match or beat (`_tiers`)."""
        self.trials += 1
        # The placement is left held on the scratch copy (rolling it back cost as much as a
        # tenth of the trial): reprieve reads the room beside it there, and the copy is
        # dropped afterwards. A failed trial is undone, as the next level adds to the copy.
        checkpoint = scratch.checkpoint()
        result = schedule(scratch, self.pods, self.tree, self.policy, undo=False)
        decision = next((d for d in result.groups if d.name == self.root.key), None)
        if decision is None or decision.phase is not Phase.SCHEDULED:
            scratch.rollback(checkpoint)
            return decision.message if decision is not None else wording.NOT_ATTEMPTED
        if tiers is not None and not _as_good(_tiers(result.bindings), tiers):
            scratch.rollback(checkpoint)
            return wording.WORSE_LINKS
        victims = reprieve(scratch, self.budgets, aside, result.bindings)
        placement = dict(decision.placement)
        return _Found(
            "/".join(placement.values()) or "cluster",
            placement,
            victims,
            tuple(result.bindings),
            cost(self.budgets, victims),
        )

    # ----- phase 4 ---------------------------------------------------------------------------

    # ----- phase 5 ---------------------------------------------------------------------------

    def _choose(
        self, priority: int, found: list[_Found], options: list[DomainOption]
    ) -> PreemptionPlan:
        if not found:
            spent = any(o.verdict is Verdict.NOT_TRIED for o in options)
            outcome = Outcome.BUDGET_SPENT if spent else Outcome.NO_ROOM
            lines = [(o.domain, o.detail) for o in options]
            return self._plan(outcome, wording.no_plan(spent, lines), priority, options)
        ranked = sorted(found, key=lambda f: (f.cost.key(), f.domain))
        # Domains are weighed by their trial plans; only the winner is refit (one more trial
        # rather than one per domain), so the refit can only make the chosen plan cheaper.
        best = self._refit(ranked[0])
        weighed = [DomainOption(best.domain, Verdict.CHOSEN, best.cost.describe(), best.cost)]
        weighed += [
            DomainOption(f.domain, Verdict.COSTLIER, f.cost.describe(), f.cost) for f in ranked[1:]
        ]
        weighed += options
        if not best.victims:
            message = wording.fits_without_evicting(best.domain)
            return self._plan(Outcome.NOT_NEEDED, message, priority, weighed, best)
        pods = sum(len(u.pods) for u in best.victims)
        message = wording.eviction(pods, len(best.victims), best.domain, best.cost.describe())
        if len(weighed) > 1:
            message += wording.others_weighed(len(weighed) - 1)
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
                Victim(
                    pod=h.pod.key,
                    node=self.work.nodes[h.node].name,
                    gpus=tuple(sorted({*h.gpus, *(g for c in claims for g in c.gpus)})),
                    priority=u.priority,
                    unit=u.key,
                    claims=tuple(c.pod.key for c in claims),
                )
                for u in found.victims
                for h, claims in u.credited()
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


def _early(tree: Sequence[GroupSpec], root: GroupSpec, budget: int) -> tuple[Outcome, str] | None:
    """Phase 1: why the unit does not preempt at all, if it does not."""
    invalid = [g.invalid for g in tree if g.invalid is not None]
    if invalid:
        return Outcome.INVALID, wording.preemptor_invalid(invalid[0])
    problems = [g.priority_problem for g in tree if g.priority_problem is not None]
    if problems:
        return Outcome.PRIORITY_UNRESOLVED, wording.priority_unresolved(problems[0])
    if root.preemption_policy is PreemptionPolicy.NEVER:
        return Outcome.POLICY_NEVER, wording.POLICY_NEVER
    if budget == 0:
        return Outcome.DISABLED, wording.PREEMPTION_OFF
    return None


MAX_NARROW_PIECES = 32
"""Narrower sets of victims are tried only up to this many pieces: past it the cheapest
pieces of a domain lie scattered over it, where a gang large enough to need them cannot use
them, and each such trial would cost as much as a successful one."""


def _set_aside(scratch: Snapshot, pieces: Sequence[EvictionUnit]) -> None:
    scratch.forget_many(h.pod.key for piece in pieces for h in piece.holdings)


def _tiers(bindings: Sequence[Binding]) -> tuple[int, ...]:
    """Each pod's worst GPU link, worst first (`LinkTier` values: lower is better)."""
    tiers = (int(LinkTier[b.link_tier]) for b in bindings if b.link_tier is not None)
    return tuple(sorted(tiers, reverse=True))


def _as_good(tiers: tuple[int, ...], reference: tuple[int, ...]) -> bool:
    return len(tiers) == len(reference) and all(
        t <= r for t, r in zip(tiers, reference, strict=True)
    )

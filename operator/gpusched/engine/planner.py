"""Placing groups top-down: the parent's domain first, children confined to it.

Phases for one root group (a PodGroup or CompositePodGroup with no parent):
1. Candidate domains: the domains of the group's topology key inside its parent's domain
   (or the domain its already-bound pods pin it to), each with an optimistic count of how
   many of its pods could fit there; domains that cannot reach the minimum are rejected with
   a reason, the rest are ordered tightest-fit first so big domains stay free for big gangs.
2. Trial: place the group in the first candidate — a PodGroup pod by pod with `pick_node`,
   a CompositePodGroup child by child — on the working snapshot; roll back to the
   checkpoint when the group's minimum is not met and try the next candidate.
3. Backtracking across siblings: when a CompositePodGroup's children do not all fit, earlier
   siblings are moved to their next candidate domains, within a budget of extra choices
   (``backtrackingBudget``); the best complete-enough plan found is kept. When that still
   misses the group's minimum, the siblings are placed again in other orders inside the same
   domain (`gpusched.engine.siblings`): the nodes an early sibling takes are what a later one
   lacked, which no choice of domains can undo.
The result for each group is a placement or none: nothing of a failed group stays assumed.
Each decision is recorded as data (`gpusched.engine.decisions.Record`: the domains tried, what a
group waits for) and its sentences are rendered by `gpusched.engine.wording`.
"""

from __future__ import annotations

import difflib
from collections import defaultdict
from collections.abc import Mapping, Sequence

from gpusched.engine import wording
from gpusched.engine.admission import shortfalls
from gpusched.engine.blockers import node_check
from gpusched.engine.decisions import Candidates, Record, Tried
from gpusched.engine.domains import Domain, copies, empty_label, pinned_domains, subdomains
from gpusched.engine.groups import GroupKind, GroupSpec, GroupTree
from gpusched.engine.pick import pick_node
from gpusched.engine.request import PodRequest
from gpusched.engine.result import (
    Attempt,
    Counted,
    GroupDecision,
    NodeCheck,
    Phase,
    PinnedApart,
    Reason,
    Waiting,
)
from gpusched.engine.room import ChildBounds, Room
from gpusched.engine.scoring import Scoring
from gpusched.engine.segments import enclosing, place_segments, segments_needed
from gpusched.engine.siblings import place_children
from gpusched.engine.snapshot import Holding, Snapshot

LABELS_SAMPLED = 200
"""Nodes whose label keys are offered as "did you mean" for a topology key no node carries
(with ``topologyLevels``): enough to know a cluster's label vocabulary, cheap at any size."""


def _empty_line(snapshot: Snapshot, parent: Domain, key: str) -> Tried | None:
    """A report line naming the nodes of ``parent`` in no ``key`` domain for an empty value."""
    empty = empty_label(snapshot, parent, key)
    return Tried(Attempt(domain=None, empty_label=empty)) if empty is not None else None


class Planner:
    """Places groups on a working snapshot; records a decision per group it touched."""

    def __init__(
        self,
        snapshot: Snapshot,
        scoring: Scoring,
        groups: Sequence[GroupSpec],
        pods_by_group: dict[str, list[PodRequest]],
        gated: Mapping[str, int] | None = None,
    ) -> None:
        """``gated``: per group, its pods held back by scheduling gates (neither placed nor
        counted; named in what a gang waits for)."""
        self.snapshot = snapshot
        self.scoring = scoring
        self.gated = gated or {}
        self.groups = {g.key: g for g in groups}
        self.tree = GroupTree(groups)
        self.pods = pods_by_group
        self.bound = self._bound_by_group()
        self.numa = scoring.numa
        self.budget = scoring.policy.backtracking_budget
        # Nothing it holds refers back to it: a planner (with the trial's snapshot) is freed
        # as soon as its `schedule` returns, not by a later garbage collection.
        self.record = Record(self.tree.descendants, scoring.policy.max_domains_reported)

    @property
    def decisions(self) -> dict[str, GroupDecision]:
        return self.record.decisions

    # ----- facts about a group ---------------------------------------------------------------

    def _bound_by_group(self) -> dict[str, list[Holding]]:
        """The held pods of each group given (those of other groups are never asked about:
        a preemption trial's snapshot holds thousands of its victims' pods)."""
        bound: dict[str, list[Holding]] = defaultdict(list)
        groups = self.groups
        for holding in self.snapshot.holdings.values():
            key = holding.pod.group_key
            if key is not None and key in groups:
                bound[key].append(holding)
        return bound

    def descendants(self, group: GroupSpec) -> list[GroupSpec]:
        """The group and every group under it, parents first."""
        return self.tree.descendants(group)

    def children(self, group: GroupSpec) -> list[GroupSpec]:
        return self.tree.children(group.key)

    def pending_pods(self, group: GroupSpec) -> list[PodRequest]:
        return [p for g in self.descendants(group) for p in self.pods.get(g.key, [])]

    def demand(self, group: GroupSpec) -> int:
        return sum(p.gpu_demand_milli for p in self.pending_pods(group))

    def _bound_nodes(self, group: GroupSpec) -> list[int]:
        """Nodes of the group's (and its descendants') bound pods."""
        return [h.node for m in self.descendants(group) for h in self.bound.get(m.key, [])]

    # ----- phase 1: candidate domains --------------------------------------------------------

    def candidates(self, group: GroupSpec, parent: Domain) -> Candidates:
        empty: Tried | None = None
        if group.topology_key is None:
            domains = [parent]
        else:
            domains = self._subdomains(parent, group.topology_key)
            empty = _empty_line(self.snapshot, parent, group.topology_key)
            if not domains:
                if empty is not None:
                    return Candidates([], [empty])
                note = self._no_label(group.topology_key, None)
                return Candidates([], [Tried(Attempt(domain=parent.name, note=note))])
            if group.segment_size and group.kind is GroupKind.POD_GROUP:
                return self._segment_candidates(group, parent, empty)
            pinned = pinned_domains(self.snapshot, group, parent, domains, self._bound_nodes(group))
            if isinstance(pinned, PinnedApart):
                note = wording.pinned_apart(pinned)
                return Candidates([], [Tried(Attempt(domain=None, note=note))])
            domains = pinned
        if group.kind is GroupKind.POD_GROUP:
            found = self._order_pod_group_domains(group, domains)
        else:
            missing = self._child_without_label(group, parent)
            if missing is not None:
                # Said on the composite, naming the child: the child's own decision is its
                # parent's, so this is where a user reading either of them learns of the typo.
                return Candidates([], [Tried(Attempt(domain=parent.name, note=missing))])
            found = self._order_composite_domains(group, domains)
        if empty is not None:
            found.lines.insert(0, empty)
        return found

    def _segment_candidates(
        self, group: GroupSpec, parent: Domain, empty: Tried | None
    ) -> Candidates:
        """A segmented gang's candidates are the domains that hold all its segments, closest
        first (`gpusched.engine.segments`); with pods bound, its parent's domain only (the
        trial sends what bound segments lack to their own domains)."""
        lines = [empty] if empty is not None else []
        pods = self.pods.get(group.key, [])
        key, size = group.topology_key, group.segment_size
        if self._bound_nodes(group) or not pods or key is None or size is None:
            return Candidates([parent], lines)
        wanted = segments_needed(self.needed(group), size)
        found = enclosing(
            self.snapshot, key, size, pods, parent, self._subdomains, wanted, self.numa
        )
        return Candidates(found, lines)

    def _child_without_label(self, group: GroupSpec, parent: Domain) -> str | None:
        """A group under ``group`` whose topology key no node of ``parent`` carries."""
        for child in self.descendants(group)[1:]:
            key = child.topology_key
            if key is not None and not self._subdomains(parent, key):
                return self._no_label(key, wording.group_name(child.kind.value, child.key))
        return None

    def _no_label(self, key: str, group: str | None) -> str:
        known = set(self.snapshot.levels)
        for info in self.snapshot.nodes[:LABELS_SAMPLED]:
            known.update(info.labels)
        levels = self.snapshot.levels
        if key in levels:  # a configured level that no node carries yet: not a typo
            return wording.no_label(key, group, None, levels)
        close = difflib.get_close_matches(key, sorted(known - {key}), n=1, cutoff=0.8)
        return wording.no_label(key, group, close[0] if close else None, levels)

    def _subdomains(self, parent: Domain, key: str) -> list[Domain]:
        """`subdomains`, memoised with the static facts: a domain's nodes follow from its
        path alone, and a gang's children (and the trials of a preemption plan) ask for the
        racks of the same zone again and again. The memoised masks are read-only."""
        memo: dict[tuple[tuple[tuple[str, str], ...], str], list[Domain]]
        memo = self.snapshot.derived.setdefault("subdomains", {})
        domains = memo.get((parent.labels, key))
        if domains is None:
            domains = subdomains(self.snapshot, parent, key)
            for domain in domains:
                if domain is not parent:
                    domain.mask.flags.writeable = False
            memo[(parent.labels, key)] = domains
        return list(domains)

    def below_minimum(self) -> set[str]:
        """The gangs with pods bound, but fewer than their minCount."""
        return {
            g.key
            for g in self.groups.values()
            if g.gang and 0 < len(self.bound.get(g.key, [])) < g.minimum
        }

    def needed(self, group: GroupSpec) -> int:
        """Pods that must be placed for a PodGroup to count as placed.

        A gang already bound below its minCount (a bind failed after others landed, or its
        room was taken while a leader changed) needs only one more: all or nothing no longer
        applies, and every pod placed is room the gang keeps. Waiting for all its missing
        pods to fit at once would hand each GPU freed in its domain to newcomers, and leave
        it below minCount for good; its place in the queue (by age) gives it that room first."""
        pods = self.pods.get(group.key, [])
        bound = len(self.bound.get(group.key, []))
        if not group.gang:
            return 1 if pods and not bound else 0
        if 0 < bound < group.minimum:
            return 1 if pods else 0
        return self.missing(group)

    def missing(self, group: GroupSpec) -> int:
        """Pods a gang lacks to reach its minCount: what a failed trial reports it needed
        (more than `needed` for a gang bound below its minCount)."""
        bound = len(self.bound.get(group.key, []))
        return max(0, group.minimum - bound) if group.gang else self.needed(group)

    def _order_pod_group_domains(self, group: GroupSpec, domains: list[Domain]) -> Candidates:
        pods = self.pods.get(group.key, [])
        needed = self.needed(group)
        room = Room(self.snapshot, pods, self.numa)
        ranked: list[tuple[tuple[int, int, str], Domain]] = []
        lines: list[Tried] = []
        biggest = max(pods, key=lambda p: (p.gpu_demand_milli, p.key)) if pods else None
        for domain in domains:
            estimate = room.estimate(domain)
            if estimate < needed and biggest is not None:
                self.record.explored += 1  # looked at and refused: a domain tried, without a trial
                lines.append(self._rejected(domain, estimate, self.missing(group), biggest))
                continue
            ranked.append((room.tightest_first(domain), domain))
        ranked.sort(key=lambda item: item[0])
        return Candidates([d for _, d in ranked], lines)

    def _rejected(self, domain: Domain, estimate: int, needed: int, pod: PodRequest) -> Tried:
        def nodes() -> NodeCheck:
            capacity = copies(self.snapshot, pod, self.numa)
            return node_check(self.snapshot, pod, domain.nodes(), self.numa, capacity=capacity)

        return Tried(Attempt(domain=domain.name, fit=estimate, needed=needed, estimate=True), nodes)

    def _order_composite_domains(self, group: GroupSpec, domains: list[Domain]) -> Candidates:
        # Ordered by every resource the tree's pods request, exactly as a PodGroup's domains:
        # counting free GPUs only, racks that differ in CPU or memory would tie on the name.
        room = Room(self.snapshot, self.pending_pods(group), self.numa)
        children = self.children(group)
        bounds = ChildBounds(self.snapshot, children, self.pods, self.needed, self.numa)
        ranked: list[tuple[tuple[int, int, str], Domain]] = []
        lines: list[Tried] = []
        for domain in domains:
            most = bounds.at_most(domain)
            if most < group.minimum:
                self.record.explored += 1  # looked at and refused: a domain tried, without a trial
                attempt = Attempt(
                    domain=domain.name,
                    fit=most,
                    needed=group.minimum,
                    counted=Counted.CHILD_GROUPS,
                    estimate=True,
                    bounds=bounds.describe(domain),
                )
                lines.append(Tried(attempt))
                continue
            ranked.append((room.tightest_first(domain), domain))
        ranked.sort(key=lambda item: item[0])
        return Candidates([d for _, d in ranked], lines)

    # ----- phase 2: trial in one domain ------------------------------------------------------

    def place(self, group: GroupSpec, parent: Domain) -> bool:
        """Places ``group`` somewhere inside ``parent``; records its decision. On failure the
        snapshot is as before."""
        self.record.explored = 0  # both per root group: one gang's search never starves another's
        self.budget = self.scoring.policy.backtracking_budget
        if self.waits(group):
            return False
        found = self.candidates(group, parent)
        lines = list(found.lines)
        for domain in found.domains:
            ok, line = self.place_in(group, domain)
            if ok:
                return True
            lines.append(line)
        self.record.fail(group, parent, lines, final=True)
        return False

    def waits(self, group: GroupSpec) -> bool:
        """Whether the group waits for pods (or child groups); if so, decided so, and so is
        everything under it: its pods say what it waits for, not that they did not fit."""
        wait = self.waiting(group)
        if wait is None:
            return False
        message = wording.waiting(wait)
        reason = Reason.UNSCHEDULABLE if wait.short else Reason.WAITING_FOR_PODS
        self.record.decide(group, Phase.PENDING, reason, message, wait=wait)
        self.record.inherit(group, Phase.PENDING, reason)
        return True

    def waiting(self, group: GroupSpec) -> Waiting | None:
        if group.kind is GroupKind.COMPOSITE:
            children = self.children(group)
            if len(children) < group.minimum:
                return Waiting(
                    counted=Counted.CHILD_GROUPS, present=len(children), minimum=group.minimum
                )
            ready = sum(1 for child in children if self.waiting(child) is None)
            if ready < group.minimum:
                return Waiting(
                    counted=Counted.CHILD_GROUPS, present=ready, minimum=group.minimum, ready=True
                )
            return None
        present = len(self.pods.get(group.key, [])) + len(self.bound.get(group.key, []))
        gated = self.gated.get(group.key, 0)
        if group.gang and present < group.minimum:
            return Waiting(
                counted=Counted.PODS, present=present, minimum=group.minimum, gated=gated
            )
        if not present:
            return Waiting(counted=Counted.PODS, present=0, minimum=None, gated=gated)
        short_tasks = self._tasks_short(group, placed=None)
        if short_tasks:
            return Waiting(
                counted=Counted.PODS,
                present=present,
                minimum=group.minimum,
                gated=gated,
                tasks=short_tasks,
            )
        if group.min_resources and not self.bound.get(group.key):
            short = shortfalls(self.snapshot, group.min_resources)
            if short:
                return Waiting(
                    counted=Counted.PODS, present=present, minimum=group.minimum, short=short
                )
        return None

    def _tasks_short(
        self, group: GroupSpec, placed: list[PodRequest] | None
    ) -> tuple[tuple[str, int, int], ...]:
        """The tasks of ``group.task_minimums`` short of their minimum, as (task, count,
        minimum): counting its pods that exist (``placed`` None), or those bound and
        ``placed`` in a trial."""
        if not group.task_minimums:
            return ()
        bound = [h.pod for h in self.bound.get(group.key, [])]
        pods = bound + (self.pods.get(group.key, []) if placed is None else placed)
        counts: dict[str | None, int] = defaultdict(int)
        for pod in pods:
            counts[pod.task] += 1
        return tuple(
            (task, counts[task], minimum)
            for task, minimum in group.task_minimums
            if counts[task] < minimum
        )

    def _task_first(self, group: GroupSpec, pods: list[PodRequest]) -> list[PodRequest]:
        """``pods`` with, first, those each task needs to reach its minimum (in their order):
        a greedy fill must not spend a domain on extra pods of one task first."""
        if not group.task_minimums:
            return pods
        wanted = dict(group.task_minimums)
        for holding in self.bound.get(group.key, []):
            if holding.pod.task in wanted:
                wanted[holding.pod.task] -= 1
        first, rest = [], []
        for pod in pods:
            if pod.task is not None and wanted.get(pod.task, 0) > 0:
                wanted[pod.task] -= 1
                first.append(pod)
            else:
                rest.append(pod)
        return first + rest

    def place_in(self, group: GroupSpec, domain: Domain) -> tuple[bool, Tried]:
        """One trial of ``group`` in ``domain``: (placed, line for the report)."""
        self.record.explored += 1
        if group.kind is GroupKind.POD_GROUP:
            return self._pod_group_in(group, domain)
        return place_children(self, group, domain)

    def _segmented_in(
        self, group: GroupSpec, key: str, size: int, domain: Domain
    ) -> tuple[bool, Tried]:
        """One trial of a segmented gang with all its segments inside ``domain``."""
        snapshot = self.snapshot
        checkpoint = snapshot.checkpoint()
        pods = sorted(self.pods.get(group.key, []), key=lambda p: (-p.gpu_demand_milli, p.key))
        bound = self._bound_nodes(group)
        trial = place_segments(
            snapshot, self.scoring, key, size, pods, bound, domain, self._subdomains
        )
        if trial.placed >= self.needed(group) and (trial.placed or not pods or bool(bound)):
            message = wording.placed_in_segments(
                trial.placed, len(pods), domain.name, trial.segments
            )
            left_out = self._left_out(trial.failed, domain)
            self.record.decide(
                group,
                Phase.SCHEDULED,
                Reason.SCHEDULED,
                message,
                domain,
                left_out,
                segments=tuple(trial.segments),
            )
            return True, Tried(Attempt(domain=domain.name, fits=True))
        nodes = (
            node_check(snapshot, trial.failed[0], domain.nodes(), self.numa)
            if trial.failed
            else None
        )
        snapshot.rollback(checkpoint)
        attempt = Attempt(
            domain=domain.name,
            fit=trial.placed,
            needed=self.missing(group),
            nodes=nodes,
            no_pods=not trial.failed,
            segments=trial.count,
        )
        return False, Tried(attempt)

    def _pod_group_in(self, group: GroupSpec, domain: Domain) -> tuple[bool, Tried]:
        if group.segment_size and group.topology_key is not None:
            return self._segmented_in(group, group.topology_key, group.segment_size, domain)
        snapshot = self.snapshot
        checkpoint = snapshot.checkpoint()
        pods = sorted(self.pods.get(group.key, []), key=lambda p: (-p.gpu_demand_milli, p.key))
        pods = self._task_first(group, pods)
        needed = self.needed(group)
        placed, failed, trial = 0, [], []
        for pod in pods:
            choice = pick_node(snapshot, pod, self.scoring, domain.mask)
            if choice is None:
                failed.append(pod)
                continue
            snapshot.assume(pod, choice.node, choice.gpus)
            trial.append(pod)
            placed += 1
        # A group already running (pods bound) is placed even when none of its pending pods
        # fit: those stay pending beside the others, whichever cycle first sees them.
        tasks_met = not self._tasks_short(group, placed=trial)
        if (
            placed >= needed
            and tasks_met
            and (placed or not pods or bool(self.bound.get(group.key)))
        ):
            message = wording.placed(placed, len(pods), Counted.PODS, domain.name)
            left_out = self._left_out(failed, domain)
            self.record.decide(group, Phase.SCHEDULED, Reason.SCHEDULED, message, domain, left_out)
            return True, Tried(Attempt(domain=domain.name, fits=True))
        # Why the first pod that failed did not fit, on the cluster as the trial left it.
        nodes = node_check(snapshot, failed[0], domain.nodes(), self.numa) if failed else None
        snapshot.rollback(checkpoint)
        missing = self.missing(group)
        attempt = Attempt(
            domain=domain.name, fit=placed, needed=missing, nodes=nodes, no_pods=not failed
        )
        return False, Tried(attempt)

    def _left_out(self, failed: list[PodRequest], domain: Domain) -> dict[str, str]:
        """Why each pod a placed group leaves pending did not fit (a basic group's extra
        pods, a gang's pods beyond minCount), explained once per pod shape."""
        where = domain.name if domain.labels else None
        total = int(domain.mask.sum())
        said: dict[tuple[object, ...], str] = {}
        for pod in failed:
            if pod.shape_key not in said:
                nodes = node_check(self.snapshot, pod, domain.nodes(), self.numa)
                said[pod.shape_key] = wording.left_out(total, where, nodes)
        return {pod.key: said[pod.shape_key] for pod in failed}

    def spend(self) -> bool:
        if self.budget <= 0:
            return False
        self.budget -= 1
        return True

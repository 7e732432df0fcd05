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
   domain (`Planner._sibling_orders`): the nodes an early sibling takes are what a later one
   lacked, which no choice of domains can undo.
The result for each group is a placement or none: nothing of a failed group stays assumed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from gpusched.engine.domains import Domain, copies, subdomains
from gpusched.engine.fit import explain
from gpusched.engine.groups import GroupKind, GroupSpec, GroupTree
from gpusched.engine.nodes import BoolArray, IntArray
from gpusched.engine.pick import pick_node
from gpusched.engine.request import WHOLE_GPU_MILLI, PodRequest
from gpusched.engine.result import GroupDecision, Phase, Reason
from gpusched.engine.scoring import Scoring
from gpusched.engine.snapshot import Holding, Snapshot


@dataclass(frozen=True, slots=True)
class Line:
    """Why one domain did not take a group: ``domain: summary[: detail]``. The detail is
    rendered only if the group fails: explaining a rejected domain walks its nodes, which a
    successful placement should not pay for. The group's summary names every domain tried
    with its summary; its attempts carry the details."""

    domain: str | None
    """None for a reason that is not about one domain (the bound pods pin the group)."""
    summary: str
    detail: Callable[[], str] | None = None

    def short(self) -> str:
        return self.summary if self.domain is None else f"{self.domain}: {self.summary}"

    def full(self) -> str:
        return self.short() if self.detail is None else f"{self.short()}: {self.detail()}"

    def about(self, parent: Domain, full: bool) -> str:
        """The line inside a message that already says "in ``parent``"."""
        text = self.full() if full else self.short()
        if parent.labels and self.domain == parent.name:
            return text.removeprefix(f"{self.domain}: ")
        return text


def _fixed(text: str) -> Callable[[], str]:
    return lambda: text


@dataclass(slots=True)
class _Candidates:
    domains: list[Domain]
    lines: list[Line] = field(default_factory=list)


@dataclass(slots=True)
class _Best:
    placed: int = -1
    missing: tuple[str, ...] = ()
    """The children the best plan left out, in the order they were tried."""
    journal: list[tuple[bool, Holding]] = field(default_factory=list)
    decisions: dict[str, GroupDecision] = field(default_factory=dict)


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
        self.tree = GroupTree(groups)
        self.pods = pods_by_group
        self.bound = self._bound_by_group()
        self.budget = snapshot.config.backtracking_budget
        self.explored = 0
        self.decisions: dict[str, GroupDecision] = {}

    # ----- facts about a group ---------------------------------------------------------------

    def _bound_by_group(self) -> dict[str, list[Holding]]:
        bound: dict[str, list[Holding]] = defaultdict(list)
        for holding in self.snapshot.holdings.values():
            if holding.pod.group_key is not None:
                bound[holding.pod.group_key].append(holding)
        return bound

    def _pending_pods(self, group: GroupSpec) -> list[PodRequest]:
        return [p for g in self.tree.descendants(group) for p in self.pods.get(g.key, [])]

    def _demand(self, group: GroupSpec) -> int:
        return sum(p.gpu_demand_milli for p in self._pending_pods(group))

    def _bound_nodes(self, group: GroupSpec) -> list[int]:
        """Nodes of the group's (and its descendants') bound pods."""
        return [h.node for m in self.tree.descendants(group) for h in self.bound.get(m.key, [])]

    # ----- phase 1: candidate domains --------------------------------------------------------

    def candidates(self, group: GroupSpec, parent: Domain) -> _Candidates:
        if group.topology_key is None:
            domains = [parent]
        else:
            domains = subdomains(self.snapshot, parent, group.topology_key)
            if not domains:
                line = Line(parent.name, f"no node has label {group.topology_key}")
                return _Candidates([], [line])
            pinned = self._pin(group, parent, domains)
            if isinstance(pinned, str):
                return _Candidates([], [Line(None, pinned)])
            domains = pinned
        if group.kind is GroupKind.POD_GROUP:
            return self._order_pod_group_domains(group, domains)
        return self._order_composite_domains(group, domains)

    def _pin(self, group: GroupSpec, parent: Domain, domains: list[Domain]) -> list[Domain] | str:
        """The domains a group may still use, given its (and its descendants') bound pods; a
        string says why none. A group with bound pods is pinned to their domain (its full
        path): a re-created pod lands beside the others or stays pending. Bound pods in two
        domains already break the constraint, so nothing more is placed: adding a pod to one
        side would report the group placed in a placement that is not one."""
        bound = self._bound_nodes(group)
        if not bound:
            return domains
        touched = [d for d in domains if any(d.mask[node] for node in bound)]
        if len(touched) > 1:
            spans = "; ".join(f"{d.name} ({self._node_names(d.mask, bound)})" for d in touched)
            return (
                f"bound pods already span {len(touched)} {group.topology_key} domains, "
                f"which its constraint forbids: {spans}"
            )
        if not touched:
            names = self._node_names(None, bound)
            return f"pinned by bound pods on {names}, outside {parent.name}"
        return touched

    def _node_names(self, mask: BoolArray | None, nodes: list[int]) -> str:
        inside = {n for n in nodes if mask is None or mask[n]}
        return ", ".join(sorted(self.snapshot.nodes[n].name for n in inside))

    def needed(self, group: GroupSpec) -> int:
        """Pods that must be placed for a PodGroup to count as placed."""
        pods = self.pods.get(group.key, [])
        bound = len(self.bound.get(group.key, []))
        if not group.gang:
            return 1 if pods and not bound else 0
        return max(0, group.minimum - bound)

    def _order_pod_group_domains(self, group: GroupSpec, domains: list[Domain]) -> _Candidates:
        pods = self.pods.get(group.key, [])
        needed = self.needed(group)
        room = _Room(self.snapshot, pods)
        ranked: list[tuple[tuple[int, int, str], Domain]] = []
        lines: list[Line] = []
        biggest = max(pods, key=lambda p: (p.gpu_demand_milli, p.key)) if pods else None
        for domain in domains:
            estimate = room.estimate(domain)
            if estimate < needed and biggest is not None:
                self.explored += 1  # looked at and refused: a domain tried, without a trial
                lines.append(self._rejected(domain, estimate, needed, biggest))
                continue
            ranked.append((room.tightest_first(domain), domain))
        ranked.sort(key=lambda item: item[0])
        return _Candidates([d for _, d in ranked], lines)

    def _rejected(self, domain: Domain, estimate: int, needed: int, pod: PodRequest) -> Line:
        def render() -> str:
            capacity = copies(self.snapshot, pod)
            return explain(self.snapshot, pod, domain.nodes(), capacity=capacity)

        return Line(domain.name, f"at most {estimate} of {needed} pods fit", render)

    def _order_composite_domains(self, group: GroupSpec, domains: list[Domain]) -> _Candidates:
        # Ordered by every resource the tree's pods request, exactly as a PodGroup's domains:
        # counting free GPUs only, racks that differ in CPU or memory would tie on the name.
        room = _Room(self.snapshot, self._pending_pods(group))
        bounds = _ChildBounds(self, self.tree.children(group.key))
        ranked: list[tuple[tuple[int, int, str], Domain]] = []
        lines: list[Line] = []
        for domain in domains:
            most = bounds.at_most(domain)
            if most < group.minimum:
                self.explored += 1  # looked at and refused: a domain tried, without a trial
                summary = f"at most {most} of {group.minimum} child groups could fit"
                lines.append(Line(domain.name, f"{summary} ({bounds.describe(domain)})"))
                continue
            ranked.append((room.tightest_first(domain), domain))
        ranked.sort(key=lambda item: item[0])
        return _Candidates([d for _, d in ranked], lines)

    # ----- phase 2: trial in one domain ------------------------------------------------------

    def place(self, group: GroupSpec, parent: Domain) -> bool:
        """Places ``group`` somewhere inside ``parent``; records its decision. On failure the
        snapshot is as before."""
        self.explored = 0  # both per root group: one gang's search never starves another's
        self.budget = self.snapshot.config.backtracking_budget
        waiting = self._waiting(group)
        if waiting is not None:
            self._decide(group, Phase.PENDING, Reason.WAITING_FOR_PODS, waiting)
            self._inherit(group, Phase.PENDING, Reason.WAITING_FOR_PODS)
            return False
        found = self.candidates(group, parent)
        lines = list(found.lines)
        for domain in found.domains:
            ok, line = self.place_in(group, domain)
            if ok:
                return True
            lines.append(line)
        self._fail(group, parent, lines, final=True)
        return False

    def _waiting(self, group: GroupSpec) -> str | None:
        if group.kind is GroupKind.COMPOSITE:
            children = self.tree.children(group.key)
            if len(children) < group.minimum:
                return f"{len(children)} of {group.minimum} child groups exist (minGroupCount)"
            ready = sum(1 for child in children if self._waiting(child) is None)
            if ready < group.minimum:
                return f"{ready} of {group.minimum} child groups have their pods (minGroupCount)"
            return None
        present = len(self.pods.get(group.key, [])) + len(self.bound.get(group.key, []))
        gated = self.gated.get(group.key, 0)
        verb = "is" if gated == 1 else "are"
        also = f"; {gated} more {verb} held back by scheduling gates" if gated else ""
        if group.gang and present < group.minimum:
            return f"{present} of {group.minimum} valid pods exist (minCount {group.minimum}){also}"
        if not present:
            return f"no valid pods exist{also}"
        return None

    def place_in(self, group: GroupSpec, domain: Domain) -> tuple[bool, Line]:
        """One trial of ``group`` in ``domain``: (placed, line for the report)."""
        self.explored += 1
        if group.kind is GroupKind.POD_GROUP:
            return self._pod_group_in(group, domain)
        return self._composite_in(group, domain)

    def _pod_group_in(self, group: GroupSpec, domain: Domain) -> tuple[bool, Line]:
        snapshot = self.snapshot
        checkpoint = snapshot.checkpoint()
        pods = sorted(self.pods.get(group.key, []), key=lambda p: (-p.gpu_demand_milli, p.key))
        needed = self.needed(group)
        placed, failed = 0, []
        for pod in pods:
            choice = pick_node(snapshot, pod, self.scoring, domain.mask)
            if choice is None:
                failed.append(pod)
                continue
            snapshot.assume(pod, choice.node, choice.gpus)
            placed += 1
        # A group already running (pods bound) is placed even when none of its pending pods
        # fit: those stay pending beside the others, whichever cycle first sees them.
        if placed >= needed and (placed or not pods or bool(self.bound.get(group.key))):
            message = f"{placed} of {len(pods)} pending pods placed in {domain.name}"
            left_out = self._left_out(failed, domain)
            self._decide(group, Phase.SCHEDULED, Reason.SCHEDULED, message, domain, left_out)
            return True, Line(domain.name, "fits")
        why = explain(snapshot, failed[0], domain.nodes()) if failed else "no pods"
        snapshot.rollback(checkpoint)
        return False, Line(domain.name, f"{placed} of {needed} pods fit", _fixed(why))

    def _left_out(self, failed: list[PodRequest], domain: Domain) -> dict[str, str]:
        """Why each pod a placed group leaves pending did not fit (a basic group's extra
        pods, a gang's pods beyond minCount), explained once per pod shape."""
        where = f" of {domain.name}" if domain.labels else ""
        total = int(domain.mask.sum())
        said: dict[tuple[object, ...], str] = {}
        for pod in failed:
            if pod.shape_key not in said:
                why = explain(self.snapshot, pod, domain.nodes())
                said[pod.shape_key] = (
                    f"0/{total} nodes{where} available beside its group's other pods: {why}"
                )
        return {pod.key: said[pod.shape_key] for pod in failed}

    # ----- phase 3: composite groups with backtracking --------------------------------------

    def _composite_in(self, group: GroupSpec, domain: Domain) -> tuple[bool, Line]:
        snapshot = self.snapshot
        start = snapshot.checkpoint()
        best = _Best()
        for children in self._sibling_orders(group, domain, best):
            self._search(children, 0, 0, domain, start, best, ())
            snapshot.rollback(start)
        if best.placed < group.minimum:
            failed = [d for d in best.decisions.values() if d.phase is not Phase.SCHEDULED]
            detail = "; ".join(f"{d.name}: {d.message}" for d in failed[:3])
            self.decisions.update(best.decisions)
            summary = f"{max(best.placed, 0)} of {group.minimum} child groups fit"
            line = Line(domain.name, summary + (f" ({detail})" if detail else ""))
            self._decide(group, Phase.UNSCHEDULABLE, Reason.UNSCHEDULABLE, line.full())
            self._inherit(group, Phase.UNSCHEDULABLE, Reason.UNSCHEDULABLE)
            return False, line
        for added, holding in best.journal:
            if added:
                snapshot.assume(holding.pod, holding.node, holding.gpus)
            else:
                snapshot.forget(holding.pod.key)
        self.decisions.update(best.decisions)
        children = self.tree.children(group.key)
        message = f"{best.placed} of {len(children)} child groups placed in {domain.name}"
        self._decide(group, Phase.SCHEDULED, Reason.SCHEDULED, message, domain)
        return True, Line(domain.name, "fits")

    def _sibling_orders(
        self, group: GroupSpec, domain: Domain, best: _Best
    ) -> Iterator[list[GroupSpec]]:
        """The orders in which the children are placed inside ``domain``, each tried only
        while the group's minimum is not met. Greedy takes the nodes in the order it places,
        so an early sibling can take the one node a later one needed:
        1. the most GPUs first (then the name): big pieces first, the usual greedy;
        2. the tightest first, by every resource (`_tightness`): a CPU-heavy leader before
           GPU workers that would fill its only node;
        3. within the backtracking budget, one more order per unit: the last one with the
           sibling that did not fit moved to the front.
        An order already tried is not tried again."""
        children = self.tree.children(group.key)
        # Keys, not lists: the tighter order is only worked out when greedy failed.
        keys: list[Callable[[GroupSpec], tuple[float, ...]]] = [
            lambda c: (-self._demand(c),),
            lambda c: self._tightness(c, domain),
        ]
        tried: set[tuple[str, ...]] = set()
        last = children
        for key in keys:
            if best.placed >= group.minimum:
                return
            last = sorted(children, key=lambda c: (*key(c), c.key))
            if tuple(c.key for c in last) not in tried:
                tried.add(tuple(c.key for c in last))
                yield last
        while best.placed < group.minimum:
            # A child still waiting for its pods fails in any order: never worth a trial.
            ready = [c for c in children if c.key in best.missing and self._waiting(c) is None]
            if not ready:
                return
            failing = min(ready, key=lambda c: best.missing.index(c.key))
            order = [failing, *(c for c in last if c is not failing)]
            if tuple(c.key for c in order) in tried or not self._spend():
                return
            tried.add(tuple(c.key for c in order))
            last = order
            yield order

    def _tightness(self, group: GroupSpec, domain: Domain) -> tuple[float, float]:
        """Sort key, tightest first: minus the largest share of the domain's capacity that
        the group's pending pods request of any one resource (GPUs, CPU, memory, pods,
        extended resources), then minus the sum of those shares."""
        pods = self._pending_pods(group)
        shares = [self._demand(group) / max(1, WHOLE_GPU_MILLI * self._gpus_in(domain))]
        totals: dict[str, int] = defaultdict(int)
        for pod in pods:
            for name, amount in pod.resources.items():
                totals[name] += amount
        for name, total in sorted(totals.items()):
            column = self.snapshot.columns.get(name)
            capacity = 0 if column is None else self.snapshot.allocatable[domain.mask, column].sum()
            shares.append(total / max(1, int(capacity)))
        return (-max(shares), -sum(shares))

    def _gpus_in(self, domain: Domain) -> int:
        counts = np.diff(self.snapshot.gpu_offset)
        return int(counts[domain.mask].sum())

    def _search(
        self,
        children: list[GroupSpec],
        index: int,
        placed: int,
        domain: Domain,
        start: int,
        best: _Best,
        missing: tuple[str, ...],
    ) -> bool:
        """Depth-first over children and their candidate domains; True once all are placed.
        The first choice at each level is free; every further choice costs one unit of the
        backtracking budget, so the search stays bounded. ``missing``: the children this
        path left out so far."""
        if index == len(children):
            if placed > best.placed:
                best.placed = placed
                best.missing = missing
                best.journal = self.snapshot.journal_since(start)
                best.decisions = {
                    g.key: self.decisions[g.key]
                    for c in children
                    for g in self.tree.descendants(c)
                    if g.key in self.decisions
                }
            return placed == len(children)
        if placed + (len(children) - index) <= best.placed:
            return False
        child = children[index]
        any_placed = False
        found = self._child_options(child, domain)
        lines = list(found.lines)
        for attempt, option in enumerate(found.domains):
            if attempt and not self._spend():
                break
            checkpoint = self.snapshot.checkpoint()
            ok, line = self.place_in(child, option)
            if ok:
                any_placed = True
                if self._search(children, index + 1, placed + 1, domain, start, best, missing):
                    return True
            else:
                lines.append(line)
            self.snapshot.rollback(checkpoint)
        if any_placed:
            if not self._spend():
                return False
            message = f"did not fit beside its sibling groups in {domain.name}"
            self._decide(child, Phase.UNSCHEDULABLE, Reason.UNSCHEDULABLE, message)
            self._inherit(child, Phase.UNSCHEDULABLE, Reason.UNSCHEDULABLE)
        elif found.domains:  # every trial failed: its own reasons, not a stale decision
            self._fail(child, domain, lines)
        return self._search(children, index + 1, placed, domain, start, best, (*missing, child.key))

    def _child_options(self, child: GroupSpec, domain: Domain) -> _Candidates:
        waiting = self._waiting(child)
        if waiting is not None:
            # A sub-group short of pods (or of child groups) waits, and so does everything
            # under it: its pods say what it waits for, not that they did not fit.
            self._decide(child, Phase.PENDING, Reason.WAITING_FOR_PODS, waiting)
            self._inherit(child, Phase.PENDING, Reason.WAITING_FOR_PODS)
            return _Candidates([])
        found = self.candidates(child, domain)
        if not found.domains:
            self._fail(child, domain, found.lines)
        return found

    def _spend(self) -> bool:
        if self.budget <= 0:
            return False
        self.budget -= 1
        return True

    # ----- decisions -------------------------------------------------------------------------

    def _fail(
        self, group: GroupSpec, parent: Domain, lines: list[Line], final: bool = False
    ) -> None:
        """The group was placed nowhere in ``parent``: its message names every domain tried
        with why in short (up to ``maxDomainsReported``), or the one domain tried in full; its
        attempts say each in full.
        ``final``: the root's last word, which every group under it that did not fit takes
        too (their own reasons were about one of the root's domains only; the root's name
        them all)."""
        limit = self.snapshot.config.max_domains_reported
        shown = [line.full() for line in lines[:limit]]
        # A line about the parent itself (a child without a key of its own) names it once.
        said = [line.about(parent, full=len(lines) == 1) for line in lines[:limit]]
        summary = "; ".join(said)
        if len(lines) > limit:
            more = f"… {len(lines) - limit} more domains"
            shown.append(more)
            summary += f"; {more}"
        where = f"in {parent.name}" if parent.labels else "in any domain"
        message = f"no placement {where}" + (f": {summary}" if summary else "")
        self._decide(group, Phase.UNSCHEDULABLE, Reason.UNSCHEDULABLE, message, attempts=shown)
        self._inherit(group, Phase.UNSCHEDULABLE, Reason.UNSCHEDULABLE, replace=final)

    def _inherit(
        self, group: GroupSpec, phase: Phase, reason: Reason, replace: bool = False
    ) -> None:
        """Descendants of a group that was not placed are not placed either: each one that
        has no failure of its own gets its ancestor's, so its pods say why. ``replace``: an
        own Unschedulable is replaced too (a wait for pods never is: that is what to fix)."""
        decision = self.decisions[group.key]
        for member in self.tree.descendants(group)[1:]:
            own = self.decisions.get(member.key)
            replaceable = replace and own is not None and own.phase is Phase.UNSCHEDULABLE
            if own is None or own.phase is Phase.SCHEDULED or replaceable:
                message = f"{group.kind.value} {group.key}: {decision.message}"
                self._decide(member, phase, reason, message)

    def _decide(
        self,
        group: GroupSpec,
        phase: Phase,
        reason: Reason,
        message: str,
        domain: Domain | None = None,
        left_out: dict[str, str] | None = None,
        attempts: list[str] | None = None,
    ) -> None:
        self.decisions[group.key] = GroupDecision(
            name=group.key,
            kind=group.kind.value,
            phase=phase,
            reason=reason,
            message=message,
            placement=domain.placement if domain is not None else {},
            attempts=tuple(attempts or ()),
            explored=self.explored,
            left_out=left_out or {},
        )


class _Room:
    """How much of a set of pods a domain holds, by every resource they request: per pod
    shape, the copies that fit on its nodes now (`copies`: CPU, memory, GPUs, extended
    resources and the node's constraints at once)."""

    def __init__(self, snapshot: Snapshot, pods: Sequence[PodRequest]) -> None:
        shapes: dict[tuple[object, ...], list[PodRequest]] = defaultdict(list)
        for pod in pods:
            shapes[pod.shape_key].append(pod)
        self.total = len(pods)
        self.per_shape = [(len(same), copies(snapshot, same[0])) for same in shapes.values()]

    def estimate(self, domain: Domain) -> int:
        """An optimistic count of the pods that fit in ``domain`` at once."""
        return sum(min(n, int(c[domain.mask].sum())) for n, c in self.per_shape)

    def tightest_first(self, domain: Domain) -> tuple[int, int, str]:
        """Sort key: domains that take every pod first, the least room left over first (so
        big domains stay free for big gangs), measured uncapped; then the domains that take
        the most; the name last."""
        estimate = self.estimate(domain)
        if estimate < self.total:
            return (1, -estimate, domain.name)
        room = sum(int(c[domain.mask].sum()) for _, c in self.per_shape)
        return (0, room, domain.name)


class _ChildKind(NamedTuple):
    """Children with equal kinds are interchangeable for `_ChildBounds`."""

    topology_key: str | None
    needed: int
    shapes: tuple[str, ...]


class _ChildBounds:
    """An upper bound on how many children of a CompositePodGroup fit in a domain at once, so
    domains that cannot reach ``minGroupCount`` are rejected before any trial.

    Per node, a child's pods fit at most ``cap`` times (the most copies of any of its pod
    shapes). A child with topology key k fits in a sub-domain only if the sub-domain's total
    cap reaches the pods it needs, and identical children share those sub-domains: ``n``
    identical children fit at most ``min(n, Σ_sub ⌊cap_sub / needed⌋)`` times. Composite
    children are not bounded (counted as fitting)."""

    def __init__(self, planner: Planner, children: list[GroupSpec]) -> None:
        self.planner = planner
        self.kinds: dict[_ChildKind, list[GroupSpec]] = defaultdict(list)
        self.unbounded = 0
        for child in children:
            pods = planner.pods.get(child.key, [])
            if child.kind is GroupKind.COMPOSITE or not pods:
                self.unbounded += 1
                continue
            shapes = tuple(sorted({repr(p.shape_key) for p in pods}))
            kind = _ChildKind(child.topology_key, planner.needed(child), shapes)
            self.kinds[kind].append(child)
        self._caps: dict[_ChildKind, IntArray] = {}

    def _cap(self, kind: _ChildKind, child: GroupSpec) -> IntArray:
        cap = self._caps.get(kind)
        if cap is None:
            pods = self.planner.pods[child.key]
            per_shape = {p.shape_key: p for p in pods}.values()
            cap = np.max(np.stack([copies(self.planner.snapshot, p) for p in per_shape]), axis=0)
            self._caps[kind] = cap
        return cap

    def _slots(self, kind: _ChildKind, child: GroupSpec, domain: Domain) -> int:
        needed = kind.needed
        if needed == 0:
            return len(self.kinds[kind])
        cap = self._cap(kind, child)
        if child.topology_key is None:
            return int(cap[domain.mask].sum()) // needed
        subs = subdomains(self.planner.snapshot, domain, child.topology_key)
        return sum(int(cap[sub.mask].sum()) // needed for sub in subs)

    def at_most(self, domain: Domain) -> int:
        total = self.unbounded
        for kind, members in self.kinds.items():
            total += min(len(members), self._slots(kind, members[0], domain))
        return total

    def describe(self, domain: Domain) -> str:
        parts = []
        for kind, members in self.kinds.items():
            slots = self._slots(kind, members[0], domain)
            where = f"{members[0].topology_key} domains" if members[0].topology_key else "room"
            parts.append(
                f"{len(members)} × {kind.needed}-pod gang: {where} for {min(slots, len(members))}"
            )
        return "; ".join(parts)

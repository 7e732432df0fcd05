"""Phase 3 of placing a group (`gpusched.engine.planner`): a CompositePodGroup's children,
with backtracking across siblings (`place_children`, given the planner as its `Host`). When
the children do not all fit, earlier siblings are moved to their next candidate domains,
within a budget of extra choices (``backtrackingBudget``); the best complete-enough plan found
is kept. When that still misses the group's minimum, the siblings are placed again in other
orders inside the same domain (`_sibling_orders`): the nodes an early sibling takes are what a
later one lacked, which no choice of domains can undo. Nothing here imports the planner: it
hands itself in."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from gpusched.api.crds import Reason
from gpusched.engine import wording
from gpusched.engine.decisions import Candidates, Record, Tried
from gpusched.engine.domains import Domain
from gpusched.engine.groups import GroupSpec
from gpusched.engine.request import WHOLE_GPU_MILLI, PodRequest
from gpusched.engine.result import Attempt, Counted, GroupDecision, Phase, Waiting
from gpusched.engine.snapshot import Holding, Snapshot


class Host(Protocol):
    """What placing a CompositePodGroup's children reads of the planner that places it
    (`gpusched.engine.planner.Planner`): its working snapshot and record, the group tree,
    the trial of one child in one domain, and the backtracking budget."""

    snapshot: Snapshot
    record: Record

    def children(self, group: GroupSpec) -> list[GroupSpec]: ...

    def descendants(self, group: GroupSpec) -> list[GroupSpec]: ...

    def pending_pods(self, group: GroupSpec) -> list[PodRequest]: ...

    def demand(self, group: GroupSpec) -> int: ...

    def waiting(self, group: GroupSpec) -> Waiting | None: ...

    def waits(self, group: GroupSpec) -> bool: ...

    def candidates(self, group: GroupSpec, parent: Domain) -> Candidates: ...

    def place_in(self, group: GroupSpec, domain: Domain) -> tuple[bool, Tried]: ...

    def spend(self) -> bool: ...


@dataclass(slots=True)
class _Best:
    placed: int = -1
    missing: tuple[str, ...] = ()
    """The children the best plan left out, in the order they were tried."""
    journal: list[tuple[bool, Holding]] = field(default_factory=list)
    decisions: dict[str, GroupDecision] = field(default_factory=dict)


def place_children(host: Host, group: GroupSpec, domain: Domain) -> tuple[bool, Tried]:
    """One trial of CompositePodGroup ``group`` in ``domain``: placed, and the attempt."""
    snapshot = host.snapshot
    start = snapshot.checkpoint()
    best = _Best()
    complete = False
    for children in _sibling_orders(host, group, domain, best):
        complete = _search(host, children, 0, 0, domain, start, best, ())
        if complete:
            break  # the snapshot holds the best plan as it stands: nothing to replay
        snapshot.rollback(start)
    if best.placed < group.minimum:
        failed = [d for d in best.decisions.values() if d.phase is not Phase.SCHEDULED]
        host.record.decisions.update(best.decisions)
        attempt = Attempt(
            domain=domain.name,
            fit=max(best.placed, 0),
            needed=group.minimum,
            counted=Counted.CHILD_GROUPS,
            children=tuple((d.name, d.message) for d in failed[:3]),
        )
        message = wording.full(attempt)
        host.record.decide(group, Phase.UNSCHEDULABLE, Reason.UNSCHEDULABLE, message)
        host.record.inherit(group, Phase.UNSCHEDULABLE, Reason.UNSCHEDULABLE)
        return False, Tried(attempt)
    if not complete:
        for added, holding in best.journal:
            if added:
                snapshot.assume(holding.pod, holding.node, holding.gpus)
            else:
                snapshot.forget(holding.pod.key)
    host.record.decisions.update(best.decisions)
    children = host.children(group)
    message = wording.placed(best.placed, len(children), Counted.CHILD_GROUPS, domain.name)
    host.record.decide(group, Phase.SCHEDULED, Reason.SCHEDULED, message, domain)
    return True, Tried(Attempt(domain=domain.name, fits=True))


def _sibling_orders(
    host: Host, group: GroupSpec, domain: Domain, best: _Best
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
    children = host.children(group)
    # Keys, not lists: the tighter order is only worked out when greedy failed.
    keys: list[Callable[[GroupSpec], tuple[float, ...]]] = [
        lambda c: (-host.demand(c),),
        lambda c: _tightness(host, c, domain),
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
        ready = [c for c in children if c.key in best.missing and host.waiting(c) is None]
        if not ready:
            return
        failing = min(ready, key=lambda c: best.missing.index(c.key))
        order = [failing, *(c for c in last if c is not failing)]
        if tuple(c.key for c in order) in tried or not host.spend():
            return
        tried.add(tuple(c.key for c in order))
        last = order
        yield order


def _tightness(host: Host, group: GroupSpec, domain: Domain) -> tuple[float, float]:
    """Sort key, tightest first: minus the largest share of the domain's capacity that
    the group's pending pods request of any one resource (GPUs, CPU, memory, pods,
    extended resources), then minus the sum of those shares."""
    pods = host.pending_pods(group)
    shares = [host.demand(group) / max(1, WHOLE_GPU_MILLI * _gpus_in(host, domain))]
    totals: dict[str, int] = defaultdict(int)
    for pod in pods:
        for name, amount in pod.resources.items():
            totals[name] += amount
    for name, total in sorted(totals.items()):
        column = host.snapshot.columns.get(name)
        capacity = 0 if column is None else host.snapshot.allocatable[domain.mask, column].sum()
        shares.append(total / max(1, int(capacity)))
    return (-max(shares), -sum(shares))


def _gpus_in(host: Host, domain: Domain) -> int:
    counts = np.diff(host.snapshot.gpu_offset)
    return int(counts[domain.mask].sum())


def _search(
    host: Host,
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
            best.journal = host.snapshot.journal_since(start)
            best.decisions = {
                g.key: host.record.decisions[g.key]
                for c in children
                for g in host.descendants(c)
                if g.key in host.record.decisions
            }
        return placed == len(children)
    if placed + (len(children) - index) <= best.placed:
        return False
    child = children[index]
    any_placed = False
    found = _child_options(host, child, domain)
    lines = list(found.lines)
    for attempt, option in enumerate(found.domains):
        if attempt and not host.spend():
            break
        checkpoint = host.snapshot.checkpoint()
        ok, line = host.place_in(child, option)
        if ok:
            any_placed = True
            if _search(host, children, index + 1, placed + 1, domain, start, best, missing):
                return True
        else:
            lines.append(line)
        host.snapshot.rollback(checkpoint)
    if any_placed:
        if not host.spend():
            return False
        message = wording.beside_siblings(domain.name)
        host.record.decide(child, Phase.UNSCHEDULABLE, Reason.UNSCHEDULABLE, message)
        host.record.inherit(child, Phase.UNSCHEDULABLE, Reason.UNSCHEDULABLE)
    elif found.domains:  # every trial failed: its own reasons, not a stale decision
        host.record.fail(child, domain, lines)
    return _search(host, children, index + 1, placed, domain, start, best, (*missing, child.key))


def _child_options(host: Host, child: GroupSpec, domain: Domain) -> Candidates:
    if host.waits(child):
        return Candidates([])
    found = host.candidates(child, domain)
    if not found.domains:
        host.record.fail(child, domain, found.lines)
    return found

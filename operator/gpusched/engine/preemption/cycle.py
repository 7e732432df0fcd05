"""Preemption for a whole scheduling cycle: a plan for every root group `schedule` left
unschedulable, highest priority first, each on the cluster as the plans before it leave it.

A later plan never counts on room an earlier one freed: each planned unit's victims are gone
and its nominated placement is held before the next unit is planned. This is the
``preemptions`` list ``simulate`` prints and ``explain`` reads.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpusched.engine.collector import collector_paused
from gpusched.engine.groups import GroupSpec, GroupTree
from gpusched.engine.preemption.result import PreemptionPlan
from gpusched.engine.preemption.search import plan_preemption
from gpusched.engine.preemption.victims import DisruptionBudget
from gpusched.engine.request import PodRequest
from gpusched.engine.result import Phase, Reason, ScheduleResult
from gpusched.engine.snapshot import Snapshot


def plan_cycle(
    snapshot: Snapshot,
    result: ScheduleResult,
    pods: Sequence[PodRequest],
    groups: Sequence[GroupSpec],
    budgets: Sequence[DisruptionBudget] = (),
    foreign: frozenset[str] = frozenset(),
) -> list[PreemptionPlan]:
    """One plan per root group that ``result`` (of `schedule` on ``snapshot`` with ``pods`` and
    ``groups``) left Unschedulable, in queue order; the caller's snapshot is not changed."""
    with collector_paused():  # as in `plan_preemption`: the copy and carried-out plans too
        with snapshot.lock:
            work = snapshot.copy()
        if work.config.scoring.fragmentation_weight:
            work.task_counts()  # counted once for every plan's copy (see `plan_preemption`)
        for binding in result.bindings:  # what this cycle placed holds its room
            request = next((p for p in pods if p.key == binding.pod), None)
            if request is not None and request.key not in work.holdings:
                work.assume(request, work.index[binding.node], binding.gpus)
        plans = []
        for root in _waiting_roots(result, pods, groups):
            plan = plan_preemption(work, root.key, pods, groups, budgets, foreign)
            plans.append(plan)
            if plan.planned:
                _carry_out(work, plan, pods)
        return plans


def _waiting_roots(
    result: ScheduleResult, pods: Sequence[PodRequest], groups: Sequence[GroupSpec]
) -> list[GroupSpec]:
    failed = {
        d.name
        for d in result.groups
        if d.phase is Phase.UNSCHEDULABLE and d.reason is Reason.UNSCHEDULABLE
    }
    roots = [g for g in groups if g.parent is None and g.key in failed]
    tree = GroupTree(groups)
    tops: dict[str, int] = {}  # root key → the highest priority of its pending pods
    for pod in pods:
        if pod.group_key is not None:
            root = tree.root_of(pod.group_key)
            tops[root] = max(tops.get(root, pod.priority), pod.priority)

    def priority(root: GroupSpec) -> int:
        return root.priority if root.priority is not None else tops.get(root.key, 0)

    return sorted(roots, key=lambda r: (-priority(r), r.created, r.key))


def _carry_out(work: Snapshot, plan: PreemptionPlan, pods: Sequence[PodRequest]) -> None:
    """The plan as done: its victims gone, its placement held."""
    by_key = {p.key: p for p in pods}
    for victim in plan.victims:
        for key in (victim.pod, *victim.claims):
            work.forget(key)
    for binding in plan.bindings:
        work.assume(by_key[binding.pod], work.index[binding.node], binding.gpus)

"""Preemption for a whole scheduling cycle: a plan for every root group `schedule` left
unschedulable, highest priority first, each on the cluster as the plans before it leave it.

A later plan never counts on room an earlier one freed: each planned unit's victims are gone
and its nominated placement is held before the next unit is planned. This is the
``preemptions`` list ``simulate`` prints and ``explain`` reads.

A pod without a group that did not fit preempts as kube-scheduler would, as a unit of one: a
gang of one keyed like the pod (the engine's queue keys such a pod by its own key), with the
pod's priority and ``preemptionPolicy``. Only a pod that may preempt someone gets a plan (its
policy is not ``Never`` and some held pod has a lower priority): pods without a group that fit
nowhere come by the thousand in a full cluster, and a plan costs each one a copy of the
snapshot.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from gpusched.api.crds import PreemptionPolicy
from gpusched.engine.collector import collector_paused
from gpusched.engine.groups import GroupKind, GroupSpec, GroupTree
from gpusched.engine.policy import Policy
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
    policy: Policy,
    budgets: Sequence[DisruptionBudget] = (),
    foreign: frozenset[str] = frozenset(),
) -> list[PreemptionPlan]:
    """One plan per root group, and per pod without a group, that ``result`` (of `schedule` on
    ``snapshot`` with ``pods``, ``groups`` and ``policy``) left Unschedulable, in queue order;
    the caller's snapshot is not changed."""
    # As in `plan_preemption`: the copy and carried-out plans too.
    with collector_paused(policy.pause_collector):
        with snapshot.lock:
            work = snapshot.copy()
        if policy.scoring.fragmentation_weight:
            work.task_counts()  # counted once for every plan's copy (see `plan_preemption`)
        by_key = {p.key: p for p in pods}
        for binding in result.bindings:  # what this cycle placed holds its room
            request = by_key.get(binding.pod)
            if request is not None and request.key not in work.holdings:
                work.assume(request, work.index[binding.node], binding.gpus)
        lone_groups, lone_pods = _lone(result, pods, groups, _lowest_held(work))
        groups = [*groups, *lone_groups]
        planned = [*pods, *lone_pods]
        plans = []
        for root in _waiting_roots(result, lone_groups, planned, groups):
            plan = plan_preemption(work, root.key, planned, groups, policy, budgets, foreign)
            plans.append(plan)
            if plan.planned:
                _carry_out(work, plan, pods)
        return plans


def _lowest_held(work: Snapshot) -> int | None:
    """The lowest priority of a held pod (what is no pod is never a victim itself)."""
    held = (h.pod.priority for h in work.holdings.values() if h.pod.reserved_for is None)
    return min(held, default=None)


def _lone(
    result: ScheduleResult,
    pods: Sequence[PodRequest],
    groups: Sequence[GroupSpec],
    lowest: int | None,
) -> tuple[list[GroupSpec], list[PodRequest]]:
    """Each group-less pod ``result`` left unschedulable that may preempt someone (``lowest``:
    the lowest priority held) as a unit of one: its group, and the pod as a member of it. A
    pod named like a group of its namespace is left out: its unit's key would name that
    group too."""
    failed = {f.pod for f in result.unschedulable if f.reason is Reason.UNSCHEDULABLE}
    taken = {g.key for g in groups}
    specs: list[GroupSpec] = []
    members: list[PodRequest] = []
    for pod in pods:
        if pod.group is not None or pod.key not in failed or pod.key in taken:
            continue
        never = pod.preemption_policy is PreemptionPolicy.NEVER
        if never or lowest is None or pod.priority <= lowest:
            continue
        taken.add(pod.key)  # a pod listed twice is one unit
        specs.append(
            GroupSpec(
                key=pod.key,
                kind=GroupKind.POD_GROUP,
                created=pod.created,
                priority=pod.priority,
                preemption_policy=pod.preemption_policy,
            )
        )
        members.append(replace(pod, group=pod.key.split("/", 1)[1]))
    return specs, members


def _waiting_roots(
    result: ScheduleResult,
    lone: Sequence[GroupSpec],
    pods: Sequence[PodRequest],
    groups: Sequence[GroupSpec],
) -> list[GroupSpec]:
    failed = {
        d.name
        for d in result.groups
        if d.phase is Phase.UNSCHEDULABLE and d.reason is Reason.UNSCHEDULABLE
    }
    failed.update(g.key for g in lone)
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

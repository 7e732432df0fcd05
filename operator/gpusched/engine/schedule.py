"""The engine's entry point: ``schedule(snapshot, pods, groups, policy) -> ScheduleResult``.

Work is taken in one order — priority (highest first), then gangs already bound below their
minCount (they complete before anything new starts), then age (oldest first), then name —
where a unit is a root group (with everything under it) or a pod without a group. Each unit
is placed completely or not at all on the snapshot and everything is rolled back at the end
(checkpoint and rollback on its journal), so the caller's snapshot is never changed and a unit
that cannot fit holds nothing while later units are placed. Every setting the run reads is
its `Policy`; the snapshot holds none.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from gpusched.api.config import GPU_RESOURCE, NumaPolicy
from gpusched.engine import wording
from gpusched.engine.blockers import node_check
from gpusched.engine.claims import choose_devices
from gpusched.engine.collector import collector_paused
from gpusched.engine.domains import root_domain
from gpusched.engine.gpuset import choose_gpus
from gpusched.engine.gpushape import NodeShape, worst_tier
from gpusched.engine.groups import GroupKind, GroupSpec, GroupTree
from gpusched.engine.pick import pick_node
from gpusched.engine.planner import Planner
from gpusched.engine.policy import Policy
from gpusched.engine.request import PodRequest
from gpusched.engine.result import (
    Attempt,
    Binding,
    ClaimAllocation,
    GroupDecision,
    Phase,
    PodFailure,
    Reason,
    ScheduleResult,
)
from gpusched.engine.scoring import Scoring
from gpusched.engine.snapshot import Holding, Snapshot

TurnObserver = Callable[[str, Snapshot], None]
"""Told before each unit's turn: the unit's key (a root group's, or a group-less pod's) and
the working snapshot as the unit finds it (what was bound plus what earlier units were given).
It must not change the snapshot; ``explain`` copies it to measure hints on."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Unit:
    priority: int
    new: bool
    """Nothing of it is bound below a gang's minCount (see `_units`)."""
    created: float
    key: str
    group: GroupSpec | None
    pod: PodRequest | None


def schedule(
    snapshot: Snapshot,
    pods: Sequence[PodRequest],
    groups: Sequence[GroupSpec],
    policy: Policy,
    observe: TurnObserver | None = None,
    *,
    undo: bool = True,
) -> ScheduleResult:
    """Places pending ``pods`` (and the ``groups`` they belong to) on ``snapshot`` under
    ``policy``, then undoes every change: the caller's snapshot is as before (its journal
    rolled back to where it was, under its lock), and copying it per call is not needed. With
    ``policy.pause_collector`` the cyclic garbage collector is paused meanwhile
    (`collector_paused`: what a decision allocates is freed when it returns). ``undo`` False:
    what was placed stays held on ``snapshot`` (journaled), for a scratch copy the caller
    reads the placement on and then drops, where the rollback of hundreds of pods would be
    wasted work."""
    with snapshot.lock, collector_paused(policy.pause_collector):
        checkpoint = snapshot.checkpoint()
        try:
            return _schedule(snapshot, pods, groups, policy, observe)
        finally:
            if undo:
                snapshot.rollback(checkpoint)


def _schedule(
    work: Snapshot,
    pods: Sequence[PodRequest],
    groups: Sequence[GroupSpec],
    policy: Policy,
    observe: TurnObserver | None,
) -> ScheduleResult:
    scoring = Scoring.for_cycle(policy, work, pods)
    result = ScheduleResult()
    pods, gated = _gated(work, pods, result)
    pods, refused = _refused(pods, result)
    valid, pods = _screen(work, pods, groups, result)
    pods_by_group, loose = _by_group(pods, valid, result)
    # Without groups there is nothing to plan (the planner indexes every holding by group).
    planner = Planner(work, scoring, valid, pods_by_group, gated) if valid else None
    short = planner.below_minimum() if planner is not None else set()
    for unit in _units(valid, pods_by_group, loose, short):
        result.order.append(unit.key)
        if observe is not None:
            observe(unit.key, work)
        if unit.group is not None and planner is not None:
            planner.place(unit.group, root_domain(work))
        elif unit.pod is not None:
            _place_loose(work, scoring, unit.pod, result)
    _collect(work, pods, valid, planner.decisions if planner is not None else {}, result)
    _claims_refused(refused, result)
    return result


# ----- screening bad input ---------------------------------------------------------------------


def _gated(
    snapshot: Snapshot, pods: Sequence[PodRequest], result: ScheduleResult
) -> tuple[list[PodRequest], dict[str, int]]:
    """Takes out the pods that still have scheduling gates, as Kubernetes does before any
    scheduling: each is reported ``SchedulingGated``, naming its gates; the count per group
    goes to the planner, so a gang says it waits for them (they count for nothing meanwhile).
    As in `_screen`, a pod's first listing decides; a pod already held is left to `_screen`
    (which drops it)."""
    ready: list[PodRequest] = []
    gated: dict[str, int] = defaultdict(int)
    first: dict[str, bool] = {}
    """Pod key → whether its first listing is held back here."""
    for pod in pods:
        if pod.key not in first:
            first[pod.key] = pod.gated and pod.key not in snapshot.holdings
        elif first[pod.key]:
            continue  # a later listing of a gated pod: the first one was reported
        if not first[pod.key]:
            ready.append(pod)
            continue
        message = wording.gated(pod.gates)
        result.unschedulable.append(PodFailure(pod.key, Reason.SCHEDULING_GATED, message))
        if pod.group_key is not None:
            gated[pod.group_key] += 1
    return ready, dict(gated)


def _refused(
    pods: Sequence[PodRequest], result: ScheduleResult
) -> tuple[list[PodRequest], dict[str, list[tuple[PodRequest, str]]]]:
    """Takes out the pods whose ResourceClaims cannot be allocated now (`Refusal`), each
    reported with why: ``WaitingForPods`` while a claim is only not ready, else
    ``Unschedulable``. Their groups are decided by them (`_claims_refused`): a gang is not
    placed without the devices of every pod it counts on."""
    ready: list[PodRequest] = []
    refused: dict[str, list[tuple[PodRequest, str]]] = defaultdict(list)
    for pod in pods:
        refusal = pod.devices.refusal if pod.devices is not None else None
        if refusal is None:
            ready.append(pod)
            continue
        reason = Reason.WAITING_FOR_PODS if refusal.waiting else Reason.UNSCHEDULABLE
        result.unschedulable.append(PodFailure(pod.key, reason, refusal.message))
        if pod.group_key is not None:
            refused[pod.group_key].append((pod, refusal.message))
    return ready, dict(refused)


def _claims_refused(
    refused: dict[str, list[tuple[PodRequest, str]]], result: ScheduleResult
) -> None:
    """A group with pods whose claims were refused: pending while they only wait, else
    unschedulable, naming each pod and why."""
    if not refused:
        return
    for index, decision in enumerate(result.groups):
        found = refused.get(decision.name)
        if not found:
            continue
        waits = all(
            p.devices is not None and p.devices.refusal is not None and p.devices.refusal.waiting
            for p, _ in found
        )
        tried = tuple(
            Attempt(domain=None, note=wording.claim_refused(key, why))
            for key, why in sorted((p.key, why) for p, why in found)
        )
        result.groups[index] = dataclasses.replace(
            decision,
            phase=Phase.PENDING if waits else Phase.UNSCHEDULABLE,
            reason=Reason.WAITING_FOR_PODS if waits else Reason.UNSCHEDULABLE,
            message=wording.claims_refused(tried),
            tried=tried,
            attempts=wording.attempt_lines(tried, 0),
        )
    result.unschedulable.sort(key=lambda u: u.pod)


def _screen(
    snapshot: Snapshot,
    pods: Sequence[PodRequest],
    groups: Sequence[GroupSpec],
    result: ScheduleResult,
) -> tuple[list[GroupSpec], list[PodRequest]]:
    """Drops invalid groups (and groups under them) and impossible pods, reporting each."""
    by_key = {g.key: g for g in groups}
    invalid: dict[str, str] = {}
    for group in sorted(groups, key=lambda g: g.key):
        why = _group_problem(group, by_key)
        if why is not None:
            invalid[group.key] = why
            result.groups.append(
                GroupDecision(
                    name=group.key,
                    kind=group.kind.value,
                    phase=Phase.PENDING,
                    reason=Reason.INVALID,
                    message=why,
                )
            )
    valid = [g for g in groups if g.key not in invalid]
    keep = []
    seen: set[str] = set()
    # Whether a request is impossible, per request (a gang's pods share a few).
    impossible: dict[tuple[object, ...], str | None] = {}
    for pod in pods:
        # A pod listed twice, or pending while the snapshot already holds it (a watch that
        # lags a bind), must never be placed twice: the first listing or the holding wins.
        if pod.key in seen or pod.key in snapshot.holdings:
            continue
        seen.add(pod.key)
        request = (tuple(pod.resources.items()), pod.gpus, pod.gpu_milli)
        if request not in impossible:
            impossible[request] = _impossible(snapshot, pod)
        problem = invalid.get(pod.group_key or "") or impossible[request]
        if problem is None:
            keep.append(pod)
        else:
            result.unschedulable.append(PodFailure(pod.key, Reason.INVALID, problem))
    return valid, keep


def _group_problem(group: GroupSpec, by_key: dict[str, GroupSpec]) -> str | None:
    if group.invalid is not None:
        return group.invalid
    seen = {group.key}
    kind = group.kind.value
    parent_key = group.parent
    while parent_key is not None:
        parent = by_key.get(parent_key)
        if parent is None:
            return wording.parent_problem(kind, group.key, "missing", parent_key)
        problem = _parent_problem(parent, seen)
        if problem is not None:
            return wording.parent_problem(kind, group.key, problem, parent_key)
        seen.add(parent.key)
        parent_key = parent.parent
    return None


def _parent_problem(parent: GroupSpec, seen: set[str]) -> wording.ParentProblem | None:
    if parent.kind is not GroupKind.COMPOSITE:
        return "not composite"
    if parent.key in seen:
        return "cycle"
    if parent.invalid is not None:
        return "invalid"
    return None


def _impossible(snapshot: Snapshot, pod: PodRequest) -> str | None:
    """A request no node of this cluster could ever satisfy, even empty. An empty cluster
    makes nothing impossible: nodes may still join."""
    if not snapshot.nodes:
        return None
    for name, amount in pod.resources.items():
        column = snapshot.columns.get(name)
        largest = int(snapshot.largest[column]) if column is not None else 0
        if largest < amount:
            return wording.larger_than_any_node(amount, name, largest)
    most = snapshot.most_gpus
    if pod.gpus > most:
        if pod.devices is not None and pod.devices.extended is None:
            return wording.too_many_devices(pod.gpus, most)
        return wording.larger_than_any_node(pod.gpus, GPU_RESOURCE, most)
    if pod.gpu_milli and most == 0:
        return wording.share_without_gpus(pod.gpu_milli)
    return None


# ----- ordering ---------------------------------------------------------------------------------


def _by_group(
    pods: Sequence[PodRequest], groups: Sequence[GroupSpec], result: ScheduleResult
) -> tuple[dict[str, list[PodRequest]], list[PodRequest]]:
    known = {g.key: g for g in groups}
    by_group: dict[str, list[PodRequest]] = defaultdict(list)
    loose = []
    for pod in pods:
        key = pod.group_key
        if key is None:
            loose.append(pod)
            continue
        group = known.get(key)
        if group is None:
            message = wording.group_not_found(key)
            failure = PodFailure(pod.key, Reason.UNSCHEDULABLE, message, group_missing=True)
            result.unschedulable.append(failure)
        elif group.kind is not GroupKind.POD_GROUP:
            message = wording.pod_in_composite(key)
            result.unschedulable.append(PodFailure(pod.key, Reason.INVALID, message))
        else:
            by_group[key].append(pod)
    return by_group, loose


def _units(
    groups: Sequence[GroupSpec],
    pods_by_group: dict[str, list[PodRequest]],
    loose: Sequence[PodRequest],
    short: Collection[str],
) -> list[_Unit]:
    """The units in the order they are placed. ``short``: the gangs bound below their
    minCount; a unit holding one goes before every other unit of its priority, so the room
    freed in its domain is its own rather than a newcomer's."""
    tree = GroupTree(groups)
    units = []
    for group in tree.roots():
        members = tree.descendants(group)
        pods = [p for g in members for p in pods_by_group.get(g.key, [])]
        priority = max((p.priority for p in pods), default=0)
        created = min([group.created, *(p.created for p in pods)])
        started = any(g.key in short for g in members)
        units.append(
            _Unit(
                priority=priority,
                new=not started,
                created=created,
                key=group.key,
                group=group,
                pod=None,
            )
        )
    units.extend(
        _Unit(priority=p.priority, new=True, created=p.created, key=p.key, group=None, pod=p)
        for p in loose
    )
    units.sort(key=lambda u: (-u.priority, u.new, u.created, u.key))
    return units


# ----- pods without a group ------------------------------------------------------------------


def _place_loose(
    snapshot: Snapshot, scoring: Scoring, pod: PodRequest, result: ScheduleResult
) -> None:
    choice = pick_node(snapshot, pod, scoring)
    if choice is None:
        nodes = node_check(snapshot, pod, range(len(snapshot.nodes)), scoring.numa)
        message = wording.none_available(len(snapshot.nodes), nodes)
        result.unschedulable.append(PodFailure(pod.key, Reason.UNSCHEDULABLE, message))
        return
    snapshot.assume(pod, choice.node, choice.gpus)


# ----- the result ------------------------------------------------------------------------------


def _collect(
    snapshot: Snapshot,
    pods: Sequence[PodRequest],
    groups: Sequence[GroupSpec],
    decisions: dict[str, GroupDecision],
    result: ScheduleResult,
) -> None:
    for pod in sorted(pods, key=lambda p: p.key):
        holding = snapshot.holdings.get(pod.key)
        if holding is not None:
            result.bindings.append(_binding(snapshot, holding))
    for group in sorted(groups, key=lambda g: g.key):
        decision = decisions.get(group.key)
        if decision is not None:
            result.groups.append(decision)
    result.groups.sort(key=lambda d: d.name)
    decided = {d.name: d for d in result.groups}
    reported = {u.pod for u in result.unschedulable}
    for pod in sorted(pods, key=lambda p: p.key):
        if pod.key in snapshot.holdings or pod.key in reported or pod.group is None:
            continue
        result.unschedulable.append(_left_pending(pod, decided.get(pod.group_key or "")))
    result.unschedulable.sort(key=lambda u: u.pod)


def _left_pending(pod: PodRequest, decision: GroupDecision | None) -> PodFailure:
    """Why a pod of a group stays pending: its group's reason, or, in a placed group, why
    the pod itself did not fit beside the others."""
    if decision is None:  # every group the planner reached has a decision; a guard only
        return PodFailure(pod.key, Reason.UNSCHEDULABLE, wording.GROUP_NOT_ATTEMPTED)
    if decision.phase is not Phase.SCHEDULED:
        return PodFailure(pod.key, decision.reason, decision.message)
    why = decision.left_out.get(pod.key, wording.NOT_BESIDE_GROUP)
    return PodFailure(pod.key, Reason.UNSCHEDULABLE, why)


def _binding(snapshot: Snapshot, holding: Holding) -> Binding:
    info = snapshot.nodes[holding.node]
    tier = best = None
    if len(holding.gpus) > 1 and holding.pod.gpus > 1:
        tier, best = _link_tiers(snapshot, info.shape, holding.gpus)
    notes: tuple[str, ...] = ()
    if snapshot.gpu_notes:
        base = int(snapshot.gpu_offset[holding.node])
        notes = tuple(
            wording.gpu_note(g, snapshot.gpu_notes[base + g])
            for g in holding.gpus
            if base + g in snapshot.gpu_notes
        )
    devices: tuple[ClaimAllocation, ...] = ()
    if holding.pod.devices is not None:
        chosen = choose_devices(holding.pod.devices, info.devices, holding.gpus)
        # A GPU the node does not publish is held for good (never chosen): nothing to say.
        devices = chosen if not isinstance(chosen, str) else ()
    return Binding(
        pod=holding.pod.key,
        node=info.name,
        gpus=holding.gpus,
        link_tier=tier,
        best_tier=best,
        notes=notes,
        devices=devices,
    )


def _link_tiers(
    snapshot: Snapshot, shape: NodeShape, gpus: tuple[int, ...]
) -> tuple[str, str | None]:
    """The names of a GPU set's worst link and of the best worst link any set of its size
    has on an empty node of ``shape``: memoised with the static facts, per shape and set (a
    gang's bindings are hundreds of equal sets on nodes of a few shapes)."""
    memo: dict[tuple[NodeShape, tuple[int, ...]], tuple[str, str | None]]
    memo = snapshot.derived.setdefault("link tiers", {})
    tiers = memo.get((shape, gpus))
    if tiers is None:
        full = (1 << shape.gpu_count) - 1
        offered = choose_gpus(shape, full, len(gpus), NumaPolicy.NONE)
        best = offered.best_possible_tier.name if offered is not None else None
        tiers = memo[(shape, gpus)] = (worst_tier(shape, gpus).name, best)
    return tiers

"""The engine's fast paths decide exactly as the slow ones.

`schedule` works on the caller's snapshot in place and rolls back, and keeps its caches (tie-break
ranks, FGD's weight-free rows, the task counts of the target workload) across calls and copies;
`build_snapshot` loads bound pods in one pass. Each story replays the same work twice — warm (the
caches as the operator keeps them) and cold (`Snapshot.copy(cold=True)` per call: a copy with no
cache, which recomputes everything as a newly built snapshot does) — and compares whole results.
A cache that misses a change (a node whose stamp did not move, a workload weighed with the wrong
columns, a count not taken back on rollback) makes a later decision differ, and the story names
the first pod where it does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpusched.api.config import SchedulerConfig
from gpusched.api.k8s import Node
from gpusched.engine.build import SnapshotCache, build_snapshot
from gpusched.engine.fit import feasible_nodes
from gpusched.engine.groups import GroupSpec
from gpusched.engine.health import GpuSample
from gpusched.engine.pick import pick_node
from gpusched.engine.policy import Policy
from gpusched.engine.request import PodRequest
from gpusched.engine.result import ScheduleResult
from gpusched.engine.schedule import schedule
from gpusched.engine.scores import fragmentation_score
from gpusched.engine.scoring import Scoring, cycle_workload
from gpusched.engine.snapshot import Snapshot
from gpusched.engine.workload import target_workload
from gpusched.offline.openb import load_nodes, load_pods
from testing.engine import RACK, ZONE, bound, cluster, composite, gang, members, node, pod

OPENB = Path(__file__).resolve().parents[3] / "bench" / "data" / "openb"
REPLAYED = 400
"""openb pods replayed one schedule() call each: past the point where the target workload's
task types settle, and where shares, whole GPUs and 8-GPU pods have all come by."""


def _state(snapshot: Snapshot) -> tuple[object, ...]:
    """Everything a decision reads from a snapshot's usage."""
    arrays = (
        snapshot.used,
        snapshot.gpu_free,
        snapshot.gpu_pods,
        snapshot.free_whole,
        snapshot.numa_free,
        snapshot.max_numa_free,
        snapshot.max_share,
        snapshot.gpu_allocated,
    )
    holdings = [
        (k, h.node, h.gpus, h.milli_per_gpu, h.vector) for k, h in snapshot.holdings.items()
    ]
    return (
        tuple(a.tobytes() for a in arrays),
        tuple(snapshot.free_mask),
        tuple(sorted((g, tuple(sorted(a.items()))) for g, a in snapshot.gpu_apps.items())),
        tuple(holdings),
        tuple(sorted((n, tuple(notes)) for n, notes in snapshot.node_notes.items())),
    )


def _first_difference(warm: list[ScheduleResult], cold: list[ScheduleResult]) -> str:
    for step, (a, b) in enumerate(zip(warm, cold, strict=True)):
        if a != b:
            warm_side, cold_side = a.bindings or a.unschedulable, b.bindings or b.unschedulable
            return f"call {step}: warm {warm_side} != cold {cold_side}"
    return ""


@pytest.fixture(scope="module")
def openb() -> tuple[list[Node], list[PodRequest]]:
    nodes = load_nodes(OPENB / "openb_node_list_gpu_node.csv")
    pods = load_pods(OPENB / "openb_pod_list_default.csv")[:REPLAYED]
    return nodes, pods


def test_openb_one_pod_per_call_decides_as_a_cold_snapshot(
    openb: tuple[list[Node], list[PodRequest]],
) -> None:
    """The operator's loop: one pending pod a cycle, its binding applied to the kept snapshot.
    Warm, the snapshot keeps its caches across calls; cold, every call gets a copy with none.
    Every binding, failure and message is the same, and schedule() leaves the snapshot as it
    found it."""
    nodes, pods = openb
    warm_snapshot, cold_snapshot = build_snapshot(nodes), build_snapshot(nodes)
    warm, cold = [], []
    for request in pods:
        before = _state(warm_snapshot)
        warm.append(schedule(warm_snapshot, [request], (), Policy()))
        assert _state(warm_snapshot) == before, f"schedule({request.key}) changed the snapshot"
        cold.append(schedule(cold_snapshot.copy(cold=True), [request], (), Policy()))
        for snapshot, result in ((warm_snapshot, warm[-1]), (cold_snapshot, cold[-1])):
            for binding in result.bindings:
                snapshot.assume(request, snapshot.index[binding.node], binding.gpus)
    assert warm == cold, _first_difference(warm, cold)
    assert sum(len(r.bindings) for r in warm) == REPLAYED, "every pod should fit at this load"


def test_the_cycle_workload_is_the_target_workload_of_pending_and_held_pods(
    openb: tuple[list[Node], list[PodRequest]],
) -> None:
    """Task counts kept through assume, forget and rollback give the workload that counting
    every pod again gives, weights included."""
    nodes, pods = openb
    snapshot = build_snapshot(nodes)
    snapshot.task_counts()  # counted now, kept up to date from here on
    for i, request in enumerate(pods[:200]):
        snapshot.assume(request, i % len(nodes), ())
    mark = snapshot.checkpoint()
    for request in pods[200:300]:
        snapshot.assume(request, 0, ())
    for request in pods[:50]:
        snapshot.forget(request.key)
    snapshot.rollback(mark)
    pending = pods[300:310]
    want = target_workload([*pending, *(h.pod for h in snapshot.holdings.values())])
    assert cycle_workload(snapshot, pending) == want


#        z1                          z2
#    r1      r2      r3          r4      r5
#   4 x a100x8 each, half of r1 and r4 busy
def _gang_cluster() -> Snapshot:
    zones = {
        "z1": {"r1": ["a100x8"] * 4, "r2": ["a100x8"] * 4, "r3": ["a100x8"] * 4},
        "z2": {"r4": ["a100x8"] * 4, "r5": ["a100x8"] * 4},
    }
    busy = [
        bound(pod(f"busy-{n}", gpus=4), name, range(4))
        for n, name in enumerate(["node-a", "node-b", "node-m", "node-n"])
    ]
    busy.append(bound(pod("share", milli=300, app="x"), "node-e", [7]))
    return cluster(zones, bound=busy)


def _two_level(name: str) -> tuple[list[PodRequest], list[GroupSpec]]:
    groups = [composite(name, 2, topology=ZONE)]
    pods = []
    for child in ("a", "b"):
        groups.append(gang(f"{name}-{child}", 3, topology=RACK, parent=name))
        pods += members(f"{name}-{child}", 3, gpus=8, cpu=8000, group=f"{name}-{child}")
    return pods, groups


def test_gangs_decide_as_on_a_cold_snapshot_call_after_call() -> None:
    """A two-level gang, scheduled three times on the kept snapshot (its caches hold the
    rolled-back trial of the call before), then applied, then a second gang beside it and a
    single pod: each decision equals the one a cold copy makes."""
    snapshot = _gang_cluster()
    first_pods, first_groups = _two_level("llm")
    results = [schedule(snapshot, first_pods, first_groups, Policy()) for _ in range(3)]
    want = schedule(snapshot.copy(cold=True), first_pods, first_groups, Policy())
    assert results == [want] * 3
    assert len(want.bindings) == 6, f"the first gang should be placed: {want.groups}"
    by_key = {p.key: p for p in first_pods}
    for binding in want.bindings:
        snapshot.assume(by_key[binding.pod], snapshot.index[binding.node], binding.gpus)
    second_pods, second_groups = _two_level("next")
    loose = [pod("one", gpus=1), pod("slice", milli=250, app="x")]
    for pods, groups in ((second_pods, second_groups), (loose, [])):
        got = schedule(snapshot, pods, groups, Policy())
        assert got == schedule(snapshot.copy(cold=True), pods, groups, Policy())


def test_a_schedule_that_keeps_its_placement_holds_exactly_its_bindings() -> None:
    """`schedule(undo=False)` (a preemption trial's scratch copy) decides as `schedule` does
    and leaves what it placed held, journaled: the snapshot is the one a caller assuming each
    binding would have, and a rollback to the checkpoint before it restores the snapshot."""
    pods, groups = _two_level("llm")
    kept, applied = _gang_cluster(), _gang_cluster()
    before, mark = _state(kept), kept.checkpoint()
    want = schedule(applied, pods, groups, Policy())
    got = schedule(kept, pods, groups, Policy(), undo=False)
    assert got == want
    assert len(got.bindings) == 6, f"the gang should be placed: {got.groups}"
    by_key = {p.key: p for p in pods}
    for binding in want.bindings:
        applied.assume(by_key[binding.pod], applied.index[binding.node], binding.gpus)
    assert _state(kept)[:3] == _state(applied)[:3], "usage, free GPUs and apps as if assumed"
    assert kept.holdings.keys() == applied.holdings.keys()
    assert [added for added, _ in kept.journal_since(mark)] == [True] * 6
    kept.rollback(mark)
    assert _state(kept) == before


def test_loading_bound_pods_at_once_matches_adding_them_one_by_one() -> None:
    """`build_snapshot` loads every bound pod in one pass; the snapshot cache adds later pods
    one by one. Both reach the same usage, holdings and notes, including pods without a
    gpusched.io/gpus annotation (given the highest free GPUs), shares, a pod on an unknown
    node and a pod listed twice."""
    nodes = [node(f"n{i}", "a100x8") for i in range(6)]
    pods = [bound(pod(f"w{i}", gpus=1 + i % 3), f"n{i % 6}", None) for i in range(10)]
    pods += [bound(pod(f"s{i}", milli=400, app="a"), f"n{i % 4}") for i in range(6)]
    pods += [bound(pod("pinned", gpus=2), "n5", [0, 3]), bound(pod("gone", gpus=1), "nowhere")]
    pods += [bound(pod("cpu", cpu=8000), "n2"), pods[0]]
    at_once = build_snapshot(nodes, pods)
    cache = SnapshotCache()
    build_snapshot(nodes, pods[:3], cache=cache)
    one_by_one = build_snapshot(nodes, pods, cache=cache)
    assert _state(one_by_one) == _state(at_once)
    assert np.array_equal(at_once.stamp > 0, at_once.used.any(axis=1)), "loaded nodes get stamps"


def _mixed_cluster() -> Snapshot:
    """Nodes of every GPU layout (one NUMA node or four, 4 GPUs, none, hot GPUs), holding
    whole GPUs in and out of order, shares beside each other on one GPU, CPU-only pods."""
    nodes = [
        node("n0", "a100x8"),
        node("n1", "hgxa100x8"),
        node("n2", "h100x4"),
        node("n3", "cpu"),
        node("n4", "gpu8"),
    ]
    too_hot = GpuSample(temperature_c=95.0, fb_free_mib=80000.0, fb_used_mib=0.0)
    hot = {("n4", 2): too_hot, ("n2", 3): too_hot}
    pods = [
        bound(pod("whole", gpus=8), "n0", range(8)),
        bound(pod("apart", gpus=3), "n1", [0, 3, 6]),
        bound(pod("pair", gpus=2), "n1", [1, 2]),
        bound(pod("two", gpus=2), "n2", range(2)),
        bound(pod("slice-a", milli=500), "n2", [2]),
        bound(pod("slice-b", milli=400), "n2", [2]),
        bound(pod("cpu-only", cpu=8000), "n3"),
        bound(pod("cpu-beside", cpu=4000), "n0"),
        bound(pod("share-a", milli=300, app="x"), "n4", [2]),
        bound(pod("share-b", milli=500, app="x"), "n4", [2]),
        bound(pod("share-c", milli=250, app="y"), "n4", [5]),
        bound(pod("rest", gpus=4), "n4", [0, 1, 6, 7]),
    ]
    return cluster(nodes=nodes, bound=pods, telemetry=hot)


@pytest.mark.parametrize(
    "keys",
    [
        ["whole", "apart", "slice-b", "cpu-only", "share-a", "share-b", "share-c", "rest"],
        ["share-b", "pair", "nobody", "pair", "cpu-beside", "slice-b"],
        ["whole", "cpu-beside", "apart", "pair", "two", "slice-a", "slice-b", "cpu-only"],
    ],
    ids=["most of them", "a key unknown and one twice", "nodes emptied"],
)
def test_forgetting_many_pods_at_once_matches_forgetting_them_one_by_one(keys: list[str]) -> None:
    """`Snapshot.forget_many` (the planner's set-asides) reaches the usage, GPU counters,
    holdings, task counts and journal that `forget` reaches pod by pod; every node it
    touched gets a stamp never seen before, and a rollback undoes it all."""
    keys = [f"default/{k}" for k in keys]
    snapshot = _mixed_cluster()
    snapshot.task_counts()
    before, mark = _state(snapshot), snapshot.checkpoint()
    one_by_one, at_once = snapshot.copy(), snapshot.copy()
    for key in keys:
        one_by_one.forget(key)
    gone = at_once.forget_many(keys)
    assert _state(at_once) == _state(one_by_one)
    assert at_once.journal_since(mark) == one_by_one.journal_since(mark)
    assert [h.pod.key for h in gone] == list(dict.fromkeys(k for k in keys if "nobody" not in k))
    assert at_once.task_counts().counts == one_by_one.task_counts().counts
    touched = sorted({h.node for h in gone})
    moved = np.flatnonzero(at_once.stamp != snapshot.stamp).tolist()
    assert moved == touched
    assert len(set(at_once.stamp[touched].tolist())) == len(touched)
    assert not set(at_once.stamp[touched].tolist()) & set(one_by_one.stamp.tolist())
    at_once.rollback(mark)
    one_by_one.rollback(mark)
    assert _state(at_once) == _state(one_by_one)
    assert _state(at_once)[:3] == before[:3], "usage, free GPUs and apps as before"
    assert at_once.holdings == snapshot.holdings


def test_the_fragmentation_score_is_the_same_with_and_without_cached_rows() -> None:
    """FGD's default score on a kept snapshot whose workload changes every call (a pod more
    each time) equals the score on a cold copy, for every feasible node."""
    snapshot = build_snapshot(load_nodes(OPENB / "openb_node_list_gpu_node.csv")[:300])
    for step, request in enumerate(load_pods(OPENB / "openb_pod_list_default.csv")[:300]):
        scoring = Scoring(Policy(), cycle_workload(snapshot, [request]))
        nodes = feasible_nodes(snapshot, request, scoring.numa)
        warm = fragmentation_score(snapshot, request, nodes, scoring)
        cold = fragmentation_score(snapshot.copy(cold=True), request, nodes, scoring)
        assert np.array_equal(warm, cold), f"step {step}, {request.key}"
        choice = pick_node(snapshot, request, scoring)
        if choice is not None:
            snapshot.assume(request, choice.node, choice.gpus)


def test_copies_sharing_the_fragmentation_cache_score_as_cold_ones_node_by_node() -> None:
    """FGD's rows are brought up to date only for the nodes asked about. Two copies of one
    snapshot share the cache and drift apart, each asked about a window of nodes that moves
    (as a gang asks about one rack), while the workload changes every call (a pod more each
    time, which adds task columns to rows made earlier): every score equals a cold copy's,
    including a node whose rows the other copy brought to its own usage meanwhile."""
    base = build_snapshot(load_nodes(OPENB / "openb_node_list_gpu_node.csv")[:120])
    copies = [base.copy(), base.copy()]
    for step, request in enumerate(load_pods(OPENB / "openb_pod_list_default.csv")[:240]):
        snapshot = copies[step % 2]
        scoring = Scoring(Policy(), cycle_workload(snapshot, [request]))
        window = np.zeros(len(snapshot.nodes), dtype=np.bool_)
        window[(step * 7) % 100 : (step * 7) % 100 + 40] = True
        nodes = feasible_nodes(snapshot, request, scoring.numa, window)
        warm = fragmentation_score(snapshot, request, nodes, scoring)
        cold = fragmentation_score(snapshot.copy(cold=True), request, nodes, scoring)
        assert np.array_equal(warm, cold), f"step {step}, {request.key}"
        choice = pick_node(snapshot, request, scoring, window)
        if choice is not None:
            snapshot.assume(request, choice.node, choice.gpus)


def _running_pod(**status: object) -> dict[str, object]:
    return {
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "namespace": "default",
            "uid": "u1",
            "resourceVersion": str(status.pop("version", "1")),
            "labels": dict(status.pop("labels", {})),  # type: ignore[call-overload]
        },
        "spec": {
            "schedulerName": "gpusched",
            "nodeName": "n1",
            "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "1"}}}],
        },
        "status": {"phase": status.pop("phase", "Running"), **status},
    }


def test_a_pod_event_that_changes_nothing_read_costs_no_parse(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The kubelet's status heartbeats (conditions, container states, a new resourceVersion)
    reach the scheduler as MODIFIED events: they are recognised without a pydantic parse and
    change nothing. A new label or phase is parsed, as before."""
    from gpusched.scheduler import state as state_module

    parsed: list[str] = []
    real = state_module.parse_pod

    def counting(body: Any) -> Any:
        parsed.append(body["metadata"]["resourceVersion"])
        return real(body)

    monkeypatch.setattr(state_module, "parse_pod", counting)
    state = state_module.ClusterState()
    state.upsert_pod(_running_pod())
    generation = state.generation
    state.upsert_pod(_running_pod(version=2, conditions=[{"type": "Ready", "status": "True"}]))
    state.upsert_pod(_running_pod(version=3, containerStatuses=[{"name": "c", "ready": True}]))
    assert (parsed, state.generation) == (["1"], generation)
    state.upsert_pod(_running_pod(version=4, labels={"team": "a"}))
    state.upsert_pod(_running_pod(version=5, labels={"team": "a"}, phase="Succeeded"))
    assert parsed == ["1", "4", "5"]
    assert list(state.bound()) == [], "the finished pod holds nothing"


def test_a_bound_pod_sent_again_as_an_equal_object_is_compared_once_and_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bound pod's MODIFIED event that changes nothing the engine reads makes a new but
    equal holding: the cache keeps the pod held and remembers the new object, so that later
    cycles know it by identity instead of comparing the two again; a changed one is forgotten
    and assumed anew. Either way the snapshot is what a cold build shows."""
    from gpusched.engine.snapshot import BoundPod

    compared: list[str] = []
    real_eq = BoundPod.__eq__

    def counting(self: BoundPod, other: object) -> bool:
        compared.append(self.pod.key)
        return real_eq(self, other)

    monkeypatch.setattr(BoundPod, "__eq__", counting)
    nodes = [node("node-a"), node("node-b")]
    first = bound(pod("train", gpus=2), "node-a", [0, 1])
    other = bound(pod("serve", gpus=1), "node-b", [3])
    cache, config = SnapshotCache(), SchedulerConfig()
    build_snapshot(nodes, [first, other], config=config, cache=cache)
    again = bound(pod("train", gpus=2), "node-a", [0, 1])  # equal, not the same object
    for _ in range(3):
        warm = build_snapshot(nodes, [again, other], config=config, cache=cache)
    assert compared == ["default/train"], "the equal pod was compared again in later cycles"
    assert _state(warm) == _state(build_snapshot(nodes, [again, other]))

    moved = bound(pod("train", gpus=2), "node-a", [4, 5])
    warm = build_snapshot(nodes, [moved, other], config=config, cache=cache)
    # forgotten and assumed anew: held after the other pod now, as a cold build in that order
    assert _state(warm) == _state(build_snapshot(nodes, [other, moved]))


# ----- the change feed: a cache fed only what changed holds what a cold build holds ---------

FEED_NODES = ("a", "b")
FEED_PODS = ("p0", "p1", "p2", "p3", "p4", "p5")
FEED_SHAPES = ("pending", "foreign", "bound", "bound-moved", "bound-unnamed", "finished")


def _feed_pod(name: str, shape: str, where: str, uid: int) -> dict[str, Any]:
    from testing.manifests import pod as manifest

    kind: dict[str, Any] = {"uid": f"{name}-{uid}"}
    if shape == "pending":
        return manifest(name, 1, **kind)
    if shape == "foreign":
        # 7 GPUs assumed without a name: GPUs one of ours names later move its assumption
        return manifest(name, 7, node=where, scheduler="default-scheduler", **kind)
    if shape == "bound-unnamed":
        return manifest(name, 1, node=where, **kind)
    if shape == "finished":
        return manifest(name, 1, node=where, at=[1], phase="Succeeded", **kind)
    at = [0] if shape == "bound" else [2, 3]
    return manifest(name, len(at), node=where, at=at, **kind)


def _feed_node(name: str, variant: int) -> dict[str, Any]:
    """Node ``name``: 0 plain, 1 a heartbeat of it (an equal object), 2 relabelled, 3 with a
    kubelet's record of the GPUs it gave (``gpusched.io/gpus-actual``) that differs from
    gpusched's choice."""
    from gpusched.api.assignments import ACTUAL_GPUS_ANNOTATION
    from testing.manifests import node as manifest

    if variant == 2:
        return manifest(name, labels={"team": "x"})
    if variant == 3:
        record = json.dumps({f"default/{pod}": [5 + i % 3] for i, pod in enumerate(FEED_PODS)})
        return manifest(name, annotations={ACTUAL_GPUS_ANNOTATION: record})
    return manifest(name)


feed_steps = st.lists(
    st.one_of(
        st.tuples(
            st.just("upsert"),
            st.sampled_from(FEED_PODS),
            st.sampled_from(FEED_SHAPES),
            st.sampled_from(FEED_NODES),
            st.integers(0, 1),
        ),
        st.tuples(st.just("delete"), st.sampled_from(FEED_PODS)),
        st.tuples(st.just("node"), st.sampled_from(FEED_NODES), st.integers(0, 3)),
        st.tuples(st.just("drop-node"), st.sampled_from(FEED_NODES)),
        st.tuples(st.just("reserve"), st.sampled_from(FEED_PODS), st.sampled_from(FEED_NODES)),
        st.tuples(st.just("release"), st.sampled_from(FEED_PODS)),
        st.tuples(st.just("confirm"), st.sampled_from(FEED_PODS)),
        st.tuples(
            st.just("nominate"),
            st.sampled_from(("q0", "q1")),
            st.sampled_from(FEED_PODS),
            st.sampled_from(FEED_NODES),
        ),
        st.tuples(st.just("unnominate")),
        st.tuples(st.just("cycle")),
    ),
    max_size=40,
)


def _feed_apply(state: Any, step: tuple[Any, ...]) -> None:
    from gpusched.engine.snapshot import BoundPod
    from gpusched.scheduler.ledger import Release
    from gpusched.scheduler.records import Nomination

    verb, *rest = step
    if verb == "cycle":
        return
    if verb == "unnominate":
        state.ledger.release_nominations(Release.PLAN_STALE)
        return
    if verb == "nominate":  # room for one pod, made by evicting another (its GPUs promised)
        preemptor, victim, where = rest
        record = state.pods.get(f"default/{victim}")
        request = pod(preemptor, gpus=1)
        state.ledger.nominate(
            Nomination(
                root=request.key,
                pods={request.key: f"{preemptor}-n"},
                holdings=(BoundPod(request, where, (6,)),),
                victims={record.key: record.uid} if record is not None else {},
                since=0.0,
            )
        )
        return
    if verb == "node":
        state.upsert_node(_feed_node(rest[0], rest[1]))
        return
    if verb == "drop-node":
        state.delete_node(rest[0])
        return
    key = f"default/{rest[0]}"
    if verb == "upsert":
        name, shape, where, uid = rest
        state.upsert_pod(_feed_pod(name, shape, where, uid))
    elif verb == "delete":
        state.delete_pod(key)
    elif verb == "reserve":  # a decision for a pending pod, before its bind
        if key not in state.ledger.reservations:
            state.upsert_pod(_feed_pod(rest[0], "pending", rest[1], 0))
        state.ledger.reserve(key, rest[1], (4,))
    elif (reservation := state.ledger.reservations.get(key)) is not None:
        if verb == "release":
            state.ledger.release(key, Release.BIND_REFUSED, only=reservation)
        else:
            state.confirm(key, reservation)


def _usage(snapshot: Snapshot) -> tuple[object, ...]:
    """`_state` with the holdings in key order: a fed cache holds a pod that changed after
    those that did not, where a cold build holds them in the watch's order."""
    arrays, mask, apps, holdings, notes = _state(snapshot)
    return arrays, mask, apps, tuple(sorted(holdings)), notes  # type: ignore[type-var]


@settings(max_examples=300, deadline=None)
@given(feed_steps)
@example([("upsert", "p0", "bound", "a", 0), ("node", "a", 3), ("node", "a", 0)])
@example([("upsert", "p1", "foreign", "b", 0), ("upsert", "p2", "bound-moved", "b", 0)])
@example([("upsert", "p0", "bound", "a", 0), ("nominate", "q0", "p0", "a"), ("unnominate",)])
@example([("reserve", "p0", "a"), ("confirm", "p0"), ("delete", "p0")])
def test_a_cache_fed_only_what_changed_holds_what_a_cold_build_holds(
    history: list[Any],
) -> None:
    """Pods bound, moved, finished, deleted, foreign ones whose GPUs are assumed, our
    reservations and binds, nodes relabelled, gone, or telling other GPUs than we chose: after
    each step the snapshot built from the feed (only the keys that changed) is the snapshot a
    cold build makes from every bound pod, and a probe pod is placed the same on both."""
    from gpusched.scheduler.assignments import ActualAssignments
    from gpusched.scheduler.feed import BoundFeed
    from gpusched.scheduler.state import ClusterState

    state = ClusterState()
    for name in FEED_NODES:
        state.upsert_node(_feed_node(name, 0))
    feed, actual, cache = BoundFeed(state), ActualAssignments(), SnapshotCache()
    config, probe = SchedulerConfig(), pod("probe", gpus=2)
    incremental = 0
    for step, event in enumerate(history):
        _feed_apply(state, event)
        changes = feed.take(state.nodes, actual, ())
        before = cache._snapshot
        fed = build_snapshot(state.nodes.values(), changes, config=config, cache=cache)
        incremental += fed is before and changes.changed is not None
        everything, _ = ActualAssignments().apply(state.nodes, state.bound())
        cold = build_snapshot(state.nodes.values(), everything)
        assert _usage(fed) == _usage(cold), f"step {step}: {event}"
        assert schedule(fed, [probe], [], Policy()) == schedule(cold, [probe], [], Policy()), (
            f"step {step}: {event}"
        )
    if any(verb in ("upsert", "delete") for verb, *_ in history[1:]) and not any(
        verb in ("node", "drop-node") for verb, *_ in history
    ):
        assert incremental, "no step applied the changed keys alone"


def test_changes_since_another_sync_are_not_applied_alone() -> None:
    """`BoundChanges` name the keys changed since their feed's previous answer: a cache
    brought up to date some other way in between (pods given whole) reads every pod of the
    next answer rather than applying its keys to a snapshot they were not measured against."""
    from gpusched.engine.build import BoundChanges

    nodes, config = [node("node-a"), node("node-b")], SchedulerConfig()
    train = bound(pod("train", gpus=2), "node-a", [0, 1])
    serve = bound(pod("serve", gpus=1), "node-b", [3])
    first, second = object(), object()
    cache = SnapshotCache()
    build_snapshot(
        nodes, BoundChanges({"default/train": train}, None, None, first), config=config, cache=cache
    )
    build_snapshot(nodes, [serve], config=config, cache=cache)  # another way in: train forgotten
    pods = {"default/train": train, "default/serve": serve}
    after = BoundChanges(pods, ["default/serve"], first, second)  # train unchanged, by the feed
    warm = build_snapshot(nodes, after, config=config, cache=cache)
    assert _usage(warm) == _usage(build_snapshot(nodes, [train, serve]))

"""The scheduling service without an API server: a fake `ClusterApi` that records calls and
fails on demand, a fake clock, and the real state, engine, ledger, status and Events.

The end-to-end stories over HTTP are in tests/integration/test_operator_stories.py; these are
the cases that need exact control of timing and failures."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from gpusched.api.config import load_config
from gpusched.engine.groups import GroupKind
from gpusched.engine.health import GpuSample
from gpusched.scheduler import metrics
from gpusched.scheduler.factory import build_scheduler
from gpusched.scheduler.ports import ApiError, Listing
from gpusched.scheduler.service import Scheduler
from gpusched.scheduler.state import ClusterState
from testing.clock import Clock
from testing.fakes import FakeApi
from testing.manifests import node, pod, pod_group


def service(api: FakeApi, clock: Clock) -> Scheduler:
    config = load_config(
        {"operator": {"batchWindowSeconds": 0, "initialBackoffSeconds": 1, "maxBackoffSeconds": 8}}
    )
    return build_scheduler(config, ClusterState(), api, clock=clock)


async def run_cycle(scheduler: Scheduler) -> None:
    await scheduler.cycle()
    await scheduler.settle()
    await scheduler.reporter.flush()


def bound_to(api: FakeApi) -> dict[str, str]:
    return {key: node for key, node, _ in api.binds}


# ----- the reservation ledger ---------------------------------------------------------------


def test_a_reservation_counts_until_the_watch_shows_the_pod_bound() -> None:
    state = ClusterState()
    state.upsert_node(node("a"))
    state.upsert_pod(pod("p", 2))
    reservation = state.ledger.reserve("default/p", "a", (0, 1))
    assert reservation is not None
    assert [b.pod.key for b in state.bound()] == ["default/p"]
    assert state.pending() == []
    state.upsert_pod(pod("p", 2, node="a", annotations={"gpusched.io/gpus": "0,1"}))
    assert state.ledger.reservations == {}
    assert [(b.pod.key, b.gpus) for b in state.bound()] == [("default/p", (0, 1))]


@pytest.mark.parametrize(
    ("story", "change"),
    [
        ("the pod was deleted", lambda s: s.delete_pod("default/p")),
        ("another scheduler bound it", lambda s: s.upsert_pod(pod("p", 2, node="b"))),
        ("the node is gone", lambda s: s.delete_node("a")),
    ],
)
def test_no_reservation_for_a_pod_that_changed_while_the_engine_ran(
    story: str, change: Any
) -> None:
    state = ClusterState()
    state.upsert_node(node("a"))
    state.upsert_node(node("b"))
    state.upsert_pod(pod("p", 2))
    change(state)
    assert state.ledger.reserve("default/p", "a", (0, 1)) is None, story
    assert state.ledger.reservations == {}


def test_a_pod_replaced_under_the_same_name_drops_the_old_reservation() -> None:
    state = ClusterState()
    state.upsert_node(node("a"))
    state.upsert_pod(pod("p", 2))
    state.ledger.reserve("default/p", "a", (0, 1))
    state.upsert_pod(pod("p", 2, uid="uid-new"))
    assert state.ledger.reservations == {}
    assert [r.key for r in state.pending()] == ["default/p"]


# ----- binding ---------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_bind_answered_500_keeps_its_room_and_is_sent_again_to_the_same_gpus() -> None:
    # One 2-GPU node; q (younger) waits for the same GPUs while p's bind is retried.
    api, clock = FakeApi(), Clock()
    scheduler = service(api, clock)
    scheduler.state.upsert_node(node("a", gpus=2))
    scheduler.state.upsert_pod(pod("p", 2))
    scheduler.state.upsert_pod(pod("q", 2, created="2099-01-01T00:00:00Z"))
    api.failures["default/p"] = [ApiError(500, "etcd timeout"), ApiError(500, "etcd timeout")]
    await run_cycle(scheduler)
    clock.now += 1.0
    await run_cycle(scheduler)
    assert api.binds == []
    assert list(scheduler.state.ledger.reservations) == ["default/p"]
    assert [r.key for r in scheduler.state.pending()] == ["default/q"]
    assert any(
        e["message"] == "Binding rejected: etcd timeout (sent again, same node and GPUs)"
        for e in api.events
    )
    clock.now += 2.0  # the second retry's backoff
    await run_cycle(scheduler)
    assert api.binds == [("default/p", "a", {"gpusched.io/gpus": "0,1"})]


@pytest.mark.asyncio
async def test_a_refused_bind_releases_its_room_at_once_and_the_pod_is_bound_on_retry() -> None:
    api, clock = FakeApi(), Clock()
    scheduler = service(api, clock)
    scheduler.state.upsert_node(node("a"))
    scheduler.state.upsert_pod(pod("p", 2))
    api.failures["default/p"] = [ApiError(422, "spec.nodeName: Invalid value")]
    await run_cycle(scheduler)
    assert api.binds == []
    assert scheduler.state.ledger.reservations == {}
    assert [r.key for r in scheduler.state.pending()] == ["default/p"]
    assert any(e["message"] == "Binding rejected: spec.nodeName: Invalid value" for e in api.events)
    clock.now += 1.0
    await run_cycle(scheduler)
    assert bound_to(api) == {"default/p": "a"}
    assert api.binds[0][2] == {"gpusched.io/gpus": "0,1"}


@pytest.mark.asyncio
async def test_a_bind_without_an_answer_keeps_its_gpus_until_the_pod_is_read_back() -> None:
    # One 2-GPU node. The bind of p got no answer but did happen: p must keep the GPUs, and q,
    # waiting for the same GPUs, must not get them.
    api, clock = FakeApi(), Clock()
    scheduler = service(api, clock)
    scheduler.state.upsert_node(node("a", gpus=2))
    scheduler.state.upsert_pod(pod("p", 2))
    scheduler.state.upsert_pod(pod("q", 2, created="2099-01-01T00:00:00Z"))  # younger
    api.failures["default/p"] = [ApiError(0, "connection reset")]
    api.pods["default/p"] = pod("p", 2, node="a", annotations={"gpusched.io/gpus": "0,1"})
    await run_cycle(scheduler)
    clock.now += 1.0
    await run_cycle(scheduler)  # sent again: "already assigned", so it is read back
    await run_cycle(scheduler)
    assert api.binds == []
    record = scheduler.state.pods["default/p"]
    assert (record.node, record.assigned) == ("a", (0, 1))
    assert [r.key for r in scheduler.state.pending()] == ["default/q"]
    assert scheduler.state.ledger.reservations == {}


@pytest.mark.asyncio
async def test_a_conflict_on_a_pod_that_is_not_bound_is_read_back_and_the_bind_sent_again() -> None:
    api, clock = FakeApi(), Clock()
    scheduler = service(api, clock)
    scheduler.state.upsert_node(node("a"))
    scheduler.state.upsert_pod(pod("p", 2))
    api.failures["default/p"] = [ApiError(409, "the object has been modified")]
    api.pods["default/p"] = pod("p", 2)
    await run_cycle(scheduler)
    assert list(scheduler.state.ledger.reservations) == ["default/p"]
    clock.now += 1.0
    await run_cycle(scheduler)
    assert bound_to(api) == {"default/p": "a"}


# ----- gangs: backoff, capacity, timeout -----------------------------------------------------


@pytest.mark.asyncio
async def test_a_gang_that_cannot_fit_backs_off_and_retries_at_once_when_room_is_freed() -> None:
    api, clock = FakeApi(), Clock()
    scheduler = service(api, clock)
    scheduler.state.upsert_node(node("a"))
    scheduler.state.upsert_pod(pod("theirs", 6, node="a", scheduler="default-scheduler"))
    scheduler.state.upsert_group(GroupKind.POD_GROUP, pod_group("g", 2))
    for i in range(2):
        scheduler.state.upsert_pod(pod(f"g-{i}", 2, group="g"))
    await run_cycle(scheduler)
    assert api.binds == []
    status = api.last_status("default/g")
    assert status["phase"] == "Pending"
    assert status["conditions"][0]["reason"] == "Unschedulable"
    assert status["lastAttempt"]["domains"][0].startswith("zone-a/rack-1: ")
    cycles_before = scheduler.cycles
    clock.now += 0.5  # inside the first backoff (1 s): no new attempt
    await run_cycle(scheduler)
    assert api.last_status("default/g")["lastAttempt"] == status["lastAttempt"]
    clock.now += 3.0  # a second failure doubles the delay to 2 s
    await run_cycle(scheduler)
    clock.now += 1.0
    assert scheduler.backoff.backing_off("default/g", clock.now)
    scheduler.state.delete_pod("default/theirs")  # room: retried after the shortest delay
    assert not scheduler.backoff.backing_off("default/g", clock.now)
    await run_cycle(scheduler)
    assert sorted(bound_to(api)) == ["default/g-0", "default/g-1"]
    assert scheduler.cycles == cycles_before + 3
    await run_cycle(scheduler)
    final = api.last_status("default/g")
    assert (final["phase"], final["scheduled"]) == ("Scheduled", 2)


@pytest.mark.asyncio
async def test_a_gang_past_its_timeout_is_unschedulable_and_still_retried() -> None:
    api, clock = FakeApi(), Clock()
    scheduler = service(api, clock)
    scheduler.state.upsert_node(node("a", gpus=2))
    scheduler.state.upsert_group(GroupKind.POD_GROUP, pod_group("g", 2, timeout=60))
    for i in range(2):  # created long ago: the timeout has passed
        scheduler.state.upsert_pod(pod(f"g-{i}", 2, group="g", created="2026-01-01T00:00:00Z"))
    await run_cycle(scheduler)
    status = api.last_status("default/g")
    assert status["phase"] == "Unschedulable"
    assert status["conditions"][0]["reason"] == "Timeout"
    assert status["conditions"][0]["status"] == "False"
    scheduler.state.upsert_node(node("b", gpus=2))
    clock.now += 10
    await run_cycle(scheduler)
    assert sorted(bound_to(api)) == ["default/g-0", "default/g-1"]


# ----- Events and status writes --------------------------------------------------------------


@pytest.mark.asyncio
async def test_the_same_failure_again_is_one_event_whose_count_grows() -> None:
    api, clock = FakeApi(), Clock()
    scheduler = service(api, clock)
    scheduler.state.upsert_node(node("a"))
    scheduler.state.upsert_pod(pod("theirs", 6, node="a", scheduler="default-scheduler"))
    scheduler.state.upsert_pod(pod("big", 4))
    for _ in range(5):
        await run_cycle(scheduler)
        clock.now += 20  # past every backoff; the refresh interval is 60 s
    failures = [e for e in api.events if e["reason"] == "FailedScheduling"]
    assert len(failures) == 1
    assert "Insufficient nvidia.com/gpu" in failures[0]["message"]
    assert failures[0]["involvedObject"]["uid"] == "uid-big"
    assert [p["count"] for _, p in api.event_patches] == [4]


@pytest.mark.asyncio
async def test_an_unchanged_status_is_not_written_again() -> None:
    api, clock = FakeApi(), Clock()
    scheduler = service(api, clock)
    scheduler.state.upsert_node(node("a"))
    scheduler.state.upsert_group(GroupKind.POD_GROUP, pod_group("g", 2))
    await run_cycle(scheduler)
    assert [k for _, k, _ in api.statuses] == ["default/g"]
    assert api.last_status("default/g")["conditions"][0]["reason"] == "WaitingForPods"
    await run_cycle(scheduler)
    await run_cycle(scheduler)
    assert len(api.statuses) == 1


@pytest.mark.asyncio
async def test_an_invalid_group_gets_a_condition_naming_the_field_and_others_go_on() -> None:
    api, clock = FakeApi(), Clock()
    scheduler = service(api, clock)
    scheduler.state.upsert_node(node("a"))
    bad = pod_group("bad", 1)
    bad["spec"]["schedulingPolicy"]["basic"] = {}
    scheduler.state.upsert_group(GroupKind.POD_GROUP, bad)
    scheduler.state.upsert_pod(pod("bad-0", 1, group="bad"))
    scheduler.state.upsert_pod(pod("loose", 1))
    await run_cycle(scheduler)
    condition = api.last_status("default/bad")["conditions"][0]
    assert condition["reason"] == "Invalid"
    assert "spec.schedulingPolicy" in condition["message"]
    assert bound_to(api) == {"default/loose": "a"}
    assert any(e["reason"] == "Invalid" for e in api.events)


@pytest.mark.asyncio
async def test_a_workload_materialises_its_groups_once() -> None:
    api, clock = FakeApi(), Clock()
    scheduler = service(api, clock)
    scheduler.state.upsert_workload(
        {
            "apiVersion": "scheduling.gpusched.io/v1alpha1",
            "kind": "Workload",
            "metadata": {"name": "w", "namespace": "default", "uid": "uid-w", "generation": 1},
            "spec": {
                "podGroupTemplates": [
                    {"name": "a", "schedulingPolicy": {"gang": {"minCount": 2}}},
                    {"name": "b", "schedulingPolicy": {"basic": {}}},
                ]
            },
        }
    )
    await run_cycle(scheduler)
    await run_cycle(scheduler)  # the creations are in flight or done: not sent again
    assert sorted(b["metadata"]["name"] for b in api.created) == ["w-a", "w-b"]
    assert api.created[0]["metadata"]["ownerReferences"][0]["uid"] == "uid-w"
    status = api.last_status("default/w")
    assert status["conditions"][0]["reason"] == "Creating"
    for body in api.created:
        scheduler.state.upsert_group(
            GroupKind.POD_GROUP,
            {**body, "metadata": {**body["metadata"], "uid": "x", "generation": 1}},
        )
    await run_cycle(scheduler)
    status = api.last_status("default/w")
    assert status["conditions"][0]["reason"] == "Materialized"
    assert [g["name"] for g in status["groups"]] == ["w-a", "w-b"]


@pytest.mark.asyncio
async def test_hot_gpus_from_telemetry_are_not_given_out() -> None:
    api, clock = FakeApi(), Clock()
    config = load_config({"operator": {"batchWindowSeconds": 0}})
    healthy = GpuSample(temperature_c=50, fb_free_mib=80000, fb_used_mib=0, age_seconds=1)
    hot = GpuSample(temperature_c=91, fb_free_mib=80000, fb_used_mib=0, age_seconds=1)
    samples = {("a", g): (hot if g < 6 else healthy) for g in range(8)}
    scheduler = build_scheduler(config, ClusterState(), api, telemetry=lambda: samples, clock=clock)
    scheduler.state.upsert_node(node("a"))
    scheduler.state.upsert_pod(pod("p", 2))
    scheduler.state.upsert_pod(pod("q", 1))
    await run_cycle(scheduler)
    assert [(key, annotations) for key, _, annotations in api.binds] == [
        ("default/p", {"gpusched.io/gpus": "6,7"})
    ]
    assert [r.key for r in scheduler.state.pending()] == ["default/q"]


@pytest.mark.asyncio
async def test_only_a_leader_with_a_fresh_pod_list_binds() -> None:
    api, clock = FakeApi(), Clock()
    config = load_config({"operator": {"batchWindowSeconds": 0}})
    leading = [False]
    scheduler = build_scheduler(
        config, ClusterState(), api, clock=clock, leading=lambda: leading[0]
    )
    scheduler.state.upsert_node(node("a", gpus=2))
    scheduler.state.upsert_pod(pod("p", 2))
    await run_cycle(scheduler)
    assert (api.binds, api.statuses, api.events) == ([], [], [])

    async def fresh_list() -> AsyncIterator[Listing]:
        # Bound by the previous leader just before it lost the Lease; our watch missed it.
        yield Listing([pod("p", 2)])
        yield Listing([pod("old", 2, node="a", annotations={"gpusched.io/gpus": "0,1"})])

    async def list_nodes() -> list[dict[str, Any]]:
        return [node("a", gpus=2)]

    api.list_nodes = list_nodes  # type: ignore[method-assign]
    leading[0] = True
    await scheduler.take_leadership(fresh_list())
    await run_cycle(scheduler)
    assert api.binds == []  # the previous leader's pod holds both GPUs
    scheduler.state.delete_pod("default/old")
    clock.now += 1.0  # the shortest backoff
    await run_cycle(scheduler)
    assert bound_to(api) == {"default/p": "a"}


@pytest.mark.asyncio
async def test_a_bind_decided_before_the_lease_was_lost_is_not_sent() -> None:
    api, clock = FakeApi(), Clock()
    config = load_config({"operator": {"batchWindowSeconds": 0}})
    leading = [True]
    scheduler = build_scheduler(
        config, ClusterState(), api, clock=clock, leading=lambda: leading[0]
    )
    scheduler.state.upsert_node(node("a"))
    scheduler.state.upsert_pod(pod("p", 2))
    await scheduler.cycle()  # decided and reserved; the bind task has not run yet
    leading[0] = False
    await scheduler.settle()
    assert api.binds == []
    assert scheduler.state.ledger.reservations == {}


@pytest.mark.asyncio
async def test_a_finished_pod_frees_its_gpus_at_once() -> None:
    api, clock = FakeApi(), Clock()
    scheduler = service(api, clock)
    scheduler.state.upsert_node(node("a", gpus=2))
    done = pod("done", 2, node="a", annotations={"gpusched.io/gpus": "0,1"})
    scheduler.state.upsert_pod(done)
    scheduler.state.upsert_pod(pod("next", 2))
    await run_cycle(scheduler)
    assert api.binds == []
    scheduler.state.upsert_pod({**done, "status": {"phase": "Succeeded"}})
    clock.now += 1.0
    await run_cycle(scheduler)
    assert api.binds == [("default/next", "a", {"gpusched.io/gpus": "0,1"})]


@pytest.mark.asyncio
async def test_the_periodic_resync_drops_pods_and_nodes_deleted_while_a_watch_was_down() -> None:
    api, clock = FakeApi(), Clock()
    scheduler = service(api, clock)
    for name in ("a", "b"):
        scheduler.state.upsert_node(node(name, gpus=2))
    scheduler.state.upsert_pod(pod("ghost", 2, node="a", annotations={"gpusched.io/gpus": "0,1"}))
    scheduler.state.upsert_pod(pod("p", 2))

    async def list_pods() -> list[dict[str, Any]]:
        return [pod("p", 2)]

    async def list_nodes() -> list[dict[str, Any]]:
        return [node("a", gpus=2)]  # b was deleted; the watch never said so

    api.list_pods = list_pods  # type: ignore[attr-defined]
    api.list_nodes = list_nodes  # type: ignore[attr-defined]
    clock.now += 301  # past the resync period
    await run_cycle(scheduler)
    await run_cycle(scheduler)
    assert sorted(scheduler.state.nodes) == ["a"]
    assert "default/ghost" not in scheduler.state.pods
    assert bound_to(api) == {"default/p": "a"}


# ----- other schedulers' pods that do not say which GPUs they hold ---------------------------


@pytest.mark.asyncio
async def test_after_a_restart_a_foreign_pods_gpus_are_not_assumed_onto_ours() -> None:
    # Node a, 8 GPUs. Ours holds 6,7 (annotated); x, another scheduler's 2-GPU pod, says
    # nothing and comes first in the fresh list. 4 GPUs are free: p (6 GPUs) must wait.
    api, clock = FakeApi(), Clock()
    scheduler = service(api, clock)
    scheduler.state.upsert_node(node("a"))
    scheduler.state.upsert_pod(pod("x", 2, node="a", scheduler="default-scheduler"))
    scheduler.state.upsert_pod(pod("ours", 2, node="a", annotations={"gpusched.io/gpus": "6,7"}))
    scheduler.state.upsert_pod(pod("p", 6))
    await run_cycle(scheduler)
    assert api.binds == []
    held = {b.pod.key: b.gpus for b in scheduler.state.bound()}
    assert held == {"default/x": (4, 5), "default/ours": (6, 7)}
    scheduler.state.upsert_pod(pod("q", 4))
    clock.now += 1.0
    await run_cycle(scheduler)
    assert api.binds == [("default/q", "a", {"gpusched.io/gpus": "0,1,2,3"})]


@pytest.mark.asyncio
async def test_a_foreign_pods_assumed_gpus_stay_put_when_the_snapshot_is_rebuilt() -> None:
    # x (another scheduler's, 4 GPUs) is bound into room ours freed; p then gets the other
    # four. A node label change rebuilds the snapshot: x's assumption must not move onto
    # p's GPUs, and nothing more fits on the node.
    api, clock = FakeApi(), Clock()
    scheduler = service(api, clock)
    scheduler.state.upsert_node(node("a"))
    scheduler.state.upsert_pod(pod("x", 4, node="a", scheduler="default-scheduler"))
    scheduler.state.upsert_pod(pod("p", 4))
    await run_cycle(scheduler)
    assert api.binds == [("default/p", "a", {"gpusched.io/gpus": "0,1,2,3"})]
    api.pods["default/p"] = pod("p", 4, node="a", annotations={"gpusched.io/gpus": "0,1,2,3"})
    scheduler.state.upsert_pod(api.pods["default/p"])
    relabelled = node("a")
    relabelled["metadata"]["labels"]["team"] = "vision"
    scheduler.state.upsert_node(relabelled)
    scheduler.state.upsert_pod(pod("late", 1))
    clock.now += 1.0
    await run_cycle(scheduler)
    held = {b.pod.key: b.gpus for b in scheduler.state.bound()}
    assert held == {"default/x": (4, 5, 6, 7), "default/p": (0, 1, 2, 3)}
    assert len(api.binds) == 1  # late waits: the node's 8 GPUs are all held


@pytest.mark.asyncio
async def test_a_restarted_watch_drops_pods_deleted_while_it_was_down_at_once() -> None:
    # ghost was deleted while the watch was down (the relist never says so) and holds the
    # GPUs fresh needs. No periodic resync is due.
    api, clock = FakeApi(), Clock()
    scheduler = service(api, clock)
    scheduler.state.upsert_node(node("a", gpus=2))
    ghost = pod("ghost", 2, node="a", annotations={"gpusched.io/gpus": "0,1"})
    scheduler.state.upsert_pod(ghost)
    fresh = pod("fresh", 2)
    scheduler.state.upsert_pod(fresh)

    async def list_pods() -> list[dict[str, Any]]:
        return [fresh]

    async def list_nodes() -> list[dict[str, Any]]:
        return [node("a", gpus=2)]

    api.list_pods = list_pods  # type: ignore[attr-defined]
    api.list_nodes = list_nodes  # type: ignore[attr-defined]
    await run_cycle(scheduler)
    assert "default/ghost" in scheduler.state.pods  # nothing said the watch restarted
    scheduler.relisted()
    await run_cycle(scheduler)  # the reconciling list
    clock.now += 1.0  # fresh's shortest backoff, far below the periodic resync's 30 s
    await run_cycle(scheduler)  # and the decision it allows
    assert "default/ghost" not in scheduler.state.pods
    assert bound_to(api) == {"default/fresh": "a"}


@pytest.mark.asyncio
async def test_a_foreign_pod_landing_before_the_bind_goes_out_stops_the_bind() -> None:
    # Node a, 4 GPUs; p asks for all four and is decided. Before its bind is sent, x (another
    # scheduler's 2-GPU pod) is bound onto a: sending would put 6 GPUs on a node of 4.
    api, clock = FakeApi(), Clock()
    scheduler = service(api, clock)
    scheduler.state.upsert_node(node("a", gpus=4))
    scheduler.state.upsert_pod(pod("p", 4))
    await scheduler.cycle()
    assert list(scheduler.state.ledger.reservations) == ["default/p"]
    scheduler.state.upsert_pod(pod("x", 2, node="a", scheduler="default-scheduler"))
    await scheduler.settle()
    assert api.binds == []
    assert scheduler.state.ledger.reservations == {}
    assert [r.key for r in scheduler.state.pending()] == ["default/p"]
    scheduler.state.delete_pod("default/x", "uid-x")  # x finishes: the room is p's again
    clock.now += 1.0
    await run_cycle(scheduler)
    assert api.binds == [("default/p", "a", {"gpusched.io/gpus": "0,1,2,3"})]


@pytest.mark.asyncio
async def test_an_unknown_bind_keeps_its_room_while_it_may_still_land_though_a_pod_came_in() -> (
    None
):
    # Node a, 4 GPUs. p's bind (all four) gets no answer: the server may commit it within the
    # bind timeout. Meanwhile x, another scheduler's 1-GPU pod, is bound onto a. p's GPUs must
    # not go to q (ours) while p's bind may still land; once it can no longer, they may.
    api, clock = FakeApi(), Clock()
    scheduler = service(api, clock)
    scheduler.state.upsert_node(node("a", gpus=4))
    scheduler.state.upsert_pod(pod("p", 4))
    api.failures["default/p"] = [ApiError(0, "connection reset")]
    api.pods["default/p"] = pod("p", 4)  # read back: still pending
    await run_cycle(scheduler)
    scheduler.state.upsert_pod(pod("x", 1, node="a", scheduler="default-scheduler"))
    scheduler.state.upsert_pod(pod("q", 3, created="2099-01-01T00:00:00Z"))
    for _ in range(3):  # retries are due and read p back; still within the bind timeout
        clock.now += 1.0
        await run_cycle(scheduler)
        assert list(scheduler.state.ledger.reservations) == ["default/p"]
        assert api.binds == []
    clock.now += 5.0  # past the bind timeout: p's first send can no longer land
    await run_cycle(scheduler)
    await run_cycle(scheduler)
    assert "default/p" not in scheduler.state.ledger.reservations, (
        scheduler.state.ledger.reservations
    )
    clock.now += 8.0  # q's backoff (it failed while p held the room)
    await run_cycle(scheduler)
    assert bound_to(api) == {
        "default/q": "a"
    }  # x holds 1 of 4: q's 3 fit, p's 4 do not  # x holds 1 of 4: q's 3 fit, p's 4 do not


@pytest.mark.asyncio
async def test_a_node_whose_topology_lies_about_its_gpus_is_reported_once_per_change() -> None:
    api, clock = FakeApi(), Clock()
    scheduler = service(api, clock)
    liar = node("a")  # the annotation describes 8 GPUs
    liar["status"]["allocatable"]["nvidia.com/gpu"] = "4"
    for _ in range(3):  # heartbeats: the same lie, reported once
        scheduler.node_changed(liar)
        await run_cycle(scheduler)
    warnings = [e for e in api.events if e["reason"] == "GPUTopologyMismatch"]
    assert len(warnings) == 1, warnings
    (warning,) = warnings
    assert warning["metadata"]["namespace"] == "default"  # where Events of a Node live
    assert (warning["involvedObject"]["kind"], warning["involvedObject"]["name"]) == ("Node", "a")
    assert "describes 8 GPUs but the node advertises 4" in warning["message"], warning
    assert metrics.NODES_UNUSABLE_TOPOLOGY._value.get() == 1
    scheduler.node_changed(node("a"))  # fixed
    assert metrics.NODES_UNUSABLE_TOPOLOGY._value.get() == 0
    scheduler.node_changed(liar)
    scheduler.node_deleted("a")
    assert metrics.NODES_UNUSABLE_TOPOLOGY._value.get() == 0

"""Carrying out preemption on the fake `ClusterApi`: the room is nominated and held, victims are
evicted whole, the preemptor is bound into its room once they are gone; a stale plan is
released and planned again; an ``All`` victim gang is never left half-evicted.

Every story starts from the same full cluster:

    #         zone-a
    #      /         \\
    #   rack-1      rack-2
    #   a    b      c    d       8 GPUs each
    #   low1 (priority 1, All)   low2 (priority 5, All)

and a 2 × 8-GPU gang ``high`` of priority 100 that wants one rack: the cheapest victims are
low1's, in rack-1.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from prometheus_client import REGISTRY

from gpusched.api.config import load_config
from gpusched.engine.groups import GroupKind
from gpusched.engine.preemption import Outcome, PreemptionPlan, Victim
from gpusched.engine.result import Binding
from gpusched.scheduler import metrics
from gpusched.scheduler.factory import build_scheduler
from gpusched.scheduler.ports import ApiError
from gpusched.scheduler.service import Scheduler
from gpusched.scheduler.state import ClusterState
from testing import dra
from testing.clock import Clock
from testing.fakes import FakeApi
from testing.manifests import node, pod, pod_group
from tests.unit.scheduler.test_dra_scheduler import FakeClaims, LoggingApi
from tests.unit.scheduler.test_scheduler_service import bound_to, run_cycle, service

LOW1 = ["default/low1-0", "default/low1-1"]
HIGH = ["default/high-0", "default/high-1"]


def prioritized(body: dict[str, Any], priority: int) -> dict[str, Any]:
    body["spec"]["priority"] = priority
    return body


def group(name: str, priority: int, mode: str = "All") -> dict[str, Any]:
    body = pod_group(name, 2)
    body["spec"].update({"priority": priority, "disruptionMode": mode})
    return body


def configured(api: FakeApi, clock: Clock, preemption: dict[str, Any]) -> Scheduler:
    operator = {"batchWindowSeconds": 0, "initialBackoffSeconds": 1, "maxBackoffSeconds": 8}
    config = load_config({"operator": operator, "preemption": preemption})
    return build_scheduler(config, ClusterState(), api, clock=clock)


def full_cluster(
    api: FakeApi, clock: Clock, low2: int = 5, preemption: dict[str, Any] | None = None
) -> Scheduler:
    scheduler = service(api, clock) if preemption is None else configured(api, clock, preemption)
    state = scheduler.state
    for name, rack in (("a", "rack-1"), ("b", "rack-1"), ("c", "rack-2"), ("d", "rack-2")):
        state.upsert_node(node(name, rack=rack))
    for gang, priority, nodes in (("low1", 1, "ab"), ("low2", low2, "cd")):
        state.upsert_group(GroupKind.POD_GROUP, group(gang, priority))
        for i, where in enumerate(nodes):
            body = pod(f"{gang}-{i}", 8, group=gang, node=where, at=range(8))
            state.upsert_pod(prioritized(body, priority))
    state.upsert_group(GroupKind.POD_GROUP, group("high", 100))
    for i in range(2):
        state.upsert_pod(prioritized(pod(f"high-{i}", 8, group="high"), 100))
    return scheduler


def marks_written(api: FakeApi) -> list[tuple[str, dict[str, Any] | None]]:
    """Each `PREEMPTION_ANNOTATION` written, by pod, in order (its plan's identity left out)."""
    found = []
    for key, written in api.annotations:
        if "gpusched.io/preemption" in written:
            raw = written["gpusched.io/preemption"]
            value = json.loads(raw) if raw is not None else None
            if value is not None:
                assert value.pop("plan")  # every mark names its plan
            found.append((key, value))
    return sorted(found, key=lambda kv: (kv[0], kv[1] is None))


def evicted_are_gone(scheduler: Scheduler, api: FakeApi) -> None:
    """The kubelet's part: what was evicted or deleted is gone, and the watch says so."""
    for key in api.evictions + api.deleted:
        scheduler.pod_deleted(key, f"uid-{key.split('/')[1]}")


def reasons(api: FakeApi, name: str) -> list[tuple[str, str]]:
    return [(e["reason"], e["message"]) for e in api.events if e["involvedObject"]["name"] == name]


@pytest.mark.asyncio
async def test_the_victims_room_is_held_for_the_preemptor_and_it_is_bound_there() -> None:
    api, clock = FakeApi(), Clock()
    scheduler = full_cluster(api, clock)
    evicted_before = metrics.EVICTED_GPUS._value.get()
    await run_cycle(scheduler)

    assert sorted(api.evictions) == LOW1  # the whole cheapest gang, nothing of low2
    assert api.binds == []
    held = scheduler.state.ledger.nominations["default/high"]
    assert sorted((h.pod.key, h.node) for h in held.holdings) == [
        ("default/high-0", "a"),
        ("default/high-1", "b"),
    ]
    assert sorted(api.pod_statuses) == [
        ("default/high-0", {"nominatedNodeName": "a"}),
        ("default/high-1", {"nominatedNodeName": "b"}),
    ]
    assert reasons(api, "low1-0") == [
        ("Preempted", "Preempted by default/high (priority 100) on node a")
    ]
    [message] = [m for reason, m in reasons(api, "high") if reason == "Preempting"]
    assert "default/low1-0, default/low1-1" in message
    assert metrics.EVICTED_GPUS._value.get() - evicted_before == 16

    # A newcomer arrives while the victims are terminating: it may not take their room.
    scheduler.pod_changed(pod("other", 8))
    clock.now += 1
    await run_cycle(scheduler)
    assert api.binds == []
    assert [r.key for r in scheduler.state.pending()] == ["default/other"]

    evicted_are_gone(scheduler, api)
    clock.now += 1
    await run_cycle(scheduler)
    assert bound_to(api) == {"default/high-0": "a", "default/high-1": "b"}
    assert scheduler.state.ledger.nominations == {}


@pytest.mark.asyncio
async def test_while_its_room_is_nominated_the_group_status_says_preempting_not_unschedulable() -> (
    None
):
    api, clock = FakeApi(), Clock()
    scheduler = full_cluster(api, clock)
    await run_cycle(scheduler)
    [condition] = api.last_status("default/high")["conditions"]
    assert (condition["status"], condition["reason"]) == ("False", "Preempting")
    assert condition["message"] == (
        "room nominated on 2 nodes (a, b) by preempting 2 lower-priority pods; "
        "waiting for 2 victims to go"
    )

    scheduler.pod_deleted("default/low1-0", "uid-low1-0")
    await run_cycle(scheduler)
    [condition] = api.last_status("default/high")["conditions"]
    assert condition["message"].endswith("waiting for 1 victim to go")

    scheduler.pod_deleted("default/low1-1", "uid-low1-1")
    clock.now += 1
    await run_cycle(scheduler)  # bound into the room
    for i in range(2):
        scheduler.pod_changed(prioritized(pod(f"high-{i}", 8, group="high", node="ab"[i]), 100))
    await run_cycle(scheduler)
    [condition] = api.last_status("default/high")["conditions"]
    assert (condition["status"], condition["reason"]) == ("True", "Scheduled")


@pytest.mark.asyncio
async def test_a_refused_first_eviction_leaves_the_gang_whole_and_the_plan_is_made_again() -> None:
    # Both low1 pods are protected by a PDB once (429). The first eviction of the unit is
    # refused: nothing of low1 is touched and the room is released. Planned again, its first
    # pod goes, and then the unit must go whole: the refused second pod is deleted.
    api, clock = FakeApi(), Clock()
    pdb = "Cannot evict pod as it would violate the pod's disruption budget."
    api.evict_failures = {key: [ApiError(429, pdb)] for key in LOW1}
    scheduler = full_cluster(api, clock)
    await run_cycle(scheduler)

    assert api.evictions == []
    assert api.deleted == []
    assert scheduler.state.ledger.nominations == {}
    assert sorted(r.key for r in scheduler.state.pending()) == HIGH
    cleared = [k for k, s in api.pod_statuses if s == {"nominatedNodeName": None}]
    assert sorted(cleared) == HIGH
    # The unit was marked before its first eviction, and unmarked once it was refused; the
    # places recorded for high's pods are cleared with the room.
    mark = {"preemptor": "default/high", "unit": "default/low1", "size": 2}
    assert marks_written(api) == [(key, value) for key in LOW1 for value in (mark, None)]
    places = [(k, a["gpusched.io/nomination"]) for k, a in api.annotations if k in HIGH]
    assert [(k, v is None) for k, v in places] == [(k, c) for c in (False, True) for k in HIGH]

    clock.now += 10
    await run_cycle(scheduler)
    assert len(api.evictions) == 1
    assert sorted(api.evictions + api.deleted) == LOW1
    [(deleted, status)] = [(k, s) for k, s in api.pod_statuses if "conditions" in s]
    assert deleted == api.deleted[0]
    assert status["conditions"][0]["type"] == "DisruptionTarget"
    assert status["conditions"][0]["reason"] == "PreemptionByScheduler"

    evicted_are_gone(scheduler, api)
    clock.now += 1
    await run_cycle(scheduler)
    assert bound_to(api) == {"default/high-0": "a", "default/high-1": "b"}


@pytest.mark.asyncio
async def test_a_preemptor_pod_deleted_while_nominated_releases_the_room() -> None:
    api, clock = FakeApi(), Clock()
    scheduler = full_cluster(api, clock)
    await run_cycle(scheduler)
    assert "default/high" in scheduler.state.ledger.nominations

    scheduler.pod_deleted("default/high-0", "uid-high-0")
    await run_cycle(scheduler)
    assert scheduler.state.ledger.nominations == {}
    evicted_are_gone(scheduler, api)
    clock.now += 1
    await run_cycle(scheduler)
    assert api.binds == []  # a gang of 2 with one pod waits; the room is free for anyone
    scheduler.pod_changed(pod("other", 8))
    clock.now += 1
    await run_cycle(scheduler)
    assert bound_to(api) == {"default/other": "a"}


@pytest.mark.asyncio
async def test_a_lost_leadership_drops_the_nomination_and_stops_evicting() -> None:
    api, clock = FakeApi(), Clock()
    scheduler = full_cluster(api, clock)
    scheduler.lost_leadership()
    scheduler.leadership.synced()
    await scheduler.cycle()  # decided and nominated; evictions are only spawned
    assert "default/high" in scheduler.state.ledger.nominations
    scheduler.lost_leadership()
    await scheduler.settle()
    assert api.evictions == []
    assert scheduler.state.ledger.nominations == {}


def priority_class(name: str, value: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
    }


@pytest.mark.asyncio
async def test_a_gang_naming_a_priority_class_preempts_once_the_class_is_known() -> None:
    api, clock = FakeApi(), Clock()
    scheduler = full_cluster(api, clock)
    scheduler.priority_class_changed(priority_class("system-node-critical", 2_000_001_000))
    named = group("high", 100)
    del named["spec"]["priority"]
    named["spec"]["priorityClassName"] = "production"
    named["metadata"]["generation"] = 2
    scheduler.group_changed(GroupKind.POD_GROUP, named)
    await run_cycle(scheduler)
    assert api.evictions == []  # PriorityClass "production" not found: nothing is evicted
    assert scheduler.state.groups["default/high"].spec.priority is None
    [condition] = api.last_status("default/high")["conditions"]
    assert condition["reason"] == "Unschedulable"
    assert condition["message"].endswith(
        "; preempts nobody: PodGroup default/high: spec.priorityClassName: "
        "PriorityClass 'production' not found"
    )

    scheduler.priority_class_changed(priority_class("production", 100))
    assert scheduler.state.groups["default/high"].spec.priority == 100
    clock.now += 10
    await run_cycle(scheduler)
    assert sorted(api.evictions) == LOW1


@pytest.mark.asyncio
async def test_a_priority_that_contradicts_its_class_evicts_nothing_and_says_why() -> None:
    api, clock = FakeApi(), Clock()
    scheduler = full_cluster(api, clock)
    scheduler.priority_class_changed(priority_class("production", 50))
    named = group("high", 100)
    named["spec"]["priorityClassName"] = "production"
    named["metadata"]["generation"] = 2
    scheduler.group_changed(GroupKind.POD_GROUP, named)
    await run_cycle(scheduler)
    assert api.evictions == []
    assert scheduler.state.ledger.nominations == {}
    [condition] = api.last_status("default/high")["conditions"]
    assert condition["message"].endswith(
        "; preempts nobody: PodGroup default/high: spec.priority: is 100, but PriorityClass "
        "'production' (spec.priorityClassName) has value 50; give one or make them agree"
    )


@pytest.mark.asyncio
async def test_a_node_gone_while_nominated_releases_the_room_and_the_gang_is_planned_again() -> (
    None
):
    api, clock = FakeApi(), Clock()
    scheduler = full_cluster(api, clock)
    await run_cycle(scheduler)
    assert "default/high" in scheduler.state.ledger.nominations
    scheduler.node_deleted("b")
    await run_cycle(scheduler)
    assert scheduler.state.ledger.nominations == {}
    clock.now += 1  # the shortest backoff: the room it had was given back
    await run_cycle(scheduler)
    first = scheduler.state.ledger.nominations.get("default/high")
    # Planned again without b: rack-1 cannot hold the gang now, so low2's rack is taken.
    assert first is not None
    assert sorted(h.node for h in first.holdings) == ["c", "d"]


@pytest.mark.asyncio
async def test_a_victim_already_gone_is_not_evicted_and_the_rest_of_its_gang_goes() -> None:
    api, clock = FakeApi(), Clock()
    scheduler = full_cluster(api, clock)
    await scheduler.cycle()  # nominated; the evictions are spawned, not yet run
    scheduler.pod_deleted("default/low1-0", "uid-low1-0")
    await scheduler.settle()
    assert api.evictions == ["default/low1-1"]


@pytest.mark.asyncio
async def test_the_time_from_nomination_to_bound_is_observed_once_the_gang_shows_bound() -> None:
    api, clock = FakeApi(), Clock()
    scheduler = full_cluster(api, clock)
    count = "gpusched_nomination_to_bound_seconds_count"
    before = REGISTRY.get_sample_value(count) or 0.0
    await run_cycle(scheduler)
    evicted_are_gone(scheduler, api)
    clock.now += 3
    await run_cycle(scheduler)  # bound into the room
    await run_cycle(scheduler)  # and seen bound
    assert REGISTRY.get_sample_value(count) == before + 1
    assert (REGISTRY.get_sample_value(count.replace("_count", "_sum")) or 0.0) >= 3


@pytest.mark.asyncio
async def test_a_budget_that_allows_no_disruption_sends_the_preemptor_to_the_other_rack() -> None:
    api, clock = FakeApi(), Clock()
    scheduler = full_cluster(api, clock)
    for i in range(2):  # low1's pods carry the label the budget selects
        body = pod(f"low1-{i}", 8, group="low1", node="ab"[i], at=range(8))
        body["metadata"]["labels"]["app"] = "low1"
        scheduler.pod_changed(prioritized(body, 1))
    scheduler.budget_changed(
        {
            "metadata": {"name": "low1", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "low1"}}},
            "status": {"disruptionsAllowed": 0},
        }
    )
    await run_cycle(scheduler)
    assert sorted(api.evictions) == ["default/low2-0", "default/low2-1"]


@pytest.mark.asyncio
async def test_a_higher_gang_takes_over_a_nominated_room_and_the_victims_it_waited_for() -> None:
    # low2 has priority 500 here, so high (100) takes rack-1; then top (1000) arrives: rack-1
    # costs it only high's nominated pods (100), rack-2 costs 500. high's pods are pending,
    # never evicted; high's room and its victims, still terminating, become top's.
    api, clock = FakeApi(), Clock()
    scheduler = full_cluster(api, clock, low2=500)
    await run_cycle(scheduler)
    assert "default/high" in scheduler.state.ledger.nominations
    scheduler.group_changed(GroupKind.POD_GROUP, group("top", 1000))
    for i in range(2):
        scheduler.pod_changed(prioritized(pod(f"top-{i}", 8, group="top"), 1000))
    clock.now += 1
    await run_cycle(scheduler)

    assert list(scheduler.state.ledger.nominations) == ["default/top"]
    top = scheduler.state.ledger.nominations["default/top"]
    assert sorted(top.victims) == LOW1
    assert sorted(r.key for r in scheduler.state.pending()) == HIGH
    assert not [k for k in api.evictions + api.deleted if "high" in k]

    evicted_are_gone(scheduler, api)
    clock.now += 1
    await run_cycle(scheduler)
    assert bound_to(api) == {"default/top-0": "a", "default/top-1": "b"}


@pytest.mark.asyncio
async def test_victims_that_outlive_the_nomination_timeout_release_the_room() -> None:
    api, clock = FakeApi(), Clock()
    scheduler = full_cluster(api, clock, preemption={"nominationTimeoutSeconds": 30})
    await run_cycle(scheduler)
    held = scheduler.state.ledger.nominations["default/high"]
    clock.now += 29  # evicted, never gone (a node that stopped reporting)
    await run_cycle(scheduler)
    assert scheduler.state.ledger.nominations.get("default/high") is held
    clock.now += 2
    await scheduler.cycle()
    assert scheduler.state.ledger.nominations.get("default/high") is not held
    assert api.binds == []


def marked_low1(
    api: FakeApi, clock: Clock, present: list[int], preemption: dict[str, Any] | None = None
) -> Scheduler:
    """What a new leader finds: low1's pods ``present`` still bound, each marked for a
    preemption by a replica that is gone (its preemptor gone too)."""
    scheduler = service(api, clock) if preemption is None else configured(api, clock, preemption)
    for name in ("a", "b"):
        scheduler.state.upsert_node(node(name))
    scheduler.state.upsert_group(GroupKind.POD_GROUP, group("low1", 1))
    mark = '{"preemptor": "default/high", "unit": "default/low1", "size": 2}'
    for i in present:
        marked = {"gpusched.io/preemption": mark}
        body = pod(f"low1-{i}", 8, group="low1", node="ab"[i], at=range(8), annotations=marked)
        scheduler.state.upsert_pod(prioritized(body, 1))
    return scheduler


@pytest.mark.asyncio
async def test_a_unit_left_part_evicted_by_a_previous_leader_is_evicted_whole() -> None:
    api, clock = FakeApi(), Clock()
    scheduler = marked_low1(api, clock, present=[1])  # low1-0 went before the crash
    await run_cycle(scheduler)
    assert api.evictions == ["default/low1-1"]
    await run_cycle(scheduler)  # the watch has not shown it terminating yet: not sent again
    assert api.evictions == ["default/low1-1"]


@pytest.mark.asyncio
async def test_a_unit_marked_but_never_started_is_unmarked_and_left_running() -> None:
    api, clock = FakeApi(), Clock()
    scheduler = marked_low1(api, clock, present=[0, 1])
    await run_cycle(scheduler)
    assert api.evictions == []
    assert sorted(api.annotations) == [(k, {"gpusched.io/preemption": None}) for k in LOW1]


@pytest.mark.asyncio
async def test_finishing_a_unit_that_fails_is_tried_again_later_not_in_every_cycle() -> None:
    api, clock = FakeApi(), Clock()
    api.evict_failures = {"default/low1-1": [ApiError(500, "etcd timeout")]}
    api.delete_failures = {"default/low1-1": [ApiError(500, "etcd timeout")]}
    scheduler = marked_low1(api, clock, present=[1], preemption={"evictionRetrySeconds": 20})
    await run_cycle(scheduler)
    assert api.evictions == []
    assert api.deleted == []
    clock.now += 19
    await run_cycle(scheduler)
    assert api.evictions == []  # not yet: the API server just failed
    clock.now += 2
    await run_cycle(scheduler)
    assert api.evictions == ["default/low1-1"]


@pytest.mark.asyncio
async def test_a_unit_marked_before_keeps_the_size_it_had_when_marked_again() -> None:
    # low1 was marked as a unit of 3 by an earlier attempt (one pod of it is gone since):
    # marked again with its 2 pods left, it must still read as part-evicted.
    api, clock = FakeApi(), Clock()
    scheduler = full_cluster(api, clock)
    earlier = '{"preemptor": "default/high", "unit": "default/low1", "size": 3}'
    for i in range(2):
        marked = {"gpusched.io/preemption": earlier}
        body = pod(f"low1-{i}", 8, group="low1", node="ab"[i], at=range(8), annotations=marked)
        scheduler.pod_changed(prioritized(body, 1))
    # (the earlier attempt is still settling it: retried later)
    scheduler.loop.preemptor.evictions._retry_at["default/low1"] = clock.now + 100
    await run_cycle(scheduler)
    assert {value["size"] for _, value in marks_written(api) if value is not None} == {3}


def claim_world() -> tuple[Scheduler, LoggingApi, FakeClaims, dict[str, Any]]:
    """n1 publishes its 8 GPUs through DRA; room on it is nominated for ml/w0 (a claim for
    8 GPUs) once ml/old goes, and old's eviction is sent. Also returns ml/w1's body, another
    8-GPU claim pod, not yet seen."""
    api = LoggingApi()
    claims = FakeClaims(api.log)
    config = load_config({"operator": {"batchWindowSeconds": 0, "initialBackoffSeconds": 1}})
    scheduler = build_scheduler(config, ClusterState(), api, claims=claims, clock=Clock())
    scheduler.state.upsert_node(dra.node("n1"))
    scheduler.claims.book.upsert_slice(dra.resource_slice("n1"))
    scheduler.claims.book.upsert_class(dra.device_class())
    scheduler.state.upsert_pod(pod("old", 0, namespace="ml", node="n1"))
    bodies = {}
    for name in ("w0", "w1"):
        scheduler.claims.book.upsert_claim(claims.add(dra.claim(f"{name}-gpus", "ml", 8)))
        bodies[name] = dra.pod(name, "ml", claim_name=f"{name}-gpus")
        bodies[name]["metadata"]["uid"] = f"uid-{name}"
    scheduler.state.upsert_pod(bodies["w0"])
    plan = PreemptionPlan(
        preemptor="ml/w0",
        outcome=Outcome.PLANNED,
        message="old goes",
        priority=100,
        victims=(Victim(pod="ml/old", node="n1", gpus=(), priority=0, unit="ml/old"),),
        bindings=(Binding(pod="ml/w0", node="n1", gpus=tuple(range(8))),),
    )
    scheduler.loop.preemptor.preempt([plan], scheduler.leadership.term)
    return scheduler, api, claims, bodies["w1"]


@pytest.mark.asyncio
async def test_a_preemptor_asking_gpus_through_a_claim_holds_its_room_and_gets_the_claim() -> None:
    # While w0 waits, another 8-GPU claim pod may not be placed on n1; once old is gone,
    # w0's claim is allocated before w0 is bound, as in any bind.
    scheduler, api, claims, w1 = claim_world()
    await scheduler.settle()
    assert api.evictions == ["ml/old"]

    scheduler.pod_changed(w1)
    await run_cycle(scheduler)
    assert api.binds == []  # n1's GPUs are held for w0

    scheduler.pod_deleted("ml/old", "uid-old")
    await run_cycle(scheduler)
    assert bound_to(api) == {"ml/w0": "n1"}
    writes = [(e[0], e[1]) for e in api.log]
    assert writes == [
        ("finalizers", "ml/w0-gpus"),
        ("status", "ml/w0-gpus"),
        ("bind", "ml/w0"),
    ]
    allocation = claims.claims["ml/w0-gpus"]["status"]["allocation"]
    assert len(allocation["devices"]["results"]) == 8


@pytest.mark.asyncio
async def test_a_preemptor_whose_claim_cannot_be_allocated_is_not_bound_into_its_room() -> None:
    scheduler, api, claims, _ = claim_world()
    await scheduler.settle()
    deleting = claims.claims["ml/w0-gpus"]
    deleting["metadata"]["deletionTimestamp"] = "2026-12-01T10:00:00Z"
    scheduler.claims.book.upsert_claim(claims.add(deleting))
    scheduler.pod_deleted("ml/old", "uid-old")
    await run_cycle(scheduler)
    assert api.binds == []
    assert api.log == []  # no claim written either
    assert scheduler.state.ledger.nominations == {}
    assert ("ml/w0", {"nominatedNodeName": None}) in api.pod_statuses


@pytest.mark.asyncio
async def test_a_plan_naming_a_victim_that_is_no_pod_nominates_nothing() -> None:
    # A victim the watch does not show (gone since the plan was made, or a holding that is no
    # pod, such as a ResourceClaim's): evicting it would free nothing the plan counts on.
    api, clock = FakeApi(), Clock()
    scheduler = full_cluster(api, clock)
    plan = PreemptionPlan(
        preemptor="default/high",
        outcome=Outcome.PLANNED,
        message="low1 and a claim go",
        priority=100,
        victims=(
            Victim(
                pod="default/low1-0",
                node="a",
                gpus=tuple(range(8)),
                priority=1,
                unit="default/low1",
            ),
            Victim(
                pod="ResourceClaim default/old",
                node="b",
                gpus=tuple(range(8)),
                priority=0,
                unit="default/old",
            ),
        ),
        bindings=(
            Binding(pod="default/high-0", node="a", gpus=tuple(range(8))),
            Binding(pod="default/high-1", node="b", gpus=tuple(range(8))),
        ),
    )
    scheduler.loop.preemptor.preempt([plan], scheduler.leadership.term)
    await scheduler.settle()
    assert scheduler.state.ledger.nominations == {}
    assert api.evictions == []
    assert sorted(r.key for r in scheduler.state.pending()) == HIGH


# ----- victims holding GPUs through ResourceClaims ------------------------------------------


async def dra_world(clock: Clock, size: int = 1) -> tuple[Scheduler, LoggingApi, FakeClaims]:
    """n1 publishes 8 GPUs through DRA, all of them allocated to ml/old-gpus, the claim of
    ml/old (priority 0, bound by us); then the gang ml/new (priority 100) of ``size`` pods
    (new, new-1 …) asks for 8 each through its own claims (new-gpus, new-1-gpus …); with
    ``size`` > 1, nodes n2 … are there, free."""
    api = LoggingApi()
    claims = FakeClaims(api.log)
    config = load_config({"operator": {"batchWindowSeconds": 0, "initialBackoffSeconds": 1}})
    scheduler = build_scheduler(config, ClusterState(), api, claims=claims, clock=clock)
    scheduler.claims.book.upsert_class(dra.device_class())
    scheduler.state.upsert_node(dra.node("n1"))
    scheduler.claims.book.upsert_slice(dra.resource_slice("n1"))
    bodies = {}
    for gang, priority, names in (("old", 0, ["old"]), ("new", 100, _names("new", size))):
        group = dra.pod_group(gang, "ml", len(names))
        group["spec"]["priority"] = priority
        scheduler.state.upsert_group(GroupKind.POD_GROUP, group)
        for name in names:
            scheduler.claims.book.upsert_claim(claims.add(dra.claim(f"{name}-gpus", "ml", 8)))
            body = dra.pod(name, "ml", claim_name=f"{name}-gpus", group=gang)
            body = prioritized(body, priority)
            body["metadata"]["uid"] = f"uid-{name}"
            bodies[name] = body
    scheduler.pod_changed(bodies["old"])
    await run_cycle(scheduler)
    assert bound_to(api) == {"ml/old": "n1"}
    bodies["old"]["spec"]["nodeName"] = "n1"  # the watch shows the bind
    scheduler.pod_changed(bodies["old"])
    scheduler.claims.book.upsert_claim(claims.claims["ml/old-gpus"])
    api.binds.clear()
    for index in range(2, size + 1):
        scheduler.state.upsert_node(dra.node(f"n{index}"))
        scheduler.claims.book.upsert_slice(dra.resource_slice(f"n{index}"))
    for name in _names("new", size):
        scheduler.pod_changed(bodies[name])
    return scheduler, api, claims


def _names(prefix: str, size: int) -> list[str]:
    return [prefix, *(f"{prefix}-{i}" for i in range(1, size))]


@pytest.mark.asyncio
async def test_a_pod_holding_gpus_through_a_claim_is_evicted_and_its_room_waits_for_it() -> None:
    # The claim's GPUs are old's: the plan names the pod, never the claim, and counts the
    # claim's 8 GPUs as freed by it. Its room is free only once kube-controller-manager has
    # deallocated the claim, after the pod is gone.
    clock = Clock()
    scheduler, api, claims = await dra_world(clock)
    await run_cycle(scheduler)
    assert api.evictions == ["ml/old"]
    [plan] = scheduler.loop.preemptor._plans.values()
    [victim] = plan.victims
    assert (victim.pod, victim.gpus, victim.claims) == (
        "ml/old",
        tuple(range(8)),
        ("ResourceClaim ml/old-gpus",),
    )

    scheduler.pod_deleted("ml/old", "uid-old")
    clock.now += 1
    await run_cycle(scheduler)
    assert api.binds == []  # its claim still holds the devices
    assert "ml/new" in scheduler.state.ledger.nominations

    freed = claims.claims["ml/old-gpus"]
    freed["status"] = {}  # kube-controller-manager deallocates it
    scheduler.claims.book.upsert_claim(claims.add(freed))
    clock.now += 1
    await run_cycle(scheduler)
    assert bound_to(api) == {"ml/new": "n1"}


@pytest.mark.asyncio
async def test_a_group_unschedulable_for_a_claim_being_deleted_evicts_nothing() -> None:
    # Its pod could not be offered to the engine at all: room made for it would not bind.
    clock = Clock()
    scheduler, api, claims = await dra_world(clock, size=2)
    deleting = claims.claims["ml/new-1-gpus"]
    deleting["metadata"]["deletionTimestamp"] = "2026-12-01T10:00:00Z"
    scheduler.claims.book.upsert_claim(claims.add(deleting))
    await run_cycle(scheduler)
    assert api.evictions == []
    assert scheduler.state.ledger.nominations == {}
    [condition] = api.last_status("ml/new")["conditions"]
    assert "ResourceClaim ml/new-1-gpus is being deleted" in condition["message"]

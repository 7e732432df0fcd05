"""``PodScheduled=False`` on pods left pending, and the Events that tell a wait: which reason
each kind of wait gets (autoscalers add nodes only for ``Unschedulable``), written once per
change, paced, and never on a pod reserved or bound since.

The real API server's side (the condition in ``kubectl describe``, cleared by the bind) is in
tests/integration/test_pod_conditions_live.py."""

from __future__ import annotations

import time
from typing import Any

import pytest

from gpusched.api.config import load_config
from gpusched.engine.groups import GroupKind
from gpusched.scheduler.factory import build_scheduler
from gpusched.scheduler.podconditions import PodConditions, Wanted
from gpusched.scheduler.ports import ObjectRef
from gpusched.scheduler.service import Scheduler
from gpusched.scheduler.state import ClusterState
from testing.clock import Clock
from testing.fakes import FakeApi
from testing.manifests import node, pod, pod_group


def service(api: FakeApi, clock: Clock) -> Scheduler:
    config = load_config({"operator": {"batchWindowSeconds": 0, "initialBackoffSeconds": 1}})
    return build_scheduler(config, ClusterState(), api, clock=clock)


async def cycle(scheduler: Scheduler) -> None:
    await scheduler.cycle()
    await scheduler.settle()
    await scheduler.reporter.flush()


def conditions(api: FakeApi) -> dict[str, tuple[str, str, str]]:
    """The latest condition written on each pod: (status, reason, message)."""
    return {k: (c["status"], c["reason"], c["message"]) for k, c in api.scheduled_conditions}


def shown(body: dict[str, Any], condition: tuple[str, str, str], version: str) -> dict[str, Any]:
    """``body`` as the watch shows it once our patch landed."""
    status, reason, message = condition
    body = dict(
        body,
        status={
            "phase": "Pending",
            "conditions": [
                {"type": "PodScheduled", "status": status, "reason": reason, "message": message}
            ],
        },
    )
    body["metadata"] = dict(body["metadata"], resourceVersion=version)
    return body


def two_gpu_node(scheduler: Scheduler) -> None:
    scheduler.state.upsert_node(node("a", gpus=2, kind=None))


@pytest.mark.asyncio
async def test_a_gang_that_does_not_fit_is_marked_unschedulable_once_with_its_groups_reason() -> (
    None
):
    api, clock = FakeApi(), Clock()
    scheduler = service(api, clock)
    two_gpu_node(scheduler)
    scheduler.state.upsert_group(GroupKind.POD_GROUP, pod_group("g", 2, key=None))
    bodies = [pod(f"g-{i}", 2, group="g") for i in range(2)]
    for body in bodies:
        scheduler.state.upsert_pod(body)
    await cycle(scheduler)

    written = conditions(api)
    assert sorted(written) == ["default/g-0", "default/g-1"]
    status, reason, message = written["default/g-0"]
    assert (status, reason) == ("False", "Unschedulable")
    group = scheduler.reporter.attempts["default/g"]
    assert message == group.message  # the group's reason, as its status says it

    # The watch shows our patch; the same failure again writes nothing more.
    for i, body in enumerate(bodies):
        scheduler.state.upsert_pod(shown(body, written[f"default/g-{i}"], str(10 + i)))
    api.scheduled_conditions.clear()
    asked: list[str] = []
    want = scheduler.reporter.conditions.want

    def counted(ref: ObjectRef, *args: Any) -> bool:
        asked.append(ref.key)
        return want(ref, *args)

    scheduler.reporter.conditions.want = counted  # type: ignore[method-assign]
    clock.now += 60  # past the group's backoff: it is decided again
    await cycle(scheduler)
    assert sorted(asked) == ["default/g-0", "default/g-1"]
    assert api.scheduled_conditions == []


@pytest.mark.asyncio
async def test_waits_get_their_own_reasons_and_one_event_each_not_unschedulable() -> None:
    api, clock = FakeApi(), Clock()
    scheduler = service(api, clock)
    two_gpu_node(scheduler)
    scheduler.state.upsert_group(GroupKind.POD_GROUP, pod_group("short", 5, key=None))
    scheduler.state.upsert_pod(pod("short-0", 1, group="short"))
    scheduler.state.upsert_pod(pod("orphan", 1, group="not-yet"))
    scheduler.state.upsert_pod(pod("gated", 1, gates=["example.com/quota"]))
    await cycle(scheduler)

    written = conditions(api)
    assert written["default/short-0"][:2] == ("False", "WaitingForPods")
    assert "1 of 5" in written["default/short-0"][2]
    assert written["default/orphan"][:2] == ("False", "WaitingForPodGroup")
    assert "default/gated" not in written  # SchedulingGated is the API server's own
    told = {(e["involvedObject"]["name"], e["type"], e["reason"]) for e in api.events}
    assert {
        ("short-0", "Normal", "WaitingForPods"),
        ("orphan", "Normal", "WaitingForPodGroup"),
        ("gated", "Normal", "SchedulingGated"),
    } <= told
    assert not any(e["type"] == "Warning" for e in api.events), api.events

    # The same waits again: no Event, no patch (the first ones are not even refreshed).
    before = (len(api.events), len(api.event_patches), len(api.scheduled_conditions))
    clock.now += 5
    await cycle(scheduler)
    assert (len(api.events), len(api.event_patches), len(api.scheduled_conditions)) == before


@pytest.mark.asyncio
async def test_a_group_appearing_while_the_engine_decides_leaves_its_pods_told_to_wait() -> None:
    """The README's order (a Workload, then its pods): the PodGroup the Workload materializes
    can reach the watch while the engine, in its thread, decides without it. The pods are told
    what that decision said (their group was missing: a Normal wait), never a Warning."""
    api, clock = FakeApi(), Clock()
    scheduler = service(api, clock)
    two_gpu_node(scheduler)
    scheduler.state.upsert_pod(pod("late-0", 1, group="late"))
    decide = scheduler.loop.decider.decide

    async def group_arrives_meanwhile(ready: Any) -> Any:
        decided = await decide(ready)
        scheduler.state.upsert_group(GroupKind.POD_GROUP, pod_group("late", 1, key=None))
        return decided

    scheduler.loop.decider.decide = group_arrives_meanwhile  # type: ignore[method-assign]
    await cycle(scheduler)

    assert conditions(api)["default/late-0"][:2] == ("False", "WaitingForPodGroup")
    assert [(e["type"], e["reason"]) for e in api.events] == [("Normal", "WaitingForPodGroup")]


@pytest.mark.asyncio
async def test_a_pod_bound_before_its_condition_goes_out_gets_none() -> None:
    api, clock = FakeApi(), Clock()
    pending = {"default/p"}
    writer = PodConditions(api=api, clock=clock, pending=lambda key: key in pending)
    ref = ObjectRef("v1", "Pod", "default", "p", "uid-p")
    assert writer.want(ref, "7", None, Wanted("Unschedulable", "0/1 nodes are available"))
    pending.clear()  # bound meanwhile: the bind set PodScheduled=True
    await writer.flush()
    assert api.scheduled_conditions == []


@pytest.mark.asyncio
async def test_a_message_that_only_moves_is_rewritten_at_most_every_thirty_seconds() -> None:
    api, clock = FakeApi(), Clock()
    writer = PodConditions(api=api, clock=clock, pending=lambda key: True)
    ref = ObjectRef("v1", "Pod", "default", "p", "uid-p")
    assert writer.want(ref, "1", None, Wanted("WaitingForPods", "1 of 5 valid pods exist"))
    await writer.flush()
    assert not writer.want(ref, "2", None, Wanted("WaitingForPods", "2 of 5 valid pods exist"))
    await writer.flush()
    assert len(api.scheduled_conditions) == 1
    clock.now += 31
    writer.want(ref, "3", None, Wanted("WaitingForPods", "3 of 5 valid pods exist"))
    assert writer.want(ref, "3", None, Wanted("Unschedulable", "0/1 nodes are available"))
    await writer.flush()
    assert [c["message"] for _, c in api.scheduled_conditions] == [
        "1 of 5 valid pods exist",
        "0/1 nodes are available",  # the newest replaced the queued one
    ]


@pytest.mark.asyncio
async def test_five_thousand_pending_pods_are_written_once_paced_at_fifty_a_second() -> None:
    api, clock = FakeApi(), Clock()
    writer = PodConditions(api=api, clock=clock, pending=lambda key: True)
    refs = [ObjectRef("v1", "Pod", "default", f"p{i}", f"uid-{i}") for i in range(5000)]
    wanted = Wanted("Unschedulable", "0/12 nodes are available: 12 Insufficient nvidia.com/gpu")
    for ref in refs:
        writer.want(ref, "1", None, wanted)
    start = clock.now
    writer._wake.set()
    await writer._drain(paced=True)
    assert len(api.scheduled_conditions) == 5000
    assert 99.0 <= clock.now - start <= 100.0  # 5,000 at 50 a second, on the fake clock

    # Every cycle after that asks again for all 5,000: what it costs when nothing changed.
    took = time.perf_counter()
    for ref in refs:
        writer.want(ref, "1", None, wanted)
    per_cycle = time.perf_counter() - took
    await writer.flush()
    assert len(api.scheduled_conditions) == 5000
    print(f"\n5,000 unchanged pending pods: {per_cycle * 1000:.1f} ms a cycle, 0 writes")

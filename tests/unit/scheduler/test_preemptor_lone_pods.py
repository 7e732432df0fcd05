"""A pod without a group preempts like kube-scheduler would, on the fake `ClusterApi`:

    #   node a (8 GPUs): small-0 (GPUs 0-1), small-1 (2-3), big (4-7), all priority 1

A 4-GPU pod of priority 100 arriving evicts big alone (the fewest victims of the lowest
priority), is nominated to a and bound there once big is gone; one of priority 1, or one whose
``preemptionPolicy`` is Never, evicts nothing.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpusched.scheduler.service import Scheduler
from testing.clock import Clock
from testing.fakes import FakeApi
from testing.manifests import node, pod
from tests.unit.scheduler.test_preemptor import prioritized, reasons
from tests.unit.scheduler.test_scheduler_service import bound_to, run_cycle, service


def full_node(api: FakeApi, clock: Clock) -> Scheduler:
    scheduler = service(api, clock)
    scheduler.state.upsert_node(node("a"))
    for name, gpus in (("small-0", range(2)), ("small-1", range(2, 4)), ("big", range(4, 8))):
        body = pod(name, len(gpus), node="a", at=gpus, cpu="1", memory="1Gi")
        scheduler.state.upsert_pod(prioritized(body, 1))
    return scheduler


def lone(priority: int, policy: str | None = None) -> dict[str, Any]:
    body = prioritized(pod("urgent", 4, cpu="1", memory="1Gi"), priority)
    if policy is not None:
        body["spec"]["preemptionPolicy"] = policy
    return body


@pytest.mark.asyncio
async def test_a_lone_pod_evicts_the_fewest_lowest_pods_and_is_bound_into_their_room() -> None:
    api, clock = FakeApi(), Clock()
    scheduler = full_node(api, clock)
    scheduler.pod_changed(lone(100))
    await run_cycle(scheduler)

    assert api.evictions == ["default/big"]
    held = scheduler.state.ledger.nominations["default/urgent"]
    assert [(h.pod.key, h.node, h.gpus) for h in held.holdings] == [
        ("default/urgent", "a", (4, 5, 6, 7))
    ]
    assert api.pod_statuses == [("default/urgent", {"nominatedNodeName": "a"})]
    assert reasons(api, "big") == [
        ("Preempted", "Preempted by default/urgent (priority 100) on node a")
    ]
    [message] = [m for reason, m in reasons(api, "urgent") if reason == "Preempting"]
    assert message.startswith("Preempting 1 pod: default/big. evict 1 pod in"), message
    assert scheduler.state.pending() == []

    scheduler.pod_deleted("default/big", "uid-big")
    clock.now += 1
    await run_cycle(scheduler)
    assert bound_to(api) == {"default/urgent": "a"}
    assert scheduler.state.ledger.nominations == {}


@pytest.mark.parametrize(
    ("story", "priority", "policy"),
    [
        ("of the victims' own priority", 1, None),
        ("whose preemptionPolicy is Never", 100, "Never"),
    ],
)
@pytest.mark.asyncio
async def test_a_lone_pod_that_may_not_preempt_evicts_nothing(
    story: str, priority: int, policy: str | None
) -> None:
    api, clock = FakeApi(), Clock()
    scheduler = full_node(api, clock)
    scheduler.pod_changed(lone(priority, policy))
    await run_cycle(scheduler)
    assert (api.evictions, api.deleted, api.annotations) == ([], [], []), story
    assert scheduler.state.ledger.nominations == {}
    assert [r.key for r in scheduler.state.pending()] == ["default/urgent"]
    assert [reason for reason, _ in reasons(api, "urgent")] == ["FailedScheduling"]


@pytest.mark.asyncio
async def test_a_lone_pod_with_an_unknown_preemption_policy_says_so_and_evicts_nothing() -> None:
    api, clock = FakeApi(), Clock()
    scheduler = full_node(api, clock)
    scheduler.pod_changed(lone(100, "Sometimes"))
    await run_cycle(scheduler)
    assert (api.evictions, api.deleted, api.annotations) == ([], [], [])
    [(reason, message)] = reasons(api, "urgent")
    assert reason == "FailedScheduling"
    assert message.startswith(
        "Invalid: Pod default/urgent: spec.preemptionPolicy: Input should be "
        "'PreemptLowerPriority' or 'Never'"
    ), message

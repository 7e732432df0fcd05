"""A cycle decides at most `CYCLE_PODS` pending pods, whole root groups first in the engine's
order (priority, then age), and the next cycle takes the rest: a new leader that finds
thousands pending binds its first pods after one short cycle. Here the bound is 3."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from gpusched.api.config import load_config
from gpusched.engine.groups import GroupKind
from gpusched.scheduler import loop
from gpusched.scheduler.factory import build_scheduler
from gpusched.scheduler.service import Scheduler
from gpusched.scheduler.state import ClusterState
from testing.clock import WALL_START, Clock
from testing.fakes import FakeApi
from testing.manifests import node, pod, pod_group


@pytest.fixture(autouse=True)
def three_a_cycle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loop, "CYCLE_PODS", 3)


def service(api: FakeApi) -> Scheduler:
    config = load_config({"operator": {"batchWindowSeconds": 0}})
    scheduler = build_scheduler(config, ClusterState(), api, clock=Clock())
    for name in ("a", "b"):
        scheduler.state.upsert_node(node(name, gpus=8))
    return scheduler


async def cycle(scheduler: Scheduler, api: FakeApi) -> list[str]:
    """The pods bound by one more cycle, in order."""
    before = len(api.binds)
    await scheduler.cycle()
    await scheduler.settle()
    await scheduler.reporter.flush()
    return [key.removeprefix("default/") for key, _, _ in api.binds[before:]]


START = WALL_START


def at(second: int) -> str:
    """A creation time ``second`` seconds after the test clock's start (no gang timed out)."""
    return (START + timedelta(seconds=second)).strftime("%Y-%m-%dT%H:%M:%SZ")


def group(name: str, size: int, created: str) -> dict[str, Any]:
    body = pod_group(name, size, key=None)
    body["metadata"]["creationTimestamp"] = created
    return body


@pytest.mark.asyncio
async def test_seven_pending_pods_are_bound_oldest_first_three_a_cycle() -> None:
    api = FakeApi()
    scheduler = service(api)
    for second in (6, 2, 4, 0, 5, 1, 3):
        scheduler.state.upsert_pod(pod(f"p{second}", 1, created=at(second)))
    assert sorted(await cycle(scheduler, api)) == ["p0", "p1", "p2"]
    assert sorted(await cycle(scheduler, api)) == ["p3", "p4", "p5"]
    assert await cycle(scheduler, api) == ["p6"]


@pytest.mark.asyncio
async def test_a_gang_is_never_split_across_cycles_and_waits_unreported_for_its_turn() -> None:
    # s0 is oldest; the gang's three pods come next and would make four: they wait a cycle,
    # whole, and the cycle that left them out records no attempt of their group.
    api = FakeApi()
    scheduler = service(api)
    scheduler.state.upsert_group(GroupKind.POD_GROUP, group("g", 3, created=at(1)))
    scheduler.state.upsert_pod(pod("s0", 1, created=at(0)))
    for index in range(3):
        scheduler.state.upsert_pod(pod(f"g{index}", 1, group="g", created=at(1)))
    scheduler.state.upsert_pod(pod("s9", 1, created=at(9)))
    assert await cycle(scheduler, api) == ["s0"]
    assert "lastAttempt" not in api.last_status("default/g")
    assert sorted(await cycle(scheduler, api)) == ["g0", "g1", "g2"]
    assert api.last_status("default/g")["lastAttempt"]["reason"] == "Scheduled"
    assert await cycle(scheduler, api) == ["s9"]


@pytest.mark.asyncio
async def test_a_gang_larger_than_the_bound_is_decided_alone_in_one_cycle() -> None:
    api = FakeApi()
    scheduler = service(api)
    scheduler.state.upsert_group(GroupKind.POD_GROUP, group("big", 5, created=at(0)))
    for index in range(5):
        scheduler.state.upsert_pod(pod(f"big{index}", 1, group="big", created=at(0)))
    scheduler.state.upsert_pod(pod("s1", 1, created=at(1)))
    assert sorted(await cycle(scheduler, api)) == [f"big{i}" for i in range(5)]
    assert await cycle(scheduler, api) == ["s1"]

"""``gpusched_gang_bind_seconds`` is measured on the service's clock, from the first cycle that
saw a gang's pods pending to its last pod bound: exact to the clock's resolution, never the
one second of a ``creationTimestamp``."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from gpusched.engine.groups import GroupKind
from gpusched.scheduler.gangtimer import GangTimer
from testing.clock import Clock
from testing.fakes import FakeApi
from testing.manifests import node, pod, pod_group
from tests.unit.scheduler.test_scheduler_service import bound_to, run_cycle, service


def histogram() -> tuple[float, float]:
    count = REGISTRY.get_sample_value("gpusched_gang_bind_seconds_count") or 0.0
    total = REGISTRY.get_sample_value("gpusched_gang_bind_seconds_sum") or 0.0
    return count, total


@pytest.mark.asyncio
async def test_a_gang_that_waited_a_quarter_second_for_its_last_pod_is_measured_so() -> None:
    api, clock = FakeApi(), Clock()
    scheduler = service(api, clock)
    scheduler.state.upsert_node(node("a", gpus=8))
    scheduler.state.upsert_group(GroupKind.POD_GROUP, pod_group("g", 2))
    scheduler.state.upsert_pod(pod("g-0", 2, group="g"))
    before = histogram()
    await run_cycle(scheduler)  # first sight: waiting for its second pod
    assert bound_to(api) == {}
    clock.now += 0.25
    scheduler.state.upsert_pod(pod("g-1", 2, group="g"))
    await run_cycle(scheduler)
    assert set(bound_to(api)) == {"default/g-0", "default/g-1"}
    count, total = histogram()
    assert count - before[0] == 1
    assert total - before[1] == pytest.approx(0.25)


def test_the_timer_forgets_a_gang_that_went_without_binding_and_measures_it_afresh() -> None:
    clock = Clock()
    timer = GangTimer(clock)
    timer.seen({"default/g"}, set())
    clock.now += 5
    timer.seen(set(), {"default/g"})  # its pods reserved: still measured
    clock.now += 1
    timer.seen(set(), set())  # deleted
    assert timer.bound("default/g") is None
    timer.seen({"default/g"}, set())
    clock.now += 0.5
    assert timer.bound("default/g") == pytest.approx(0.5)
    assert timer.bound("default/g") is None

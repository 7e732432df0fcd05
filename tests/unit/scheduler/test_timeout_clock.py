"""A gang's schedule timeout is judged on the service's injected clock, never on the machine's
date: a test suite that runs slower than the timeout (a loaded or one-core machine) sees the
same statuses as a fast one. The fixtures' pods are created when the test clock starts
(`testing.manifests.NOW`), a date long before any machine running these tests, so a
reporter that read the machine's date would see every gang timed out at the first cycle."""

from __future__ import annotations

import pytest

from gpusched.engine.groups import GroupKind
from testing.clock import WALL_START, Clock
from testing.fakes import FakeApi
from testing.manifests import NOW, node, pod, pod_group
from tests.unit.scheduler.test_scheduler_service import run_cycle, service


def test_the_fixtures_are_created_when_the_test_clock_starts() -> None:
    clock = Clock()
    assert (NOW, clock.wall()) == (WALL_START.strftime("%Y-%m-%dT%H:%M:%SZ"), WALL_START)
    clock.now += 301
    assert (clock.wall() - WALL_START).total_seconds() == 301


@pytest.mark.asyncio
async def test_a_gang_times_out_when_the_test_clock_passes_its_timeout_and_not_before() -> None:
    api, clock = FakeApi(), Clock()
    scheduler = service(api, clock)
    scheduler.state.upsert_node(node("a", gpus=2))
    scheduler.state.upsert_group(GroupKind.POD_GROUP, pod_group("g", 2, timeout=300))
    for i in range(2):
        scheduler.state.upsert_pod(pod(f"g-{i}", 2, group="g"))
    reasons = []
    for seconds in (0, 299, 2):
        clock.now += seconds
        await run_cycle(scheduler)
        status = api.last_status("default/g")
        reasons.append((status["phase"], status["conditions"][0]["reason"]))
    assert reasons == [
        ("Pending", "Unschedulable"),
        ("Pending", "Unschedulable"),
        ("Unschedulable", "Timeout"),
    ]

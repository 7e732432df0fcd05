"""A new term's first decisions wait for telemetry joined with the node list just read
(`FirstRead`), at most ``telemetry.firstReadWaitSeconds`` on the service's clock; past it the
``stale`` policy decides. The same with a real Prometheus and the real control plane:
tests/integration/test_first_read_real.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from gpusched.api.config import load_config
from gpusched.engine.health import GpuSample
from gpusched.scheduler.factory import build_scheduler
from gpusched.scheduler.ports import Listing
from gpusched.scheduler.service import Scheduler
from gpusched.scheduler.state import ClusterState
from testing.clock import Clock
from testing.fakes import FakeApi
from testing.manifests import node, pod
from tests.unit.scheduler.test_scheduler_service import run_cycle

HOT = GpuSample(temperature_c=95.0, fb_free_mib=80000.0, fb_used_mib=0.0, xid_errors=0.0)
COOL = GpuSample(temperature_c=40.0, fb_free_mib=80000.0, fb_used_mib=0.0, xid_errors=0.0)


class Telemetry:
    """Nothing until joined; then GPUs 0-3 of node a are hot. ``answers``: whether the
    read ever comes."""

    def __init__(self, answers: bool) -> None:
        self.answers = answers
        self.data: dict[tuple[str, int], GpuSample] = {}

    def samples(self) -> Mapping[tuple[str, int], GpuSample]:
        return self.data

    async def join(self) -> bool:
        if not self.answers:
            await asyncio.Event().wait()  # Prometheus never answers
        self.data = {("a", g): HOT if g < 4 else COOL for g in range(8)}
        return True


def _leader(telemetry: Telemetry, clock: Clock) -> tuple[Scheduler, FakeApi]:
    api = FakeApi()
    config = load_config(
        {"operator": {"batchWindowSeconds": 0}, "telemetry": {"firstReadWaitSeconds": 3}}
    )
    scheduler = build_scheduler(
        config,
        ClusterState(),
        api,
        clock=clock,
        leading=lambda: True,
        telemetry=telemetry.samples,
        telemetry_join=telemetry.join,
    )

    async def list_nodes() -> list[dict[str, Any]]:
        return [node("a", gpus=8)]

    api.list_nodes = list_nodes  # type: ignore[method-assign]
    return scheduler, api


async def _backlog() -> AsyncIterator[Listing]:
    yield Listing([pod("p", 4)])  # pending before this replica took the Lease


@pytest.mark.asyncio
async def test_a_new_leader_places_its_backlog_only_with_the_telemetry_joined() -> None:
    clock = Clock()
    scheduler, api = _leader(Telemetry(answers=True), clock)
    await scheduler.take_leadership(_backlog())
    await run_cycle(scheduler)
    assert scheduler.first_read.waited == 0.0
    assert [(key, n, a["gpusched.io/gpus"]) for key, n, a in api.binds] == [
        ("default/p", "a", "4,5,6,7")
    ], "the hot GPUs 0-3 were known hot before the first decision"


@pytest.mark.asyncio
async def test_a_read_that_never_comes_holds_the_first_decision_for_the_stated_wait() -> None:
    clock = Clock()
    scheduler, api = _leader(Telemetry(answers=False), clock)
    started = clock.now
    await scheduler.take_leadership(_backlog())
    assert scheduler.first_read.waited == 3.0
    assert clock.now - started == 3.0, "the wait is the configured one, on the service's clock"
    await run_cycle(scheduler)
    # Past the wait, GPUs without telemetry count as `stale` says (usable by default).
    assert [(key, n) for key, n, _ in api.binds] == [("default/p", "a")]

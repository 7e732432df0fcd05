"""On device-plugin nodes the kubelet's record (``gpusched.io/gpus-actual``, published by the
agent) is the ledger's truth: the engine avoids the GPUs a pod really holds, and a pod that
got other GPUs than gpusched chose is counted and reported once."""

from __future__ import annotations

import pytest

from gpusched.scheduler.assignments import MISMATCHES
from testing.clock import Clock
from testing.fakes import FakeApi
from testing.manifests import node, pod
from tests.unit.scheduler.test_scheduler_service import run_cycle, service


@pytest.mark.asyncio
async def test_the_ledger_counts_the_gpus_the_kubelet_gave_and_reports_the_mismatch() -> None:
    api, clock = FakeApi(), Clock()
    scheduler = service(api, clock)
    body = node("a")
    # gpusched chose 0-3 for "old"; the device plugin gave it 4-7.
    body["metadata"]["annotations"]["gpusched.io/gpus-actual"] = '{"default/old":[4,5,6,7]}'
    scheduler.state.upsert_node(body)
    chosen = {"gpusched.io/gpus": "0,1,2,3"}
    scheduler.state.upsert_pod(pod("old", 4, node="a", annotations=chosen))
    scheduler.state.upsert_pod(pod("new", 4))
    before = MISMATCHES._value.get()
    await run_cycle(scheduler)
    (bind,) = api.binds
    assert bind[0] == "default/new"
    assert bind[2] == {"gpusched.io/gpus": "0,1,2,3"}  # free in truth, though once "chosen"
    warnings = [e for e in api.events if e["reason"] == "GPUAssignmentMismatch"]
    assert [e["message"] for e in warnings] == [
        "default/old on a: gpusched chose GPUs 0,1,2,3, the kubelet gave 4,5,6,7; "
        "the ledger counts 4,5,6,7"
    ]
    assert MISMATCHES._value.get() == before + 1
    scheduler.state.upsert_pod(pod("later", 1))
    await run_cycle(scheduler)
    assert MISMATCHES._value.get() == before + 1  # once per pod, not per cycle


@pytest.mark.asyncio
async def test_a_pod_the_kubelet_gave_what_gpusched_chose_is_no_mismatch() -> None:
    api, clock = FakeApi(), Clock()
    scheduler = service(api, clock)
    body = node("a")
    body["metadata"]["annotations"]["gpusched.io/gpus-actual"] = '{"default/old":[0,1]}'
    scheduler.state.upsert_node(body)
    scheduler.state.upsert_pod(pod("old", 2, node="a", annotations={"gpusched.io/gpus": "1,0"}))
    await run_cycle(scheduler)
    assert not [e for e in api.events if e["reason"] == "GPUAssignmentMismatch"]

"""What a nomination holds while its victims terminate, for everyone else's pods.

    #   node a: 8 GPUs, 16 CPUs; low (8 GPUs, 12 CPUs, priority 1) on it
    #   urgent (8 GPUs, 2 CPUs, priority 100) preempts low

Until low is gone the kubelet still counts its CPUs (a pod bound beside it beyond what is left
would be refused, OutOfcpu), and urgent will take its 2 once bound: only low's GPUs are
promised to urgent. A pod that fits beside both is placed at once; one that needs low's CPUs
waits for low to go.
"""

from __future__ import annotations

import pytest

from testing.clock import Clock
from testing.fakes import FakeApi
from testing.manifests import node, pod
from tests.unit.scheduler.test_preemptor import prioritized
from tests.unit.scheduler.test_scheduler_service import bound_to, run_cycle, service

DELETED_AT = "2026-12-01T10:00:00Z"


@pytest.mark.asyncio
async def test_a_victims_cpus_count_until_it_is_gone_and_only_its_gpus_are_promised() -> None:
    api, clock = FakeApi(), Clock()
    scheduler = service(api, clock)
    scheduler.state.upsert_node(node("a", cpu="16"))
    low = prioritized(pod("low", 8, node="a", at=range(8), cpu="12", memory="1Gi"), 1)
    scheduler.state.upsert_pod(low)
    scheduler.pod_changed(prioritized(pod("urgent", 8, cpu="2", memory="1Gi"), 100))
    await run_cycle(scheduler)
    assert api.evictions == ["default/low"]
    low["metadata"]["deletionTimestamp"] = DELETED_AT  # terminating, still running
    scheduler.pod_changed(low)

    for name, cpus in (("small", "2"), ("large", "8")):
        scheduler.pod_changed(pod(name, 0, cpu=cpus, memory="1Gi"))
    clock.now += 1
    await run_cycle(scheduler)
    assert bound_to(api) == {"default/small": "a"}  # 16 - 12 (low) - 2 (urgent's) = 2 left

    scheduler.pod_changed(pod("small", 0, node="a", cpu="2", memory="1Gi"))
    scheduler.pod_deleted("default/low", "uid-low")
    clock.now += 10
    await run_cycle(scheduler)
    assert bound_to(api) == {"default/small": "a", "default/urgent": "a", "default/large": "a"}

"""A preemption in flight outlives its leader: the first replica records the plan in the cluster
before its first eviction, is killed between evictions, and the next one carries the same plan
on from what the cluster shows. It evicts only what is left of the first plan's victims and
binds where that plan said; a record that no longer holds is cleared.

The cluster of `test_preemptor` (low1 in rack-1 is the cheapest to evict for high):

    #   rack-1: a (low1-0)  b (low1-1)      rack-2: c (low2-0)  d (low2-1)
"""

from __future__ import annotations

import asyncio
import copy
import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from gpusched.engine.groups import GroupKind
from gpusched.scheduler.ports import ApiError, Fence, ObjectRef
from gpusched.scheduler.service import Scheduler
from testing.clock import Clock
from testing.fakes import FakeApi
from testing.manifests import node, pod
from tests.unit.scheduler.test_preemptor import HIGH, LOW1, dra_world, group, prioritized
from tests.unit.scheduler.test_scheduler_service import bound_to, run_cycle, service

Body = dict[str, Any]
PLACE = "gpusched.io/nomination"
MARK = "gpusched.io/preemption"
DELETED_AT = "2026-12-01T10:00:00Z"


@dataclass
class StuckApi(FakeApi):
    """Its evictions of the pods in ``stuck`` never answer: the replica is killed while they
    are in flight."""

    stuck: set[str] = field(default_factory=set)

    async def evict(self, pod: ObjectRef, fence: Fence | None = None) -> None:
        if pod.key in self.stuck:
            await asyncio.Event().wait()
        await super().evict(pod, fence)


def bodies(low1_mode: str) -> dict[str, Body]:
    """The objects of the cluster, as created (PodGroups under ``group:`` keys)."""
    found: dict[str, Body] = {}
    for gang, priority, nodes, mode in (
        ("low1", 1, "ab", low1_mode),
        ("low2", 5, "cd", "All"),
    ):
        found[f"group:{gang}"] = group(gang, priority, mode)
        for i, where in enumerate(nodes):
            body = pod(f"{gang}-{i}", 8, group=gang, node=where, at=range(8))
            found[f"default/{gang}-{i}"] = prioritized(body, priority)
    found["group:high"] = group("high", 100)
    for i in range(2):
        found[f"default/high-{i}"] = prioritized(pod(f"high-{i}", 8, group="high"), 100)
    return found


def replica(api: FakeApi, clock: Clock, objects: dict[str, Body]) -> Scheduler:
    """A replica that has just listed ``objects``."""
    scheduler = service(api, clock)
    for name, rack in (("a", "rack-1"), ("b", "rack-1"), ("c", "rack-2"), ("d", "rack-2")):
        scheduler.state.upsert_node(node(name, rack=rack))
    for key, body in objects.items():
        if key.startswith("group:"):
            scheduler.state.upsert_group(GroupKind.POD_GROUP, body)
        else:
            scheduler.state.upsert_pod(body)
    return scheduler


def as_written(objects: dict[str, Body], api: FakeApi) -> dict[str, Body]:
    """The objects once ``api``'s writes landed: annotations set or removed, evicted and
    deleted pods terminating (the kubelet has not confirmed them gone)."""
    after = copy.deepcopy(objects)
    for key, values in api.annotations:
        written = after[key]["metadata"]["annotations"]
        for name, value in values.items():
            if value is None:
                written.pop(name, None)
            else:
                written[name] = value
    for key in api.evictions + api.deleted:
        after[key]["metadata"]["deletionTimestamp"] = DELETED_AT
    return after


async def killed_between_evictions(low1_mode: str) -> tuple[dict[str, Body], list[str], Any]:
    """The first replica plans for high (low1's pods go), evicts low1-0 and is killed while
    low1-1's eviction is in flight: what the cluster then shows, what it evicted, and the
    room it had nominated (pod → node)."""
    api, clock = StuckApi(stuck={"default/low1-1"}), Clock()
    objects = bodies(low1_mode)
    first = replica(api, clock, objects)
    await first.cycle()
    for _ in range(100):  # let its background work run up to the stuck eviction
        if api.evictions:
            break
        await asyncio.sleep(0)
    held = first.state.ledger.nominations["default/high"]
    room = {h.pod.key: h.node for h in held.holdings}
    await first.background.cancel()  # killed
    return as_written(objects, api), list(api.evictions), room


@pytest.mark.parametrize("mode", ["Single", "All"])
@pytest.mark.asyncio
async def test_a_replica_taking_over_evicts_only_the_first_plans_victims_and_binds_there(
    mode: str,
) -> None:
    # Single: low1-1 is a unit of its own, untouched: evicted first alone. All: low1 was
    # begun, so the rest of it goes whole.
    listed, evicted, room = await killed_between_evictions(mode)
    assert evicted == ["default/low1-0"]
    assert room == {"default/high-0": "a", "default/high-1": "b"}
    for key in HIGH:
        place = json.loads(listed[key]["metadata"]["annotations"][PLACE])
        assert (place["node"], place["pods"]) == (room[key], 2)

    api, clock = FakeApi(), Clock()
    second = replica(api, clock, listed)
    await run_cycle(second)
    assert api.evictions == ["default/low1-1"]  # nothing but the rest of the first plan
    assert api.annotations == []  # no plan of its own: nothing marked, nothing recorded
    held = second.state.ledger.nominations["default/high"]
    assert {h.pod.key: h.node for h in held.holdings} == room
    assert sorted(held.victims) == LOW1

    second.pod_deleted("default/low1-0", "uid-low1-0")
    clock.now += 1
    await run_cycle(second)
    assert api.binds == []  # low1-1 still holds its GPUs
    second.pod_deleted("default/low1-1", "uid-low1-1")
    clock.now += 1
    await run_cycle(second)
    assert bound_to(api) == room
    assert api.evictions == ["default/low1-1"]


@pytest.mark.asyncio
async def test_a_begun_all_gang_goes_whole_after_a_take_over_even_past_its_budget() -> None:
    listed, _, _ = await killed_between_evictions("All")
    api, clock = FakeApi(), Clock()
    pdb = "Cannot evict pod as it would violate the pod's disruption budget."
    api.evict_failures = {"default/low1-1": [ApiError(429, pdb)]}
    second = replica(api, clock, listed)
    await run_cycle(second)
    assert (api.evictions, api.deleted) == ([], ["default/low1-1"])
    assert "default/high" in second.state.ledger.nominations


@pytest.mark.asyncio
async def test_a_record_that_no_longer_holds_is_cleared_and_its_untouched_victims_unmarked() -> (
    None
):
    # high-1 was deleted meanwhile: the plan's room is not held again; low1 (Single) keeps
    # low1-1, whose unit was never started; high's last pod is a gang of 2 short of a pod.
    listed, _, _ = await killed_between_evictions("Single")
    del listed["default/high-1"]
    api, clock = FakeApi(), Clock()
    second = replica(api, clock, listed)
    await run_cycle(second)
    assert second.state.ledger.nominations == {}
    assert (api.evictions, api.deleted) == ([], [])
    assert sorted(api.annotations) == [
        ("default/high-0", {PLACE: None}),
        ("default/low1-1", {MARK: None}),
    ]


@pytest.mark.asyncio
async def test_a_record_whose_room_another_pod_took_is_cleared_and_the_gang_planned_afresh() -> (
    None
):
    # A pod that is no victim of the plan holds a nominated GPU (another scheduler bound it
    # there while no replica led): that room is not there to hold. The record is cleared
    # first; then high is planned like any pending group.
    listed, _, _ = await killed_between_evictions("Single")
    recorded = json.loads(listed["default/high-0"]["metadata"]["annotations"][PLACE])["plan"]
    listed["default/low1-0"] = pod("intruder", 8, node="a", at=range(8), scheduler="other")
    api, clock = FakeApi(), Clock()
    second = replica(api, clock, listed)
    await run_cycle(second)
    assert sorted(api.annotations[:3]) == [
        ("default/high-0", {PLACE: None}),
        ("default/high-1", {PLACE: None}),
        ("default/low1-1", {MARK: None}),
    ]
    assert second.state.ledger.nominations["default/high"].plan != recorded


@pytest.mark.asyncio
async def test_the_record_names_the_claims_the_room_waits_for() -> None:
    # ml/old holds n1's GPUs through its claim ml/old-gpus: the room is free only once the
    # claim is deallocated too, and whoever takes over must know to wait for it.
    clock = Clock()
    scheduler, api, _ = await dra_world(clock)
    await run_cycle(scheduler)
    assert api.evictions == ["ml/old"]
    [raw] = [a[PLACE] for key, a in api.annotations if key == "ml/new" and a.get(PLACE)]
    place = json.loads(raw)
    assert (place["node"], place["claims"]) == ("n1", ["ml/old-gpus"])
    assert scheduler.state.ledger.nominations["ml/new"].claims == ("ml/old-gpus",)


@pytest.mark.asyncio
async def test_a_place_that_cannot_be_read_is_cleared_and_the_pod_placed_as_any() -> None:
    api, clock = FakeApi(), Clock()
    objects = {"default/lone": pod("lone", 8, annotations={PLACE: '{"plan": "p1", "node": 3}'})}
    scheduler = replica(api, clock, objects)
    await run_cycle(scheduler)
    assert scheduler.state.ledger.nominations == {}
    assert api.annotations == [("default/lone", {PLACE: None})]
    assert bound_to(api) == {"default/lone": "a"}

"""Crash recovery: the operator is killed at each point of a gang's bind sequence and a new
one starts from what the API server has. Afterwards no GPU is held twice, no reservation is
left, the gang is complete in one rack, and its status says so.

    #        zone-a
    #      /        \\
    #   rack-1     rack-2
    #   n1 (8)     n2 (8)          gang g: 4 pods × 2 GPUs, minCount 4, one rack
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping
from typing import Any
from unittest import mock

import pytest

from gpusched.api.config import load_config
from gpusched.scheduler.ports import ApiError
from gpusched.scheduler.state import ClusterState
from testing.clock import Clock
from tests.chaos import invariants
from tests.chaos.runner import CONFIG, gpu_node, gpu_pod, pod_group
from tests.chaos.sim import Faults, Replica, World, inline_to_thread, pod_pages

GANG = 4


def _world() -> World:
    world = World()
    world.put_node(gpu_node("n1", "rack-1", 8))
    world.put_node(gpu_node("n2", "rack-2", 8))
    world.put_group(pod_group("g", GANG, rack=True))
    for i in range(GANG):
        world.create_pod(gpu_pod(f"g-{i}", 2, group="g"))
    return world


async def _start(world: World, clock: Clock) -> Replica:
    replica = Replica.start(
        "r",
        world,
        Faults(random.Random(0)),
        load_config(CONFIG),
        clock,
        lambda: None,
        random.Random(0),
        0,
    )
    replica.scheduler.lost_leadership()
    replica.leader = True
    replica.valid_until = float("inf")  # renews throughout

    await replica.scheduler.take_leadership(pod_pages(world))
    return replica


async def _settle(replica: Replica, clock: Clock) -> None:
    for _ in range(6):
        clock.now += 10
        replica.deliver(everything=True)
        await replica.scheduler.cycle()
        await replica.scheduler.settle()
        await replica.scheduler.reporter.outbox.flush()
        replica.deliver(everything=True)


def _crash_at(replica: Replica, call: str, after: int, *, applied: bool) -> list[int]:
    """Makes ``replica`` die on its ``after``-th ``call`` (0: the first), before or after
    the server applied it."""
    calls = [0]
    api = replica.api
    original = getattr(api, call)

    async def dying(*args: Any) -> None:
        n = calls[0]
        calls[0] += 1
        if n == after:
            if applied:
                await original(*args)
            replica.crash()
            raise asyncio.CancelledError
        await original(*args)

    setattr(api, call, dying)
    return calls


async def _story(call: str, after: int, applied: bool) -> tuple[World, Replica]:
    world, clock = _world(), Clock()
    first = await _start(world, clock)
    _crash_at(first, call, after, applied=applied)
    await first.scheduler.cycle()
    await asyncio.gather(*first.scheduler.background.running, return_exceptions=True)
    await asyncio.gather(first.scheduler.reporter.outbox.flush(), return_exceptions=True)
    assert invariants.no_gpu_shared(world) == []
    second = await _start(world, clock)
    await _settle(second, clock)
    return world, second


@pytest.mark.parametrize(
    ("call", "after", "applied"),
    [
        *[("bind", n, False) for n in range(GANG)],  # before the 1st, between, before the last
        *[("bind", n, True) for n in range(GANG)],  # right after the 1st … after the last
        ("patch_status", 0, False),  # during the status patch, lost
        ("patch_status", 0, True),  # during the status patch, applied
    ],
)
def test_killed_anywhere_in_a_gangs_bind_sequence_the_restart_completes_it(
    call: str, after: int, applied: bool
) -> None:
    with mock.patch("asyncio.to_thread", inline_to_thread):
        world, replica = asyncio.run(_story(call, after, applied))
    bound = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in world.pods.values()}
    assert None not in bound.values(), bound
    assert len(set(bound.values())) == 1, f"gang split over {bound}"
    assert invariants.no_gpu_shared(world) == []
    assert invariants.status_agrees_with_pods(world) == []
    assert invariants.ledger_and_cache_agree(world, [replica]) == []
    assert world.groups["default/g"]["status"]["phase"] == "Scheduled"


# ----- regressions found by the chaos suite ----------------------------------------------------


def _pod(uid: str, node: str | None = None, **labels: str) -> dict[str, Any]:
    body = gpu_pod("p", 2)
    body["metadata"].update(uid=uid, labels=labels)
    if node:
        body["spec"]["nodeName"] = node
        body["metadata"]["annotations"] = {"gpusched.io/gpus": "0,1"}
    return body


def test_a_watch_event_older_than_our_bind_does_not_free_the_pods_gpus() -> None:
    # Seed 75: p was labelled just before its bind; the label's event arrived after the bind
    # was confirmed and made p pending again, so its GPUs went to a second pod.
    state = ClusterState()
    state.upsert_node(gpu_node("n1", "rack-1", 8))
    state.upsert_pod(_pod("u1"))
    reservation = state.ledger.reserve("default/p", "n1", (0, 1))
    assert reservation is not None
    state.confirm("default/p", reservation)
    state.upsert_pod(_pod("u1", touched="yes"))  # the lagging event, without nodeName
    assert [(b.pod.key, b.node, b.gpus) for b in state.bound()] == [("default/p", "n1", (0, 1))]
    assert state.pending() == []
    state.upsert_pod(_pod("u2"))  # a new pod under the name is a different pod
    assert [r.key for r in state.pending()] == ["default/p"]


def test_an_invalid_pending_pod_of_ours_is_kept_with_its_error() -> None:
    # The stand-in built for an invalid pod had no container, so it failed to parse itself and
    # the watch handler raised: the pod never got its Event naming the field.
    state = ClusterState()
    body = gpu_pod("p", 1)
    body["spec"]["priority"] = "high"
    state.upsert_pod(body)
    [record] = state.pending()
    assert record.request is None
    assert record.error is not None
    assert "spec.priority" in record.error


@pytest.mark.parametrize(
    "body",
    [
        {"metadata": None},
        {"metadata": [], "spec": []},
        {"metadata": {"name": "g", "generation": [1]}, "status": []},
    ],
)
def test_malformed_watched_bodies_never_raise(body: Mapping[str, Any]) -> None:
    from gpusched.engine.groups import GroupKind

    state = ClusterState()
    state.upsert_node(body)
    state.upsert_pod(body)
    state.upsert_group(GroupKind.POD_GROUP, body)
    state.upsert_workload(body)


def test_a_pod_deleted_while_the_watch_was_down_is_dropped_as_soon_as_the_watch_relists() -> None:
    # Kopf relists after a 410 without telling deletions: "old" stayed in the cache holding
    # all eight GPUs of n1 until the periodic resync (five minutes), and "new" waited. The
    # relist itself now triggers the reconciling list: no clock has to move.
    async def story() -> tuple[World, Replica]:
        world, clock = World(), Clock()
        world.put_node(gpu_node("n1", "rack-1", 8))
        old = gpu_pod("old", 8)
        old["spec"]["nodeName"] = "n1"
        old["metadata"]["annotations"] = {"gpusched.io/gpus": "0,1,2,3,4,5,6,7"}
        world.create_pod(old)
        replica = await _start(world, clock)
        world.delete_pod("default/old")
        world.create_pod(gpu_pod("new", 8))
        # The deletion is lost; the fresh list does not tell it, but it shows new, which
        # is how the scheduler learns the watch started over (an empty list tells nothing).
        replica.watch.relist()
        replica.deliver(everything=True)
        for _ in range(3):  # the reconciling list, then new's first retry (1 s backoff)
            await replica.scheduler.cycle()
            await replica.scheduler.settle()
            clock.now += 1.0  # far below the periodic resync's 15 s
        return world, replica

    with mock.patch("asyncio.to_thread", inline_to_thread):
        world, replica = asyncio.run(story())
    assert "default/old" not in replica.state.pods
    assert world.pods["default/new"]["spec"]["nodeName"] == "n1"


def test_a_bind_whose_outcome_stays_unknown_is_checked_again_until_known() -> None:
    # The bind got no answer (it did not happen) and the pod could not be read back five
    # times: the reservation was kept, and nothing ever looked again, so the pod stayed
    # pending forever and its GPUs stayed held.
    async def story() -> tuple[World, Replica]:
        world, clock = World(), Clock()
        world.put_node(gpu_node("n1", "rack-1", 8))
        replica = await _start(world, clock)
        world.create_pod(gpu_pod("p", 8))
        replica.deliver(everything=True)
        api, failures = replica.api, {"bind": 1, "get_pod": 5}
        originals = {name: getattr(api, name) for name in failures}

        def failing(name: str) -> Any:
            async def call(*args: Any) -> Any:
                if failures[name]:
                    failures[name] -= 1
                    raise ApiError(0, "connection reset by peer")
                return await originals[name](*args)

            return call

        for name in failures:
            setattr(api, name, failing(name))
        await replica.scheduler.cycle()
        await replica.scheduler.settle()
        assert "default/p" in replica.state.ledger.reservations  # unknown: kept, as it should be
        await _settle(replica, clock)
        return world, replica

    with mock.patch("asyncio.to_thread", inline_to_thread):
        world, replica = asyncio.run(story())
    assert replica.state.ledger.reservations == {}
    assert world.pods["default/p"]["spec"]["nodeName"] == "n1"


def test_a_status_patch_that_failed_is_sent_again_even_if_the_watch_shows_it() -> None:
    # Seed 106895: "scheduled: 3" was applied but its answer lost; the next status,
    # "scheduled: 4", matched what the lagging watch still showed, so it was never sent and
    # the group said 3 pods for as long as nothing else changed.
    from gpusched.scheduler.outbox import StatusOutbox
    from gpusched.scheduler.ports import ObjectRef

    class Api:
        def __init__(self) -> None:
            self.sent: list[dict[str, Any]] = []
            self.fail = True

        async def patch_status(self, obj: ObjectRef, status: Mapping[str, Any]) -> None:
            self.sent.append(dict(status))
            if self.fail:
                self.fail = False
                raise ApiError(0, "connection reset by peer (after the patch was applied)")

    async def story() -> list[dict[str, Any]]:
        api, ref = Api(), ObjectRef("v1", "PodGroup", "default", "g")
        outbox = StatusOutbox(api, 60.0, lambda: 0.0)  # type: ignore[arg-type]
        watched = {"scheduled": 4}
        outbox.offer(ref, {"scheduled": 3}, watched)
        await outbox.flush()
        outbox.offer(ref, {"scheduled": 4}, watched)  # the watch has not shown "3" yet
        await outbox.flush()
        return api.sent

    assert asyncio.run(story()) == [{"scheduled": 3}, {"scheduled": 4}]

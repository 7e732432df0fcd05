"""No automatic garbage collection runs while the engine decides (`collector_paused`), and the
collector is left as each caller found it: its threshold as before, whatever the decision
raised, and `gc.disable` (its embedder's switch) neither undone nor left behind by a decision
that overlaps it; and `freeze_survivors` collects before it freezes."""

from __future__ import annotations

import dataclasses
import gc
import weakref
from collections.abc import Iterator

import pytest

from gpusched.engine.collector import collector_paused, freeze_survivors
from gpusched.engine.groups import GroupSpec
from gpusched.engine.policy import Policy
from gpusched.engine.preemption import plan_preemption
from gpusched.engine.request import PodRequest
from gpusched.engine.schedule import schedule
from gpusched.engine.snapshot import Snapshot
from testing.engine import (
    RACK,
    ZONE,
    bound,
    cluster,
    composite,
    gang,
    members,
    placements,
    pod,
)

CALLERS_THRESHOLD = 555
"""Not Python's default (700): a threshold put back from anywhere else would show."""


@pytest.fixture(autouse=True)
def collector_as_the_suite_had_it() -> Iterator[None]:
    threshold, enabled = gc.get_threshold(), gc.isenabled()
    gc.set_threshold(CALLERS_THRESHOLD)
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        (gc.enable if enabled else gc.disable)()


def two_racks() -> Snapshot:
    return cluster(zones={"z1": {"r1": ["a100x8"] * 2, "r2": ["a100x8"] * 2}})


def test_a_decision_runs_without_automatic_collections_and_puts_the_threshold_back() -> None:
    seen: list[int] = []

    result = schedule(
        two_racks(),
        members("train", 2, gpus=8, group="train"),
        [gang("train", 2, topology=RACK)],
        Policy(),
        observe=lambda _key, _work: seen.append(gc.get_threshold()[0]),
    )

    assert seen == [0], "automatic collections could run during the decision"
    assert gc.get_threshold()[0] == CALLERS_THRESHOLD
    assert gc.isenabled()
    assert sorted(node for node, _ in placements(result).values()) == ["node-a", "node-b"]


def test_a_policy_without_the_pause_leaves_the_collector_to_its_caller() -> None:
    # An embedder that owns the collector (or decides in several threads and wants no shared
    # setting changed) turns the pause off: the threshold it set stays during the decision.
    seen: list[int] = []

    result = schedule(
        two_racks(),
        members("train", 2, gpus=8, group="train"),
        [gang("train", 2, topology=RACK)],
        Policy(pause_collector=False),
        observe=lambda _key, _work: seen.append(gc.get_threshold()[0]),
    )

    assert seen == [CALLERS_THRESHOLD]
    assert gc.get_threshold()[0] == CALLERS_THRESHOLD
    assert sorted(node for node, _ in placements(result).values()) == ["node-a", "node-b"]


def test_a_decision_that_raises_still_puts_the_threshold_back() -> None:
    def fail(_key: str, _work: Snapshot) -> None:
        raise RuntimeError("observer failed")

    with pytest.raises(RuntimeError, match="observer failed"):
        schedule(
            two_racks(),
            members("train", 1, gpus=8, group="train"),
            [gang("train", 1)],
            Policy(),
            fail,
        )

    assert gc.get_threshold()[0] == CALLERS_THRESHOLD


def test_overlapping_decisions_keep_it_paused_until_the_last_one_leaves() -> None:
    # Two decisions in two threads: the first to leave must not resume collections under
    # the second.
    first, second = collector_paused(), collector_paused()
    first.__enter__()
    second.__enter__()
    try:
        first.__exit__(None, None, None)
        assert gc.get_threshold()[0] == 0, "collections resumed while a decision was inside"
    finally:
        second.__exit__(None, None, None)
    assert gc.get_threshold()[0] == CALLERS_THRESHOLD


def test_a_collector_disabled_during_a_decision_stays_disabled() -> None:
    pause = collector_paused()
    pause.__enter__()
    gc.disable()  # whoever embeds the engine, for reasons of its own
    pause.__exit__(None, None, None)  # the decision ends first

    assert not gc.isenabled(), "the decision turned the collector on under its owner"
    assert gc.get_threshold()[0] == CALLERS_THRESHOLD


def test_a_decision_leaves_a_disabled_collector_disabled() -> None:
    gc.disable()  # whoever embeds the engine, for reasons of its own
    schedule(two_racks(), members("train", 1, gpus=8, group="train"), [gang("train", 1)], Policy())

    assert not gc.isenabled(), "the decision turned the collector on under its owner"
    gc.enable()
    assert gc.get_threshold()[0] == CALLERS_THRESHOLD


#            z1
#      r1          r2
#   a  b  c  d   e  f  g  h     every node holds one low-priority 8-GPU pod
def _full_zone() -> tuple[Snapshot, list[PodRequest], list[GroupSpec]]:
    zones = {"z1": {"r1": ["a100x8"] * 4, "r2": ["a100x8"] * 4}}
    names = [f"node-{letter}" for letter in "abcdefgh"]
    held = [bound(pod(f"low-{n}", gpus=8, priority=1), name) for n, name in enumerate(names)]
    groups = [dataclasses.replace(composite("llm", 2, topology=ZONE), priority=100)]
    pods: list[PodRequest] = []
    for child in ("a", "b"):
        groups.append(gang(f"llm-{child}", 2, topology=RACK, parent="llm"))
        pods += members(f"llm-{child}", 2, gpus=8, group=f"llm-{child}", priority=100)
    return cluster(zones, bound=held), pods, groups


def _engine_objects_in_cycles() -> list[str]:
    """The types of gpusched's objects a collection finds in reference cycles. Only ours are
    counted: in the whole suite, threads that earlier tests' session fixtures left running
    (servers' log readers, pollers) make garbage of their own while this test runs."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        found = [
            f"{type(o).__module__}.{type(o).__qualname__}"
            for o in gc.garbage
            if type(o).__module__.startswith("gpusched.")
        ]
        gc.garbage.clear()
    finally:
        gc.set_debug(0)
    return sorted(found)


def test_a_decision_and_a_preemption_plan_leave_nothing_for_the_collector() -> None:
    """What a decision allocates is freed by reference counting as it returns, and so is
    each preemption trial's scratch snapshot: nothing in reference cycles waits for a
    collection (a planner that referred back to itself kept every trial's copy, journal and
    holdings until one)."""
    snapshot, pods, groups = _full_zone()
    gc.disable()
    gc.collect()

    result = schedule(snapshot, pods, groups, Policy())
    plan = plan_preemption(snapshot, "default/llm", pods, groups, Policy())

    assert _engine_objects_in_cycles() == [], "the decision or the plan left them in cycles"
    assert not result.bindings, "the zone is full: nothing fits without preemption"
    assert len(plan.victims) == 4, plan.message


class _Node:
    """An object that can sit in a reference cycle and be watched by a weak reference."""

    def __init__(self) -> None:
        self.other: _Node | None = None


def test_freezing_collects_the_garbage_in_cycles_first_and_freezes_what_lives() -> None:
    kept = [_Node() for _ in range(100)]
    garbage = _Node()
    garbage.other = _Node()
    garbage.other.other = garbage
    gone = weakref.ref(garbage)
    del garbage
    before = gc.get_freeze_count()
    try:
        freeze_survivors()
        assert gone() is None, "a cycle that was garbage was frozen, never to be freed"
        assert gc.get_freeze_count() >= before + len(kept)
    finally:
        gc.unfreeze()

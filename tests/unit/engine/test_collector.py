"""No automatic garbage collection runs while the engine decides (`collector_paused`), and the
collector is left as each caller found it: its threshold as before, whatever the decision
raised, and `gc.disable` (as a resync uses it) neither undone nor left behind by a decision
that overlaps it."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from gpusched.engine.collector import collector_paused
from gpusched.engine.schedule import schedule
from gpusched.engine.snapshot import Snapshot
from tests.support.engine import RACK, cluster, gang, members, placements

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
        observe=lambda _key, _work: seen.append(gc.get_threshold()[0]),
    )

    assert seen == [0], "automatic collections could run during the decision"
    assert gc.get_threshold()[0] == CALLERS_THRESHOLD
    assert gc.isenabled()
    assert sorted(node for node, _ in placements(result).values()) == ["node-a", "node-b"]


def test_a_decision_that_raises_still_puts_the_threshold_back() -> None:
    def fail(_key: str, _work: Snapshot) -> None:
        raise RuntimeError("observer failed")

    with pytest.raises(RuntimeError, match="observer failed"):
        schedule(two_racks(), members("train", 1, gpus=8, group="train"), [gang("train", 1)], fail)

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
    schedule(two_racks(), members("train", 1, gpus=8, group="train"), [gang("train", 1)])

    assert not gc.isenabled(), "the decision turned the collector on under its owner"
    gc.enable()
    assert gc.get_threshold()[0] == CALLERS_THRESHOLD

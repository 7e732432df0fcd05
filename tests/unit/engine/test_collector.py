"""The cyclic garbage collector is paused while the engine decides (`collector_paused`), and
left as each caller found it: enabled after a decision if it was enabled before, disabled if
the caller had disabled it (as a resync does), whatever the decision raised."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from gpusched.engine.collector import collector_paused
from gpusched.engine.schedule import schedule
from gpusched.engine.snapshot import Snapshot
from tests.support.engine import RACK, cluster, gang, members, placements


@pytest.fixture(autouse=True)
def collector_enabled_after() -> Iterator[None]:
    """Whatever a test does, the rest of the suite runs with the collector enabled."""
    try:
        yield
    finally:
        gc.enable()


def two_racks() -> Snapshot:
    return cluster(zones={"z1": {"r1": ["a100x8"] * 2, "r2": ["a100x8"] * 2}})


@pytest.mark.parametrize("enabled", [True, False], ids=["caller had it on", "caller had it off"])
def test_a_decision_runs_paused_and_leaves_the_collector_as_it_was(enabled: bool) -> None:
    snapshot = two_racks()
    pods = members("train", 2, gpus=8, group="train")
    seen: list[bool] = []
    (gc.enable if enabled else gc.disable)()

    result = schedule(
        snapshot,
        pods,
        [gang("train", 2, topology=RACK)],
        observe=lambda _key, _work: seen.append(gc.isenabled()),
    )

    assert seen == [False], "the collector ran during the decision"
    assert gc.isenabled() is enabled
    assert sorted(node for node, _ in placements(result).values()) == ["node-a", "node-b"]


def test_a_decision_that_raises_still_turns_the_collector_back_on() -> None:
    def fail(_key: str, _work: Snapshot) -> None:
        raise RuntimeError("observer failed")

    gc.enable()
    with pytest.raises(RuntimeError, match="observer failed"):
        schedule(two_racks(), members("train", 1, gpus=8, group="train"), [gang("train", 1)], fail)

    assert gc.isenabled()


def test_overlapping_callers_keep_it_paused_until_the_last_one_leaves() -> None:
    # Two decisions in two threads: the first to leave must not turn the collector back on
    # under the second.
    gc.enable()
    first, second = collector_paused(), collector_paused()
    first.__enter__()
    second.__enter__()
    try:
        first.__exit__(None, None, None)
        assert not gc.isenabled(), "turned on while a caller was still inside"
    finally:
        second.__exit__(None, None, None)
    assert gc.isenabled()

"""The two policies bench/preempt_openb.py compares, on clusters small enough to read: the
baseline evicts the lowest-priority pods of one node, blind to their gangs; gpusched evicts an
``All`` gang whole or not at all. The benchmark's figures are only as honest as these."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from gpusched.api.crds import DisruptionMode
from gpusched.engine.groups import GroupSpec
from gpusched.engine.request import PodRequest
from testing.engine import bound, cluster, gang, pod

SCRIPT = Path(__file__).resolve().parents[3] / "bench" / "preempt_openb.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_preempt_openb", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_preempt_openb"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


bench = _load()


def _low(name: str, gpus: int, priority: int, group: str | None = None) -> PodRequest:
    return pod(name, gpus=gpus, priority=priority, group=group, created=1.0)


def _high(name: str, sizes: list[int]) -> tuple[GroupSpec, list[PodRequest]]:
    spec = dataclasses.replace(gang(name, len(sizes)), priority=100)
    pods = [pod(f"{name}-{i}", gpus=s, priority=100, group=name) for i, s in enumerate(sizes)]
    return spec, pods


def _split_gang_world() -> Any:
    """The All gang ``g`` (priority 1) has a 4-GPU pod on each node; each node also holds a
    4-GPU pod of priority 2 on its own. The cluster is full.
    ```
    node-a: g-0 (prio 1, 4 GPUs)  solo-a (prio 2, 4 GPUs)
    node-b: g-1 (prio 1, 4 GPUs)  solo-b (prio 2, 4 GPUs)
    ```"""
    g = dataclasses.replace(gang("g", 2), priority=1, disruption_mode=DisruptionMode.ALL)
    held = [
        bound(_low("g-0", 4, 1, "g"), "node-a", [0, 1, 2, 3]),
        bound(_low("solo-a", 4, 2), "node-a", [4, 5, 6, 7]),
        bound(_low("g-1", 4, 1, "g"), "node-b", [0, 1, 2, 3]),
        bound(_low("solo-b", 4, 2), "node-b", [4, 5, 6, 7]),
    ]
    snapshot = cluster({"z1": {"r1": ["gpu8", "gpu8"]}}, bound=held)
    spec, pods = _high("hi", [4])
    return bench.Setup(snapshot, [g], [(spec, pods)], 4000)


def test_the_baseline_evicts_half_of_an_all_gang_and_leaves_it_broken() -> None:
    world = _split_gang_world()
    tally = bench.run("baseline", world)
    assert tally.evicted == {"default/g-0"}
    assert (tally.placed_milli, tally.evicted_milli) == (4000, 4000)
    assert bench.broken_gangs(world, tally.evicted) == (1, 4000, 0)


def test_gpusched_evicts_the_all_gang_whole() -> None:
    world = _split_gang_world()
    tally = bench.run("gpusched", world)
    # The whole gang (priority 1, 8 GPUs) is cheaper than a pod of priority 2 (4 GPUs).
    assert tally.evicted == {"default/g-0", "default/g-1"}
    assert (tally.placed_milli, tally.evicted_milli) == (4000, 8000)
    assert bench.broken_gangs(world, tally.evicted) == (0, 0, 1)


def test_the_baseline_evicts_nothing_for_a_gang_that_cannot_fit_whole() -> None:
    held = [bound(_low("low-0", 8, 1), "node-a", list(range(8)))]
    snapshot = cluster({"z1": {"r1": ["gpu8"]}}, bound=held)
    spec, pods = _high("hi", [8, 8])  # 16 GPUs on an 8-GPU cluster
    world = bench.Setup(snapshot, [], [(spec, pods)], 16000)
    tally = bench.run("baseline", world)
    assert (tally.placed_milli, tally.evicted_milli, tally.evicted) == (0, 0, set())
    assert len(world.full.holdings) == 1


def test_the_baseline_takes_the_node_that_evicts_the_fewest_gpus() -> None:
    """node-a frees 2 GPUs by evicting one 2-GPU pod; node-b would need its 8-GPU pod gone."""
    held = [
        bound(_low("small", 2, 1), "node-a", [0, 1]),
        bound(_low("filler", 6, 3), "node-a", [2, 3, 4, 5, 6, 7]),
        bound(_low("big", 8, 1), "node-b", list(range(8))),
    ]
    snapshot = cluster({"z1": {"r1": ["gpu8", "gpu8"]}}, bound=held)
    spec, pods = _high("hi", [2])
    world = bench.Setup(snapshot, [], [(spec, pods)], 2000)
    tally = bench.run("baseline", world)
    assert tally.evicted == {"default/small"}

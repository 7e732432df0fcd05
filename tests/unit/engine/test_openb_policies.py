"""The scoring pieces the openb policies are made of (`engine/scores.py`, `engine/pick.py`,
`engine/fragmentation.py`): tie-break orders, the FGD paper's baseline scores, the
fragmentation cache, and the share GPU under the fragmentation score.

Coverage:

| piece                | stories                                                         |
|----------------------|-----------------------------------------------------------------|
| tie-break            | interleaved = name order on one shape, shapes take turns;       |
|                      | shuffled is one order for every pod; random differs per pod     |
| best fit             | the published formula, floored; fuller node wins                |
| packing              | used GPU > partly used node > idle node                         |
| dot product          | range and the bigger-free-node preference                       |
| fragmentation cache  | exact through assume, forget, rollback and copies (property)    |
| share GPU            | bestFit vs leastFragmentation where they differ                 |
| config               | unknown order and out-of-range step refused                     |
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusched.api.config import SchedulerConfig, ShareGpu, load_config
from gpusched.api.errors import InvalidObjectError
from gpusched.engine import fragmentation, scores
from gpusched.engine.pick import pick_node
from gpusched.engine.policy import Policy
from gpusched.engine.scoring import Scoring
from gpusched.engine.snapshot import Snapshot
from gpusched.engine.workload import target_workload
from testing.engine import bound, cluster, node, pod

OFF = {
    "binpack": {"weight": 0},
    "gpuWeight": 0,
    "topologyWeight": 0,
    "fragmentationWeight": 0,
}


def only(**scoring: Any) -> SchedulerConfig:
    return SchedulerConfig.model_validate({"scoring": {**OFF, **scoring}})


def names(snapshot: Snapshot, count: int, config: SchedulerConfig, gpus: int = 1) -> list[str]:
    """Where ``count`` one-GPU pods land, one after the other."""
    placed = []
    for i in range(count):
        request = pod(f"p{i}", gpus=gpus)
        choice = pick_node(snapshot, request, Scoring(Policy.of(config)))
        assert choice is not None, request.key
        snapshot.assume(request, choice.node, choice.gpus)
        placed.append(snapshot.nodes[choice.node].name)
    return placed


# ----- tie-break orders --------------------------------------------------------------------------


def test_interleaved_is_name_order_on_a_cluster_of_one_shape() -> None:
    snapshot = cluster(nodes=[node(n, "gpu8") for n in ("node-c", "node-a", "node-b")])
    config = only(tieBreak={"order": "interleaved"})
    # Nothing scores: every pod ties everywhere, and the first node keeps winning.
    assert names(snapshot, 3, config, gpus=8) == ["node-a", "node-b", "node-c"]


def test_interleaved_lets_node_shapes_take_turns() -> None:
    #  names:  a  b  c  d   (a, b: 8-GPU A100; c, d: 4-GPU H100)
    snapshot = cluster(
        nodes=[
            node("node-a", "gpu8"),
            node("node-b", "gpu8"),
            node("node-c", "h100x4"),
            node("node-d", "h100x4"),
        ]
    )
    by_name = names(snapshot.copy(), 4, only(tieBreak={"order": "name"}), gpus=4)
    interleaved = names(snapshot.copy(), 4, only(tieBreak={"order": "interleaved"}), gpus=4)
    assert by_name == ["node-a", "node-a", "node-b", "node-b"]
    assert interleaved == ["node-a", "node-a", "node-c", "node-b"]


def test_shuffled_is_one_order_for_every_pod_and_random_is_not() -> None:
    snapshot = cluster(nodes=[node(f"node-{i:02d}", "gpu8") for i in range(12)])
    shuffled = names(snapshot.copy(), 8, only(tieBreak={"order": "shuffled", "seed": 3}))
    assert len(set(shuffled)) == 1, shuffled  # the same favourite, pod after pod
    again = names(snapshot.copy(), 8, only(tieBreak={"order": "shuffled", "seed": 3}))
    assert shuffled == again
    spread = names(snapshot.copy(), 8, only(tieBreak={"order": "random", "seed": 3}))
    assert len(set(spread)) > 3, spread
    assert spread == names(snapshot.copy(), 8, only(tieBreak={"order": "random", "seed": 3}))


# ----- the FGD paper's baselines -----------------------------------------------------------------


def test_best_fit_is_the_published_formula_floored() -> None:
    # node-a (252 cpu, 8 GPUs) is the largest node: cpu and GPU are normalised by it.
    snapshot = cluster(
        nodes=[node("node-a", "gpu8"), node("node-b", "h100x4")],
        bound=[bound(pod("used", cpu=4000, gpus=2), "node-b")],
        config=only(bestFitWeight=1),
    )
    request = pod("p", cpu=2000, gpus=1)
    got = scores.best_fit(snapshot, request, np.array([0, 1]))
    want_a = np.floor((1 - (250_000 / 252_000 * 0.5 + 7000 / 8000 * 0.5)) * 100)
    want_b = np.floor((1 - (90_000 / 252_000 * 0.5 + 1000 / 8000 * 0.5)) * 100)
    assert got.tolist() == [want_a, want_b]
    assert names(snapshot, 1, only(bestFitWeight=1)) == ["node-b"]


def test_packing_prefers_a_used_gpu_then_a_used_node_then_an_idle_one() -> None:
    snapshot = cluster(
        nodes=[node("node-a", "gpu8"), node("node-b", "gpu8"), node("node-c", "gpu8")],
        bound=[
            bound(pod("share", milli=400), "node-a", [0]),
            bound(pod("whole", gpus=1), "node-b", [0]),
        ],
    )
    share = scores.packing(snapshot, pod("s", milli=300), np.array([0, 1, 2]))
    whole = scores.packing(snapshot, pod("w", gpus=2), np.array([0, 1, 2]))
    assert share.tolist() == [94.0, 49.0, 25.0]  # 60 % free on GPU 0: 100 − 60 / 10
    assert whole.tolist() == [48.0, 48.0, 25.0]
    assert scores.packing(snapshot, pod("c"), np.array([0, 1, 2])).tolist() == [0.0] * 3


def test_dot_product_prefers_the_node_with_more_of_the_request_free() -> None:
    snapshot = cluster(
        nodes=[node("node-a", "gpu8"), node("node-b", "gpu8")],
        bound=[bound(pod("used", gpus=6), "node-a")],
    )
    got = scores.dot_product(snapshot, pod("p", cpu=0, gpus=2), np.array([0, 1]))
    assert got.tolist() == pytest.approx([100 * 0.25 * 0.25 / 2, 100 * 0.25 / 2])


# ----- the fragmentation cache -------------------------------------------------------------------

SHAPES = [
    pod("w1", cpu=4000, gpus=1),
    pod("w2", cpu=8000, gpus=2),
    pod("s3", cpu=2000, milli=300),
    pod("s6", cpu=2000, milli=600),
    pod("c", cpu=16000),
]
WORKLOAD = target_workload(SHAPES * 3)


def direct(snapshot: Snapshot) -> tuple[np.ndarray, np.ndarray]:
    nodes = np.arange(len(snapshot.nodes))
    free = fragmentation.free_matrix(snapshot, nodes)
    cpu = (
        snapshot.allocatable[:, snapshot.columns["cpu"]] - snapshot.used[:, snapshot.columns["cpu"]]
    )
    return free, cpu


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.booleans(), st.booleans()), max_size=25))
def test_the_cache_stays_exact_through_assume_forget_and_rollback(
    steps: list[tuple[int, bool, bool]],
) -> None:
    snapshot = cluster(nodes=[node(n, "gpu8") for n in ("node-a", "node-b", "node-c")])
    scoring = Scoring(Policy(), WORKLOAD)
    mark = snapshot.checkpoint()
    for i, (shape, undo, copy) in enumerate(steps):
        request = pod(
            f"x{i}",
            cpu=SHAPES[shape].resources["cpu"],
            gpus=SHAPES[shape].gpus,
            milli=SHAPES[shape].gpu_milli,
        )
        choice = pick_node(snapshot, request, scoring)
        if choice is not None:
            snapshot.assume(request, choice.node, choice.gpus)
        if undo:
            snapshot.rollback(mark)
        if copy:
            snapshot = snapshot.copy()
            mark = snapshot.checkpoint()
        free, cpu = direct(snapshot)
        want = fragmentation.fragmentation(free, cpu, WORKLOAD)
        got = fragmentation.node_fragmentation(snapshot, WORKLOAD)
        assert got == pytest.approx(want), (got, want)
        probe = SHAPES[(shape + 1) % len(SHAPES)]
        nodes = np.arange(3)
        growth = fragmentation.growth(snapshot, probe, nodes, WORKLOAD)
        if not probe.gpu_milli and not probe.gpus:
            after = fragmentation.fragmentation(free, cpu - probe.resources["cpu"], WORKLOAD)
            assert growth == pytest.approx(after - want)
        if probe.gpu_milli:
            fits = np.flatnonzero((free >= probe.gpu_milli).any(axis=1))
            best_fit = fragmentation.growth(snapshot, probe, fits, WORKLOAD, ShareGpu.BEST_FIT)
            for row, node_index in enumerate(fits):
                slack = np.where(free[node_index] >= probe.gpu_milli, free[node_index], 10**9)
                after = free[node_index : node_index + 1].copy()
                after[0, int(np.argmin(slack))] -= probe.gpu_milli
                cpu_after = cpu[node_index : node_index + 1] - probe.resources["cpu"]
                measured = fragmentation.fragmentation(after, cpu_after, WORKLOAD)[0]
                assert best_fit[row] == pytest.approx(measured - want[node_index])


# ----- the share GPU -----------------------------------------------------------------------------


def test_best_fit_and_least_fragmentation_choose_different_gpus_for_a_share() -> None:
    # GPU 0 has 400 free: a 300 share leaves 100, a fragment for the 300 tasks of the
    # workload. GPU 1 is idle: 700 left is no fragment. Best fit takes GPU 0; FGD takes GPU 1.
    snapshot = cluster(
        nodes=[node("node-a", "h100x4")],
        bound=[bound(pod("held", milli=600), "node-a", [0])]
        + [bound(pod(f"full{g}", gpus=1), "node-a", [g]) for g in (2, 3)],
    )
    workload = target_workload([pod("t", cpu=1000, milli=300)] * 4)
    request = pod("p", cpu=1000, milli=300)
    best_fit = Scoring(Policy.of(only(fragmentationWeight=1000)), workload)
    assert pick_node(snapshot, request, best_fit).gpus == (0,)  # type: ignore[union-attr]
    config = only(fragmentationWeight=1000, fragmentationShareGpu="leastFragmentation")
    least = Scoring(Policy.of(config), workload)
    assert pick_node(snapshot, request, least).gpus == (1,)  # type: ignore[union-attr]


# ----- configuration -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scoring", "field"),
    [
        ({"tieBreak": {"order": "alphabetical"}}, "scoring.tieBreak.order"),
        ({"fragmentationStep": 150}, "scoring.fragmentationStep"),
        ({"fragmentationShareGpu": "worstFit"}, "scoring.fragmentationShareGpu"),
        ({"bestFitWeight": -1}, "scoring.bestFitWeight"),
    ],
)
def test_bad_policy_settings_are_refused_naming_the_field(
    scoring: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidObjectError) as raised:
        load_config({"scoring": scoring})
    assert field in str(raised.value), str(raised.value)

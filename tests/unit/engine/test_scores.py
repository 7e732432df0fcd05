"""Node scores (`gpusched.engine.scores`), each alone and through `schedule` with every other
weight at 0, so that the score under test is the only thing that decides.

Coverage:

| score            | values checked                                   | decides a placement      |
|------------------|--------------------------------------------------|--------------------------|
| binpack          | Volcano's worked example, weights, overflow,     | fuller node wins         |
|                  | GPU shares                                       |                          |
| least-allocated  | free share after placing, range [0, 100]         | emptier node wins        |
| topology         | NVLink 100, SYS ≈ 16.7, unknown 0, 1 GPU 100     | NVLink node beats PCIe   |
| gpu dimensions   | app affinity, fewer pods, memory continuity      | each dimension alone     |
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from gpusched.api.config import NumaPolicy, SchedulerConfig
from gpusched.engine import scores
from gpusched.engine.gpuset import choose_gpus
from gpusched.engine.health import GpuSample
from gpusched.engine.policy import Policy
from gpusched.engine.request import PodRequest
from gpusched.engine.schedule import schedule
from gpusched.engine.snapshot import BoundPod, Snapshot
from testing.engine import bound, cluster, node, placements, pod

GI = 2**30
OFF = {"binpack": {"weight": 0}, "gpuWeight": 0, "topologyWeight": 0, "leastAllocatedWeight": 0}
"""Every score off; a case turns on the one it is about."""


def only(**scoring: Any) -> SchedulerConfig:
    """A config whose scores are all off but those given (in the config file's words)."""
    return SchedulerConfig.model_validate({"scoring": {**OFF, **scoring}})


def scored(snapshot: Snapshot, values: Iterable[float]) -> dict[str, float]:
    """Scores by node name, for messages that say which node got what."""
    return {info.name: float(v) for info, v in zip(snapshot.nodes, values, strict=True)}


# ----- binpack: Volcano's worked example ----------------------------------------------------------

VOLCANO_BINPACK = {"weight": 5, "cpu": 1, "memory": 1, "resources": {"nvidia.com/gpu": 2}}


def seed_nodes(config: SchedulerConfig) -> Snapshot:
    """Two 8-GPU nodes of 8 cpu and 16Gi; both already run 6 GPUs and 8Gi, node-1 4 cpu,
    node-2 6 cpu (bound pods without the gpus annotation, so they hold GPUs 2..7)."""
    shape = {"cpu": "8", "memory": "16Gi"}
    return cluster(
        nodes=[
            node("node-1", "gpu8", allocatable=shape),
            node("node-2", "gpu8", allocatable=shape),
        ],
        bound=[
            bound(pod("used-1", cpu=4000, memory=8 * GI, gpus=6), "node-1"),
            bound(pod("used-2", cpu=6000, memory=8 * GI, gpus=6), "node-2"),
        ],
        config=config,
    )


@dataclass(frozen=True)
class BinpackCase:
    id: str
    binpack: Mapping[str, Any]
    pod: PodRequest
    want_scores: Mapping[str, float]


BINPACK_CASES = [
    # node-1: 5 × (1·6/8 + 1·12/16 + 2·8/8) / 4 × 100 = 437.5
    # node-2: 5 × (1·8/8 + 1·12/16 + 2·8/8) / 4 × 100 = 468.75
    BinpackCase(
        "Volcano's worked example: 437.5 for node-1, 468.75 for node-2",
        VOLCANO_BINPACK,
        pod("p", cpu=2000, memory=4 * GI, gpus=2),
        {"node-1": 437.5, "node-2": 468.75},
    ),
    BinpackCase(
        "binpack.weight only scales: weight 1 gives a fifth",
        {**VOLCANO_BINPACK, "weight": 1},
        pod("p", cpu=2000, memory=4 * GI, gpus=2),
        {"node-1": 87.5, "node-2": 93.75},
    ),
    # (0 + 0.75 + 2) / 3 on both: without a cpu weight the nodes differ in nothing scored
    BinpackCase(
        "a resource without weight is left out of the sum and of the divisor",
        {**VOLCANO_BINPACK, "cpu": 0},
        pod("p", cpu=2000, memory=4 * GI, gpus=2),
        {"node-1": 5 * 2.75 / 3 * 100, "node-2": 5 * 2.75 / 3 * 100},
    ),
    # node-1: cpu (4+5)/8 overflows → 0; node-2: (6+5)/8 overflows → 0; both (0+.75+2)/4
    BinpackCase(
        "a resource the node would overflow scores 0 but keeps its weight, as in Volcano",
        VOLCANO_BINPACK,
        pod("p", cpu=5000, memory=4 * GI, gpus=2),
        {"node-1": 343.75, "node-2": 343.75},
    ),
    # GPU term (6000 + 500) / 8000 = 0.8125
    BinpackCase(
        "a GPU share counts as its milli-GPUs",
        VOLCANO_BINPACK,
        pod("p", cpu=2000, memory=4 * GI, milli=500),
        {"node-1": 5 * (0.75 + 0.75 + 2 * 0.8125) / 4 * 100, "node-2": 5 * 3.375 / 4 * 100},
    ),
    BinpackCase(
        "a pod asking for nothing weighted scores 0",
        VOLCANO_BINPACK,
        pod("p", cpu=0, memory=0),
        {"node-1": 0.0, "node-2": 0.0},
    ),
]


@pytest.mark.parametrize("case", BINPACK_CASES, ids=lambda c: c.id)
def test_binpack_score(case: BinpackCase) -> None:
    config = only(binpack=case.binpack)
    snapshot = seed_nodes(config)
    everyone = np.arange(len(snapshot.nodes))
    got = scored(snapshot, scores.binpack(snapshot, case.pod, everyone, config.scoring.binpack))
    assert got == pytest.approx(case.want_scores), f"binpack {dict(case.binpack)}"


@dataclass(frozen=True)
class PlacementCase:
    id: str
    config: SchedulerConfig
    want: Mapping[str, tuple[str, tuple[int, ...]]]


PLACEMENT_CASES = [
    PlacementCase(
        "binpack sends the example's pod to node-2, the fuller one (468.75 > 437.5)",
        only(binpack=VOLCANO_BINPACK),
        {"p": ("node-2", (0, 1))},
    ),
    # node-1: ((8-4-2)/8 + (16-8-4)/16) / 2 = 25; node-2: (0 + 0.25) / 2 = 12.5
    PlacementCase(
        "least-allocated sends it to node-1, the emptier one (25 > 12.5)",
        only(binpack={"weight": 0}, leastAllocatedWeight=1),
        {"p": ("node-1", (0, 1))},
    ),
]


@pytest.mark.parametrize("case", PLACEMENT_CASES, ids=lambda c: c.id)
def test_score_decides_the_node(case: PlacementCase) -> None:
    result = schedule(
        seed_nodes(case.config),
        [pod("p", cpu=2000, memory=4 * GI, gpus=2)],
        (),
        Policy.of(case.config),
    )
    assert placements(result) == case.want, result.unschedulable


# ----- least-allocated --------------------------------------------------------------------------


@dataclass(frozen=True)
class LeastAllocatedCase:
    id: str
    pod: PodRequest
    want_scores: Mapping[str, float]


LEAST_ALLOCATED_CASES = [
    LeastAllocatedCase(
        "mean free share of cpu and memory after placing",
        pod("p", cpu=2000, memory=4 * GI),
        {"node-1": 25.0, "node-2": 12.5},
    ),
    LeastAllocatedCase(
        "a pod asking for nothing scores what is free now",
        pod("p", cpu=0, memory=0),
        {"node-1": (4 / 8 + 8 / 16) / 2 * 100, "node-2": (2 / 8 + 8 / 16) / 2 * 100},
    ),
    LeastAllocatedCase(
        "never below 0, even when the pod would overflow",
        pod("p", cpu=8000, memory=16 * GI),
        {"node-1": 0.0, "node-2": 0.0},
    ),
]


@pytest.mark.parametrize("case", LEAST_ALLOCATED_CASES, ids=lambda c: c.id)
def test_least_allocated_score(case: LeastAllocatedCase) -> None:
    snapshot = seed_nodes(SchedulerConfig())
    values = scores.least_allocated(snapshot, case.pod, np.arange(len(snapshot.nodes)))
    assert scored(snapshot, values) == pytest.approx(case.want_scores)


def test_least_allocated_of_an_empty_node_is_at_most_100() -> None:
    snapshot = cluster(nodes=[node("node-a")])
    values = scores.least_allocated(snapshot, pod("p", cpu=0, memory=0), np.arange(1))
    assert scored(snapshot, values) == pytest.approx({"node-a": 100.0})


# ----- topology ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class TopologyCase:
    id: str
    kind: str
    gpus: int
    want_tier: str
    want_score: float


TOPOLOGY_CASES = [
    TopologyCase("one GPU has nothing to connect: 100", "pcie4090x8", 1, "NVLINK", 100.0),
    TopologyCase("2 GPUs over NVSwitch (DGX A100): 100", "a100x8", 2, "NVLINK", 100.0),
    TopologyCase("all 8 GPUs over NVSwitch: 100", "a100x8", 8, "NVLINK", 100.0),
    TopologyCase("4 H100 over NV18: 100", "h100x4", 4, "NVLINK", 100.0),
    TopologyCase("a DGX-1 quad is all NVLink: 100", "v100x8", 4, "NVLINK", 100.0),
    TopologyCase("all 8 of a DGX-1 include SYS pairs: 100/6", "v100x8", 8, "SYS", 100 / 6),
    TopologyCase("2 RTX 4090 across sockets (SYS): 100/6", "pcie4090x8", 2, "SYS", 100 / 6),
    TopologyCase("unknown topology, 2 GPUs: 0", "gpu8", 2, "UNKNOWN", 0.0),
    TopologyCase("unknown topology, 1 GPU: 100", "gpu8", 1, "NVLINK", 100.0),
]


@pytest.mark.parametrize("case", TOPOLOGY_CASES, ids=lambda c: c.id)
def test_topology_score(case: TopologyCase) -> None:
    shape = cluster(nodes=[node("node-a", case.kind)]).nodes[0].shape
    everything = (1 << shape.gpu_count) - 1
    choice = choose_gpus(shape, everything, case.gpus, NumaPolicy.BEST_EFFORT)
    assert choice is not None
    assert choice.worst_tier.name == case.want_tier, choice
    assert scores.topology(choice) == pytest.approx(case.want_score), choice


def test_topology_score_of_a_pod_without_gpus_is_100() -> None:
    assert scores.topology(None) == pytest.approx(100.0)


@pytest.mark.parametrize(
    ("kind", "want"),
    [
        pytest.param("pcie4090x8", ("node-b", (0, 1), "NVLINK"), id="NVLink node beats PCIe"),
        pytest.param("gpu8", ("node-b", (0, 1), "NVLINK"), id="NVLink node beats unknown"),
    ],
)
def test_topology_score_prefers_the_nvlink_node(
    kind: str, want: tuple[str, tuple[int, ...], str]
) -> None:
    # node-a sorts first and would win every tie; only the topology score can move the pod.
    snapshot = cluster(
        nodes=[node("node-a", kind), node("node-b", "a100x8")], config=only(topologyWeight=1)
    )
    result = schedule(snapshot, [pod("p", gpus=2)], (), Policy.of(only(topologyWeight=1)))
    got = [(b.node, b.gpus, b.link_tier) for b in result.bindings]
    assert got == [want], result.unschedulable


# ----- the GPU dimensions (GpuScoreConfig) --------------------------------------------------------
#
# Each case has two DGX A100 nodes that differ in one dimension only; the pod must go to the
# node that dimension prefers (node-b, so that the name tie-break cannot be the reason).


def share(name: str, milli: int, app: str | None = None) -> PodRequest:
    return pod(name, cpu=0, memory=0, milli=milli, app=app)


def sample(free_mib: float) -> GpuSample:
    return GpuSample(temperature_c=50, fb_free_mib=free_mib, fb_used_mib=81920 - free_mib)


@dataclass(frozen=True)
class GpuCase:
    id: str
    pod: PodRequest
    bound: Sequence[BoundPod] = ()
    telemetry: Mapping[tuple[str, int], GpuSample] = field(default_factory=dict)
    want_scores: Mapping[str, float] = field(default_factory=dict)
    """gpu_dimensions of each node for GPU 0, the GPU the pod gets there."""
    want_node: str = "node-b"


GPU_CASES = [
    # continuity 0 (unknown is never healthy) × 40; app 0 or 1 × 30; fewer pods (1 − 1/4) × 50
    GpuCase(
        "app affinity: the GPU already running the same app wins",
        share("p", 500, app="llm"),
        bound=[
            bound(share("other-app", 500, app="chat"), "node-a", [0]),
            bound(share("same-app", 500, app="llm"), "node-b", [0]),
        ],
        want_scores={"node-a": 0 + 0 + 37.5, "node-b": 0 + 30 + 37.5},
    ),
    # fewer pods: 1 − 3/4 = 0.25 (12.5) against 1 − 1/4 = 0.75 (37.5)
    GpuCase(
        "fewer pods: the GPU shared by one pod beats the one shared by three",
        share("p", 700),
        bound=[
            *(bound(share(f"small-{i}", 100), "node-a", [0]) for i in range(3)),
            bound(share("one", 300), "node-b", [0]),
        ],
        want_scores={"node-a": 0 + 12.5, "node-b": 0 + 37.5},
    ),
    # continuity: 40 × 40960/81920 against 40 × 81920/81920 (every GPU of a node alike);
    # all GPUs idle, so fewer-pods is 1 × 50 on both
    GpuCase(
        "memory continuity: the GPU with more free framebuffer wins",
        pod("p", cpu=0, memory=0, gpus=1),
        telemetry={
            **{("node-a", i): sample(40960) for i in range(8)},
            **{("node-b", i): sample(81920) for i in range(8)},
        },
        want_scores={"node-a": 20 + 50, "node-b": 40 + 50},
    ),
    GpuCase(
        "no telemetry counts as no free memory: equal scores, the name decides",
        pod("p", cpu=0, memory=0, gpus=1),
        want_scores={"node-a": 0 + 50, "node-b": 0 + 50},
        want_node="node-a",
    ),
    GpuCase(
        "fresh telemetry beats none: a node without samples is not assumed healthy",
        pod("p", cpu=0, memory=0, gpus=1),
        telemetry={("node-b", i): sample(79000) for i in range(8)},
        want_scores={"node-a": 0 + 50, "node-b": 40 * 79000 / 81920 + 50},
    ),
]


@pytest.mark.parametrize("case", GPU_CASES, ids=lambda c: c.id)
def test_gpu_dimensions(case: GpuCase) -> None:
    snapshot = cluster(
        nodes=[node("node-a"), node("node-b")],
        bound=case.bound,
        telemetry=case.telemetry,
    )
    weights = only(gpuWeight=1)
    got = {
        info.name: scores.gpu_dimensions(snapshot, case.pod, i, (0,), weights.scoring.gpu)
        for i, info in enumerate(snapshot.nodes)
    }
    assert got == pytest.approx(case.want_scores)
    result = schedule(snapshot, [case.pod], (), Policy.of(weights))
    assert placements(result) == {"p": (case.want_node, (0,))}, result.unschedulable


@dataclass(frozen=True)
class RangeCase:
    id: str
    gpus: tuple[int, ...]
    bound: Sequence[BoundPod]
    want: float


RANGE_CASES = [
    RangeCase("no GPUs chosen: 0", (), (), 0.0),
    RangeCase("an idle GPU of unknown memory: 0 + 0 + 50", (0,), (), 50.0),
    # five pods of the app on one GPU: fewer-pods floored at 0, app affinity full
    RangeCase(
        "a crowded GPU of the same app: 0 + 30 + 0, never negative",
        (0,),
        [bound(share(f"llm-{i}", 100, app="llm"), "node-a", [0]) for i in range(5)],
        30.0,
    ),
    # app affinity is the share of chosen GPUs running the app: 1 of 2; 1 pod on 2 GPUs
    RangeCase(
        "half the chosen GPUs run the app: 0 + 15 + 50 × (1 − 1/8)",
        (0, 1),
        [bound(share("llm-0", 100, app="llm"), "node-a", [0])],
        0 + 15 + 43.75,
    ),
]


@pytest.mark.parametrize("case", RANGE_CASES, ids=lambda c: c.id)
def test_gpu_dimensions_stay_within_0_and_120(case: RangeCase) -> None:
    snapshot = cluster(nodes=[node("node-a")], bound=case.bound)
    request = pod("p", gpus=len(case.gpus), app="llm")
    got = scores.gpu_dimensions(snapshot, request, 0, case.gpus, only(gpuWeight=1).scoring.gpu)
    assert got == pytest.approx(case.want)
    assert 0.0 <= got <= 120.0

"""Placement quality (`gpusched.engine.quality`) and its gauges, on a small cluster counted by
hand.

    #            z1                     z2
    #          /    \\                    |
    #        r1      r2                  r3
    #       a   b     c                  d
    #
    # a: DGX A100, a 2-GPU pod on GPUs 0,1         → 6 free
    # b: DGX A100, cordoned, empty                 → 8 free, takes nothing
    # c: DGX-1 V100, GPU 5 at 88 °C (excluded)     → 7 free
    # d: 4 × H100, a 500-milli share on GPU 0      → 3 wholly free

Largest gang per node (best-effort NUMA): a 6/3/1/0 pods of 1/2/4/8 GPUs, b 0, c 7/3/1/0,
d 3/1/0/0. Stranded GPUs against a mix of half 4-GPU pods, half 500-milli shares: only d
strands anything — a 4-GPU pod does not fit it, so all its idle 3,500 milli count for that
half of the mix, and the share fits (GPU 0 has exactly 500): 0.5 × 3,500 = 1.75 GPUs.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from prometheus_client import CollectorRegistry

from gpusched.api.config import NumaPolicy, SchedulerConfig
from gpusched.engine.build import build_snapshot
from gpusched.engine.health import GpuSample
from gpusched.engine.quality import (
    CLUSTER_LEVEL,
    DomainQuality,
    exclusions,
    gang_capacity,
    link_tiers,
    measure,
)
from gpusched.engine.result import Binding
from gpusched.engine.snapshot import Snapshot
from gpusched.engine.workload import TaskType
from gpusched.scheduler.quality_metrics import QualityMetrics
from testing.engine import RACK, ZONE, bound, node, pod

MIX = (
    TaskType(cpu_milli=0, gpu_milli=1000, gpus=4, weight=0.5),
    TaskType(cpu_milli=0, gpu_milli=500, gpus=1, weight=0.5),
)
KINDS = {"node-a": "a100x8", "node-b": "a100x8", "node-c": "v100x8", "node-d": "h100x4"}


def known_cluster(*, without: str | None = None, config: SchedulerConfig | None = None) -> Snapshot:
    where = {"node-a": ("z1", "r1"), "node-b": ("z1", "r1"), "node-c": ("z1", "r2")}
    where["node-d"] = ("z2", "r3")
    nodes = [
        node(
            name,
            KINDS[name],
            labels={ZONE: zone, RACK: rack},
            unschedulable=name == "node-b",
        )
        for name, (zone, rack) in where.items()
        if name != without
    ]
    telemetry = {(n.name, gpu): GpuSample(temperature_c=45.0) for n in nodes for gpu in range(8)}
    telemetry[("node-c", 5)] = GpuSample(temperature_c=88.0)
    pods = [
        bound(pod("pair", gpus=2), "node-a", [0, 1]),
        bound(pod("share", milli=500), "node-d", [0]),
    ]
    return build_snapshot(nodes, [p for p in pods if p.node != without], telemetry, config)


def row(quality: DomainQuality) -> tuple[int, int, int, int, dict[int, int], float]:
    return (
        quality.nodes,
        quality.gpus,
        quality.free_gpus,
        quality.excluded_gpus,
        dict(quality.largest_gang),
        round(quality.stranded_gpus, 6),
    )


WANT: Mapping[tuple[str, str], tuple[int, int, int, int, dict[int, int], float]] = {
    (CLUSTER_LEVEL, "cluster"): (4, 28, 24, 1, {1: 16, 2: 7, 4: 2, 8: 0}, 1.75),
    (ZONE, "z1"): (3, 24, 21, 1, {1: 13, 2: 6, 4: 2, 8: 0}, 0.0),
    (ZONE, "z2"): (1, 4, 3, 0, {1: 3, 2: 1, 4: 0, 8: 0}, 1.75),
    (RACK, "z1/r1"): (2, 16, 14, 0, {1: 6, 2: 3, 4: 1, 8: 0}, 0.0),
    (RACK, "z1/r2"): (1, 8, 7, 1, {1: 7, 2: 3, 4: 1, 8: 0}, 0.0),
    (RACK, "z2/r3"): (1, 4, 3, 0, {1: 3, 2: 1, 4: 0, 8: 0}, 1.75),
}


def test_every_domain_of_the_known_cluster_has_the_hand_counted_figures() -> None:
    quality = measure(known_cluster(), NumaPolicy.BEST_EFFORT, workload=MIX)
    got = {(d.level, d.domain): row(d) for d in quality.domains}
    assert got == WANT


def test_the_excluded_gpu_is_counted_under_its_reason() -> None:
    quality = measure(known_cluster(), NumaPolicy.BEST_EFFORT, workload=MIX)
    assert {r: n for r, n in quality.exclusions.items() if n} == {"temperature": 1}


def test_without_a_workload_mix_the_held_pods_are_the_mix() -> None:
    # The pods held: one 2-GPU pod and one 500-milli share, half each. Both fit everywhere;
    # on d, the 2-GPU pod cannot use the half-free GPU 0: 0.5 × 500 milli = 0.25 GPUs.
    quality = measure(known_cluster(), NumaPolicy.BEST_EFFORT)
    assert sorted((t.gpus, t.gpu_milli, t.weight) for t in quality.workload) == [
        (1, 500, 0.5),
        (2, 1000, 0.5),
    ]
    assert quality.domain("cluster").stranded_gpus == pytest.approx(0.25)


@pytest.mark.parametrize(
    ("policy", "want"),
    [
        pytest.param("best-effort", {2: [3, 0, 3, 1], 4: [1, 0, 1, 0]}, id="best-effort"),
        # a's NUMA nodes hold two GPUs each (0,1 taken: three pairs left, no four); c's
        # NUMA layout is unknown, so no multi-GPU set on it can be vouched for; d's four
        # GPUs share NUMA node 0, three of them wholly free.
        pytest.param("single-numa-node", {2: [3, 0, 0, 1], 4: [0, 0, 0, 0]}, id="single-numa"),
    ],
)
def test_multi_gpu_pods_per_node_follow_the_numa_policy(
    policy: str, want: dict[int, list[int]]
) -> None:
    snapshot = known_cluster()
    numa = NumaPolicy(policy)
    assert {k: gang_capacity(snapshot, k, numa).tolist() for k in want} == want


def test_excluded_gpus_are_counted_by_the_class_of_their_verdict() -> None:
    # node-a: one GPU per verdict (GPU 0 has no sample); node-b: one hot GPU takes the whole
    # node out (excludeWholeNode), its seven others counted as "node". Counted from the
    # verdicts' data, never from their sentences.
    config = SchedulerConfig.model_validate(
        {"telemetry": {"stale": "unusable", "maxAgeSeconds": 60, "excludeWholeNode": True}}
    )
    healthy = GpuSample(temperature_c=45.0)
    samples = {(n, g): healthy for n in ("node-a", "node-b") for g in range(8)}
    del samples[("node-a", 0)]
    samples[("node-a", 1)] = GpuSample(temperature_c=45.0, age_seconds=90.0)
    samples[("node-a", 2)] = GpuSample(temperature_c=86.0)
    samples[("node-a", 3)] = GpuSample(temperature_c=45.0, xid_errors=79.0)
    samples[("node-a", 4)] = GpuSample(temperature_c=45.0, fb_free_mib=9830.0)
    samples[("node-b", 5)] = GpuSample(temperature_c=88.0)
    snapshot = build_snapshot([node("node-a"), node("node-b")], (), samples, config)

    assert exclusions(snapshot) == {
        "temperature": 2,
        "xid": 1,
        "memory": 1,
        "stale": 1,
        "missing": 1,
        "node": 3 + 7,
        "other": 0,
    }


def test_link_tiers_count_given_against_best() -> None:
    bindings = [
        Binding(pod="ns/a", node="n", gpus=(0, 1), link_tier="NVLINK", best_tier="NVLINK"),
        Binding(pod="ns/b", node="n", gpus=(2, 5), link_tier="SYS", best_tier="NVLINK"),
        Binding(pod="ns/c", node="n", gpus=(3, 4), link_tier="NVLINK", best_tier="NVLINK"),
        Binding(pod="ns/d", node="n", gpus=(6,)),
    ]
    assert link_tiers(bindings) == {("NVLINK", "NVLINK"): 2, ("SYS", "NVLINK"): 1}


# ----- the gauges ----------------------------------------------------------------------------


def test_gauges_carry_the_hand_counted_figures_and_forget_domains_that_went_away() -> None:
    registry = CollectorRegistry()
    metrics = QualityMetrics(registry)
    metrics.update(known_cluster(), workload=MIX)

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert value("gpusched_domain_free_gpus", level=RACK, domain="z1/r1") == 14
    assert (
        value("gpusched_domain_largest_gang", level="cluster", domain="cluster", gpus_per_pod="2")
        == 7
    )
    assert value("gpusched_stranded_gpus", level=ZONE, domain="z2") == pytest.approx(1.75)
    assert value("gpusched_excluded_gpus", reason="temperature") == 1
    assert value("gpusched_domain_excluded_gpus", level=RACK, domain="z1/r2") == 1

    metrics.update(known_cluster(without="node-d"), workload=MIX)
    assert value("gpusched_domain_free_gpus", level=RACK, domain="z2/r3") is None
    assert value("gpusched_domain_largest_gang", level=ZONE, domain="z2", gpus_per_pod="1") is None
    assert value("gpusched_domain_free_gpus", level="cluster", domain="cluster") == 21


def test_bindings_are_counted_by_link_tier_across_updates() -> None:
    registry = CollectorRegistry()
    metrics = QualityMetrics(registry)
    snapshot = known_cluster()
    slow = Binding(pod="ns/b", node="node-c", gpus=(2, 5), link_tier="SYS", best_tier="NVLINK")
    metrics.update(snapshot, bindings=[slow])
    metrics.update(
        snapshot,
        bindings=[
            slow,
            Binding(pod="ns/a", node="node-a", gpus=(2, 3), link_tier="NVLINK", best_tier="NVLINK"),
        ],
    )
    total = "gpusched_binding_link_tier_total"
    assert registry.get_sample_value(total, {"tier": "SYS", "best": "NVLINK"}) == 2
    assert registry.get_sample_value(total, {"tier": "NVLINK", "best": "NVLINK"}) == 1


def test_clear_drops_every_domain_series() -> None:
    registry = CollectorRegistry()
    metrics = QualityMetrics(registry)
    metrics.update(known_cluster(), workload=MIX)
    metrics.clear()
    names = {s.name for family in registry.collect() for s in family.samples}
    assert names == {"gpusched_quality_duration_seconds", "gpusched_pending_oldest_seconds"}
    metrics.update(known_cluster(), workload=MIX)
    labels = {"level": "cluster", "domain": "cluster"}
    assert registry.get_sample_value("gpusched_domain_free_gpus", labels) == 24


@pytest.mark.parametrize(
    ("created", "want"),
    [
        pytest.param([100.0, 40.0, 0.0], 60.0, id="the oldest known creation time counts"),
        pytest.param([], 0.0, id="nothing waits"),
        pytest.param([0.0], 0.0, id="unknown creation times are left out"),
    ],
)
def test_the_oldest_pending_age(created: list[float], want: float) -> None:
    registry = CollectorRegistry()
    QualityMetrics(registry).pending(created, now=100.0)
    assert registry.get_sample_value("gpusched_pending_oldest_seconds") == want

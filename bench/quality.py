"""Placement-quality measurement cost at 5,000 nodes.

    python bench/quality.py            # 30 repetitions
    python bench/quality.py --quick    # 10

The cluster of ``bench/engine.py``'s gang benchmark: 4 zones × 25 racks × 50 nodes, each a
synthetic DGX A100 (8 GPUs, all pairs NV12, NUMA 0,0,1,1,2,2,3,3), about half the GPUs held by
bound pods (seeded). Measured, single core, after one warm-up call:

1. ``engine.quality.measure`` (cluster + 4 zones + 100 racks; free GPUs, largest 1/2/4/8-GPU
   gang, stranded GPUs against the held pods' mix, exclusions).
2. ``scheduler.quality_metrics.QualityMetrics.update`` (the same, plus setting ~800 gauges).
3. Baseline: the same free-GPU and gang figures from a plain Python loop over nodes asking
   ``choose_gpus`` for sets until none is left (what one would write without the engine's
   per-node arrays).
4. 1 on a snapshot whose telemetry source knows no GPU, with ``stale: unusable``: every GPU
   excluded and counted by reason (the worst case of the exclusion count).
5. What a refresh pays to get a current snapshot when nothing changed: ``build_snapshot``
   through the operator's ``SnapshotCache`` (the loop already keeps one).

Target: "every few seconds" at 5,000 nodes → p99 < 200 ms for 2. Nothing is asserted.
"""

from __future__ import annotations

import os

os.environ["OMP_NUM_THREADS"] = "1"
os.environ["OPENBLAS_NUM_THREADS"] = "1"

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from prometheus_client import CollectorRegistry

from engine import dgx_nodes, half_full, machine_facts
from gpusched.api.config import NumaPolicy, SchedulerConfig
from gpusched.engine.build import SnapshotCache, build_snapshot
from gpusched.engine.gpuset import choose_gpus
from gpusched.engine.quality import GANG_SIZES, measure
from gpusched.engine.snapshot import Snapshot
from gpusched.scheduler.quality_metrics import QualityMetrics

TARGET_MS = 200.0


def naive(snapshot: Snapshot) -> tuple[int, dict[int, int]]:
    """Free GPUs and the largest gangs, node by node in Python."""
    free = 0
    gangs = dict.fromkeys(GANG_SIZES, 0)
    for node, info in enumerate(snapshot.nodes):
        if not info.ready or info.unschedulable:
            continue
        mask = snapshot.free_mask[node]
        free += mask.bit_count()
        for size in GANG_SIZES:
            left = mask
            while (
                choice := choose_gpus(info.shape, left, size, NumaPolicy.BEST_EFFORT)
            ) is not None:
                for gpu in choice.gpus:
                    left &= ~(1 << gpu)
                gangs[size] += 1
    return free, gangs


def timed(call: Callable[[], object], repeat: int) -> list[float]:
    call()
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def percentile(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def row(name: str, samples: Sequence[float]) -> str:
    p99 = percentile(samples, 0.99)
    return f"{name:<44} {statistics.median(samples):>9.2f} {p99:>9.2f}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    repeat = 10 if args.quick else 30
    facts = machine_facts("not pinned")
    print(" ".join(f"{k}={v}" for k, v in facts.items()))
    config = SchedulerConfig()
    started = time.perf_counter()
    snapshot = build_snapshot(dgx_nodes(), half_full(seed=7), None, config)
    built = (time.perf_counter() - started) * 1000
    quality = measure(snapshot, NumaPolicy.BEST_EFFORT)
    cluster = quality.domain("cluster")
    print(
        f"cluster: {cluster.nodes} nodes, {cluster.gpus} GPUs, {cluster.free_gpus} free, "
        f"{len(quality.domains)} domains, {len(quality.workload)} task types in the mix; "
        f"largest gang {dict(cluster.largest_gang)}; stranded {cluster.stranded_gpus:.1f} GPUs "
        f"(snapshot built in {built:.0f} ms)"
    )
    free, gangs = naive(snapshot)
    agree = free == cluster.free_gpus and gangs == dict(cluster.largest_gang)
    print(f"baseline agrees on free GPUs and gangs: {agree}")
    metrics = QualityMetrics(CollectorRegistry())
    measured = timed(lambda: measure(snapshot, NumaPolicy.BEST_EFFORT), repeat)
    updated = timed(lambda: metrics.update(snapshot, config), repeat)
    baseline = timed(lambda: naive(snapshot), max(3, repeat // 5))
    unknown = build_snapshot(
        dgx_nodes(),
        half_full(seed=7),
        {},
        SchedulerConfig.model_validate({"telemetry": {"stale": "unusable"}}),
    )
    worst = timed(lambda: measure(unknown, NumaPolicy.BEST_EFFORT), repeat)
    nodes, bound, cache = dgx_nodes(), half_full(seed=7), SnapshotCache()
    cached = timed(lambda: build_snapshot(nodes, bound, None, config, cache), repeat)
    print()
    print(f"{'5,000 nodes, 40,000 GPUs':<44} {'p50 ms':>9} {'p99 ms':>9}")
    print(row("1. engine.quality.measure", measured))
    print(row("2. QualityMetrics.update (measure + gauges)", updated))
    print(row("3. baseline: Python loop over choose_gpus", baseline))
    print(row("4. measure, all 40,000 GPUs excluded (worst)", worst))
    print(row("5. build_snapshot via SnapshotCache, no change", cached))
    ratio = statistics.median(baseline) / statistics.median(updated)
    verdict = "met" if percentile(updated, 0.99) < TARGET_MS else "MISSED"
    print(f"\nupdate is {ratio:.0f}× faster than the baseline")
    print(f"target p99 < {TARGET_MS:.0f} ms for 2: {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

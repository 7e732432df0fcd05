"""Telemetry benchmark: one refresh of 5,000 nodes × 8 GPUs × 5 metrics, parsed and indexed.

    python bench/telemetry.py            # 7 repetitions
    python bench/telemetry.py --quick    # 3 repetitions

The input is what Prometheus 2.x answers to gpusched's five queries (`metric_query`) for such a
cluster: per metric, compact JSON with one element per GPU (labels ``Hostname`` and ``gpu``)
and one sample-time element per node — 45,000 elements, about 3.6 MB per metric. Measured:

1. the refresh as `TelemetryCache` does it: every answer read into one `SeriesIndex`, then
   built (the first refresh, label cache empty, and a later one, label cache warm);
2. the same through the ``json.loads`` path that answers outside the fast path take;
3. baseline: plain ``json.loads`` of the five bodies, doing nothing with the result;
4. 40,000 GPU lookups through `TelemetryCache.samples()`, as `build_snapshot` does them.

The target is < 300 ms for (1). Benchmarks are not tests: nothing here asserts. Times are the
median of the repetitions, on one core, as wall time and as CPU time (steadier on a shared
machine).
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "operator"))

from gpusched.api.config import TelemetryConfig
from gpusched.telemetry import prometheus
from gpusched.telemetry.series import (
    METRICS,
    SAMPLE_TIME_LABEL,
    SeriesIndex,
    SkipReason,
    TelemetryData,
)

NODES = 5_000
GPUS = 8
NOW = 1_764_466_465.123
TARGET_MS = 300.0


def answer(metric: str, rng: random.Random) -> str:
    """Prometheus's answer to ``metric_query(metric)`` for the whole cluster."""
    result: list[dict[str, object]] = []
    for n in range(NODES):
        node = f"gpu-node-{n:05d}"
        for gpu in range(GPUS):
            value = _value(metric, rng)
            result.append({"metric": {"Hostname": node, "gpu": str(gpu)}, "value": [NOW, value]})
    for n in range(NODES):
        labels = {"Hostname": f"gpu-node-{n:05d}", SAMPLE_TIME_LABEL: "1"}
        stamp = f"{NOW - rng.uniform(0, 15):.3f}"
        result.append({"metric": labels, "value": [NOW, stamp]})
    body = {"status": "success", "data": {"resultType": "vector", "result": result}}
    return json.dumps(body, separators=(",", ":"))


def _value(metric: str, rng: random.Random) -> str:
    if metric.endswith("GPU_TEMP"):
        return str(rng.randint(30, 85))
    if metric.endswith("FB_FREE"):
        return str(rng.randint(0, 81559))
    if metric.endswith("FB_USED"):
        return str(rng.randint(0, 81559))
    if metric.endswith("GPU_UTIL"):
        return str(rng.randint(0, 100))
    return "0" if rng.random() > 0.001 else "79"


def refresh(
    bodies: list[str], cache: dict[str, tuple[str, int] | SkipReason] | None
) -> TelemetryData:
    index = SeriesIndex(TelemetryConfig(), None, cache)
    for slot, body in enumerate(bodies):
        prometheus.read_answer(slot, body, index)
    return index.build()


def refresh_json_path(bodies: list[str]) -> TelemetryData:
    index = SeriesIndex(TelemetryConfig())
    for slot, body in enumerate(bodies):
        prometheus._read_json(slot, body, index)
    return index.build()


def median_ms(run: Callable[[], object], repeat: int) -> tuple[float, float]:
    """Median wall time and median CPU time of ``run``, in ms. On a shared machine the CPU
    time is the steadier figure: it leaves out the time other processes held the core."""
    wall, cpu = [], []
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        run()
        cpu.append((time.process_time() - start_cpu) * 1000)
        wall.append((time.perf_counter() - start) * 1000)
    return statistics.median(wall), statistics.median(cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 repetitions instead of 7")
    args = parser.parse_args()
    repeat = 3 if args.quick else 7
    rng = random.Random(42)
    bodies = [answer(metric, rng) for metric in METRICS]
    megabytes = sum(len(b) for b in bodies) / 1e6

    data = refresh(bodies, None)
    assert len(data.values) == NODES * GPUS, "every GPU indexed"
    warm: dict[str, tuple[str, int] | SkipReason] = {}
    refresh(bodies, warm)
    keys = list(data.values)
    view = data.view(NOW)

    rows = [
        ("refresh, first (label cache empty)", median_ms(lambda: refresh(bodies, {}), repeat)),
        ("refresh, later (label cache warm)", median_ms(lambda: refresh(bodies, warm), repeat)),
        (
            "refresh through the json.loads path",
            median_ms(lambda: refresh_json_path(bodies), repeat),
        ),
        (
            "baseline: json.loads of the 5 bodies",
            median_ms(lambda: [json.loads(b) for b in bodies], repeat),
        ),
        ("40,000 lookups through samples()", median_ms(lambda: [view[k] for k in keys], repeat)),
    ]
    baseline = rows[3][1][1]
    print(
        f"Telemetry refresh: {NODES:,} nodes x {GPUS} GPUs x {len(METRICS)} metrics "
        f"({len(bodies) * (NODES * GPUS + NODES):,} answer elements, {megabytes:.1f} MB); "
        f"median of {repeat}, Python {platform.python_version()}, {platform.machine()}"
    )
    width = max(len(name) for name, _ in rows)
    print(f"{'what':<{width}}  {'wall ms':>8}  {'CPU ms':>8}  {'CPU vs json.loads':>17}")
    for name, (wall, cpu) in rows:
        print(f"{name:<{width}}  {wall:8.1f}  {cpu:8.1f}  {cpu / baseline:16.2f}x")
    for name, (wall, cpu) in rows[:2]:
        verdict = "meets" if cpu < TARGET_MS else "MISSES"
        print(
            f"{name}: {cpu:.0f} ms CPU ({wall:.0f} ms wall) {verdict} the {TARGET_MS:.0f} ms target"
        )


if __name__ == "__main__":
    main()

"""The openb benchmark (``gpusched bench openb``, ``bench/openb.py``): every (trace, policy,
seed) of the published FGD protocol through the operator's engine, compared with the published
numbers.

Phases: run every (trace, policy, seed) — in worker processes with ``jobs`` — each returning a
small summary (headline figure, curves at integer loads, speed, topology tiers); print the
table in the publication's shape with the published value beside ours; check the sanity
figures; write the PNG and JSON when asked.
"""

from __future__ import annotations

import csv
import json
import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TextIO

from gpusched.offline.openb import Trace

TRACES = (
    "default",
    "cpu050",
    "cpu100",
    "cpu200",
    "cpu250",
    "gpushare40",
    "gpushare60",
    "gpushare80",
    "gpushare100",
    "gpuspec10",
    "gpuspec20",
    "gpuspec25",
    "gpuspec33",
    "multigpu20",
    "multigpu30",
    "multigpu40",
    "multigpu50",
)
"""The 17 traces of the published table, in its order."""
SEEDS = tuple(range(42, 52))
QUICK_SEEDS = (42, 43, 44)
QUICK_POLICIES = ("best-fit", "fgd", "gpusched")
LOADS = tuple(range(131))
"""Arrived loads (%) at which curves are kept, as in the FGD artifact."""


@dataclass(frozen=True, slots=True)
class Sanity:
    """A published figure ours must come near."""

    what: str
    published: float
    tolerance: float


EMPTY_FRAGMENTATION = Sanity("empty-cluster fragmentation, default trace (%)", 13.94, 0.05)
FGD_DEFAULT = Sanity("fgd, default trace, unallocated GPU % at 100 % arrived", 4.77, 0.3)
BEST_FIT_DEFAULT = Sanity("best-fit, default trace, unallocated GPU % at 100 % arrived", 7.14, 0.3)


@dataclass(frozen=True, slots=True, kw_only=True)
class Benchmark:
    """What to run; empty traces, policies or seeds mean the defaults (of ``quick`` or not)."""

    data: Path
    """The folder of the trace CSVs."""
    traces: Sequence[str] = ()
    policies: Sequence[str] = ()
    seeds: Sequence[int] = ()
    jobs: int = 1
    quick: bool = False
    """CI mode: the default trace, seeds 42-44, best-fit/fgd/gpusched, sanity checks."""
    plot: Path | None = None
    json: Path | None = None


# ----- running ---------------------------------------------------------------------------------


@dataclass(slots=True, kw_only=True)
class RunSummary:
    """What one run sends back from its worker."""

    trace: str
    policy: str
    seed: int
    unallocated: float
    allocated_at: list[float]
    """Allocation rate % at each arrived load of `LOADS`."""
    fragmented_at: list[float]
    pods: int
    placed: int
    seconds: float
    multi_gpu: int
    best_tier: int
    tier_misses: list[str] = field(default_factory=list)


_TRACES: dict[tuple[str, str], Trace] = {}


def run_one(task: tuple[str, str, str, int]) -> RunSummary:
    """One (data folder, trace, policy, seed) run; traces are loaded once per process."""
    from gpusched.offline.openb import load_trace
    from gpusched.offline.replay import run

    data, trace_name, policy, seed = task
    trace = _TRACES.get((data, trace_name))
    if trace is None:
        trace = _TRACES[(data, trace_name)] = load_trace(Path(data), trace_name)
    replay = run(trace, policy, seed)
    return RunSummary(
        trace=trace_name,
        policy=policy,
        seed=seed,
        unallocated=replay.unallocated,
        allocated_at=[replay.at_load(x, replay.allocated_pct) for x in LOADS],
        fragmented_at=[replay.at_load(x, replay.fragmented_pct) for x in LOADS],
        pods=int(replay.placed.size),
        placed=int(replay.placed.sum()),
        seconds=replay.seconds,
        multi_gpu=replay.multi_gpu,
        best_tier=replay.best_tier,
        tier_misses=replay.tier_misses,
    )


def run_all(
    data: Path, traces: Sequence[str], policies: Sequence[str], seeds: Sequence[int], jobs: int
) -> list[RunSummary]:
    """Every run, in (trace, policy, seed) order; ``jobs`` > 1 uses worker processes."""
    tasks = [(str(data), t, p, s) for t in traces for p in policies for s in seeds]
    if jobs <= 1:
        return [run_one(task) for task in tasks]
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        return pool.map(run_one, tasks, chunksize=1)


# ----- reporting -------------------------------------------------------------------------------


def published_table(data: Path) -> dict[tuple[str, str], tuple[float, float]]:
    """(trace, artifact policy name) → (mean, sd) of unallocated GPU % at 100 % arrived."""
    path = data / "fgd-results-summary.csv"
    if not path.exists():
        return {}
    with path.open(newline="", encoding="utf-8") as handle:
        return {
            (row["workload"].removeprefix("openb_pod_list_"), row["policy"]): (
                float(row["unalloc_pct_at_arrived100_mean"]),
                float(row["unalloc_pct_at_arrived100_sd"]),
            )
            for row in csv.DictReader(handle)
        }


def _mean_sd(values: Sequence[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def report(
    runs: Sequence[RunSummary],
    traces: Sequence[str],
    policies: Sequence[str],
    published: dict[tuple[str, str], tuple[float, float]],
    out: TextIO,
) -> dict[tuple[str, str], float]:
    """Prints the tables; returns our mean per (trace, policy)."""
    from gpusched.offline.replay import PUBLISHED_NAMES

    means: dict[tuple[str, str], float] = {}
    out.write(
        "Unallocated GPU % at 100 % arrived load, mean ± sd over seeds "
        "(published: the FGD artifact's mean over seeds 42-51; Δ = ours − published)\n\n"
    )
    header = ["trace", *policies]
    rows = []
    for trace in traces:
        cells = [trace]
        for policy in policies:
            values = [r.unallocated for r in runs if r.trace == trace and r.policy == policy]
            mean, sd = _mean_sd(values)
            means[(trace, policy)] = mean
            cell = f"{mean:.2f} ± {sd:.2f}"
            paper = published.get((trace, PUBLISHED_NAMES.get(policy, "")))
            if paper is not None:
                cell += f" ({paper[0]:.2f}, Δ {mean - paper[0]:+.2f})"
            cells.append(cell)
        rows.append(cells)
    _table(out, header, rows)
    if "gpusched" in policies and "fgd" in policies:
        _versus(out, traces, means, published)
    _speed(out, runs, policies)
    _tiers(out, runs, policies)
    return means


def _versus(
    out: TextIO,
    traces: Sequence[str],
    means: dict[tuple[str, str], float],
    published: dict[tuple[str, str], tuple[float, float]],
) -> None:
    out.write("\ngpusched's default policy vs FGD (unallocated GPU %, lower is better)\n\n")
    rows = []
    better = 0
    for trace in traces:
        ours, fgd = means[(trace, "gpusched")], means[(trace, "fgd")]
        paper = published.get((trace, "06-FGD"))
        reference = paper[0] if paper else fgd
        better += ours < min(fgd, reference)
        rows.append(
            [
                trace,
                f"{ours:.2f}",
                f"{fgd:.2f}",
                f"{paper[0]:.2f}" if paper else "-",
                f"{ours - fgd:+.2f}",
                f"{ours - reference:+.2f}",
            ]
        )
    _table(out, ["trace", "gpusched", "our fgd", "published fgd", "Δ ours", "Δ published"], rows)
    out.write(f"\ngpusched strictly better than both FGDs on {better} of {len(traces)} traces\n")


def _speed(out: TextIO, runs: Sequence[RunSummary], policies: Sequence[str]) -> None:
    out.write("\nDecisions per second (pick_node + assume + the per-pod record, one core)\n\n")
    rows = []
    for policy in policies:
        mine = [r for r in runs if r.policy == policy]
        pods, seconds = sum(r.pods for r in mine), sum(r.seconds for r in mine)
        rows.append([policy, f"{pods:,}", f"{seconds:.1f}", f"{pods / seconds:,.0f}"])
    _table(out, ["policy", "pods", "seconds", "pods/s"], rows)


def _tiers(out: TextIO, runs: Sequence[RunSummary], policies: Sequence[str]) -> None:
    out.write(
        "\nMulti-GPU pods on the best link tier their node offered (synthetic intra-node "
        "topology: 8-GPU V100 nodes as DGX-1 cube-mesh, other 8-GPU nodes as DGX A100, 4-GPU "
        "nodes as two NVLink pairs, 2-GPU nodes as one pair, PCIe for T4)\n\n"
    )
    rows = []
    for policy in policies:
        mine = [r for r in runs if r.policy == policy]
        multi, best = sum(r.multi_gpu for r in mine), sum(r.best_tier for r in mine)
        share = f"{100 * best / multi:.1f} %" if multi else "-"
        misses = next((r.tier_misses[0] for r in mine if r.tier_misses), "")
        rows.append([policy, f"{multi:,}", f"{best:,}", share, misses])
    _table(out, ["policy", "multi-GPU pods", "best tier", "share", "first miss"], rows)


def _table(out: TextIO, header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(str(c)) for c in column) for column in zip(header, *rows, strict=True)]
    for cells in [header, ["-" * w for w in widths], *rows]:
        out.write("  ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)) + "\n")


def empty_fragmentation(data: Path) -> float:
    """FGD's fragmentation of the empty cluster for the default trace, % of capacity."""
    from gpusched.engine import fragmentation
    from gpusched.offline.openb import load_trace

    trace = load_trace(data, "default")
    total = fragmentation.node_fragmentation(trace.snapshot.copy(), trace.workload).sum()
    return float(100 * total / trace.capacity)


def sanity(data: Path, means: dict[tuple[str, str], float], out: TextIO) -> bool:
    """Prints the sanity figures against the publication; ``False`` if any is off."""
    checks = [(EMPTY_FRAGMENTATION, empty_fragmentation(data))]
    for check, key in ((FGD_DEFAULT, "fgd"), (BEST_FIT_DEFAULT, "best-fit")):
        if ("default", key) in means:
            checks.append((check, means[("default", key)]))
    out.write("\nSanity against the publication\n\n")
    ok = True
    rows = []
    for check, ours in checks:
        good = math.isclose(ours, check.published, abs_tol=check.tolerance)
        ok &= good
        rows.append(
            [
                check.what,
                f"{ours:.2f}",
                f"{check.published:.2f} ± {check.tolerance}",
                "ok" if good else "OFF",
            ]
        )
    _table(out, ["figure", "ours", "published", ""], rows)
    return ok


def plot(
    path: Path, runs: Sequence[RunSummary], traces: Sequence[str], policies: Sequence[str]
) -> None:
    """Allocation rate vs arrived load, one panel per trace, one line per policy (seed mean)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = min(len(traces), 3)
    rows = math.ceil(len(traces) / columns)
    figure, axes = plt.subplots(
        rows, columns, figsize=(5 * columns, 4 * rows), squeeze=False, sharex=True
    )
    for panel, trace in zip(axes.flat, traces, strict=False):
        for policy in policies:
            mine = [r.allocated_at for r in runs if r.trace == trace and r.policy == policy]
            curve = [statistics.fmean(point) for point in zip(*mine, strict=True)]
            panel.plot(LOADS, curve, label=policy, linewidth=1.2)
        panel.plot(LOADS, LOADS, color="grey", linestyle=":", linewidth=0.8)
        panel.set_xlim(0, 130)
        panel.set_ylim(50, 100)
        panel.set_title(f"openb {trace}")
        panel.set_xlabel("arrived GPU load (% of capacity)")
        panel.set_ylabel("GPU allocation rate (%)")
        panel.grid(alpha=0.3)
    for panel in list(axes.flat)[len(traces) :]:
        panel.axis("off")
    axes.flat[0].legend(fontsize=8, loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


# ----- the whole benchmark ---------------------------------------------------------------------


def run_benchmark(bench: Benchmark, out: TextIO) -> bool:
    """Runs and reports ``bench``; ``False`` when ``quick`` and a sanity figure is off.
    `TraceError` for unreadable trace files."""
    from gpusched.offline.replay import POLICIES

    traces = bench.traces or (("default",) if bench.quick else TRACES)
    policies = bench.policies or (QUICK_POLICIES if bench.quick else tuple(POLICIES))
    seeds = bench.seeds or (QUICK_SEEDS if bench.quick else SEEDS)
    started = time.perf_counter()
    out.write(
        f"openb replay: {len(traces)} trace(s) × {len(policies)} policies × {len(seeds)} seeds "
        f"({seeds[0]}..{seeds[-1]}), {bench.jobs} job(s), data {bench.data}\n"
        "Nodes: the 1,213 GPU nodes, with a synthetic intra-node topology (the trace has none). "
        "Policies run through the operator's engine (pick_node + Snapshot.assume).\n\n"
    )
    out.flush()
    runs = run_all(bench.data, traces, policies, seeds, max(1, bench.jobs))
    means = report(runs, traces, policies, published_table(bench.data), out)
    ok = True
    if "default" in traces:
        ok = sanity(bench.data, means, out)
    if bench.plot:
        plot(bench.plot, runs, traces, policies)
        out.write(f"\nwrote {bench.plot}\n")
    if bench.json:
        bench.json.parent.mkdir(parents=True, exist_ok=True)
        bench.json.write_text(json.dumps([asdict(r) for r in runs]), encoding="utf-8")
        out.write(f"wrote {bench.json}\n")
    out.write(f"\nwall time {time.perf_counter() - started:.1f} s\n")
    return ok or not bench.quick

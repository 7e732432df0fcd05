"""``gpusched bench openb``: replay the Alibaba openb trace with the published FGD protocol
(`gpusched.offline.benchmark`); this module reads the options."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

from gpusched.commands import EXIT_BAD_INPUT, EXIT_OK

EXIT_SANITY = 1


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = commands.add_parser(
        "bench",
        help="placement-quality benchmarks",
        description="Placement-quality benchmarks on real traces.",
    )
    which = bench.add_subparsers(dest="benchmark", metavar="BENCHMARK", required=True)
    openb = which.add_parser(
        "openb",
        help="replay Alibaba's openb trace with the published FGD protocol",
        description=(
            "Replay the openb GPU-cluster trace (Alibaba cluster-trace-gpu-v2023) with the "
            "protocol of the FGD paper (ATC'23): seeded shuffle, inflation to 130 % of GPU "
            "capacity, one attempt per pod, no departures. Every policy is a scoring "
            "configuration of the operator's engine. Prints unallocated GPU % at 100 % "
            "arrived load (mean ± sd over seeds) beside the published value. Exit 0 when it "
            "ran, 1 when --quick's sanity checks fail, 2 on bad input. The trace is not in the "
            "installed package: --data names its folder (bench/data/openb of the source tree)."
        ),
    )
    add_options(openb)
    openb.set_defaults(handler=bench_openb)


def add_options(parser: argparse.ArgumentParser, data: Path | None = None) -> None:
    """The options of ``gpusched bench openb`` (shared with ``bench/openb.py``, which gives
    ``--data`` its own folder as the default)."""
    from gpusched.offline.benchmark import TRACES
    from gpusched.offline.replay import POLICIES

    parser.add_argument(
        "--data",
        type=Path,
        default=data,
        required=data is None,
        metavar="FOLDER",
        help=(
            "folder of the trace CSVs: bench/data/openb of the source tree (8 MB, not in the "
            "installed package)" + (f"; default {data}" if data is not None else "")
        ),
    )
    parser.add_argument(
        "--traces",
        type=_names(TRACES),
        help=f"comma-separated traces or 'all' (default: all): {', '.join(TRACES)}",
    )
    parser.add_argument(
        "--policies",
        type=_names(tuple(POLICIES)),
        help=f"comma-separated policies or 'all' (default: all): {', '.join(POLICIES)}",
    )
    parser.add_argument(
        "--seeds", type=_seeds, help="e.g. 42-51 (default) or 42,43,44: the protocol's seeds"
    )
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="CI mode: default trace, seeds 42-44, best-fit/fgd/gpusched, sanity checks",
    )
    parser.add_argument("--plot", type=Path, help="write allocation rate vs arrived load (PNG)")
    parser.add_argument("--json", type=Path, help="write every run's summary (JSON)")


def _names(known: tuple[str, ...]) -> Callable[[str], tuple[str, ...]]:
    def parse(raw: str) -> tuple[str, ...]:
        if raw == "all":
            return known
        names = tuple(n.strip() for n in raw.split(",") if n.strip())
        unknown = [n for n in names if n not in known]
        if unknown or not names:
            raise argparse.ArgumentTypeError(
                f"unknown: {', '.join(unknown) or raw!r}; choose from {', '.join(known)}"
            )
        return names

    return parse


def _seeds(raw: str) -> tuple[int, ...]:
    try:
        if "-" in raw:
            low, high = (int(x) for x in raw.split("-", 1))
            seeds = tuple(range(low, high + 1))
        else:
            seeds = tuple(int(x) for x in raw.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not seeds: {raw!r} (e.g. 42-51 or 42,43)") from None
    if not seeds:
        raise argparse.ArgumentTypeError(f"no seeds in {raw!r}")
    return seeds


def bench_openb(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Runs the benchmark for parsed ``args`` (`add_options`); the exit code."""
    from gpusched.offline.benchmark import Benchmark, run_benchmark
    from gpusched.offline.openb import TraceError

    bench = Benchmark(
        data=args.data,
        traces=args.traces or (),
        policies=args.policies or (),
        seeds=args.seeds or (),
        jobs=args.jobs,
        quick=args.quick,
        plot=args.plot,
        json=args.json,
    )
    try:
        ok = run_benchmark(bench, out)
    except TraceError as error:
        print(f"gpusched bench openb: {error}", file=err)
        return EXIT_BAD_INPUT
    if not ok:
        print("gpusched bench openb: a sanity figure is off (see above)", file=err)
        return EXIT_SANITY
    return EXIT_OK


def main(argv: Sequence[str] | None = None, data: Path | None = None) -> int:
    """``bench/openb.py``'s entry point: the options of ``gpusched bench openb``, with
    ``data`` as the default of ``--data``."""
    parser = argparse.ArgumentParser(
        prog="bench/openb.py", description=__doc__.splitlines()[0] if __doc__ else None
    )
    add_options(parser, data)
    return bench_openb(parser.parse_args(argv), sys.stdout, sys.stderr)

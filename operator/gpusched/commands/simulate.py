"""``gpusched simulate``: place pending pods of a cluster snapshot offline."""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from gpusched.api.config import SchedulerConfig
from gpusched.commands import EXIT_BAD_INPUT, EXIT_OK, add_output_option, write_output
from gpusched.report import render_table
from gpusched.simulate import SAMPLE_DIR, ClusterObjects, InputError, load, read_config, run

if TYPE_CHECKING:
    from gpusched.engine.health import GpuSample
    from gpusched.telemetry.status import TelemetryStatus


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    simulate = commands.add_parser(
        "simulate",
        help="place pending pods of a cluster snapshot offline",
        description=(
            "Read Nodes, Pods, Workloads, CompositePodGroups and PodGroups from YAML files or "
            "folders (the embedded sample when none is given), place the pending pods whose "
            "schedulerName is ours with the operator's engine, and print the decisions. "
            "Exit 0 when it ran (even with unschedulable pods), 2 on bad input."
        ),
    )
    simulate.add_argument("paths", nargs="*", type=Path, metavar="PATH")
    simulate.add_argument("--config", type=Path, help="SchedulerConfig YAML file")
    simulate.add_argument(
        "--metrics",
        type=Path,
        metavar="FILE",
        help=(
            "a saved dcgm-exporter /metrics scrape (Prometheus text format): GPUs are judged by "
            "it as the operator judges them by Prometheus (as of the newest sample in the file)"
        ),
    )
    add_output_option(simulate)
    simulate.add_argument(
        "--plot", type=Path, metavar="FILE.png", help="also draw the cluster after the placement"
    )
    simulate.set_defaults(handler=_simulate)


def _simulate(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    try:
        config = read_config(args.config)
        objects = load(args.paths or [SAMPLE_DIR])
        telemetry = read_metrics(args.metrics, objects, config)
        simulation = run(objects, config, telemetry.samples if telemetry else None)
    except InputError as error:
        print(f"gpusched simulate: {error}", file=err)
        return EXIT_BAD_INPUT
    document = simulation.to_dict()
    if telemetry is not None:
        document["telemetry"] = telemetry.status.to_dict()
    table = render_table(simulation)
    if telemetry is not None:
        table = f"Telemetry: {telemetry.status.summary()}\n{table}"
    write_output(args.output, document, table, out)
    if args.plot is not None:
        from gpusched.plot import PlotError, plot_simulation

        try:
            plot_simulation(objects, simulation, args.plot)
        except PlotError as error:
            print(f"gpusched simulate: {error}", file=err)
            return EXIT_BAD_INPUT
    return EXIT_OK


@dataclass(frozen=True)
class Metrics:
    samples: Mapping[tuple[str, int], GpuSample]
    status: TelemetryStatus


def read_metrics(
    path: Path | None, objects: ClusterObjects, config: SchedulerConfig
) -> Metrics | None:
    """Telemetry from a saved scrape, through the operator's mapping; series of nodes not in
    the snapshot are counted as unknown."""
    if path is None:
        return None
    from gpusched.telemetry.exposition import parse_exposition
    from gpusched.telemetry.status import describe_data

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"{path}: cannot read: {error}") from None
    check_exposition(text, path)
    known = {n.name for n in objects.nodes}
    data = parse_exposition(text, config.telemetry, known)
    now = data.newest_time() or 0.0
    status = describe_data(data, f"file {path}", now, config.telemetry.max_age_seconds)
    return Metrics(data.view(now), status)


_SAMPLE_LINE = re.compile(
    r"[a-zA-Z_:][a-zA-Z0-9_:]*(?:\{.*\})?[ \t]+"
    r"(?:[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)|[-+]?Inf|NaN)"
    r"(?:[ \t]+-?\d+)?[ \t]*"
)
"""One sample of the Prometheus text format: ``name{labels} value [timestamp]``."""


def check_exposition(text: str, path: Path) -> None:
    """`InputError` unless ``text`` is a scrape in the Prometheus text format with at least one
    dcgm-exporter series. A file of another kind (YAML, a Prometheus API answer in JSON)
    would otherwise read as "no GPU data", hiding the mistake. A line cut short is allowed,
    as a scrape saved while the exporter wrote may end with one."""
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    samples = [line for _, line in lines if _SAMPLE_LINE.fullmatch(line)]
    if not samples:
        first = next((f"line {n}: {line[:60]!r}" for n, line in lines), "the file is empty")
        raise InputError(
            f"{path}: not a /metrics scrape in the Prometheus text format "
            f"(no line reads NAME{{LABELS}} VALUE; {first})"
        )
    if not any(line.startswith("DCGM_FI_DEV_") for line in samples):
        raise InputError(
            f"{path}: no dcgm-exporter series (DCGM_FI_DEV_*) among its {len(samples)} samples: "
            "save the dcgm-exporter's /metrics (port 9400), not another exporter's"
        )

"""``gpusched simulate``: place pending pods of a cluster snapshot offline."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import yaml

from gpusched.api.config import SchedulerConfig, load_config
from gpusched.api.errors import InvalidObjectError
from gpusched.commands import EXIT_BAD_INPUT, EXIT_OK
from gpusched.report import render_table
from gpusched.simulate import SAMPLE_DIR, ClusterObjects, InputError, load, run

if TYPE_CHECKING:
    from gpusched.engine.snapshot import GpuSample
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
    simulate.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")
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
    document = simulation.result.to_dict()
    if telemetry is not None:
        document["telemetry"] = telemetry.status.to_dict()
    if args.output == "json":
        json.dump(document, out, indent=2)
        out.write("\n")
    elif args.output == "yaml":
        yaml.safe_dump(document, out, sort_keys=False)
    else:
        if telemetry is not None:
            out.write(f"Telemetry: {telemetry.status.summary()}\n")
        out.write(render_table(simulation))
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
    known = {n.name for n in objects.nodes}
    data = parse_exposition(text, config.telemetry, known)
    now = data.newest_time() or 0.0
    status = describe_data(data, f"file {path}", now, config.telemetry.max_age_seconds)
    return Metrics(data.view(now), status)


def read_config(path: Path | None) -> SchedulerConfig:
    """The SchedulerConfig in ``path``, or the defaults; `InputError` naming the file."""
    if path is None:
        return SchedulerConfig()
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        return load_config(raw, source=str(path))
    except (OSError, yaml.YAMLError) as error:
        raise InputError(f"{path}: cannot read: {error}") from None
    except InvalidObjectError as error:
        raise InputError(str(error)) from None

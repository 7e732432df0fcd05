"""``gpusched simulate``: place pending pods of a cluster snapshot offline."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TextIO

from gpusched.commands import EXIT_BAD_INPUT, add_output_option, write_output, write_plot


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
    from gpusched.inputs import InputError
    from gpusched.inputs.config import read_config
    from gpusched.inputs.objects import SAMPLE_DIR, load
    from gpusched.inputs.scrape import read_metrics
    from gpusched.offline.report import document, render_table
    from gpusched.offline.simulate import simulate

    try:
        config = read_config(args.config)
        objects = load(args.paths or [SAMPLE_DIR])
        telemetry = read_metrics(args.metrics, objects, config)
        run = simulate(objects, config, telemetry.samples if telemetry else None)
    except InputError as error:
        print(f"gpusched simulate: {error}", file=err)
        return EXIT_BAD_INPUT
    found = document(run)
    table = render_table(run)
    if telemetry is not None:
        found["telemetry"] = telemetry.status.to_dict()
        table = f"Telemetry: {telemetry.status.summary()}\n{table}"
    write_output(args.output, found, table, out)
    return write_plot("simulate", run, args.plot, err)

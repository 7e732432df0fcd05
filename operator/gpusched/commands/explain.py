"""``gpusched explain`` (also ``kubectl gpusched explain``): why something is or is not placed."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from gpusched.commands import (
    EXIT_BAD_INPUT,
    add_output_option,
    register_all,
    write_output,
    write_plot,
)

EXIT_UNREACHABLE = 1
"""The live cluster could not be read."""


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    explain = commands.add_parser(
        "explain",
        help="say why a pod, PodGroup, CompositePodGroup or Workload is (not) placed",
        description=(
            "Run the engine as the operator would now and print its decision about TARGET "
            "(pod/NAME, gspg/NAME, gscpg/NAME or gswl/NAME; pg/, cpg/, wl/ too): the status "
            "lastAttempt text, one line "
            "per topology domain tried, and what would make it fit. Reads snapshot files "
            "(-f, as simulate does) or a live cluster (read-only GETs). Exit 0 when it ran "
            "(placed or not), 1 when the cluster could not be read, 2 on bad input or an "
            "unknown target."
        ),
    )
    explain.add_argument("target", metavar="TARGET", help="KIND/NAME: pod, pg, cpg or wl")
    explain.add_argument("-n", "--namespace", default="default", help="default: default")
    explain.add_argument(
        "-f",
        "--filename",
        dest="paths",
        action="extend",
        nargs="+",
        type=Path,
        default=[],
        metavar="PATH",
        help="YAML files or folders of Kubernetes objects (repeatable); else the live cluster",
    )
    explain.add_argument(
        "--kubeconfig",
        help=(
            "kubeconfig of the live cluster (default: in-cluster, $KUBECONFIG, "
            "~/.kube/config); GPU telemetry then comes from the Prometheus of --config, if any"
        ),
    )
    explain.add_argument("--config", type=Path, help="SchedulerConfig YAML file")
    explain.add_argument(
        "--metrics", type=Path, metavar="FILE", help="a saved dcgm-exporter /metrics scrape"
    )
    add_output_option(explain)
    explain.add_argument(
        "--plot", type=Path, metavar="FILE.png", help="also draw the cluster, target highlighted"
    )
    explain.set_defaults(handler=_explain)


def _explain(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from gpusched.inputs import InputError
    from gpusched.inputs.config import read_config
    from gpusched.inputs.objects import load
    from gpusched.inputs.scrape import read_metrics
    from gpusched.offline.explain import ExplainError, Target, explain_target
    from gpusched.offline.live import UnreachableError, read_cluster, read_prometheus

    try:
        target = Target.parse(args.target, args.namespace)
        config = read_config(args.config)
        objects = load(args.paths) if args.paths else read_cluster(args.kubeconfig)
        metrics = read_metrics(args.metrics, objects, config)
        telemetry = metrics.samples if metrics is not None else None
        if telemetry is None and not args.paths:
            telemetry = read_prometheus(objects, config)
        run, explanation = explain_target(objects, config, telemetry, target)
    except (ExplainError, InputError) as error:
        print(f"gpusched explain: {error}", file=err)
        return EXIT_BAD_INPUT
    except UnreachableError as error:
        print(f"gpusched explain: cannot read the cluster: {error}", file=err)
        return EXIT_UNREACHABLE
    write_output(args.output, explanation.to_dict(), explanation.render(), out)
    return write_plot(
        "explain", run, args.plot, err, highlight=explanation.highlight, title=explanation.headline
    )


def kubectl_main(argv: Sequence[str] | None = None) -> int:
    """The ``kubectl-gpusched`` entry point: ``kubectl gpusched explain gspg/NAME -n NS``."""
    parser = argparse.ArgumentParser(
        prog="kubectl gpusched", description="gpusched's kubectl plugin."
    )
    register_all(parser.add_subparsers(required=True, metavar="COMMAND"))
    args = parser.parse_args(argv)
    code: int = args.handler(args, sys.stdout, sys.stderr)
    return code

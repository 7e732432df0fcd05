"""``gpusched explain`` (also ``kubectl gpusched explain``): why something is or is not placed."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from gpusched.commands import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    add_output_option,
    register_all,
    write_output,
)

if TYPE_CHECKING:
    from gpusched.api.config import SchedulerConfig
    from gpusched.engine.health import GpuSample
    from gpusched.explain import Cluster

EXIT_UNREACHABLE = 1
"""The live cluster could not be read."""


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    explain = commands.add_parser(
        "explain",
        help="say why a pod, PodGroup, CompositePodGroup or Workload is (not) placed",
        description=(
            "Run the engine as the operator would now and print its decision about TARGET "
            "(pod/NAME, pg/NAME, cpg/NAME or wl/NAME): the status lastAttempt text, one line "
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
    from gpusched.commands.simulate import read_metrics
    from gpusched.explain import ExplainError, Target, decide, explain
    from gpusched.simulate import InputError, read_config

    try:
        target = Target.parse(args.target, args.namespace)
        config = read_config(args.config)
        cluster = _read_cluster(args)
        metrics = read_metrics(args.metrics, cluster.objects, config)
        telemetry = metrics.samples if metrics is not None else None
        if telemetry is None and not args.paths:
            telemetry = _read_prometheus(cluster, config)
        run = decide(cluster, config, telemetry)
        explanation = explain(run, cluster, target)
    except (ExplainError, InputError) as error:
        print(f"gpusched explain: {error}", file=err)
        return EXIT_BAD_INPUT
    except _UnreachableError as error:
        print(f"gpusched explain: cannot read the cluster: {error}", file=err)
        return EXIT_UNREACHABLE
    write_output(args.output, explanation.to_dict(), explanation.render(), out)
    if args.plot is not None:
        from gpusched.plot import PlotError, plot_run

        try:
            plot_run(run, args.plot, highlight=explanation.highlight, title=explanation.headline)
        except PlotError as error:
            print(f"gpusched explain: {error}", file=err)
            return EXIT_BAD_INPUT
    return EXIT_OK


class _UnreachableError(Exception):
    pass


def _read_cluster(args: argparse.Namespace) -> Cluster:
    from gpusched.explain import from_documents, from_objects
    from gpusched.simulate import load

    if args.paths:
        return from_objects(load(args.paths))
    _check_credentials(args.kubeconfig)
    import asyncio

    from gpusched.k8s.reader import list_cluster
    from gpusched.scheduler.ports import ApiError

    try:
        documents = asyncio.run(list_cluster(args.kubeconfig))
    except ApiError as error:
        raise _UnreachableError(str(error)) from None
    except Exception as error:  # a kubeconfig that cannot be read or used
        raise _UnreachableError(f"{type(error).__name__}: {error}") from None
    return from_documents(documents)


def _check_credentials(kubeconfig: str | None) -> None:
    """Says plainly that there is no cluster to read, where the Kubernetes client would raise
    "ConfigException: Invalid kube-config file. No configuration found." (the same places
    `gpusched.k8s.client.load_configuration` looks, in its order)."""
    import os

    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        return  # in a pod: the service account's credentials
    path = kubeconfig or os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    if any(Path(p).is_file() for p in path.split(os.pathsep) if p):
        return
    if kubeconfig:
        where = f"--kubeconfig {path} does not exist"
    elif os.environ.get("KUBECONFIG"):
        where = f"$KUBECONFIG names {path}, which does not exist"
    else:
        where = f"no --kubeconfig, no $KUBECONFIG, no {path}, and not running in a pod"
    raise _UnreachableError(
        f"{where}; pass --kubeconfig FILE, or -f PATH to explain snapshot files instead"
    )


def _read_prometheus(
    cluster: Cluster, config: SchedulerConfig
) -> Mapping[tuple[str, int], GpuSample] | None:
    """For a live cluster, telemetry as the operator reads it, when the config names a
    Prometheus (one query; a failed one leaves every GPU unknown, as in the operator)."""
    if not config.telemetry.prometheus.url:
        return None
    import asyncio

    from gpusched.telemetry.cache import TelemetryCache

    known = {n.name for n in cluster.objects.nodes}
    cache = TelemetryCache(config.telemetry, known_nodes=lambda: known, registry=None)

    async def once() -> Mapping[tuple[str, int], GpuSample] | None:
        try:
            await cache.refresh()
            return cache.samples()
        finally:
            await cache.stop()

    return asyncio.run(once())


def kubectl_main(argv: Sequence[str] | None = None) -> int:
    """The ``kubectl-gpusched`` entry point: ``kubectl gpusched explain pg/NAME -n NS``."""
    parser = argparse.ArgumentParser(
        prog="kubectl gpusched", description="gpusched's kubectl plugin."
    )
    register_all(parser.add_subparsers(required=True, metavar="COMMAND"))
    args = parser.parse_args(argv)
    code: int = args.handler(args, sys.stdout, sys.stderr)
    return code

"""``gpusched run``: the operator (Kopf), cluster-wide."""

from __future__ import annotations

import argparse
from typing import TextIO

from gpusched.commands import EXIT_BAD_INPUT, EXIT_OK
from gpusched.options import OptionsError, add_arguments, from_arguments


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = commands.add_parser(
        "run",
        help="run the scheduler (a Kopf operator) against the cluster",
        description=(
            "Watch Nodes, Pods, Workloads, CompositePodGroups and PodGroups cluster-wide and "
            "place pods whose schedulerName is ours. Credentials: in-cluster when running in "
            "a pod, else --kubeconfig, $KUBECONFIG or ~/.kube/config."
        ),
    )
    add_arguments(run)
    run.add_argument(
        "--liveness",
        metavar="URL",
        help=(
            "serve Kopf's liveness endpoint at this URL, e.g. http://0.0.0.0:8080/healthz, "
            "for the pod's probes (default: not served)"
        ),
    )
    run.set_defaults(handler=_run)


def _run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    import kopf

    from gpusched import handlers
    from gpusched.handlers import memtrace

    try:
        options = from_arguments(args)
    except OptionsError as error:
        print(f"gpusched run: {error}", file=err)
        return EXIT_BAD_INPUT
    handlers.configure_logging(options.verbose)
    try:
        memtrace.install()  # off unless GPUSCHED_TRACEMALLOC asks for it
    except ValueError as error:
        print(f"gpusched run: {error}", file=err)
        return EXIT_BAD_INPUT
    handlers.configure(options)
    kopf.run(
        clusterwide=True,
        standalone=True,
        registry=handlers.registry,
        liveness_endpoint=args.liveness,
    )
    return EXIT_OK

"""``gpusched run``: the operator (Kopf), cluster-wide."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import TextIO

from gpusched.commands import EXIT_BAD_INPUT, EXIT_OK
from gpusched.simulate import InputError


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
    run.add_argument("--config", type=Path, help="SchedulerConfig YAML file")
    run.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG)")
    run.add_argument(
        "--metrics-address",
        default="0.0.0.0:9402",
        metavar="HOST:PORT",
        help="where to serve /metrics; port 0 disables it (default 0.0.0.0:9402)",
    )
    run.add_argument(
        "--liveness",
        metavar="URL",
        help=(
            "serve Kopf's liveness endpoint at this URL, e.g. http://0.0.0.0:8080/healthz, "
            "for the pod's probes (default: not served)"
        ),
    )
    run.add_argument("--verbose", action="store_true", help="debug logging")
    run.set_defaults(handler=_run)


def _run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    import kopf

    from gpusched import handlers
    from gpusched.simulate import read_config

    try:
        config = read_config(args.config)
    except InputError as error:
        print(f"gpusched run: {error}", file=err)
        return EXIT_BAD_INPUT
    host, _, port = args.metrics_address.rpartition(":")
    if not port.isdigit():
        print(
            f"gpusched run: --metrics-address: {args.metrics_address!r} is not HOST:PORT", file=err
        )
        return EXIT_BAD_INPUT
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    handlers.configure(
        handlers.Options(
            config=config,
            kubeconfig=args.kubeconfig,
            metrics_address=host or "0.0.0.0",
            metrics_port=int(port),
        )
    )
    kopf.run(
        clusterwide=True,
        standalone=True,
        registry=handlers.registry,
        liveness_endpoint=args.liveness,
    )
    return EXIT_OK

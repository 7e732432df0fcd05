"""The operator's options: the flags of ``gpusched run``, the one way to set them.

``gpusched run`` parses them from its command line. Under plain ``kopf run -m
gpusched.handlers.plain`` the same flags, parsed by the same parser, come from the environment
variable ``GPUSCHED_RUN_ARGS`` (e.g. ``GPUSCHED_RUN_ARGS="--config c.yaml --metrics-address
127.0.0.1:9402"``); nothing else is read from the environment, apart from ``$KUBECONFIG`` when
no ``--kubeconfig`` is given. A variable of an older release that is still set is an error, not
silently ignored.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from gpusched.api.config import SchedulerConfig
from gpusched.inputs import InputError
from gpusched.inputs.config import read_config

RUN_ARGS_VARIABLE = "GPUSCHED_RUN_ARGS"
RETIRED_VARIABLES = {
    "GPUSCHED_CONFIG": "--config FILE",
    "GPUSCHED_METRICS_PORT": "--metrics-address HOST:PORT",
}
"""Variables the ``kopf run`` path once read → the flag that replaces each."""
DEFAULT_METRICS_ADDRESS = "0.0.0.0:9402"


class OptionsError(Exception):
    """Options that cannot be used; the message names the flag (or variable) and the value."""


@dataclass(slots=True)
class Options:
    config: SchedulerConfig = field(default_factory=SchedulerConfig)
    kubeconfig: str | None = None
    metrics_address: str = "0.0.0.0"
    metrics_port: int = 9402
    """``/metrics`` port; 0 disables the endpoint."""
    verbose: bool = False
    """Debug logging, and Kopf's line per handled event."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``gpusched run`` that configure the operator itself."""
    parser.add_argument("--config", type=Path, help="SchedulerConfig YAML file")
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG)")
    parser.add_argument(
        "--metrics-address",
        default=DEFAULT_METRICS_ADDRESS,
        metavar="HOST:PORT",
        help=f"where to serve /metrics; port 0 disables it (default {DEFAULT_METRICS_ADDRESS})",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="debug logging, and Kopf's line for every handled event (off: decisions only)",
    )


def from_arguments(args: argparse.Namespace) -> Options:
    """Options from parsed flags; `OptionsError` naming the flag or the config file's field."""
    try:
        config = read_config(args.config)
    except InputError as error:
        raise OptionsError(str(error)) from None
    host, _, port = args.metrics_address.rpartition(":")
    if not port.isdigit() or int(port) > 65535:
        raise OptionsError(f"--metrics-address: {args.metrics_address!r} is not HOST:PORT")
    return Options(
        config=config,
        kubeconfig=args.kubeconfig,
        metrics_address=host or "0.0.0.0",
        metrics_port=int(port),
        verbose=args.verbose,
    )


def from_environment(environ: Mapping[str, str]) -> Options:
    """Options for plain ``kopf run``: the flags in ``GPUSCHED_RUN_ARGS``."""
    retired = [f"{v} (use {flag})" for v, flag in RETIRED_VARIABLES.items() if v in environ]
    if retired:
        raise OptionsError(
            f"no longer read: {', '.join(retired)}; put gpusched run's flags in {RUN_ARGS_VARIABLE}"
        )
    return parse(shlex.split(environ.get(RUN_ARGS_VARIABLE, "")), prog=RUN_ARGS_VARIABLE)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise OptionsError(f"{self.prog}: {message}")


def parse(argv: Sequence[str], prog: str = "gpusched run") -> Options:
    """Options from ``argv``, flags as ``gpusched run`` takes them."""
    parser = _Parser(prog=prog, add_help=False)
    add_arguments(parser)
    return from_arguments(parser.parse_args(list(argv)))

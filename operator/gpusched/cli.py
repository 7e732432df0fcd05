"""The ``gpusched`` command line."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

import yaml

from gpusched.api.config import SchedulerConfig, load_config
from gpusched.api.errors import InvalidObjectError
from gpusched.report import render_table
from gpusched.simulate import SAMPLE_DIR, InputError, load, run

EXIT_OK = 0
EXIT_BAD_INPUT = 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.handler(args, sys.stdout, sys.stderr)
    except BrokenPipeError:
        # The reader went away (`gpusched simulate -o json | head`): not an error of ours.
        # Point stdout at devnull so the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    return code


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpusched", description="Topology-aware gang scheduler for GPU workloads."
    )
    commands = parser.add_subparsers(required=True, metavar="COMMAND")
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
    simulate.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")
    simulate.set_defaults(handler=_simulate)
    return parser


def _simulate(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    try:
        config = _config(args.config)
        objects = load(args.paths or [SAMPLE_DIR])
        simulation = run(objects, config)
    except InputError as error:
        print(f"gpusched simulate: {error}", file=err)
        return EXIT_BAD_INPUT
    document = simulation.result.to_dict()
    if args.output == "json":
        json.dump(document, out, indent=2)
        out.write("\n")
    elif args.output == "yaml":
        yaml.safe_dump(document, out, sort_keys=False)
    else:
        out.write(render_table(simulation))
    return EXIT_OK


def _config(path: Path | None) -> SchedulerConfig:
    if path is None:
        return SchedulerConfig()
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        return load_config(raw, source=str(path))
    except (OSError, yaml.YAMLError) as error:
        raise InputError(f"{path}: cannot read: {error}") from None
    except InvalidObjectError as error:
        raise InputError(str(error)) from None


if __name__ == "__main__":
    sys.exit(main())

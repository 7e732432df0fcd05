"""The ``gpusched`` command line; each subcommand lives in `gpusched.commands`."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from gpusched import __version__
from gpusched.commands import EXIT_OK, register_all


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
    parser.add_argument("--version", action="version", version=f"gpusched {__version__}")
    commands = parser.add_subparsers(required=True, metavar="COMMAND")
    register_all(commands)
    return parser


if __name__ == "__main__":
    sys.exit(main())

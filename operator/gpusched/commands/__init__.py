"""The subcommands of ``gpusched``, one module each.

Every module here exposes ``register(commands)``, which adds its subparser and sets
``handler(args, out, err) -> exit code``. Modules import only what building the parser needs;
heavy imports (kopf, httpx, matplotlib) happen inside the handler, so ``gpusched simulate``
starts fast.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from gpusched.offline.simulate import Run

EXIT_OK = 0
EXIT_BAD_INPUT = 2
OUTPUTS = ("table", "json", "yaml")
"""The one ``-o`` vocabulary of every command that prints a result: ``table`` for people (the
default), ``json`` and ``yaml`` for scripts (the same document)."""
_OLD_OUTPUTS = {"text": "table"}
"""Spellings an earlier release took (``explain -o text``), still read."""


def register_all(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Registers every subcommand module of this package, in name order."""
    for module in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        importlib.import_module(f"{__name__}.{module.name}").register(commands)


def add_output_option(parser: argparse.ArgumentParser) -> None:
    """``-o table|json|yaml``, the same for every command."""

    def output(value: str) -> str:
        return _OLD_OUTPUTS.get(value, value)

    parser.add_argument(
        "-o",
        "--output",
        type=output,
        choices=OUTPUTS,
        default="table",
        help="table (default), json or yaml",
    )


def write_output(output: str, document: Mapping[str, Any], table: str, out: TextIO) -> None:
    """Writes ``document`` as JSON or YAML, or the human-readable ``table``."""
    if output == "json":
        json.dump(document, out, indent=2)
        out.write("\n")
    elif output == "yaml":
        import yaml

        yaml.safe_dump(dict(document), out, sort_keys=False)
    else:
        out.write(table)


def write_plot(
    command: str,
    run: Run,
    path: Path | None,
    err: TextIO,
    highlight: Iterable[str] = (),
    title: str | None = None,
) -> int:
    """Draws the cluster of ``run`` into ``path`` (``--plot``) when one is given; the exit
    code: a picture that cannot be drawn or written is bad input, said on ``err``."""
    if path is None:
        return EXIT_OK
    from gpusched.offline.plot import PlotError, plot_run

    try:
        plot_run(run, path, highlight=highlight, title=title)
    except PlotError as error:
        print(f"gpusched {command}: {error}", file=err)
        return EXIT_BAD_INPUT
    return EXIT_OK

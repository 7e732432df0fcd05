"""The subcommands of ``gpusched``, one module each.

Every module here exposes ``register(commands)``, which adds its subparser and sets
``handler(args, out, err) -> exit code``. Modules import only what building the parser needs;
heavy imports (kopf, httpx, matplotlib) happen inside the handler, so ``gpusched simulate``
starts fast.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil

EXIT_OK = 0
EXIT_BAD_INPUT = 2


def register_all(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Registers every subcommand module of this package, in name order."""
    for module in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        importlib.import_module(f"{__name__}.{module.name}").register(commands)

"""The README's synopses name every option the commands take, so a reader sees all of them."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from gpusched.cli import _parser

README = Path(__file__).resolve().parents[2] / "README.md"


def subcommand(name: str) -> argparse.ArgumentParser:
    subparsers = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    parser: argparse.ArgumentParser = subparsers.choices[name]
    return parser


@pytest.mark.parametrize("command", ["run", "simulate"])
def test_the_readme_synopsis_lists_every_option(command: str) -> None:
    synopses = re.findall(
        rf"^gpusched {command} (\[.*)$", README.read_text(encoding="utf-8"), re.MULTILINE
    )
    assert synopses, f"the README shows no `gpusched {command} [...]` synopsis"
    options = [
        max(action.option_strings, key=len)
        for action in subcommand(command)._actions
        if action.option_strings
        and action.help is not argparse.SUPPRESS
        and "--help" not in action.option_strings
    ]
    missing = [o for o in options if not any(o in s or _short(o, command) in s for s in synopses)]
    assert missing == [], f"`gpusched {command}` synopsis lacks {missing}: {synopses}"


def _short(option: str, command: str) -> str:
    """The short spelling the synopsis may use (``-o`` for ``--output``)."""
    for action in subcommand(command)._actions:
        if option in action.option_strings:
            return min(action.option_strings, key=len)
    return option

"""Collaborators are wired by name: no constructor in the operator takes more than five
arguments by position (`SchedulingLoop` once took fourteen, in an order only its caller knew).

Only hand-written ``__init__`` methods are counted; dataclasses, which are records rather than
collaborators, are not."""

from __future__ import annotations

import ast
from pathlib import Path

import gpusched

MOST_POSITIONAL = 5
PACKAGE = Path(gpusched.__file__).parent


def positional_constructors(source: str, most: int = MOST_POSITIONAL) -> list[str]:
    """``Class(n)`` for each class whose ``__init__`` takes more than ``most`` arguments by
    position (``self`` aside)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef):
            continue
        for item in node.body:
            if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                positional = len(item.args.posonlyargs) + len(item.args.args) - 1
                if positional > most:
                    found.append(f"{node.name}({positional})")
    return found


def test_the_check_finds_a_constructor_taking_six_arguments_by_position() -> None:
    source = """
class Wide:
    def __init__(self, a, b, c, d, e, f): ...
class Named:
    def __init__(self, a, b, *, c, d, e, f, g): ...
class Five:
    def __init__(self, a, b, c, d, e): ...
"""
    assert positional_constructors(source) == ["Wide(6)"]


def test_no_constructor_in_the_operator_takes_more_than_five_arguments_by_position() -> None:
    found = {
        str(path.relative_to(PACKAGE)): names
        for path in sorted(PACKAGE.rglob("*.py"))
        if (names := positional_constructors(path.read_text()))
    }
    assert found == {}, f"make these keyword-only (a `*,` after self): {found}"

"""Every sentence the engine shows a person is built in ``engine/wording.py`` from data: no
other engine module formats one. A sentence is spotted by its spaces: an f-string with a
space in its text, a plain string of three words or more, or a ``"; ".join``-style join.
Memo keys and enum values are one or two words; docstrings and assert messages are for the
reader of the code."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import gpusched.engine

ENGINE = Path(gpusched.engine.__file__).parent

ALLOWED: dict[tuple[str, str], str] = {
    ("claims.py", "extended_key"): (
        "a claim key (namespace/<extended-resources of NAME>, no valid name, so no real "
        "claim is mistaken for it) that indexes the ledger, not a sentence"
    ),
}
"""(module, enclosing function) → why its string with spaces is not a sentence."""

CALLER_BUGS = {"ValueError"}
"""Raised for a caller's bug (a pod assumed twice, a malformed NodeShape, a negative count):
never caught in the engine nor shown in a status, an Event or explain; a traceback for
whoever wrote the call."""


@dataclass(frozen=True)
class Sentence:
    module: str
    line: int
    text: str


def sentences(source: str, module: str) -> list[Sentence]:
    """The sentences built in ``source`` outside the allowed places."""
    tree = ast.parse(source)
    parents = {id(c): n for n in ast.walk(tree) for c in ast.iter_child_nodes(n)}
    skipped = _skipped(tree)
    found = []
    for node in ast.walk(tree):
        if id(node) in skipped or _inside(node, parents, skipped):
            continue
        if (module, _function(node, parents)) in ALLOWED:
            continue
        if _is_sentence(node, parents):
            found.append(Sentence(module, getattr(node, "lineno", 0), ast.unparse(node)[:100]))
    return sorted(found, key=lambda s: s.line)


def _is_sentence(node: ast.AST, parents: dict[int, ast.AST]) -> bool:
    if isinstance(node, ast.JoinedStr):
        return any(_text(v).count(" ") >= 1 for v in node.values)
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        if isinstance(parents.get(id(node)), ast.JoinedStr):
            return False
        return node.value.count(" ") >= 2
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        joiner = node.func.value
        return node.func.attr == "join" and " " in _text(joiner)
    return False


def _text(node: ast.AST) -> str:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else ""


def _skipped(tree: ast.AST) -> set[int]:
    """Docstrings, assert messages and the arguments of a caller's-bug exception."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            skipped |= {id(s.value) for s in body if _docstring(s)}
            skipped |= {id(s) for s in body if _docstring(s)}
        if isinstance(node, ast.Assert) and node.msg is not None:
            skipped.add(id(node.msg))
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            called = node.exc.func
            if isinstance(called, ast.Name) and called.id in CALLER_BUGS:
                skipped.add(id(node.exc))
    return skipped


def _docstring(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)


def _inside(node: ast.AST, parents: dict[int, ast.AST], skipped: set[int]) -> bool:
    parent = parents.get(id(node))
    while parent is not None:
        if id(parent) in skipped:
            return True
        parent = parents.get(id(parent))
    return False


def _function(node: ast.AST, parents: dict[int, ast.AST]) -> str:
    parent = parents.get(id(node))
    while parent is not None and not isinstance(parent, ast.FunctionDef | ast.AsyncFunctionDef):
        parent = parents.get(id(parent))
    return parent.name if parent is not None else ""


def test_no_engine_module_but_wording_builds_a_sentence() -> None:
    found = [
        s
        for path in sorted(ENGINE.rglob("*.py"))
        if path.name != "wording.py"
        for s in sentences(path.read_text(), path.relative_to(ENGINE).as_posix())
    ]
    assert not found, "sentences built outside engine/wording.py (render them there):\n" + (
        "\n".join(f"  {s.module}:{s.line}: {s.text}" for s in found)
    )


def test_the_check_spots_each_way_of_building_a_sentence() -> None:
    source = '''
def refuse(key, names):
    """A docstring with many words is for the reader."""
    assert key, "an assert message with words is for the reader"
    if not names:
        raise ValueError(f"caller bug: {key} given no names")
    memo = {"two words": 1}
    if key == "a":
        raise KeyError(f"ResourceClaim {key} is being deleted")
    if key == "b":
        return "nothing of lower priority is held there"
    return "; ".join(names)
'''
    found = [s.line for s in sentences(source, "example.py")]
    assert found == [9, 11, 12]


def test_an_allowed_function_may_hold_a_key_with_spaces() -> None:
    source = 'def extended_key(pod):\n    return f"{pod}/<extended-resources of {pod}>"\n'
    assert sentences(source, "claims.py") == []
    assert len(sentences(source, "devices.py")) == 1

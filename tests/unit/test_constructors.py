"""Collaborators and records are built by name: no class in the operator takes more than five
arguments by position (`SchedulingLoop` once took fourteen, in an order only its caller knew;
`PodRequest` eleven fields, in the order of its declaration).

Counted per class: the parameters of a hand-written ``__init__`` (``self`` aside); else, for a
dataclass, the fields its generated ``__init__`` takes by position (``init=False`` and
keyword-only fields aside, fields of dataclass bases included); for a NamedTuple, every field,
since a tuple cannot be made keyword-only. Pydantic models take keywords only and count 0."""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import gpusched

MOST_POSITIONAL = 5
PACKAGE = Path(gpusched.__file__).parent


@dataclass(frozen=True, kw_only=True)
class _Class:
    module: str
    name: str
    bases: tuple[str, ...]
    init: int | None
    """Positional parameters of its own ``__init__``; ``None`` when it writes none."""
    fields: int | None
    """Positional ``__init__`` fields it declares as a dataclass or NamedTuple; ``None`` when
    it is neither (or a dataclass with ``init=False``)."""


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Call):
        return _name(node.func)
    if isinstance(node, ast.Subscript):
        return _name(node.value)
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.split("[", 1)[0].rsplit(".", 1)[-1]
    return ""


def _flag(call: ast.expr, keyword: str) -> bool | None:
    if isinstance(call, ast.Call):
        for item in call.keywords:
            if item.arg == keyword and isinstance(item.value, ast.Constant):
                return bool(item.value.value)
    return None


def _positional_fields(node: ast.ClassDef, keyword_only: bool) -> int:
    count = 0
    for item in node.body:
        if not isinstance(item, ast.AnnAssign) or not isinstance(item.target, ast.Name):
            continue
        kind = _name(item.annotation)
        if kind == "KW_ONLY":
            keyword_only = True
        elif kind != "ClassVar" and item.value is not None and _name(item.value) == "field":
            init, only = _flag(item.value, "init"), _flag(item.value, "kw_only")
            count += init is not False and not (keyword_only if only is None else only)
        elif kind != "ClassVar":
            count += not keyword_only
    return count


def _classes(module: str, source: str) -> Iterator[_Class]:
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef):
            continue
        init = None
        for item in node.body:
            if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                init = len(item.args.posonlyargs) + len(item.args.args) - 1
        bases = tuple(_name(base) for base in node.bases)
        fields = None
        decorator = next((d for d in node.decorator_list if _name(d) == "dataclass"), None)
        if decorator is not None and _flag(decorator, "init") is not False:
            fields = _positional_fields(node, _flag(decorator, "kw_only") is True)
        elif "NamedTuple" in bases:
            fields = _positional_fields(node, keyword_only=False)
        yield _Class(module=module, name=node.name, bases=bases, init=init, fields=fields)


def positional_constructors(
    sources: Mapping[str, str], most: int = MOST_POSITIONAL
) -> dict[str, list[str]]:
    """Module → ``Class(n)`` for each class built with more than ``most`` arguments by
    position. A base is looked up by name in its own module first, then in the others."""
    found = [c for module, source in sources.items() for c in _classes(module, source)]
    by_name: dict[str, list[_Class]] = {}
    for c in found:
        by_name.setdefault(c.name, []).append(c)

    def base(of: _Class, name: str) -> _Class | None:
        candidates = by_name.get(name, [])
        local = [c for c in candidates if c.module == of.module]
        return (local or candidates or [None])[0]

    def dataclass_fields(c: _Class) -> int:
        inherited = (base(c, name) for name in c.bases)
        return sum(dataclass_fields(b) for b in inherited if b and b.fields is not None) + (
            c.fields or 0
        )

    def positional(c: _Class) -> int:
        if c.init is not None:
            return c.init
        if c.fields is not None:
            return c.fields if "NamedTuple" in c.bases else dataclass_fields(c)
        first = next((b for name in c.bases if (b := base(c, name))), None)
        return positional(first) if first else 0

    wide: dict[str, list[str]] = {}
    for c in found:
        if (n := positional(c)) > most:
            wide.setdefault(c.module, []).append(f"{c.name}({n})")
    return wide


def _one(source: str) -> list[str]:
    return positional_constructors({"case": source}).get("case", [])


def test_the_check_finds_a_constructor_taking_six_arguments_by_position() -> None:
    source = """
class Wide:
    def __init__(self, a, b, c, d, e, f): ...
class Named:
    def __init__(self, a, b, *, c, d, e, f, g): ...
class Five:
    def __init__(self, a, b, c, d, e): ...
"""
    assert _one(source) == ["Wide(6)"]


def test_the_check_counts_the_fields_a_dataclass_takes_by_position() -> None:
    source = """
@dataclass(frozen=True, slots=True)
class Record:
    a: int
    b: int
    c: int
    d: int
    e: int
    f: int = 0
    TABLE: ClassVar[int] = 3
@dataclass(frozen=True, slots=True, kw_only=True)
class ByName:
    a: int
    b: int
    c: int
    d: int
    e: int
    f: int
@dataclass
class Sentinel:
    a: int
    _: KW_ONLY
    b: int
    c: int
    d: int
    e: int
    f: int
@dataclass(slots=True)
class Derived:
    a: int
    b: int
    c: int
    d: int
    e: int
    cache: dict = field(init=False, default_factory=dict)
    named: int = field(default=0, kw_only=True)
@dataclass
class Inherits(Derived):
    extra: int = 0
@dataclass(init=False)
class OwnInit:
    a: int
    b: int
    c: int
    d: int
    e: int
    f: int
    def __init__(self, a, *, b, c, d, e, f): ...
class Plain(Record):
    pass
class Tuple(NamedTuple):
    a: int
    b: int
    c: int
    d: int
    e: int
    f: int
"""
    assert _one(source) == ["Record(6)", "Inherits(6)", "Plain(6)", "Tuple(6)"]


def test_no_class_in_the_operator_takes_more_than_five_arguments_by_position() -> None:
    sources = {
        str(path.relative_to(PACKAGE)): path.read_text() for path in sorted(PACKAGE.rglob("*.py"))
    }
    found = positional_constructors(sources)
    assert found == {}, (
        f"make these keyword-only (`*,` after self, or `@dataclass(kw_only=True)`): {found}"
    )

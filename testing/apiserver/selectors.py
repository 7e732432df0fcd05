"""Label and field selectors, parsed once per request and matched per object."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import bad_request

_SET_RE = re.compile(r"^\s*(!?)([^\s!=<>()]+)\s+(in|notin)\s*\(([^)]*)\)\s*$")


@dataclass(frozen=True)
class LabelRequirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!"
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "=":
            return present and value in self.values
        if self.op == "!=":
            return not present or value not in self.values
        if self.op == "in":
            return present and value in self.values
        if self.op == "notin":
            return not present or value not in self.values
        if self.op == "exists":
            return present
        return not present  # "!"


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside parentheses (set-based values)."""
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [part.strip() for part in parts if part.strip()]


def parse_label_selector(text: str | None) -> tuple[LabelRequirement, ...]:
    if not text:
        return ()
    requirements: list[LabelRequirement] = []
    for part in _split_top_level(text):
        match = _SET_RE.match(part)
        if match:
            if match.group(1):
                raise bad_request(f"invalid label selector: {part!r}")
            values = frozenset(v.strip() for v in match.group(4).split(",") if v.strip())
            requirements.append(LabelRequirement(match.group(2), match.group(3), values))
        elif "!=" in part:
            key, value = part.split("!=", 1)
            requirements.append(LabelRequirement(key.strip(), "!=", frozenset({value.strip()})))
        elif "==" in part or "=" in part:
            key, value = part.split("==", 1) if "==" in part else part.split("=", 1)
            requirements.append(LabelRequirement(key.strip(), "=", frozenset({value.strip()})))
        elif part.startswith("!"):
            requirements.append(LabelRequirement(part[1:].strip(), "!"))
        elif re.fullmatch(r"[A-Za-z0-9_./-]+", part):
            requirements.append(LabelRequirement(part, "exists"))
        else:
            raise bad_request(f"invalid label selector: {part!r}")
    return tuple(requirements)


@dataclass(frozen=True)
class FieldRequirement:
    path: tuple[str, ...]
    equal: bool
    value: str

    def matches(self, obj: Mapping[str, Any]) -> bool:
        current: Any = obj
        for step in self.path:
            current = current.get(step) if isinstance(current, Mapping) else None
        if current is None:
            actual = ""
        elif isinstance(current, bool):
            actual = "true" if current else "false"
        else:
            actual = str(current)
        return (actual == self.value) == self.equal


def parse_field_selector(
    text: str | None, allowed: tuple[str, ...] | None = None
) -> tuple[FieldRequirement, ...]:
    """Parse `a=b,c!=d`; `allowed` (if given) are the field paths besides metadata.*."""
    if not text:
        return ()
    requirements: list[FieldRequirement] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if "!=" in part:
            key, value = part.split("!=", 1)
            equal = False
        elif "==" in part:
            key, value = part.split("==", 1)
            equal = True
        elif "=" in part:
            key, value = part.split("=", 1)
            equal = True
        else:
            raise bad_request(f"invalid field selector: {part!r}")
        key = key.strip()
        if allowed is not None and key not in ("metadata.name", "metadata.namespace", *allowed):
            raise bad_request(f'field label not supported: "{key}"')
        requirements.append(FieldRequirement(tuple(key.split(".")), equal, value.strip()))
    return tuple(requirements)


@dataclass(frozen=True)
class Selector:
    """A parsed labelSelector + fieldSelector pair."""

    labels: tuple[LabelRequirement, ...] = ()
    fields: tuple[FieldRequirement, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.labels or self.fields)

    def matches(self, obj: Mapping[str, Any]) -> bool:
        if self.labels:
            labels = obj.get("metadata", {}).get("labels") or {}
            if not all(req.matches(labels) for req in self.labels):
                return False
        return all(req.matches(obj) for req in self.fields)

    @classmethod
    def parse(
        cls,
        label_selector: str | None,
        field_selector: str | None,
        allowed_fields: tuple[str, ...] | None = None,
    ) -> Selector:
        return cls(
            parse_label_selector(label_selector),
            parse_field_selector(field_selector, allowed_fields),
        )


def compile_matcher(selector: Selector) -> Callable[[Mapping[str, Any]], bool]:
    """A fast matcher: `lambda obj: True` for the empty selector."""
    if not selector:
        return lambda obj: True
    return selector.matches

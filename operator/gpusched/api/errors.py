"""One error type for bad input, always naming the object and the field, and the one way to
turn a pydantic `ValidationError` into it."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from pydantic import ValidationError
from pydantic_core import ErrorDetails, PydanticCustomError


class InvalidObjectError(ValueError):
    """An object from outside (a YAML document, an annotation, a CR) is malformed.

    ``obj`` names the object (``PodGroup default/train``), ``field`` the path of the offending
    field as the user wrote it (``spec.compositePodGroupTemplates[0].podGroupTemplates[1].name``).
    """

    def __init__(self, obj: str, field: str, message: str) -> None:
        self.obj = obj
        self.field = field
        self.message = message
        super().__init__(f"{obj}: {field}: {message}" if field else f"{obj}: {message}")


_PLAIN_KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def field_error(message: str, *subpath: str | int) -> PydanticCustomError:
    """A validation error for ``subpath`` below where pydantic reports it.

    Pydantic locates an error raised by a model or container validator at that model; the
    subpath (carried in the error's context) lets the final message name the exact field, e.g.
    ``resources.requests[nvidia.com/gpu]`` instead of ``resources``.
    """
    return PydanticCustomError("field", "{message}", {"message": message, "subpath": subpath})


def format_field_path(parts: Iterable[str | int]) -> str:
    """``("spec", "containers", 0, "resources", "requests", "nvidia.com/gpu")`` →
    ``spec.containers[0].resources.requests[nvidia.com/gpu]``: list indices and keys that are
    not plain names (labels, annotations, resource names) go in brackets."""
    path = ""
    for part in parts:
        if isinstance(part, str) and _PLAIN_KEY_RE.fullmatch(part):
            path = f"{path}.{part}" if path else part
        else:
            path += f"[{part}]"
    return path


def _importance(error: ErrorDetails) -> int:
    """Which of several errors to report, lowest first. A wrong apiVersion or kind makes every
    other error noise. An unknown field beats the rest because a typo (``minCont``) also makes
    the intended field missing, and the typo is what the user needs to see."""
    if error["loc"] in (("apiVersion",), ("kind",)):
        return 0
    if error["type"] == "extra_forbidden":
        return 1
    return 2


def _message(error: ErrorDetails) -> str:
    """Pydantic's message, minus its "Value error, " prefix, plainer for unknown fields."""
    if error["type"] == "extra_forbidden":
        return "unknown field"
    cause = error.get("ctx", {}).get("error")
    if error["type"] == "value_error" and cause is not None:
        return str(cause)
    return error["msg"]


def from_validation_error(
    obj: str, error: ValidationError, prefix: Iterable[str | int] = ()
) -> InvalidObjectError:
    """The most useful pydantic error as an `InvalidObjectError` naming the exact field.

    ``prefix`` is prepended to the path, for values validated apart from their object (an
    annotation's JSON)."""
    first = min(error.errors(include_url=False), key=_importance)  # stable among equals
    loc, message = list(first["loc"]), _message(first)
    if loc and loc[-1] == "[key]":  # pydantic's marker for a bad dictionary key
        loc, message = loc[:-1], f"key: {message}"
    subpath = first.get("ctx", {}).get("subpath", ())
    return InvalidObjectError(obj, format_field_path([*prefix, *loc, *subpath]), message)


def every_error(
    obj: str,
    error: ValidationError,
    suggest: Callable[[tuple[str | int, ...]], str | None] = lambda loc: None,
) -> InvalidObjectError:
    """All of a validation's errors in one `InvalidObjectError` (a configuration file is fixed
    in one go, not one error per restart), in the order of the fields; ``suggest(loc)``: the
    known field closest to an unknown one at ``loc``, for "did you mean"."""
    parts: list[tuple[str, str]] = []
    for detail in sorted(error.errors(include_url=False), key=lambda e: str(e["loc"])):
        loc = tuple(detail["loc"])
        message = _message(detail)
        if detail["type"] == "extra_forbidden" and (close := suggest(loc)) is not None:
            message += f" (did you mean {close}?)"
        subpath = detail.get("ctx", {}).get("subpath", ())
        parts.append((format_field_path([*loc, *subpath]), message))
    (field, message), rest = parts[0], parts[1:]
    if rest:
        others = "; ".join(f"{f}: {m}" if f else m for f, m in rest)
        message = f"{message}; {others} ({len(parts)} errors)"
    return InvalidObjectError(obj, field, message)

"""One error type for bad input, always naming the object and the field."""

from __future__ import annotations

from pydantic import ValidationError


class InvalidObjectError(ValueError):
    """An object from outside (a YAML document, an annotation, a CR) is malformed.

    ``obj`` names the object (``PodGroup default/train``), ``field`` the dotted path of the
    offending field (``spec.schedulingPolicy.gang.minCount``).
    """

    def __init__(self, obj: str, field: str, message: str) -> None:
        self.obj = obj
        self.field = field
        self.message = message
        super().__init__(f"{obj}: {field}: {message}" if field else f"{obj}: {message}")


def from_validation_error(obj: str, error: ValidationError, prefix: str = "") -> InvalidObjectError:
    """Turns pydantic's first error into an `InvalidObjectError` with a dotted field path."""
    first = error.errors()[0]
    path = ".".join(str(part) for part in first["loc"])
    if prefix:
        path = f"{prefix}.{path}" if path else prefix
    return InvalidObjectError(obj, path, first["msg"])

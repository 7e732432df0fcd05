"""Kubernetes resource quantities, as ``k8s.io/apimachinery/pkg/api/resource`` reads them.

CPU is counted in millicores, memory-like resources in bytes, everything else (``pods``,
``nvidia.com/gpu``, other extended resources) in whole units. Fractions round up, as
``Quantity.MilliValue`` and ``Quantity.Value`` do, so a request is never under-counted.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from decimal import Decimal
from fractions import Fraction
from typing import Annotated

from pydantic import AfterValidator, PlainValidator
from pydantic_core import PydanticCustomError

from gpusched.api.errors import field_error

MAX_QUANTITY_CHARS = 128
"""Longer quantity strings are refused unread: no real request needs them, and a 10,000-digit
number would cost real time to convert."""
INT64_MAX = 2**63 - 1
"""Quantities are int64 in Kubernetes; larger values cannot come from a real cluster."""


_QUANTITY_RE = re.compile(
    r"(?P<sign>[+-]?)(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<exponent>[eE][+-]?[0-9]+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?"
)
_SUFFIX_SCALE: dict[str, Fraction] = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}
_MAX_EXPONENT = 400
"""Beyond ±400 the exponent only decides "too large" or "rounds up to 1"; clamping it keeps a
string like ``1e999999999`` from allocating a billion-digit integer."""

_BYTE_RESOURCES = frozenset({"memory", "ephemeral-storage", "storage"})
_INT64_RE = re.compile(r"[+-]?[0-9]{1,19}")


def _quantity_value(value: str | int | float) -> Fraction:
    """The exact value of a quantity, before any unit or rounding is applied."""
    if isinstance(value, bool):
        raise ValueError(f"must be a quantity, got the boolean {value}")
    if isinstance(value, int):
        number = Fraction(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"must be a finite quantity, got {value}")
        number = Fraction(Decimal(repr(value)))
    elif isinstance(value, str):
        number = _parse_quantity_string(value)
    else:
        raise ValueError(f"must be a quantity string or number, got {type(value).__name__}")
    if number < 0:
        raise ValueError(f"must not be negative, got {shown(value)}")
    return number


@functools.lru_cache(maxsize=4096)
def _parse_quantity_string(text: str) -> Fraction:
    """Kubernetes' quantity grammar: a decimal number then a binary-SI (``Ki``..``Ei``),
    decimal-SI (``n u m k M G T P E``) or exponent (``e3``, ``E-2``) suffix, nothing else.
    Surrounding spaces are dropped, as ``Quantity.UnmarshalJSON`` does. Cached: a cluster
    writes a few hundred distinct quantities, and building each `Fraction` again was a fifth
    of a new leader's CPU while it parsed the pods of a 15,000-pod cluster."""
    if len(text) > MAX_QUANTITY_CHARS:
        raise ValueError(f"quantity longer than {MAX_QUANTITY_CHARS} characters")
    match = _QUANTITY_RE.fullmatch(text.strip())
    if match is None:
        raise ValueError(
            f"{shown(text)} is not a quantity (want e.g. '500m', '2', '4Gi', '1G', '129e6')"
        )
    number = Fraction(match["number"])
    if match["sign"] == "-":
        number = -number
    if match["exponent"] is not None:
        return number * _power_of_ten(int(match["exponent"][1:]), number)
    return number * _SUFFIX_SCALE[match["suffix"] or ""]


def _power_of_ten(exponent: int, number: Fraction) -> Fraction:
    if exponent > _MAX_EXPONENT and number != 0:
        raise ValueError(f"exponent {exponent} is far too large")
    return Fraction(10) ** max(-_MAX_EXPONENT, min(exponent, _MAX_EXPONENT))


def _to_int64(value: Fraction, original: str | int | float) -> int:
    """Rounds up (``Quantity.Value`` semantics) and refuses what does not fit an int64."""
    result = math.ceil(value)
    if result > INT64_MAX:
        raise ValueError(f"{shown(original)} is too large (more than 2^63-1)")
    return result


def parse_cpu_milli(value: str | int | float) -> int:
    """CPU quantity in millicores: ``"500m"`` → 500, ``"2"`` → 2000, ``1.5`` → 1500.

    Like ``Quantity.MilliValue``, a fraction of a millicore rounds up (``"0.0001"`` → 1).
    Raises ``ValueError`` on anything Kubernetes would not accept, or a negative value.
    """
    return _to_int64(_quantity_value(value) * 1000, value)


def parse_bytes(value: str | int | float) -> int:
    """Memory-like quantity in bytes: ``"4Gi"``, ``"1G"``, ``"129e6"``, ``"1.5Gi"``, ``128974848``.

    Fractions of a byte round up (``"100m"`` → 1), as ``Quantity.Value`` does.
    Raises ``ValueError`` on anything Kubernetes would not accept, or a negative value.
    """
    return _to_int64(_quantity_value(value), value)


def parse_count(value: str | int | float) -> int:
    """Whole-unit quantity (``pods``, ``nvidia.com/gpu``): the API server refuses fractions of
    extended resources (``"0.5"``, ``"500m"``), so do we, with ``ValueError``. ``"2000m"`` is 2."""
    number = _quantity_value(value)
    if number.denominator != 1:
        raise ValueError(f"must be a whole number, got {shown(value)}")
    return _to_int64(number, value)


def is_byte_resource(name: str) -> bool:
    """Resources Kubernetes measures in bytes: memory, storage and every ``hugepages-<size>``."""
    return name in _BYTE_RESOURCES or name.startswith("hugepages-")


def parse_quantity(name: str, value: str | int | float) -> int:
    """The canonical integer of resource ``name``: millicores for ``cpu``, bytes for memory-like
    resources, a whole count for everything else. Raises ``ValueError``."""
    if name == "cpu":
        return parse_cpu_milli(value)
    if is_byte_resource(name):
        return parse_bytes(value)
    return parse_count(value)


def parse_int64(text: str) -> int | None:
    """Go's ``strconv.ParseInt(text, 10, 64)``: no spaces, no underscores, in range."""
    if _INT64_RE.fullmatch(text) is None:
        return None
    number = int(text)
    return number if -(2**63) <= number <= INT64_MAX else None


def shown(value: object, limit: int = 60) -> str:
    """A value for an error message, cut short: errors must stay readable whatever the input."""
    if isinstance(value, int) and value.bit_length() > 200:
        return f"a {value.bit_length()}-bit integer"  # repr() of a huge int is slow or refused
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}...'"


def _quantity_input(value: object) -> str | int | float:
    """Accepts exactly what YAML or JSON can hold for a quantity (no booleans, no lists)."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise PydanticCustomError(
            "quantity_type",
            "must be a quantity string or number, got {type}",
            {"type": type(value).__name__},
        )
    return value


def _check_resource_list(resources: dict[str, str | int | float]) -> dict[str, str | int | float]:
    """Parses every entry with its unit, so bad quantities fail at parse time, naming the key."""
    for name, value in resources.items():
        if not name:
            raise field_error("resource names must not be empty")
        try:
            parse_quantity(name, value)
        except ValueError as err:
            raise field_error(str(err), name) from None
    return resources


QuantityValue = Annotated[str | int | float, PlainValidator(_quantity_input)]
ResourceList = Annotated[dict[str, QuantityValue], AfterValidator(_check_resource_list)]
"""A ``ResourceList`` as written (``{"cpu": "500m", "nvidia.com/gpu": 2}``), validated."""


def parse_resource_list(resources: Mapping[str, str | int | float]) -> dict[str, int]:
    """Every entry in its canonical unit (see `parse_quantity`)."""
    return {name: parse_quantity(name, value) for name, value in resources.items()}

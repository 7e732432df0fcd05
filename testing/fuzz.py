"""Shared strategies for the fuzz tests (tests/unit/api/test_fuzz_objects.py and
tests/unit/telemetry/test_fuzz_telemetry.py): arbitrary JSON, and valid objects with one field
replaced by arbitrary JSON at a random path.

``GPUSCHED_FUZZ_SCALE`` multiplies every test's ``max_examples`` (default 1: the whole fuzz
set tries about 10,000 cases in well under 30 s; ``GPUSCHED_FUZZ_SCALE=10`` for a long run).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

SCALE = float(os.environ.get("GPUSCHED_FUZZ_SCALE", "1"))

Path = tuple[str | int, ...]

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=30)
    | st.sampled_from(["", "0", "-1", "1e9", "1Ki", "nan", "8", "NV12", "X", "SYS", "gpusched"])
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)


def fuzz_settings(examples: int) -> Any:
    """``settings`` for one fuzz test: ``examples`` cases (times the scale), no deadline."""
    return settings(
        max_examples=max(1, int(examples * SCALE)),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def paths(value: Any, prefix: Path = ()) -> Iterator[Path]:
    """Every path into ``value`` (the root included), to replace what is there."""
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from paths(item, (*prefix, index))


def replaced(value: Any, path: Path, new: Any) -> Any:
    """A copy of ``value`` with ``new`` at ``path``."""
    if not path:
        return copy.deepcopy(new)
    out = copy.deepcopy(value)
    target = out
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = copy.deepcopy(new)
    return out


def mutants(seeds: list[Any]) -> st.SearchStrategy[Any]:
    """One of ``seeds`` with one of its fields (or a whole subtree) replaced by arbitrary
    JSON, or a key dropped."""

    @st.composite
    def draw(data: st.DrawFn) -> Any:
        seed = data(st.sampled_from(seeds))
        path = data(st.sampled_from(list(paths(seed))))
        if path and data(st.booleans()) and isinstance(_at(seed, path[:-1]), dict):
            out = copy.deepcopy(seed)
            del _at(out, path[:-1])[path[-1]]
            return out
        return replaced(seed, path, data(json_values))

    return draw()


def _at(value: Any, path: Path) -> Any:
    for part in path:
        value = value[part]
    return value

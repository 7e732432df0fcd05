"""No property test depends on the machine's speed: every one runs without Hypothesis's
deadline and with its ``too_slow`` health check off (`tests/conftest.py`), whatever settings it
declares itself. Checked by reading each test's effective settings, not by timing anything."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator
from typing import Any

from hypothesis import HealthCheck, settings

import tests.unit


def property_tests() -> Iterator[tuple[str, Any]]:
    for module in pkgutil.walk_packages(tests.unit.__path__, "tests.unit."):
        if module.ispkg:
            continue
        loaded = importlib.import_module(module.name)
        for name, value in vars(loaded).items():
            if name.startswith("test_") and hasattr(value, "hypothesis"):
                yield f"{module.name}.{name}", value


def test_there_are_property_tests_to_check() -> None:
    assert len(list(property_tests())) > 10


def test_no_property_test_has_a_deadline_or_a_too_slow_health_check() -> None:
    speed_bound = []
    for name, test in property_tests():
        effective: settings = test._hypothesis_internal_use_settings
        if effective.deadline is not None:
            speed_bound.append(f"{name}: deadline {effective.deadline}")
        if HealthCheck.too_slow not in effective.suppress_health_check:
            speed_bound.append(f"{name}: too_slow health check on")
    assert speed_bound == [], "\n".join(speed_bound)

"""Settings every test shares.

Hypothesis: no test may depend on the machine's speed. Its ``deadline`` (200 ms a case by
default) and its ``too_slow`` health check (input generation over about a second) both fail a
correct test on a loaded 2-core machine, so the default profile turns both off for every
property test; tests that set their own ``settings`` inherit it. ``HYPOTHESIS_PROFILE`` picks
another registered profile.

Figures: tests marked ``figures`` measure (a benchmark run through pytest, for its fixtures);
they are left out of the suite and run by the benchmark that names them (``bench/dra.py``
sets ``GPUSCHED_FIGURES=1``). Left out, not skipped: they never count as passing.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("gpusched", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "gpusched"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("GPUSCHED_FIGURES") == "1":
        return
    figures = [item for item in items if item.get_closest_marker("figures") is not None]
    if figures:
        config.hook.pytest_deselected(items=figures)
        items[:] = [item for item in items if item.get_closest_marker("figures") is None]

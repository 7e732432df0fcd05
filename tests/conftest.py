"""Settings every test shares.

Hypothesis: no test may depend on the machine's speed. Its ``deadline`` (200 ms a case by
default) and its ``too_slow`` health check (input generation over about a second) both fail a
correct test on a loaded 2-core machine, so the default profile turns both off for every
property test; tests that set their own ``settings`` inherit it. ``HYPOTHESIS_PROFILE`` picks
another registered profile.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile("gpusched", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "gpusched"))

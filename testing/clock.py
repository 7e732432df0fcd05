"""The one virtual clock: services and electors take it where they would read time.monotonic
and sleep, and the date (`Clock.wall`) where they compare with the API server's timestamps."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

WALL_START = datetime(2026, 12, 1, tzinfo=UTC)
"""The date every test clock starts at, and the creation time of the fixtures' objects
(`testing.manifests.NOW`): a run slower than a gang's schedule timeout changes nothing,
because no test reads the machine's date."""


class Clock:
    """Stands still until a test moves it: ``clock.now += 30`` is half a minute later, on
    the monotonic reading and on the date alike."""

    def __init__(self, now: float = 1000.0, wall: datetime = WALL_START) -> None:
        self.now = now
        self._start = now
        self._wall_start = wall

    def __call__(self) -> float:
        return self.now

    def wall(self) -> datetime:
        return self._wall_start + timedelta(seconds=self.now - self._start)

    async def sleep(self, seconds: float) -> None:
        """Time passes at once: nothing waits for it."""
        self.now += seconds
        await asyncio.sleep(0)

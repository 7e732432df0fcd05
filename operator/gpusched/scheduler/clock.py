"""The service's time: what the moment is, and how to wait for a later one.

Every collaborator of the service reads time and sleeps through one `Clock`, so that tests
drive time with a fake one instead of patching `asyncio.sleep` for the whole process."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def __call__(self) -> float:
        """Now, in seconds, on a clock that never goes back (only differences mean anything)."""

    def wall(self) -> datetime:
        """Now as a date (UTC), for what is compared with the API server's timestamps (a
        pod's ``creationTimestamp`` against its group's schedule timeout) or written beside
        them (a condition's ``lastTransitionTime``). A test's clock moves it with the rest."""

    async def sleep(self, seconds: float) -> None:
        """Returns ``seconds`` later on this clock."""


class MonotonicClock:
    """The process's monotonic clock, the system's date, and the event loop's sleep."""

    def __call__(self) -> float:
        return time.monotonic()

    def wall(self) -> datetime:
        return datetime.now(UTC)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


MONOTONIC = MonotonicClock()

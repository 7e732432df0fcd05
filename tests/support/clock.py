"""The one virtual clock: services and electors take it where they would read time.monotonic
and sleep."""

from __future__ import annotations

import asyncio


class Clock:
    """Stands still until a test moves it: ``clock.now += 30`` is half a minute later."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        """Time passes at once: nothing waits for it."""
        self.now += seconds
        await asyncio.sleep(0)

"""The work the service runs beside its loop, and the signal that wakes the loop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any

from gpusched.scheduler.clock import Clock


class Background:
    """Tasks the service owns (binds, reads back, creates, resyncs), and the loop's wake-up."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._tasks: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Runs ``work`` as a task the service owns (awaited by `settle`, cancelled at exit)."""
        task: asyncio.Task[None] = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @property
    def running(self) -> list[asyncio.Task[None]]:
        return list(self._tasks)

    async def settle(self) -> None:
        """Waits for the tasks running now, and for those they start."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def cancel(self) -> None:
        """Cancels every task and waits for them to end (at shutdown)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def wake(self) -> None:
        """Something changed: the loop runs a cycle soon."""
        self._wake.set()

    async def wait(self, seconds: float) -> None:
        """Returns when woken, or ``seconds`` later on the clock, whichever comes first; and
        takes the wake-up (the next `wait` waits again)."""
        if seconds > 0 and not self._wake.is_set():
            woken = asyncio.ensure_future(self._wake.wait())
            timer = asyncio.ensure_future(self.clock.sleep(seconds))
            try:
                await asyncio.wait([woken, timer], return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiter in (woken, timer):
                    waiter.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await waiter
        self._wake.clear()

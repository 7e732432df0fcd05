"""The first telemetry read of a term: no pod is placed on a guess about GPU health.

A replica that starts, or takes the Lease over, finds its backlog waiting: every pod that was
pending meanwhile is placed in its first cycles. Those decisions must see the telemetry joined
with the node list just read, or every GPU would be unknown and, under ``stale: usable``,
a hot or failing GPU would take a pod. So leading waits for that read (`FirstRead.wait`),
bounded by ``telemetry.firstReadWaitSeconds``; past the bound it decides as it does when
Prometheus is down: what ``telemetry.stale`` says of GPUs without telemetry."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from gpusched.scheduler.clock import Clock

logger = logging.getLogger(__name__)

Join = Callable[[], Awaitable[bool]]
"""Makes the telemetry joined with the nodes known now; True once it is (see
`gpusched.telemetry.cache.TelemetryCache.join`)."""


class FirstRead:
    """``join``: None without a telemetry source (nothing to wait for)."""

    def __init__(self, join: Join | None, wait_seconds: float, clock: Clock) -> None:
        self.join = join
        self.wait_seconds = wait_seconds
        self.clock = clock
        self.waited: float | None = None
        """How long the last `wait` took (our clock); None before the first."""
        self._joining: asyncio.Future[bool] | None = None
        self._joined_at = 0.0

    async def wait(self) -> bool:
        """Returns once the telemetry is joined with the nodes known now, or once
        ``wait_seconds`` have passed; whether it is joined. The read goes on past the bound,
        and its data serves the cycles once it is in."""
        if self.join is None:
            return True
        started = self.clock()
        joining = self._joining
        if joining is None or joining.done():
            joining = self._joining = asyncio.ensure_future(self._timed(self.join))
        bound: asyncio.Future[Any] = asyncio.ensure_future(self.clock.sleep(self.wait_seconds))
        either: set[asyncio.Future[Any]] = {joining, bound}
        try:
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        finally:
            bound.cancel()
        joined = joining.done() and not joining.cancelled() and joining.exception() is None
        joined = joined and joining.result()
        self.waited = (self._joined_at if joined else self.clock()) - started
        if joined:
            logger.info("telemetry read and joined with the node list in %.3f s", self.waited)
        else:
            logger.warning(
                "telemetry not read within %.1f s (telemetry.firstReadWaitSeconds): GPUs "
                "without telemetry count as telemetry.stale says until it is",
                self.wait_seconds,
            )
        return joined

    async def _timed(self, join: Join) -> bool:
        """``join``, noting when it returned (on our clock)."""
        joined = await join()
        self._joined_at = self.clock()
        return joined

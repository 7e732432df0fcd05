"""Status patches, coalesced and sent in the background.

The scheduling loop offers the status it computed for every object each cycle; only a status
that differs from what the object already shows is sent, and while a patch is in flight a newer
offer for the same object replaces the older one, so a slow API server sees one patch per
object with the latest truth rather than a queue of stale ones.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from gpusched.scheduler.ports import ApiError, ClusterApi, FencedError, ObjectRef

logger = logging.getLogger(__name__)

UNKNOWN = ""
"""The signature of a status whose patch failed: matches no status, so the next is sent."""
RETRY_SECONDS = 2.0
"""Delay before a failed status patch is retried (the next offer usually supersedes it)."""


def signature(status: Mapping[str, Any]) -> str:
    """What a status says, without the time of the latest attempt: a retry that failed the
    same way again is not news (it is refreshed every ``statusRefreshSeconds``)."""
    trimmed = dict(status)
    last = trimmed.get("lastAttempt")
    if isinstance(last, dict):
        trimmed["lastAttempt"] = {k: v for k, v in last.items() if k != "time"}
    return json.dumps(trimmed, sort_keys=True, default=str)


class StatusOutbox:
    def __init__(
        self,
        api: ClusterApi,
        refresh_seconds: float,
        clock: Callable[[], float],
        concurrency: int = 8,
    ) -> None:
        self.api = api
        self.refresh_seconds = refresh_seconds
        self.clock = clock
        self._pending: dict[tuple[str, str], tuple[ObjectRef, dict[str, Any], str]] = {}
        self._sent: dict[tuple[str, str], tuple[str, float]] = {}
        self._offered: dict[tuple[str, str], dict[str, Any]] = {}
        self._wake = asyncio.Event()
        self._slots = asyncio.Semaphore(concurrency)
        self.in_flight = 0
        self._epoch = 0
        """Bumped by `reset`: a retry planned before it is dropped, never sent in a later
        term with what was true in an earlier one."""
        self._trust_current = True
        """Whether an object's watched status may stand for what it shows now. Not after a
        leadership change: our watch may lag behind what the other leader wrote."""

    def offer(self, ref: ObjectRef, status: dict[str, Any], current: Mapping[str, Any]) -> None:
        """Queues ``status`` for ``ref`` unless the object (or our last patch) already says it."""
        key = (ref.kind, ref.key)
        self._offered[key] = status
        sig = signature(status)
        now = self.clock()
        sent = self._sent.get(key)
        if sent is None:
            if self._trust_current and signature(current) == sig:
                self._sent[key] = (sig, now)
                return
        elif sent[0] == sig and now - sent[1] < self.refresh_seconds:
            return
        self._pending[key] = (ref, status, sig)
        self._wake.set()

    def last(self, ref: ObjectRef) -> dict[str, Any] | None:
        """The status last offered for ``ref``: what the object says, or will say once the
        patch lands (a watch may not have shown our own patch yet)."""
        return self._offered.get((ref.kind, ref.key))

    def forget(self, ref: ObjectRef) -> None:
        key = (ref.kind, ref.key)
        self._offered.pop(key, None)
        self._sent.pop(key, None)
        self._pending.pop(key, None)

    def reset(self) -> None:
        """Forgets what was offered and sent, and drops what waits: while this replica does
        not lead, another one writes these statuses, so our memory of them says nothing
        about what the objects show when we lead again."""
        self._offered.clear()
        self._sent.clear()
        self._pending.clear()
        self._epoch += 1
        self._trust_current = False

    @property
    def idle(self) -> bool:
        return not self._pending and not self.in_flight

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            await self.flush()

    async def flush(self) -> None:
        """Sends every status offered so far."""
        self._wake.clear()
        batch, self._pending = self._pending, {}
        await asyncio.gather(*(self._send(key, *item) for key, item in batch.items()))

    async def _send(
        self, key: tuple[str, str], ref: ObjectRef, status: dict[str, Any], sig: str
    ) -> None:
        async with self._slots:
            self.in_flight += 1
            epoch = self._epoch
            try:
                await self.api.patch_status(ref, status)
            except FencedError:
                self._sent.pop(key, None)  # not sent; the next leader writes its own
                return
            except ApiError as error:
                if error.status == 404:
                    self._sent.pop(key, None)
                    return
                logger.warning("cannot patch status of %s %s: %s", ref.kind, ref.key, error)
                # Unknown now (a patch without an answer may have landed), and the watch may
                # still show an older status: send the next offer whatever they say.
                self._sent[key] = (UNKNOWN, float("-inf"))
                asyncio.get_running_loop().call_later(
                    RETRY_SECONDS, self._retry, key, ref, status, sig, epoch
                )
                return
            finally:
                self.in_flight -= 1
        self._sent[key] = (sig, self.clock())

    def _retry(
        self,
        key: tuple[str, str],
        ref: ObjectRef,
        status: dict[str, Any],
        sig: str,
        epoch: int,
    ) -> None:
        if epoch != self._epoch:
            return  # planned in an earlier term
        # A newer offer made meanwhile wins over this stale one.
        self._pending.setdefault(key, (ref, status, sig))
        self._wake.set()

"""Kubernetes Events, aggregated as kube-scheduler's are: one Event per object, reason and
message, whose ``count`` grows while the same thing keeps happening — not one per retry.

`EventRecorder.record` never waits for the API server: the scheduling loop must not slow down
because Events are slow, so Events go out from a background task, oldest first, and a full
queue drops the newest with a log line (an Event is information, never state).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gpusched.scheduler.ports import ApiError, ClusterApi, FencedError, ObjectRef

logger = logging.getLogger(__name__)

COMPONENT = "gpusched"
MAX_SERIES = 10_000
"""Aggregation keys remembered; the least recently used are forgotten beyond this."""
MAX_QUEUED = 5_000
MAX_MESSAGE = 1024
"""Event messages are cut here, as the API server would reject very long ones."""


@dataclass(slots=True)
class _Series:
    name: str | None
    count: int
    first: datetime
    sent_at: float
    sent_count: int


@dataclass(frozen=True, slots=True)
class _Outgoing:
    key: tuple[str, str, str, str]
    obj: ObjectRef
    type: str
    reason: str
    message: str


class EventRecorder:
    def __init__(
        self,
        api: ClusterApi,
        refresh_seconds: float,
        clock: Callable[[], float],
        instance: str = COMPONENT,
    ) -> None:
        self.api = api
        self.refresh_seconds = refresh_seconds
        self.clock = clock
        self.instance = instance
        self._series: OrderedDict[tuple[str, str, str, str], _Series] = OrderedDict()
        self._by_object: dict[str, set[tuple[str, str, str, str]]] = {}
        """Series keys per object, so that forgetting a deleted pod does not scan them all."""
        self._queue: asyncio.Queue[_Outgoing] = asyncio.Queue(MAX_QUEUED)

    def record(self, obj: ObjectRef, type_: str, reason: str, message: str) -> None:
        """Notes that ``reason``/``message`` happened (again) to ``obj``."""
        message = message[:MAX_MESSAGE]
        key = (obj.uid or obj.key, obj.kind, reason, message)
        series = self._series.get(key)
        now = self.clock()
        if series is not None:
            series.count += 1
            self._series.move_to_end(key)
            if now - series.sent_at < self.refresh_seconds:
                return
        else:
            self._series[key] = _Series(None, 1, datetime.now(UTC), now, 0)
            self._by_object.setdefault(key[0], set()).add(key)
            while len(self._series) > MAX_SERIES:
                oldest, _ = self._series.popitem(last=False)
                self._unindex(oldest)
        self._series[key].sent_at = now
        try:
            self._queue.put_nowait(_Outgoing(key, obj, type_, reason, message))
        except asyncio.QueueFull:
            logger.warning("event queue full; dropped %s %s on %s", reason, message, obj.key)

    async def record_now(self, obj: ObjectRef, type_: str, reason: str, message: str) -> None:
        """`record`, sent at once rather than queued: for an Event about an object that is
        going away (its series is forgotten when it is gone, and a queued Event with it)."""
        message = message[:MAX_MESSAGE]
        key = (obj.uid or obj.key, obj.kind, reason, message)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = _Series(None, 0, datetime.now(UTC), self.clock(), 0)
            self._by_object.setdefault(key[0], set()).add(key)
        series.count += 1
        series.sent_at = self.clock()
        await self._deliver(_Outgoing(key, obj, type_, reason, message))

    def reset(self) -> None:
        """Drops the Events not sent yet: this replica stopped leading, and what it noted in
        its last term is for nobody now (the API client would refuse them anyway)."""
        while not self._queue.empty():
            self._queue.get_nowait()

    def forget(self, uid: str) -> None:
        """Drops the series of a deleted object."""
        for key in self._by_object.pop(uid, ()):
            self._series.pop(key, None)

    def _unindex(self, key: tuple[str, str, str, str]) -> None:
        keys = self._by_object.get(key[0])
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._by_object[key[0]]

    async def run(self) -> None:
        while True:
            await self._deliver(await self._queue.get())

    async def flush(self) -> None:
        """Sends everything queued now (for tests and shutdown)."""
        while not self._queue.empty():
            await self._deliver(self._queue.get_nowait())

    async def _deliver(self, outgoing: _Outgoing) -> None:
        try:
            await self._send(outgoing)
        except FencedError:
            # Not leading (yet): nothing was sent, and nothing should be now. Noted again
            # once this replica leads, it is sent then rather than counted as sent already.
            series = self._series.get(outgoing.key)
            if series is not None and not series.sent_count:
                series.sent_at = float("-inf")
        except ApiError as error:
            logger.warning(
                "cannot post event %s on %s: %s", outgoing.reason, outgoing.obj.key, error
            )

    async def _send(self, out: _Outgoing) -> None:
        series = self._series.get(out.key)
        if series is None:
            return
        stamp = _stamp(datetime.now(UTC))
        if series.name is not None and series.sent_count:
            await self.api.patch_event(
                _event_namespace(out.obj),
                series.name,
                {"count": series.count, "lastTimestamp": stamp},
            )
            series.sent_count = series.count
            return
        body = self._body(out, series, stamp)
        series.name = await self.api.create_event(body)
        series.sent_count = series.count

    def _body(self, out: _Outgoing, series: _Series, stamp: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "generateName": f"{out.obj.name}.",
                "namespace": _event_namespace(out.obj),
            },
            "involvedObject": {
                "apiVersion": out.obj.api_version,
                "kind": out.obj.kind,
                "namespace": out.obj.namespace,
                "name": out.obj.name,
                "uid": out.obj.uid,
            },
            "type": out.type,
            "reason": out.reason,
            "message": out.message,
            "count": series.count,
            "firstTimestamp": _stamp(series.first),
            "lastTimestamp": stamp,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.instance,
        }


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _event_namespace(obj: ObjectRef) -> str:
    """Where an Event about ``obj`` lives: its namespace, or ``default`` for a cluster-scoped
    object (a Node), as Kubernetes' own components keep them."""
    return obj.namespace or "default"

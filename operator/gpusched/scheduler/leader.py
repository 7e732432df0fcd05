"""Leader election on a ``coordination.k8s.io/v1`` Lease, with fencing.

Kopf's peering pauses lower-priority operators but is not a lock: after a failover two
replicas can both act for seconds. Only the Lease holder schedules here, and a holder that
cannot renew stops binding ``renewDeadlineSeconds`` after its last successful renewal — before
``leaseDurationSeconds`` have passed, which is the earliest another replica can take the Lease.

As client-go does, expiry is judged on this replica's own monotonic clock: a Lease whose
holder and renew time have not changed for ``leaseDurationSeconds`` since we first saw them
is expired, whatever the other replica's wall clock said. A lost race (409 on the update) is
simply not leading.

A replica deciding for 5,000 nodes keeps its event loop busy for seconds at a time (decoding
a list, building a snapshot): a renewal waiting behind that work missed its deadline, and a
live leader lost the Lease under load. `LeaderElector.run_in_thread` renews from a thread of
its own, on an event loop of its own, with an HTTP client of its own (`OpenedOnUse`): no
work on the main loop delays it. Python's interpreter lock still switches between the two
threads every few milliseconds, so only a single C call longer than the renew deadline
(none comes near it) could hold a renewal back; a stopped process (SIGSTOP, a paused VM)
stops both threads, and its term ends as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

from gpusched.api.config import LeaderElectionConfig
from gpusched.scheduler import metrics
from gpusched.scheduler.clock import MONOTONIC, Clock
from gpusched.scheduler.ports import ApiError

logger = logging.getLogger(__name__)


class LeaseApi(Protocol):
    async def get_lease(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The Lease, or None when it does not exist."""

    async def create_lease(self, namespace: str, body: Mapping[str, Any]) -> None:
        """Creates the Lease (ApiError 409 when it exists)."""

    async def replace_lease(self, namespace: str, name: str, body: Mapping[str, Any]) -> None:
        """PUTs the Lease; ApiError 409 when ``metadata.resourceVersion`` is stale."""


class ClosingLeaseApi(LeaseApi, Protocol):
    async def close(self) -> None:
        """Closes the HTTP client."""


class OpenedOnUse:
    """A `LeaseApi` whose client is made (``open_api``) on first use, on the event loop of
    that use: an aiohttp session belongs to the loop it was made on, so the Lease thread's
    client must be made there, not by whoever builds the elector."""

    def __init__(self, open_api: Callable[[], ClosingLeaseApi]) -> None:
        self._open = open_api
        self._api: ClosingLeaseApi | None = None

    def _client(self) -> ClosingLeaseApi:
        if self._api is None:
            self._api = self._open()
        return self._api

    async def get_lease(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return await self._client().get_lease(namespace, name)

    async def create_lease(self, namespace: str, body: Mapping[str, Any]) -> None:
        await self._client().create_lease(namespace, body)

    async def replace_lease(self, namespace: str, name: str, body: Mapping[str, Any]) -> None:
        await self._client().replace_lease(namespace, name, body)

    async def close(self) -> None:
        if self._api is not None:
            api, self._api = self._api, None
            await api.close()


def _call(callback: Callable[[bool], None], leading: bool) -> None:
    callback(leading)


class LeaderElector:
    def __init__(
        self,
        *,
        api: LeaseApi,
        config: LeaderElectionConfig,
        namespace: str,
        identity: str,
        on_change: Callable[[bool], None] = lambda leading: None,
        clock: Clock = MONOTONIC,
    ) -> None:
        self.api = api
        self.config = config
        self.namespace = namespace
        self.identity = identity
        self.on_change = on_change
        self.clock = clock
        self._valid_until = float("-inf")
        self._leading = False
        self._observed: tuple[object, float] | None = None
        self._expires_at: float | None = None
        """When, on our clock, the Lease another replica holds expires unless renewed."""
        self._deliver: Callable[[Callable[[bool], None], bool], object] = _call
        """How `on_change` is called: at once, or (`run_in_thread`) on the caller's loop."""

    @property
    def leading(self) -> bool:
        """Whether this replica may act now: it holds the Lease and renewed it less than
        ``renewDeadlineSeconds`` ago."""
        return self._leading and self.clock() < self._valid_until

    async def run(self) -> None:
        while True:
            await self.attempt()
            await self.clock.sleep(self._pause())

    def _pause(self) -> float:
        """Seconds until the next try: the retry period, or less when the Lease another
        replica holds expires sooner on our clock. A standby then tries at that very
        moment, not up to a retry period later (kill to Lease took 15.7-17.8 s with a 15 s
        lease and a 2 s retry period)."""
        retry = self.config.retry_period_seconds
        if self._expires_at is None:
            return retry
        return max(0.0, min(retry, self._expires_at - self.clock()))

    async def run_in_thread(self) -> None:
        """`run` in a thread of its own, on an event loop of its own, until cancelled; then
        the Lease is given up (`release`) and ``api`` closed if it can be, from that thread.
        ``api`` must work from that loop (`OpenedOnUse`). ``on_change`` is called on the
        caller's loop, in order; `leading` may be read from any thread."""
        caller = asyncio.get_running_loop()
        self._deliver = caller.call_soon_threadsafe
        loop = asyncio.new_event_loop()
        keeping = loop.create_task(self._keep())
        ended: asyncio.Future[None] = caller.create_future()

        def main() -> None:
            failure: BaseException | None = None
            try:
                loop.run_until_complete(keeping)
            except BaseException as error:  # handed to the caller's loop
                failure = error
            finally:
                loop.close()
            with contextlib.suppress(RuntimeError):  # the caller's loop closed: exiting
                caller.call_soon_threadsafe(_end, ended, failure)

        thread = threading.Thread(target=main, name="gpusched-lease", daemon=True)
        thread.start()
        try:
            await asyncio.shield(ended)
        except asyncio.CancelledError:
            with contextlib.suppress(RuntimeError):  # the thread's loop has ended already
                loop.call_soon_threadsafe(keeping.cancel)
            await asyncio.shield(ended)  # released and closed: the thread is done
            raise
        finally:
            self._deliver = _call

    async def _keep(self) -> None:
        try:
            await self.run()
        finally:
            await self.release()
            close = getattr(self.api, "close", None)
            if close is not None:
                await close()

    async def attempt(self) -> bool:
        """One try to acquire or renew; returns whether we lead afterwards."""
        started = self.clock()
        if self._leading and started >= self._valid_until:
            # The renew deadline passed before this try: the process was stopped (SIGSTOP, a
            # paused VM) or starved. Another replica may have led meanwhile, so this term is
            # over even if the Lease turns out to be still ours: a renewal below starts a new
            # one, which reads the cluster afresh before acting.
            self._set(False)
        try:
            won = await self._try(started)
        except ApiError as error:
            # Unreachable: keep leading until the renew deadline, not a moment longer.
            logger.warning("lease %s/%s: %s", self.namespace, self.config.lease_name, error)
        else:
            if won:
                self._valid_until = started + self.config.renew_deadline_seconds
            else:
                self._valid_until = float("-inf")  # someone else holds it
        self._set(self.clock() < self._valid_until)
        return self.leading

    async def _try(self, now: float) -> bool:
        name = self.config.lease_name
        self._expires_at = None  # known again only from a Lease read now
        lease = await self.api.get_lease(self.namespace, name)
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        if lease is None:
            await self.api.create_lease(self.namespace, self._body(None, stamp, 0, stamp))
            return True
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or None
        record = (holder, spec.get("renewTime"), spec.get("leaseTransitions"))
        if self._observed is None or self._observed[0] != record:
            self._observed = (record, now)
        duration = float(spec.get("leaseDurationSeconds") or self.config.lease_duration_seconds)
        expired = now - self._observed[1] >= duration
        if holder not in (None, self.identity) and not expired:
            self._expires_at = self._observed[1] + duration
            return False
        transitions = int(spec.get("leaseTransitions") or 0)
        acquired = spec.get("acquireTime") or stamp
        if holder != self.identity:
            transitions += 1
            acquired = stamp
        version = (lease.get("metadata") or {}).get("resourceVersion")
        body = self._body(version, stamp, transitions, acquired)
        try:
            await self.api.replace_lease(self.namespace, name, body)
        except ApiError as error:
            if error.status == 409:
                return False  # someone else wrote it first
            raise
        return True

    def _body(
        self, version: str | None, stamp: str, transitions: int, acquired: str
    ) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": self.config.lease_name, "namespace": self.namespace}
        if version is not None:
            metadata["resourceVersion"] = version
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": int(self.config.lease_duration_seconds),
                "acquireTime": acquired,
                "renewTime": stamp,
                "leaseTransitions": transitions,
            },
        }

    def _set(self, leading: bool) -> None:
        metrics.LEADER.set(1 if leading else 0)
        if leading == self._leading:
            return
        self._leading = leading
        logger.info(
            "%s %s the lease %s/%s",
            self.identity,
            "holds" if leading else "lost",
            self.namespace,
            self.config.lease_name,
        )
        self._deliver(self.on_change, leading)

    async def release(self) -> None:
        """Gives the Lease up on a clean shutdown, so that another replica need not wait for
        it to expire."""
        if not self._leading:
            return
        self._leading = False
        metrics.LEADER.set(0)
        try:
            lease = await self.api.get_lease(self.namespace, self.config.lease_name)
            if lease and (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                body = dict(lease)
                body["spec"] = {**lease["spec"], "holderIdentity": None, "renewTime": None}
                await self.api.replace_lease(self.namespace, self.config.lease_name, body)
        except ApiError as error:
            logger.warning("cannot release the lease: %s", error)


def _end(ended: asyncio.Future[None], failure: BaseException | None) -> None:
    if ended.done():
        return
    if failure is None or isinstance(failure, asyncio.CancelledError):
        ended.set_result(None)
    else:
        ended.set_exception(failure)

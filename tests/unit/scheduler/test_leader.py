"""Leader election on a Lease: one holder, takeover after expiry, fencing before expiry.

Two electors share an in-memory Lease store with the API server's optimistic concurrency
(409 on a stale resourceVersion); each has its own fake monotonic clock, since expiry is
judged on the observer's own clock. The last stories run the elector in its own thread, as
the operator does, while the test's event loop is kept busy."""

from __future__ import annotations

import asyncio
import copy
import threading
import time
from collections.abc import Mapping
from typing import Any

import pytest

from gpusched.api.config import LeaderElectionConfig
from gpusched.scheduler.leader import LeaderElector, OpenedOnUse
from gpusched.scheduler.ports import ApiError
from testing.clock import Clock

CONFIG = LeaderElectionConfig(
    leaseDurationSeconds=15, renewDeadlineSeconds=10, retryPeriodSeconds=2
)


class LeaseStore:
    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.version = 0
        self.down = False

    def _check(self) -> None:
        if self.down:
            raise ApiError(0, "connection refused")

    async def get_lease(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        self._check()
        return copy.deepcopy(self.lease)

    async def create_lease(self, namespace: str, body: Mapping[str, Any]) -> None:
        self._check()
        if self.lease is not None:
            raise ApiError(409, "already exists")
        self._store(body)

    async def replace_lease(self, namespace: str, name: str, body: Mapping[str, Any]) -> None:
        self._check()
        assert self.lease is not None
        if body["metadata"].get("resourceVersion") != self.lease["metadata"]["resourceVersion"]:
            raise ApiError(409, "the object has been modified")
        self._store(body)

    def _store(self, body: Mapping[str, Any]) -> None:
        self.version += 1
        self.lease = copy.deepcopy(dict(body))
        self.lease["metadata"]["resourceVersion"] = str(self.version)

    @property
    def holder(self) -> str | None:
        return None if self.lease is None else self.lease["spec"]["holderIdentity"]


def elector(store: LeaseStore, identity: str, clock: Clock, log: list[str]) -> LeaderElector:
    return LeaderElector(
        api=store,
        config=CONFIG,
        namespace="default",
        identity=identity,
        on_change=lambda on: log.append(f"{identity} {on}"),
        clock=clock,
    )


@pytest.mark.asyncio
async def test_one_replica_leads_and_the_other_waits_while_it_renews() -> None:
    store, log = LeaseStore(), []
    clock_a, clock_b = Clock(), Clock()
    a, b = elector(store, "a", clock_a, log), elector(store, "b", clock_b, log)
    assert await a.attempt()
    for _ in range(20):  # 40 s of renewals: b never gets it
        clock_a.now += 2
        clock_b.now += 2
        assert await a.attempt()
        assert not await b.attempt()
    assert (store.holder, log) == ("a", ["a True"])


@pytest.mark.asyncio
async def test_a_silent_leader_is_replaced_once_the_lease_expires_on_the_observers_clock() -> None:
    store, log = LeaseStore(), []
    clock_a, clock_b = Clock(), Clock()
    a, b = elector(store, "a", clock_a, log), elector(store, "b", clock_b, log)
    assert await a.attempt()
    assert not await b.attempt()  # b first sees a's record now
    clock_b.now += 14.9
    assert not await b.attempt()
    clock_b.now += 0.2  # 15.1 s without a change to the record: expired
    assert await b.attempt()
    assert store.holder == "b"
    assert store.lease is not None
    assert store.lease["spec"]["leaseTransitions"] == 1
    # a comes back (a long GC pause): it may not act and must not take the Lease back.
    clock_a.now += 15.1
    assert not a.leading
    assert not await a.attempt()
    assert log == ["a True", "b True", "a False"]


@pytest.mark.asyncio
async def test_a_leader_that_cannot_renew_stops_before_anyone_could_take_over() -> None:
    store, log = LeaseStore(), []
    clock = Clock()
    a = elector(store, "a", clock, log)
    assert await a.attempt()
    store.down = True
    clock.now += 9.0
    assert await a.attempt()  # unreachable, but inside the renew deadline (10 s)
    clock.now += 1.1  # 10.1 s since the last renewal: fenced, 4.9 s before the lease expires
    assert not await a.attempt()
    assert not a.leading
    assert log == ["a True", "a False"]


@pytest.mark.asyncio
async def test_a_lost_race_is_not_leading() -> None:
    store, log = LeaseStore(), []
    clock = Clock()
    a = elector(store, "a", clock, log)
    original = store.replace_lease

    async def racing(namespace: str, name: str, body: Mapping[str, Any]) -> None:
        store.version += 1  # another writer updated the Lease in between
        assert store.lease is not None
        store.lease["metadata"]["resourceVersion"] = str(store.version)
        await original(namespace, name, body)

    await store.create_lease("default", {"metadata": {"name": "gpusched"}, "spec": {}})
    store.replace_lease = racing  # type: ignore[method-assign]
    assert not await a.attempt()
    assert log == []


@pytest.mark.asyncio
async def test_a_released_lease_is_taken_at_once() -> None:
    store, log = LeaseStore(), []
    clock_a, clock_b = Clock(), Clock()
    a, b = elector(store, "a", clock_a, log), elector(store, "b", clock_b, log)
    assert await a.attempt()
    assert not await b.attempt()
    await a.release()
    assert await b.attempt()
    assert store.holder == "b"


def test_settings_that_could_let_two_replicas_act_are_refused() -> None:
    with pytest.raises(ValueError, match="renewDeadlineSeconds must be shorter"):
        LeaderElectionConfig(leaseDurationSeconds=10, renewDeadlineSeconds=10)


@pytest.mark.parametrize(
    ("story", "lease", "renew"),
    [
        ("8/5 s leaves 3 s, shorter than a 4 s bind", 8, 5),
        ("a gap exactly the bind timeout cannot fence either", 14, 10),
    ],
)
def test_timing_whose_gap_is_not_longer_than_a_bind_is_refused_naming_the_keys(
    story: str, lease: float, renew: float
) -> None:
    with pytest.raises(ValueError, match=r"leaseDurationSeconds .* renewDeadlineSeconds") as error:
        LeaderElectionConfig(
            leaseDurationSeconds=lease, renewDeadlineSeconds=renew, retryPeriodSeconds=2
        )
    assert "bind timeout (4 s)" in str(error.value), story


# ----- renewing from a thread of its own ------------------------------------------------------


class CountingStore(LeaseStore):
    """Says when it has stored ``wanted`` versions of the Lease, and which loop served it."""

    def __init__(self, wanted: int) -> None:
        super().__init__()
        self.wanted = wanted
        self.renewed = threading.Event()
        self.loops: set[asyncio.AbstractEventLoop] = set()
        self.closed = False

    def _store(self, body: Mapping[str, Any]) -> None:
        self.loops.add(asyncio.get_running_loop())
        super()._store(body)
        if self.version >= self.wanted:
            self.renewed.set()

    async def close(self) -> None:
        self.closed = True


def busy_until(done: threading.Event, limit: float) -> bool:
    """A long CPU task run on the event loop without awaiting, as decoding a whole-cluster
    list or building a snapshot is: pure Python until ``done`` is set (False: not within
    ``limit`` seconds, which only a broken elector reaches)."""
    deadline = time.monotonic() + limit
    while not done.is_set():
        sum(range(1000))
        if time.monotonic() > deadline:
            return False
    return True


@pytest.mark.asyncio
async def test_the_lease_is_renewed_while_the_loop_is_busy_past_the_renew_deadline() -> None:
    # 10 versions of the Lease at 2 s apart on the elector's clock: 18 s of renewals, longer
    # than the 10 s renew deadline, all while this loop runs one CPU task that never awaits.
    store = CountingStore(wanted=10)
    clock, heard = Clock(), []
    loop, caller = asyncio.get_running_loop(), threading.get_ident()
    a = LeaderElector(
        api=OpenedOnUse(lambda: store),
        config=CONFIG,
        namespace="default",
        identity="a",
        on_change=lambda on: heard.append((on, threading.get_ident())),
        clock=clock,
    )
    task = asyncio.create_task(a.run_in_thread())
    await asyncio.sleep(0)  # the thread starts
    assert busy_until(store.renewed, limit=60), "the Lease was not renewed while the loop was busy"
    assert a.leading
    assert heard == []  # the change waits for this loop, which was busy
    await asyncio.sleep(0)
    assert heard == [(True, caller)]
    assert loop not in store.loops  # the thread's own loop and client served every renewal

    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (store.holder, store.closed, a.leading) == (None, True, False)  # given up, closed


@pytest.mark.asyncio
async def test_a_failing_lease_thread_fails_its_task() -> None:
    def refuse() -> CountingStore:
        raise RuntimeError("no credentials")

    a = LeaderElector(
        api=OpenedOnUse(refuse), config=CONFIG, namespace="default", identity="a", clock=Clock()
    )
    with pytest.raises(RuntimeError, match="no credentials"):
        await a.run_in_thread()


@pytest.mark.asyncio
async def test_a_standby_tries_for_the_lease_the_moment_it_expires_not_a_retry_period_later() -> (
    None
):
    # b first sees a's record at 1000.5 s on its clock; a dies without renewing. Tries
    # every 2 s would reach 1016.5 s; the Lease is b's at 1015.5 s, when it expires on b's
    # clock.
    store, log = LeaseStore(), []
    clock_a, clock_b = Clock(), Clock()
    a = elector(store, "a", clock_a, log)
    taken: list[float] = []
    b = LeaderElector(
        api=store,
        config=CONFIG,
        namespace="default",
        identity="b",
        on_change=lambda on: taken.append(clock_b.now),
        clock=clock_b,
    )
    assert await a.attempt()
    clock_b.now += 0.5  # b's tries are not in step with a's renewals
    running = asyncio.create_task(b.run())
    while not taken:
        await asyncio.sleep(0)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert taken == [pytest.approx(1015.5)]


class ReadsAt:
    """``store`` as one replica reaches it: when (on its clock) it read the Lease."""

    def __init__(self, store: LeaseStore, clock: Clock) -> None:
        self.store, self.clock, self.reads = store, clock, list[float]()

    async def get_lease(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        self.reads.append(self.clock.now)
        return await self.store.get_lease(namespace, name)

    async def create_lease(self, namespace: str, body: Mapping[str, Any]) -> None:
        await self.store.create_lease(namespace, body)

    async def replace_lease(self, namespace: str, name: str, body: Mapping[str, Any]) -> None:
        await self.store.replace_lease(namespace, name, body)


@pytest.mark.asyncio
async def test_a_standby_that_cannot_read_the_lease_tries_again_a_retry_period_later() -> None:
    # b saw a's record at 1000 s; from 1014 s the server is unreachable. b knows nothing of
    # the Lease it cannot read, so it keeps its retry period rather than racing at 1015 s.
    store, log = LeaseStore(), []
    clock_a, clock_b = Clock(), Clock()
    a = elector(store, "a", clock_a, log)
    reaching = ReadsAt(store, clock_b)
    b = LeaderElector(api=reaching, config=CONFIG, namespace="default", identity="b", clock=clock_b)
    assert await a.attempt()
    running = asyncio.create_task(b.run())
    while clock_b.now < 1014:
        await asyncio.sleep(0)
    store.down = True
    for _ in range(100):  # bounded: a replica that retried at once would stay at 1015 s
        await asyncio.sleep(0)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert reaching.reads[:12] == [1000.0 + 2 * i for i in range(12)]

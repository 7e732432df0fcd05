"""Refusals back off: a gang whose ResourceClaim writes or binds the API server refuses tries
again after 1, 2, 4, 8 … seconds (virtual), up to ``maxBackoffSeconds``; a change that could
make it succeed (its pods, its groups, a node it was refused on) starts the count over; another
group is not woken by the room each refused attempt gives back; the refusal is logged once; and
every bind carries its GPUs, DRA pods included. The same refusals on the real control plane:
tests/integration/test_backoff_real.py."""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass

import pytest

from gpusched.api.config import load_config
from gpusched.api.k8s import GPUS_ANNOTATION
from gpusched.scheduler.factory import build_scheduler
from gpusched.scheduler.ports import ApiError
from gpusched.scheduler.service import Scheduler
from gpusched.scheduler.state import ClusterState
from testing import dra
from testing.clock import Clock
from tests.unit.scheduler.test_dra_scheduler import (
    NS,
    FakeClaims,
    LoggingApi,
    _shared_world,
    _sharing_pod,
    _world,
    fill,
)
from tests.unit.scheduler.test_scheduler_service import run_cycle

STEP = 0.25
"""Virtual seconds between cycles: far below every delay, so attempts show their own cadence."""


@dataclass
class RefusingClaims(FakeClaims):
    """Refuses every status write of ``refused`` (an admission policy answering 422)."""

    refused: str = ""

    async def update_claim_status(self, body, fence=None):  # type: ignore[no-untyped-def]
        key = f"{body['metadata']['namespace']}/{body['metadata']['name']}"
        if key == self.refused:
            self.refuse_status[key] = ApiError(422, "denied by policy no-gpus")
        return await super().update_claim_status(body, fence)


def _refusing_world(clock: Clock) -> tuple[Scheduler, LoggingApi, RefusingClaims]:
    """`_world`'s gang of two (node n1), its claim w1-gpus refused at every allocation."""
    api = LoggingApi()
    claims = RefusingClaims(api.log, refused=f"{NS}/w1-gpus")
    config = load_config({"operator": {"batchWindowSeconds": 0, "initialBackoffSeconds": 1}})
    scheduler = build_scheduler(config, ClusterState(), api, claims=claims, clock=clock)
    fill(scheduler, claims, 2, 2)
    return scheduler, api, claims


def _attempt_times(log: list[tuple[str, ...]], times: list[float], claim: str) -> list[float]:
    return [t for entry, t in zip(log, times, strict=True) if entry[:2] == ("status", claim)]


async def _run(scheduler, api, clock: Clock, seconds: float) -> list[float]:  # type: ignore[no-untyped-def]
    """Cycles every `STEP` for ``seconds``; the clock's time of each logged write."""
    times: list[float] = []
    end = clock.now + seconds
    while clock.now < end:
        before = len(api.log)
        await run_cycle(scheduler)
        times += [clock.now] * (len(api.log) - before)
        clock.now += STEP
    return times


def _gaps(attempts: list[float]) -> list[float]:
    return [round(b - a, 2) for a, b in itertools.pairwise(attempts)]


@pytest.mark.asyncio
async def test_a_refused_claim_write_is_tried_again_after_doubling_delays_up_to_the_maximum(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="gpusched")
    clock = Clock()
    scheduler, api, _ = _refusing_world(clock)
    times = await _run(scheduler, api, clock, 40.0)
    attempts = _attempt_times(api.log, times, f"{NS}/w1-gpus")
    # initialBackoffSeconds 1, maxBackoffSeconds 10 (the default): 1, 2, 4, 8, 10, 10 …
    assert _gaps(attempts) == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0], attempts
    assert api.binds == []
    info = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    refusals = [m for m in info if "ResourceClaims were refused" in m]
    assert len(refusals) == 1, refusals
    assert "denied by policy no-gpus" in refusals[0], refusals
    assert not [m for m in info if "Scheduled" in m], info
    assert sum("pods placed" in m for m in info) == len(attempts), info

    # The node it was refused on changes: the count starts over, and it tries at once.
    node = dra.node("n1")
    node["metadata"]["resourceVersion"] = "changed"
    scheduler.state.upsert_node(node)
    before = len(api.log)
    await run_cycle(scheduler)
    assert ("status", f"{NS}/w1-gpus") in [e[:2] for e in api.log[before:]], api.log[before:]


@pytest.mark.asyncio
async def test_another_group_is_not_woken_by_the_room_each_refused_attempt_gives_back() -> None:
    clock = Clock()
    scheduler, _, claims = _refusing_world(clock)
    # A pod that never fits (12 GPUs on an 8-GPU node): its own backoff alone paces it.
    big = dra.pod("big", NS, claim_name="big")
    big["metadata"].update(uid="uid-big", creationTimestamp="2026-12-01T10:00:00Z")
    scheduler.claims.book.upsert_claim(claims.add(dra.claim("big", NS, 12)))
    scheduler.state.upsert_pod(big)
    tried: list[float] = []
    end = clock.now + 30.0
    while clock.now < end:
        if not scheduler.backoff.backing_off(f"{NS}/big", clock.now):
            tried.append(clock.now)
        await run_cycle(scheduler)
        clock.now += STEP
    # Its second try comes early once: at 1001 s it failed in the cycle whose decision the
    # gang's refused claims undid, so it may have lacked their room. From then on it keeps
    # its own doubling while the gang's writes are refused every few seconds.
    assert _gaps(tried) == [1.0, 1.0, 4.0, 8.0, 10.0], tried


@pytest.mark.asyncio
async def test_a_gangs_refused_binds_back_off_doubling_and_are_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="gpusched")
    clock = Clock()
    scheduler, api, _ = _world(gang=2, clock=clock)
    for i in range(2):  # both binds of each attempt refused: one failed attempt, not two
        api.failures[f"{NS}/w{i}"] = [ApiError(422, "binding denied by policy")] * 50
    attempts: list[float] = []
    end = clock.now + 30.0
    while clock.now < end:
        left = len(api.failures[f"{NS}/w0"])
        await run_cycle(scheduler)
        if len(api.failures[f"{NS}/w0"]) < left:
            attempts.append(clock.now)
        clock.now += STEP
    assert _gaps(attempts) == [1.0, 2.0, 4.0, 8.0, 10.0], attempts
    refused = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(refused) == 1, refused
    assert "binding denied by policy" in refused[0], refused


@pytest.mark.asyncio
async def test_every_bind_of_a_dra_pod_carries_its_gpus() -> None:
    scheduler, api, claims = _world(gang=2, gpus=2)
    await run_cycle(scheduler)
    assert len(api.binds) == 2
    for key, _, written in api.binds:
        claim = claims.claims[f"{key}-gpus"]
        results = claim["status"]["allocation"]["devices"]["results"]
        devices = sorted(dra.index_of_device(r["device"]) for r in results)
        assert written[GPUS_ANNOTATION] == ",".join(map(str, devices)), (key, written)


@pytest.mark.asyncio
async def test_a_pod_joining_an_allocated_shared_claim_is_bound_with_the_claims_gpus() -> None:
    clock = Clock()
    scheduler, api, claims = _shared_world(clock=clock)
    _sharing_pod(scheduler, claims, "first")
    await run_cycle(scheduler)
    _sharing_pod(scheduler, claims, "second")
    clock.now += 1.0
    await run_cycle(scheduler)
    shared = claims.claims[f"{NS}/shared"]["status"]["allocation"]["devices"]["results"]
    want = ",".join(str(g) for g in sorted(dra.index_of_device(r["device"]) for r in shared))
    annotations = {key: a for key, _, a in api.binds}
    assert annotations[f"{NS}/first"][GPUS_ANNOTATION] == want, annotations
    assert annotations[f"{NS}/second"][GPUS_ANNOTATION] == want, annotations


@dataclass
class ContendedClaims(FakeClaims):
    """Answers every status write of ``contended`` 409 Conflict, as the API server does while
    another writer keeps updating the claim between our read and our write."""

    contended: str = ""

    async def update_claim_status(self, body, fence=None):  # type: ignore[no-untyped-def]
        key = f"{body['metadata']['namespace']}/{body['metadata']['name']}"
        if key == self.contended:
            self.refuse_status[key] = ApiError(409, "the object has been modified")
        return await super().update_claim_status(body, fence)


@pytest.mark.asyncio
async def test_a_claim_conflict_backs_off_doubling_and_starts_over_when_the_claim_changes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="gpusched")
    clock = Clock()
    api = LoggingApi()
    claims = ContendedClaims(api.log, contended=f"{NS}/w1-gpus")
    config = load_config({"operator": {"batchWindowSeconds": 0, "initialBackoffSeconds": 1}})
    scheduler = build_scheduler(config, ClusterState(), api, claims=claims, clock=clock)
    fill(scheduler, claims, 2, 2)
    times = await _run(scheduler, api, clock, 30.0)
    attempts = sorted(set(_attempt_times(api.log, times, f"{NS}/w1-gpus")))
    # Conflicts that the watch never explains are refusals like any other: 1, 2, 4, 8, 10.
    assert _gaps(attempts) == [1.0, 2.0, 4.0, 8.0, 10.0], attempts
    assert api.binds == []
    for key, body in claims.claims.items():  # every claim the gang's writes touched given back
        assert not (body.get("status") or {}).get("allocation"), (key, body)
        assert not body["metadata"].get("finalizers"), (key, body)
    refusals = [
        r.getMessage() for r in caplog.records if "ResourceClaims were refused" in r.getMessage()
    ]
    assert len(refusals) == 1, refusals
    assert "the object has been modified" in refusals[0], refusals

    # Our own release of the claims wrote them again: no news. The watch then shows another
    # writer's change of the contested claim (here: it was deleted and made again, free):
    # the count starts over, and the gang tries at once.
    for body in claims.claims.values():
        scheduler.claim_changed(body)
    assert scheduler.backoff.backing_off(f"{NS}/train", clock.now)
    claims.contended = ""
    fresh = claims.add(claims.claims[f"{NS}/w1-gpus"])
    for body in (fresh, claims.claims[f"{NS}/w1-gpus"]):
        body["metadata"]["uid"] = "uid-w1-gpus-again"
    scheduler.claim_changed(fresh)
    claims.refuse_status.clear()
    assert not scheduler.backoff.backing_off(f"{NS}/train", clock.now), scheduler.claims.contested
    await run_cycle(scheduler)
    assert sorted(key for key, _, _ in api.binds) == [f"{NS}/w0", f"{NS}/w1"], api.log[-6:]

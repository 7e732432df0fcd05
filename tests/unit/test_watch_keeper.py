"""Kopf's watchers kept alive through API errors (gpusched.handlers.watchers): the operator
survives a watch answered 404, is unready until the watch is back, and lets Kopf's own
watches (CRDs, namespaces) behave as Kopf has them."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest
from kopf._cogs.clients import errors

from gpusched.handlers.watchers import BACKOFF_SECONDS, Readiness, kept_alive


@dataclass(frozen=True)
class Resource:
    plural: str
    group: str = "scheduling.gpusched.io"


def not_found() -> errors.APINotFoundError:
    return errors.APINotFoundError({"message": "podgroups not found"}, status=404, headers={})


@pytest.mark.asyncio
async def test_a_watch_answered_404_is_started_over_and_unready_until_it_holds() -> None:
    failures = 3
    runs: list[str] = []
    sleeps: list[float] = []
    health = Readiness()
    holding = asyncio.Event()

    async def watcher(*, resource: Resource, **_: Any) -> None:
        runs.append(resource.plural)
        if len(runs) <= failures:
            raise not_found()
        holding.set()
        await asyncio.Event().wait()  # a watch that holds runs until cancelled

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        assert not health.ready  # down through every backoff

    keep = kept_alive(watcher, health, sleep, recovered=0.01)
    task = asyncio.ensure_future(keep(resource=Resource("podgroups")))
    await holding.wait()
    assert not health.ready
    assert "podgroups.scheduling.gpusched.io (404: podgroups not found)" in health.report()
    while not health.ready:
        await asyncio.sleep(0.01)
    assert health.report() == "ready: every watch is up"
    assert sleeps == [BACKOFF_SECONDS[0] * 2**i for i in range(failures)]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.asyncio
async def test_cancelling_the_kept_watch_cancels_kopfs_watcher() -> None:
    cancelled = asyncio.Event()
    started = asyncio.Event()

    async def watcher(**_: Any) -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()

    async def sleep(seconds: float) -> None:
        raise AssertionError("no failure, no backoff")

    task = asyncio.ensure_future(
        kept_alive(watcher, Readiness(), sleep)(resource=Resource("pods", ""))
    )
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cancelled.is_set()


@pytest.mark.asyncio
async def test_kopfs_own_watch_of_crds_fails_as_kopf_has_it() -> None:
    async def watcher(**_: Any) -> None:
        raise not_found()

    async def sleep(seconds: float) -> None:
        raise AssertionError("Kopf's own watches are not retried here")

    health = Readiness()
    keep = kept_alive(watcher, health, sleep)
    with pytest.raises(errors.APINotFoundError):
        await keep(resource=Resource("customresourcedefinitions", "apiextensions.k8s.io"))
    assert health.ready

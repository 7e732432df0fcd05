"""Kopf's watchers kept alive through API errors (gpusched.handlers.watchers): the operator
survives a watch answered 404, is unready until the watch is back, and lets Kopf's own
watches (CRDs, namespaces) behave as Kopf has them. Pods' and nodes' events go from the
stream straight to their handler, in order, and survive a failing handler."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest
from kopf._cogs.clients import errors, watching

from gpusched.handlers import watchers
from gpusched.handlers.watchers import BACKOFF_SECONDS, Readiness, kept_alive, streamed


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


# ----- pods and nodes: straight from the stream to the handler -----------------------------


class Processor:
    """What Kopf hands its watcher: a partial whose keywords hold the operator's memo."""

    def __init__(self, memo: object) -> None:
        self.keywords = {"memobase": memo}


def stream_of(*runs: list[Any]) -> Any:
    """A fake of Kopf's ``infinite_watch``: each call yields the next run's items (an
    exception among them is raised there), then holds until cancelled."""
    calls = iter(runs)

    async def infinite_watch(**_: Any) -> Any:
        for item in next(calls):
            if isinstance(item, BaseException):
                raise item
            yield item
        await asyncio.Event().wait()

    return infinite_watch


def event(kind: str | None, name: str) -> dict[str, Any]:
    return {"type": kind, "object": {"metadata": {"name": name, "namespace": "default"}}}


@pytest.mark.asyncio
async def test_a_direct_resources_events_reach_its_handler_in_stream_order_without_bookmarks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    memo = object()
    seen: list[tuple[str | None, str, object]] = []
    done = asyncio.Event()

    async def handler(event: dict[str, Any], memo: object, **_: Any) -> None:
        seen.append((event["type"], event["object"]["metadata"]["name"], memo))
        if len(seen) == 4:
            done.set()

    listed = [event(None, "a"), event(None, "b"), watching.Bookmark.LISTED]
    watched = [{"type": "BOOKMARK", "object": {}}, event("MODIFIED", "a"), event("DELETED", "b")]
    monkeypatch.setattr(watching, "infinite_watch", stream_of(listed + watched))

    async def kopfs(**_: Any) -> None:
        raise AssertionError("pods never go through Kopf's processing")

    keep = kept_alive(kopfs, Readiness(), asyncio.sleep, direct={("", "pods"): handler})
    task = asyncio.ensure_future(
        keep(
            resource=Resource("pods", ""), processor=Processor(memo), settings=None, namespace=None
        )
    )
    await asyncio.wait_for(done.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == [
        (None, "a", memo),
        (None, "b", memo),
        ("MODIFIED", "a", memo),
        ("DELETED", "b", memo),
    ]


@pytest.mark.asyncio
async def test_a_handler_that_fails_on_one_event_still_gets_the_next(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[str] = []
    done = asyncio.Event()

    async def handler(event: dict[str, Any], **_: Any) -> None:
        name = event["object"]["metadata"]["name"]
        if name == "bad":
            raise ValueError("a malformed pod")
        seen.append(name)
        done.set()

    monkeypatch.setattr(
        watching, "infinite_watch", stream_of([event("ADDED", "bad"), event("ADDED", "good")])
    )
    task = asyncio.ensure_future(
        streamed(handler, None, settings=None, resource=Resource("pods", ""), namespace=None)
    )
    await asyncio.wait_for(done.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == ["good"]
    assert "handling a ADDED event of pods failed" in caplog.text
    assert "a malformed pod" in caplog.text


@pytest.mark.asyncio
async def test_a_direct_watch_refused_is_started_over_and_lists_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[str] = []
    relisted = asyncio.Event()
    sleeps: list[float] = []

    async def handler(event: dict[str, Any], **_: Any) -> None:
        seen.append(event["object"]["metadata"]["name"])
        if len(seen) == 2:
            relisted.set()

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    monkeypatch.setattr(
        watching, "infinite_watch", stream_of([event(None, "a"), not_found()], [event(None, "a")])
    )

    async def kopfs(**_: Any) -> None:
        raise AssertionError("pods never go through Kopf's processing")

    health = Readiness()
    keep = kept_alive(kopfs, health, sleep, recovered=0.01, direct={("", "pods"): handler})
    task = asyncio.ensure_future(
        keep(
            resource=Resource("pods", ""), processor=Processor(None), settings=None, namespace=None
        )
    )
    await asyncio.wait_for(relisted.wait(), 5)
    assert seen == ["a", "a"]
    assert sleeps == [BACKOFF_SECONDS[0]]
    while not health.ready:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.asyncio
async def test_resources_without_a_direct_handler_keep_kopfs_processing() -> None:
    ran: list[str] = []

    async def kopfs(*, resource: Resource, **_: Any) -> None:
        ran.append(resource.plural)

    async def handler(**_: Any) -> None:
        raise AssertionError("only pods go straight to this handler")

    keep = kept_alive(kopfs, Readiness(), asyncio.sleep, direct={("", "pods"): handler})
    await keep(resource=Resource("podgroups"))
    assert ran == ["podgroups"]


def test_the_operators_pods_and_nodes_are_fed_straight_from_their_streams() -> None:
    from gpusched import handlers

    assert watchers._direct == {
        ("", "pods"): handlers.pod_event,
        ("", "nodes"): handlers.node_event,
    }

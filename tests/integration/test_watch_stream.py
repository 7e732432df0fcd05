"""The operator's own list-and-watch (gpusched.k8s.watch) against the API emulator, whose
faults a real server cannot be made to show on demand: a list read page by page, events in
order, a watch the server ends started again from its resourceVersion (moved on by
bookmarks) without a list, 410 Gone answered with a new list, and a refused watch counted
down in the readiness until it is answered again."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import pytest_asyncio

from gpusched.k8s import client as k8s_client
from gpusched.k8s.client import KubeClusterApi, api_client
from gpusched.k8s.watch import Event, Kind, Readiness, Watch, served
from testing.apiserver import ApiClient, ApiServer
from testing.manifests import pod

pytestmark = [pytest.mark.emulator, pytest.mark.asyncio]

PODS = Kind("", "v1", "pods", "Pod")
DEADLINE_S = 20.0


class Seen:
    """The events a watch handed over: (type, pod name)."""

    def __init__(self) -> None:
        self.events: list[tuple[str | None, str]] = []

    async def __call__(self, event: Event) -> None:
        self.events.append((event["type"], event["object"]["metadata"]["name"]))

    def names(self, kind: str | None) -> list[str]:
        return [name for t, name in self.events if t == kind]


async def until(what: str, condition: Callable[[], bool]) -> None:
    deadline = asyncio.get_running_loop().time() + DEADLINE_S
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting: {what}"
        await asyncio.sleep(0.02)


@pytest_asyncio.fixture
async def watching(
    apiserver: ApiServer,
    kube_configuration: Callable[[], Awaitable[Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[tuple[Watch, Seen]]:
    monkeypatch.setattr(k8s_client, "PAGE_SIZE", 2)  # a list of five pods is three pages
    with ApiClient(apiserver.url) as api:
        for i in range(5):
            api.create(pod(f"listed-{i}", 1))
    kube = KubeClusterApi(api_client(await kube_configuration()))
    seen = Seen()
    watch = Watch(kube, PODS, seen, Readiness(), backoff=(0.05, 0.2))
    task = asyncio.create_task(watch.run())
    try:
        await until("the list", lambda: len(seen.events) == 5)
        yield watch, seen
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await kube.close()


async def test_a_paged_list_then_the_events_in_order(
    apiserver: ApiServer, watching: tuple[Watch, Seen]
) -> None:
    watch, seen = watching
    assert seen.names(None) == [f"listed-{i}" for i in range(5)]
    await until("the watch open", lambda: apiserver.watch_count() == 1)
    with ApiClient(apiserver.url) as api:
        api.create(pod("late", 1))
        api.delete("pods", "listed-0", "default")
    await until("two events", lambda: len(seen.events) == 7)
    assert seen.events[5:] == [("ADDED", "late"), ("DELETED", "listed-0")]
    assert watch.lists == 1


async def test_a_watch_ended_by_the_server_starts_again_from_its_version_without_a_list(
    apiserver: ApiServer, watching: tuple[Watch, Seen]
) -> None:
    watch, seen = watching
    await until("the watch open", lambda: apiserver.watch_count() == 1)
    await asyncio.sleep(1.2)  # the emulator sends a bookmark every 0.5 s
    apiserver.drop_watches()
    with ApiClient(apiserver.url) as api:
        api.create(pod("after-the-drop", 1))
    await until("the event after the drop", lambda: "after-the-drop" in seen.names("ADDED"))
    assert (watch.lists, seen.names(None)) == (1, [f"listed-{i}" for i in range(5)])


async def test_410_gone_lists_again_at_once(
    apiserver: ApiServer, watching: tuple[Watch, Seen]
) -> None:
    watch, seen = watching
    await until("the watch open", lambda: apiserver.watch_count() == 1)
    # As the real server answers a watch from a version it no longer keeps: a 200 stream
    # with one ERROR event, code 410.
    apiserver.faults.fail(410, method="GET", path=r"/pods\?.*watch=", times=1)
    apiserver.drop_watches()
    await until("a second list", lambda: watch.lists == 2)
    await until("the second list's objects", lambda: len(seen.names(None)) == 10)
    assert watch.readiness.ready  # 410 is the watch's normal life, not a refusal


async def test_a_refused_watch_is_down_until_it_is_answered_again(
    apiserver: ApiServer, watching: tuple[Watch, Seen]
) -> None:
    watch, seen = watching
    await until("the watch open", lambda: apiserver.watch_count() == 1)
    refused = apiserver.faults.fail(404, method="GET", path=r"/pods\?.*watch=", times=None)
    apiserver.drop_watches()
    await until("down", lambda: not watch.readiness.ready)
    assert watch.readiness.report().startswith("not ready: watch down: pods (404: "), (
        watch.readiness.report()
    )
    with ApiClient(apiserver.url) as api:
        api.create(pod("while-down", 1))
    await until("retried", lambda: watch.lists >= 3)
    assert not watch.readiness.ready
    apiserver.faults.remove(refused)
    await until("up again", lambda: watch.readiness.ready)
    await until("the pod created meanwhile", lambda: "while-down" in seen.names(None))


async def test_only_the_kinds_the_server_serves_are_watched(
    apiserver: ApiServer, kube_configuration: Callable[[], Awaitable[Any]]
) -> None:
    kube = KubeClusterApi(api_client(await kube_configuration()))
    absent_group = Kind("absent.example.com", "v1", "things", "Thing")
    absent_plural = Kind("", "v1", "things", "Thing")
    try:
        assert await served(kube, [absent_group, PODS, absent_plural]) == [PODS]
    finally:
        await kube.close()

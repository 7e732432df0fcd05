"""Reconciling the cache with a list (gpusched.scheduler.resync): what a list from the watch
cache may add, replace or drop, and what it must leave alone because the watch has shown
something newer than the list."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from gpusched.scheduler.ports import ApiError, Listing
from gpusched.scheduler.resync import (
    RESYNC_SECONDS,
    forget_missing,
    forget_missing_nodes,
    forget_unlisted,
    identify,
    identities,
    take_newer,
    take_nodes,
    take_unseen,
)
from gpusched.scheduler.service import Scheduler
from gpusched.scheduler.state import ClusterState
from testing.clock import Clock
from testing.fakes import FakeApi
from testing.manifests import node, pod
from tests.unit.scheduler.test_scheduler_service import bound_to, run_cycle, service

Body = dict[str, Any]


def at(body: Body, version: int, uid: str | None = None) -> Body:
    """``body`` at ``metadata.resourceVersion`` ``version`` (and another uid, if given)."""
    body["metadata"]["resourceVersion"] = str(version)
    if uid is not None:
        body["metadata"]["uid"] = uid
    return body


@dataclass
class Case:
    story: str
    watched: list[Body]
    """What the watch delivered, in order (each a pod body)."""
    listed: list[Body]
    listed_at: int
    """The list's resourceVersion."""
    deleted: list[tuple[str, str]] = field(default_factory=list)
    """Deletions the watch delivered before the list was processed (key, uid)."""
    want_pods: dict[str, str] = field(default_factory=dict)
    """key → uid of what the cache holds afterwards."""
    want_nodes: dict[str, str | None] = field(default_factory=dict)
    """key → nodeName, where it matters."""


CASES = [
    Case(
        "a pod created while the watch was down is taken from the list",
        watched=[],
        listed=[at(pod("new", 2), 10)],
        listed_at=10,
        want_pods={"default/new": "uid-new"},
    ),
    Case(
        "a pod deleted while the watch was down is dropped",
        watched=[at(pod("old", 2, node="a", at=(0, 1)), 5)],
        listed=[],
        listed_at=10,
    ),
    Case(
        "a pod the watch showed after the list was read is kept although the list lacks it",
        watched=[at(pod("later", 2), 12)],
        listed=[],
        listed_at=10,
        want_pods={"default/later": "uid-later"},
    ),
    Case(
        "a pod whose deletion the watch told is not taken back from an older list",
        watched=[at(pod("dead", 2), 5)],
        deleted=[("default/dead", "uid-dead")],
        listed=[at(pod("dead", 2), 5)],
        listed_at=8,
    ),
    Case(
        "a pod re-created under its name after the list keeps its place over the old one",
        watched=[at(pod("name", 2, uid="uid-second"), 12)],
        listed=[at(pod("name", 2, uid="uid-first"), 9)],
        listed_at=10,
        want_pods={"default/name": "uid-second"},
    ),
    Case(
        "a pod re-created under its name while the watch was down replaces the old one",
        watched=[at(pod("name", 2, node="a", at=(0, 1), uid="uid-first"), 4)],
        listed=[at(pod("name", 2, uid="uid-second"), 9)],
        listed_at=10,
        want_pods={"default/name": "uid-second"},
        want_nodes={"default/name": None},
    ),
    Case(
        "a bind the watch never told is taken from the list",
        watched=[at(pod("p", 2), 4)],
        listed=[at(pod("p", 2, node="a", at=(0, 1)), 9)],
        listed_at=10,
        want_pods={"default/p": "uid-p"},
        want_nodes={"default/p": "a"},
    ),
    Case(
        "a list older than the bind the watch showed does not unbind the pod",
        watched=[at(pod("p", 2, node="a", at=(0, 1)), 9)],
        listed=[at(pod("p", 2), 4)],
        listed_at=6,
        want_pods={"default/p": "uid-p"},
        want_nodes={"default/p": "a"},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.story)
def test_a_list_reconciles_the_pods_it_can_vouch_for(case: Case) -> None:
    state = ClusterState()
    state.upsert_node(node("a"))
    for body in case.watched:
        state.upsert_pod(body)
    known = {key: record.uid for key, record in state.pods.items()}  # before the list
    for key, uid in case.deleted:
        state.delete_pod(key, uid)
    version, listed = str(case.listed_at), identify(case.listed)
    forget_missing(state, known, identities(listed), version)
    take_unseen(state, listed, version)
    take_newer(state, listed)
    assert {key: record.uid for key, record in state.pods.items()} == case.want_pods
    for key, where in case.want_nodes.items():
        assert state.pods[key].node == where, key


def test_a_listed_node_is_taken_only_when_unknown_or_newer_and_dropped_only_when_not_newer() -> (
    None
):
    state = ClusterState()
    state.upsert_node(at(node("watched-later"), 12))
    state.upsert_node(at(node("stale"), 3))
    state.upsert_node(at(node("deleted"), 4))
    state.upsert_node(at(node("added-after-list"), 11))
    relabelled = at(node("stale", labels={"team": "vision"}), 9)
    listing = Listing([at(node("watched-later"), 7), relabelled, at(node("new"), 8)], "10")
    known = set(state.nodes)
    names = {body["metadata"]["name"] for body in listing.items}
    assert forget_missing_nodes(state, known, names, listing.version) == ["deleted"]
    assert take_nodes(state, listing.items) == ["stale", "new"]
    assert sorted(state.nodes) == ["added-after-list", "new", "stale", "watched-later"]
    assert state.node_versions["watched-later"] == "12"  # the list's 7 is older
    assert state.nodes["stale"].labels.get("team") == "vision"


def test_a_foreign_pod_that_does_not_parse_is_reported_once_per_version(
    caplog: pytest.LogCaptureFixture,
) -> None:
    state = ClusterState()
    broken = at(pod("x", 1, node="a", scheduler="default-scheduler"), 5)
    broken["spec"]["containers"] = "not a list"
    unusable: dict[str, str] = {}
    for listed_at in ("6", "7", "8"):  # resync after resync, the pod unchanged
        assert take_unseen(state, identify([broken]), listed_at, unusable) == []
    assert [r.getMessage() for r in caplog.records if "ignoring pod" in r.getMessage()] == [
        "ignoring pod default/x: Pod default/x: spec.containers: Input should be a valid list"
    ]
    assert unusable == {"uid-x": "5"}
    forget_unlisted(unusable, identities([]))
    assert unusable == {}  # gone from the list: forgotten


@pytest.mark.asyncio
async def test_a_pod_created_while_the_pods_watch_was_down_is_bound_after_the_next_resync() -> None:
    # No watch event ever shows p, and no watch restarted: only the periodic list does.
    api, clock = FakeApi(), Clock()
    scheduler = service(api, clock)
    scheduler.state.upsert_node(node("a", gpus=2))
    unseen = pod("p", 2)

    async def list_pods() -> list[Body]:
        return [unseen]

    async def list_nodes() -> list[Body]:
        return [node("a", gpus=2)]

    api.list_pods = list_pods  # type: ignore[attr-defined]
    api.list_nodes = list_nodes  # type: ignore[method-assign]
    await run_cycle(scheduler)
    assert api.binds == []
    clock.now += RESYNC_SECONDS
    await run_cycle(scheduler)  # the resync's list
    await run_cycle(scheduler)  # the decision it allows
    assert bound_to(api) == {"default/p": "a"}


@pytest.mark.parametrize("bound_by_us", [False, True], ids=["as listed", "after our bind"])
def test_an_older_pod_of_the_name_told_late_never_replaces_its_listed_successor(
    bound_by_us: bool,
) -> None:
    # The list shows the name's new pod before a lagging watch has told the old one's life
    # (created, then deleted): the old events must not bury the new pod (it would then
    # be forgotten for good, and its GPUs given again).
    state = ClusterState()
    state.upsert_node(node("a"))
    take_unseen(state, identify([at(pod("p", 2, uid="uid-new"), 9)]), "9")
    if bound_by_us:
        reservation = state.ledger.reserve("default/p", "a", (0, 1))
        assert reservation is not None
        state.confirm("default/p", reservation)
    state.upsert_pod(at(pod("p", 2, uid="uid-old"), 3))  # the lagging ADDED
    state.delete_pod("default/p", "uid-old")  # and its DELETED
    assert state.pods["default/p"].uid == "uid-new"
    assert "uid-new" not in state.gone
    state.upsert_pod(at(pod("p", 2, node="a", at=(0, 1), uid="uid-new"), 12))
    assert state.pods["default/p"].node == "a"


# ----- a new leader's take-over ------------------------------------------------------------


class Served:
    """What the API server lists to a new leader, and how often it was asked for a
    periodic resync's lists (``cached``)."""

    def __init__(self, api: FakeApi, nodes: list[Body], pods: list[Body]) -> None:
        self.nodes, self.pods, self.cached = nodes, pods, 0
        api.pages = self.pages  # type: ignore[method-assign]

    async def pages(self, plural: str, *, cached: bool = False) -> AsyncIterator[Listing]:
        self.cached += cached
        for body in self.pods if plural == "pods" else self.nodes:
            yield Listing([body])  # one object a page


@pytest.mark.asyncio
async def test_a_new_leader_drops_a_node_deleted_while_its_watch_was_down_before_deciding() -> None:
    # b was deleted while the standby's node watch was down: no pod may be bound to it,
    # not even until the first periodic resync.
    api, clock = FakeApi(), Clock()
    scheduler = service(api, clock)
    for name in ("a", "b"):
        scheduler.state.upsert_node(at(node(name, gpus=2), 1))
    held = at(pod("held", 2, node="a", annotations={"gpusched.io/gpus": "0,1"}), 3)
    served = Served(api, [at(node("a", gpus=2), 1)], [held, at(pod("p", 2), 4)])
    await scheduler.take_leadership(served.pages("pods"))
    await run_cycle(scheduler)
    assert sorted(scheduler.state.nodes) == ["a"]
    assert api.binds == []


@pytest.mark.asyncio
async def test_the_take_over_stands_for_the_resync_the_standbys_first_watch_list_asked_for() -> (
    None
):
    # The standby's watches listed everything when it started (which asks for a resync);
    # the take-over lists everything again: a second whole-cluster list at once would
    # only delay the first decisions. Pods the watch showed at the listed version are not
    # parsed again.
    api, clock = FakeApi(), Clock()
    scheduler = service(api, clock)
    scheduler.state.upsert_node(at(node("a", gpus=4), 1))
    watched = at(pod("watched", 2, node="a", annotations={"gpusched.io/gpus": "0,1"}), 3)
    scheduler.pod_changed(watched, listed=True)
    record = scheduler.state.pods["default/watched"]
    served = Served(api, [at(node("a", gpus=4), 1)], [watched, at(pod("p", 2), 4)])
    await scheduler.take_leadership(served.pages("pods"))
    await run_cycle(scheduler)
    assert (served.cached, bound_to(api)) == (0, {"default/p": "a"})
    assert scheduler.state.pods["default/watched"] is record
    clock.now += RESYNC_SECONDS
    await run_cycle(scheduler)
    assert served.cached == 2  # the periodic resync lists pods and nodes as before


@pytest.mark.asyncio
async def test_a_new_leader_that_cannot_list_nodes_keeps_those_it_watched() -> None:
    api, clock = FakeApi(), Clock()
    scheduler = service(api, clock)
    scheduler.state.upsert_node(at(node("a", gpus=2), 1))
    served = Served(api, [], [at(pod("p", 2), 4)])

    async def unreachable(plural: str, *, cached: bool = False) -> AsyncIterator[Listing]:
        if plural == "nodes":
            raise ApiError(0, "timeout")
        async for page in served.pages(plural, cached=cached):
            yield page

    api.pages = unreachable  # type: ignore[method-assign]
    await scheduler.take_leadership(served.pages("pods"))
    await run_cycle(scheduler)
    assert bound_to(api) == {"default/p": "a"}


@pytest.mark.asyncio
async def test_a_watch_that_starts_over_while_a_new_leader_lists_still_gets_its_resync() -> None:
    # What was deleted while that watch was down may have gone after the take-over's
    # lists were read: only a list read after the watch restarted can tell.
    api, clock = FakeApi(), Clock()
    scheduler = service(api, clock)
    scheduler.state.upsert_node(at(node("a", gpus=2), 1))
    served = Served(api, [at(node("a", gpus=2), 1)], [at(pod("p", 2), 4)])

    async def restarting(plural: str, *, cached: bool = False) -> AsyncIterator[Listing]:
        async for page in served.pages(plural, cached=cached):
            if plural == "pods" and not cached:
                scheduler.relisted()  # the pods watch starts over meanwhile
            yield page

    await scheduler.take_leadership(restarting("pods"))
    await run_cycle(scheduler)
    assert served.cached == 2  # pods and nodes listed again, at once


@dataclass
class Mark:
    """Where a watch stands (`gpusched.scheduler.resync.WatchMark`)."""

    version: str
    lists: int = 1


class Slow(Served):
    """Lists pods and Nodes in two pages, the second once ``released`` is set: the first
    page (at resourceVersion 9) holds p (a), the second q (b). The ghost, deleted on the
    server while the watch was down, is in neither."""

    def __init__(self, api: FakeApi, nodes: list[Body], pods: list[Body]) -> None:
        super().__init__(api, nodes, pods)
        self.released = asyncio.Event()
        self.listed = False

    async def pages(self, plural: str, *, cached: bool = False) -> AsyncIterator[Listing]:
        self.cached += cached
        listed = self.pods if plural == "pods" else self.nodes
        yield Listing(listed[:1], "9")
        await self.released.wait()
        yield Listing(listed[1:], "9")
        self.listed = self.listed or plural == "pods"


def taking_over(api: FakeApi, clock: Clock) -> tuple[Scheduler, Slow]:
    """A standby that watched a and b (2 GPUs each), p and q (2 GPUs each, pending) and a
    ghost on b, whose deletion its watch missed, about to take over."""
    scheduler = service(api, clock)
    for name in ("a", "b"):
        scheduler.state.upsert_node(at(node(name, gpus=2), 1))
    ghost = at(pod("ghost", 2, node="b", annotations={"gpusched.io/gpus": "0,1"}), 3)
    p, q = at(pod("p", 2), 4), at(pod("q", 2), 5)
    for body in (ghost, p, q):
        scheduler.state.upsert_pod(body)
    nodes = [at(node(name, gpus=2), 1) for name in ("a", "b")]
    return scheduler, Slow(api, nodes, [p, q])


@pytest.mark.asyncio
async def test_a_new_leader_whose_watches_are_current_binds_before_its_lists_are_in() -> None:
    # Both watches have shown revision 10, past the lists' 9, and never started over: the
    # first bind goes out before the pods' list is in, and the list is given up. The ghost
    # the watch missed holds b until the next periodic resync drops it; q gets b then.
    api, clock = FakeApi(), Clock()
    scheduler, served = taking_over(api, clock)
    for plural in ("pods", "nodes"):
        scheduler.resync.watching(plural, Mark("10"))
    await scheduler.take_leadership(served.pages("pods"))
    assert not served.listed
    await run_cycle(scheduler)
    assert bound_to(api) == {"default/p": "a"}
    assert not served.listed
    assert "default/ghost" in scheduler.state.pods
    served.released.set()
    clock.now += RESYNC_SECONDS
    await run_cycle(scheduler)  # the resync's lists, from the watch cache
    assert served.cached == 2
    assert "default/ghost" not in scheduler.state.pods
    clock.now += 8  # q's backoff: it found no room in the cycles before
    await run_cycle(scheduler)
    assert bound_to(api) == {"default/p": "a", "default/q": "b"}


@pytest.mark.parametrize(
    "marks",
    [
        {"pods": Mark("8"), "nodes": Mark("10")},
        {"pods": Mark("10"), "nodes": Mark("")},
        {"pods": Mark("10", lists=2), "nodes": Mark("10")},
        {"pods": Mark("10"), "nodes": Mark("10", lists=2)},
        {"pods": Mark("10")},
    ],
    ids=["pods behind", "nodes not listed", "pods relisted", "nodes relisted", "nodes unknown"],
)
@pytest.mark.asyncio
async def test_a_new_leader_waits_for_its_lists_unless_every_watch_vouches(
    marks: dict[str, Mark],
) -> None:
    # A watch behind the list may not have shown the old leader's last binds; one that
    # listed again since the cache was reconciled may have missed a deletion.
    api, clock = FakeApi(), Clock()
    scheduler, served = taking_over(api, clock)
    for plural, mark in marks.items():
        scheduler.resync.watching(plural, mark)
    taking = asyncio.ensure_future(scheduler.take_leadership(served.pages("pods")))
    for _ in range(50):
        await asyncio.sleep(0)
    assert not taking.done()
    served.released.set()
    await taking
    assert "default/ghost" not in scheduler.state.pods
    await run_cycle(scheduler)
    assert bound_to(api) == {"default/p": "a", "default/q": "b"}


@pytest.mark.asyncio
async def test_a_watch_that_listed_again_vouches_once_a_resync_has_reconciled_the_cache() -> None:
    api, clock = FakeApi(), Clock()
    scheduler, served = taking_over(api, clock)
    marks = {"pods": Mark("10", lists=2), "nodes": Mark("10", lists=3)}
    for plural, mark in marks.items():
        scheduler.resync.watching(plural, mark)
    served.released.set()
    await scheduler.take_leadership(served.pages("pods"))  # its lists reconcile the cache
    scheduler.lost_leadership()
    served.released.clear()
    served.listed = False
    await scheduler.take_leadership(served.pages("pods"))
    assert not served.listed  # taken over before the second list was in
    marks["pods"].lists = 3  # listed again after the first take-over's lists
    scheduler.lost_leadership()
    taking = asyncio.ensure_future(scheduler.take_leadership(served.pages("pods")))
    for _ in range(50):
        await asyncio.sleep(0)
    assert not taking.done()
    served.released.set()
    await taking

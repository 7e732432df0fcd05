"""Reconciling the cache with the API server: a fresh list when a replica takes the lead, one
at once when a watch starts over, and one every ``RESYNC_SECONDS`` while it leads."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpusched.api.foreign import source_of
from gpusched.engine.collector import collector_paused
from gpusched.engine.groups import GroupKind
from gpusched.scheduler.clock import Clock
from gpusched.scheduler.dra.allocator import ClaimAllocator
from gpusched.scheduler.ports import ApiError, ClusterApi, Listing
from gpusched.scheduler.records import metadata_of, name_of
from gpusched.scheduler.state import ClusterState
from gpusched.scheduler.tasks import Background

logger = logging.getLogger(__name__)

RESYNC_SECONDS = 10.0
"""How often the leader reconciles its cache with lists of every pod and Node (see
`Resync.tick`): this bounds how long a deletion, a pod or a bind that no watch event told
can go unseen (a watch that starts over triggers one at once, `Resync.relisted`). Ten
seconds: the lists come from the API server's watch cache and only what changed is parsed
again, so one resync at 5,000 nodes and 40,000 pods takes 0.5 CPU seconds
(``python bench/resync.py``), 5 % of one core at this period; 0.73 s at 50,000 pods."""

CATCH_UP_POLL_SECONDS = 0.02
"""How often a new leader looks whether its watches have shown their lists' revisions."""
KINDS = ("pods", "nodes")
"""What a new leader lists, and whose watches may vouch for the lists (`Resync.take_over`)."""


class WatchMark(Protocol):
    """Where a watch stands (`gpusched.k8s.watch.Watch`)."""

    @property
    def version(self) -> str:
        """The resourceVersion it has shown everything up to (its last event or bookmark)."""

    @property
    def lists(self) -> int:
        """Lists made so far: a list after the first may have missed deletions."""


class Resync:
    """``period``: seconds between two periodic resyncs (`RESYNC_SECONDS`)."""

    def __init__(
        self,
        *,
        state: ClusterState,
        api: ClusterApi,
        claims: ClaimAllocator,
        clock: Clock,
        background: Background,
        period: float = RESYNC_SECONDS,
    ) -> None:
        self.state = state
        self.api = api
        self.claims = claims
        self.clock = clock
        self.background = background
        self.period = period
        self._resynced_at = clock()
        self._due = False
        self._running = False
        self._unusable: dict[str, str] = {}
        """Listed pods the cache refused, uid → version (see `take_unseen`)."""
        self._watches: dict[str, WatchMark] = {}
        """The watches of pods and Nodes, once `watching` was told them."""
        self._reconciled_lists: dict[str, int] = {}
        """Lists each watch had made when the last whole reconcile began: a watch that
        listed again since may have missed deletions that no list has told us yet."""

    def relisted(self) -> None:
        """A watch started over: Kopf lists afresh and reports what it finds, but never what
        was deleted while the watch was down. The cache is reconciled with a list at once,
        rather than at the next periodic resync (a ghost pod would hold its GPUs until
        then)."""
        self._due = True
        self.background.wake()

    def tick(self, now: float) -> None:
        """Starts a resync (in the background) when one is due and none runs."""
        due = self._due or now - self._resynced_at >= self.period
        if due and not self._running:
            self._resynced_at, self._due, self._running = now, False, True
            self.background.spawn(self._resync())

    async def _resync(self) -> None:
        """Reconciles the cache with fresh lists of pods and nodes (`_reconcile`), the cyclic
        garbage collector paused (`collector_paused`): a page of the list is thousands of dicts,
        none of them garbage while it is read, and the collector walked them several times per
        resync (2.3 of 2.7 CPU seconds at 5,000 nodes); they are freed by reference counting
        before it resumes."""
        with collector_paused():
            await self._reconcile()

    async def _reconcile(self) -> None:
        """Drops the pods and nodes the API server no longer has (such a pod would hold its
        GPUs, and count in its group's status; such a node would keep being offered to
        pods), adds those it has that no watch event showed us (a pod created while the pods
        watch was down would wait until its next change), and takes newer versions of the
        ones it knows (a change whose event never reached us). The lists may be a little
        behind the watches (they come from the server's watch cache): nothing newer than a
        list is ever replaced or dropped by it."""
        known = {key: record.uid for key, record in self.state.pods.items()}
        known_nodes = set(self.state.nodes)
        lists = self._lists_now()
        pods, nodes = Reading(), Reading()
        try:
            async for page in self.api.pages("pods", cached=True):
                self._take_pods_page(pods, page)
            async for page in self.api.pages("nodes", cached=True):
                nodes.version = nodes.version or page.version
                nodes.present.update((name_of(body), "") for body in page.items)
                nodes.taken += take_nodes(self.state, page.items)
        except ApiError as error:
            logger.warning("cannot list pods and nodes to reconcile the cache: %s", error)
            self._due = True
            return
        finally:
            self._running = False
        gone = forget_missing(self.state, known, pods.present, pods.version)
        names = {name for name, _ in nodes.present}
        gone += forget_missing_nodes(self.state, known_nodes, names, nodes.version)
        forget_unlisted(self._unusable, pods.present)
        self._reconciled_lists.update(lists)
        if gone:
            logger.info("deleted while a watch was down: %s", ", ".join(gone))
        if pods.taken:
            logger.info("created while a watch was down: %s", ", ".join(pods.taken))
        if pods.refreshed:
            logger.info("changed without a watch event reaching us: %s", ", ".join(pods.refreshed))
        if nodes.taken:
            logger.info("nodes the watch did not show as they are: %s", ", ".join(nodes.taken))
        if gone or pods.taken or pods.refreshed or nodes.taken:
            self.background.wake()

    def _take_pods_page(self, pods: Reading, page: Listing) -> None:
        """Takes one page of the pods' list in as it comes, so that the whole list is never
        held at once (the lists of 40,000 pods and 5,000 Nodes held 276 MB above the cache,
        every period; 19 MB page by page): forgetting what it lacks waits for the last
        page."""
        pods.version = pods.version or page.version
        listed = identify(page.items)
        pods.present.update(identities(listed))
        pods.taken += take_unseen(self.state, listed, pods.version, self._unusable)
        pods.refreshed += take_newer(self.state, listed)

    def watching(self, plural: str, watch: WatchMark) -> None:
        """``watch``: the replica's watch of ``plural`` (``"pods"`` or ``"nodes"``), whose
        position lets a new leader act before its lists are in (see `take_over`)."""
        self._watches[plural] = watch

    async def take_over(self, pods: AsyncIterable[Listing]) -> None:
        """Before its first bind, a new leader makes sure what it watched is as current as
        consistent lists of every pod and Node (``pods``: the pods' list, page by page, not
        yet asked for), and reads every group and DRA claim: the watch of a replica that was
        not acting may lag, and the old leader's last binds and claims must be counted.

        The lists are asked for at once and reconcile the cache as today's resync does; the
        take-over returns once each kind is vouched for (`_vouched`): its list is in, or its
        watch has shown everything up to the list's resourceVersion (the revision of the
        list's first page) without having started over since the cache was last reconciled.
        A standby's watches are warm: at 50,000 pods the pods' list took seconds that the
        first binds waited for, while its watch had long shown every bind of the old leader
        (whose last write went out a lease duration before). The lists are then given up:
        what they could still tell (a deletion or a change whose event never reached us,
        which no watch that did not start over misses) the next periodic resync tells, as
        it does for a leader at any time.

        This stands for the resync a watch's first list asked for (`relisted`): a second one
        at once would list everything again, on the loop, while the first decisions wait.
        The collector is paused meanwhile, as for `_resync`: collections walking the lists'
        objects as they were decoded took most of the time the decoding took.

        Pods and DRA objects that cannot be read raise `ApiError` (missing ones could
        double-book GPUs) unless the watches vouched first; Nodes and groups that cannot be
        read are left to the watch."""
        # A watch that starts over from now on may have missed what these lists show
        # already: its resync is still due afterwards.
        self._resynced_at, self._due = self.clock(), False
        vouched = {plural: max(1, self._reconciled_lists.get(plural, 0)) for plural in KINDS}
        lists = self._lists_now()
        known = {key: record.uid for key, record in self.state.pods.items()}
        known_nodes = set(self.state.nodes)
        reading = TakeOver()
        self._running = True
        listing = asyncio.ensure_future(self._take_lists(reading, pods, known, known_nodes, lists))
        with collector_paused():
            try:
                groups, *_ = await asyncio.gather(
                    self._groups(),
                    self.claims.resync(),  # DRA holdings come from the claims, never from memory
                    self._vouched(reading, listing, vouched),
                )
            except BaseException:
                listing.cancel()
                raise
            for group in groups:
                if source_of(str(group.get("apiVersion") or "")) is not None:
                    self.state.upsert_foreign(group)  # another project's group
                else:
                    self.state.upsert_group(GroupKind(group["kind"]), group)
        if not listing.done():
            # What the rest of the lists could still tell (an event that never reached us)
            # the next periodic resync tells, from the watch cache; read now, they would
            # hold the loop while the first decisions wait (4 s of 10,000 pods' pages).
            listing.cancel()
            logger.info(
                "leading %.3f s after asking for the lists, before they are in: the watches "
                "have shown their revisions (%s)",
                self.clock() - self._resynced_at,
                ", ".join(f"{plural} {reading.revisions.get(plural, '')}" for plural in KINDS),
            )

    async def _vouched(
        self, reading: TakeOver, listing: asyncio.Future[None], vouched: Mapping[str, int]
    ) -> None:
        """Returns once pods and Nodes are each vouched for: listed whole, or watched up to
        their list's revision by a watch that has not started over (listed again, and so
        perhaps missed a deletion) since the lists that last reconciled the cache began
        (``vouched``: the number of lists each watch may have made; its first misses
        nothing, the cache being empty before it). Raises what the pods' list raised, if it
        failed before its watch vouched for the pods."""
        if self._watches.keys() >= set(KINDS):
            while not listing.done():
                if all(self._current(plural, reading, vouched) for plural in KINDS):
                    return
                poll = asyncio.ensure_future(self.clock.sleep(CATCH_UP_POLL_SECONDS))
                try:
                    await asyncio.wait({listing, poll}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    poll.cancel()
        await listing

    def _current(self, plural: str, reading: TakeOver, vouched: Mapping[str, int]) -> bool:
        if plural in reading.done:
            return True
        watch = self._watches.get(plural)
        revision = reading.revisions.get(plural, "")
        if watch is None or not revision or watch.lists > vouched[plural]:
            return False
        return watch.version == revision or newer_than(watch.version, revision)

    def _lists_now(self) -> dict[str, int]:
        """How many lists each followed watch has made so far."""
        return {plural: watch.lists for plural, watch in self._watches.items()}

    async def _take_lists(
        self,
        reading: TakeOver,
        pods: AsyncIterable[Listing],
        known: Mapping[str, str],
        known_nodes: Collection[str],
        lists: Mapping[str, int],
    ) -> None:
        """The take-over's consistent lists of pods and Nodes, taken in page by page."""
        try:
            await asyncio.gather(
                self._take_nodes(known_nodes, reading),
                self._take_pods(pods, known, reading),
            )
        finally:
            self._running = False
        self._reconciled_lists.update(lists)

    async def _take_pods(
        self, pages: AsyncIterable[Listing], known: Mapping[str, str], reading: TakeOver
    ) -> None:
        """Takes each page in as it comes (`take_listed`), so that the whole list is never
        held at once, then forgets the pods of ``known`` that none of the pages had: only
        pods known before the list was asked for can be missing from it for being deleted
        (one the watch showed meanwhile may be newer than the list)."""
        present: set[tuple[str, str]] = set()
        async for page in pages:
            reading.revisions.setdefault("pods", page.version)
            listed = identify(page.items)
            take_listed(self.state, listed)
            present.update(identities(listed))
        gone = forget_missing(self.state, known, present)
        if gone:
            logger.info("deleted while a watch was down: %s", ", ".join(gone))
        reading.done.add("pods")

    async def _take_nodes(self, known: Collection[str], reading: TakeOver) -> None:
        """Takes each page of a consistent list of Nodes in as it comes, then forgets those
        of ``known`` (held before it was asked for) that it lacked: deleted while the watch
        was down. Nodes that cannot be listed are left to the watch: missing ones only make
        pods wait."""
        listed: set[str] = set()
        try:
            async for page in self.api.pages("nodes"):
                reading.revisions.setdefault("nodes", page.version)
                for body in page.items:
                    self.state.upsert_node(body)  # an unchanged version is not parsed again
                    listed.add(name_of(body))
        except ApiError as error:
            logger.warning("cannot list nodes; relying on the watch: %s", error)
            reading.done.add("nodes")
            return
        forget_missing_nodes(self.state, known, listed)
        reading.done.add("nodes")

    async def _groups(self) -> list[dict[str, Any]]:
        """Every group, for a new leader: a gang whose group the watch has not shown yet is
        no gang here, its bound pods would not pin it, nor its room go to it first (chaos
        seed 1401 in gangs mode). Groups that cannot be listed are left to the watch."""
        try:
            return await self.api.list_groups()
        except ApiError as error:
            logger.warning("cannot list groups; relying on the watch: %s", error)
            return []


@dataclass(slots=True)
class TakeOver:
    """How far a new leader's lists are (`Resync.take_over`)."""

    revisions: dict[str, str] = field(default_factory=dict)
    """Plural → the resourceVersion of its list (its first page's)."""
    done: set[str] = field(default_factory=set)
    """The plurals whose list is in (or failed, for Nodes: left to the watch)."""


@dataclass(slots=True)
class Reading:
    """What a resync has taken from the pages of one kind's list so far."""

    version: str = ""
    """The list's resourceVersion (its first page's)."""
    present: set[tuple[str, str]] = field(default_factory=set)
    """(key, uid) of each pod listed, or (name, "") of each Node."""
    taken: list[str] = field(default_factory=list)
    """Keys of the pods (names of the Nodes) taken because the cache lacked them, or held
    them at an older version (Nodes)."""
    refreshed: list[str] = field(default_factory=list)
    """Keys of the known pods taken at a newer version."""


@dataclass(frozen=True, slots=True)
class Listed:
    """A listed pod's identity, read from its body once per resync (40,000 of them)."""

    key: str
    uid: str
    version: str
    body: Mapping[str, Any]


def identify(bodies: Iterable[Mapping[str, Any]]) -> list[Listed]:
    listed = []
    for body in bodies:
        metadata = metadata_of(body)
        key = f"{metadata.get('namespace') or 'default'}/{metadata.get('name') or ''}"
        uid = str(metadata.get("uid") or "")
        listed.append(Listed(key, uid, str(metadata.get("resourceVersion") or ""), body))
    return listed


def take_listed(state: ClusterState, listed: Iterable[Listed]) -> None:
    """Takes every listed pod but those held at the very version listed (the watch showed
    them: nothing to parse, nor to fingerprint), for a new leader. Unlike `take_newer`, a
    version that cannot be ordered is taken: a consistent list is never older than what a
    replica watched before asking for it, and `ClusterState.upsert_pod` refuses what it
    knows to be older."""
    for item in listed:
        before = state.pods.get(item.key)
        if before is not None and before.uid == item.uid and item.version == before.version:
            continue
        state.upsert_pod(item.body)


def take_newer(state: ClusterState, listed: Iterable[Listed]) -> list[str]:
    """Takes the listed versions of known pods that are newer than the ones we hold (a
    watch event that never reached us), and returns their keys."""
    taken = []
    for item in listed:
        before = state.pods.get(item.key)
        if before is None or before.uid != item.uid or not newer_than(item.version, before.version):
            continue
        state.upsert_pod(item.body)
        taken.append(item.key)
    return taken


def take_unseen(
    state: ClusterState,
    listed: Iterable[Listed],
    listed_at: str = "",
    unusable: dict[str, str] | None = None,
) -> list[str]:
    """Adds the listed pods the cache does not hold (created while the pods watch was down,
    or behind a silent one), and returns their keys. A pod known to be deleted is not taken
    back (`ClusterState.gone`), nor one listed under the name of a pod we hold that is
    newer than the list (the watch showed its replacement after the list was read).
    ``unusable`` (uid → version) remembers the pods the cache refused (another scheduler's
    that do not parse): they are not parsed, nor reported, again until they change."""
    taken = []
    unusable = {} if unusable is None else unusable
    for item in listed:
        before = state.pods.get(item.key)
        if item.uid in state.gone or (before is not None and before.uid == item.uid):
            continue
        if (before is not None and newer_than(before.version, listed_at)) or (
            item.version and unusable.get(item.uid) == item.version
        ):
            continue
        state.upsert_pod(item.body)
        if item.key in state.pods and state.pods[item.key].uid == item.uid:
            taken.append(item.key)
        elif item.uid:
            unusable[item.uid] = item.version
    return taken


def forget_unlisted(unusable: dict[str, str], present: Iterable[tuple[str, str]]) -> None:
    """Forgets the refused pods of ``unusable`` (see `take_unseen`) that a whole list no
    longer has (``present``: the `identities` of what it has): gone, never listed again."""
    for uid in unusable.keys() - {uid for _, uid in present}:
        del unusable[uid]


def newer_than(version: str, listed_at: str) -> bool:
    """Whether an object at ``version`` was seen after a list at ``listed_at`` was read:
    etcd's revisions compared as numbers, as every kube-apiserver has them; unknown (not
    numbers) is not newer."""
    return version.isdigit() and listed_at.isdigit() and int(version) > int(listed_at)


def identities(listed: Iterable[Listed]) -> set[tuple[str, str]]:
    """The (key, uid) of each listed pod, for `forget_missing`."""
    return {(item.key, item.uid) for item in listed}


def forget_missing(
    state: ClusterState,
    known: Mapping[str, str],
    present: Collection[tuple[str, str]],
    listed_at: str = "",
) -> list[str]:
    """Deletes the pods of ``known`` (key → uid, taken before the list was read) that the
    list no longer has (``present``: the `identities` of what it has), and returns their
    keys. A pod that appeared after ``known`` was taken, or that we hold at a version newer
    than the list (``listed_at``: a list from the watch cache may be behind our watch), may
    be missing from it for that reason alone, so only the others are candidates."""
    gone = [
        key
        for key, uid in known.items()
        if (key, uid) not in present
        and key in state.pods
        and state.pods[key].uid == uid
        and not newer_than(state.pods[key].version, listed_at)
    ]
    for key in gone:
        state.delete_pod(key, known[key])
    return gone


def forget_missing_nodes(
    state: ClusterState, known: Iterable[str], listed: Collection[str], listed_at: str = ""
) -> list[str]:
    """Deletes the nodes of ``known`` (names taken before the list was read) that it no
    longer has (``listed``: the names it has), unless we hold them at a version newer than
    the list (``listed_at``); returns their names."""
    gone = sorted(
        name
        for name in known
        if name not in listed
        and name in state.nodes
        and not newer_than(state.node_versions.get(name, ""), listed_at)
    )
    for name in gone:
        state.delete_node(name)
    return gone


def take_nodes(state: ClusterState, bodies: Iterable[Mapping[str, Any]]) -> list[str]:
    """Takes the listed Nodes the cache does not hold, or holds at an older version, and
    returns their names. An unchanged node costs a string comparison (the cache keeps each
    node's version)."""
    taken = []
    for body in bodies:
        name = name_of(body)
        version = str(metadata_of(body).get("resourceVersion") or "")
        held = state.node_versions.get(name)
        if name in state.nodes and (held == version or not newer_than(version, held or "")):
            continue
        state.upsert_node(body)
        if name in state.nodes:  # a malformed one is reported by `upsert_node`, once
            taken.append(name)
    return taken

"""Reconciling the cache with the API server: a fresh list when a replica takes the lead, one
at once when a watch starts over, and one every ``RESYNC_SECONDS`` while it leads."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Iterable, Mapping
from typing import Any

from gpusched.scheduler.clock import Clock
from gpusched.scheduler.dra.allocator import ClaimAllocator
from gpusched.scheduler.ports import ApiError, ClusterApi
from gpusched.scheduler.records import metadata_of, name_of, namespace_of, version_order
from gpusched.scheduler.state import ClusterState
from gpusched.scheduler.tasks import Background

logger = logging.getLogger(__name__)

RESYNC_SECONDS = 30.0
"""How often the leader lists every pod and node to drop those the API server no longer has
(see `Resync.tick`); nothing is parsed again, so a resync costs about one list. A watch that
starts over triggers one at once (`Resync.relisted`); this period bounds how long a deletion
can go unseen otherwise."""


class Resync:
    """``period``: seconds between two periodic resyncs (`RESYNC_SECONDS`)."""

    def __init__(
        self,
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
        """Reconciles the cache with a fresh list: drops the pods and nodes the API server no
        longer has (such a pod would hold its GPUs, and count in its group's status; such a
        node would keep being offered to pods), and takes newer versions of the pods it knows
        (a change whose watch event never reached us). Pods the watch never delivered at all
        are not taken from the list yet: doing so broke a chaos invariant in testing."""
        known = {key: record.uid for key, record in self.state.pods.items()}
        known_nodes = set(self.state.nodes)
        try:
            bodies = await self.api.list_pods()
            node_bodies = await self.api.list_nodes()
        except ApiError as error:
            logger.warning("cannot list pods and nodes to reconcile the cache: %s", error)
            self._due = True
            return
        finally:
            self._running = False
        gone = forget_missing(self.state, known, bodies)
        gone += forget_missing_nodes(self.state, known_nodes, node_bodies)
        if gone:
            logger.info("deleted while a watch was down: %s", ", ".join(gone))
            self.background.wake()
        if refreshed := take_newer(self.state, bodies):
            logger.info("changed without a watch event reaching us: %s", ", ".join(refreshed))
            self.background.wake()

    async def take_over(self, pods: Awaitable[list[dict[str, Any]]]) -> None:
        """Before its first bind, a new leader replaces what it watched with a fresh list of
        every pod: the watch of a replica that was not acting may lag, and the old leader's
        last binds must be counted."""
        known = {key: record.uid for key, record in self.state.pods.items()}
        bodies = await pods
        try:
            for node in await self.api.list_nodes():
                self.state.upsert_node(node)  # deletions are left to the periodic resync
        except ApiError as error:
            # Missing nodes only make pods wait; missing pods could double-book GPUs.
            logger.warning("cannot list nodes; relying on the watch: %s", error)
        await self.claims.resync()  # DRA holdings come from the claims, never from memory
        for body in bodies:
            self.state.upsert_pod(body)
        # Only pods known before the list was asked for can be missing from it for being
        # deleted: one the watch showed meanwhile may be newer than the list.
        forget_missing(self.state, known, bodies)
        self._resynced_at = self.clock()


def take_newer(state: ClusterState, bodies: Iterable[Mapping[str, Any]]) -> list[str]:
    """Takes the listed versions of known pods that are newer than the ones we hold (a
    watch event that never reached us), and returns their keys. Pods we do not know are
    left to the watch."""
    taken = []
    for body in bodies:
        key = f"{namespace_of(body)}/{name_of(body)}"
        before = state.pods.get(key)
        if before is None or version_order(body, before) <= 0:
            continue
        state.upsert_pod(body)
        taken.append(key)
    return taken


def forget_missing(
    state: ClusterState, known: Mapping[str, str], bodies: Iterable[Mapping[str, Any]]
) -> list[str]:
    """Deletes the pods of ``known`` (key → uid, taken before ``bodies`` was listed) that
    the list no longer has, and returns their keys. A pod that appeared after ``known``
    was taken may be missing from an older list, so only those are candidates."""
    listed = {
        (f"{namespace_of(b)}/{name_of(b)}", str(metadata_of(b).get("uid") or "")) for b in bodies
    }
    gone = [
        key
        for key, uid in known.items()
        if (key, uid) not in listed and key in state.pods and state.pods[key].uid == uid
    ]
    for key in gone:
        state.delete_pod(key, known[key])
    return gone


def forget_missing_nodes(
    state: ClusterState, known: Iterable[str], bodies: Iterable[Mapping[str, Any]]
) -> list[str]:
    """Deletes the nodes of ``known`` (names taken before ``bodies`` was listed) that the
    list no longer has, and returns their names."""
    listed = {name_of(b) for b in bodies}
    gone = sorted(n for n in known if n not in listed and n in state.nodes)
    for name in gone:
        state.delete_node(name)
    return gone

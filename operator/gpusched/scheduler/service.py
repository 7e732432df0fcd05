"""The scheduling service as the handlers see it: one method per watch or leadership event.

`Scheduler` owns nothing of its own: it hands each event to the collaborator whose job it is
(`build_scheduler` in `gpusched.scheduler.factory` wires them):

- `SchedulingLoop` (`loop`): the cycles — queue, decide, act, report.
- `Leadership` (`leadership`): whether this replica may act, and in which term.
- `Resync` (`resync`): the fresh lists that reconcile the cache with the API server.
- `Binder` (`binder`): reserve and bind.
- `UnknownBinds` (`unknown`): binds whose outcome is unknown, read back and sent again.
- `Backoff` (`backoff`): groups waiting after a failed attempt.
- `Materializer` (`workloads`): the groups Workloads describe.
- `Reporter` (`reporter`): status, Events and their outbox.
- `ClaimAllocator` (`dra`): the DRA objects and the claims written for a gang.
- `FirstRead` (`first_read`): a new term's first telemetry read, awaited before deciding.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterable, Coroutine, Mapping
from typing import Any

from gpusched.engine.groups import GroupKind
from gpusched.scheduler.backoff import Backoff
from gpusched.scheduler.clock import Clock
from gpusched.scheduler.dra.allocator import ClaimAllocator
from gpusched.scheduler.firstread import FirstRead
from gpusched.scheduler.leadership import Leadership
from gpusched.scheduler.loop import SchedulingLoop
from gpusched.scheduler.ports import ApiError, ClusterApi, Listing
from gpusched.scheduler.records import name_of
from gpusched.scheduler.reporter import Reporter
from gpusched.scheduler.resync import Resync
from gpusched.scheduler.state import ClusterState
from gpusched.scheduler.tasks import Background
from gpusched.scheduler.unknown import UnknownBinds

logger = logging.getLogger(__name__)

LIST_RETRY_SECONDS = (0.5, 10.0)
"""A new leader that cannot list the cluster tries again after the first delay, doubling up
to the second."""


class Scheduler:
    def __init__(
        self,
        *,
        state: ClusterState,
        api: ClusterApi,
        clock: Clock,
        background: Background,
        leadership: Leadership,
        resync: Resync,
        loop: SchedulingLoop,
        unknown: UnknownBinds,
        backoff: Backoff,
        reporter: Reporter,
        claims: ClaimAllocator,
        first_read: FirstRead,
    ) -> None:
        self.state = state
        self.api = api
        self.clock = clock
        self.background = background
        self.leadership = leadership
        self.resync = resync
        self.loop = loop
        self.unknown = unknown
        self.backoff = backoff
        self.reporter = reporter
        self.claims = claims
        self.first_read = first_read

    # ----- running ----------------------------------------------------------------------------

    async def run(self) -> None:
        """Runs cycles until cancelled (see `SchedulingLoop.run`)."""
        await self.loop.run()

    async def cycle(self) -> None:
        """One cycle now (tests and the chaos runner drive cycles themselves)."""
        await self.loop.cycle()

    @property
    def cycles(self) -> int:
        return self.loop.cycles

    def wake(self) -> None:
        """Something changed: run a cycle soon."""
        self.background.wake()

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Runs ``work`` as a task the service owns (awaited by `settle`, cancelled at exit)."""
        self.background.spawn(work)

    async def settle(self) -> None:
        """Waits for the binds (and their follow-ups) in flight now."""
        await self.background.settle()

    @property
    def idle(self) -> bool:
        """No bind in flight, no status waiting to be written (for tests and shutdown)."""
        return (
            not self.background.running
            and not self.state.ledger.reservations
            and self.reporter.idle
        )

    # ----- leadership -------------------------------------------------------------------------

    def may_write(self) -> bool:
        """See `Leadership.may_write` (the API client's fence)."""
        return self.leadership.may_write()

    def lost_leadership(self) -> None:
        self.leadership.lost()

    async def take_leadership(self, pods: AsyncIterable[Listing]) -> None:
        """Reads the cluster afresh (``pods``: the list of every pod, page by page), and the
        telemetry joined with it (bounded: `FirstRead`), then acts."""
        await self.resync.take_over(pods)
        await self.first_read.wait()
        self.loop.decider.telemetry_changed()
        self.unknown.adopt()
        self.leadership.synced()
        self.reporter.leading()
        self.wake()

    async def lead(self) -> None:
        """Lists pods and nodes until it works, then acts: the watches start at the same
        time, and a decision made before both lists are in could see free GPUs that bound
        pods hold."""
        delay, longest = LIST_RETRY_SECONDS
        while True:
            try:
                await self.take_leadership(self.api.pages("pods"))
                logger.info("leading: pods and nodes listed, scheduling")
                return
            except ApiError as error:
                logger.warning("cannot list the cluster yet (%s); retrying in %.1f s", error, delay)
                await self.clock.sleep(delay)
                delay = min(delay * 2, longest)

    # ----- watch events -----------------------------------------------------------------------

    def node_changed(self, body: Mapping[str, Any]) -> None:
        self.state.upsert_node(body)
        node = self.state.nodes.get(name_of(body))
        if node is not None:
            self.reporter.node_seen(node, self.claims.view.node_devices(node))
        self.wake()

    def node_deleted(self, name: str) -> None:
        self.state.delete_node(name)
        self.reporter.node_gone(name)
        self.wake()

    def pod_changed(self, body: Mapping[str, Any], *, listed: bool = False) -> None:
        """``listed``: the body comes from a (re)started watch's list, which never tells
        what was deleted meanwhile (see `Resync.relisted`)."""
        self.state.upsert_pod(body)
        if listed:
            self.resync.relisted()
        self.wake()

    def pod_deleted(self, key: str, uid: str | None) -> None:
        self.state.delete_pod(key, uid)
        self.reporter.pod_gone(uid or "")
        self.wake()

    def relisted(self) -> None:
        self.resync.relisted()

    def group_changed(self, kind: GroupKind, body: Mapping[str, Any]) -> None:
        if self.state.upsert_group(kind, body):
            self.wake()  # a status-only update changes nothing to decide

    def foreign_group_changed(self, body: Mapping[str, Any]) -> None:
        """An upstream, Volcano or coscheduling group object (`gpusched.api.foreign`)."""
        if self.state.upsert_foreign(body):
            self.wake()

    def owner_changed(self, api_version: str, kind: str, body: Mapping[str, Any]) -> None:
        """A Job, JobSet, RayCluster, … (owner groups, `gpusched.scheduler.ownergroups`)."""
        self.state.owner_changed(api_version, kind, body)  # kept for a namespace labelled later
        if self.state.owner_groups.active:
            self.wake()

    def owner_deleted(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        self.state.owner_deleted(api_version, kind, namespace, name)
        if self.state.owner_groups.active:
            self.wake()

    def namespace_changed(self, name: str, labels: Mapping[str, str] | None) -> None:
        """A Namespace's labels (None: it is gone): owner groups on or off there."""
        if self.state.namespace_labelled(name, labels):
            self.wake()

    def group_deleted(self, key: str) -> None:
        self.reporter.group_gone(key)
        self.state.delete_group(key)
        self.backoff.clear(key)
        self.wake()

    def priority_class_changed(self, body: Mapping[str, Any]) -> None:
        self.state.upsert_priority_class(body)
        self.wake()

    def priority_class_deleted(self, name: str) -> None:
        self.state.delete_priority_class(name)
        self.wake()

    def budget_changed(self, body: Mapping[str, Any]) -> None:
        self.state.budgets.upsert(body)
        self.wake()

    def budget_deleted(self, key: str) -> None:
        self.state.budgets.delete(key)
        self.wake()

    def workload_changed(self, body: Mapping[str, Any]) -> None:
        self.state.upsert_workload(body)
        self.wake()

    def workload_deleted(self, key: str) -> None:
        self.state.delete_workload(key)

    def slice_changed(self, body: Mapping[str, Any]) -> None:
        self.claims.book.upsert_slice(body)
        self._devices_changed(body.get("spec", {}).get("nodeName"))
        self.wake()

    def slice_deleted(self, name: str) -> None:
        gone = self.claims.book.slices.get(name)
        self.claims.book.delete_slice(name)
        self._devices_changed(gone.spec.node_name if gone is not None else None)
        self.wake()

    def _devices_changed(self, node_name: object) -> None:
        """A node's DRA devices changed: whether they match its topology is judged again."""
        node = self.state.nodes.get(node_name) if isinstance(node_name, str) else None
        if node is not None:
            self.reporter.node_seen(node, self.claims.view.node_devices(node))

    def device_class_changed(self, body: Mapping[str, Any]) -> None:
        self.claims.book.upsert_class(body)
        self.wake()

    def device_class_deleted(self, name: str) -> None:
        self.claims.book.delete_class(name)
        self.wake()

    def claim_changed(self, body: Mapping[str, Any]) -> None:
        self.claims.book.upsert_claim(body)
        self.wake()

    def claim_deleted(self, key: str) -> None:
        self.claims.book.delete_claim(key)
        self.wake()

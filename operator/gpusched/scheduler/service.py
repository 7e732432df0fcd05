"""The scheduling loop: one loop, not a handler per pod racing the others.

Each cycle:
1. Workloads: create the groups their templates describe that do not exist yet.
2. Queue: take our pending pods, drop those whose root group is backing off after a failed
   attempt (a change that frees capacity cuts the wait short).
3. Decide: build a snapshot from the watched state plus the reservation ledger and run the
   engine on it (in a worker thread, so watches keep flowing). The engine orders work by
   priority then age, places each root group completely or not at all, and never lets a group
   that cannot fit hold anything, so it never blocks smaller groups behind it.
4. Reserve and bind: every binding is reserved in the ledger before its request is sent; a
   gang's binds go out concurrently (bounded). A bind that failed keeps its reservation and
   is sent again, the same pod to the same node and GPUs, with backoff: a gang that has
   started binding owns its room, and a bind whose outcome is unknown (no answer, a
   timeout, a 5xx: the server may still commit it) is harmless to repeat and harmful to
   give away. The room is released only when the pod is gone, shown bound, replaced, or
   definitively refused (a 4xx), or when its node is gone; the pod is then pending again
   and the engine, seeing the group's other pods bound, places it inside the group's
   domain.
5. Report: group and Workload status from what the pods show, Events aggregated.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gpusched.api.config import BIND_TIMEOUT_SECONDS, SchedulerConfig
from gpusched.api.crds import (
    API_VERSION,
    DEFAULT_SCHEDULE_TIMEOUT_SECONDS,
    REASON_INVALID,
    CompositePodGroup,
    GroupStatus,
    PodGroup,
)
from gpusched.api.k8s import GPUS_ANNOTATION
from gpusched.engine.groups import GroupKind
from gpusched.engine.request import PodRequest
from gpusched.engine.result import Binding, GroupDecision, Phase, Reason, ScheduleResult
from gpusched.engine.schedule import schedule
from gpusched.engine.snapshot import GpuSample, SnapshotCache, build_snapshot
from gpusched.scheduler import metrics, quality_metrics
from gpusched.scheduler.dra.allocator import ClaimAllocator, ClaimWrite
from gpusched.scheduler.dra.book import ClaimApi, ClaimBook
from gpusched.scheduler.dra.builder import DraView
from gpusched.scheduler.dra.release import ClaimReleaser
from gpusched.scheduler.dra.view import View, held_claims
from gpusched.scheduler.events import EventRecorder
from gpusched.scheduler.outbox import StatusOutbox
from gpusched.scheduler.ports import ApiError, ClusterApi, Fence, FencedError, ObjectRef
from gpusched.scheduler.state import ClusterState, GroupRecord, PodRecord, Reservation
from gpusched.scheduler.status import (
    REASON_BINDING,
    REASON_DEGRADED,
    Attempt,
    Counts,
    Partial,
    composite_phase,
    count,
    group_status,
    materialized_condition,
    placement,
    pod_group_phase,
    workload_status,
)

logger = logging.getLogger(__name__)

Telemetry = Callable[[], Mapping[tuple[str, int], GpuSample] | None]
TELEMETRY_HOLD_SECONDS = 1.0
"""One telemetry mapping serves the cycles of this many seconds. The snapshot cache rebuilds
its static part when the mapping changes, so taking a fresh one every cycle would rebuild it
every cycle; holding it longer would understate ages (and a GPU would look fresher than its
data) by more than this."""
CREATE_GRACE_SECONDS = 30.0
"""How long a group created for a Workload may take to show up in the watch before it is
created again (a 409 then says it exists after all)."""
QUALITY_SECONDS = 5.0
"""The placement-quality gauges are refreshed at most this often, and at least this often
while this replica leads (one measurement takes about 6 ms at 5,000 nodes)."""
RESYNC_SECONDS = 30.0
"""How often the leader lists every pod and node to drop those the API server no longer has
(see `Scheduler._resync`); nothing is parsed again, so a resync costs about one list. A
watch that starts over triggers one at once (`Scheduler.relisted`); this period bounds how
long a deletion can go unseen otherwise."""
REFUSED = frozenset({400, 403, 422})
"""Answers to a bind that say it was not applied and never will be as sent: its room is
released. 404 and 409 are read back (the pod may be gone, replaced or bound already); every
other failure, an unanswered bind included, is retried as it was."""


@dataclass(slots=True)
class _Backoff:
    failures: int = 0
    failed_at: float = 0.0
    next_try: float = 0.0
    capacity_seen: int = 0


@dataclass(slots=True)
class _Retry:
    """A bind to send again (or, with ``read_first``, a pod to read back first)."""

    ref: ObjectRef
    reservation: Reservation
    root: str
    attempts: int
    next_try: float
    read_first: bool = False


def _pod_ref(record: PodRecord) -> ObjectRef:
    meta = record.pod.metadata
    return ObjectRef("v1", "Pod", meta.namespace, meta.name, record.uid)


def _reserved_ref(key: str, reservation: Reservation) -> ObjectRef:
    namespace, name = key.split("/", 1)
    return ObjectRef("v1", "Pod", namespace, name, reservation.uid)


def _group_ref(record: GroupRecord) -> ObjectRef:
    namespace, name = record.spec.key.split("/", 1)
    return ObjectRef(API_VERSION, record.spec.kind.value, namespace, name, record.uid)


class Scheduler:
    def __init__(
        self,
        config: SchedulerConfig,
        state: ClusterState,
        api: ClusterApi,
        telemetry: Telemetry | None = None,
        clock: Callable[[], float] = time.monotonic,
        leading: Callable[[], bool] | None = None,
        claims: ClaimApi | None = None,
    ) -> None:
        self.config = config
        self.state = state
        self.api = api
        self.telemetry: Telemetry = telemetry or (lambda: None)
        self._held_telemetry: tuple[float, Mapping[tuple[str, int], GpuSample] | None] | None = None
        self.clock = clock
        self.settings = config.operator
        self.recorder = EventRecorder(api, self.settings.status_refresh_seconds, clock)
        self.outbox = StatusOutbox(api, self.settings.status_refresh_seconds, clock)
        self._wake = asyncio.Event()
        self._slots = asyncio.Semaphore(self.settings.bind_concurrency)
        self._backoff: dict[str, _Backoff] = {}
        self._attempts: dict[str, Attempt] = {}
        self._binding: dict[str, set[str]] = defaultdict(set)
        """Root key → pods whose bind is in flight (for the gang latency metric)."""
        self._retries: dict[str, _Retry] = {}
        """Reserved pods whose bind failed without a final answer: sent again when due."""
        self._sent_at: dict[str, float] = {}
        """When the latest bind of each reserved pod went out (our clock)."""
        self._term = 0
        """Bumped whenever this replica stops leading: a decision belongs to the term it was
        made in, and its binds are fenced to that term."""
        self._creating: dict[str, float] = {}
        """Groups created for a Workload, by when: not created again until the watch shows
        them (or, should it never, for ``CREATE_GRACE_SECONDS``)."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._groups_seen = -1
        self.leading: Callable[[], bool] = leading or (lambda: True)
        """Only the Lease holder decides, binds and writes (see `gpusched.scheduler.leader`)."""
        self._synced = leading is None
        """A new leader acts only once its state was read afresh from the API."""
        self._snapshots = SnapshotCache()
        self._quality_at = float("-inf")
        self._placed: list[Binding] = []
        """Bindings reserved since the last quality measurement (counted by link tier)."""
        self.resync_seconds = RESYNC_SECONDS
        self._resynced_at = clock()
        self._resync_due = False
        self._resyncing = False
        self.cycles = 0
        book = ClaimBook()
        self.claims = ClaimAllocator(
            book, DraView(book), ClaimReleaser(book, claims), claims, lambda: self.leading()
        )
        """DRA: ResourceClaims allocated before binds, and read back as the GPU ledger."""
        self._view: View | None = None

    # ----- running -----------------------------------------------------------------------------

    def wake(self) -> None:
        """Something changed: run a cycle soon."""
        self._wake.set()

    async def run(self) -> None:
        """Runs cycles until cancelled; a failing cycle is logged and retried, never fatal."""
        helpers = [asyncio.create_task(self.recorder.run()), asyncio.create_task(self.outbox.run())]
        try:
            while True:
                await self._sleep_until_needed()
                try:
                    await self.cycle()
                except Exception:
                    metrics.ATTEMPTS.labels("error").inc()
                    logger.exception("scheduling cycle failed; retrying")
                    await asyncio.sleep(self.settings.initial_backoff_seconds)
                    self.wake()
        finally:
            for task in [*helpers, *self._tasks]:
                task.cancel()
            await asyncio.gather(*helpers, *self._tasks, return_exceptions=True)

    async def _sleep_until_needed(self) -> None:
        delay = self._next_retry() - self.clock()
        if delay > 0 and not self._wake.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)
        self._wake.clear()
        if self.settings.batch_window_seconds:
            # Let the rest of a burst (a gang's pods created together) arrive first.
            await asyncio.sleep(self.settings.batch_window_seconds)

    def _next_retry(self) -> float:
        upcoming = [b.next_try for b in self._backoff.values()]
        upcoming += [r.next_try for r in self._retries.values()]
        return min(upcoming, default=self._quality_at + QUALITY_SECONDS)

    def relisted(self) -> None:
        """A watch started over: Kopf lists afresh and reports what it finds, but never what
        was deleted while the watch was down. The cache is reconciled with a list at once,
        rather than at the next periodic resync (a ghost pod would hold its GPUs until
        then)."""
        self._resync_due = True
        self.wake()

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
            self._resync_due = True
            return
        finally:
            self._resyncing = False
        gone = self.state.forget_missing(known, bodies)
        gone += self.state.forget_missing_nodes(known_nodes, node_bodies)
        if gone:
            logger.info("deleted while a watch was down: %s", ", ".join(gone))
            self.wake()
        if refreshed := self.state.refresh(bodies):
            logger.info("changed without a watch event reaching us: %s", ", ".join(refreshed))
            self.wake()

    async def settle(self) -> None:
        """Waits for the binds (and their follow-ups) in flight now."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    @property
    def idle(self) -> bool:
        """No bind in flight, no status waiting to be written (for tests and shutdown)."""
        return not self._tasks and not self.state.reservations and self.outbox.idle

    # ----- one cycle ---------------------------------------------------------------------------

    def may_write(self) -> bool:
        """Whether this replica may write to the cluster now: it leads, within its renew
        deadline, and has read the cluster afresh since it took the Lease. The API client
        asks this at the moment each write goes out (`gpusched.k8s.client`)."""
        return self._synced and self.leading()

    def _fence(self, term: int) -> Fence:
        """`may_write`, and only in ``term``: a decision made in an earlier term (before a
        stop, say) is never bound in a later one, whose fresh list it did not see."""
        return lambda: self._term == term and self.may_write()

    def lost_leadership(self) -> None:
        self._synced = False
        self._term += 1
        self.outbox.reset()
        self.recorder.reset()
        quality_metrics.default().clear()

    async def take_leadership(self, pods: Awaitable[list[dict[str, Any]]]) -> None:
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
        self.state.forget_missing(known, bodies)
        self._keep_or_drop_old_reservations()
        self._synced = True
        self._resynced_at = self.clock()
        self.wake()

    def _keep_or_drop_old_reservations(self) -> None:
        """Reservations left from an earlier term are binds whose outcome was unknown. The
        fresh list shows most of them bound (dropped by `ClusterState.upsert_pod`) or gone.
        One still pending whose last bind went out more than the bind timeout ago can no
        longer land (the server commits a write within that, or never), so its room is
        released: another leader may have promised it since. One sent more recently is
        read back and sent again, unless another pod holds its GPUs now."""
        now = self.clock()
        for key, reservation in list(self.state.reservations.items()):
            sent = self._sent_at.get(key, float("-inf"))
            if now - sent > BIND_TIMEOUT_SECONDS or self.state.taken_by_others(key, reservation):
                self._retries.pop(key, None)
                self.state.release(key, reservation)
            elif key not in self._retries:
                root = self._root(reservation.request)
                ref = _reserved_ref(key, reservation)
                self._retries[key] = _Retry(ref, reservation, root, 1, now, read_first=True)

    async def cycle(self) -> None:
        if not (self._synced and self.leading()):
            return
        self.cycles += 1
        now = self.clock()
        term = self._term
        self._send_retries(now, term)
        due = self._resync_due or now - self._resynced_at >= self.resync_seconds
        if due and not self._resyncing:
            self._resynced_at, self._resync_due, self._resyncing = now, False, True
            self.spawn(self._resync())
        wall = datetime.now(UTC)
        self._materialize()
        ready, roots = self._queue(now)
        groups_changed = self.state.groups_generation != self._groups_seen
        if ready or groups_changed:
            self._groups_seen = self.state.groups_generation
            result = await self._decide(ready)
            if term != self._term:
                return  # leadership changed while the engine ran: the decision is stale
            self._apply(result, roots, now, wall, term)
        self._report(wall)
        metrics.RESERVED_GPUS.set(self.state.reserved_gpus())
        self._measure_quality(now)

    def _measure_quality(self, now: float) -> None:
        """Placement-quality gauges, measured here rather than concurrently: building a
        snapshot through the shared cache while `schedule` copies it in its thread is unsafe."""
        if now - self._quality_at < QUALITY_SECONDS:
            return
        self._quality_at = now
        snapshot = build_snapshot(
            self.state.nodes.values(),
            list(self.state.bound()),
            self._telemetry(),
            self.config,
            self._snapshots,
        )
        quality_metrics.update(snapshot, self.config, self._placed)
        self._placed.clear()

    def _queue(self, now: float) -> tuple[list[PodRequest], set[str]]:
        """Pending pods not backing off, and the roots they belong to."""
        ready: list[PodRequest] = []
        roots: set[str] = set()
        waiting: set[str] = set()
        created: list[float] = []
        started = self._started_roots()
        for record in self.state.pending():
            if record.request is None:
                self.recorder.record(
                    _pod_ref(record),
                    "Warning",
                    "FailedScheduling",
                    f"{REASON_INVALID}: {record.error}",
                )
                continue
            root = self._root(record.request)
            waiting.add(root)
            created.append(record.request.created)
            if root not in started and self._backing_off(root, now):
                continue  # (a gang that has started binding never waits behind newcomers)
            request = record.request
            if root in started:
                # Its gang has started binding: it comes before newcomers of its priority
                # (the engine orders by priority, then age).
                request = dataclasses.replace(request, created=0.0)
            ready.append(request)
            roots.add(root)
        metrics.PENDING_GROUPS.set(len(waiting))
        quality_metrics.default().pending(created, time.time())
        return ready, roots

    def _started_roots(self) -> set[str]:
        """Roots of gangs with a pod bound or reserved."""
        roots = set()
        for record in self.state.pods.values():
            request = record.request
            if request is not None and request.group is not None and record.node is not None:
                roots.add(self._root(request))
        for reservation in self.state.reservations.values():
            if reservation.request.group is not None:
                roots.add(self._root(reservation.request))
        return roots

    def _root(self, request: PodRequest) -> str:
        if request.group is None:
            return request.key
        return self.state.root_of(f"{request.namespace}/{request.group}")

    def _backing_off(self, root: str, now: float) -> bool:
        backoff = self._backoff.get(root)
        if backoff is None:
            return False
        if backoff.capacity_seen != self.state.capacity_generation:
            # Room was freed since the failure: retry after the shortest delay.
            backoff.capacity_seen = self.state.capacity_generation
            backoff.next_try = min(
                backoff.next_try, backoff.failed_at + self.settings.initial_backoff_seconds
            )
        return now < backoff.next_try

    async def _decide(self, ready: list[PodRequest]) -> ScheduleResult:
        started = self.clock()
        view = self.claims.view.build(
            self.state.nodes.values(), self.state.bound(), ready, self.state.pods, self.claims.busy
        )
        snapshot = build_snapshot(
            view.nodes, view.bound, self._telemetry(), self.config, self._snapshots
        )
        groups = self.state.group_specs()
        result = await asyncio.to_thread(schedule, snapshot, view.ready, groups)
        view.amend(result)
        for claim, uid, version in view.stale:
            self.spawn(self.claims.releaser.release_stale(claim, uid, version))
        for mismatch in view.mismatches:
            if (record := self.state.pods.get(mismatch.pod)) is not None:
                self.recorder.record(
                    _pod_ref(record), "Warning", "GPUAssignmentMismatch", mismatch.message
                )
        self._view = view
        metrics.DECISION_SECONDS.observe(self.clock() - started)
        return result

    def _telemetry(self) -> Mapping[tuple[str, int], GpuSample] | None:
        now = self.clock()
        held = self._held_telemetry
        if held is None or now - held[0] >= TELEMETRY_HOLD_SECONDS:
            held = self._held_telemetry = (now, self.telemetry())
        return held[1]

    # ----- acting on a decision ----------------------------------------------------------------

    def _apply(
        self, result: ScheduleResult, roots: set[str], now: float, wall: datetime, term: int
    ) -> None:
        for decision in result.groups:
            root = self.state.root_of(decision.name)
            if root in roots or not self._backing_off(root, now):
                self._attempts[decision.name] = _attempt(decision, wall)
            if decision.name == root and root in roots:
                self._root_outcome(decision, now)
        for failure in result.unschedulable:
            record = self.state.pods.get(failure.pod)
            if record is None or failure.reason is Reason.WAITING_FOR_PODS:
                continue
            self.recorder.record(_pod_ref(record), "Warning", "FailedScheduling", failure.message)
            if record.request is not None and record.request.group is None:
                logger.info(
                    "pod %s not placed (%s): %s", failure.pod, failure.reason, failure.message
                )
                self._failed(failure.pod, now)
                metrics.ATTEMPTS.labels(failure.reason.value.lower()).inc()
        gangs: dict[str, list[tuple[str, Reservation, list[ClaimWrite] | str]]] = defaultdict(list)
        for binding in result.bindings:
            reservation = self.state.reserve(binding.pod, binding.node, binding.gpus)
            if reservation is None:
                continue  # the pod changed while the engine ran; it is looked at again
            if reservation.request.group is None:
                self._backoff.pop(binding.pod, None)
                metrics.ATTEMPTS.labels("scheduled").inc()
            self._placed.append(binding)
            root = self._root(reservation.request)
            gpus = ",".join(map(str, binding.gpus)) or "none"
            logger.info("placing %s on %s, GPUs %s (%s)", binding.pod, binding.node, gpus, root)
            self._binding[root].add(binding.pod)
            writes = self.claims.plan(binding.pod, binding.node, binding.gpus, self._view)
            gangs[root].append((binding.pod, reservation, writes))
        for root, members in gangs.items():
            self.spawn(self._allocate_and_bind(root, members, term))

    async def _allocate_and_bind(
        self,
        root: str,
        members: list[tuple[str, Reservation, list[ClaimWrite] | str]],
        term: int,
    ) -> None:
        """A gang's ResourceClaims are all written before any of its pods is bound; if one
        cannot be, every claim written is released and no pod of the gang is bound."""
        writes = [w for _, _, ws in members if not isinstance(ws, str) for w in ws]
        refused = [ws for _, _, ws in members if isinstance(ws, str)]
        why = refused[0] if refused else await self.claims.allocate(writes)
        if why is None:
            await asyncio.gather(
                *(self._bind(key, _reserved_ref(key, r), r, root, term, 1) for key, r, _ in members)
            )
            return
        self.claims.drop(writes)
        for key, reservation, _ in members:
            self.state.release(key, reservation)
            self._bind_over(key, root)
            self.recorder.record(
                _reserved_ref(key, reservation), "Warning", "FailedScheduling", why
            )
        self._failed(root, self.clock(), soon=True)
        self.wake()

    def _root_outcome(self, decision: GroupDecision, now: float) -> None:
        record = self.state.groups.get(decision.name)
        if decision.phase is Phase.SCHEDULED:
            where = "/".join(decision.placement.values()) or "no topology constraint"
            logger.info("%s %s: Scheduled in %s", decision.kind, decision.name, where)
            self._backoff.pop(decision.name, None)
            metrics.ATTEMPTS.labels("scheduled").inc()
            return
        if decision.reason is Reason.WAITING_FOR_PODS:
            logger.debug("%s %s: %s", decision.kind, decision.name, decision.message)
            metrics.ATTEMPTS.labels("waiting").inc()
            return
        logger.info(
            "%s %s: not placed (%s): %s",
            decision.kind,
            decision.name,
            decision.reason,
            decision.message,
        )
        metrics.ATTEMPTS.labels(decision.reason.value.lower()).inc()
        self._failed(decision.name, now)
        if record is not None:
            self.recorder.record(
                _group_ref(record), "Warning", "FailedScheduling", decision.message
            )

    def _failed(self, root: str, now: float, *, soon: bool = False) -> None:
        backoff = self._backoff.setdefault(root, _Backoff())
        backoff.failures = 1 if soon else backoff.failures + 1
        delay = min(
            self.settings.initial_backoff_seconds * 2 ** (backoff.failures - 1),
            self.settings.max_backoff_seconds,
        )
        backoff.failed_at = now
        backoff.next_try = now + delay
        backoff.capacity_seen = self.state.capacity_generation

    def spawn(self, work: Any) -> None:
        """Runs ``work`` as a task the scheduler owns (awaited by `settle`, cancelled at exit)."""
        task: asyncio.Task[None] = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _bind(
        self,
        key: str,
        ref: ObjectRef,
        reservation: Reservation,
        root: str,
        term: int,
        attempt: int,
    ) -> None:
        annotations = {}
        if reservation.request.wants_gpu:
            annotations[GPUS_ANNOTATION] = ",".join(str(g) for g in reservation.gpus)
        fence = self._fence(term)
        async with self._slots:
            started = self.clock()
            self._sent_at[key] = started
            try:
                if not fence():  # early out; the client asks again as the request goes out
                    raise FencedError(f"bind of {key}")
                await self.api.bind(ref, reservation.node, annotations, fence)
                error = None
            except ApiError as failure:
                error = failure
            metrics.BIND_SECONDS.observe(self.clock() - started)
        if error is None:
            self._bound(key, ref, reservation, root)
        else:
            self._bind_failed(key, ref, reservation, root, error, attempt)
        self.wake()

    def _bound(self, key: str, ref: ObjectRef, reservation: Reservation, root: str) -> None:
        metrics.BINDS.labels("ok").inc()
        self.state.confirm(key, reservation)
        gpus = f", GPUs {','.join(map(str, reservation.gpus))}" if reservation.gpus else ""
        message = f"Successfully assigned {key} to {reservation.node}{gpus}"
        logger.info("bound: %s", message)
        self.recorder.record(ref, "Normal", "Scheduled", message)
        self._bind_over(key, root)

    def _bind_over(self, key: str, root: str) -> None:
        self._sent_at.pop(key, None)
        in_flight = self._binding.get(root)
        if in_flight is not None:
            in_flight.discard(key)
            if not in_flight:
                del self._binding[root]
                self._gang_done(root)

    def _bind_failed(
        self,
        key: str,
        ref: ObjectRef,
        reservation: Reservation,
        root: str,
        error: ApiError,
        attempt: int,
    ) -> None:
        if isinstance(error, FencedError):
            # Nothing was sent: the room goes back, and whoever leads next decides afresh.
            metrics.BINDS.labels("fenced").inc()
            self.state.release(key, reservation)
            self._bind_over(key, root)
            return
        metrics.BINDS.labels("error").inc()
        logger.warning("bind of %s to %s failed: %s", key, reservation.node, error)
        if error.status in REFUSED:
            self.state.release(key, reservation)
            self._release_claims(key, reservation)
            self._bind_over(key, root)
            self._failed(root, self.clock(), soon=True)
            self.recorder.record(
                ref, "Warning", "FailedScheduling", f"Binding rejected: {error.message}"
            )
            return
        # Unknown (the server may have applied it, or may still), or bound or gone (a 409 or
        # 404, read back first). The room stays this pod's meanwhile.
        self.recorder.record(
            ref,
            "Warning",
            "FailedScheduling",
            f"Binding rejected: {error.message} (sent again, same node and GPUs)",
        )
        answered = error.status in (404, 409)
        self._retry(key, ref, reservation, root, attempt, read_first=answered, at_once=answered)

    def _release_claims(self, key: str, reservation: Reservation) -> None:
        """As kube-scheduler's Unreserve: a refused bind gives its pod's claims back."""
        record = self.state.pods.get(key)
        if record is not None:
            self.spawn(
                self.claims.releaser.release_pod(key, reservation.uid, held_claims(record.pod))
            )

    def _retry(
        self,
        key: str,
        ref: ObjectRef,
        reservation: Reservation,
        root: str,
        attempt: int,
        *,
        read_first: bool,
        at_once: bool = False,
    ) -> None:
        if self.state.reservations.get(key) is not reservation:
            self._bind_over(key, root)
            return  # the watch showed the pod bound, replaced or gone meanwhile
        delay = min(
            self.settings.initial_backoff_seconds * 2 ** (attempt - 1),
            self.settings.max_backoff_seconds,
        )
        if at_once:
            delay = 0.0  # a GET costs little, and its answer decides what comes next
        self._retries[key] = _Retry(
            ref, reservation, root, attempt + 1, self.clock() + delay, read_first
        )

    def _send_retries(self, now: float, term: int) -> None:
        """Sends the binds due again; drops those the watch has settled, and releases the
        room of those whose node is gone (the pod is then placed afresh)."""
        for key, retry in list(self._retries.items()):
            reservation = retry.reservation
            if self.state.reservations.get(key) is not reservation:
                del self._retries[key]
                self._bind_over(key, retry.root)
            elif reservation.node not in self.state.nodes:
                del self._retries[key]
                self.state.release(key, reservation)
                self._bind_over(key, retry.root)
            elif retry.next_try <= now:
                del self._retries[key]
                self._binding[retry.root].add(key)
                if retry.read_first or self.state.taken_by_others(key, reservation):
                    self.spawn(self._read_back(key, retry, term))
                else:
                    work = self._bind(key, retry.ref, reservation, retry.root, term, retry.attempts)
                    self.spawn(work)

    async def _read_back(self, key: str, retry: _Retry, term: int) -> None:
        """After a 404 or 409, a leadership change, or when another pod took the room: what
        the pod is now decides. Gone or replaced: the room is released. Bound: the pod itself
        says where, from now on. Still pending: the same bind is sent again, unless its GPUs
        are held by another pod now (then released)."""
        reservation = retry.reservation
        try:
            body = await self.api.get_pod(retry.ref)
        except ApiError:
            self._retry(key, retry.ref, reservation, retry.root, retry.attempts, read_first=True)
            return
        if body is None:
            self.state.delete_pod(key, reservation.uid)
        elif (body.get("metadata") or {}).get("uid") != reservation.uid:
            self.state.release(key, reservation)
        elif (body.get("spec") or {}).get("nodeName"):
            self.state.upsert_pod(body)
        elif self.state.taken_by_others(key, reservation):
            # Another scheduler's pod landed in this room while the bind was retried: the
            # node cannot take this pod now, so it is placed afresh (in its gang's domain).
            logger.warning("%s: its GPUs on %s were taken meanwhile", key, reservation.node)
        else:
            self._binding[retry.root].add(key)
            await self._bind(key, retry.ref, reservation, retry.root, term, retry.attempts)
            return
        self.state.release(key, reservation)  # no-op unless the body was older than ours
        self._bind_over(key, retry.root)
        self.wake()

    def _gang_done(self, root: str) -> None:
        pods = self.state.pods_of(self.state.descendants(root))
        if not pods or any(p.node is None for p in pods if not p.pod.is_terminal):
            return
        first = min(p.request.created for p in pods if p.request is not None)
        if first:
            metrics.GANG_SECONDS.observe(max(0.0, time.time() - first))

    # ----- Workloads -------------------------------------------------------------------------

    def _materialize(self) -> None:
        now = self.clock()
        for record in self.state.workloads.values():
            if record.workload is None:
                continue
            for group in record.groups:
                if group.key in self.state.groups:
                    self._creating.pop(group.key, None)
                    continue
                if (
                    now - self._creating.get(group.key, -CREATE_GRACE_SECONDS)
                    < CREATE_GRACE_SECONDS
                ):
                    continue
                self._creating[group.key] = now
                self.spawn(self._create(group))

    async def _create(self, group: PodGroup | CompositePodGroup) -> None:
        try:
            await self.api.create_custom(group.to_manifest())
        except ApiError as error:
            if error.status != 409:
                logger.warning("cannot create %s %s: %s", group.kind, group.key, error)
                self._creating.pop(group.key, None)
                asyncio.get_running_loop().call_later(
                    self.settings.initial_backoff_seconds, self.wake
                )

    # ----- status and Events -------------------------------------------------------------------

    def _report(self, wall: datetime) -> None:
        by_group: dict[str, list[PodRecord]] = defaultdict(list)
        for record in self.state.pods.values():
            if record.request is not None and record.request.group is not None:
                by_group[f"{record.pod.metadata.namespace}/{record.request.group}"].append(record)
        statuses: dict[str, GroupStatus] = {}
        for key in self._parents_last():
            statuses[key] = self._group_status(key, by_group, statuses, wall)
            group = self.state.groups[key]
            if group.spec.invalid is not None:
                self.recorder.record(
                    _group_ref(group), "Warning", REASON_INVALID, group.spec.invalid
                )
            self.outbox.offer(
                _group_ref(group),
                statuses[key].model_dump(mode="json", by_alias=True, exclude_none=True),
                group.raw_status,
            )
        self._report_workloads(statuses, wall)

    def _parents_last(self) -> list[str]:
        """Group keys, children before their parents."""
        ordered: list[str] = []
        for key in sorted(self.state.groups):
            if self.state.groups[key].spec.parent is None:
                ordered.extend(reversed(self.state.descendants(key)))
        rest = sorted(set(self.state.groups) - set(ordered))  # orphans and cycles
        return [k for k in ordered if k in self.state.groups] + rest

    def _group_status(
        self,
        key: str,
        by_group: Mapping[str, list[PodRecord]],
        done: Mapping[str, GroupStatus],
        wall: datetime,
    ) -> GroupStatus:
        record = self.state.groups[key]
        tree = self.state.descendants(key)
        pods = [p for k in tree for p in by_group.get(k, [])]
        counts = count(pods)
        timed_out = self._timed_out(self.state.root_of(key), by_group, wall)
        if record.spec.kind is GroupKind.POD_GROUP:
            phase = pod_group_phase(record.spec.minimum, counts, timed_out)
        else:
            children = [
                done[k].phase
                for k in tree[1:]
                if k in done and self.state.groups[k].spec.parent == key
            ]
            phase = composite_phase(record.spec.minimum, children, timed_out)
        where = placement(
            record.spec.topology_key, self.config.topology_levels, pods, self.state.nodes
        )
        previous = self.outbox.last(_group_ref(record)) or record.raw_status
        attempt = self._attempts.get(key)
        partial = self._partial(record, pods, counts)
        return group_status(record, phase, counts, where, attempt, previous, wall, partial)

    def _partial(
        self, record: GroupRecord, pods: list[PodRecord], counts: Counts
    ) -> Partial | None:
        """A gang with some pods bound but fewer than its minCount: named, not hidden."""
        minimum = record.spec.minimum
        if record.spec.kind is not GroupKind.POD_GROUP or not 0 < counts.scheduled < minimum:
            return None
        waiting = sorted(
            p.pod.metadata.name for p in pods if p.node is None and not p.pod.is_terminal
        )
        binding = any(p.key in self.state.reservations for p in pods)
        return Partial(REASON_BINDING if binding else REASON_DEGRADED, minimum, tuple(waiting))

    def _timed_out(
        self, root: str, by_group: Mapping[str, list[PodRecord]], wall: datetime
    ) -> bool:
        tree = self.state.descendants(root)
        waiting = [
            p.request.created
            for k in tree
            for p in by_group.get(k, [])
            if p.node is None and p.request is not None and not p.pod.is_terminal
        ]
        if not waiting:
            return False
        timeouts = [
            self.state.groups[k].timeout_seconds
            for k in tree
            if k in self.state.groups and self.state.groups[k].timeout_seconds
        ]
        timeout = min(timeouts, default=float(DEFAULT_SCHEDULE_TIMEOUT_SECONDS))
        return wall.timestamp() - min(waiting) > timeout

    def _report_workloads(self, statuses: Mapping[str, GroupStatus], wall: datetime) -> None:
        for record in self.state.workloads.values():
            namespace, name = record.key.split("/", 1)
            ref = ObjectRef(API_VERSION, "Workload", namespace, name, record.uid)
            groups: list[tuple[str, str, GroupStatus]] = []
            missing: list[str] = []
            error = str(record.error) if record.error is not None else None
            if record.workload is not None:
                for group in record.groups:
                    status = statuses.get(group.key)
                    if status is None:
                        missing.append(group.metadata.name)
                    else:
                        groups.append((group.metadata.name, group.kind, status))
            else:
                self.recorder.record(ref, "Warning", REASON_INVALID, error or "")
            previous = self.outbox.last(ref) or record.raw_status
            condition = materialized_condition(previous, error, missing, wall)
            summary = workload_status(groups, condition)
            self.outbox.offer(
                ref,
                summary.model_dump(mode="json", by_alias=True, exclude_none=True),
                record.raw_status,
            )

    # ----- watch input -------------------------------------------------------------------------

    def forget_group(self, key: str) -> None:
        record = self.state.groups.get(key)
        if record is not None:
            self.outbox.forget(_group_ref(record))
            self.recorder.forget(record.uid)
        self.state.delete_group(key)
        self._attempts.pop(key, None)
        self._backoff.pop(key, None)
        self.wake()


def _attempt(decision: GroupDecision, wall: datetime) -> Attempt:
    return Attempt(
        time=wall,
        reason=decision.reason.value,
        message=decision.message,
        domains=decision.attempts,
        placement=decision.placement or None,
    )

"""Reserving and binding, and the binds whose outcome is unknown.

Every binding is reserved in the ledger before its request is sent; a gang's ResourceClaims
are all written first, then its binds go out concurrently (bounded). A bind that failed keeps
its reservation and is sent again, the same pod to the same node and GPUs, with backoff: a
gang that has started binding owns its room, and a bind whose outcome is unknown (no answer,
a timeout, a 5xx: the server may still commit it) is harmless to repeat and harmful to give
away. The room is released only when the pod is gone, shown bound, replaced, or definitively
refused (a 4xx), or when its node is gone; the pod is then pending again and the engine,
seeing the group's other pods bound, places it inside the group's domain.

A refusal (claims that cannot be written, a bind answered 4xx) backs the group off, doubling
(`Backoff.refused`), and is logged once per change of what the server said.

Every bind of a pod that holds GPUs carries them in ``gpusched.io/gpus``: the GPUs the engine
chose, or, for a pod that joins a shared ResourceClaim allocated already, the indices of the
claim's devices on the node."""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Iterable

from gpusched.api.config import OperatorConfig
from gpusched.api.k8s import GPUS_ANNOTATION
from gpusched.engine.claims import held_claims
from gpusched.engine.result import Binding
from gpusched.scheduler import metrics
from gpusched.scheduler.backoff import Backoff
from gpusched.scheduler.clock import Clock
from gpusched.scheduler.dra.allocator import ClaimAllocator, ClaimWrite
from gpusched.scheduler.dra.view import View
from gpusched.scheduler.events import EventRecorder
from gpusched.scheduler.gangtimer import GangTimer
from gpusched.scheduler.leadership import Leadership
from gpusched.scheduler.ledger import Ledger, Release
from gpusched.scheduler.ports import ApiError, ClusterApi, FencedError, ObjectRef
from gpusched.scheduler.records import Reservation
from gpusched.scheduler.refs import reserved_ref
from gpusched.scheduler.tasks import Background
from gpusched.scheduler.unknown import Retry, UnknownBinds, Verdict
from gpusched.scheduler.views import RoomView

logger = logging.getLogger(__name__)

REFUSED = frozenset({400, 403, 422})
"""Answers to a bind that say it was not applied and never will be as sent: its room is
released. 404 and 409 are read back (the pod may be gone, replaced or bound already); every
other failure, an unanswered bind included, is retried as it was."""

Member = tuple[str, Reservation, list[ClaimWrite] | str]
"""A pod of a gang to bind: its key, its reservation, and its claim writes (or why they
cannot be made)."""


class Binder:
    def __init__(
        self,
        *,
        settings: OperatorConfig,
        state: RoomView,
        ledger: Ledger,
        api: ClusterApi,
        claims: ClaimAllocator,
        events: EventRecorder,
        backoff: Backoff,
        leadership: Leadership,
        unknown: UnknownBinds,
        clock: Clock,
        background: Background,
    ) -> None:
        self.settings = settings
        self.state = state
        self.ledger = ledger
        self.api = api
        self.claims = claims
        self.events = events
        self.backoff = backoff
        self.leadership = leadership
        self.unknown = unknown
        self.clock = clock
        self.background = background
        self.gang_timer = GangTimer(clock)
        self._slots = asyncio.Semaphore(settings.bind_concurrency)
        self._binding: dict[str, set[str]] = defaultdict(set)
        """Root key → pods whose bind is in flight (for the gang latency metric)."""
        self._claimed: dict[str, tuple[int, ...]] = {}
        """Pod → the GPUs of the shared claims it joins (the engine gave it none)."""
        self._decided_at: dict[str, float] = {}
        """Root key → when the decision whose binds are in flight was made."""

    # ----- events from the loop ----------------------------------------------------------------

    def place(
        self,
        bindings: Iterable[Binding],
        view: View | None,
        term: int,
        decided_at: float | None = None,
    ) -> list[Binding]:
        """Reserves each binding and sends it (a gang's claims first), fenced to ``term``;
        returns those reserved (a pod that changed while the engine ran is left out: it is
        looked at again). ``decided_at``: when the decision was made (default: now)."""
        decided = self.clock() if decided_at is None else decided_at
        placed: list[Binding] = []
        gangs: dict[str, list[Member]] = defaultdict(list)
        for binding in bindings:
            reservation = self.ledger.reserve(binding.pod, binding.node, binding.gpus)
            if reservation is None:
                continue
            if reservation.request.group is None:
                self.backoff.placed(binding.pod)
                metrics.ATTEMPTS.labels("scheduled").inc()
            placed.append(binding)
            root = self.state.root_of_request(reservation.request)
            gpus = ",".join(map(str, binding.gpus)) or "none"
            logger.info("placing %s on %s, GPUs %s (%s)", binding.pod, binding.node, gpus, root)
            self._binding[root].add(binding.pod)
            self._decided_at[root] = decided
            writes = self.claims.plan(binding, view)
            joined = self._joined_gpus(binding, writes, view)
            if joined:
                self._claimed[binding.pod] = joined
            gangs[root].append((binding.pod, reservation, writes))
        for root, members in gangs.items():
            self.background.spawn(self._allocate_and_bind(root, members, term))
        return placed

    def resend(self, now: float, term: int) -> None:
        """Sends the binds due again (see `UnknownBinds.take`)."""
        ended, due = self.unknown.take(now)
        for key, root in ended:
            self._bind_over(key, root)
        for key, retry in due:
            self._binding[retry.root].add(key)
            if retry.read_first or self.state.taken_by_others(key, retry.reservation):
                self.background.spawn(self._verify(key, retry, term))
            else:
                work = self._bind(
                    key, retry.ref, retry.reservation, retry.root, term, retry.attempts
                )
                self.background.spawn(work)

    # ----- sending ----------------------------------------------------------------------------

    async def _allocate_and_bind(self, root: str, members: list[Member], term: int) -> None:
        """A gang's ResourceClaims are all written before any of its pods is bound; if one
        cannot be, every claim written is released and no pod of the gang is bound."""
        writes = [w for _, _, ws in members if not isinstance(ws, str) for w in ws]
        fence = self.leadership.fence(term)  # claim writes are fenced as binds are
        refused = [ws for _, _, ws in members if isinstance(ws, str)]
        why = refused[0] if refused else await self.claims.allocate(writes, fence)
        if why is None:
            await asyncio.gather(
                *(self._bind(key, reserved_ref(key, r), r, root, term, 1) for key, r, _ in members)
            )
            return
        self.claims.drop(writes)
        decided_at = self._decided_at.get(root, self.clock())
        before = self.state.capacity_generation
        for key, reservation, _ in members:
            self.ledger.release(key, Release.CLAIMS_REFUSED, only=reservation)
            self._bind_over(key, root)
            self.events.record(reserved_ref(key, reservation), "Warning", "FailedScheduling", why)
        self.backoff.returned(before, self.state.capacity_generation, decided_at)
        nodes = [reservation.node for _, reservation, _ in members]
        if self.backoff.refused(root, self.clock(), why, nodes, decided_at):
            logger.warning("%s: not bound, its ResourceClaims were refused: %s", root, why)
        else:
            logger.debug("%s: not bound, its ResourceClaims were refused again: %s", root, why)
        if self.claims.contest_seen(writes):
            # Another writer took a claim meanwhile, and the watch shows it already: the
            # next decision sees what it did, so it need not wait (a contested claim the
            # watch shows later starts the count over then: `refusal_inputs`).
            self.backoff.clear(root)
        self.background.wake()

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
        gpus = reservation.gpus or self._claimed.get(key, ())
        if gpus or reservation.request.wants_gpu:
            annotations[GPUS_ANNOTATION] = ",".join(str(g) for g in gpus)
        fence = self.leadership.fence(term)
        async with self._slots:
            started = self.clock()
            try:
                if not fence():  # early out; the client asks again as the request goes out
                    raise FencedError(f"bind of {key}")
                if self.state.overcommits(key, reservation):
                    # Another scheduler's pod landed on this node between the decision and
                    # now (the wait for a slot included): sending would over-commit it.
                    self._not_sent(key, ref, reservation, root, attempt)
                    return
                self.unknown.sent(key, started)
                await self.api.bind(ref, reservation.node, annotations, fence)
                error = None
            except ApiError as failure:
                error = failure
            metrics.BIND_SECONDS.observe(self.clock() - started)
        if error is None:
            self._bound(key, ref, reservation, root)
        else:
            self._bind_failed(key, ref, reservation, root, error, attempt)
        self.background.wake()

    def _bound(self, key: str, ref: ObjectRef, reservation: Reservation, root: str) -> None:
        metrics.BINDS.labels("ok").inc()
        self.state.confirm(key, reservation)
        self.backoff.clear(root)  # what was refused went through
        gpus = f", GPUs {','.join(map(str, reservation.gpus))}" if reservation.gpus else ""
        message = f"Successfully assigned {key} to {reservation.node}{gpus}"
        logger.info("bound: %s", message)
        self.events.record(ref, "Normal", "Scheduled", message)
        self._bind_over(key, root)

    def _bind_over(self, key: str, root: str) -> None:
        self.unknown.over(key)
        self._claimed.pop(key, None)
        in_flight = self._binding.get(root)
        if in_flight is not None:
            in_flight.discard(key)
            if not in_flight:
                del self._binding[root]
                self._decided_at.pop(root, None)
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
            self.ledger.release(key, Release.BIND_FENCED, only=reservation)
            self._bind_over(key, root)
            return
        metrics.BINDS.labels("error").inc()
        if error.status in REFUSED:
            decided_at = self._decided_at.get(root, self.clock())
            before = self.state.capacity_generation
            self.ledger.release(key, Release.BIND_REFUSED, only=reservation)
            self.backoff.returned(before, self.state.capacity_generation, decided_at)
            self._release_claims(key, reservation)
            self._bind_over(key, root)
            refused_at = self.clock()
            if self.backoff.refused(
                root, refused_at, error.message, [reservation.node], decided_at
            ):
                logger.warning("bind of %s to %s refused: %s", key, reservation.node, error)
            else:
                logger.debug("bind of %s to %s refused again: %s", key, reservation.node, error)
            self.events.record(
                ref, "Warning", "FailedScheduling", f"Binding rejected: {error.message}"
            )
            return
        # Unknown (the server may have applied it, or may still), or bound or gone (a 409 or
        # 404, read back first). The room stays this pod's meanwhile.
        logger.warning("bind of %s to %s failed: %s", key, reservation.node, error)
        self.events.record(
            ref,
            "Warning",
            "FailedScheduling",
            f"Binding rejected: {error.message} (sent again, same node and GPUs)",
        )
        answered = error.status in (404, 409)
        kept = self.unknown.keep(
            key, ref, reservation, root, attempt, read_first=answered, at_once=answered
        )
        if not kept:
            self._bind_over(key, root)  # the watch settled it meanwhile

    def _release_claims(self, key: str, reservation: Reservation) -> None:
        """As kube-scheduler's Unreserve: a refused bind gives its pod's claims back."""
        record = self.state.pods.get(key)
        if record is not None:
            self.background.spawn(
                self.claims.releaser.release_pod(key, reservation.uid, held_claims(record.pod))
            )

    async def _verify(self, key: str, retry: Retry, term: int) -> None:
        """Reads the pod back, and acts on what it says (see `UnknownBinds.read_back`)."""
        reservation = retry.reservation
        verdict = await self.unknown.read_back(key, retry)
        if verdict is Verdict.UNREAD:
            kept = self.unknown.keep(
                key, retry.ref, reservation, retry.root, retry.attempts, read_first=True
            )
            if not kept:
                self._bind_over(key, retry.root)  # the watch settled it meanwhile
        elif verdict is Verdict.ROOM_TAKEN:
            self._room_taken(key, reservation, retry.root)
        elif verdict is Verdict.SEND:
            self._binding[retry.root].add(key)
            await self._bind(key, retry.ref, reservation, retry.root, term, retry.attempts)
        else:
            # A no-op unless the body read back was older than ours.
            self.ledger.release(key, Release.READ_BACK, only=reservation)
            self._bind_over(key, retry.root)
            self.background.wake()

    def _not_sent(
        self, key: str, ref: ObjectRef, reservation: Reservation, root: str, attempt: int
    ) -> None:
        """The node is full without this pod. If an earlier send of this bind may still land,
        the room stays held and the pod is read back later; otherwise it is placed afresh."""
        if self.unknown.may_still_land(key, self.clock()) and self.unknown.keep(
            key, ref, reservation, root, attempt, read_first=True
        ):
            return
        self._room_taken(key, reservation, root)

    def _room_taken(self, key: str, reservation: Reservation, root: str) -> None:
        """Another scheduler's pod landed in this room before the bind went out: the node
        cannot take this pod now, so it is placed afresh (in its gang's domain)."""
        logger.warning("%s: its GPUs on %s were taken meanwhile", key, reservation.node)
        metrics.BINDS.labels("room-taken").inc()
        self.ledger.release(key, Release.ROOM_TAKEN, only=reservation)
        self._release_claims(key, reservation)
        self._bind_over(key, root)
        self.background.wake()

    def _joined_gpus(
        self, binding: Binding, writes: list[ClaimWrite] | str, view: View | None
    ) -> tuple[int, ...]:
        """For a pod that joins shared claims allocated already (the engine gave it no GPU:
        the claims hold them), the indices of the claims' devices on its node."""
        if binding.gpus or isinstance(writes, str) or view is None:
            return ()
        names = {d for w in writes if w.joins for d in w.devices}  # on this node's pool
        devices = view.devices.get(binding.node) if names else None
        if devices is None:
            return ()
        found = [i for i, gpu in devices.devices.items() if gpu.device in names]
        return tuple(sorted(found))

    def _gang_done(self, root: str) -> None:
        pods = self.state.pods_of(self.state.descendants(root))
        if not pods or any(p.node is None for p in pods if not p.pod.is_terminal):
            return
        if root in self.state.groups:
            logger.info("%s: Scheduled, every pod bound", root)
        waited = self.gang_timer.bound(root)
        if waited is not None:
            metrics.GANG_SECONDS.observe(waited)

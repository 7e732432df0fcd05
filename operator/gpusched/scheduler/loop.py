"""The scheduling loop: one loop, not a handler per pod racing the others.

Each cycle:
1. Workloads: create the groups their templates describe that do not exist yet.
2. Queue: take our pending pods, drop those whose root group is backing off after a failed
   attempt (a change that frees capacity cuts the wait short).
3. Decide: build a snapshot from the watched state plus the reservation ledger and run the
   engine on it (`Decider`). The engine orders work by priority then age, places each root
   group completely or not at all, and never lets a group that cannot fit hold anything, so
   it never blocks smaller groups behind it.
4. Reserve and bind (`Binder`): every binding is reserved before its request is sent; a bind
   whose outcome is unknown keeps its room and is sent again.
5. Preempt (`Preemptor`): for the groups left unschedulable, the engine's preemption plans
   (on the same snapshot): their room is nominated and their victims evicted; a nomination
   whose victims are gone is bound (checked first thing each cycle).
6. Report (`Reporter`): group and Workload status from what the pods show, Events aggregated.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from datetime import datetime

from gpusched.api.config import OperatorConfig
from gpusched.engine.request import PodRequest
from gpusched.engine.result import GroupDecision, Phase, Reason, ScheduleResult
from gpusched.scheduler import metrics, quality_metrics
from gpusched.scheduler.backoff import Backoff
from gpusched.scheduler.binder import Binder
from gpusched.scheduler.clock import Clock
from gpusched.scheduler.decider import Decider
from gpusched.scheduler.decisionlog import DecisionLog
from gpusched.scheduler.dra.release import ClaimReleaser
from gpusched.scheduler.dra.view import View
from gpusched.scheduler.leadership import Leadership
from gpusched.scheduler.preemptor import Preemptor
from gpusched.scheduler.refs import group_ref, pod_ref
from gpusched.scheduler.reporter import Reporter
from gpusched.scheduler.resync import Resync
from gpusched.scheduler.state import ClusterState
from gpusched.scheduler.tasks import Background
from gpusched.scheduler.unknown import UnknownBinds
from gpusched.scheduler.workloads import Materializer

logger = logging.getLogger(__name__)

CYCLE_PODS = 500
"""At most this many pending pods are decided in one cycle, taken whole root group by whole
root group in the engine's order (priority, then age); the next cycle, which follows at once,
takes the rest. One cycle's cost grows with the pods it decides, and nothing it decides is
bound before it ends: a new leader that finds 5,000 pods pending binds its first after one
cycle of 500, and the loop keeps reading watch events between cycles. A root group larger
than this is decided alone, in one cycle."""


class SchedulingLoop:
    def __init__(
        self,
        *,
        settings: OperatorConfig,
        state: ClusterState,
        leadership: Leadership,
        resync: Resync,
        materializer: Materializer,
        backoff: Backoff,
        decider: Decider,
        binder: Binder,
        preemptor: Preemptor,
        unknown: UnknownBinds,
        releaser: ClaimReleaser,
        reporter: Reporter,
        clock: Clock,
        background: Background,
    ) -> None:
        self.settings = settings
        self.state = state
        self.leadership = leadership
        self.resync = resync
        self.materializer = materializer
        self.backoff = backoff
        self.decider = decider
        self.binder = binder
        self.preemptor = preemptor
        self.unknown = unknown
        self.releaser = releaser
        self.reporter = reporter
        self.clock = clock
        self.background = background
        self._groups_seen = -1
        self.cycles = 0
        self.decisions = DecisionLog(clock)

    async def run(self) -> None:
        """Runs cycles until cancelled; a failing cycle is logged and retried, never fatal."""
        helpers = self.reporter.start()
        try:
            while True:
                await self._sleep_until_needed()
                try:
                    await self.cycle()
                except Exception:
                    metrics.ATTEMPTS.labels("error").inc()
                    logger.exception("scheduling cycle failed; retrying")
                    await self.clock.sleep(self.settings.initial_backoff_seconds)
                    self.background.wake()
        finally:
            for task in helpers:
                task.cancel()
            await asyncio.gather(*helpers, return_exceptions=True)
            await self.background.cancel()

    async def _sleep_until_needed(self) -> None:
        upcoming = self.backoff.next_tries() + self.unknown.next_tries()
        due = min(upcoming, default=self.decider.next_measurement())
        await self.background.wait(due - self.clock())
        if self.settings.batch_window_seconds:
            # Let the rest of a burst (a gang's pods created together) arrive first.
            await self.clock.sleep(self.settings.batch_window_seconds)

    async def cycle(self) -> None:
        if not self.leadership.may_write():
            if not self.leadership.leading():
                self.decider.warm(self.clock())  # standing by: ready to take over
            return
        self.cycles += 1
        now = self.clock()
        term = self.leadership.term
        self.binder.resend(now, term)
        self.preemptor.advance(term)
        self.resync.tick(now)
        wall = self.clock.wall()
        self.materializer.materialize()
        started = self._started_roots()
        ready, roots = self._queue(now, started)
        ready, roots, deferred = self._bounded(ready, roots, started)
        if deferred:
            self.background.wake()  # the next cycle takes them, at once
        groups_changed = self.state.groups_generation != self._groups_seen
        if ready or groups_changed:
            self._groups_seen = self.state.groups_generation
            result, view = await self.decider.decide(ready)
            self._after_view(view)
            if term != self.leadership.term:
                return  # leadership changed while the engine ran: the decision is stale
            self._apply(result, roots, deferred, now, wall)
            self.decider.placed(self.binder.place(result.bindings, view, term, now))
            plans = await self.decider.plan_preemptions(result)
            if term == self.leadership.term:
                self.preemptor.preempt(plans, term)
        self.reporter.report(wall)
        self.decisions.summary(self.state.groups)
        metrics.RESERVED_GPUS.set(self.state.ledger.reserved_gpus())
        self.decider.measure_quality(now)

    def _queue(self, now: float, started: set[str]) -> tuple[list[PodRequest], set[str]]:
        """Pending pods not backing off, and the roots they belong to. ``started``: roots of
        gangs with a pod bound or reserved, which never wait behind newcomers."""
        ready: list[PodRequest] = []
        roots: set[str] = set()
        waiting: set[str] = set()
        created: list[float] = []
        for record in self.state.pending():
            if record.request is None:
                self.reporter.event(
                    pod_ref(record),
                    "Warning",
                    "FailedScheduling",
                    f"{Reason.INVALID}: {record.error}",
                )
                continue
            root = self.state.root_of_request(record.request)
            waiting.add(root)
            created.append(record.request.created)
            if root not in started and self.backoff.backing_off(root, now):
                continue  # (the engine places a gang bound below its minCount first, too)
            ready.append(record.request)
            roots.add(root)
        metrics.PENDING_GROUPS.set(len(waiting))
        self.binder.gang_timer.seen(waiting, started)
        quality_metrics.default().pending(created, self.clock.wall().timestamp())
        return ready, roots

    def _bounded(
        self, ready: list[PodRequest], roots: set[str], started: set[str]
    ) -> tuple[list[PodRequest], set[str], set[str]]:
        """``ready`` cut to `CYCLE_PODS` pods (whole root groups, first in the engine's
        order, gangs that have started binding before the rest of their priority), the
        roots kept, and the roots left for the next cycle."""
        if len(ready) <= CYCLE_PODS:
            return ready, roots, set()
        by_root: dict[str, list[PodRequest]] = {}
        for request in ready:
            by_root.setdefault(self.state.root_of_request(request), []).append(request)

        def order(root: str) -> tuple[int, bool, float, str]:
            pods = by_root[root]
            group = self.state.groups.get(root)
            created = min(p.created for p in pods)
            if group is not None:
                created = min(created, group.spec.created)
            return (-max(p.priority for p in pods), root not in started, created, root)

        kept: list[PodRequest] = []
        taken: set[str] = set()
        for root in sorted(by_root, key=order):
            if kept and len(kept) + len(by_root[root]) > CYCLE_PODS:
                break
            kept += by_root[root]
            taken.add(root)
        return kept, taken, roots - taken

    def _started_roots(self) -> set[str]:
        """Roots of gangs with a pod bound or reserved."""
        roots = set()
        for record in self.state.pods.values():
            request = record.request
            if request is not None and request.group is not None and record.node is not None:
                roots.add(self.state.root_of_request(request))
        for reservation in self.state.ledger.reservations.values():
            if reservation.request.group is not None:
                roots.add(self.state.root_of_request(reservation.request))
        return roots

    def _after_view(self, view: View) -> None:
        """What the DRA view found besides the decision: allocations a previous leader left
        unbound (released), and bound pods whose GPUs differ from our choice (an Event)."""
        for stale in view.stale:
            release = self.releaser.release_stale(stale.claim, stale.uid, stale.version)
            self.background.spawn(release)
        for mismatch in view.mismatches:
            if (record := self.state.pods.get(mismatch.pod)) is not None:
                self.reporter.event(
                    pod_ref(record), "Warning", "GPUAssignmentMismatch", mismatch.message
                )

    # ----- acting on a decision ----------------------------------------------------------------

    def _apply(
        self,
        result: ScheduleResult,
        roots: set[str],
        deferred: set[str],
        now: float,
        wall: datetime,
    ) -> None:
        """``deferred``: roots whose pods this cycle left out (`_bounded`): the engine saw
        their groups without their pods, so what it says of them is not reported."""
        placed: Counter[str] = Counter()
        for binding in result.bindings:
            record = self.state.pods.get(binding.pod)
            if record is not None and record.request is not None:
                placed[self.state.root_of_request(record.request)] += 1
                self.decisions.gone(binding.pod)
        for decision in result.groups:
            root = self.state.root_of(decision.name)
            if root in deferred:
                continue
            if root in roots or not self.backoff.backing_off(root, now):
                self.reporter.attempted(decision, wall)
            if decision.name == root and root in roots:
                self._root_outcome(decision, now, placed[root])
        for failure in result.unschedulable:
            record = self.state.pods.get(failure.pod)
            if record is None:
                continue
            self.reporter.unplaced(record, failure)
            if failure.reason is Reason.WAITING_FOR_PODS:
                continue
            if record.request is not None and record.request.group is None:
                self.decisions.pod(failure.pod, failure.reason.value, failure.message)
                self.backoff.failed(failure.pod, now)
                metrics.ATTEMPTS.labels(failure.reason.value.lower()).inc()

    def _root_outcome(self, decision: GroupDecision, now: float, placed: int) -> None:
        record = self.state.groups.get(decision.name)
        self.decisions.outcome(decision, placed)  # logged when it changes
        if decision.phase is Phase.SCHEDULED:
            self.backoff.placed(decision.name)  # its count goes on until a bind goes through
            metrics.ATTEMPTS.labels("scheduled").inc()
            return
        if decision.reason is Reason.WAITING_FOR_PODS:
            metrics.ATTEMPTS.labels("waiting").inc()
            return
        metrics.ATTEMPTS.labels(decision.reason.value.lower()).inc()
        self.backoff.failed(decision.name, now)
        if record is not None:
            self.reporter.event(group_ref(record), "Warning", "FailedScheduling", decision.message)

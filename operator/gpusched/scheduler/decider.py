"""Deciding: a snapshot from the watched state, the ledger and the DRA view, and the engine
run on it in a worker thread (so that watches keep flowing meanwhile); and the
placement-quality gauges, measured on the same snapshot cache."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping

from gpusched.api.config import SchedulerConfig
from gpusched.engine.build import SnapshotCache, build_snapshot
from gpusched.engine.health import GpuSample
from gpusched.engine.policy import Policy
from gpusched.engine.preemption import PreemptionPlan, plan_cycle
from gpusched.engine.request import PodRequest
from gpusched.engine.result import Binding, Phase, Reason, ScheduleResult
from gpusched.engine.schedule import schedule
from gpusched.engine.snapshot import Snapshot
from gpusched.scheduler import metrics, quality_metrics
from gpusched.scheduler.clock import Clock
from gpusched.scheduler.dra.allocator import ClaimAllocator
from gpusched.scheduler.dra.view import View
from gpusched.scheduler.feed import BoundFeed
from gpusched.scheduler.views import DecideView

Telemetry = Callable[[], Mapping[tuple[str, int], GpuSample] | None]
TELEMETRY_HOLD_SECONDS = 1.0
"""One telemetry mapping serves the cycles of this many seconds. The snapshot cache rebuilds
its static part when the mapping changes, so taking a fresh one every cycle would rebuild it
every cycle; holding it longer would understate ages (and a GPU would look fresher than its
data) by more than this."""
QUALITY_SECONDS = 5.0
"""The placement-quality gauges are refreshed at most this often, and at least this often
while this replica leads (one measurement takes about 6 ms at 5,000 nodes)."""
WARM_SECONDS = 10.0
"""A standby brings its snapshot up to date this often (`Decider.warm`)."""


class Decider:
    def __init__(
        self,
        *,
        config: SchedulerConfig,
        state: DecideView,
        claims: ClaimAllocator,
        telemetry: Telemetry,
        clock: Clock,
    ) -> None:
        self.config = config
        self.state = state
        self.claims = claims
        self.telemetry = telemetry
        self.clock = clock
        self._held_telemetry: tuple[float, Mapping[tuple[str, int], GpuSample] | None] | None = None
        self._snapshots = SnapshotCache()
        self._feed = BoundFeed(state)
        """The bound pods, brought up to date by what changed: the only way bound pods
        reach `_snapshots` (`BoundChanges` says what changed since the feed's last answer)."""
        self.quality_at = float("-inf")
        """When the quality gauges were last measured (our clock)."""
        self._decided: tuple[Snapshot, list[PodRequest]] | None = None
        """The last decision's snapshot and pods, for its preemption plans."""
        self._placed: list[Binding] = []
        """Bindings reserved since the last quality measurement (counted by link tier)."""
        self._warmed_at = float("-inf")

    async def decide(self, ready: list[PodRequest]) -> tuple[ScheduleResult, View]:
        """The engine's decision on ``ready`` (their devices, and what DRA claims hold, among
        its inputs), and the DRA view it saw."""
        started = self.clock()
        view = self.claims.view.build(
            self.state.nodes, self._feed, ready, self.state.pods, self.claims.busy
        )
        snapshot = build_snapshot(
            view.nodes,
            view.bound,
            self._telemetry(),
            self.config,
            self._snapshots,
            devices=view.devices,
        )
        groups = self.state.group_specs()
        policy = Policy.of(self.config)
        result = await asyncio.to_thread(schedule, snapshot, view.ready, groups, policy)
        self._decided = (snapshot, view.ready)
        metrics.DECISION_SECONDS.observe(self.clock() - started)
        return result, view

    async def plan_preemptions(self, result: ScheduleResult) -> list[PreemptionPlan]:
        """The preemption plans for what the last `decide` (which gave ``result``) left
        unschedulable, groups and pods without one, on the same snapshot, in a worker
        thread."""
        if self._decided is None:
            return []
        snapshot, ready = self._decided
        self._decided = None
        if not _unplaced(result, ready):
            return []  # nothing to plan for: no thread, no await
        foreign = frozenset(
            record.key
            for record in self.state.pods.values()
            if record.holding is not None and not self.state.is_ours(record.pod.spec.scheduler_name)
        )
        groups = self.state.group_specs()
        budgets = self.state.budgets.for_pods(self.state.pods.values())
        return await asyncio.to_thread(
            plan_cycle, snapshot, result, ready, groups, Policy.of(self.config), budgets, foreign
        )

    def placed(self, bindings: Iterable[Binding]) -> None:
        """Bindings reserved: counted in the next quality measurement."""
        self._placed.extend(bindings)

    def measure_quality(self, now: float) -> None:
        """Placement-quality gauges, measured here rather than concurrently: building a
        snapshot through the shared cache while `schedule` copies it in its thread is unsafe."""
        if now - self.quality_at < QUALITY_SECONDS:
            return
        self.quality_at = now
        nodes, bound, devices = self.claims.view.cluster(
            self.state.nodes, self._feed, self.claims.busy
        )
        snapshot = build_snapshot(
            nodes, bound, self._telemetry(), self.config, self._snapshots, devices=devices
        )
        quality_metrics.update(snapshot, self.config, self._placed)
        self._placed.clear()

    def warm(self, now: float) -> None:
        """While standing by: the snapshot of every node and bound pod, brought up to date
        now and then (`WARM_SECONDS`; tens of milliseconds once built), deciding nothing. A
        replica that takes the Lease then starts its first cycle with the nodes' static part
        built; a cold build of 5,000 nodes cost its first decision 0.7 s."""
        if now - self._warmed_at < WARM_SECONDS:
            return
        self._warmed_at = now
        nodes, bound, devices = self.claims.view.cluster(
            self.state.nodes, self._feed, self.claims.busy
        )
        build_snapshot(
            nodes, bound, self._telemetry(), self.config, self._snapshots, devices=devices
        )

    def telemetry_changed(self) -> None:
        """The telemetry was read afresh: the next cycle takes it, not the mapping held."""
        self._held_telemetry = None

    def next_measurement(self) -> float:
        return self.quality_at + QUALITY_SECONDS

    def _telemetry(self) -> Mapping[tuple[str, int], GpuSample] | None:
        now = self.clock()
        held = self._held_telemetry
        if held is None or now - held[0] >= TELEMETRY_HOLD_SECONDS:
            held = self._held_telemetry = (now, self.telemetry())
        return held[1]


def _unplaced(result: ScheduleResult, ready: list[PodRequest]) -> bool:
    """Whether ``result`` left a unit unschedulable: a group, or a pod without one."""
    if any(
        d.phase is Phase.UNSCHEDULABLE and d.reason is Reason.UNSCHEDULABLE for d in result.groups
    ):
        return True
    failed = {f.pod for f in result.unschedulable if f.reason is Reason.UNSCHEDULABLE}
    return any(p.group is None and p.key in failed for p in ready)

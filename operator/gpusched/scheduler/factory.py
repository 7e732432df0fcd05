"""Wires the scheduling service's collaborators into one `Scheduler`."""

from __future__ import annotations

from collections.abc import Callable

from gpusched.api.config import SchedulerConfig
from gpusched.scheduler import quality_metrics
from gpusched.scheduler.backoff import Backoff, refusal_inputs
from gpusched.scheduler.binder import Binder
from gpusched.scheduler.clock import MONOTONIC, Clock
from gpusched.scheduler.decider import Decider, Telemetry
from gpusched.scheduler.dra.allocator import ClaimAllocator
from gpusched.scheduler.dra.book import ClaimApi, ClaimBook
from gpusched.scheduler.dra.release import ClaimReleaser
from gpusched.scheduler.dra.view import DraView
from gpusched.scheduler.events import EventRecorder
from gpusched.scheduler.eviction import Evictions
from gpusched.scheduler.firstread import FirstRead, Join
from gpusched.scheduler.leadership import Leadership
from gpusched.scheduler.ledger import Release
from gpusched.scheduler.loop import SchedulingLoop
from gpusched.scheduler.outbox import StatusOutbox
from gpusched.scheduler.podconditions import PodConditions
from gpusched.scheduler.ports import ClusterApi
from gpusched.scheduler.preemptor import Preemptor
from gpusched.scheduler.reporter import Reporter
from gpusched.scheduler.resync import RESYNC_SECONDS, Resync
from gpusched.scheduler.service import Scheduler
from gpusched.scheduler.state import ClusterState
from gpusched.scheduler.tasks import Background
from gpusched.scheduler.unknown import UnknownBinds
from gpusched.scheduler.waits import unplaced
from gpusched.scheduler.workloads import Materializer


def build_scheduler(
    config: SchedulerConfig,
    state: ClusterState,
    api: ClusterApi,
    *,
    telemetry: Telemetry | None = None,
    telemetry_join: Join | None = None,
    clock: Clock = MONOTONIC,
    leading: Callable[[], bool] | None = None,
    claims: ClaimApi | None = None,
    resync_seconds: float = RESYNC_SECONDS,
) -> Scheduler:
    """The service over ``state`` and ``api``. ``leading``: whether this replica holds the
    Lease now (None: it schedules alone); ``claims``: the DRA API (None: no DRA objects are
    read or written); ``telemetry_join``: makes the telemetry joined with the nodes listed
    (None: no telemetry to wait for, see `FirstRead`)."""
    settings = config.operator
    state.scheduler_aliases = frozenset(config.scheduler_name_aliases)
    state.owner_groups.namespaces = config.owner_groups.namespaces
    state.owner_groups.pod_metadata = state.pod_metadata  # a leader Pod owns its workers
    background = Background(clock)
    recorder = EventRecorder(api, settings.status_refresh_seconds, clock)
    outbox = StatusOutbox(api, settings.status_refresh_seconds, clock)
    ledger = state.ledger
    conditions = PodConditions(api=api, clock=clock, pending=unplaced(state, ledger))
    reporter = Reporter(
        config=config,
        state=state,
        ledger=ledger,
        recorder=recorder,
        outbox=outbox,
        conditions=conditions,
    )
    leadership = Leadership(
        leading,
        on_lost=(
            reporter.reset,
            quality_metrics.default().clear,
            lambda: ledger.release_nominations(Release.LEADERSHIP_LOST),
        ),
    )
    book = ClaimBook()
    releaser = ClaimReleaser(book, claims)
    allocator = ClaimAllocator(book, DraView(book), releaser, claims)
    backoff = Backoff(
        settings,
        lambda: state.capacity_generation,
        lambda root, nodes: refusal_inputs(state, root, nodes, allocator.contested_state),
    )
    unknown = UnknownBinds(state, ledger, api, backoff, clock)
    binder = Binder(
        settings=settings,
        state=state,
        ledger=ledger,
        api=api,
        claims=allocator,
        events=recorder,
        backoff=backoff,
        leadership=leadership,
        unknown=unknown,
        clock=clock,
        background=background,
    )
    resync = Resync(
        state=state,
        api=api,
        claims=allocator,
        clock=clock,
        background=background,
        period=resync_seconds,
    )
    evictions = Evictions(
        settings=config.preemption,
        state=state,
        ledger=ledger,
        api=api,
        events=recorder,
        leadership=leadership,
        clock=clock,
        background=background,
    )
    preemptor = Preemptor(
        settings=config.preemption,
        state=state,
        ledger=ledger,
        evictions=evictions,
        binder=binder,
        claims=allocator,
        events=recorder,
        backoff=backoff,
        clock=clock,
        background=background,
    )
    loop = SchedulingLoop(
        settings=settings,
        state=state,
        leadership=leadership,
        resync=resync,
        materializer=Materializer(
            state=state,
            api=api,
            clock=clock,
            background=background,
            retry_seconds=settings.initial_backoff_seconds,
        ),
        backoff=backoff,
        decider=Decider(
            config=config,
            state=state,
            claims=allocator,
            telemetry=telemetry or (lambda: None),
            clock=clock,
        ),
        binder=binder,
        preemptor=preemptor,
        unknown=unknown,
        releaser=releaser,
        reporter=reporter,
        clock=clock,
        background=background,
    )
    return Scheduler(
        state=state,
        api=api,
        clock=clock,
        background=background,
        leadership=leadership,
        resync=resync,
        loop=loop,
        unknown=unknown,
        backoff=backoff,
        reporter=reporter,
        claims=allocator,
        first_read=FirstRead(telemetry_join, config.telemetry.first_read_wait_seconds, clock),
    )

"""The operator's runtime, built in one place: options → runtime (`start`) → Kopf's memo
(`gpusched.handlers`), and taken down in reverse (`stop`).

`start` wires, in order: the API configuration and client, the cluster state, the telemetry
cache, the Lease elector (if leader election is on), the scheduling service, leadership
(`_follow`), the probes and metrics server (`gpusched.handlers.probes`), the scheduling loop,
and one watch per kind the server serves (`watched`: `gpusched.handlers.events` and
`gpusched.handlers.dra`, registered here explicitly); kinds served later are watched once
discovery shows them (`gpusched.handlers.discovery`)."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import socket
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from kubernetes_asyncio import client

from gpusched.api.config import SchedulerConfig
from gpusched.api.foreign import Served
from gpusched.engine.collector import freeze_survivors
from gpusched.handlers import dra, events, foreign, owners
from gpusched.handlers.discovery import LateKinds
from gpusched.handlers.events import Adapter
from gpusched.handlers.probes import serve_metrics
from gpusched.k8s.claims import KubeClaimApi
from gpusched.k8s.client import KubeClusterApi, api_client, load_configuration
from gpusched.k8s.watch import Kind, Readiness, Watch, served
from gpusched.options import Options
from gpusched.scheduler import metrics
from gpusched.scheduler.factory import build_scheduler
from gpusched.scheduler.leader import LeaderElector, OpenedOnUse
from gpusched.scheduler.resync import KINDS
from gpusched.scheduler.service import Scheduler
from gpusched.scheduler.state import ClusterState
from gpusched.telemetry.cache import TelemetryCache

logger = logging.getLogger(__name__)


def watched() -> tuple[tuple[Kind, Adapter], ...]:
    """Every kind the operator watches, with its adapter: the core kinds, DRA's, other
    projects' group kinds and the owners of pods (for owner groups)."""
    return events.CORE + dra.WATCHED + foreign.WATCHED + owners.WATCHED


@dataclass(slots=True, kw_only=True)
class Runtime:
    """What the running operator holds, kept in Kopf's memo."""

    configuration: client.Configuration
    scheduler: Scheduler
    api: KubeClusterApi
    telemetry: TelemetryCache
    task: asyncio.Task[None]
    readiness: Readiness
    watch_api: KubeClusterApi
    watches: list[asyncio.Task[None]]
    elector: LeaderElector | None = None
    elector_task: asyncio.Task[None] | None = None
    metrics_server: WSGIServer | None = None


async def start(opts: Options) -> Runtime:
    """The operator's runtime for ``opts``, running: see the module's note for the order."""
    config = opts.config
    configuration = await load_configuration(opts.kubeconfig)
    api = KubeClusterApi(api_client(configuration, config.operator.bind_concurrency))
    state = ClusterState(scheduler_name=config.scheduler_name)
    telemetry = TelemetryCache(config.telemetry, known_nodes=lambda: state.nodes.keys())
    await telemetry.start()  # an unreadable CA file fails here, loudly
    elector = _elector(config, configuration)
    scheduler = build_scheduler(
        config,
        state,
        api,
        telemetry=telemetry.samples,
        telemetry_join=telemetry.join if telemetry.source else None,
        leading=(lambda: elector.leading) if elector is not None else None,
        claims=KubeClaimApi(api),
    )
    api.fence = scheduler.may_write  # asked as each write goes out, not before it queues
    _follow(config, scheduler, elector)
    readiness = Readiness()
    server = None
    if opts.metrics_port:
        server = serve_metrics(opts.metrics_address, opts.metrics_port, readiness)
    task = asyncio.create_task(scheduler.run(), name="gpusched-scheduling-loop")
    elector_task = None
    if elector is not None:
        elector_task = asyncio.create_task(elector.run_in_thread(), name="gpusched-leader-election")
    adapters = dict(watched())
    watch_api = KubeClusterApi(api_client(configuration, len(adapters)))  # a connection a watch
    versioned = dict(foreign.WATCHED)  # one version of each is watched: the newest served
    plain = [kind for kind in adapters if kind not in versioned]
    now = await served(watch_api, plain)
    kinds = [*now, *await foreign.served_kinds(watch_api)]
    api.foreign = watch_api.foreign  # a new leader lists the versions that are watched
    watches: list[asyncio.Task[None]] = []

    def start_watch(kind: Kind) -> None:
        watch = Watch(watch_api, kind, functools.partial(adapters[kind], scheduler), readiness)
        if not kind.group and kind.plural in KINDS:
            scheduler.resync.watching(kind.plural, watch)  # a warm watch vouches at take-over
        watches.append(asyncio.create_task(watch.run(), name=f"gpusched-watch-{kind.name}"))

    def on_served(chosen: Served) -> None:
        api.foreign = watch_api.foreign = chosen

    for kind in kinds:
        start_watch(kind)
    assert watch_api.foreign is not None  # read by served_kinds
    late = LateKinds(
        api=watch_api,
        plain=[kind for kind in plain if kind not in now],
        served=watch_api.foreign,
        start_watch=start_watch,
        on_served=on_served,
        interval=config.operator.discovery_interval_seconds,
    )
    if late.waiting:
        watches.append(asyncio.create_task(late.run(), name="gpusched-late-kinds"))
    return Runtime(
        configuration=configuration,
        scheduler=scheduler,
        api=api,
        telemetry=telemetry,
        task=task,
        readiness=readiness,
        watch_api=watch_api,
        watches=watches,
        elector=elector,
        elector_task=elector_task,
        metrics_server=server,
    )


def _elector(config: SchedulerConfig, configuration: client.Configuration) -> LeaderElector | None:
    """The Lease elector (None when leader election is off), with an API client of its own,
    made in its own thread (`LeaderElector.run_in_thread`)."""
    election = config.operator.leader_election
    if not election.enabled:
        return None
    namespace = election.lease_namespace or os.environ.get("POD_NAMESPACE", "default")
    identity = os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
    api = OpenedOnUse(lambda: KubeClusterApi(api_client(configuration)))
    return LeaderElector(api=api, config=election, namespace=namespace, identity=identity)


def _follow(config: SchedulerConfig, scheduler: Scheduler, elector: LeaderElector | None) -> None:
    """Makes ``scheduler`` lead when ``elector`` wins the Lease and stand by when it loses
    it; without an elector, it leads at once."""
    scheduler.lost_leadership()  # no decision before a full list of pods and nodes
    if elector is None:
        logger.info("leader election off: this replica schedules alone")
        metrics.LEADER.set(1)  # the only replica: dashboards read the leader's gauges
        scheduler.spawn(_lead(scheduler))
        return
    lease = f"{elector.namespace}/{config.operator.leader_election.lease_name}"
    logger.info(
        "standing by as %s: scheduling starts once it holds the lease %s", elector.identity, lease
    )

    def changed(leading: bool) -> None:
        if leading:
            scheduler.spawn(_lead(scheduler))
        else:
            logger.info("standing by: lost the lease %s", lease)
            scheduler.lost_leadership()

    elector.on_change = changed


FREEZE_AFTER_SECONDS = 10.0
"""How long after it takes the lead the operator freezes what it listed (`freeze_survivors`)."""


async def _lead(scheduler: Scheduler) -> None:
    """Leads once the cluster is listed, its heap frozen on both sides of the list.

    Before: what a standby has kept up to date (its watches' objects, its warm snapshot) is
    frozen after a collection of the young generations only, cheap on a standby whose collector
    has been running; so the collections after the take-over walk only what came since, not the
    whole heap (the 50,000-pod run's new leader spent 11 % of its samples in the binder's
    allocations, where automatic collections of the unfrozen heap land).
    After, later: the objects the list brought are collected and frozen once the first binds
    are out, rather than before them (a full walk took 1.2 s of a 5,000-node take-over's
    event loop, and failover is the kill to the first bind)."""
    freeze_survivors(generation=1)
    await scheduler.lead()
    asyncio.get_running_loop().call_later(FREEZE_AFTER_SECONDS, freeze_survivors)


async def stop(runtime: Runtime) -> None:
    """Stops what `start` started: the loop, the elector (which gives the Lease up), the
    watches, then closes the clients and the metrics server."""
    tasks = [t for t in (runtime.task, runtime.elector_task, *runtime.watches) if t is not None]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await runtime.telemetry.stop()
    await runtime.api.close()
    await runtime.watch_api.close()
    if runtime.metrics_server is not None:
        runtime.metrics_server.shutdown()
        runtime.metrics_server.server_close()

"""Kopf handlers: thin adapters from watch events to the scheduling service.

``kopf run -m gpusched.handlers`` (or ``gpusched run``) loads this module. Every watch goes
through ``on.event`` handlers, which Kopf does not track on the objects: no finalizers and no
progress annotations are ever written to pods, nodes or groups. Pods' and nodes' events skip
Kopf's per-object processing: they go from the watch stream straight to their handler
(`gpusched.handlers.watchers.direct`). The one scheduling loop runs as a task started at
startup (`gpusched.scheduler.loop`).

Options are the flags of ``gpusched run`` (`gpusched.options`): from `configure`
(``gpusched run``) or, under plain ``kopf run``, from ``$GPUSCHED_RUN_ARGS``.

A watch the API server refuses (a 404 while a CRD is re-installed) never ends the operator:
it is started over after a backoff, and ``/readyz`` (beside ``/metrics``) answers 503 while
it is down (`gpusched.handlers.watchers`); Kopf's ``/healthz`` is the liveness probe.

Logging: each decision (group, placement, pods and GPUs, or why not), each bind and each
leadership change is one INFO line. Kopf's own line per handled event ("Handler 'pod_event'
succeeded", most of what an operator would otherwise print) is dropped unless ``--verbose``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import socket
import sys
import threading
import urllib.parse
import urllib.request
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import kopf
from kubernetes_asyncio import client
from prometheus_client import make_wsgi_app

from gpusched.api.config import SchedulerConfig
from gpusched.api.crds import GROUP, VERSION
from gpusched.engine.collector import freeze_survivors
from gpusched.engine.groups import GroupKind
from gpusched.handlers import watchers
from gpusched.k8s.claims import KubeClaimApi
from gpusched.k8s.client import KubeClusterApi, load_configuration
from gpusched.options import Options as Options
from gpusched.options import OptionsError, from_environment
from gpusched.scheduler import metrics
from gpusched.scheduler.factory import build_scheduler
from gpusched.scheduler.leader import LeaderElector, OpenedOnUse
from gpusched.scheduler.service import Scheduler
from gpusched.scheduler.state import ClusterState
from gpusched.telemetry.cache import TelemetryCache

logger = logging.getLogger(__name__)

registry = kopf.OperatorRegistry()
"""Our handlers, in a registry of their own: a process that ran another Kopf operator (a
test) may have replaced Kopf's default registry. ``kopf run -m gpusched.handlers`` finds them
because importing this module makes it the default."""
kopf.set_default_registry(registry)
watchers.install()  # before Kopf starts a watcher: one that fails must not end the operator


_options: Options | None = None
running: Runtime | None = None
"""The runtime of the operator running in this process, if any (for tests and debugging)."""


def configure(options: Options) -> None:
    """Sets the options the next operator run in this process uses."""
    global _options
    _options = options


def options() -> Options:
    """The options of `configure`, else (plain ``kopf run``) those in ``$GPUSCHED_RUN_ARGS``."""
    if _options is not None:
        return _options
    return from_environment(os.environ)


def _options_or_exit() -> Options:
    """`options`, or (plain ``kopf run`` with a bad configuration) one line and exit status 2,
    as ``gpusched run`` does: Kopf retries a failing startup handler every 60 s for ever, with
    a traceback each time, and a configuration does not fix itself."""
    try:
        return options()
    except OptionsError as error:
        print(f"gpusched: {error}", file=sys.stderr)
        # Kopf's own tasks, never started, would warn on the way out: noise after the line.
        warnings.filterwarnings("ignore", message="coroutine .* was never awaited")
        raise SystemExit(2) from None


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_HANDLER_SUCCEEDED = re.compile(r"Handler '[^']*' succeeded\.")


def _not_a_handler_success(record: logging.LogRecord) -> bool:
    return not (
        record.levelno == logging.INFO and _HANDLER_SUCCEEDED.fullmatch(record.getMessage())
    )


def configure_logging(verbose: bool) -> None:
    """Logging for ``gpusched run``: INFO (DEBUG with ``verbose``) to stderr."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format=LOG_FORMAT)
    quiet_kopf(verbose)


def quiet_kopf(verbose: bool) -> None:
    """Drops Kopf's INFO line per handled event unless ``verbose`` (idempotent)."""
    objects = logging.getLogger("kopf.objects")
    objects.removeFilter(_not_a_handler_success)
    if not verbose:
        objects.addFilter(_not_a_handler_success)


@dataclass(slots=True)
class Runtime:
    """What the handlers share, kept in Kopf's memo."""

    scheduler: Scheduler
    api: KubeClusterApi
    telemetry: TelemetryCache
    task: asyncio.Task[None]
    elector: LeaderElector | None = None
    elector_task: asyncio.Task[None] | None = None
    metrics_server: Any = None


@kopf.on.startup(registry=registry)
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    opts = _options_or_exit()
    watchers.readiness.down.clear()  # a previous operator's in this process (tests)
    # Under `kopf run --verbose` (or --debug) Kopf has set the root logger to DEBUG.
    quiet_kopf(opts.verbose or logging.getLogger().isEnabledFor(logging.DEBUG))
    settings.posting.enabled = False  # our own Events are aggregated; Kopf's would duplicate
    settings.scanning.disabled = True  # our CRDs are known; no need to watch CRDs
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.networking.request_timeout = 60
    configuration = await load_configuration(opts.kubeconfig)
    memo.configuration = configuration
    api = KubeClusterApi(api_client(configuration, opts.config.operator.bind_concurrency))
    state = ClusterState(scheduler_name=opts.config.scheduler_name)
    telemetry = TelemetryCache(opts.config.telemetry, known_nodes=lambda: state.nodes.keys())
    await telemetry.start()  # an unreadable CA file fails here, loudly
    elector = _elector(opts.config, configuration)
    scheduler = build_scheduler(
        opts.config,
        state,
        api,
        telemetry=telemetry.samples,
        leading=(lambda: elector.leading) if elector is not None else None,
        claims=KubeClaimApi(api),
    )
    api.fence = scheduler.may_write  # asked as each write goes out, not before it queues
    _follow(opts.config, scheduler, elector)
    server = None
    if opts.metrics_port:
        server = serve_metrics(opts.metrics_address, opts.metrics_port, watchers.readiness)
    task = asyncio.create_task(scheduler.run(), name="gpusched-scheduling-loop")
    elector_task = None
    if elector is not None:
        elector_task = asyncio.create_task(elector.run_in_thread(), name="gpusched-leader-election")
    memo.runtime = Runtime(
        scheduler, api, telemetry, task, elector, elector_task, metrics_server=server
    )
    global running
    running = memo.runtime


OTHER_CONNECTIONS = 10
"""Connections to the API server besides the binds' (``bindConcurrency``): status patches
(8 at once), the Event poster and a list."""


def api_client(configuration: client.Configuration, binds: int = 0) -> client.ApiClient:
    """kubernetes_asyncio's client, without aiohttp's trust in the environment, and with
    room for ``binds`` binds in flight beside `OTHER_CONNECTIONS`.

    Trusting the environment, aiohttp looks ``~/.netrc`` and the proxy variables up in a
    worker thread for every request: two thread hops a bind, which took a fifth of the
    operator's time at 300 binds a second on two cores. The proxy the variables name for
    the API server (none in a cluster, as a rule) is looked up once, here, instead; a
    ``~/.netrc`` entry would only have clashed with our bearer token. The client's own
    connection limit is five per CPU: 10 on two cores, which held binds, Events, status
    patches and lists together below ``bindConcurrency``."""
    if not configuration.proxy:
        configuration.proxy = _environment_proxy(str(configuration.host))
    configuration.connection_pool_maxsize = max(
        configuration.connection_pool_maxsize, binds + OTHER_CONNECTIONS
    )
    made = client.ApiClient(configuration)
    made.rest_client.pool_manager._trust_env = False
    return made


def _environment_proxy(url: str) -> str | None:
    parts = urllib.parse.urlsplit(url)
    if not parts.hostname or urllib.request.proxy_bypass(parts.hostname):
        return None
    return urllib.request.getproxies().get(parts.scheme)


class _MetricsServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """One line per scrape or probe would drown the operator's own."""


Wsgi = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def serve_metrics(address: str, port: int, readiness: watchers.Readiness) -> WSGIServer:
    """Prometheus' ``/metrics`` and the readiness probe's ``/readyz`` (200 while every watch
    is up, 503 naming those that are down), served from a thread: Kopf's ``/healthz`` stays
    the liveness probe, so a watch that is down makes the pod unready, not restarted."""
    metrics: Wsgi = make_wsgi_app()

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != "/readyz":
            return metrics(environ, start_response)
        status = "200 OK" if readiness.ready else "503 Service Unavailable"
        start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
        return [readiness.report().encode() + b"\n"]

    host = address.strip("[]")  # an IPv6 address, as --metrics-address writes it
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    server_class = type("MetricsServer", (_MetricsServer,), {"address_family": family})
    server: WSGIServer = make_server(host, port, app, server_class, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="gpusched-metrics", daemon=True).start()
    return server


def _elector(config: SchedulerConfig, configuration: client.Configuration) -> LeaderElector | None:
    """The Lease elector (None when leader election is off), with an API client of its own,
    made in its own thread (`LeaderElector.run_in_thread`)."""
    election = config.operator.leader_election
    if not election.enabled:
        return None
    namespace = election.lease_namespace or os.environ.get("POD_NAMESPACE", "default")
    identity = os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
    api = OpenedOnUse(lambda: KubeClusterApi(api_client(configuration)))
    return LeaderElector(api, election, namespace, identity)


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


@kopf.on.login(registry=registry)
async def login(memo: kopf.Memo, **_: Any) -> kopf.ConnectionInfo:
    """Kopf's watches use the same credentials as our own client."""
    configuration: client.Configuration = memo.get("configuration") or await load_configuration(
        options().kubeconfig
    )
    token = (configuration.api_key or {}).get("authorization") or (configuration.api_key or {}).get(
        "BearerToken"
    )
    if token and token.lower().startswith("bearer "):
        token = token[len("bearer ") :]
    return kopf.ConnectionInfo(
        server=str(configuration.host),
        ca_path=configuration.ssl_ca_cert,
        insecure=not configuration.verify_ssl,
        token=token or None,
        certificate_path=configuration.cert_file,
        private_key_path=configuration.key_file,
        default_namespace="default",
    )


@kopf.on.cleanup(registry=registry)
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    global running
    runtime: Runtime | None = memo.get("runtime")
    if runtime is None:
        return
    running = None
    tasks = [t for t in (runtime.task, runtime.elector_task) if t is not None]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)  # the elector gives the Lease up
    await runtime.telemetry.stop()
    await runtime.api.close()
    if runtime.metrics_server is not None:
        runtime.metrics_server.shutdown()
        runtime.metrics_server.server_close()


def _scheduler(memo: kopf.Memo) -> Scheduler:
    runtime: Runtime = memo.runtime
    return runtime.scheduler


def _key(body: Any) -> str:
    metadata = body["metadata"]
    return f"{metadata.get('namespace', 'default')}/{metadata['name']}"


@watchers.direct("", "nodes")
@kopf.on.event("", "v1", "nodes", registry=registry)
async def node_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    scheduler = _scheduler(memo)
    body = event["object"]
    if event["type"] == "DELETED":
        scheduler.node_deleted(body["metadata"]["name"])
    else:
        scheduler.node_changed(body)


@watchers.direct("", "pods")
@kopf.on.event("", "v1", "pods", registry=registry)
async def pod_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    scheduler = _scheduler(memo)
    body = event["object"]
    if event["type"] == "DELETED":
        scheduler.pod_deleted(_key(body), str(body["metadata"].get("uid") or "") or None)
    else:
        # A (re)started watch's list (type None) never tells what was deleted meanwhile.
        scheduler.pod_changed(body, listed=event["type"] is None)


async def _group_event(kind: GroupKind, event: kopf.RawEvent, memo: kopf.Memo) -> None:
    scheduler = _scheduler(memo)
    body = event["object"]
    if event["type"] == "DELETED":
        scheduler.group_deleted(_key(body))
    else:
        scheduler.group_changed(kind, body)


@kopf.on.event(GROUP, VERSION, "podgroups", registry=registry)
async def pod_group_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    await _group_event(GroupKind.POD_GROUP, event, memo)


@kopf.on.event(GROUP, VERSION, "compositepodgroups", registry=registry)
async def composite_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    await _group_event(GroupKind.COMPOSITE, event, memo)


@kopf.on.event("scheduling.k8s.io", "v1", "priorityclasses", registry=registry)
async def priority_class_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    scheduler = _scheduler(memo)
    body = event["object"]
    if event["type"] == "DELETED":
        scheduler.priority_class_deleted(body["metadata"]["name"])
    else:
        scheduler.priority_class_changed(body)


@kopf.on.event("policy", "v1", "poddisruptionbudgets", registry=registry)
async def budget_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    scheduler = _scheduler(memo)
    body = event["object"]
    if event["type"] == "DELETED":
        scheduler.budget_deleted(_key(body))
    else:
        scheduler.budget_changed(body)


@kopf.on.event(GROUP, VERSION, "workloads", registry=registry)
async def workload_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    scheduler = _scheduler(memo)
    body = event["object"]
    if event["type"] == "DELETED":
        scheduler.workload_deleted(_key(body))
    else:
        scheduler.workload_changed(body)


from gpusched.handlers import dra as _dra  # noqa: E402, F401  (registers the DRA watches)

"""Kopf handlers: thin adapters from watch events to the scheduling service.

``kopf run -m gpusched.handlers`` (or ``gpusched run``) loads this module. Every watch goes
through ``on.event`` handlers, which Kopf does not track on the objects: no finalizers and no
progress annotations are ever written to pods, nodes or groups. The one scheduling loop runs
as a task started at startup (`gpusched.scheduler.service`).

Options come from `configure` (``gpusched run``) or, under plain ``kopf run``, from the
environment: ``GPUSCHED_CONFIG`` (a SchedulerConfig YAML file), ``KUBECONFIG``, and
``GPUSCHED_METRICS_PORT`` (0 disables ``/metrics``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kopf
import yaml
from kubernetes_asyncio import client
from prometheus_client import start_http_server

from gpusched.api.config import SchedulerConfig, load_config
from gpusched.api.crds import GROUP, VERSION
from gpusched.engine.groups import GroupKind
from gpusched.k8s.client import KubeClusterApi, load_configuration
from gpusched.scheduler import metrics
from gpusched.scheduler.leader import LeaderElector
from gpusched.scheduler.ports import ApiError
from gpusched.scheduler.service import Scheduler
from gpusched.scheduler.state import ClusterState
from gpusched.telemetry.cache import TelemetryCache

logger = logging.getLogger(__name__)

registry = kopf.OperatorRegistry()
"""Our handlers, in a registry of their own: a process that ran another Kopf operator (a
test) may have replaced Kopf's default registry. ``kopf run -m gpusched.handlers`` finds them
because importing this module makes it the default."""
kopf.set_default_registry(registry)


@dataclass(slots=True)
class Options:
    config: SchedulerConfig = field(default_factory=SchedulerConfig)
    kubeconfig: str | None = None
    metrics_address: str = "0.0.0.0"
    metrics_port: int = 9402
    """``/metrics`` port; 0 disables the endpoint."""


_options: Options | None = None
running: Runtime | None = None
"""The runtime of the operator running in this process, if any (for tests and debugging)."""


def configure(options: Options) -> None:
    """Sets the options the next operator run in this process uses."""
    global _options
    _options = options


def options() -> Options:
    if _options is not None:
        return _options
    path = os.environ.get("GPUSCHED_CONFIG")
    config = SchedulerConfig()
    if path:
        config = load_config(yaml.safe_load(Path(path).read_text(encoding="utf-8")), path)
    return Options(config=config, metrics_port=int(os.environ.get("GPUSCHED_METRICS_PORT", 9402)))


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
    opts = options()
    settings.posting.enabled = False  # our own Events are aggregated; Kopf's would duplicate
    settings.scanning.disabled = True  # our CRDs are known; no need to watch CRDs
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.networking.request_timeout = 60
    configuration = await load_configuration(opts.kubeconfig)
    memo.configuration = configuration
    api = KubeClusterApi(client.ApiClient(configuration))
    state = ClusterState(scheduler_name=opts.config.scheduler_name)
    telemetry = TelemetryCache(opts.config.telemetry, known_nodes=lambda: state.nodes.keys())
    await telemetry.start()  # an unreadable CA file fails here, loudly
    scheduler = Scheduler(opts.config, state, api, telemetry.samples)
    api.fence = scheduler.may_write  # asked as each write goes out, not before it queues
    elector = _elector(opts.config, api, scheduler)
    server = None
    if opts.metrics_port:
        server, _thread = start_http_server(opts.metrics_port, opts.metrics_address)
    task = asyncio.create_task(scheduler.run(), name="gpusched-scheduling-loop")
    elector_task = None
    if elector is not None:
        elector_task = asyncio.create_task(elector.run(), name="gpusched-leader-election")
    memo.runtime = Runtime(
        scheduler, api, telemetry, task, elector, elector_task, metrics_server=server
    )
    global running
    running = memo.runtime


def _elector(
    config: SchedulerConfig, api: KubeClusterApi, scheduler: Scheduler
) -> LeaderElector | None:
    """The Lease elector gating ``scheduler`` (None when leader election is off)."""
    election = config.operator.leader_election
    scheduler.lost_leadership()  # no decision before a full list of pods and nodes
    if not election.enabled:
        metrics.LEADER.set(1)  # the only replica: dashboards read the leader's gauges
        scheduler.spawn(_take_leadership(scheduler, api))
        return None
    namespace = election.lease_namespace or os.environ.get("POD_NAMESPACE", "default")
    identity = os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"

    def changed(leading: bool) -> None:
        if leading:
            scheduler.spawn(_take_leadership(scheduler, api))
        else:
            scheduler.lost_leadership()

    elector = LeaderElector(api, election, namespace, identity, changed)
    scheduler.leading = lambda: elector.leading
    return elector


async def _take_leadership(scheduler: Scheduler, api: KubeClusterApi) -> None:
    """Lists pods and nodes until it works: the watches start at the same time, and a
    decision made before both lists are in could see free GPUs that bound pods hold."""
    delay = 0.5
    while True:
        try:
            await scheduler.take_leadership(api.list_pods())
            return
        except ApiError as error:
            logger.warning("cannot list the cluster yet (%s); retrying in %.1f s", error, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)


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
    await asyncio.gather(*tasks, return_exceptions=True)
    if runtime.elector is not None:
        await runtime.elector.release()
    await runtime.telemetry.stop()
    await runtime.api.close()
    if runtime.metrics_server is not None:
        runtime.metrics_server.shutdown()


def _scheduler(memo: kopf.Memo) -> Scheduler:
    runtime: Runtime = memo.runtime
    return runtime.scheduler


@kopf.on.event("", "v1", "nodes", registry=registry)
async def node_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    scheduler = _scheduler(memo)
    body = event["object"]
    if event["type"] == "DELETED":
        scheduler.state.delete_node(body["metadata"]["name"])
    else:
        scheduler.state.upsert_node(body)
    scheduler.wake()


@kopf.on.event("", "v1", "pods", registry=registry)
async def pod_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    scheduler = _scheduler(memo)
    body = event["object"]
    if event["type"] == "DELETED":
        metadata = body["metadata"]
        scheduler.state.delete_pod(
            f"{metadata.get('namespace', 'default')}/{metadata['name']}",
            str(metadata.get("uid") or "") or None,
        )
        scheduler.recorder.forget(str(metadata.get("uid", "")))
    else:
        scheduler.state.upsert_pod(body)
        if event["type"] is None:  # a (re)started watch's list: deletions it never tells
            scheduler.relisted()
    scheduler.wake()


async def _group_event(kind: GroupKind, event: kopf.RawEvent, memo: kopf.Memo) -> None:
    scheduler = _scheduler(memo)
    body = event["object"]
    metadata = body["metadata"]
    if event["type"] == "DELETED":
        scheduler.forget_group(f"{metadata.get('namespace', 'default')}/{metadata['name']}")
        return
    if scheduler.state.upsert_group(kind, body):
        scheduler.wake()


@kopf.on.event(GROUP, VERSION, "podgroups", registry=registry)
async def pod_group_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    await _group_event(GroupKind.POD_GROUP, event, memo)


@kopf.on.event(GROUP, VERSION, "compositepodgroups", registry=registry)
async def composite_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    await _group_event(GroupKind.COMPOSITE, event, memo)


@kopf.on.event(GROUP, VERSION, "workloads", registry=registry)
async def workload_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    scheduler = _scheduler(memo)
    body = event["object"]
    metadata = body["metadata"]
    if event["type"] == "DELETED":
        scheduler.state.delete_workload(
            f"{metadata.get('namespace', 'default')}/{metadata['name']}"
        )
        return
    scheduler.state.upsert_workload(body)
    scheduler.wake()

"""scheduler_perf's workloads on the real control plane: gpusched, kube-scheduler 1.37 and the
API server's own bind rate, in one run.

    python bench/perf_shapes.py --quick           # every shape scaled down: a few minutes
    python bench/perf_shapes.py                   # upstream's counts (5,000 nodes; hours here)
    python bench/perf_shapes.py --shape gang-1000 --shape tas-750   # some of them

The shapes are those of kubernetes/kubernetes `test/integration/scheduler_perf`, with the
counts of its `performance` workloads:

- `basic-10k`, `basic-50k`: SchedulingBasic (`misc/performance-config.yaml`): 5,000 Nodes
  (4 CPUs, 32 Gi, 110 pods), 1,000 (5,000) pods scheduled first, then 10,000 (50,000) measured
  pods of 100m CPU / 500 Mi. Upstream's floors: 680 and 810 pods/s.
- `gang-1000`, `gang-2000`, `gang-3000`: GangScheduling (`podgroup/gangscheduling`): the same
  Nodes, 1,000 / 2,000 / 3,000 `scheduling.k8s.io/v1beta1` PodGroups of minCount 3, their pods
  (100m / 100 Mi) naming the group in `spec.schedulingGroup`. Upstream measured a gang attempt
  (`scheduler_podgroup_scheduling_attempt_duration_seconds`, mean) at ~3.7 / 5.0 / 5.7 ms.
- `tas-750`, `tas-1500`, `tas-2250`: TopologyAwareScheduling (`podgroup/tas`): Nodes labelled
  zone and `topology.kubernetes.io/rack`, 100 a rack (50 racks), PodGroups of minCount 4 kept
  to one rack. kubernetes PR #140611 measured 562-630 / 526-574 / 492-547 pods/s.
- `gpu-64`, ours, which upstream's benchmark has no shape for: DGX A100-like Nodes (8 GPUs with
  the topology annotation, 20 a rack, 8 racks a zone), Workloads of one zone
  CompositePodGroup (minGroupCount 4) over 4 rack PodGroups of 16 pods, each pod asking for 8
  GPUs: 64-pod two-level gangs. kube-scheduler 1.37 reads the same objects (its
  TopologyAwareWorkloadScheduling and CompositePodGroup gates are on), so both get them.

As upstream's benchmark does, the Nodes are plain Node objects this script creates (Ready, no
kubelet, no heartbeats) and pods never run. Groups and pods are the same objects for every
scheduler (testing/upstream.py), in namespaces of their own, differing only in
`spec.schedulerName`. For each shape, in turn:

1. The limit: the shape's pods are created for no scheduler, then a minimal client (aiohttp
   in a child process, as every request this script sends; `--limit-connections`
   connections, bodies encoded beforehand) POSTs their `pods/binding` as fast as the API
   server takes them, round-robin over the Nodes; bind rate first to last bind as the watch
   sees it, the median of `--limit-rounds` rounds on fresh pods. A Python client spends CPU
   on the same cores as the server: the limit it finds is a floor of the server's own.
2. Each scheduler (gpusched as users run it; kube-scheduler at its defaults; kube-scheduler
   with its client unthrottled, `--kube-api-qps`/`--kube-api-burst` at `--unthrottled-qps`):
   - drain: the same pods created while it is stopped, then it starts: pods/s first to last
     bind (its start-up shown apart), and that as a share of the limit;
   - live, as scheduler_perf runs: with it running, the init pods, then the groups, then the
     pods created as fast as the client goes: pods/s from the first created to the last bound
     and first to last bind; per gang, its first pod created to all its pods bound (p50/p99);
     the gang attempt from the scheduler's own /metrics (kube-scheduler: its
     `scheduler_podgroup_scheduling_attempt_duration_seconds{result="scheduled"}`, which
     includes its synchronous PATCH of each PodGroup's status, and beside it its
     `scheduler_podgroup_scheduling_algorithm_duration_seconds`, the decision alone; gpusched:
     `gpusched_decision_duration_seconds`, one cycle, which decides every pending group at
     once, and its mean per group attempt); the CPU seconds of the scheduler's process.

Binds are seen by one watch on the pods of a namespace, the same for all. Targets, printed met
or not met: gpusched's pods/s at least kube-scheduler's unthrottled, its gang p99 at most
kube-scheduler's unthrottled, its drain at least 80 % of the limit. The machine's cores are
shared by the API server, etcd, the scheduler and the clients: compare ratios, and read the
load averages printed with them. Nothing asserts; results go to bench/results/perf_shapes.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import platform
import ssl
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE)]

from scale import (  # noqa: E402
    APISERVER_FLAGS,
    CONTROLLER_MANAGER_FLAGS,
    PodWatch,
    Replica,
    histogram_quantile,
    percentile,
    rate,
)
from testing.cluster.cluster import RealCluster  # noqa: E402
from testing.cluster.controlplane import LOOPBACK, free_port  # noqa: E402
from testing.gangs import upstream_member, upstream_pod_group  # noqa: E402
from testing.manifests import HOSTNAME, RACK, ZONE, node  # noqa: E402
from testing.upstream import (  # noqa: E402
    KUBE_SCHEDULER,
    WORKLOAD_API,
    clear_upstream,
    for_scheduler,
    kube_scheduler,
    workload_objects,
)
from versus import Api, cpu_seconds, ensure_namespace  # noqa: E402

RESULTS = HERE / "results" / "perf_shapes.json"
LOGS = HERE / "results" / "perf_shapes"
TAS_RACK = "topology.kubernetes.io/rack"
"""The rack label of upstream's TAS Node template (ours, `RACK`, is the GPU shape's)."""
PAUSE = "registry.k8s.io/pause:3.10.1"
NOBODY = "perf-shapes-nobody"
"""The limit's pods name a scheduler nobody runs: only the minimal client binds them."""
GPUSCHED = "gpusched"
DEFAULTS = "kube-scheduler"
UNTHROTTLED = "kube-scheduler-unthrottled"
SCHEDULERS = (GPUSCHED, DEFAULTS, UNTHROTTLED)
GPU_PARTS, GPU_PART_PODS = 4, 16
"""The GPU shape's gang: 4 rack PodGroups of 16 pods in one zone."""
GPU_RACKS_PER_ZONE, GPU_NODES_PER_RACK = 8, 20

Body = dict[str, Any]
Item = tuple[str, str, Body]


# -- the shapes ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    name: str
    kind: str
    """basic, gang, tas or gpu."""
    nodes: int
    pods: int
    """Measured pods."""
    init_pods: int = 0
    """Pods scheduled before the measured ones (live phase only), as upstream's initPods."""
    gang_size: int = 0
    """Pods a gang (0: no gangs)."""
    nodes_per_rack: int = 0
    upstream: str = ""
    """What upstream publishes for this shape (on its machines)."""

    @property
    def gangs(self) -> int:
        return self.pods // self.gang_size if self.gang_size else 0

    @property
    def node_kind(self) -> tuple[str, int, int]:
        """Shapes with equal node kinds share one set of Nodes."""
        return (
            self.kind if self.kind in ("tas", "gpu") else "plain",
            self.nodes,
            self.nodes_per_rack,
        )


FULL = (
    Shape("basic-10k", "basic", 5000, 10000, init_pods=1000, upstream="threshold 680 pods/s"),
    Shape("basic-50k", "basic", 5000, 50000, init_pods=5000, upstream="threshold 810 pods/s"),
    Shape("gang-1000", "gang", 5000, 3000, gang_size=3, upstream="gang attempt mean ~3.7 ms"),
    Shape("gang-2000", "gang", 5000, 6000, gang_size=3, upstream="gang attempt mean ~5.0 ms"),
    Shape("gang-3000", "gang", 5000, 9000, gang_size=3, upstream="gang attempt mean ~5.7 ms"),
    Shape("tas-750", "tas", 5000, 3000, 0, 4, 100, "562-630 pods/s (PR #140611)"),
    Shape("tas-1500", "tas", 5000, 6000, 0, 4, 100, "526-574 pods/s (PR #140611)"),
    Shape("tas-2250", "tas", 5000, 9000, 0, 4, 100, "492-547 pods/s (PR #140611)"),
    Shape("gpu-64", "gpu", 32 * 160, 64 * 64, gang_size=64, nodes_per_rack=GPU_NODES_PER_RACK),
)
QUICK = (
    Shape("basic", "basic", 250, 300, init_pods=50),
    Shape("gang", "gang", 250, 180, gang_size=3),
    Shape("tas", "tas", 250, 200, gang_size=4, nodes_per_rack=25),
    Shape("gpu", "gpu", 160, 2 * 64, gang_size=64, nodes_per_rack=GPU_NODES_PER_RACK),
)
"""Every shape scaled down to what 2 shared cores take in a few minutes: 250 Nodes (the TAS
shape in 10 racks), the GPU shape one zone of 8 racks and 2 gangs."""


def node_bodies(shape: Shape) -> list[Body]:
    """The shape's Nodes, status included (the script writes it: no kubelet)."""
    if shape.kind == "gpu":
        per_zone = GPU_RACKS_PER_ZONE * GPU_NODES_PER_RACK
        return [
            node(
                f"n{i:05d}",
                f"zone-{i // per_zone}",
                f"rack-{i // GPU_NODES_PER_RACK}",
                capacity=True,
            )
            for i in range(shape.nodes)
        ]
    return [
        _plain_node(i, shape.nodes_per_rack if shape.kind == "tas" else 0)
        for i in range(shape.nodes)
    ]


def _plain_node(index: int, per_rack: int) -> Body:
    """Upstream's Node template: 4 CPUs, 32 Gi, 110 pods; with racks, zone and rack labels as
    its TAS template writes them (a zone of 100 Nodes, `per_rack` Nodes a rack)."""
    name = f"n{index:05d}"
    labels = {HOSTNAME: name}
    if per_rack:
        labels |= {ZONE: f"zone-{index // 100}", TAS_RACK: f"rack-{index // per_rack}"}
    resources = {"cpu": "4", "memory": "32Gi", "pods": "110"}
    status = {
        "capacity": resources,
        "allocatable": dict(resources),
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}],
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": status,
    }


@dataclass
class Work:
    """What one scheduler is given for a shape, in the order it is created."""

    groups: list[Body]
    init: list[Body]
    pods: list[Body]
    gangs: dict[str, list[str]] = field(default_factory=dict)
    """Root group → the names of its pods."""


def shape_work(shape: Shape, scheduler: str, namespace: str) -> Work:
    """The shape's objects in `namespace`, their pods for `scheduler` (a `schedulerName`)."""
    if shape.kind == "basic":
        init = [basic_pod(f"init-{i:05d}", namespace, scheduler) for i in range(shape.init_pods)]
        pods = [basic_pod(f"p-{i:05d}", namespace, scheduler) for i in range(shape.pods)]
        return Work([], init, pods)
    if shape.kind == "gpu":
        return _gpu_work(shape, scheduler, namespace)
    key = TAS_RACK if shape.kind == "tas" else None
    work = Work([], [], [])
    for g in range(shape.gangs):
        group = f"gang-{g}"
        work.groups.append(upstream_pod_group(group, shape.gang_size, key=key, namespace=namespace))
        names = [f"gang-{g}-{i}" for i in range(shape.gang_size)]
        work.pods += [gang_pod(name, namespace, scheduler, group) for name in names]
        work.gangs[group] = names
    return work


def _gpu_work(shape: Shape, scheduler: str, namespace: str) -> Work:
    work = Work([], [], [])
    for g in range(shape.gangs):
        name = f"train-{g}"
        parts = [f"part-{p}" for p in range(GPU_PARTS)]
        workload = {
            "apiVersion": WORKLOAD_API,
            "kind": "Workload",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "compositePodGroupTemplates": [
                    {
                        "name": "zone",
                        "schedulingPolicy": {"gang": {"minGroupCount": GPU_PARTS}},
                        "schedulingConstraints": {"topology": [{"key": ZONE}]},
                        "podGroupTemplates": [
                            {
                                "name": part,
                                "schedulingPolicy": {"gang": {"minCount": GPU_PART_PODS}},
                                "schedulingConstraints": {"topology": [{"key": RACK}]},
                            }
                            for part in parts
                        ],
                    }
                ]
            },
        }
        work.groups += workload_objects(workload)
        names = []
        for part in parts:
            for i in range(GPU_PART_PODS):
                pod_name = f"{name}-{part}-{i}"
                member = upstream_member(pod_name, 8, f"{name}-{part}", namespace=namespace)
                work.pods.append(for_scheduler(member, scheduler))
                names.append(pod_name)
        work.gangs[name] = names
    return work


def basic_pod(name: str, namespace: str, scheduler: str) -> Body:
    """Upstream's default pod: pause, 100m CPU and 500 Mi requested and limited, port 80."""
    resources = {"cpu": "100m", "memory": "500Mi"}
    container = {
        "name": "pause",
        "image": PAUSE,
        "ports": [{"containerPort": 80}],
        "resources": {"requests": resources, "limits": dict(resources)},
    }
    return _pod(name, namespace, {"schedulerName": scheduler, "containers": [container]})


def gang_pod(name: str, namespace: str, scheduler: str, group: str) -> Body:
    """Upstream's gang pod: pause, 100m CPU and 100 Mi requested, its group named in
    `spec.schedulingGroup`."""
    container = {
        "name": "pause",
        "image": PAUSE,
        "resources": {"requests": {"cpu": "100m", "memory": "100Mi"}},
    }
    spec = {"schedulerName": scheduler, "schedulingGroup": {"podGroupName": group}}
    return _pod(name, namespace, {**spec, "containers": [container]})


def _pod(name: str, namespace: str, spec: Body) -> Body:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


PLURALS = {
    "Pod": "pods",
    "Node": "nodes",
    "PodGroup": "podgroups",
    "CompositePodGroup": "compositepodgroups",
    "Workload": "workloads",
}


def create_item(body: Mapping[str, Any]) -> Item:
    """The POST that creates `body`."""
    version = body["apiVersion"]
    prefix = "/api/v1" if version == "v1" else f"/apis/{version}"
    namespace = body["metadata"].get("namespace")
    scope = f"/namespaces/{namespace}" if namespace else ""
    plural = PLURALS[body["kind"]]
    if body["kind"] == "Node":
        body = {k: v for k, v in body.items() if k != "status"}  # status goes in its own call
    return ("POST", f"{prefix}{scope}/{plural}", dict(body))


def binding_items(pods: Sequence[Mapping[str, Any]], nodes: Sequence[str]) -> list[Item]:
    """A `pods/binding` POST for each pod, the nodes taken in turn: what a scheduler sends,
    without deciding anything."""
    items = []
    for index, pod in enumerate(pods):
        name, namespace = pod["metadata"]["name"], pod["metadata"]["namespace"]
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": nodes[index % len(nodes)]},
        }
        items.append(("POST", f"/api/v1/namespaces/{namespace}/pods/{name}/binding", body))
    return items


async def _send_all(
    url: str, token: str, ca: str, items: list[Item], connections: int
) -> tuple[list[float], int]:
    """Sends every (method, path, body) over `connections` connections as fast as the server
    answers, bodies encoded before the clock starts: aiohttp, the least CPU a Python client
    spends a request (it shares the cores with the server). Returns when each was first sent
    (on the monotonic clock every process shares) and how many answers asked to retry (429,
    5xx: sent again; a POST answered 409 after a retry was applied the first time)."""
    import asyncio

    import aiohttp

    encoded = [(m, path, json.dumps(body).encode()) for m, path, body in items]
    queue = iter(range(len(items)))  # one iterator shared by the workers of one loop
    sent = [0.0] * len(items)
    refused = 0
    headers = {"Authorization": f"Bearer {token}"}
    connector = aiohttp.TCPConnector(limit=connections, ssl=ssl.create_default_context(cafile=ca))
    async with aiohttp.ClientSession(url, headers=headers, connector=connector) as session:

        async def worker() -> None:
            nonlocal refused
            for index in queue:
                method, path, data = encoded[index]
                kind = "merge-patch+json" if method == "PATCH" else "json"
                sent[index] = time.monotonic()
                for attempt in range(20):
                    async with session.request(
                        method, path, data=data, headers={"Content-Type": f"application/{kind}"}
                    ) as response:
                        text = await response.text()
                    if response.status < 300 or (attempt and response.status == 409):
                        break
                    if response.status != 429 and response.status < 500:
                        raise RuntimeError(f"{method} {path}: {response.status} {text[:300]}")
                    refused += 1
                    await asyncio.sleep(0.2)  # the server asked to retry later
                else:
                    raise RuntimeError(f"{method} {path}: still refused after 20 tries")

        await asyncio.gather(*(worker() for _ in range(connections)))
    return sent, refused


def send_all(
    url: str, token: str, ca: str, items: list[Item], connections: int
) -> tuple[list[float], int]:
    import asyncio

    return asyncio.run(_send_all(url, token, ca, items, connections))


# -- the figures ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Histogram:
    """A Prometheus histogram: (upper bound, cumulative count) sorted by bound, +Inf last."""

    buckets: tuple[tuple[float, float], ...] = ()
    total: float = 0.0
    count: float = 0.0

    def minus(self, earlier: Histogram) -> Histogram:
        """What was observed since `earlier` (a scrape of the same process)."""
        before = dict(earlier.buckets)
        return Histogram(
            tuple((b, c - before.get(b, 0.0)) for b, c in self.buckets),
            self.total - earlier.total,
            self.count - earlier.count,
        )

    def quantile(self, q: float) -> float | None:
        return histogram_quantile(q, self.buckets) if self.count > 0 else None

    @property
    def mean(self) -> float | None:
        return self.total / self.count if self.count > 0 else None


def histogram(text: str, name: str, **labels: str) -> Histogram:
    """Histogram `name` from a /metrics text, every series whose labels include `labels`
    summed bucket by bucket."""
    from prometheus_client.parser import text_string_to_metric_families

    buckets: dict[float, float] = {}
    total = count = 0.0
    for family in text_string_to_metric_families(text):
        if family.name != name:
            continue
        for sample in family.samples:
            if any(sample.labels.get(k) != v for k, v in labels.items()):
                continue
            if sample.name == f"{name}_bucket":
                bound = float(sample.labels["le"])
                buckets[bound] = buckets.get(bound, 0.0) + sample.value
            elif sample.name == f"{name}_sum":
                total += sample.value
            elif sample.name == f"{name}_count":
                count += sample.value
    return Histogram(tuple(sorted(buckets.items())), total, count)


def counter(text: str, name: str, **labels: str) -> float:
    """Counter `name` (its `_total` sample) summed over the series whose labels include
    `labels`."""
    from prometheus_client.parser import text_string_to_metric_families

    value = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in (name, f"{name}_total") and all(
                sample.labels.get(k) == v for k, v in labels.items()
            ):
                value += sample.value
    return value


def gang_seconds(
    created: Mapping[str, float], bound: Mapping[str, float], gangs: Mapping[str, Sequence[str]]
) -> list[float]:
    """For each gang all of whose pods were created and bound: its first pod created to its
    last pod bound."""
    seconds = []
    for members in gangs.values():
        if all(m in created and m in bound for m in members):
            seconds.append(max(bound[m] for m in members) - min(created[m] for m in members))
    return seconds


def created_to_bound_rate(pods: int, first_created: float, bound: Sequence[float]) -> float:
    """Pods bound per second from the first pod created to the last bound."""
    if not bound or max(bound) <= first_created:
        return 0.0
    return len(bound) / (max(bound) - first_created)


def ratio(ours: float | None, theirs: float | None) -> float | None:
    if ours is None or theirs is None or theirs == 0:
        return None
    return ours / theirs


def verdicts(shape: Mapping[str, Any]) -> dict[str, bool | None]:
    """The issue's targets for one shape's results: gpusched's pods/s (drain, and created →
    all bound) at least kube-scheduler's unthrottled, its gang p99 at most kube-scheduler's
    unthrottled (gang shapes), its drain at least 80 % of the limit. None: not measured."""
    ours, theirs = shape.get(GPUSCHED), shape.get(UNTHROTTLED)
    out: dict[str, bool | None] = {}

    def at_least(a: float | None, b: float | None, share: float = 1.0) -> bool | None:
        return None if a is None or b is None else a >= share * b

    def get(run: Mapping[str, Any] | None, phase: str, key: str) -> float | None:
        return None if run is None else run.get(phase, {}).get(key)

    out["drain pods/s >= kube-scheduler unthrottled"] = at_least(
        get(ours, "drain", "pods_per_second"), get(theirs, "drain", "pods_per_second")
    )
    out["live pods/s >= kube-scheduler unthrottled"] = at_least(
        get(ours, "live", "created_to_bound_pods_per_second"),
        get(theirs, "live", "created_to_bound_pods_per_second"),
    )
    if shape["shape"]["gang_size"]:
        p99 = get(ours, "live", "gang_p99_s")
        out["gang p99 <= kube-scheduler unthrottled"] = at_least(
            get(theirs, "live", "gang_p99_s"), p99
        )
    limit = shape.get("limit", {}).get("pods_per_second")
    out["drain >= 80% of the API server's limit"] = at_least(
        get(ours, "drain", "pods_per_second"), limit, 0.8
    )
    return out


# -- the cluster ---------------------------------------------------------------------------------


class Bench:
    """One control plane, its Nodes, and the calls every phase makes."""

    def __init__(self, cluster: RealCluster, args: argparse.Namespace, pool: Any) -> None:
        self.cluster = cluster
        self.api = Api(cluster)
        self.pool = pool
        """One child process sends every batch of requests: the watches keep this one's GIL,
        and a child started per batch costs seconds of imports on a loaded machine."""
        self.args = args
        self.retried = 0
        self.nodes: list[str] = []
        self.node_kind: tuple[str, int, int] | None = None

    def make_nodes(self, shape: Shape) -> None:
        if self.node_kind == shape.node_kind:
            return
        started = time.monotonic()
        if self.nodes:
            self.api.client.http.request("DELETE", "/api/v1/nodes", json={"gracePeriodSeconds": 0})
            _wait(
                lambda: not self.api.client.list_raw("nodes", limit="1")["items"],
                300,
                "Nodes deleted",
            )
        bodies = node_bodies(shape)
        self.send([create_item(b) for b in bodies])
        self.send(
            [
                ("PATCH", f"/api/v1/nodes/{b['metadata']['name']}/status", {"status": b["status"]})
                for b in bodies
            ]
        )

        # The node-lifecycle controller lifts the not-ready taint the API server puts on every
        # new Node once it reports Ready; both schedulers respect it.
        def ready() -> bool:
            items = self.api.client.list_raw("nodes", resourceVersion="0")["items"]
            return len(items) == len(bodies) and not any(n["spec"].get("taints") for n in items)

        _wait(ready, 600, "Nodes ready")
        self.nodes = [b["metadata"]["name"] for b in bodies]
        self.node_kind = shape.node_kind
        _say(f"{len(bodies)} {shape.node_kind[0]} Nodes in {time.monotonic() - started:.0f} s")

    def create(self, bodies: Sequence[Body]) -> list[float]:
        return self.send([create_item(b) for b in bodies]) if bodies else []

    def send(self, items: list[Item], concurrency: int | None = None) -> list[float]:
        """Sends `items` from the child, `concurrency` in flight (default `--concurrency`);
        returns when each was first sent, on the monotonic clock all processes share."""
        api = self.api
        flight = concurrency or self.args.concurrency
        sent, retried = self.pool.apply(send_all, (api.url, api.token, api.ca, items, flight))
        self.retried += retried
        return list(sent)

    def clean(self, namespace: str) -> None:
        self.api.delete_pods(namespace, timeout=self.args.timeout)
        clear_upstream(self.api.client, [namespace], timeout=self.args.timeout)

    def limit(self, shape: Shape) -> dict[str, Any]:
        """The API server's bind rate: the shape's pods, pending for no scheduler, bound by the
        minimal client, `--limit-rounds` times (the median round counts: a small shape binds
        in a second, where one busy moment of the machine shows)."""
        rounds = [
            self._limit_round(shape, f"{shape.name}-limit-{r}")
            for r in range(self.args.limit_rounds)
        ]
        ranked = sorted(rounds, key=lambda r: r["pods_per_second"])
        result = {
            **ranked[len(ranked) // 2],
            "rounds_pods_per_second": [r["pods_per_second"] for r in rounds],
        }
        _say(f"{shape.name}: the API server binds {result['pods_per_second']:.0f} pods/s")
        return result

    def _limit_round(self, shape: Shape, namespace: str) -> dict[str, Any]:
        ensure_namespace(self.api, namespace)
        work = shape_work(shape, NOBODY, namespace)
        self.create(work.groups + work.pods)  # nobody schedules them: one batch
        with PodWatch(self.api, namespace) as watch:
            items = binding_items(work.pods, self.nodes)
            started = time.monotonic()
            self.send(items, self.args.limit_connections)
            answered = time.monotonic()
            done = watch.wait(len(work.pods), self.args.timeout)
        times = sorted(watch.bound.values())
        self.clean(namespace)
        return {
            "pods": len(work.pods),
            "bound": len(times),
            "all_bound": done,
            "connections": self.args.limit_connections,
            "pods_per_second": rate(times),
            "client_pods_per_second": len(items) / (answered - started),
        }

    def run(self, shape: Shape, scheduler: str) -> dict[str, Any]:
        """One scheduler on one shape: drain, then live."""
        name = KUBE_SCHEDULER if scheduler != GPUSCHED else GPUSCHED
        backlog, live = f"{shape.name}-{scheduler}-drain", f"{shape.name}-{scheduler}-live"
        ensure_namespace(self.api, backlog)
        ensure_namespace(self.api, live)
        work = shape_work(shape, name, backlog)
        self.create(work.groups + work.pods)  # the scheduler is stopped: one batch
        result: dict[str, Any] = {}
        with PodWatch(self.api, backlog) as watch:
            started = time.monotonic()
            with self.scheduler(scheduler, shape) as running:
                done = watch.wait(len(work.pods), self.args.timeout)
                cpu = cpu_seconds(running.pid)
                times = sorted(watch.bound.values())
                result["drain"] = {
                    "pods": len(work.pods),
                    "bound": len(times),
                    "all_bound": done,
                    "start_to_first_bind_s": times[0] - started if times else None,
                    "pods_per_second": rate(times),
                    "cpu_seconds": cpu,
                }
                self.clean(backlog)
                before = running.scrape()
                cpu = cpu_seconds(running.pid)
                result["live"] = self.live(shape, name, live)
                result["live"]["cpu_seconds"] = cpu_seconds(running.pid) - cpu
                result["live"].update(running.attempts(running.scrape(), before))
        self.clean(live)
        result["load_average"] = os.getloadavg()
        _say(
            f"{shape.name}, {scheduler}: drain {result['drain']['pods_per_second']:.0f} pods/s, "
            f"live {result['live']['created_to_bound_pods_per_second']:.0f} pods/s"
        )
        return result

    def live(self, shape: Shape, scheduler: str, namespace: str) -> dict[str, Any]:
        work = shape_work(shape, scheduler, namespace)
        with PodWatch(self.api, namespace) as watch:
            if work.init:
                self.create(work.init)
                watch.wait(len(work.init), self.args.timeout)
            self.create(work.groups)
            measured = [p["metadata"]["name"] for p in work.pods]
            sent = self.create(work.pods)
            created = dict(zip(measured, sent, strict=True))
            done = watch.wait(len(work.init) + len(work.pods), self.args.timeout)
        bound = {n: watch.bound[n] for n in measured if n in watch.bound}
        times = sorted(bound.values())
        gangs = gang_seconds(created, bound, work.gangs)
        return {
            "pods": len(work.pods),
            "bound": len(bound),
            "all_bound": done,
            "created_per_second": rate(sent),
            "created_to_bound_pods_per_second": created_to_bound_rate(len(times), min(sent), times),
            "first_to_last_bind_pods_per_second": rate(times),
            "gangs": len(work.gangs),
            "gangs_bound": len(gangs),
            "gang_p50_s": percentile(gangs, 0.5),
            "gang_p99_s": percentile(gangs, 0.99),
        }

    @contextlib.contextmanager
    def scheduler(self, scheduler: str, shape: Shape) -> Iterator[Running]:
        if scheduler == GPUSCHED:
            LOGS.mkdir(parents=True, exist_ok=True)
            replica = Replica(f"gpusched-{shape.name}", self.cluster, LOGS)
            try:
                yield GpuschedRunning(replica.pid, f"http://{LOOPBACK}:{replica.port}/metrics")
                if not replica.alive:
                    raise RuntimeError(f"gpusched exited; see {replica.log}")
            finally:
                replica.stop()
            return
        port = free_port()
        flags = []
        if scheduler == UNTHROTTLED:
            qps = self.args.unthrottled_qps
            flags = [f"--kube-api-qps={qps:g}", f"--kube-api-burst={round(2 * qps)}"]
        with kube_scheduler(self.cluster, flags, port=port) as pid:
            yield KubeSchedulerRunning(pid, f"https://{LOOPBACK}:{port}/metrics", self.api.token)


@dataclass
class Running:
    pid: int
    url: str

    def scrape(self) -> str:
        with httpx.Client(timeout=30) as client:
            return client.get(self.url).text

    def attempts(self, after: str, before: str) -> dict[str, Any]:
        raise NotImplementedError


@dataclass
class GpuschedRunning(Running):
    def attempts(self, after: str, before: str) -> dict[str, Any]:
        """One decision cycle decides every pending group: its duration is per cycle, and its
        mean per attempt is the cycles' time over the group attempts they made."""
        name = "gpusched_decision_duration_seconds"
        cycles = histogram(after, name).minus(histogram(before, name))
        tries = counter(after, "gpusched_schedule_attempts") - counter(
            before, "gpusched_schedule_attempts"
        )
        gang = "gpusched_gang_bind_seconds"
        bind = histogram(after, gang).minus(histogram(before, gang))
        return {
            "attempt_metric": f"{name} (one cycle, all pending groups)",
            "attempt_p50_s": cycles.quantile(0.5),
            "attempt_p99_s": cycles.quantile(0.99),
            "algorithm_p50_s": cycles.quantile(0.5),  # a cycle makes no API call
            "algorithm_p99_s": cycles.quantile(0.99),
            "attempt_mean_s": cycles.total / tries if tries else None,
            "attempts": tries,
            "cycles": cycles.count,
            "gang_bind_p50_s": bind.quantile(0.5),
            "gang_bind_p99_s": bind.quantile(0.99),
        }


@dataclass
class KubeSchedulerRunning(Running):
    token: str = ""

    def scrape(self) -> str:
        # kube-scheduler serves a self-signed certificate made at start; only loopback is asked.
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        headers = {"Authorization": f"Bearer {self.token}"}
        with httpx.Client(verify=context, timeout=30, headers=headers) as client:
            answer = client.get(self.url)
            answer.raise_for_status()
            return answer.text

    def attempts(self, after: str, before: str) -> dict[str, Any]:
        name = "scheduler_podgroup_scheduling_attempt_duration_seconds"
        groups = histogram(after, name, result="scheduled").minus(
            histogram(before, name, result="scheduled")
        )
        every = histogram(after, name).minus(histogram(before, name))
        # The attempt includes a PATCH of each PodGroup's status, made before it is timed
        # (schedule_one_podgroup.go); the algorithm's histogram is the decision alone.
        algorithm = "scheduler_podgroup_scheduling_algorithm_duration_seconds"
        decided = histogram(after, algorithm).minus(histogram(before, algorithm))
        return {
            "algorithm_p50_s": decided.quantile(0.5),
            "algorithm_p99_s": decided.quantile(0.99),
            "attempt_metric": f'{name}{{result="scheduled"}}',
            "attempt_p50_s": groups.quantile(0.5),
            "attempt_p99_s": groups.quantile(0.99),
            "attempt_mean_s": groups.mean,
            "attempts": every.count,
        }


def _wait(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not after {timeout} s")
        time.sleep(0.5)


def _say(message: str) -> None:
    print(f"  [{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- the table -----------------------------------------------------------------------------------


def report(results: Mapping[str, Any]) -> list[str]:
    lines = [
        f"scheduler_perf shapes: gpusched vs kube-scheduler v1.37.2 (defaults; client QPS "
        f"{results['args']['unthrottled_qps']:g} unthrottled) vs the API server's bind rate",
        f"command: {results['command']}",
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; load "
        f"average at the start {_load(results['load_start'])}, at the end "
        f"{_load(results['load_end'])}; wall {results['wall_s']:.0f} s",
    ]
    if results.get("retried"):
        lines.append(f"note: the clients retried {results['retried']} requests (429/5xx)")
    for shape in results["shapes"]:
        lines += ["", *shape_table(shape)]
    return lines


def shape_table(shape: Mapping[str, Any]) -> list[str]:
    s = shape["shape"]
    gangs = f", {s['pods'] // s['gang_size']:,} gangs of {s['gang_size']}" if s["gang_size"] else ""
    head = (
        f"{s['name']}: {s['nodes']:,} Nodes, {s['pods']:,} pods{gangs}"
        + (f", {s['init_pods']:,} init pods" if s["init_pods"] else "")
        + (f"; upstream: {s['upstream']}" if s["upstream"] else "")
    )
    runs = [shape.get(n) for n in SCHEDULERS]
    limit = shape.get("limit", {}).get("pods_per_second")
    lines = [
        head,
        f"{'figure':<44}{'gpusched':>10}{'ks-dflt':>10}{'ks-unthr':>10}{'limit':>9}{'ratio':>8}",
    ]

    def row(
        label: str, phase: str, key: str, scale: float = 1.0, extra: float | None = None
    ) -> None:
        values = [None if r is None else r.get(phase, {}).get(key) for r in runs]
        values = [None if v is None else v * scale for v in values]
        r = ratio(values[0], values[2])
        cells = "".join(f"{_num(v, whole=key == 'gangs_bound'):>10}" for v in values)
        lines.append(f"{label:<44}{cells}{_num(extra):>9}{_ratio(r):>8}")

    row("drain, first -> last bind (pods/s)", "drain", "pods_per_second", extra=limit)
    shares = [
        None if r is None or not limit else r["drain"]["pods_per_second"] / limit for r in runs
    ]
    lines.append(
        f"{'  share of the API server limit':<44}" + "".join(f"{_pct(v):>10}" for v in shares)
    )
    row("  scheduler start -> first bind (s)", "drain", "start_to_first_bind_s")
    row("  CPU seconds, start -> last bind", "drain", "cpu_seconds")
    row("live, first created -> last bound (pods/s)", "live", "created_to_bound_pods_per_second")
    row("  first -> last bind (pods/s)", "live", "first_to_last_bind_pods_per_second")
    row("  pods created per second (client)", "live", "created_per_second")
    if s["gang_size"]:
        row("gang created -> all bound p50 (s)", "live", "gang_p50_s")
        row("gang created -> all bound p99 (s)", "live", "gang_p99_s")
        row("gang attempt p50 (ms; gpusched: a cycle)", "live", "attempt_p50_s", 1000)
        row("gang attempt p99 (ms; gpusched: a cycle)", "live", "attempt_p99_s", 1000)
        row("gang attempt mean (ms)", "live", "attempt_mean_s", 1000)
        row("gang algorithm p50 (ms; no API call)", "live", "algorithm_p50_s", 1000)
        row("gang algorithm p99 (ms; no API call)", "live", "algorithm_p99_s", 1000)
        row("  gangs all bound", "live", "gangs_bound")
    row("  CPU seconds, live", "live", "cpu_seconds")
    for target, met in shape["verdicts"].items():
        lines.append(f"target: {target}: {_met(met)}")
    for name, run in zip(SCHEDULERS, runs, strict=True):
        if run is None:
            continue
        for phase in ("drain", "live"):
            if not run[phase]["all_bound"]:
                lines.append(
                    f"note: {name} left pods unbound in {phase}: "
                    f"{run[phase]['bound']}/{run[phase]['pods']}"
                )
    limit_run = shape.get("limit", {})
    if limit_run:
        lines.append(
            f"note: the limit's client ({limit_run['connections']} connections) had its "
            f"{limit_run['pods']:,} binds answered at {limit_run['client_pods_per_second']:.0f}/s;"
            f" rounds (pods/s): {_list(limit_run['rounds_pods_per_second'])}"
            + ("" if limit_run["all_bound"] else "; it left pods unbound")
        )
    return lines


def _num(value: float | None, whole: bool = False) -> str:
    if value is None:
        return "-"
    if abs(value) >= 100 or whole:
        return f"{value:,.0f}"
    return f"{value:.3f}" if abs(value) < 1 else f"{value:.2f}"


def _ratio(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}x"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def _met(value: bool | None) -> str:
    return "not measured" if value is None else ("met" if value else "NOT MET")


def _list(values: Sequence[float]) -> str:
    return ", ".join(f"{v:.0f}" for v in values)


def _load(values: Sequence[float]) -> str:
    return "/".join(f"{v:.1f}" for v in values)


# -- main ----------------------------------------------------------------------------------------


def chosen(args: argparse.Namespace) -> list[Shape]:
    shapes = QUICK if args.quick else FULL
    if args.shape:
        known = {s.name: s for s in shapes}
        missing = [n for n in args.shape if n not in known]
        if missing:
            raise SystemExit(f"--shape {', '.join(missing)}: not one of {', '.join(known)}")
        shapes = tuple(known[n] for n in args.shape)
    if args.nodes:
        shapes = tuple(replace(s, nodes=args.nodes) for s in shapes)
    return list(shapes)


def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.monotonic()
    results: dict[str, Any] = {
        "command": " ".join(["python", "bench/perf_shapes.py", *sys.argv[1:]]),
        "args": vars(args),
        "load_start": os.getloadavg(),
        "shapes": [],
    }
    with (
        tempfile.TemporaryDirectory(prefix="gpusched-shapes-") as folder,
        RealCluster.running(
            Path(folder) / "controlplane",
            apiserver_flags=APISERVER_FLAGS,
            controller_manager_flags=CONTROLLER_MANAGER_FLAGS,
        ) as cluster,
        multiprocessing.get_context("spawn").Pool(1) as pool,
    ):
        bench = Bench(cluster, args, pool)
        for shape in chosen(args):
            bench.make_nodes(shape)
            entry: dict[str, Any] = {"shape": vars(shape) | {"gangs": shape.gangs}}
            entry["limit"] = bench.limit(shape)
            for scheduler in args.scheduler or SCHEDULERS:
                entry[scheduler] = bench.run(shape, scheduler)
            entry["verdicts"] = verdicts(entry)
            results["shapes"].append(entry)
        results["retried"] = bench.retried
    results["load_end"] = os.getloadavg()
    results["wall_s"] = time.monotonic() - started
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").splitlines()[0],
        epilog="Needs Go (the control plane is built from the Kubernetes modules) and helm.",
    )
    parser.add_argument("--quick", action="store_true", help="every shape scaled down")
    parser.add_argument("--shape", action="append", default=[], help="only this shape (repeatable)")
    parser.add_argument(
        "--scheduler", action="append", choices=SCHEDULERS, default=[], help="only this one"
    )
    parser.add_argument("--nodes", type=int, default=0, help="Nodes for every shape")
    parser.add_argument(
        "--unthrottled-qps",
        type=float,
        default=5000,
        help="kube-scheduler's client QPS when unthrottled, burst twice it (default 5,000)",
    )
    parser.add_argument(
        "--limit-connections",
        type=int,
        default=16,
        help="connections of the minimal binding client (default 16)",
    )
    parser.add_argument(
        "--concurrency", type=int, default=16, help="requests in flight when creating (16)"
    )
    parser.add_argument(
        "--limit-rounds",
        type=int,
        default=3,
        help="times the limit is measured on fresh pods, the median counting (default 3)",
    )
    parser.add_argument("--timeout", type=float, default=600, help="per wait, seconds (600)")
    args = parser.parse_args(argv)
    results = run(args)
    lines = report(results)
    print("\n".join(lines))
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({**results, "table": lines}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

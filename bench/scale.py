"""gpusched at cluster scale on the real control plane, kube-scheduler 1.37 beside it.

    python bench/scale.py                       # 5,000 nodes, 50,000 pods, 200 gangs
    python bench/scale.py --nodes 200 --pods 2000 --gangs 10 --backlog 500   # a few minutes
    make bench-scale                            # the full run

On a shared 2-core machine the full run took about 10 minutes (620 s wall) before kwok played
the kubelets, whose Leases and pod statuses now add their writes to the server's load.

One control plane (etcd, kube-apiserver, kube-controller-manager v1.37.2 from testing/cluster, on
127.0.0.1) and, on it:

- Nodes: DGX A100-like (8 GPUs with the topology annotation the agent publishes from a real
  `nvidia-smi topo -m`, 252 CPUs, 1000 Gi), racks of 12-13 nodes, up to 25 racks a zone: 16
  zones x 25 racks for 5,000 nodes. kwok (sigs.k8s.io/kwok v0.8.0, testing/cluster/kwok.py)
  plays their kubelets, as KAI's and Volcano's scale tests do: it reports each Ready, renews
  its Node Lease every `--node-lease` / 4 seconds (the kubelet's 40 s by default: 500
  writes/s at 5,000 nodes) and refreshes its conditions, moves each bound pod to Running, and
  removes deleted pods. The harness's own kubelet is stopped.
- Pods, `--pods` in all: singles drawn (seeded, with replacement) from the openb default trace
  (bench/data/openb) with its CPU and memory: a GPU share (`gpusched.io/gpu-milli` on one
  `nvidia.com/gpu`), 1, 2, 4 or 8 GPUs, or none; and `--gangs` PodGroups of 8-128 pods
  (log-uniform), 1-8 GPUs a pod, topology rack when the gang fills at most half a rack, else
  zone, as the Workload API states them (testing/upstream.py: a `scheduling.k8s.io/v1beta1`
  Workload and its PodGroup, pods naming it in `spec.schedulingGroup`), the objects
  kube-scheduler 1.37 reads. Each gang pod completes `--gang-lifetime` seconds after it started
  running (kwok's Stage, the annotation `pod-complete.stage.kwok.x-k8s.io/delay`): 200 gangs
  held at once would need more GPUs than the cluster has. Singles run until the end.

Phases, all in one run:

1. kube-scheduler at its defaults: `--backlog` singles created while no scheduler runs; it starts;
   pods bound per second from its first bind to its last. Then it stops and its pods go.
2. gpusched: two `gpusched run` replicas (chart identity, leader election on, default
   SchedulerConfig, straight to the API server), the same backlog drained the same way.
3. The rest of the pods created over time (`--rate`; 0: as fast as the server takes them), the
   gangs at even intervals among them. At `--failover-at` of them the leader is killed
   (SIGKILL): failover is the kill to the first bind of the other replica, which lists every
   pod and node when it takes the Lease, and binds before the lists are in once its warm
   watches have shown their revision (`gpusched.scheduler.resync.Resync.take_over`). py-spy
   samples the leader (`--profile` seconds) from the start of this phase, and the new leader
   for as long from the kill.

Figures: peak RSS of each replica (VmHWM), cycle time p50/p99 (the replicas'
`gpusched_decision_duration_seconds` histograms, interpolated inside buckets as Prometheus'
`histogram_quantile` does), pods bound per second, per-pod created -> bound lag, gang created
-> all bound p50/p99, failover; each with its target and, where kube-scheduler does the same
work, its figure and the ratio; gangs kwok completed, pods it reported Running, its own CPU
seconds and peak RSS. The load average is printed beside them: the machine is shared.
Nothing asserts; results go to bench/results/scale.json, logs and profiles to
bench/results/scale/.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import platform
import random
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# The script's folder (for versus.py) is on the path when run as a script, not when imported.
sys.path[:0] = [str(ROOT), str(HERE)]

from testing.cluster.cluster import RealCluster  # noqa: E402
from testing.cluster.controlplane import free_port  # noqa: E402
from testing.cluster.kwok import COMPLETE_AFTER, LEASE_SECONDS, Kwok, is_ready, kwok_node  # noqa: E402
from testing.gangs import upstream_member  # noqa: E402
from testing.harness import RACK, ZONE  # noqa: E402
from testing.upstream import (  # noqa: E402
    KUBE_SCHEDULER,
    WORKLOAD_API,
    for_scheduler,
    kube_scheduler,
    workload_objects,
)
from versus import (  # noqa: E402
    Api,
    BindWatch,
    cpu_seconds,
    ensure_namespace,
    in_child,
    spawn_gpusched,
)

RESULTS = HERE / "results" / "scale.json"
LOGS = HERE / "results" / "scale"
OPENB_PODS = HERE / "data" / "openb" / "openb_pod_list_default.csv"
GPU = "nvidia.com/gpu"
GPU_MILLI_ANNOTATION = "gpusched.io/gpu-milli"
NODE_KIND = "a100x8"
NODE_GPUS = 8
"""A DGX A100 (testing/engine.py's a100x8): 8 GPUs and their NVLink topology annotation."""
NODE_CPU, NODE_MEMORY = "252", "1000Gi"  # a DGX A100 as tests/builders.py describes it
NODES_PER_RACK = 12.5
RACKS_PER_ZONE = 25
GANG_SIZES = (8, 128)
GANG_GPUS = ((1, 4), (2, 3), (4, 2), (8, 1))
"""GPUs a gang pod asks for, with their weights."""
NAMESPACE = "scale"
UPSTREAM_NAMESPACE = "scale-upstream"
UPSTREAM_PATH = "/apis/{api}/namespaces/{namespace}/{plural}"
"""Where the Workload API's objects are created (`scheduling.k8s.io`)."""
APISERVER_FLAGS = ("--max-requests-inflight=800", "--max-mutating-requests-inflight=400")
CONTROLLER_MANAGER_FLAGS = ("--kube-api-qps=500", "--kube-api-burst=1000")
"""kube-controller-manager lifts each new Node's not-ready taint with one write; at its default
20 requests/s, 5,000 Nodes would take four minutes."""
LOST_LEASE = "standing by: lost the lease"
"""What `gpusched run` logs when it stops leading (gpusched.handlers)."""
POLL = 1.0
"""Seconds between two scrapes of the replicas' /metrics and /proc (RSS; the peak is the
kernel's VmHWM, so a slower poll misses none). At 0.25 s, serving the scrapes took a fifth of
the leader's CPU in py-spy on 2 shared cores: Prometheus scrapes every 15-30 s."""
KILL_GUARD = 1.0
"""A bind seen this long after the kill is the new leader's: the killed one's last requests
land within milliseconds, and no replica can take the Lease before it expires (15 s)."""

Item = tuple[str, str, dict[str, Any]]
"""(method, path, body) of one request."""


# -- the cluster's shape ---------------------------------------------------------------------------


def rack_layout(nodes: int) -> list[tuple[str, str, str]]:
    """(node, zone, rack) for `nodes` nodes: racks of 12-13 nodes (12.5 on average, as many
    racks as that makes), up to 25 racks a zone; nodes are dealt to racks in turn, so rack
    sizes differ by at most one. 5,000 nodes: 16 zones x 25 racks, 200 racks of 13 and 200
    of 12."""
    if nodes < 1:
        raise ValueError(f"--nodes must be at least 1, got {nodes}")
    racks = max(1, round(nodes / NODES_PER_RACK))
    zones = math.ceil(racks / RACKS_PER_ZONE)
    sizes = [nodes // racks + (1 if r < nodes % racks else 0) for r in range(racks)]
    layout = []
    for r, size in enumerate(sizes):
        zone = r % zones
        rack = r // zones
        for n in range(size):
            layout.append(
                (f"z{zone:02d}-r{rack:02d}-n{n:02d}", f"zone-{zone}", f"rack-{zone}-{rack}")
            )
    return sorted(layout)


def node_body(name: str, zone: str, rack: str) -> dict[str, Any]:
    """A Node kwok manages (its status: capacity and allocatable; kwok reports the rest)."""
    return kwok_node(name, zone, rack, kind=NODE_KIND, cpu=NODE_CPU, memory=NODE_MEMORY)


# -- the pods ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GangSpec:
    name: str
    size: int
    gpus: int
    """GPUs a pod."""
    key: str
    """The topology key all its pods share a domain of."""


def gang_plan(count: int, seed: int, rack_gpus: int, zone_gpus: int) -> list[GangSpec]:
    """`count` gangs: sizes log-uniform in 8..128 pods, GPUs a pod drawn from `GANG_GPUS`.
    A gang that needs at most half of the smallest rack's GPUs keeps to a rack, any other to a
    zone; none asks for more than a quarter of a zone (GPUs a pod halved, then pods cut), so
    that it fits beside the singles the zone holds."""
    rng = random.Random(seed)
    choices, weights = zip(*GANG_GPUS, strict=True)
    plan = []
    for index in range(count):
        low, high = GANG_SIZES
        size = round(low * (high / low) ** rng.random())
        gpus = rng.choices(choices, weights)[0]
        limit = max(1, zone_gpus // 4)
        while gpus > 1 and size * gpus > limit:
            gpus //= 2
        size = min(size, limit // gpus)
        key = RACK if size * gpus <= rack_gpus // 2 else ZONE
        plan.append(GangSpec(f"g{index:03d}", size, gpus, key))
    return plan


@dataclass(frozen=True)
class Share:
    """One openb pod's request: CPU in millicores, memory in bytes, whole GPUs or a share."""

    cpu_milli: int
    memory: int
    gpus: int
    gpu_milli: int


def openb_mix(path: Path = OPENB_PODS) -> list[Share]:
    from gpusched.offline.openb import load_pods

    return [
        Share(p.resources.get("cpu", 0), p.resources.get("memory", 0), p.gpus, p.gpu_milli)
        for p in load_pods(path)
    ]


def single_pod(name: str, want: Share, namespace: str) -> dict[str, Any]:
    """A pod of the openb mix; a share asks for one `nvidia.com/gpu` and names its thousandths
    (kube-scheduler, which has no shares, gives it a whole GPU)."""
    requests: dict[str, str] = {}
    if want.cpu_milli:
        requests["cpu"] = f"{want.cpu_milli}m"
    if want.memory:
        requests["memory"] = str(want.memory)
    limits: dict[str, str] = {}
    annotations: dict[str, str] = {}
    if want.gpu_milli:
        limits[GPU] = "1"
        annotations[GPU_MILLI_ANNOTATION] = str(want.gpu_milli)
    elif want.gpus:
        limits[GPU] = str(want.gpus)
    container = {
        "name": "main",
        "image": "registry.example.com/serve:1.0",
        "resources": {"requests": {**requests, **limits}, "limits": limits},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
        "spec": {"schedulerName": "gpusched", "containers": [container]},
    }


@dataclass
class Workload:
    """Everything the run creates, in order: the backlog, then the stream."""

    backlog: list[Item]
    stream: list[Item]
    gangs: list[GangSpec]
    gang_first: dict[str, int] = field(default_factory=dict)
    """Gang → index in `stream` of its group's creation."""

    def members(self, spec: GangSpec) -> list[str]:
        return [f"{spec.name}-{i}" for i in range(spec.size)]


def workload(args: argparse.Namespace, layout: Sequence[tuple[str, str, str]]) -> Workload:
    racks = Counter(rack for _, _, rack in layout)
    zones = Counter(zone for _, zone, _ in layout)
    plan = gang_plan(
        args.gangs, args.seed, min(racks.values()) * NODE_GPUS, min(zones.values()) * NODE_GPUS
    )
    gang_pods = sum(g.size for g in plan)
    singles = args.pods - gang_pods
    if singles < args.backlog:
        raise SystemExit(
            f"--pods {args.pods}: the {args.gangs} gangs take {gang_pods} pods, which leaves "
            f"{singles} singles, fewer than --backlog {args.backlog}"
        )
    rng = random.Random(args.seed)
    mix = openb_mix()
    path = f"/api/v1/namespaces/{NAMESPACE}/pods"
    pods = [
        ("POST", path, single_pod(f"p-{i:05d}", rng.choice(mix), NAMESPACE)) for i in range(singles)
    ]
    result = Workload(pods[: args.backlog], [], plan)
    positions = spread(len(pods) - args.backlog, len(plan))
    rest = iter(pods[args.backlog :])
    done = 0
    for spec, position in zip(plan, positions, strict=True):
        for _ in range(position - done):
            result.stream.append(next(rest))
        done = position
        result.gang_first[spec.name] = len(result.stream)
        for group in workload_objects(gang_workload(spec)):
            result.stream.append(("POST", upstream_path(group), group))
        # Each member runs `--gang-lifetime` seconds once Running, then completes (kwok).
        lifetime = {COMPLETE_AFTER: f"{args.gang_lifetime:g}s"}
        for member in result.members(spec):
            body = upstream_member(
                member, spec.gpus, pod_group(spec), namespace=NAMESPACE, annotations=lifetime
            )
            result.stream.append(("POST", path, for_scheduler(body, "gpusched")))
    result.stream.extend(rest)
    return result


def gang_workload(spec: GangSpec) -> dict[str, Any]:
    """The gang as the Workload API states it (what kube-scheduler 1.37 reads, and gpusched
    natively): a Workload with one gang template of `size` pods in one domain of `key`."""
    template = {
        "name": "workers",
        "schedulingPolicy": {"gang": {"minCount": spec.size}},
        "schedulingConstraints": {"topology": [{"key": spec.key}]},
    }
    return {
        "apiVersion": WORKLOAD_API,
        "kind": "Workload",
        "metadata": {"name": spec.name, "namespace": NAMESPACE},
        "spec": {"podGroupTemplates": [template]},
    }


def pod_group(spec: GangSpec) -> str:
    """The PodGroup `workload_objects` makes of the gang's template, its pods name."""
    return f"{spec.name}-workers"


def upstream_path(body: dict[str, Any]) -> str:
    plural = body["kind"].lower() + "s"
    namespace = body["metadata"]["namespace"]
    return UPSTREAM_PATH.format(api=body["apiVersion"], namespace=namespace, plural=plural)


def spread(length: int, count: int) -> list[int]:
    """`count` positions spread evenly over a sequence of `length` items (between items, never
    at the very start), in order: where the gangs go among the singles."""
    return [(k + 1) * length // (count + 1) for k in range(count)]


def upstream_backlog(backlog: Sequence[Item]) -> list[Item]:
    path = f"/api/v1/namespaces/{UPSTREAM_NAMESPACE}/pods"
    out = []
    for _, _, body in backlog:
        pod = for_scheduler(body, KUBE_SCHEDULER)
        pod["metadata"]["namespace"] = UPSTREAM_NAMESPACE
        out.append(("POST", path, pod))
    return out


# -- sending many requests (in a child process: the watches keep this one's GIL) ----------------


async def _send_all(
    url: str, token: str, ca: str, items: list[Item], rate: float, concurrency: int
) -> tuple[list[float], int]:
    """Sends every item, `concurrency` in flight, item i not before i / rate seconds after the
    start (rate 0: as fast as it goes). Returns the monotonic time each was first sent (the
    clock every process of the machine shares) and how many answers asked to retry (429,
    or 5xx) and were retried. A POST answered 409 after a retry was applied the first time."""
    sent = [0.0] * len(items)
    retried = 0
    queue: asyncio.Queue[int] = asyncio.Queue()
    for index in range(len(items)):
        queue.put_nowait(index)
    started = time.monotonic()
    headers = {"Authorization": f"Bearer {token}"}
    context = ssl.create_default_context(cafile=ca)
    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(
        base_url=url, headers=headers, verify=context, timeout=120, limits=limits
    ) as client:

        async def send(index: int) -> None:
            nonlocal retried
            method, path, body = items[index]
            content = {"Content-Type": "application/merge-patch+json"} if method == "PATCH" else {}
            for attempt in range(20):
                if attempt == 0:
                    sent[index] = time.monotonic()
                response = await client.request(method, path, json=body, headers=content)
                if response.status_code < 300 or (attempt and response.status_code == 409):
                    return
                if response.status_code != 429 and response.status_code < 500:
                    raise RuntimeError(f"{method} {path}: {response.status_code} {response.text}")
                retried += 1
                await asyncio.sleep(float(response.headers.get("Retry-After", "0.2")))
            raise RuntimeError(f"{method} {path}: still refused after 20 tries")

        async def worker() -> None:
            while not queue.empty():
                index = queue.get_nowait()
                if rate > 0 and (wait := started + index / rate - time.monotonic()) > 0:
                    await asyncio.sleep(wait)  # pacing the load, not waiting for a result
                await send(index)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return sent, retried


def send_all(
    url: str, token: str, ca: str, items: list[Item], rate: float, concurrency: int
) -> tuple[list[float], int]:
    return asyncio.run(_send_all(url, token, ca, items, rate, concurrency))


class Sender:
    def __init__(self, api: Api, concurrency: int) -> None:
        self.api = api
        self.concurrency = concurrency
        self.retried = 0

    def send(self, items: list[Item], rate: float = 0) -> list[float]:
        sent, retried = in_child(
            send_all, self.api.url, self.api.token, self.api.ca, items, rate, self.concurrency
        )
        self.retried += retried
        return list(sent)


# -- watching ------------------------------------------------------------------------------------


class PodWatch(BindWatch):
    """`BindWatch`, when each pod was first seen (its creation, as a watcher sees it), and when
    each was first seen Running and Succeeded (kwok's Stages)."""

    def __init__(self, api: Api, namespace: str) -> None:
        self.created: dict[str, float] = {}
        self.running: dict[str, float] = {}
        self.succeeded: dict[str, float] = {}
        self.errors = 0
        super().__init__(api, namespace)

    def _seen(self, event: dict[str, Any]) -> None:
        if event.get("type") == "ERROR":
            self.errors += 1  # the watch resumes from its last version; say so in the report
            return
        super()._seen(event)
        pod = event["object"]
        name = pod["metadata"]["name"]
        if event.get("type") == "ADDED":
            self.created.setdefault(name, time.monotonic())
        phase = (pod.get("status") or {}).get("phase")
        if phase == "Running":
            self.running.setdefault(name, time.monotonic())
        elif phase == "Succeeded":
            self.succeeded.setdefault(name, time.monotonic())


def make_nodes(
    cluster: RealCluster, api: Api, sender: Sender, layout: Sequence[Any], lease_seconds: int
) -> tuple[Kwok, float]:
    """kwok started, then the Nodes for it to manage; returns kwok and the seconds from the
    first Node sent to every Node Ready (kwok's first status) and untainted."""
    kwok = Kwok.start(cluster, lease_seconds=lease_seconds)
    bodies = [node_body(*place) for place in layout]
    kwok.adopt(n["metadata"]["name"] for n in bodies)
    started = time.monotonic()
    sender.send([("POST", "/api/v1/nodes", n) for n in bodies])
    # The node-lifecycle controller lifts the not-ready taint the API server puts on every new
    # Node once kwok reports it Ready; both schedulers respect it.
    deadline = time.monotonic() + 600
    while True:
        nodes = api.client.list_raw("nodes", resourceVersion="0")["items"]
        if len(nodes) == len(bodies) and all(
            is_ready(n) and not n["spec"].get("taints") for n in nodes
        ):
            return kwok, time.monotonic() - started
        if time.monotonic() > deadline:
            raise TimeoutError("Nodes not Ready, or still tainted not-ready, after 600 s")
        time.sleep(2)


# -- gpusched replicas ---------------------------------------------------------------------------


@dataclass
class Scrape:
    at: float
    leader: bool
    binds_ok: float
    cycles: list[tuple[float, float]]
    """The decision histogram: (upper bound, cumulative count), +Inf last."""
    cycle_sum: float


def parse_metrics(text: str, at: float) -> Scrape:
    from prometheus_client.parser import text_string_to_metric_families

    leader, binds, total = False, 0.0, 0.0
    cycles: list[tuple[float, float]] = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "gpusched_leader":
                leader = sample.value == 1
            elif sample.name == "gpusched_binds_total" and sample.labels.get("result") == "ok":
                binds = sample.value
            elif sample.name == "gpusched_decision_duration_seconds_bucket":
                cycles.append((float(sample.labels["le"]), sample.value))
            elif sample.name == "gpusched_decision_duration_seconds_sum":
                total = sample.value
    return Scrape(at, leader, binds, sorted(cycles), total)


class Replica:
    """One `gpusched run`, as users run it: the chart's identity, default SchedulerConfig,
    leader election on; its /metrics on a port of its own."""

    def __init__(self, name: str, cluster: RealCluster, logs: Path) -> None:
        self.name = name
        self.port = free_port()
        kubeconfig = cluster.plane.write_kubeconfig(logs / f"{name}.kubeconfig", "operator")
        self.log = logs / f"{name}.log"
        with self.log.open("wb") as out:
            self.popen = spawn_gpusched(kubeconfig, out, self.port)
        self.pid = self.popen.pid
        self.last: Scrape | None = None
        self.became_leader: float | None = None
        self.peak_rss_mb = 0.0
        self.hwm_mb = 0.0
        self.cpu = 0.0
        self.http = httpx.Client(timeout=5)

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    def poll(self) -> None:
        if not self.alive:
            return
        now = time.monotonic()
        with contextlib.suppress(httpx.HTTPError):
            answer = self.http.get(f"http://127.0.0.1:{self.port}/metrics")
            self.last = parse_metrics(answer.text, now)
            if self.last.leader and self.became_leader is None:
                self.became_leader = now
        # A process killed a moment ago has no memory figures left (a zombie): keep the last.
        with contextlib.suppress(OSError, ValueError, KeyError):
            status = _proc_status(self.pid)
            self.peak_rss_mb = max(self.peak_rss_mb, status["VmRSS"] / 1024)
            self.hwm_mb = max(self.hwm_mb, status["VmHWM"] / 1024)
            self.cpu = cpu_seconds(self.pid)

    def lease_losses(self) -> int:
        """How often this replica stopped leading while it lived: it missed its renew
        deadline (counted from its log, one INFO line per leadership change)."""
        with self.log.open(errors="replace") as lines:
            return sum(LOST_LEASE in line for line in lines)

    def kill(self) -> float:
        self.poll()  # the last figures of its life
        self.popen.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        self.popen.wait(10)
        return killed

    def stop(self) -> None:
        self.http.close()
        if not self.alive:
            return
        self.popen.terminate()
        try:
            self.popen.wait(30)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(10)


def _proc_status(pid: int) -> dict[str, int]:
    """The kB figures of /proc/<pid>/status (VmRSS, VmHWM, ...)."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if len(parts) == 2 and parts[1] == "kB":
            values[key] = int(parts[0])
    return values


class Monitor:
    """Scrapes every replica every `POLL` seconds, in a thread."""

    def __init__(self, replicas: Sequence[Replica]) -> None:
        self.replicas = list(replicas)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="monitor", daemon=True)

    def __enter__(self) -> Monitor:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)
        for replica in self.replicas:
            replica.poll()

    def _run(self) -> None:
        while not self._stop.wait(POLL):
            for replica in self.replicas:
                replica.poll()

    def leader(self, timeout: float) -> Replica:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for replica in self.replicas:
                if replica.alive and replica.last is not None and replica.last.leader:
                    return replica
                if not replica.alive:
                    raise RuntimeError(f"{replica.name} exited; see {replica.log}")
            time.sleep(0.05)
        raise TimeoutError(f"no replica took the Lease within {timeout}s")


# -- py-spy --------------------------------------------------------------------------------------


ENTRY_FRAMES = ("<module> (gpusched/cli.py", "main (gpusched/cli.py", "_run (gpusched/commands")


def start_profile(pid: int, seconds: float, out: Path) -> subprocess.Popen[bytes] | None:
    """py-spy sampling `pid` for `seconds` into `out` (collapsed stacks, by function); None
    when py-spy is not installed (`pip install py-spy`)."""
    spy = shutil.which("py-spy")
    if spy is None or seconds <= 0:
        return None
    argv = [spy, "record", "--pid", str(pid), "--duration", str(round(seconds)), "--rate", "50"]
    argv += ["--nonblocking", "--function", "--format", "raw", "--output", str(out)]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def hottest(
    lines: Iterable[str], top: int = 12, where: str = "gpusched/"
) -> tuple[int, list[tuple[str, int, int]]]:
    """From py-spy's collapsed stacks (`frame;frame;... count`, outermost first): the total
    sample count, and the `top` functions whose frame names `where` (a source folder) by
    inclusive samples, each with its own (self) samples, as (function, inclusive, self). A
    function twice on a stack counts once; the entry points (`ENTRY_FRAMES`) are left out:
    they are on every stack."""
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for line in lines:
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack or not count.isdigit():
            continue
        samples = int(count)
        frames = stack.split(";")[1:]  # the first is the thread
        total += samples
        for frame in set(frames):
            if where in frame and not frame.startswith(ENTRY_FRAMES):
                inclusive[frame] += samples
        if frames:
            own[frames[-1]] += samples
    ranked = sorted(inclusive.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    return total, [(frame, count, own[frame]) for frame, count in ranked]


def self_hottest(
    lines: Iterable[str], top: int = 12, where: str = "gpusched/"
) -> list[tuple[str, int]]:
    """The `top` innermost frames by samples, each named with the innermost frame of `where`
    that called it (``json.loads <- ClusterState.upsert_pod``): a library's hot spot is only
    actionable with our caller beside it."""
    own: Counter[str] = Counter()
    for line in lines:
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        leaf = frames[-1]
        caller = next((f for f in reversed(frames[1:-1]) if where in f), None)
        name = leaf if where in leaf or caller is None else f"{leaf} <- {caller}"
        own[name] += int(count)
    return sorted(own.items(), key=lambda kv: (-kv[1], kv[0]))[:top]


# -- figures -------------------------------------------------------------------------------------


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """The `q` quantile of a Prometheus histogram given as (upper bound, cumulative count)
    sorted by bound, +Inf last: linear inside the bucket it falls in, as Prometheus'
    `histogram_quantile` does (the lowest bucket starts at 0; a quantile in +Inf is the
    highest finite bound). None for an empty histogram."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return lower_bound
            if count == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (
                count - lower_count
            )
        lower_bound, lower_count = bound, count
    return lower_bound


def merged(histograms: Iterable[Sequence[tuple[float, float]]]) -> list[tuple[float, float]]:
    """Bucket-wise sum of histograms with the same bounds (two replicas' terms)."""
    total: dict[float, float] = {}
    for histogram in histograms:
        for bound, count in histogram:
            total[bound] = total.get(bound, 0.0) + count
    return sorted(total.items())


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (`q` in 0..1), None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def rate(times: Sequence[float]) -> float:
    """Events per second from the first to the last of `times`."""
    if len(times) < 2:
        return 0.0
    span = max(times) - min(times)
    return (len(times) - 1) / span if span > 0 else 0.0


def peak_rate(times: Sequence[float], window: float = 10.0) -> float:
    """The most events in any `window` seconds (a half-open span), per second."""
    ordered = sorted(times)
    best, start = 0, 0
    for end, moment in enumerate(ordered):
        while moment - ordered[start] >= window:
            start += 1
        best = max(best, end - start + 1)
    return best / window


# -- the phases ----------------------------------------------------------------------------------


def upstream_phase(
    cluster: RealCluster, api: Api, sender: Sender, work: Workload, args: argparse.Namespace
) -> dict[str, Any]:
    ensure_namespace(api, UPSTREAM_NAMESPACE)
    backlog = upstream_backlog(work.backlog)
    with PodWatch(api, UPSTREAM_NAMESPACE) as watch:
        sender.send(backlog)
        flags = (
            []
            if args.kube_scheduler_qps is None
            else [
                f"--kube-api-qps={args.kube_scheduler_qps:g}",
                f"--kube-api-burst={round(2 * args.kube_scheduler_qps)}",
            ]
        )
        started = time.monotonic()
        with kube_scheduler(cluster, flags) as pid:
            done = watch.wait(len(backlog), timeout=args.timeout)
            cpu = cpu_seconds(pid)
    times = sorted(watch.bound.values())
    result = {
        "pods": len(backlog),
        "bound": len(times),
        "all_bound": done,
        "start_to_first_bind_s": times[0] - started if times else None,
        "drain_pods_per_second": rate(times),
        "cpu_seconds": cpu,
        "load_average": os.getloadavg(),
    }
    deleted = time.monotonic()
    api.delete_pods(UPSTREAM_NAMESPACE, timeout=args.timeout)
    result["delete_s"] = time.monotonic() - deleted
    _say(f"kube-scheduler: {len(times)}/{len(backlog)} bound at {rate(times):.0f} pods/s")
    return result


def gpusched_phase(
    cluster: RealCluster, api: Api, sender: Sender, work: Workload, args: argparse.Namespace
) -> dict[str, Any]:
    ensure_namespace(api, NAMESPACE)
    result: dict[str, Any] = {}
    with PodWatch(api, NAMESPACE) as watch:
        sender.send(work.backlog)
        started = time.monotonic()
        replicas = [Replica(name, cluster, LOGS) for name in ("replica-a", "replica-b")]
        try:
            with Monitor(replicas) as monitor:
                leader = monitor.leader(args.timeout)
                result["first_leader"] = leader.name
                backlog = [body["metadata"]["name"] for _, _, body in work.backlog]
                drained = watch.wait(len(backlog), timeout=args.timeout)
                times = sorted(watch.bound[n] for n in backlog if n in watch.bound)
                result["drain"] = {
                    "pods": len(backlog),
                    "bound": len(times),
                    "all_bound": drained,
                    "start_to_first_bind_s": times[0] - started if times else None,
                    "drain_pods_per_second": rate(times),
                    "cpu_seconds": leader.cpu,
                    "load_average": os.getloadavg(),
                }
                _say(f"gpusched: backlog {len(times)}/{len(backlog)} at {rate(times):.0f} pods/s")
                result.update(stream(args, work, sender, watch, monitor, leader))
                result["gangs_finished"] = sum(
                    all(m in watch.succeeded for m in work.members(g)) for g in work.gangs
                )
            result["replicas"] = {
                r.name: {
                    "peak_rss_mb": r.peak_rss_mb,
                    "vm_hwm_mb": r.hwm_mb,
                    "cpu_seconds": r.cpu,
                    "binds_ok": r.last.binds_ok if r.last else 0,
                    "led": r.became_leader is not None,
                    "lease_losses": r.lease_losses(),
                    "killed": r is result.get("killed"),
                }
                for r in replicas
            }
            histograms = [r.last.cycles for r in replicas if r.last]
            cycles = merged(histograms)
            result["cycles"] = {
                "count": cycles[-1][1] if cycles else 0,
                "mean_s": sum(r.last.cycle_sum for r in replicas if r.last) / cycles[-1][1]
                if cycles and cycles[-1][1]
                else None,
                "p50_s": histogram_quantile(0.5, cycles),
                "p99_s": histogram_quantile(0.99, cycles),
                "buckets": cycles,
            }
        finally:
            for replica in replicas:
                replica.stop()
    result.pop("killed", None)
    result["watch_errors"] = watch.errors
    result["running"] = len(watch.running)
    return result


def stream(
    args: argparse.Namespace,
    work: Workload,
    sender: Sender,
    watch: PodWatch,
    monitor: Monitor,
    leader: Replica,
) -> dict[str, Any]:
    """Phase 3: the stream, the failover in it, the profiles; the figures of both."""
    profile = start_profile(leader.pid, args.profile, LOGS / "leader.pyspy.txt")
    cpu = {replica.name: replica.cpu for replica in monitor.replicas}
    with ThreadPoolExecutor(1) as pool:
        sending: Future[list[float]] = pool.submit(sender.send, work.stream, args.rate)
        failover = _failover(args, work, watch, monitor, leader, sending)
        sent = sending.result()
    names = [body["metadata"]["name"] for _, path, body in work.stream if path.endswith("/pods")]
    singles = [
        body["metadata"]["name"]
        for _, path, body in work.stream
        if path.endswith("/pods") and "schedulingGroup" not in body["spec"]
    ]
    done = watch.wait(len(work.backlog) + len(names), timeout=args.timeout)
    if profile is not None:
        profile.wait()
    stream_binds = sorted(watch.bound[n] for n in names if n in watch.bound)
    first_sent = min(sent) if sent else time.monotonic()
    last_bound = max(stream_binds, default=first_sent)
    killed = failover.get("killed_at", math.inf)
    before = [t for t in stream_binds if t < killed]
    lags = [
        watch.bound[n] - watch.created[n]
        for n in singles
        if n in watch.created and watch.bound.get(n, math.inf) < killed
    ]
    result: dict[str, Any] = {
        "stream": {
            "pods": len(names),
            "bound": len(stream_binds),
            "all_bound": done,
            "created_per_second": len(sent) / (max(sent) - first_sent) if len(sent) > 1 else 0.0,
            "pods_per_second": len(stream_binds) / (last_bound - first_sent)
            if last_bound > first_sent
            else 0.0,
            "before_kill_pods_per_second": len(before) / (min(killed, last_bound) - first_sent)
            if before and min(killed, last_bound) > first_sent
            else 0.0,
            "peak_10s_pods_per_second": peak_rate(stream_binds),
            "lag_p50_s": percentile(lags, 0.5),
            "lag_p99_s": percentile(lags, 0.99),
            "replicas_cpu_seconds": sum(r.cpu - cpu[r.name] for r in monitor.replicas),
            "load_average": os.getloadavg(),
        },
        "gangs": gang_figures(work, sent, watch, failover),
        "failover": {k: v for k, v in failover.items() if k not in ("survivor", "killed")},
        "killed": failover.get("killed"),
    }
    result["profiles"] = {}
    for name in ("leader", "takeover"):
        path = LOGS / f"{name}.pyspy.txt"
        if path.exists():
            lines = path.read_text().splitlines()
            total, ranked = hottest(lines)
            result["profiles"][name] = {
                "samples": total,
                "inclusive": ranked,
                "self": self_hottest(lines),
            }
    return result


def _failover(
    args: argparse.Namespace,
    work: Workload,
    watch: PodWatch,
    monitor: Monitor,
    leader: Replica,
    sending: Future[list[float]],
) -> dict[str, Any]:
    """Kills the leader once `--failover-at` of the stream's pods were created; returns when
    the other replica bound its first pod (or the stream ended without a failover)."""
    if args.failover_at <= 0:
        return {}
    pods = sum(path.endswith("/pods") for _, path, _ in work.stream)
    threshold = len(work.backlog) + args.failover_at * pods
    while len(watch.created) < threshold and not sending.done():
        time.sleep(0.05)
    if sending.done():
        _say("the stream ended before the failover point: no failover")
        return {}
    survivor = next(r for r in monitor.replicas if r is not leader)
    created = len(watch.created)
    survivor.poll()  # its memory as a standby, apart from what the take-over adds
    standby_hwm = survivor.hwm_mb
    killed = leader.kill()
    takeover = start_profile(survivor.pid, args.profile, LOGS / "takeover.pyspy.txt")
    _say(f"killed the leader {leader.name} with {created} pods created")
    deadline = killed + args.timeout
    first: float | None = None
    while first is None and time.monotonic() < deadline:
        later = [t for t in list(watch.bound.values()) if t > killed + KILL_GUARD]
        first = min(later) if later else None
        time.sleep(0.05)
    result: dict[str, Any] = {
        "survivor": survivor,
        "killed": leader,
        "killed_at": killed,
        "created_at_kill": created,
        "kill_to_lease_s": survivor.became_leader - killed if survivor.became_leader else None,
        "kill_to_first_bind_s": first - killed if first is not None else None,
        "standby_hwm_at_kill_mb": standby_hwm,
    }
    if survivor.became_leader is not None and first is not None:
        result["lease_to_first_bind_s"] = first - survivor.became_leader
    if takeover is not None:
        takeover.wait()
    _say(
        f"failover: first bind of {survivor.name} {result['kill_to_first_bind_s']} s after the kill"
    )
    return result


def gang_figures(
    work: Workload, sent: Sequence[float], watch: PodWatch, failover: dict[str, Any]
) -> dict[str, Any]:
    killed = failover.get("killed_at", math.inf)
    recovered = killed + (failover.get("kill_to_first_bind_s") or 0)
    every, calm = [], []
    unbound = []
    for spec in work.gangs:
        index = work.gang_first[spec.name]
        created = sent[index] if index < len(sent) else None
        bound = [watch.bound.get(m) for m in work.members(spec)]
        if created is None or not all(bound):
            unbound.append(spec.name)
            continue
        last = max(b for b in bound if b)
        every.append(last - created)
        if last < killed or created > recovered:
            calm.append(last - created)
    sizes = [g.size for g in work.gangs]
    return {
        "gangs": len(work.gangs),
        "pods": sum(sizes),
        "sizes": f"{min(sizes, default=0)}-{max(sizes, default=0)}",
        "all_bound": len(every),
        "not_all_bound": unbound,
        "p50_s": percentile(every, 0.5),
        "p99_s": percentile(every, 0.99),
        "outside_failover": len(calm),
        "outside_failover_p50_s": percentile(calm, 0.5),
        "outside_failover_p99_s": percentile(calm, 0.99),
    }


# -- the table -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    below: bool
    """True: the figure must stay below `value`; False: reach at least `value`."""
    value: float

    def met(self, figure: float | None) -> bool:
        if figure is None:
            return False
        return figure < self.value if self.below else figure >= self.value

    def __str__(self) -> str:
        return f"{'<' if self.below else '>='} {self.value:g}"


RSS, BOUND, FAILOVER = Target(True, 600), Target(False, 300), Target(True, 20)
"""Issue 17's targets: MB, pods/s, seconds."""


def row(
    label: str, ours: float | None, theirs: float | None = None, target: Target | None = None
) -> str:
    ratio = f"{ours / theirs:7.2f}x" if ours is not None and theirs else " " * 8
    verdict = f"  {target}: {'met' if target.met(ours) else 'NOT MET'}" if target else ""
    return f"{label:<50}{_num(ours):>11}{_num(theirs):>12}{ratio}{verdict}"


def _num(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3f}" if abs(value) < 1 else f"{value:.2f}"


def report(results: dict[str, Any], args: argparse.Namespace) -> list[str]:
    ours, theirs = results["gpusched"], results["kube-scheduler"]
    drain, sustained, gangs = ours["drain"], ours["stream"], ours["gangs"]
    failover, cycles = ours["failover"], ours["cycles"]
    replicas = ours["replicas"]
    first = replicas[ours["first_leader"]]
    other = next(r for name, r in replicas.items() if name != ours["first_leader"])
    binds = sum(r["binds_ok"] for r in replicas.values())
    kwok = results["kwok"]
    lines = [
        f"gpusched at scale vs kube-scheduler v1.37.2 (its defaults{_qps(args)}): "
        f"{results['nodes']:,} nodes ({results['zones']} zones, {results['racks']} racks), "
        f"{args.pods:,} pods ({gangs['pods']:,} in {gangs['gangs']} gangs of {gangs['sizes']}), "
        f"backlog {args.backlog:,}, rate {args.rate:g} (0: as fast as it goes)",
        f"command: {results['command']}",
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; load "
        f"average (1/5/15 min) at the start {_load(results['load_start'])}, after kube-scheduler "
        f"{_load(theirs['load_average'])}, after the backlog {_load(drain['load_average'])}, "
        f"after the stream {_load(sustained['load_average'])}; wall {results['wall_s']:.0f} s",
        f"kwok: Node Leases of {kwok['lease_seconds']} s (renewed every quarter), Nodes sent -> "
        f"all Ready {results['nodes_s']:.0f} s, its CPU {kwok['cpu_seconds']:.0f} s, "
        f"peak RSS {kwok['vm_hwm_mb']:.0f} MB",
        f"{'figure':<50}{'gpusched':>11}{'kube-sched':>12}{'ratio':>8}  target",
        row("operator peak RSS, first leader (MB, VmHWM)", first["vm_hwm_mb"], None, RSS),
        row("  the standby, leader after the kill (MB, VmHWM)", other["vm_hwm_mb"], None, RSS),
        row(
            "    of which as a standby, at the kill (MB, VmHWM)",
            failover.get("standby_hwm_at_kill_mb"),
        ),
        row("cycle time p50 (ms, from the histogram)", _ms(cycles["p50_s"])),
        row("cycle time p99 (ms, from the histogram)", _ms(cycles["p99_s"])),
        row("  cycle time mean (ms)", _ms(cycles["mean_s"])),
        row("  cycles", cycles["count"]),
        row("  pods bound a cycle, mean", binds / cycles["count"] if cycles["count"] else None),
        row(
            "backlog drain, first -> last bind (pods/s)",
            drain["drain_pods_per_second"],
            theirs["drain_pods_per_second"],
            BOUND,
        ),
        row(
            "  scheduler start -> first bind (s)",
            drain["start_to_first_bind_s"],
            theirs["start_to_first_bind_s"],
        ),
        row("  CPU seconds, start -> last bind", drain["cpu_seconds"], theirs["cpu_seconds"]),
        row(
            "stream, first created -> the kill (pods/s bound)",
            sustained["before_kill_pods_per_second"],
            None,
            BOUND,
        ),
        row("  pods created per second (client, whole stream)", sustained["created_per_second"]),
        row("  busiest 10 s (pods bound/s)", sustained["peak_10s_pods_per_second"], None, BOUND),
        row("  whole stream, failover included (pods/s)", sustained["pods_per_second"]),
        row("  pod created -> bound p50 (s, bound before the kill)", sustained["lag_p50_s"]),
        row("  pod created -> bound p99 (s, bound before the kill)", sustained["lag_p99_s"]),
        row("  CPU seconds of both replicas", sustained["replicas_cpu_seconds"]),
        row("gang created -> all bound p50 (s)", gangs["p50_s"]),
        row("gang created -> all bound p99 (s)", gangs["p99_s"]),
        row(
            f"  p50 of the {gangs['outside_failover']} gangs clear of the failover (s)",
            gangs["outside_failover_p50_s"],
        ),
        row(
            f"  p99 of the {gangs['outside_failover']} gangs clear of the failover (s)",
            gangs["outside_failover_p99_s"],
        ),
        row(f"  gangs all bound (of {gangs['gangs']})", gangs["all_bound"]),
        row(f"  gangs completed by kwok (of {gangs['gangs']})", ours["gangs_finished"]),
        row("  pods kwok reported Running (gpusched's namespace)", ours["running"]),
        row(
            "leader failover, kill -> first bind of the other (s)",
            failover.get("kill_to_first_bind_s"),
            None,
            FAILOVER,
        ),
        row("  kill -> the other holds the Lease (s)", failover.get("kill_to_lease_s")),
        row(
            "  Lease -> first bind: relist, first cycle (s)", failover.get("lease_to_first_bind_s")
        ),
    ]
    notes = []
    if not drain["all_bound"] or not sustained["all_bound"] or not theirs["all_bound"]:
        notes.append(
            f"unbound: gpusched backlog {drain['bound']}/{drain['pods']}, stream "
            f"{sustained['bound']}/{sustained['pods']}; "
            f"kube-scheduler {theirs['bound']}/{theirs['pods']}"
        )
    if gangs["not_all_bound"]:
        notes.append(f"gangs never all bound: {', '.join(gangs['not_all_bound'][:10])}")
    if results["retried"]:
        notes.append(
            f"the client retried {results['retried']} requests the server refused (429/5xx)"
        )
    top = max((b for b, _ in cycles["buckets"] if not math.isinf(b)), default=None)
    over = [q for q in ("p50_s", "p99_s") if top is not None and (cycles[q] or 0) >= top]
    if over:
        beyond = cycles["count"] - next(c for b, c in cycles["buckets"] if b == top)
        notes.append(
            f"cycle {' and '.join(q[:3] for q in over)} at the histogram's top bound "
            f"({top:g} s): at least that ({beyond:.0f} of {cycles['count']:.0f} cycles took longer)"
        )
    for name, replica in replicas.items():
        if replica["lease_losses"]:
            notes.append(
                f"{name} lost the Lease {replica['lease_losses']} times while alive (renew "
                "deadline missed), relisting everything each time it took it back"
            )
    if ours["watch_errors"]:
        notes.append(
            f"the bind watch saw {ours['watch_errors']} ERROR events (binds may be missed)"
        )
    lines += [f"note: {n}" for n in notes]
    for name, profile in ours.get("profiles", {}).items():
        samples = max(1, profile["samples"])
        lines.append(f"py-spy, {name} ({profile['samples']} samples at 50 Hz; % of samples):")
        for frame, inclusive, own in profile["inclusive"]:
            share, own_share = 100 * inclusive / samples, 100 * own / samples
            lines.append(f"  {share:5.1f}% incl {own_share:5.1f}% self  {frame}")
        lines.append("  hottest by self time:")
        for frame, own in profile["self"][:8]:
            lines.append(f"  {100 * own / profile['samples']:5.1f}% self  {frame}")
    return lines


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else 1000 * seconds


def _load(values: Sequence[float]) -> str:
    return "/".join(f"{v:.1f}" for v in values)


def _qps(args: argparse.Namespace) -> str:
    return "" if args.kube_scheduler_qps is None else f", client QPS {args.kube_scheduler_qps:g}"


def _say(message: str) -> None:
    print(f"  [{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- main ----------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.monotonic()
    layout = rack_layout(args.nodes)
    work = workload(args, layout)
    results: dict[str, Any] = {
        "command": " ".join(["python", "bench/scale.py", *sys.argv[1:]]),
        "args": vars(args),
        "nodes": len(layout),
        "zones": len({z for _, z, _ in layout}),
        "racks": len({r for _, _, r in layout}),
        "load_start": os.getloadavg(),
    }
    LOGS.mkdir(parents=True, exist_ok=True)
    for old in LOGS.glob("*"):
        old.unlink()
    with (
        tempfile.TemporaryDirectory(prefix="gpusched-scale-") as folder,
        RealCluster.running(
            Path(folder) / "controlplane",
            apiserver_flags=[*APISERVER_FLAGS, *args.apiserver_flag],
            controller_manager_flags=CONTROLLER_MANAGER_FLAGS,
        ) as cluster,
    ):
        api = Api(cluster)
        sender = Sender(api, args.concurrency)
        # kwok plays every kubelet: the harness's stops (it would only watch every pod).
        cluster.kubelet.stop()
        kwok, results["nodes_s"] = make_nodes(cluster, api, sender, layout, args.node_lease)
        _say(f"{len(layout)} kwok nodes Ready in {results['nodes_s']:.0f} s")
        results["kube-scheduler"] = upstream_phase(cluster, api, sender, work, args)
        results["gpusched"] = gpusched_phase(cluster, api, sender, work, args)
        kwok_status = _proc_status(kwok.process.popen.pid)
        results["kwok"] = {
            "lease_seconds": args.node_lease,
            "cpu_seconds": cpu_seconds(kwok.process.popen.pid),
            "vm_hwm_mb": kwok_status["VmHWM"] / 1024,
        }
        results["retried"] = sender.retried
    results["wall_s"] = time.monotonic() - started
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").splitlines()[0],
        epilog="Needs Go (the control plane is built from the Kubernetes modules) and helm; "
        "py-spy for the profiles (pip install py-spy; run as root or with ptrace allowed).",
    )
    parser.add_argument("--nodes", type=int, default=5000, help="Nodes (default 5,000)")
    parser.add_argument(
        "--pods", type=int, default=50000, help="pods in all, gangs' included (default 50,000)"
    )
    parser.add_argument("--gangs", type=int, default=200, help="gangs of 8-128 pods (default 200)")
    parser.add_argument(
        "--backlog",
        type=int,
        default=5000,
        help="singles created before a scheduler runs, drained by each (default 5,000)",
    )
    parser.add_argument(
        "--rate",
        type=float,
        default=0,
        help="stream creation rate, pods/s (default 0: as fast as it goes)",
    )
    parser.add_argument(
        "--concurrency", type=int, default=32, help="requests in flight (default 32)"
    )
    parser.add_argument(
        "--failover-at",
        type=float,
        default=0.5,
        help="kill the leader when this share of the stream is created (default 0.5; 0: never)",
    )
    parser.add_argument(
        "--gang-lifetime",
        type=float,
        default=30,
        help="seconds each gang pod runs once Running before kwok completes it (default 30)",
    )
    parser.add_argument(
        "--node-lease",
        type=int,
        default=LEASE_SECONDS,
        help=f"Node Lease duration kwok keeps, seconds (default {LEASE_SECONDS}, the kubelet's)",
    )
    parser.add_argument(
        "--profile",
        type=float,
        default=60,
        help="seconds of py-spy on the leader, and on the new one after the kill "
        "(default 60; 0: none)",
    )
    parser.add_argument(
        "--timeout", type=float, default=900, help="per wait, seconds (default 900)"
    )
    parser.add_argument(
        "--seed", type=int, default=42, help="draws of the pods and gangs (default 42)"
    )
    parser.add_argument(
        "--kube-scheduler-qps",
        type=float,
        default=None,
        help="run kube-scheduler with this client QPS (burst twice it) instead of its defaults",
    )
    parser.add_argument(
        "--apiserver-flag",
        action="append",
        default=[],
        metavar="FLAG",
        help=f"one more kube-apiserver flag (repeatable; always: {' '.join(APISERVER_FLAGS)})",
    )
    args = parser.parse_args(argv)
    results = run(args)
    lines = report(results, args)
    print("\n".join(lines))
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({**results, "table": lines}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

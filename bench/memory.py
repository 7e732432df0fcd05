"""What the leader holds per pod and per node: where the operator's RSS goes.

    python bench/memory.py                        # 5,000 nodes; 5,000 / 10,000 / 15,000 pods
    python bench/memory.py --nodes 1000 --pods 1000,2000 --top 10
    python bench/memory.py --real --nodes 500 --pods 10000     # the real leader and standby

``--real`` measures inside the real processes: the real control plane (testing/cluster), two
`gpusched run` replicas (the chart's identity, leader election on) each tracing itself
(``GPUSCHED_TRACEMALLOC``, gpusched.handlers.memtrace); ``--nodes`` Nodes (8 GPUs, 2 CPUs
and 4 Gi a pod, so at most 110 pods a node fit as the kubelet's pod limit says), then
``--pods`` pods (every fifth 1 GPU, the others a tenth of one, `gpusched.io/gpu-milli`),
created while both run, all bound by the leader. Each replica writes a snapshot
(SIGUSR2) once it has the nodes and once every pod is bound and ``--settle`` seconds passed.
Figures: each replica's RSS and traced MB at both, per pod (the growth over the nodes divided
by the pods), then the leader's growth by traceback, and what the leader's growth holds above
the standby's by line. ``--no-trace`` gives the RSS alone (tracing costs about as much again).
Needs the control plane's binaries (testing/cluster/build-*.sh).

Without ``--real``, in-process:

The scheduling service is built as the tests build it (`build_scheduler` over a fake API that
records binds), with the real state, engine, ledger, status and Events. It is fed through the
entry points the watch handlers call: DGX-like Nodes (`Scheduler.node_changed`), then pods as
the API server shows them to a watch (server defaults, managed fields, a status), created
pending (`Scheduler.pod_changed`), bound by the scheduler's own cycles (``await cycle()``),
and shown bound by the watch afterwards (the body with the node and the GPUs the bind
annotated). No body is kept by this script once handed over, and the fake API's call logs
are emptied after each cycle, so what is held is what the operator holds, but for the
script's own map of where each pod went (about 90 B a pod, for the take-over's lists).

Figures, after each step, in MB: Python's allocations (tracemalloc) and the process's RSS
(VmRSS; with tracemalloc's own bookkeeping, which is about as large again as what it traces:
``--no-trace`` gives the RSS alone). Baselines from the same run: the process after the
imports and the service built, and after the nodes only. Per pod: the growth from the nodes
to each pod count, divided by the pods; per node: the growth from the baseline to the nodes.
Then the top holders of the nodes' growth over the baseline, and of the last step's growth
over the nodes, by line and by traceback.
The digest of every bind, in order, tells whether two versions decided alike. Nothing asserts:
benchmarks are not tests.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import json
import os
import shutil
import sys
import time
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]  # run as a script: testing, and versus.py

from gpusched.api.config import load_config  # noqa: E402
from gpusched.k8s.client import PAGE_SIZE  # noqa: E402
from gpusched.scheduler.factory import build_scheduler  # noqa: E402
from gpusched.scheduler.ports import Listing  # noqa: E402
from gpusched.scheduler.service import Scheduler  # noqa: E402
from gpusched.scheduler.state import ClusterState  # noqa: E402
from testing.clock import Clock  # noqa: E402
from testing.fakes import FakeApi  # noqa: E402
from testing.manifests import node  # noqa: E402
from testing.manifests import pod as node_manifest_pod  # noqa: E402

Body = dict[str, Any]
NAMESPACE = "bench"
BATCH = 500
"""Pending pods created between two cycles (a cycle decides at most 500)."""
MB = 1e6


def node_body(index: int) -> Body:
    """A DGX-like Node as the kubelet and the agent write it: 8 GPUs, the topology
    annotation, zone and rack labels (16 zones x 25 racks of 12-13 at 5,000), capacity,
    conditions and managed fields."""
    rack = index // 12
    body = node(f"node-{index:05d}", f"zone-{rack // 25}", f"rack-{rack}", capacity=True)
    metadata = body["metadata"]
    metadata["uid"] = f"00000000-0000-4000-8000-{index:012d}"
    metadata["resourceVersion"] = str(1000 + index)
    metadata["creationTimestamp"] = "2026-12-01T10:00:00Z"
    metadata["managedFields"] = [_managed("kubelet"), _managed("gpusched-agent")]
    body["status"]["conditions"] = [
        {"type": t, "status": "False", "reason": f"Kubelet{t}", "message": "ok"}
        for t in ("MemoryPressure", "DiskPressure", "PIDPressure")
    ] + [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ready"}]
    body["status"]["nodeInfo"] = {"kubeletVersion": "v1.37.2", "osImage": "Ubuntu 24.04"}
    return body


def _managed(manager: str) -> Body:
    return {
        "manager": manager,
        "operation": "Update",
        "apiVersion": "v1",
        "time": "2026-12-01T10:00:00Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}}}, "f:status": {"f:phase": {}}},
    }


def pod_body(index: int, node_name: str | None = None, gpus_at: str | None = None) -> Body:
    """Pod ``index`` as a watch shows it: a single (1 GPU; every fourth 2 or 4, every tenth
    a share) with what the API server adds on create (defaults, the service-account
    volume, the not-ready tolerations, managed fields) and a status; bound to ``node_name``
    with the GPUs ``gpus_at`` once the scheduler bound it."""
    gpus = 2 if index % 8 == 3 else 4 if index % 8 == 7 else 1
    annotations = {"gpusched.io/gpu-milli": "500"} if gpus == 1 and index % 10 == 5 else {}
    if gpus_at is not None:
        annotations["gpusched.io/gpus"] = gpus_at
    name = f"p-{index:05d}"
    limits = {"nvidia.com/gpu": str(gpus)}
    container = {
        "name": "main",
        "image": "registry.example.com/serve:1.0",
        "imagePullPolicy": "IfNotPresent",
        "resources": {"requests": {"cpu": "4", "memory": "16Gi", **limits}, "limits": limits},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "volumeMounts": [
            {
                "name": "kube-api-access-x7k2p",
                "readOnly": True,
                "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
            }
        ],
    }
    spec: Body = {
        "schedulerName": "gpusched",
        "containers": [container],
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "serviceAccount": "default",
        "securityContext": {},
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
        "priority": 0,
        "tolerations": [
            {
                "key": f"node.kubernetes.io/{taint}",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            }
            for taint in ("not-ready", "unreachable")
        ],
        "volumes": [_service_account_volume()],
    }
    status: Body = {"phase": "Pending", "qosClass": "Burstable"}
    if node_name is not None:
        spec["nodeName"] = node_name
        status["conditions"] = [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-12-01T10:01:00Z"}
        ]
    metadata = {
        "name": name,
        "namespace": NAMESPACE,
        "uid": f"10000000-0000-4000-8000-{index:012d}",
        "resourceVersion": str(100_000 + 2 * index + (node_name is not None)),
        "creationTimestamp": "2026-12-01T10:00:30Z",
        "labels": {"app": "serve"},
        "annotations": annotations,
        "managedFields": [_managed("kubectl-client-side-apply"), _managed("gpusched")],
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}


def _service_account_volume() -> Body:
    token = {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}
    ca = {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}
    namespace_file = {
        "path": "namespace",
        "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
    }
    return {
        "name": "kube-api-access-x7k2p",
        "projected": {
            "defaultMode": 420,
            "sources": [token, ca, {"downwardAPI": {"items": [namespace_file]}}],
        },
    }


def decoded(body: Body) -> Body:
    """``body`` as a watch hands it over: decoded from the server's JSON, so that no string
    in it is shared with another body (the decoder makes each one afresh)."""
    loaded: Body = json.loads(json.dumps(body))
    return loaded


def service() -> tuple[Scheduler, FakeApi]:
    api = FakeApi()
    config = load_config({"operator": {"batchWindowSeconds": 0}})
    return build_scheduler(config, ClusterState(), api, clock=Clock()), api


async def cycle(scheduler: Scheduler, api: FakeApi) -> None:
    await scheduler.cycle()
    await scheduler.settle()
    await scheduler.reporter.flush()


async def add_pods(
    scheduler: Scheduler,
    api: FakeApi,
    start: int,
    stop: int,
    decisions: Any,
    placed: dict[int, tuple[str, str | None]],
) -> None:
    """Pods ``start``..``stop`` created pending, bound by cycles, then shown bound; each
    bind (pod, node, GPUs) goes into the ``decisions`` digest and into ``placed``."""
    for first in range(start, stop, BATCH):
        last = min(first + BATCH, stop)
        for index in range(first, last):
            scheduler.pod_changed(decoded(pod_body(index)))
        await cycle(scheduler, api)
        binds, api.binds = api.binds, []
        for key, where, written in binds:
            index = int(key.rsplit("-", 1)[1])
            gpus = written.get("gpusched.io/gpus")
            decisions.update(f"{key} {where} {gpus}\n".encode())
            placed[index] = (where, gpus)
            scheduler.pod_changed(decoded(pod_body(index, where, gpus)))
        api.events.clear()
        api.statuses.clear()
        api.event_patches.clear()
        if len(binds) != last - first:
            raise SystemExit(f"{len(binds)} of pods {first}..{last} bound: the cluster is full")
    await cycle(scheduler, api)


async def peaks(
    scheduler: Scheduler, api: FakeApi, nodes: int, placed: dict[int, tuple[str, str | None]]
) -> list[tuple[str, float]]:
    """What the leader's passing work holds at its most above what it holds for good
    (tracemalloc's peak; the RSS's high-water mark without tracing): a cycle that decides
    `BATCH` new pods, and a take-over, the lists of every pod and Node of the cluster taken
    in page by page (`PAGE_SIZE` a page, each decoded as it comes), as a new leader does
    before its first decision."""
    start = len(placed)
    first = peak_of(lambda: add_pods(scheduler, api, start, start + BATCH, hashlib.sha256(), {}))
    cycle_peak = await first

    def paged(bodies: Callable[[int], Body], count: int) -> AsyncIterator[Listing]:
        async def pages() -> AsyncIterator[Listing]:
            for at in range(0, count, PAGE_SIZE):
                page = [decoded(bodies(i)) for i in range(at, min(at + PAGE_SIZE, count))]
                yield Listing(page, "999999")

        return pages()

    indices = sorted(placed)

    def listed(plural: str, *, cached: bool = False) -> AsyncIterator[Listing]:
        if plural == "nodes":
            return paged(node_body, nodes)
        return paged(lambda at: pod_body(indices[at], *placed[indices[at]]), len(indices))

    api.pages = listed  # type: ignore[method-assign]
    take_over = await peak_of(lambda: scheduler.take_leadership(listed("pods")))
    return [(f"one cycle of {BATCH} new pods", cycle_peak), ("a take-over", take_over)]


async def peak_of(work: Callable[[], Awaitable[None]]) -> float:
    """MB: tracemalloc's peak during ``work`` above what was traced before it, or, without
    tracing, how far ``work`` raised the RSS's high-water mark above the RSS before it."""
    gc.collect()
    before_rss, before = rss(), tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    await work()
    if tracemalloc.is_tracing():
        return (tracemalloc.get_traced_memory()[1] - before) / MB
    return max(0.0, rss("VmHWM") - before_rss)


def traced() -> float:
    gc.collect()
    return tracemalloc.get_traced_memory()[0] / MB if tracemalloc.is_tracing() else 0.0


def rss(field: str = "VmRSS") -> float:
    """``field`` of /proc/self/status in MB: VmRSS now, VmHWM the most so far."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024 / MB
    return 0.0


def top(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot, count: int) -> Iterator[str]:
    """The biggest holders of what ``after`` holds above ``before``: by line, then the
    tracebacks of the first few."""
    stats = after.compare_to(before, "lineno")
    yield f"top {count} lines by growth (MB, blocks):"
    for stat in stats[:count]:
        frame = stat.traceback[0]
        where = f"{_short(frame.filename)}:{frame.lineno}"
        yield f"  {stat.size_diff / MB:8.2f} {stat.count_diff:>9}  {where}"
    yield "tracebacks of the top 5 (innermost last, gpusched frames only):"
    for stat in after.compare_to(before, "traceback")[:5]:
        frames = [f for f in stat.traceback if "gpusched" in f.filename] or list(stat.traceback)
        chain = " <- ".join(f"{_short(f.filename)}:{f.lineno}" for f in reversed(frames[-6:]))
        yield f"  {stat.size_diff / MB:8.2f}  {chain}"


def _short(filename: str) -> str:
    for marker in ("gpusched/", "site-packages/", "python3"):
        if marker in filename:
            return filename.split(marker, 1)[1] if marker != "python3" else filename
    return filename


async def measure(args: argparse.Namespace) -> None:
    counts = sorted(int(n) for n in args.pods.split(","))
    if args.trace:
        tracemalloc.start(args.frames)
    scheduler, api = service()
    rows = [("imports, service built", 0, traced(), rss())]
    baseline = tracemalloc.take_snapshot() if args.trace else None
    for index in range(args.nodes):
        scheduler.node_changed(decoded(node_body(index)))
    started = time.process_time()
    await cycle(scheduler, api)
    rows.append((f"{args.nodes} nodes", 0, traced(), rss()))
    nodes_only = tracemalloc.take_snapshot() if args.trace else None
    done = 0
    decisions = hashlib.sha256()
    placed: dict[int, tuple[str, str | None]] = {}
    for target in counts:
        await add_pods(scheduler, api, done, target, decisions, placed)
        for _ in range(args.cycles):
            await cycle(scheduler, api)
        done = target
        rows.append((f"+ {target} bound pods", target, traced(), rss()))
    elapsed = time.process_time() - started
    print(f"memory: {args.nodes} nodes, pods {args.pods}; load average {os.getloadavg()[0]:.1f}")
    print(f"{'step':<28}{'traced MB':>11}{'RSS MB':>9}{'traced/pod':>12}{'RSS/pod':>10}")
    base, nodes = rows[0], rows[1]
    for label, pods, traced_mb, rss_mb in rows:
        per_pod = per_rss = ""
        if pods:
            per_pod = f"{(traced_mb - nodes[2]) * MB / pods:,.0f} B"
            per_rss = f"{(rss_mb - nodes[3]) * MB / pods:,.0f} B"
        print(f"{label:<28}{traced_mb:>11.1f}{rss_mb:>9.1f}{per_pod:>12}{per_rss:>10}")
    per_node = (nodes[2] - base[2]) * MB / args.nodes
    per_node_rss = (nodes[3] - base[3]) * MB / args.nodes
    print(f"per node: {per_node:,.0f} B traced, {per_node_rss:,.0f} B RSS")
    print(f"peak RSS (VmHWM) {rss('VmHWM'):.1f} MB")
    print(f"{len(scheduler.state.pods)} pods held, {elapsed:.1f} CPU s for nodes and pods")
    print(f"decisions: sha256 {decisions.hexdigest()[:16]} of every bind, in order (compare runs)")
    held = tracemalloc.take_snapshot() if args.trace else None
    for label, peak in await peaks(scheduler, api, args.nodes, placed):
        print(f"peak above what is held, {label}: {peak:.1f} MB")
    if baseline is not None and nodes_only is not None and held is not None:
        print("the nodes' growth over the baseline:")
        for line in top(baseline, nodes_only, args.top // 2):
            print(line)
        print(f"the pods' growth over the nodes ({done} pods):")
        for line in top(nodes_only, held, args.top):
            print(line)


# -- inside the real leader and standby -----------------------------------------------------------

REAL_NAMESPACE = "memory"
LOGS = ROOT / "bench" / "results" / "memory"
"""Each replica's log and snapshots (``--real``)."""
POLL = 0.5


class Replica:
    """One `gpusched run` as users run it (the chart's identity, leader election on, default
    SchedulerConfig), tracing itself into a folder of its own when ``frames`` is given."""

    def __init__(self, name: str, cluster: Any, workdir: Path, frames: int | None) -> None:
        from testing.cluster.controlplane import free_port
        from versus import spawn_gpusched

        self.name = name
        self.port = free_port()
        self.folder = workdir / name
        self.folder.mkdir()
        kubeconfig = cluster.plane.write_kubeconfig(self.folder / "kubeconfig", "operator")
        env: dict[str, str] = {}
        if frames is not None:
            env.update(GPUSCHED_TRACEMALLOC=str(frames), GPUSCHED_TRACEMALLOC_DIR=str(self.folder))
        self.log = self.folder / "gpusched.log"
        with self.log.open("wb") as out:
            self.popen = spawn_gpusched(kubeconfig, out, self.port, env)
        self.snapshots: list[tuple[float, tracemalloc.Snapshot | None]] = []
        """(RSS MB, the snapshot or None untraced), one for each `snap`."""

    def leading(self) -> bool:
        import httpx

        try:
            text = httpx.get(f"http://127.0.0.1:{self.port}/metrics", timeout=5).text
        except httpx.HTTPError:
            return False
        return "\ngpusched_leader 1.0" in text

    def snap(self, timeout: float) -> None:
        """The process's RSS and, traced, the snapshot it writes on SIGUSR2."""
        import signal

        if self.popen.poll() is not None:
            raise SystemExit(f"{self.name} exited ({self.popen.returncode}); see {self.log}")
        if not (self.folder / "kubeconfig").exists() or not self._traced():
            self.snapshots.append((_rss_of(self.popen.pid), None))
            return
        summary = self.folder / f"{self.popen.pid}-{len(self.snapshots) + 1}.txt"
        self.popen.send_signal(signal.SIGUSR2)
        _wait(summary.exists, timeout, f"{self.name}'s snapshot {summary.name}")
        rss_mb = _rss_of(self.popen.pid)
        loaded = tracemalloc.Snapshot.load(str(summary.with_suffix(".tracemalloc")))
        self.snapshots.append((rss_mb, loaded))

    def _traced(self) -> bool:
        return any(self.folder.glob("*.tracemalloc")) or "tracemalloc on" in self.log.read_text()

    def stop(self) -> None:
        import subprocess

        self.popen.terminate()
        try:
            self.popen.wait(30)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(10)


def _rss_of(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024 / MB
    return 0.0


def _wait(done: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise SystemExit(f"{what}: not there after {timeout:.0f} s")
        time.sleep(POLL)


def real_pod(index: int) -> Body:
    """Every fifth pod asks for 1 GPU, the others for a tenth of one; 500m CPU and 1 Gi."""
    pod = node_manifest_pod(f"p-{index:05d}", 1, namespace=REAL_NAMESPACE, cpu="500m", memory="1Gi")
    if index % 5:
        pod["metadata"]["annotations"]["gpusched.io/gpu-milli"] = "100"
    del pod["metadata"]["uid"]
    return pod


def real(args: argparse.Namespace) -> None:
    import tempfile

    from testing.cluster.cluster import RealCluster
    from versus import Api, BindWatch, ensure_namespace

    frames = args.frames if args.trace else None
    with tempfile.TemporaryDirectory(prefix="gpusched-memory-") as folder:
        workdir = Path(folder)
        with RealCluster.running(workdir / "controlplane") as cluster:
            api = Api(cluster)
            started = time.monotonic()
            real_nodes(api, args.nodes)
            ensure_namespace(api, REAL_NAMESPACE)
            shutil.rmtree(LOGS, ignore_errors=True)
            LOGS.mkdir(parents=True)
            replicas = [Replica(n, cluster, LOGS, frames) for n in ("replica-a", "replica-b")]
            try:
                _wait(lambda: any(r.leading() for r in replicas), 120, "a leader")
                leader = next(r for r in replicas if r.leading())
                time.sleep(args.settle)  # both replicas' watches have listed the nodes
                for replica in replicas:
                    replica.snap(args.timeout)
                counts = sorted(int(n) for n in args.pods.split(","))
                done = bound = 0
                with BindWatch(api, REAL_NAMESPACE) as watch:
                    for target in counts:
                        path = f"/api/v1/namespaces/{REAL_NAMESPACE}/pods"
                        api.post([(path, real_pod(i)) for i in range(done, target)])
                        done = target
                        watch.wait(target, args.timeout)
                        bound = len(watch.bound)
                        time.sleep(args.settle)  # the standby's watch has seen every bind
                        for replica in replicas:
                            replica.snap(args.timeout)
                leader = next((r for r in replicas if r.leading()), leader)
                span = counts[-1] - (counts[-2] if len(counts) > 1 else 0)
                load = os.getloadavg()[0]
                print(
                    f"memory --real: {args.nodes} nodes, {counts[-1]} pods ({bound} bound), "
                    f"{time.monotonic() - started:.0f} s; load average {load:.1f}; per pod: "
                    f"the growth over the last {span} pods (the step before: "
                    f"{counts[-2] if len(counts) > 1 else 'the nodes only'})"
                )
                report_real(replicas, leader, span, args.top)
                if args.failover:
                    failover(replicas, leader, args)
            finally:
                for replica in replicas:
                    replica.stop()


def failover(replicas: list[Replica], leader: Replica, args: argparse.Namespace) -> None:
    """The leader killed (SIGKILL), its successor snapped once it leads and ``--settle``
    seconds passed: what taking over added to what it held as a standby."""
    successor = next(r for r in replicas if r is not leader)
    leader.popen.kill()
    leader.popen.wait(10)
    _wait(successor.leading, args.timeout, f"{successor.name} leading")
    time.sleep(args.settle)
    successor.snap(args.timeout)
    (rss_before, before), (rss_after, after) = successor.snapshots[-2:]
    pods = int(args.pods.split(",")[-1])
    print(
        f"{successor.name} took over: RSS {rss_before:.1f} -> {rss_after:.1f} MB "
        f"({(rss_after - rss_before) * MB / pods:,.0f} B a pod)"
    )
    if before is None or after is None:
        return
    print("what taking over added, by traceback (B a pod, blocks a pod):")
    for stat in after.compare_to(before, "traceback")[: args.top]:
        size, blocks = stat.size_diff / pods, stat.count_diff / pods
        print(f"  {size:8,.0f}  {blocks:6.1f}  {_chain(stat.traceback)}")


def real_nodes(api: Any, count: int) -> None:
    nodes = [
        node(f"n{i:05d}", f"zone-{i // 250}", f"rack-{i // 10}", capacity=True)
        for i in range(count)
    ]
    api.post([("/api/v1/nodes", {k: v for k, v in n.items() if k != "status"}) for n in nodes])
    for body in nodes:
        api.client.patch(
            "nodes", body["metadata"]["name"], {"status": body["status"]}, subresource="status"
        )
    # The node-lifecycle controller lifts the not-ready taint once a Node reports Ready.
    _wait(
        lambda: not any(n["spec"].get("taints") for n in api.client.list("nodes")),
        300,
        "untainted Nodes",
    )


def report_real(replicas: list[Replica], leader: Replica, pods: int, count: int) -> None:
    """Each replica's RSS and traced MB before and after the last ``pods`` pods, per pod;
    then the leader's growth by traceback, and what it holds above the standby's, by line."""
    heads = f"{'RSS MB':>8}{'after':>8}{'a pod':>10}{'traced MB':>11}{'after':>8}{'a pod':>10}"
    print(f"{'replica':<22}{heads}")
    for replica in replicas:
        (rss_before, before), (rss_after, after) = replica.snapshots[-2:]
        role = "leader" if replica is leader else "standby"
        line = f"{f'{replica.name} ({role})':<22}{rss_before:>8.1f}{rss_after:>8.1f}"
        line += f"{(rss_after - rss_before) * MB / pods:>8,.0f} B"
        if before is not None and after is not None:
            t0, t1 = _total(before), _total(after)
            line += f"{t0:>11.1f}{t1:>8.1f}{(t1 - t0) * MB / pods:>8,.0f} B"
        print(line)
    standby = next(r for r in replicas if r is not leader)
    (_, lead0), (_, lead1) = leader.snapshots[-2:]
    (_, stand0), (_, stand1) = standby.snapshots[-2:]
    if lead0 is None or lead1 is None or stand0 is None or stand1 is None:
        return
    print("the leader's growth, by traceback (B a pod, blocks a pod; allocation <- gpusched):")
    for stat in lead1.compare_to(lead0, "traceback")[:count]:
        size, blocks = stat.size_diff / pods, stat.count_diff / pods
        print(f"  {size:8,.0f}  {blocks:6.1f}  {_chain(stat.traceback)}")
    print("what the leader's growth holds above the standby's, by line (B a pod):")
    growth: dict[str, int] = {}
    for sign, before, after in ((1, lead0, lead1), (-1, stand0, stand1)):
        for stat in after.compare_to(before, "lineno"):
            frame = stat.traceback[0]
            key = f"{_short(frame.filename)}:{frame.lineno}"
            growth[key] = growth.get(key, 0) + sign * stat.size_diff
    for key, size in sorted(growth.items(), key=lambda kv: -kv[1])[:count]:
        print(f"  {size / pods:8,.0f}  {key}")


def _total(snapshot: tracemalloc.Snapshot) -> float:
    return sum(stat.size for stat in snapshot.statistics("filename")) / MB


def _chain(traceback: tracemalloc.Traceback) -> str:
    """The allocating frame, then the gpusched frames that led to it (innermost first)."""
    inner = traceback[-1]
    frames = [f for f in traceback if "gpusched" in f.filename and f is not inner]
    return " <- ".join(f"{_short(f.filename)}:{f.lineno}" for f in [inner, *reversed(frames[-7:])])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", default="5000,10000,15000", help="pod counts, comma-separated")
    parser.add_argument("--real", action="store_true", help="inside the real leader and standby")
    parser.add_argument("--failover", action="store_true", help="--real: then kill the leader")
    parser.add_argument(
        "--settle", type=float, default=10, help="--real: seconds before a snapshot"
    )
    parser.add_argument("--timeout", type=float, default=600, help="--real: seconds to bind all")
    parser.add_argument("--cycles", type=int, default=3, help="cycles after each pod count")
    parser.add_argument("--top", type=int, default=20, help="lines of holders shown")
    parser.add_argument("--frames", type=int, default=12, help="traceback depth traced")
    parser.add_argument("--no-trace", dest="trace", action="store_false", help="RSS only")
    args = parser.parse_args(argv)
    if args.real:
        real(args)
        return 0
    asyncio.run(measure(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())

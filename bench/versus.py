"""gpusched against kube-scheduler 1.37 on the real control plane: the same work, in turn.

    python bench/versus.py            # 2,000 pods a phase, 10 gangs (a few minutes)
    python bench/versus.py --quick    # 600 pods a phase, 10 gangs
    python bench/versus.py --rate 150 --pods 1000 --gangs 10
    python bench/versus.py --first-bind 3 --pods 200   # start → first bind alone, 3 starts each

One control plane (etcd, kube-apiserver, kube-controller-manager v1.37.2 from
testing/cluster, on 127.0.0.1) with 500 Nodes (5 zones × 10 racks × 10 nodes, 8 GPUs each).
Each scheduler in turn gets the same pods, created the same way; only one runs at a time:

- gpusched as users run it: `gpusched run --kubeconfig …` in a child process, with the
  chart's service-account identity and RBAC, default SchedulerConfig.
- kube-scheduler at its defaults (its own QPS limits included) with the Workload API's gates
  on.

Both get the same objects: gangs as `scheduling.k8s.io/v1beta1` PodGroups, pods naming their
group in `spec.schedulingGroup`; only the pods' `schedulerName` differs (testing/upstream.py),
and each scheduler works in namespaces of its own.

Phases, for each scheduler:

1. Backlog drain: N pods (single-GPU; every fourth asks for 2 or 4) created while the
   scheduler is stopped, then the scheduler starts: pods bound per second from its first
   bind to its last (its start-up is shown apart).
2. Sustained: N more pods created at a fixed rate (`--rate`, the same for both; the rate
   the client reached is printed), from the first creation to the last bind.
3. A 64-pod gang (minCount 64, 4 GPUs a pod, zone topology): first pod created → all 64
   bound, `--gangs` times; p50 and p99.

Binds are seen by a watch on the pods (the same for both); CPU seconds are the scheduler
process's user + system time from /proc/<pid>/stat over each phase. The load generator runs
in a child process. Benchmarks are not tests: nothing here asserts. The results also go to
bench/results/versus.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import platform
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

import httpx

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from testing.cluster.cluster import RealCluster, env_for_operator  # noqa: E402
from testing.gangs import upstream_member, upstream_pod_group  # noqa: E402
from testing.harness import ZONE, gpu_node, gpu_pod  # noqa: E402
from testing.upstream import (  # noqa: E402
    KUBE_SCHEDULER,
    clear_upstream,
    for_scheduler,
    kube_scheduler,
)

RESULTS = HERE / "results" / "versus.json"
ZONES, RACKS, NODES = 5, 10, 10  # 500 nodes
CLIENT_CONCURRENCY = 16
GANG_SIZE = 64
GPUSCHED = "gpusched"
UPSTREAM = "kube-scheduler"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# -- talking to the API server (also from the load-generating child) -----------------------------


def _ssl(ca: str) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=ca)


async def _post_all(
    url: str, token: str, ca: str, bodies: list[tuple[str, dict[str, Any]]], rate: float
) -> tuple[float, float]:
    """POSTs every (path, body), CLIENT_CONCURRENCY in flight, body i not before i / rate
    seconds after the start (rate 0: as fast as it goes). Returns (first sent, last answered)
    on the monotonic clock, which every process of the machine shares."""
    queue: asyncio.Queue[tuple[int, str, dict[str, Any]]] = asyncio.Queue()
    for index, (path, body) in enumerate(bodies):
        queue.put_nowait((index, path, body))
    started = time.monotonic()
    headers = {"Authorization": f"Bearer {token}"}
    limits = httpx.Limits(max_connections=CLIENT_CONCURRENCY)
    async with httpx.AsyncClient(
        base_url=url, headers=headers, verify=_ssl(ca), timeout=60, limits=limits
    ) as client:

        async def worker() -> None:
            while not queue.empty():
                index, path, body = queue.get_nowait()
                if rate > 0 and (wait := started + index / rate - time.monotonic()) > 0:
                    await asyncio.sleep(wait)  # pacing the load, not waiting for a result
                response = await client.post(path, json=body)
                if response.status_code >= 300:
                    raise RuntimeError(f"{path}: {response.status_code} {response.text[:300]}")

        await asyncio.gather(*(worker() for _ in range(CLIENT_CONCURRENCY)))
    return started, time.monotonic()


def post_all(
    url: str, token: str, ca: str, bodies: list[tuple[str, dict[str, Any]]], rate: float = 0
) -> tuple[float, float]:
    return asyncio.run(_post_all(url, token, ca, bodies, rate))


def in_child(fn: Any, *args: Any) -> Any:
    """Runs a load phase in a child process: the client must not share the watch's GIL."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(fn, args)


class Api:
    """The admin's address and credentials, and the few calls the benchmark makes itself."""

    def __init__(self, cluster: RealCluster) -> None:
        self.url = cluster.url
        self.token = cluster.plane.token("admin")
        self.ca = str(cluster.plane.ca)
        self.client = cluster.client()

    def post(
        self, bodies: list[tuple[str, dict[str, Any]]], rate: float = 0
    ) -> tuple[float, float]:
        return in_child(post_all, self.url, self.token, self.ca, bodies, rate)

    def delete_pods(self, namespace: str, timeout: float = 120) -> None:
        path = f"/api/v1/namespaces/{namespace}/pods"
        # Deleting thousands of pods can outlast one request's patience on a busy machine; the
        # server goes on deleting after the answer is lost, so the poll below is the judge.
        with contextlib.suppress(httpx.TimeoutException):
            self.client.http.request(
                "DELETE", path, json={"gracePeriodSeconds": 0}, timeout=timeout
            )
        deadline = time.monotonic() + timeout
        while self.client.list_raw("pods", namespace, limit="1")["items"]:
            if time.monotonic() > deadline:
                raise TimeoutError(f"pods of {namespace} not gone after {timeout}s")
            time.sleep(0.1)


class BindWatch:
    """When each pod of a namespace was first seen bound, from a watch (in a thread)."""

    def __init__(self, api: Api, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.bound: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bind-watch", daemon=True)
        listing = api.client.list_raw("pods", namespace)
        self._version = listing["metadata"]["resourceVersion"]

    def __enter__(self) -> BindWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()

    def _run(self) -> None:
        path = f"/api/v1/namespaces/{self.namespace}/pods"
        headers = {"Authorization": f"Bearer {self.api.token}"}
        with httpx.Client(
            base_url=self.api.url, headers=headers, verify=_ssl(self.api.ca), timeout=None
        ) as client:
            while not self._stop.is_set():
                params = {"watch": "true", "resourceVersion": self._version, "timeoutSeconds": "60"}
                # A watch the server ends (its timeout, a restart) resumes where it was.
                with (
                    contextlib.suppress(httpx.HTTPError),
                    client.stream("GET", path, params=params) as response,
                ):
                    for line in response.iter_lines():
                        if self._stop.is_set():
                            return
                        if line:
                            self._seen(json.loads(line))

    def _seen(self, event: dict[str, Any]) -> None:
        pod = event.get("object", {})
        self._version = pod.get("metadata", {}).get("resourceVersion", self._version)
        if event.get("type") in ("ADDED", "MODIFIED") and pod.get("spec", {}).get("nodeName"):
            self.bound.setdefault(pod["metadata"]["name"], time.monotonic())

    def wait_first(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not self.bound and time.monotonic() < deadline:
            time.sleep(0.005)
        return bool(self.bound)

    def wait(self, count: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while len(self.bound) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        return len(self.bound) >= count


# -- the work ------------------------------------------------------------------------------------


def make_nodes(api: Api) -> None:
    nodes = [
        gpu_node(f"z{z}-r{r}-n{n}", f"zone-{z}", f"rack-{z}-{r}")
        for z in range(ZONES)
        for r in range(RACKS)
        for n in range(NODES)
    ]
    api.post([("/api/v1/nodes", {k: v for k, v in n.items() if k != "status"}) for n in nodes])
    for node in nodes:
        api.client.patch(
            "nodes", node["metadata"]["name"], {"status": node["status"]}, subresource="status"
        )
    # The node-lifecycle controller lifts the not-ready taint once a Node reports Ready; both
    # schedulers respect it.
    deadline = time.monotonic() + 120
    while any(n["spec"].get("taints") for n in api.client.list("nodes")):
        if time.monotonic() > deadline:
            raise TimeoutError("Nodes still tainted not-ready after 120 s")
        time.sleep(0.5)


def mixed_pods(scheduler: str, namespace: str, count: int) -> list[tuple[str, dict[str, Any]]]:
    """Single-GPU pods; every fourth asks for 2 or 4 GPUs."""
    bodies = []
    for i in range(count):
        gpus = 1 if i % 4 else (2 if i % 8 else 4)
        pod = gpu_pod(f"p-{i}", gpus, namespace=namespace)
        bodies.append((f"/api/v1/namespaces/{namespace}/pods", _for(scheduler, pod)))
    return bodies


def _for(scheduler: str, pod: dict[str, Any]) -> dict[str, Any]:
    return for_scheduler(pod, KUBE_SCHEDULER if scheduler == UPSTREAM else GPUSCHED)


def ensure_namespace(api: Api, name: str) -> None:
    if api.client.get_or_none("namespaces", name) is None:
        api.client.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    deadline = time.monotonic() + 30
    while api.client.get_or_none("serviceaccounts", "default", name) is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"no default ServiceAccount in {name}")
        time.sleep(0.1)


# -- the schedulers ------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process `pid` (fields 14 and 15 of /proc/<pid>/stat)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def spawn_gpusched(
    kubeconfig: Path, log: IO[bytes], port: int = 0, env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """`gpusched run` as a child process of this checkout (its /metrics on 127.0.0.1:``port``),
    ``env`` added to the operator's environment, its output into ``log``: how every benchmark
    starts the operator."""
    argv = [sys.executable, "-m", "gpusched.cli", "run", "--kubeconfig", str(kubeconfig)]
    return subprocess.Popen(
        [*argv, "--metrics-address", f"127.0.0.1:{port}"],
        env={**env_for_operator(), "PYTHONPATH": str(ROOT / "operator"), **(env or {})},
        stdout=log,
        stderr=subprocess.STDOUT,
    )


@contextlib.contextmanager
def gpusched_process(cluster: RealCluster, workdir: Path) -> Iterator[int]:
    """`gpusched run` as a child process, straight to the API server with the chart's identity."""
    kubeconfig = cluster.plane.write_kubeconfig(workdir / "gpusched.kubeconfig", "operator")
    log = (workdir / "gpusched.log").open("wb")
    process = spawn_gpusched(kubeconfig, log)
    try:
        yield process.pid
        if process.poll() is not None:
            raise RuntimeError(f"gpusched run exited ({process.returncode}); see {log.name}")
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        log.close()


def scheduler_process(
    name: str, cluster: RealCluster, workdir: Path, args: argparse.Namespace
) -> Any:
    if name == GPUSCHED:
        return gpusched_process(cluster, workdir)
    return kube_scheduler(cluster, upstream_flags(args))


def upstream_flags(args: argparse.Namespace) -> list[str]:
    """kube-scheduler's flags: none (its defaults: client QPS 50, burst 100) unless asked."""
    if args.kube_scheduler_qps is None:
        return []
    qps = args.kube_scheduler_qps
    return [f"--kube-api-qps={qps:g}", f"--kube-api-burst={round(2 * qps)}"]


# -- the phases ----------------------------------------------------------------------------------


def run_scheduler(
    name: str, cluster: RealCluster, api: Api, workdir: Path, args: argparse.Namespace
) -> dict[str, Any]:
    results: dict[str, Any] = {}
    backlog = f"{name}-backlog"
    ensure_namespace(api, backlog)
    api.post(mixed_pods(name, backlog, args.pods))
    with BindWatch(api, backlog) as watch:
        started = time.monotonic()
        with scheduler_process(name, cluster, workdir, args) as pid:
            watch.wait_first(args.timeout)
            cpu = cpu_seconds(pid)
            done = watch.wait(args.pods, timeout=args.timeout)
            drained = cpu_seconds(pid)
            results["drain"] = _drain(watch, started, done, drained - cpu, args.pods)
            results["drain"]["startup_cpu_seconds"] = cpu
            api.delete_pods(backlog)
            results["sustained"] = sustained(name, api, pid, args)
            results["gang"] = gangs(name, api, pid, args)
    results["load_average"] = os.getloadavg()[0]
    print(f"  {name}: done, load average {results['load_average']:.2f}", file=sys.stderr)
    return results


def first_binds(
    name: str, cluster: RealCluster, api: Api, workdir: Path, args: argparse.Namespace
) -> dict[str, Any]:
    """Start → first bind alone, ``--first-bind`` times: a backlog of ``--pods`` pending
    pods, the scheduler started, its first bind seen, the scheduler stopped, the pods
    deleted. gpusched's log of the last start is kept in bench/results/."""
    times, cpu = [], []
    for round_ in range(args.first_bind):
        backlog = f"{name}-start-{round_}"
        ensure_namespace(api, backlog)
        api.post(mixed_pods(name, backlog, args.pods))
        with BindWatch(api, backlog) as watch:
            started = time.monotonic()
            with scheduler_process(name, cluster, workdir, args) as pid:
                watch.wait_first(args.timeout)
                cpu.append(cpu_seconds(pid))
            times.append(min(watch.bound.values(), default=float("nan")) - started)
        api.delete_pods(backlog)
        if name == GPUSCHED:
            RESULTS.parent.mkdir(exist_ok=True)
            (RESULTS.parent / "versus-startup-gpusched.log").write_bytes(
                (workdir / "gpusched.log").read_bytes()
            )
    load = os.getloadavg()[0]
    print(
        f"{name:>15}: start → first bind {', '.join(f'{t:.2f}' for t in times)} s "
        f"(median {statistics.median(times):.2f}), CPU s {', '.join(f'{c:.2f}' for c in cpu)}, "
        f"load average {load:.1f}"
    )
    return {"start_to_first_bind_s": times, "cpu_seconds": cpu, "load_average": load}


def _drain(watch: BindWatch, started: float, done: bool, cpu: float, count: int) -> dict[str, Any]:
    times = sorted(watch.bound.values())
    first, last = (times[0], times[-1]) if times else (started, started)
    span = last - first
    return {
        "pods": count,
        "bound": len(times),
        "all_bound": done,
        "start_to_first_bind_s": first - started,
        "seconds": span,
        "pods_per_second": (len(times) - 1) / span if span > 0 else 0.0,
        "cpu_seconds": cpu,
    }


def sustained(name: str, api: Api, pid: int, args: argparse.Namespace) -> dict[str, Any]:
    namespace = f"{name}-load"
    ensure_namespace(api, namespace)
    bodies = mixed_pods(name, namespace, args.pods)
    with BindWatch(api, namespace) as watch:
        cpu = cpu_seconds(pid)
        first, created = api.post(bodies, args.rate)
        done = watch.wait(args.pods, timeout=args.timeout)
        cpu = cpu_seconds(pid) - cpu
    last = max(watch.bound.values(), default=first)
    api.delete_pods(namespace)
    return {
        "pods": args.pods,
        "bound": len(watch.bound),
        "all_bound": done,
        "created_per_second": args.pods / (created - first),
        "seconds": last - first,
        "pods_per_second": len(watch.bound) / (last - first) if last > first else 0.0,
        "cpu_seconds": cpu,
    }


def gangs(name: str, api: Api, pid: int, args: argparse.Namespace) -> dict[str, Any]:
    namespace = f"{name}-gang"
    ensure_namespace(api, namespace)
    seconds: list[float] = []
    cpu = cpu_seconds(pid)
    for round_ in range(args.gangs):
        api.client.create(
            upstream_pod_group(f"g{round_}", GANG_SIZE, key=ZONE, namespace=namespace)
        )
        pods = [
            (
                f"/api/v1/namespaces/{namespace}/pods",
                _for(name, upstream_member(f"g{round_}-{i}", 4, f"g{round_}", namespace=namespace)),
            )
            for i in range(GANG_SIZE)
        ]
        with BindWatch(api, namespace) as watch:
            first, _ = api.post(pods)
            if watch.wait(GANG_SIZE, timeout=args.timeout):
                seconds.append(max(watch.bound.values()) - first)
        api.delete_pods(namespace)
        clear_upstream(api.client, [namespace])
    cpu = cpu_seconds(pid) - cpu
    ordered = sorted(seconds)
    return {
        "rounds": args.gangs,
        "all_bound_rounds": len(seconds),
        "p50_s": statistics.median(ordered) if ordered else None,
        "p99_s": ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
        if ordered
        else None,
        "seconds": seconds,
        "cpu_seconds": cpu,
    }


# -- the table -----------------------------------------------------------------------------------


def report(results: dict[str, Any], args: argparse.Namespace) -> None:
    ours, theirs = results[GPUSCHED], results[UPSTREAM]
    settings = " ".join(upstream_flags(args)) or "its defaults"
    print(
        f"gpusched vs kube-scheduler v1.37.2 ({settings}): {ZONES * RACKS * NODES} nodes, "
        f"{args.pods} pods a phase, offered {args.rate:g} pods/s, {args.gangs} gangs of {GANG_SIZE}"
    )
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; "
        f"load average after gpusched's turn {ours['load_average']:.2f}, after "
        f"kube-scheduler's {theirs['load_average']:.2f}"
    )
    print(f"{'figure':<46}{'gpusched':>12}{'kube-sched':>12}{'ratio':>8}  target")
    drain = "backlog drain, first → last bind (pods/s)"
    _row(drain, ours["drain"]["pods_per_second"], theirs["drain"]["pods_per_second"], ">= 1.5x")
    _row(
        "  scheduler start → first bind (s)",
        ours["drain"]["start_to_first_bind_s"],
        theirs["drain"]["start_to_first_bind_s"],
    )
    _row(
        "  CPU seconds, start → first bind",
        ours["drain"]["startup_cpu_seconds"],
        theirs["drain"]["startup_cpu_seconds"],
    )
    _row(
        "  CPU seconds, first → last bind",
        ours["drain"]["cpu_seconds"],
        theirs["drain"]["cpu_seconds"],
    )
    _row(
        "sustained, first created → last bound (pods/s)",
        ours["sustained"]["pods_per_second"],
        theirs["sustained"]["pods_per_second"],
        ">= 1.5x",
    )
    _row(
        "  pods created per second (client)",
        ours["sustained"]["created_per_second"],
        theirs["sustained"]["created_per_second"],
    )
    _row("  CPU seconds", ours["sustained"]["cpu_seconds"], theirs["sustained"]["cpu_seconds"])
    for key, label in (("p50_s", "p50"), ("p99_s", "p99")):
        _row(
            f"64-pod gang created → all bound, {label} (s)",
            ours["gang"][key],
            theirs["gang"][key],
            "<= 1x",
            lower_is_better=True,
        )
    _row(
        f"  gangs all bound (of {args.gangs})",
        ours["gang"]["all_bound_rounds"],
        theirs["gang"]["all_bound_rounds"],
    )
    _row("  CPU seconds", ours["gang"]["cpu_seconds"], theirs["gang"]["cpu_seconds"])
    for name in (GPUSCHED, UPSTREAM):
        for phase in ("drain", "sustained"):
            if not results[name][phase]["all_bound"]:
                print(f"note: {name} left pods unbound in {phase}: {results[name][phase]}")


def _row(
    label: str,
    ours: float | None,
    theirs: float | None,
    target: str = "",
    *,
    lower_is_better: bool = False,
) -> None:
    if ours is None or theirs is None:
        print(f"{label:<46}{_num(ours):>12}{_num(theirs):>12}{'':>8}  {target} NOT MET")
        return
    ratio = ours / theirs if theirs else float("inf")
    verdict = ""
    if target:
        met = ratio <= 1.0 if lower_is_better else ratio >= 1.5
        verdict = f"{target} {'met' if met else 'NOT MET'}"
    print(f"{label:<46}{_num(ours):>12}{_num(theirs):>12}{ratio:>7.2f}x  {verdict}")


def _num(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").splitlines()[0],
        epilog="Needs Go (the control plane is built from the Kubernetes modules) and helm.",
    )
    parser.add_argument("--quick", action="store_true", help="600 pods a phase (default 2,000)")
    parser.add_argument("--pods", type=int, default=None, help="pods a phase (drain, sustained)")
    parser.add_argument(
        "--rate", type=float, default=200, help="sustained creation rate, pods/s (default 200)"
    )
    parser.add_argument("--gangs", type=int, default=10, help="64-pod gangs (default 10)")
    parser.add_argument("--timeout", type=float, default=300, help="per phase, seconds")
    parser.add_argument(
        "--kube-scheduler-qps",
        type=float,
        default=None,
        help="run kube-scheduler with this client QPS (burst twice it) instead of its defaults "
        "(50, burst 100): not as users run it, to see what the limit costs",
    )
    parser.add_argument(
        "--first-bind",
        type=int,
        default=0,
        metavar="N",
        help="measure only start → first bind, N starts of each scheduler (with --pods pending)",
    )
    args = parser.parse_args(argv)
    args.pods = args.pods or (600 if args.quick else 2000)
    results: dict[str, Any] = {}
    # gpusched compiled first, as the image's build does (`compileall`): started from the
    # source tree under PYTHONDONTWRITEBYTECODE it compiled every module again at each start
    # (0.3 CPU s of it), which no installed gpusched does.
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "operator")], check=True)
    with tempfile.TemporaryDirectory(prefix="gpusched-versus-") as folder:
        workdir = Path(folder)
        with RealCluster.running(workdir / "controlplane") as cluster:
            api = Api(cluster)
            make_nodes(api)
            for name in (GPUSCHED, UPSTREAM):
                if args.first_bind:
                    results[name] = first_binds(name, cluster, api, workdir, args)
                else:
                    results[name] = run_scheduler(name, cluster, api, workdir, args)
    if not args.first_bind:
        report(results, args)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({"args": vars(args), **results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

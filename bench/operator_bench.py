"""Operator benchmark: the real operator against the API emulator, 500 nodes.

    python bench/operator_bench.py            # 2,000 pods + a 64-pod gang (about a minute)
    python bench/operator_bench.py --quick    # 600 pods + the gang
    python bench/operator_bench.py --zones 50 --pods 3000   # 5,000 nodes, 3,000 pods a phase
    py-spy record -f raw -o prof.txt -- python bench/operator_bench.py --quick   # where time goes

The emulator (testing/apiserver, built on kmock) and the load-generating client
each run in a child process, so neither shares the operator's interpreter lock; on a 2-core
machine the three share the cores. The operator runs as `gpusched run` does (Kopf, its own
thread). Two figures:

1. Sustained binds per second: single-GPU pods (a quarter ask for 2 or 4 GPUs) created at
   the rate one client manages, from the first creation to the last bind, measured by a
   watch on the emulator. Baseline: the same number of binds POSTed directly by a client
   with the same concurrency as the operator's (`bindConcurrency`), no scheduling at all:
   what the emulator itself allows. Target ≥ 200 pods/s.
   Also: the backlog drain rate — the same number of pods created before the operator
   starts, from the moment it has seen them all to the last bind (binds recorded by the
   operator itself): the operator's own rate, without the client's creation rate as a cap.
   With it, the operator's CPU time per bound pod, and the time from its start to its first
   bind.
2. A 64-pod gang (minCount 64, 4 GPUs a pod, zone topology) from its first pod created to
   all 64 bound. Target < 2 s.

Benchmarks are not tests: nothing here asserts. Results also go to bench/results/operator.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from gpusched import handlers  # noqa: E402
from gpusched.api.config import load_config  # noqa: E402
from testing.apiserver.process import ApiServerProcess  # noqa: E402
from testing.harness import gang, gpu_node, gpu_pod  # noqa: E402

RESULTS = HERE / "results" / "operator.json"
ZONES, RACKS, NODES = 5, 10, 10
"""500 nodes by default (``--zones`` sets the zones of 100 nodes each)."""
CLIENT_CONCURRENCY = 16


async def _post_all(url: str, bodies: list[tuple[str, dict[str, Any]]]) -> float:
    """POSTs every (path, body) with CLIENT_CONCURRENCY in flight; returns seconds taken."""
    queue: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()
    for item in bodies:
        queue.put_nowait(item)
    started = time.perf_counter()
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:

        async def worker() -> None:
            while not queue.empty():
                path, body = queue.get_nowait()
                response = await client.post(path, json=body)
                if response.status_code >= 300:
                    raise RuntimeError(f"{path}: {response.status_code} {response.text[:200]}")

        await asyncio.gather(*(worker() for _ in range(CLIENT_CONCURRENCY)))
    return time.perf_counter() - started


def post_all(url: str, bodies: list[tuple[str, dict[str, Any]]]) -> float:
    return asyncio.run(_post_all(url, bodies))


class BindWatch:
    """Counts pods that gain a nodeName, from a watch on the emulator (in a thread)."""

    def __init__(self, url: str, namespace: str) -> None:
        self.url = url
        self.namespace = namespace
        self.bound: dict[str, float] = {}
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> BindWatch:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()

    def _run(self) -> None:
        path = f"/api/v1/namespaces/{self.namespace}/pods"
        with (
            httpx.Client(base_url=self.url, timeout=None) as client,
            client.stream("GET", path, params={"watch": "true"}) as response,
        ):
            self._ready.set()
            for line in response.iter_lines():
                if self._stop.is_set():
                    return
                if not line:
                    continue
                obj = json.loads(line).get("object", {})
                if obj.get("spec", {}).get("nodeName"):
                    self.bound.setdefault(obj["metadata"]["name"], time.perf_counter())

    def wait(self, count: int, timeout: float) -> bool:
        deadline = time.perf_counter() + timeout
        while len(self.bound) < count and time.perf_counter() < deadline:
            time.sleep(0.01)
        return len(self.bound) >= count


def node_names(zones: int) -> list[str]:
    return [f"z{z}-r{r}-n{n}" for z in range(zones) for r in range(RACKS) for n in range(NODES)]


def make_nodes(url: str, zones: int) -> None:
    bodies = []
    for z in range(zones):
        for r in range(RACKS):
            for n in range(NODES):
                node = gpu_node(f"z{z}-r{r}-n{n}", f"zone-{z}", f"rack-{z}-{r}")
                bodies.append(("/api/v1/nodes", node))
    post_all(url, bodies)


def _mixed_pods(namespace: str, count: int) -> list[tuple[str, dict[str, Any]]]:
    """Single-GPU pods; every fourth asks for 2 or 4 GPUs."""
    bodies = []
    for i in range(count):
        gpus = 1 if i % 4 else (2 if i % 8 else 4)
        body = gpu_pod(f"p-{i}", gpus, namespace=namespace)
        bodies.append((f"/api/v1/namespaces/{namespace}/pods", body))
    return bodies


def create_backlog(url: str, count: int) -> float:
    """Pods created before the operator starts: it finds them all pending at once."""
    post_all(url, [("/api/v1/namespaces", {"metadata": {"name": "backlog"}})])
    return post_all(url, _mixed_pods("backlog", count))


def clear_backlog(url: str) -> None:
    """Deletes the backlog's pods (one deletecollection), so that the next phases have room."""
    with httpx.Client(base_url=url, timeout=60) as client:
        client.delete("/api/v1/namespaces/backlog/pods").raise_for_status()


def drain(
    runtime: handlers.Runtime, count: int, start: float, timeout: float = 120
) -> dict[str, float]:
    """From the moment the operator has seen every backlog pod to the last one bound (as its
    own state records the bind's success), measured in the operator's process; and from the
    operator's start (``start``, before Kopf runs) to its first bind."""
    state = runtime.scheduler.state
    first_bind: float | None = None

    def backlog() -> list[Any]:
        nonlocal first_bind
        pods = [r for k, r in list(state.pods.items()) if k.startswith("backlog/")]
        if first_bind is None and any(r.node is not None for r in pods):
            first_bind = time.perf_counter()
        return pods

    deadline = time.perf_counter() + timeout
    while len(backlog()) < count and time.perf_counter() < deadline:
        time.sleep(0.005)
    started, cpu = time.perf_counter(), time.process_time()
    while time.perf_counter() < deadline:
        if sum(1 for r in backlog() if r.node is not None) >= count:
            break
        time.sleep(0.005)
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu
    bound = sum(1 for r in backlog() if r.node is not None)
    return {
        "pods": count,
        "bound": bound,
        "seconds": elapsed,
        "pods_per_second": bound / elapsed,
        "cpu_ms_per_pod": 1000 * cpu / max(bound, 1),
        "start_to_first_bind_s": (first_bind or deadline) - start,
    }


def throughput(url: str, count: int) -> dict[str, float]:
    namespace = "load"
    post_all(url, [("/api/v1/namespaces", {"metadata": {"name": namespace}})])
    bodies = _mixed_pods(namespace, count)
    with BindWatch(url, namespace) as watch:
        started = time.perf_counter()
        created_in = post_all(url, bodies)
        done = watch.wait(count, timeout=120)
        last = max(watch.bound.values(), default=started)
    elapsed = last - started
    return {
        "pods": count,
        "all_bound": float(done),
        "create_seconds": created_in,
        "seconds": elapsed,
        "pods_per_second": len(watch.bound) / elapsed if elapsed > 0 else 0.0,
    }


def gang_latency(url: str, size: int = 64) -> dict[str, float]:
    namespace = "gang"
    post_all(url, [("/api/v1/namespaces", {"metadata": {"name": namespace}})])
    group = gang("g64", size, key="topology.kubernetes.io/zone", namespace=namespace)
    post_all(
        url, [(f"/apis/scheduling.gpusched.io/v1alpha1/namespaces/{namespace}/podgroups", group)]
    )
    bodies = [
        (
            f"/api/v1/namespaces/{namespace}/pods",
            gpu_pod(f"g-{i}", 4, group="g64", namespace=namespace),
        )
        for i in range(size)
    ]
    with BindWatch(url, namespace) as watch:
        started = time.perf_counter()
        created_in = post_all(url, bodies)
        done = watch.wait(size, timeout=60)
        last = max(watch.bound.values(), default=started)
    return {
        "pods": size,
        "all_bound": float(done),
        "create_seconds": created_in,
        "seconds": last - started,
    }


def raw_binds(url: str, count: int, zones: int) -> dict[str, float]:
    """Baseline: binds POSTed straight to the emulator, no operator. The pods ask for no GPU,
    so they leave the GPUs to the measured phases."""
    namespace = "raw"
    post_all(url, [("/api/v1/namespaces", {"metadata": {"name": namespace}})])
    post_all(
        url,
        [
            (
                f"/api/v1/namespaces/{namespace}/pods",
                gpu_pod(f"r-{i}", 0, namespace=namespace, scheduler="nobody"),
            )
            for i in range(count)
        ],
    )
    nodes = node_names(zones)
    bodies = [
        (
            f"/api/v1/namespaces/{namespace}/pods/r-{i}/binding",
            {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": f"r-{i}"},
                "target": {"kind": "Node", "name": nodes[i % len(nodes)]},
            },
        )
        for i in range(count)
    ]
    seconds = post_all(url, bodies)
    return {"pods": count, "seconds": seconds, "pods_per_second": count / seconds}


def in_child(fn: Any, *args: Any) -> Any:
    """Runs a load phase in a child process: the client must not take the operator's GIL."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(fn, args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="600 pods (default 2,000)")
    parser.add_argument(
        "--zones", type=int, default=ZONES, help=f"zones of 100 nodes (default {ZONES})"
    )
    parser.add_argument("--pods", type=int, default=None, help="pods a phase (overrides --quick)")
    args = parser.parse_args()
    count = args.pods or (600 if args.quick else 2000)
    nodes = args.zones * RACKS * NODES
    results: dict[str, Any] = {}
    with ApiServerProcess(crds=True) as server:
        url = server.url
        in_child(make_nodes, url, args.zones)
        results["baseline"] = in_child(raw_binds, url, count, args.zones)
        in_child(create_backlog, url, count)
        kubeconfig = HERE / "results" / "kubeconfig"
        kubeconfig.parent.mkdir(exist_ok=True)
        kubeconfig.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "e", "cluster": {"server": url}}],
                    "users": [{"name": "e", "user": {"token": "emulator-token"}}],
                    "contexts": [{"name": "e", "context": {"cluster": "e", "user": "e"}}],
                    "current-context": "e",
                }
            )
        )
        handlers.configure(
            handlers.Options(config=load_config({}), kubeconfig=str(kubeconfig), metrics_port=0)
        )
        from kopf.testing import KopfRunner

        start = time.perf_counter()
        with KopfRunner(
            ["run", "-A", "--standalone", "-m", "gpusched.handlers"],
            registry=handlers.registry,
            timeout=60,
        ):
            deadline = time.perf_counter() + 60
            while time.perf_counter() < deadline:
                runtime = handlers.running
                if runtime and len(runtime.scheduler.state.nodes) == nodes:
                    break
                time.sleep(0.05)
            if runtime is not None:
                results["drain"] = drain(runtime, count, start)
            in_child(clear_backlog, url)
            while runtime is not None and any(
                k.startswith("backlog/") for k in list(runtime.scheduler.state.pods)
            ):
                time.sleep(0.05)
            results["throughput"] = in_child(throughput, url, count)
            results["gang"] = in_child(gang_latency, url)
            runtime = handlers.running
            results["cycles"] = runtime.scheduler.cycles if runtime else 0
    results["nodes"] = nodes
    _report(results)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2))


def _report(results: dict[str, Any]) -> None:
    t, b, g, d = results["throughput"], results["baseline"], results["gang"], results["drain"]
    print(f"operator benchmark: {results['nodes']} nodes, emulator in a child process")
    print(f"{'figure':<44}{'value':>12}{'baseline':>12}{'ratio':>8}  target")
    print(
        f"{'sustained binds/s (' + str(t['pods']) + ' pods)':<44}"
        f"{t['pods_per_second']:>12.0f}{b['pods_per_second']:>12.0f}"
        f"{t['pods_per_second'] / b['pods_per_second']:>8.2f}  >= 200/s "
        f"{'met' if t['pods_per_second'] >= 200 else 'NOT MET'}"
    )
    print(f"{'  pods created in (s)':<44}{t['create_seconds']:>12.2f}")
    print(
        f"{'backlog drain binds/s (' + str(d['pods']) + ' pods)':<44}"
        f"{d['pods_per_second']:>12.0f}{b['pods_per_second']:>12.0f}"
        f"{d['pods_per_second'] / b['pods_per_second']:>8.2f}"
    )
    print(f"{'  operator CPU per bound pod (ms)':<44}{d['cpu_ms_per_pod']:>12.2f}")
    print(f"{'  operator start -> first bind (s)':<44}{d['start_to_first_bind_s']:>12.2f}")
    print(
        f"{'64-pod gang, all created -> all bound (s)':<44}{g['seconds']:>12.2f}"
        f"{'':>12}{'':>8}  < 2 s {'met' if g['seconds'] < 2 and g['all_bound'] else 'NOT MET'}"
    )
    print(f"{'  gang pods created in (s)':<44}{g['create_seconds']:>12.2f}")
    print(f"{'scheduling cycles':<44}{results['cycles']:>12}")


if __name__ == "__main__":
    main()

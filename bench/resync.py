"""One periodic resync of the operator's cache at cluster scale, and one take-over, in-process.

    python bench/resync.py                        # 5,000 nodes, 40,000 pods
    python bench/resync.py --nodes 500 --pods 4000 --repeat 3

`gpusched.scheduler.resync.Resync` lists every pod and every Node (from the API server's watch
cache) and reconciles its cache with them. This times one resync the way the operator does it,
minus the network: the two lists' JSON as the server sends it (pods with their managedFields
and status, DGX-like nodes with the topology annotation) is decoded, then reconciled with a
cache that already holds the same objects. Figures, in CPU seconds of this process (the
machine may be shared), median of ``--repeat``: decode, reconcile and total, for an unchanged
cluster and with ``--changed`` of the pods at a newer version than the cache (events the watch
never delivered). The period this allows is the total against a budget of a tenth of one
core. Nothing asserts; the table is printed.

A take-over (`Resync.take_over`) is timed the same way: a standby whose watches hold the whole
cluster (its heap not frozen: a replica freezes it after its first full list as leader) is
handed consistent lists of every pod, Node and group, and reconciles with them before its
first decision. Beside the CPU seconds, the most memory each held above the cache at once
(tracemalloc's peak, the lists' JSON text excluded).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import gc
import json
import os
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script: the repository root, for testing

from gpusched.k8s.client import PAGE_SIZE, KubeClusterApi, _answer  # noqa: E402
from gpusched.scheduler.resync import Resync  # noqa: E402
from gpusched.scheduler.state import ClusterState  # noqa: E402
from gpusched.scheduler.tasks import Background  # noqa: E402
from testing.clock import Clock  # noqa: E402
from testing.manifests import node, pod  # noqa: E402

Body = dict[str, Any]
BUDGET = 0.1
"""Of one core, what the periodic resync may take on average."""


def cluster(nodes: int, pods: int) -> tuple[list[Body], list[Body]]:
    """``nodes`` DGX-like nodes (racks of 12) and ``pods`` pods of 1 GPU bound over them,
    with what a real server adds (versions, managedFields, conditions)."""
    node_bodies = []
    for i in range(nodes):
        body = node(f"node-{i:05d}", f"zone-{i // 300}", f"rack-{i // 12}", capacity=True)
        body["metadata"]["resourceVersion"] = str(1000 + i)
        body["metadata"]["managedFields"] = [_managed("kubelet"), _managed("gpusched-agent")]
        body["status"]["conditions"] = [
            {"type": t, "status": "False", "reason": f"Kubelet{t}", "message": "ok"}
            for t in ("MemoryPressure", "DiskPressure", "PIDPressure")
        ] + [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ready"}]
        node_bodies.append(body)
    pod_bodies = []
    for i in range(pods):
        where = node_bodies[i % nodes]["metadata"]["name"]
        body = pod(f"train-{i:06d}", 1, node=where, at=(i // nodes % 8,), group=f"g{i // 64}")
        body["metadata"]["resourceVersion"] = str(100_000 + i)
        body["metadata"]["managedFields"] = [_managed("kubectl"), _managed("kubelet")]
        body["status"] = {
            "phase": "Running",
            "podIP": "10.0.0.1",
            "conditions": [{"type": t, "status": "True"} for t in ("Ready", "Initialized")],
            "containerStatuses": [{"name": "main", "ready": True, "restartCount": 0}],
        }
        pod_bodies.append(body)
    return node_bodies, pod_bodies


def _managed(manager: str) -> Body:
    return {
        "manager": manager,
        "operation": "Update",
        "apiVersion": "v1",
        "time": "2026-12-01T00:00:00Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}}}, "f:status": {"f:phase": {}}},
    }


class Served(KubeClusterApi):
    """The operator's API client, its requests answered from the JSON text of each page as
    the server sends it (`PAGE_SIZE` objects a page, chained by continue tokens); no groups.
    ``decoding``: CPU seconds spent decoding answers."""

    def __init__(self, nodes: list[Body], pods: list[Body], version: str) -> None:
        super().__init__(None)  # type: ignore[arg-type]
        self.answers = {"nodes": paged(nodes, version), "pods": paged(pods, version)}
        self.decoding = 0.0

    async def _request(
        self, method: str, path: str, body: object = None, *args: Any, **kwargs: Any
    ) -> dict[str, Any]:
        collection, _, query = path.partition("?")
        plural = collection.rsplit("/", 1)[-1]
        pages = self.answers.get(plural)
        if pages is None:
            return {"metadata": {}, "items": []}
        token = dict(part.split("=", 1) for part in query.split("&")).get("continue", "0")
        started = time.process_time()
        answer = _answer(200, pages[int(token)])
        self.decoding += time.process_time() - started
        return answer


class NoClaims:
    """The claim allocator of a cluster without DRA objects."""

    async def resync(self) -> None:
        return None


def paged(items: list[Body], version: str) -> list[bytes]:
    """``items`` as the pages of one list, each naming the next in its continue token."""
    starts = range(0, max(len(items), 1), PAGE_SIZE)
    return [
        json.dumps(
            {
                "metadata": {
                    "resourceVersion": version,
                    "continue": str(i + 1) if start + PAGE_SIZE < len(items) else "",
                },
                "items": items[start : start + PAGE_SIZE],
            }
        ).encode()
        for i, start in enumerate(starts)
    ]


async def one_resync(state: ClusterState, api: Served) -> tuple[float, float]:
    """(decode seconds, total seconds) of one resync."""
    clock = Clock()
    resync = Resync(
        state=state,
        api=api,
        claims=None,  # type: ignore[arg-type]
        clock=clock,
        background=Background(clock),
        period=0.0,
    )
    api.decoding = 0.0
    started = time.process_time()
    await resync._resync()
    return api.decoding, time.process_time() - started


def measure(nodes: list[Body], pods: list[Body], changed: float, repeat: int) -> dict[str, float]:
    state = ClusterState()
    for body in nodes:
        state.upsert_node(body)
    for body in pods:
        state.upsert_pod(body)
    gc.freeze()  # as the operator does after its first full list
    listed = copy.deepcopy(pods)
    step = int(1 / changed) if changed else 0
    for i in range(0, len(listed), step) if step else ():
        listed[i]["metadata"]["resourceVersion"] = str(900_000 + i)  # newer than the cache
        listed[i]["metadata"]["labels"]["touched"] = "yes"
    api = Served(nodes, listed, "999999")
    decodes, totals = [], []
    for _ in range(repeat):
        decode, total = asyncio.run(one_resync(state, api))
        decodes.append(decode)
        totals.append(total)
    decode, total = statistics.median(decodes), statistics.median(totals)
    peak = traced_peak(lambda: asyncio.run(one_resync(state, api)))
    return {"decode": decode, "reconcile": total - decode, "total": total, "peak_mb": peak}


def traced_peak(run: Callable[[], object]) -> float:
    """The most memory (MB) ``run`` held at once above what was held before it."""
    tracemalloc.start()
    before, _ = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    run()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return (peak - before) / 1e6


async def one_take_over(state: ClusterState, api: Served) -> None:
    clock = Clock()
    resync = Resync(
        state=state, api=api, claims=NoClaims(), clock=clock, background=Background(clock)
    )  # type: ignore[arg-type]
    await resync.take_over(api.pages("pods"))


def warm_standby(nodes: list[Body], pods: list[Body]) -> ClusterState:
    state = ClusterState()
    for body in nodes:
        state.upsert_node(body)
    for body in pods:
        state.upsert_pod(body)
    return state


def measure_take_over(nodes: list[Body], pods: list[Body], repeat: int) -> dict[str, float]:
    """CPU seconds of one take-over by a standby that watched everything (median of
    ``repeat``), and its peak MB above the cache."""
    api = Served(nodes, pods, "999999")
    state = warm_standby(nodes, pods)
    decodes, totals = [], []
    for _ in range(repeat):
        api.decoding = 0.0
        started = time.process_time()
        asyncio.run(one_take_over(state, api))
        totals.append(time.process_time() - started)
        decodes.append(api.decoding)
    peak = traced_peak(lambda: asyncio.run(one_take_over(state, api)))
    decode, total = statistics.median(decodes), statistics.median(totals)
    return {"decode": decode, "total": total, "peak_mb": peak}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=40000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--changed", type=float, default=0.01, help="share of pods changed")
    args = parser.parse_args(argv)
    nodes, pods = cluster(args.nodes, args.pods)
    print(f"resync: {args.nodes} nodes, {args.pods} pods; load average {os.getloadavg()[0]:.1f}")
    size = sum(map(len, paged(pods, "1"))) / max(len(pods), 1)
    print(f"a pod is {size:.0f} bytes of JSON; CPU seconds:")
    header = f"{'cluster':<24}{'decode s':>10}{'reconcile s':>13}{'total s':>10}{'period s':>10}"
    print(f"{header}{'peak MB':>10}")
    for label, changed in (("unchanged", 0.0), (f"{args.changed:.0%} pods changed", args.changed)):
        figures = measure(nodes, pods, changed, args.repeat)
        period = figures["total"] / BUDGET
        print(
            f"{label:<24}{figures['decode']:>10.3f}{figures['reconcile']:>13.3f}"
            f"{figures['total']:>10.3f}{period:>10.1f}{figures['peak_mb']:>10.0f}"
        )
    print(f"period: the shortest that keeps the resync under {BUDGET:.0%} of one core")
    gc.unfreeze()  # a standby's heap is not frozen
    take = measure_take_over(nodes, pods, args.repeat)
    print(
        f"{'take-over, warm standby':<24}{take['decode']:>10.3f}"
        f"{take['total'] - take['decode']:>13.3f}{take['total']:>10.3f}{'-':>10}"
        f"{take['peak_mb']:>10.0f}"
    )
    print("peak MB: the most memory held at once above the cache (tracemalloc)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

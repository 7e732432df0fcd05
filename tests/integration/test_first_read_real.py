"""No blind first decisions, end to end: `gpusched run` processes against the real control
plane and a real Prometheus (the Debian package) scraping a dcgm-exporter-format endpoint,
judged from the server's objects and the operator's log.

    node-a: 8 GPUs, all at 91 °C        (unusable)
    node-b: 8 GPUs, GPU 0 at 91 °C      (one 4-GPU pod fits, on GPUs 1-7)
    node-c: 8 GPUs, healthy             (two 4-GPU pods)

Three 4-GPU pods are pending before the operator starts (or before the standby takes over):
its first read of Prometheus comes before it has listed a node. Every pod must avoid the hot
GPUs, and the log must say how long the first decision waited for the read."""

from __future__ import annotations

import re
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from testing.apiserver import ApiClient, wait_for
from testing.cluster.cluster import RealCluster
from testing.harness import gpu_node, gpu_pod, placement_of, pods
from tests.integration.test_prometheus import (  # noqa: F401  (fixtures)
    DEADLINE_S,
    DcgmEndpoint,
    PrometheusServer,
    endpoint,
    prometheus,
)
from tests.integration.test_two_replicas import LEASE, Replica, _lease_holder

PODS = [f"default/backlog-{i}" for i in range(3)]
HOT = 91.0
JOINED = re.compile(r"telemetry read and joined with the node list in (\d+\.\d+) s")
WAIT_S = 5.0


@pytest.fixture
def hot(endpoint: DcgmEndpoint, prometheus: PrometheusServer) -> Iterator[None]:  # noqa: F811
    """node-a all hot, GPU 0 of node-b hot, once Prometheus holds it."""
    cells = [("node-a", g) for g in range(8)] + [("node-b", 0)]
    for name, gpu in cells:
        endpoint.set(name, gpu, DCGM_FI_DEV_GPU_TEMP=HOT)

    def scraped() -> bool:
        query = "count(DCGM_FI_DEV_GPU_TEMP > 90)"
        answer = httpx.get(f"{prometheus.url}/api/v1/query", params={"query": query}).json()
        result = answer["data"]["result"]
        return bool(result) and float(result[0]["value"][1]) == len(cells)

    wait_for(scraped, timeout=DEADLINE_S, message="Prometheus scraped the hot GPUs")
    yield
    for name, gpu in cells:
        endpoint.set(name, gpu, DCGM_FI_DEV_GPU_TEMP=41.0)


@pytest.fixture
def replicas(
    apiserver: RealCluster,
    kubeconfig: Path,
    tmp_path: Path,
    prometheus: PrometheusServer,  # noqa: F811
) -> Iterator[Callable[[str], Replica]]:
    """`gpusched run` replicas reading that Prometheus. A refresh every 300 s: the only read
    before their first decision is the one made as they start, before any node is listed."""
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "telemetry": {
                    "prometheus": {"url": prometheus.url, "timeoutSeconds": 2},
                    "cacheTtlSeconds": 300,
                    "firstReadWaitSeconds": WAIT_S,
                },
                "operator": {"leaderElection": {"enabled": True, **LEASE}},
            }
        )
    )
    command = [sys.executable, "-m", "gpusched.cli", "run", "--kubeconfig", str(kubeconfig)]
    command += ["--config", str(config), "--metrics-address", "127.0.0.1:0"]
    started: list[Replica] = []

    def start(name: str) -> Replica:
        replica = Replica(name, command, tmp_path / f"{name}.log")
        started.append(replica)
        return replica

    try:
        yield start
    finally:
        for replica in started:
            replica.stop()


def _nodes_and_backlog(api: ApiClient) -> None:
    for name in ("node-a", "node-b", "node-c"):
        api.create(gpu_node(name, "zone-a", "rack-1"))
    for key in PODS:
        api.create(gpu_pod(key.split("/")[1], 4))


def _no_pod_on_a_hot_gpu(api: ApiClient, replica: Replica) -> None:
    wait_for(
        lambda: all(placement_of(pods(api).get(k, {})) for k in PODS),
        timeout=90,
        message=lambda: f"the backlog bound:\n{replica.log.read_text()[-3000:]}",
    )
    where = {k: placement_of(pods(api)[k]) for k in PODS}
    assert all(p is not None and p[0] != "node-a" for p in where.values()), where
    on_b = [p for p in where.values() if p is not None and p[0] == "node-b"]
    assert all(0 not in gpus for _, gpus in on_b), where
    text = replica.log.read_text(errors="replace")
    waited = JOINED.search(text)
    assert waited is not None, text[-3000:]
    assert float(waited.group(1)) <= WAIT_S, waited.group(0)
    assert "HTTP Request:" not in text, "httpx's request lines are DEBUG"


@pytest.mark.usefixtures("hot")
def test_pods_pending_before_the_start_avoid_hot_gpus(
    api: ApiClient, replicas: Callable[[str], Replica]
) -> None:
    _nodes_and_backlog(api)
    first = replicas("replica-a")
    _no_pod_on_a_hot_gpu(api, first)


@pytest.mark.usefixtures("hot")
def test_a_standby_taking_over_a_backlog_avoids_hot_gpus(
    api: ApiClient, replicas: Callable[[str], Replica]
) -> None:
    for name in ("node-a", "node-b", "node-c"):
        api.create(gpu_node(name, "zone-a", "rack-1"))
    first = replicas("replica-a")
    wait_for(lambda: _lease_holder(api) == "replica-a", timeout=60, message="replica-a leads")
    wait_for(lambda: first.said("leading: pods and nodes listed"), timeout=60)
    first.process.send_signal(signal.SIGSTOP)  # holds the Lease, decides nothing
    for key in PODS:
        api.create(gpu_pod(key.split("/")[1], 4))
    second = replicas("replica-b")
    wait_for(lambda: _lease_holder(api) == "replica-b", timeout=60, message="replica-b took over")
    _no_pod_on_a_hot_gpu(api, second)

"""The operator under a misbehaving API server, and what it tells Prometheus."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from testing.apiserver import ApiClient, ApiServer, wait_for
from testing.harness import (
    assert_no_gpu_shared,
    condition,
    gang,
    gpu_node,
    gpu_pod,
    group_status,
    placement_of,
    pods,
    running_operator,
)


def _gang_bound(api: ApiClient, name: str, size: int) -> bool:
    everything = pods(api)
    return all(placement_of(everything.get(f"default/{name}-{i}", {})) for i in range(size))


def test_dropped_watches_expired_versions_and_server_errors_slow_it_down_but_lose_nothing(
    apiserver: ApiServer, api: ApiClient, kubeconfig: Path
) -> None:
    for name in ("n1", "n2"):
        api.create(gpu_node(name, "zone-a", "rack-1"))
    with running_operator(kubeconfig) as runtime:
        api.create(gang("first", 2))
        for i in range(2):
            api.create(gpu_pod(f"first-{i}", 4, group="first"))
        wait_for(lambda: _gang_bound(api, "first", 2), message="first gang bound")
        # Every watch is cut, the next ones must start over (410), and the API fails a while.
        faults = [
            apiserver.faults.fail(500, method="POST", path=r"/binding$", times=2),
            apiserver.faults.fail(500, method="PATCH", path=r"/status$", times=3),
            apiserver.faults.fail(500, method="POST", path=r"/events$", times=3),
        ]
        apiserver.expire_watches()
        apiserver.drop_watches(abort=True)
        api.create(gang("second", 2))
        for i in range(2):
            api.create(gpu_pod(f"second-{i}", 4, group="second"))
        wait_for(lambda: _gang_bound(api, "second", 2), timeout=30, message="second gang bound")
        status = wait_for(
            lambda: (s := group_status(api, "second")).get("scheduled") == 2 and s, timeout=30
        )
        assert condition(status)["reason"] == "Scheduled"
        assert_no_gpu_shared(api)
        wait_for(lambda: runtime.scheduler.idle, message="no reservation left behind")
        assert runtime.task.done() is False  # the scheduling loop is still running
        assert [f.hits for f in faults] == [2, 3, 3]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _samples(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_metrics_count_attempts_binds_and_gang_latency(
    apiserver: ApiServer, api: ApiClient, kubeconfig: Path
) -> None:
    api.create(gpu_node("n1", "zone-a", "rack-1"))
    port = _free_port()
    with running_operator(kubeconfig, metrics_port=port):
        before = wait_for(lambda: _samples(port), message="/metrics answering")
        api.create(gang("g", 2))
        for i in range(2):
            api.create(gpu_pod(f"g-{i}", 2, group="g"))
        api.create(gpu_pod("too-big", 16))
        wait_for(lambda: _gang_bound(api, "g", 2))

        def grew(name: str, labels: tuple[tuple[str, str], ...] = ()) -> float:
            after = _samples(port).get((name, labels), 0.0)
            return after - before.get((name, labels), 0.0)

        wait_for(lambda: grew("gpusched_binds_total", (("result", "ok"),)) == 2)
        assert grew("gpusched_schedule_attempts_total", (("result", "scheduled"),)) >= 1
        wait_for(lambda: grew("gpusched_schedule_attempts_total", (("result", "invalid"),)) >= 1)
        assert grew("gpusched_gang_bind_seconds_count") >= 1
        assert grew("gpusched_bind_duration_seconds_count") == 2
        assert _samples(port)[("gpusched_reserved_gpus", ())] == 0
        # No Prometheus configured: nothing is up or down.
        assert _samples(port)[("gpusched_telemetry_configured", ())] == 0
        assert ("gpusched_telemetry_up", ()) not in _samples(port)

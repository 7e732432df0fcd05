"""Telemetry end to end with the real Prometheus server (Debian package ``prometheus``).

The test serves a dcgm-exporter-format ``/metrics`` endpoint on 127.0.0.1 (prometheus_client,
three 8-GPU nodes), starts Prometheus on 127.0.0.1 with a temporary config and data dir scraping
it every second, and runs `TelemetryCache` against it; the engine then places pods with what the
cache holds. Conditions are awaited with deadlines; time past the data's maximum age is injected
through the cache's clock, never slept through.

    cluster: node-a, node-b, node-c — DGX A100 (8 × NV12), each 80 GiB per GPU
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry, Gauge, start_http_server

from gpusched.api.config import SchedulerConfig, load_config
from gpusched.engine.build import build_snapshot
from gpusched.engine.policy import Policy
from gpusched.engine.schedule import schedule
from gpusched.telemetry.cache import TelemetryCache
from gpusched.telemetry.series import METRICS
from testing.engine import members, node, pending, placements

NODES = ("node-a", "node-b", "node-c")
GPUS = 8
MODEL = "NVIDIA A100-SXM4-80GB"
HEALTHY = {
    "DCGM_FI_DEV_GPU_TEMP": 41.0,
    "DCGM_FI_DEV_FB_FREE": 81000.0,
    "DCGM_FI_DEV_FB_USED": 0.0,
    "DCGM_FI_DEV_GPU_UTIL": 0.0,
    "DCGM_FI_DEV_XID_ERRORS": 0.0,
}
DEADLINE_S = 40.0
"""Prometheus applies a new scrape target after up to 5 s, then scrapes every second."""

pytestmark = pytest.mark.skipif(
    shutil.which("prometheus") is None,
    reason="the `prometheus` server binary is not installed (Debian package `prometheus`)",
)


@dataclass
class DcgmEndpoint:
    """A dcgm-exporter ``/metrics`` for several nodes, served by prometheus_client."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    gauges: dict[str, Gauge] = field(default_factory=dict)
    port: int = 0

    def __post_init__(self) -> None:
        labels = ["gpu", "UUID", "device", "modelName", "Hostname", "namespace", "pod"]
        for metric in METRICS:
            self.gauges[metric] = Gauge(metric, metric, labels, registry=self.registry)
        for name in NODES:
            for gpu in range(GPUS):
                self.set(name, gpu, **HEALTHY)

    def set(self, name: str, gpu: int, **values: float) -> None:
        labels = (str(gpu), f"GPU-{name}-{gpu}", f"nvidia{gpu}", MODEL, name, "", "")
        for metric, value in values.items():
            self.gauges[metric].labels(*labels).set(value)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class PrometheusServer:
    process: subprocess.Popen[bytes]
    url: str
    log: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _wait_ready(server: PrometheusServer) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            pytest.fail(f"prometheus exited: {server.log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{server.url}/-/ready", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)  # polling a process we started, with a deadline
    pytest.fail(f"prometheus not ready after {DEADLINE_S} s: {server.log.read_text()[-2000:]}")


@pytest.fixture(scope="module")
def endpoint() -> Iterator[DcgmEndpoint]:
    dcgm = DcgmEndpoint()
    httpd, thread = start_http_server(0, addr="127.0.0.1", registry=dcgm.registry)
    dcgm.port = httpd.server_port
    yield dcgm
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=5)


@pytest.fixture(scope="module")
def prometheus(
    endpoint: DcgmEndpoint, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PrometheusServer]:
    home = tmp_path_factory.mktemp("prometheus")
    config = home / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: dcgm-exporter\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{endpoint.port}']}}]\n"
    )
    port = _free_port()
    log = home / "prometheus.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={config}",
                f"--storage.tsdb.path={home / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    server = PrometheusServer(process, f"http://127.0.0.1:{port}", log)
    try:
        _wait_ready(server)
        yield server
    finally:
        server.stop()


def _config(url: str, **telemetry: object) -> SchedulerConfig:
    raw = {
        "telemetry": {
            "prometheus": {"url": url, "timeoutSeconds": 2},
            "cacheTtlSeconds": 0.5,
            **telemetry,
        }
    }
    return load_config(raw)


class Clock:
    """Wall clock plus an injected offset: lets a test move past ``maxAgeSeconds`` at once."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


async def _until(what: str, condition: Callable[[], bool | Awaitable[bool]]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        result = condition()
        if result if isinstance(result, bool) else await result:
            return
        await asyncio.sleep(0.1)  # polling with a deadline
    pytest.fail(f"after {DEADLINE_S} s still waiting for: {what}")


def _place_three_8gpu_pods(cache: TelemetryCache, config: SchedulerConfig) -> tuple[dict, dict]:
    nodes = [node(name, "a100x8") for name in NODES]
    snapshot = build_snapshot(nodes, (), cache.samples(), config)
    result = schedule(snapshot, members("train", 3, gpus=8), (), Policy.of(config))
    return placements(result), pending(result)


def _all_healthy(cache: TelemetryCache) -> bool:
    samples = cache.samples() or {}
    temperatures = [samples[n, g].temperature_c for n, g in samples]
    return len(temperatures) == len(NODES) * GPUS and set(temperatures) == {41.0}


def _value(registry: CollectorRegistry, name: str) -> float | None:
    return registry.get_sample_value(name)


@pytest.mark.asyncio
async def test_a_gpu_made_hot_is_excluded_once_prometheus_has_it(
    endpoint: DcgmEndpoint, prometheus: PrometheusServer
) -> None:
    config = _config(prometheus.url)
    registry = CollectorRegistry()
    cache = TelemetryCache(config.telemetry, known_nodes=lambda: NODES, registry=registry)
    await cache.start()
    try:
        await _until(
            "all 24 GPUs in the cache", lambda: len(cache.samples() or {}) == len(NODES) * GPUS
        )
        placed, left = _place_three_8gpu_pods(cache, config)
        assert sorted(n for n, _ in placed.values()) == list(NODES), (placed, left)
        assert _value(registry, "gpusched_telemetry_up") == 1.0
        age = _value(registry, "gpusched_telemetry_age_seconds")
        assert (age or 99.0) < 10, f"fresh data should be seconds old: {age}"

        endpoint.set("node-a", 3, DCGM_FI_DEV_GPU_TEMP=93.0)
        await _until(
            "node-a GPU 3 at 93 °C in the cache",
            lambda: (cache.samples() or {})[("node-a", 3)].temperature_c == 93.0,
        )
        placed, left = _place_three_8gpu_pods(cache, config)
        assert sorted(n for n, _ in placed.values()) == ["node-b", "node-c"], placed
        assert list(left.values()) == ["Unschedulable"], left
        snapshot = build_snapshot([node("node-a")], (), cache.samples(), config)
        assert snapshot.gpu_notes.get(3) == "93 °C > 80 °C", snapshot.gpu_notes
        assert not snapshot.gpu_usable[3]
        assert snapshot.gpu_usable[[0, 1, 2, 4, 5, 6, 7]].all()
        assert "prometheus http://127.0.0.1" in cache.describe().summary()
    finally:
        endpoint.set("node-a", 3, DCGM_FI_DEV_GPU_TEMP=41.0)
        await cache.stop()


@pytest.mark.asyncio
async def test_prometheus_stopped_keeps_last_data_until_it_ages_out(
    endpoint: DcgmEndpoint, prometheus: PrometheusServer
) -> None:
    """Stops Prometheus: keep this test last in the file."""
    usable = _config(prometheus.url, maxAgeSeconds=30, stale="usable")
    unusable = _config(prometheus.url, maxAgeSeconds=30, stale="unusable")
    registry = CollectorRegistry()
    clock = Clock()
    cache = TelemetryCache(usable.telemetry, registry=registry, clock=clock)
    await cache.start()
    try:
        await _until("24 healthy GPUs", lambda: _all_healthy(cache))
        prometheus.stop()
        await _until("a failed refresh", lambda: _value(registry, "gpusched_telemetry_up") == 0)
        status = cache.describe()
        assert (status.up, bool(status.last_error)) == (False, True), status
        assert status.gpus == len(NODES) * GPUS, "the last good data is kept"
        for config in (usable, unusable):
            placed, left = _place_three_8gpu_pods(cache, config)
            assert len(placed) == 3, f"data younger than maxAgeSeconds is used: {left}"

        clock.offset = 31.0
        age = _value(registry, "gpusched_telemetry_age_seconds")
        assert (age or 0.0) > 30, f"age gauge {age}"
        assert "older than 30 s is unknown" in cache.describe().summary()
        placed, left = _place_three_8gpu_pods(cache, unusable)
        assert (placed, sorted(set(left.values()))) == ({}, ["Unschedulable"]), (placed, left)
        placed, left = _place_three_8gpu_pods(cache, usable)
        assert len(placed) == 3, f"stale usable: placed anyway, {left}"
        snapshot = build_snapshot([node("node-a")], (), cache.samples(), usable)
        notes = set(snapshot.gpu_notes.values())
        assert len(snapshot.gpu_notes) == GPUS, snapshot.gpu_notes
        assert all(n.startswith("telemetry stale") for n in notes), notes
    finally:
        await cache.stop()

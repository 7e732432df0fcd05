"""The placement-quality gauges served over HTTP and scraped, for the hand-counted cluster of
``tests/unit/engine/test_quality.py``."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.parser import text_string_to_metric_families

from gpusched.engine.result import Binding
from gpusched.scheduler.quality_metrics import QualityMetrics
from testing.engine import RACK, ZONE
from tests.unit.engine.test_quality import MIX, known_cluster


@pytest.fixture
def endpoint() -> Iterator[tuple[str, QualityMetrics]]:
    registry = CollectorRegistry()
    metrics = QualityMetrics(registry)
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        yield f"http://127.0.0.1:{server.server_port}/metrics", metrics
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(url, timeout=5).text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_the_scrape_carries_the_hand_counted_values(
    endpoint: tuple[str, QualityMetrics],
) -> None:
    url, metrics = endpoint
    slow = Binding(pod="ml/x", node="node-c", gpus=(1, 5), link_tier="SYS", best_tier="NVLINK")
    metrics.update(known_cluster(), workload=MIX, bindings=[slow])
    got = scrape(url)

    def value(name: str, **labels: str) -> float | None:
        return got.get((name, tuple(sorted(labels.items()))))

    want = {
        ("gpusched_domain_gpus", "cluster", "cluster"): 28,
        ("gpusched_domain_free_gpus", "cluster", "cluster"): 24,
        ("gpusched_domain_free_gpus", RACK, "z1/r1"): 14,
        ("gpusched_domain_free_gpus", RACK, "z1/r2"): 7,
        ("gpusched_domain_excluded_gpus", RACK, "z1/r2"): 1,
        ("gpusched_stranded_gpus", ZONE, "z2"): 1.75,
        ("gpusched_stranded_gpus", ZONE, "z1"): 0.0,
    }
    assert {k: value(k[0], level=k[1], domain=k[2]) for k in want} == want
    gangs = {
        size: value("gpusched_domain_largest_gang", level=ZONE, domain="z1", gpus_per_pod=size)
        for size in ("1", "2", "4", "8")
    }
    assert gangs == {"1": 13, "2": 6, "4": 2, "8": 0}
    assert value("gpusched_excluded_gpus", reason="temperature") == 1
    assert value("gpusched_binding_link_tier_total", tier="SYS", best="NVLINK") == 1
    duration = value("gpusched_quality_duration_seconds")
    assert duration is not None
    assert 0 < duration < 1

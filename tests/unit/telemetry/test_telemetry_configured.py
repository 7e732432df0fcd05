"""Without a Prometheus URL there is no telemetry source to be up or down: the operator says
``gpusched_telemetry_configured 0`` and exports no ``gpusched_telemetry_up`` (a 0 there would
paint a dashboard red for a choice, not a fault). With one, ``configured`` is 1 and ``up`` is
exported, 0 until the first refresh succeeds. No network: the cache is never started."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry

from gpusched.api.config import TelemetryConfig
from gpusched.telemetry.cache import TelemetryCache


def exported(registry: CollectorRegistry) -> dict[str, float]:
    return {
        sample.name: sample.value
        for family in registry.collect()
        for sample in family.samples
        if sample.name.startswith("gpusched_telemetry_") and "skipped" not in sample.name
    }


def test_no_prometheus_configured_reads_configured_0_and_no_up() -> None:
    registry = CollectorRegistry()
    TelemetryCache(TelemetryConfig.model_validate({}), registry=registry)
    assert exported(registry) == {"gpusched_telemetry_configured": 0.0}


def test_a_prometheus_configured_reads_configured_1_and_up_0_before_its_first_answer() -> None:
    registry = CollectorRegistry()
    config = TelemetryConfig.model_validate({"prometheus": {"url": "http://127.0.0.1:9"}})
    TelemetryCache(config, registry=registry, clock=lambda: 1000.0)
    assert exported(registry) == {
        "gpusched_telemetry_configured": 1.0,
        "gpusched_telemetry_up": 0.0,
        "gpusched_telemetry_age_seconds": float("inf"),
        "gpusched_telemetry_gpus": 0.0,
    }


def test_stopping_unregisters_every_metric_so_a_later_cache_registers_its_own() -> None:
    registry = CollectorRegistry()
    for url in (None, "http://127.0.0.1:9", None):
        body = {"prometheus": {"url": url}} if url else {}
        cache = TelemetryCache(TelemetryConfig.model_validate(body), registry=registry)
        asyncio.run(cache.stop())
    assert exported(registry) == {}

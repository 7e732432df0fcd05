"""The Grafana dashboard shipped in the chart: valid JSON, well-formed panels, and every
metric it queries is one the code exports (a renamed metric fails here, not on a screen)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY, CollectorRegistry

DASHBOARD = (
    Path(__file__).resolve().parents[2] / "charts" / "gpusched" / "dashboards" / "gpusched.json"
)
METRIC = re.compile(r"\bgpusched_[a-z0-9_]+")
VARIABLE = re.compile(r"\$\{?([a-zA-Z_]+)")
GRAFANA_VARIABLES = {"__rate_interval", "__interval", "__range"}


def exported_metrics() -> set[str]:
    """Every series name the operator's registries can expose, suffixes included."""
    import gpusched.scheduler.metrics  # noqa: F401  (registers in the default registry)
    from gpusched.api.config import TelemetryConfig
    from gpusched.scheduler.quality_metrics import QualityMetrics
    from gpusched.telemetry.cache import TelemetryCache

    quality, telemetry = CollectorRegistry(), CollectorRegistry()
    QualityMetrics(quality)
    # With a Prometheus configured: without one, the gauges of the source are not exported.
    configured = TelemetryConfig.model_validate({"prometheus": {"url": "http://127.0.0.1:9"}})
    TelemetryCache(configured, registry=telemetry)
    names: set[str] = set()
    for registry in (REGISTRY, quality, telemetry):
        for family in registry.collect():
            names.add(family.name)
            if family.type == "counter":
                names.add(f"{family.name}_total")
            if family.type == "histogram":
                names |= {f"{family.name}_{s}" for s in ("bucket", "sum", "count")}
    return {n for n in names if n.startswith("gpusched_")}


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return document


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in dashboard["panels"] if p["type"] != "row"]


def expressions(dashboard: dict[str, Any]) -> list[str]:
    found = [t["expr"] for p in panels(dashboard) for t in p["targets"]]
    found += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    return found


def test_every_queried_metric_is_exported_by_the_code(dashboard: dict[str, Any]) -> None:
    queried = {m for e in expressions(dashboard) for m in METRIC.findall(e)}
    unknown = sorted(queried - exported_metrics())
    assert not unknown, f"the dashboard queries metrics the code does not export: {unknown}"


def test_the_issue_s_topics_are_all_on_the_dashboard(dashboard: dict[str, Any]) -> None:
    queried = {m for e in expressions(dashboard) for m in METRIC.findall(e)}
    wanted = {
        "gpusched_schedule_attempts_total",
        "gpusched_decision_duration_seconds_bucket",
        "gpusched_bind_duration_seconds_bucket",
        "gpusched_gang_bind_seconds_bucket",
        "gpusched_pending_groups",
        "gpusched_pending_oldest_seconds",
        "gpusched_reserved_gpus",
        "gpusched_domain_free_gpus",
        "gpusched_domain_largest_gang",
        "gpusched_stranded_gpus",
        "gpusched_telemetry_up",
        "gpusched_telemetry_age_seconds",
        "gpusched_excluded_gpus",
    }
    assert sorted(wanted - queried) == []


def test_panels_are_well_formed(dashboard: dict[str, Any]) -> None:
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    defined = {v["name"] for v in dashboard["templating"]["list"]} | GRAFANA_VARIABLES
    for panel in panels(dashboard):
        assert set(panel["gridPos"]) == {"h", "w", "x", "y"}, panel["title"]
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, panel["title"]
        assert panel["targets"], panel["title"]
        assert panel["description"], panel["title"]
        used = set(VARIABLE.findall(json.dumps(panel)))
        assert used <= defined, (panel["title"], used - defined)
    assert dashboard["uid"] == "gpusched"

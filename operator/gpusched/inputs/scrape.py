"""A saved dcgm-exporter scrape, read through the operator's own mapping of series to GPUs."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gpusched.api.config import SchedulerConfig
from gpusched.inputs import InputError
from gpusched.inputs.objects import ClusterObjects

if TYPE_CHECKING:
    from gpusched.engine.health import GpuSample
    from gpusched.telemetry.status import TelemetryStatus


@dataclass(frozen=True)
class Metrics:
    samples: Mapping[tuple[str, int], GpuSample]
    status: TelemetryStatus


def read_metrics(
    path: Path | None, objects: ClusterObjects, config: SchedulerConfig
) -> Metrics | None:
    """Telemetry from a saved scrape, through the operator's mapping; series of nodes not in
    the snapshot are counted as unknown."""
    if path is None:
        return None
    from gpusched.telemetry.exposition import parse_exposition
    from gpusched.telemetry.status import describe_data

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"{path}: cannot read: {error}") from None
    check_exposition(text, path)
    known = {n.name for n in objects.nodes}
    data = parse_exposition(text, config.telemetry, known)
    now = data.newest_time() or 0.0
    status = describe_data(data, f"file {path}", now, config.telemetry.max_age_seconds)
    return Metrics(data.view(now), status)


_SAMPLE_LINE = re.compile(
    r"[a-zA-Z_:][a-zA-Z0-9_:]*(?:\{.*\})?[ \t]+"
    r"(?:[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)|[-+]?Inf|NaN)"
    r"(?:[ \t]+-?\d+)?[ \t]*"
)
"""One sample of the Prometheus text format: ``name{labels} value [timestamp]``."""


def check_exposition(text: str, path: Path) -> None:
    """`InputError` unless ``text`` is a scrape in the Prometheus text format with at least one
    dcgm-exporter series. A file of another kind (YAML, a Prometheus API answer in JSON)
    would otherwise read as "no GPU data", hiding the mistake. A line cut short is allowed,
    as a scrape saved while the exporter wrote may end with one."""
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    samples = [line for _, line in lines if _SAMPLE_LINE.fullmatch(line)]
    if not samples:
        first = next((f"line {n}: {line[:60]!r}" for n, line in lines), "the file is empty")
        raise InputError(
            f"{path}: not a /metrics scrape in the Prometheus text format "
            f"(no line reads NAME{{LABELS}} VALUE; {first})"
        )
    if not any(line.startswith("DCGM_FI_DEV_") for line in samples):
        raise InputError(
            f"{path}: no dcgm-exporter series (DCGM_FI_DEV_*) among its {len(samples)} samples: "
            "save the dcgm-exporter's /metrics (port 9400), not another exporter's"
        )

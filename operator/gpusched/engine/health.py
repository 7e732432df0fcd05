"""Which GPUs telemetry lets the engine use: each GPU's dcgm-exporter sample judged against the
``telemetry`` limits, and the verdicts written into a snapshot's static facts."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from gpusched.api.config import SchedulerConfig, StaleTelemetry
from gpusched.engine import wording
from gpusched.engine.nodes import NodeInfo, Statics


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSample:
    """Telemetry of one GPU (dcgm-exporter fields); ``None`` where the metric is missing."""

    temperature_c: float | None = None
    fb_free_mib: float | None = None
    fb_used_mib: float | None = None
    utilization: float | None = None
    xid_errors: float | None = None
    age_seconds: float = 0.0
    """How old the oldest of these values is, in seconds, when the snapshot was taken."""


def apply_telemetry(
    config: SchedulerConfig,
    statics: Statics,
    n: int,
    info: NodeInfo,
    telemetry: Mapping[tuple[str, int], GpuSample] | None,
) -> None:
    base = int(statics.gpu_offset[n])
    excluded = False
    for gpu in range(info.gpu_count):
        gid = base + gpu
        sample = telemetry.get((info.name, gpu)) if telemetry is not None else None
        total = info.gpu_memory_mib[gpu] if gpu < len(info.gpu_memory_mib) else None
        verdict = judge_gpu(config, sample, total) if telemetry is not None else None
        fresh = sample is not None and sample.age_seconds <= config.telemetry.max_age_seconds
        if fresh and sample is not None and sample.fb_free_mib is not None:
            statics.gpu_mem_free[gid] = sample.fb_free_mib
        statics.gpu_mem_total[gid] = _total_memory(sample, total)
        if verdict is not None:
            usable, reason, note = verdict
            statics.gpu_notes[gid] = note
            statics.gpu_reasons[gid] = reason
            if not usable:
                statics.gpu_usable[gid] = False
                excluded = True
    if excluded and config.telemetry.exclude_whole_node:
        statics.gpu_usable[base : base + info.gpu_count] = False
        statics.node_notes.setdefault(n, []).append(wording.NODE_EXCLUDED)
    if info.topology_error:
        statics.node_notes.setdefault(n, []).append(info.topology_error)


def _total_memory(sample: GpuSample | None, total: float | None) -> float:
    if total is not None:
        return total
    if sample and sample.fb_free_mib is not None and sample.fb_used_mib is not None:
        return sample.fb_free_mib + sample.fb_used_mib
    return math.nan


def gpu_verdict(
    config: SchedulerConfig, sample: GpuSample | None, total_mib: float | None
) -> tuple[bool, str] | None:
    """Whether a GPU is usable by its telemetry: ``None`` when healthy, else (usable, why).

    Unknown or stale data is never called healthy: it is reported, and usable or not as
    ``telemetry.stale`` says."""
    judged = judge_gpu(config, sample, total_mib)
    return (judged[0], judged[2]) if judged is not None else None


def judge_gpu(
    config: SchedulerConfig, sample: GpuSample | None, total_mib: float | None
) -> tuple[bool, str, str] | None:
    """`gpu_verdict` with the class of its reason (one of `EXCLUSION_REASONS`, as data:
    the quality gauges count by it and never read the sentence back): (usable, class, why)."""
    limits = config.telemetry
    stale_usable = limits.stale is StaleTelemetry.USABLE
    if sample is None:
        return stale_usable, "missing", wording.NO_TELEMETRY
    if sample.age_seconds > limits.max_age_seconds:
        age, most = sample.age_seconds, limits.max_age_seconds
        return stale_usable, "stale", wording.telemetry_stale(age, most)
    if sample.temperature_c is not None and sample.temperature_c > limits.temperature_limit_c:
        hot = wording.too_hot(sample.temperature_c, limits.temperature_limit_c)
        return False, "temperature", hot
    if limits.exclude_xid_errors and sample.xid_errors:
        return False, "xid", wording.xid_error(sample.xid_errors)
    ratio = _free_ratio(sample, total_mib)
    if ratio is not None and ratio < limits.min_free_memory_ratio:
        low = wording.low_memory(ratio, limits.min_free_memory_ratio, sample.fb_free_mib)
        return False, "memory", low
    return None


EXCLUSION_REASONS = ("temperature", "xid", "memory", "stale", "missing", "node", "other")
"""The classes of a GPU's telemetry verdict; ``node``: excluded only because another GPU of
its node failed (``excludeWholeNode``)."""


def _free_ratio(sample: GpuSample, total_mib: float | None) -> float | None:
    if sample.fb_free_mib is None:
        return None
    if total_mib is None:
        if sample.fb_used_mib is None:
            return None
        total_mib = sample.fb_free_mib + sample.fb_used_mib
    return sample.fb_free_mib / total_mib if total_mib > 0 else None

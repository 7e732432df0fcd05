"""From dcgm-exporter series to per-GPU samples: the one mapping both telemetry sources use.

A series is a metric name, its labels, a value and (where the source gives one) a sample time.
Prometheus answers (`gpusched.telemetry.prometheus`) and saved ``/metrics`` scrapes
(`gpusched.telemetry.exposition`) both feed a `SeriesIndex`, which

1. names the series' GPU: the node from the first of ``telemetry.nodeLabels`` that is present
   (through ``telemetry.nodeMapping``), the index from the ``gpu`` label;
2. checks the value: a number, finite, not negative;
3. merges duplicates (two series for one GPU and metric: GPU sharing, MIG instances, two
   exporters) by keeping the worse value, as the PromQL aggregation does server-side;
4. on `SeriesIndex.build`, drops each GPU that lacks a metric other GPUs of its node report,
   and each GPU whose node has no sample time for one of its metrics.

Every series skipped is counted by `SkipReason`, with the first example kept for the log.
Nothing here makes a GPU look healthier than its data: what cannot be read is left out, and a
GPU left out is unknown to the engine (never healthy).
"""

from __future__ import annotations

import functools
import math
import operator
import re
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from gpusched.api.config import TelemetryConfig
from gpusched.api.topology import MAX_GPUS_PER_NODE
from gpusched.engine.health import GpuSample

__all__ = [
    "GPU_LABEL",
    "METRICS",
    "SAMPLE_TIME_LABEL",
    "WORSE",
    "SeriesIndex",
    "SkipReason",
    "TelemetryData",
    "TelemetryView",
]

METRICS = (
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_XID_ERRORS",
)
"""dcgm-exporter metric names, in the order of `GpuSample`'s fields (a metric's slot)."""
WORSE = ("max", "min", "max", "max", "max")
"""Per slot, which of two values is worse: hotter, less free memory, more used, busier, a
non-zero XID. Also the PromQL aggregation operator of each metric's query."""
GPU_LABEL = "gpu"
SAMPLE_TIME_LABEL = "gpusched_sample_time"
"""Marks a series whose value is the sample time of a node's values, not a metric value (see
`gpusched.telemetry.prometheus.metric_query`)."""

_SLOTS = len(METRICS)
_TIME_GPU = -1
"""GPU index of a key that names a node's sample time rather than a GPU."""
_LABEL_PAIR = re.compile(r'"([^"\\]*)":"([^"\\]*)"')


class SkipReason(StrEnum):
    """Why a series (or a GPU) was left out; the label value of the skipped-series counter."""

    MALFORMED = "malformed"
    """A line or JSON element that cannot be read at all."""
    MISSING_NODE_LABEL = "missing_node_label"
    MISSING_GPU_LABEL = "missing_gpu_label"
    BAD_GPU_LABEL = "bad_gpu_label"
    """The ``gpu`` label is not an index 0..63."""
    BAD_VALUE = "bad_value"
    """Not a number, or negative (none of these metrics can be)."""
    NOT_FINITE = "not_finite"
    """NaN or ±Inf."""
    DUPLICATE = "duplicate"
    """A second series for the same GPU and metric; merged, the worse value kept."""
    UNKNOWN_NODE = "unknown_node"
    """The node is not one of the cluster's nodes."""
    NO_SAMPLE_TIME = "no_sample_time"
    """A GPU (not a series) whose node's sample time the answer did not give."""
    INCOMPLETE = "incomplete"
    """A GPU (not a series) without a metric that other GPUs of its node report."""


def _worse(slot: int, old: float, new: float) -> float:
    return min(old, new) if WORSE[slot] == "min" else max(old, new)


@dataclass(frozen=True, slots=True)
class TelemetryData:
    """One refresh's worth of telemetry: per GPU its values, per node its oldest sample time.

    Built once per refresh and then only read, so it can be shared by every scheduling cycle
    until the next refresh replaces it.
    """

    values: Mapping[tuple[str, int], list[float | None]]
    """(node, GPU index) → one value per `METRICS` slot, ``None`` for a metric the node's
    exporter does not report."""
    node_time: Mapping[str, float]
    """Node → the oldest sample time (Unix seconds) among its values."""
    skipped: Mapping[SkipReason, int] = field(default_factory=dict)
    examples: Mapping[SkipReason, str] = field(default_factory=dict)
    """The first series skipped for each reason, for the log."""
    metrics: tuple[str, ...] = ()
    """The metrics some GPU reported."""

    def newest_time(self) -> float | None:
        return max(self.node_time.values(), default=None)

    def oldest_time(self) -> float | None:
        return min(self.node_time.values(), default=None)

    def view(self, now: float) -> TelemetryView:
        return TelemetryView(self, now)


class TelemetryView(Mapping[tuple[str, int], GpuSample]):
    """`TelemetryData` as the engine reads it: (node, GPU) → `GpuSample` with its age at ``now``.

    Samples are made on lookup, so taking a view costs nothing and a snapshot pays only for the
    GPUs it has.
    """

    __slots__ = ("_data", "_now")

    def __init__(self, data: TelemetryData, now: float) -> None:
        self._data = data
        self._now = now

    def __getitem__(self, key: tuple[str, int]) -> GpuSample:
        row = self._data.values[key]
        age = max(0.0, self._now - self._data.node_time[key[0]])
        return GpuSample(
            temperature_c=row[0],
            fb_free_mib=row[1],
            fb_used_mib=row[2],
            utilization=row[3],
            xid_errors=row[4],
            age_seconds=age,
        )

    def __iter__(self) -> Iterator[tuple[str, int]]:
        return iter(self._data.values)

    def __len__(self) -> int:
        return len(self._data.values)

    def __contains__(self, key: object) -> bool:
        return key in self._data.values


class SeriesIndex:
    """Collects the series of one refresh (or one scrape file) and builds `TelemetryData`.

    ``known_nodes``, when given, are the cluster's node names: series of other nodes are
    skipped as `SkipReason.UNKNOWN_NODE`. ``label_cache`` may be kept by the caller between
    refreshes: it maps a label set's JSON text to the GPU it names.
    """

    def __init__(
        self,
        config: TelemetryConfig,
        known_nodes: Collection[str] | None = None,
        label_cache: dict[str, tuple[str, int] | SkipReason] | None = None,
    ) -> None:
        self._node_labels = config.node_labels
        self._mapping = config.node_mapping
        self._known = known_nodes
        self._rows: dict[tuple[str, int], list[float | None]] = {}
        self._times: list[dict[str, float]] = [{} for _ in METRICS]
        self._skipped: Counter[SkipReason] = Counter()
        self._examples: dict[SkipReason, str] = {}
        self._label_cache = label_cache if label_cache is not None else {}
        self._row_by_text: dict[str, list[float | None]] = {}
        """Label text → the row of its GPU, for label sets met earlier in this refresh."""
        self._node_by_text: dict[str, str] = {}
        """Label text → node, for sample-time label sets met earlier in this refresh."""

    # ----- feeding ------------------------------------------------------------------------

    def skip(self, reason: SkipReason, example: str) -> None:
        self._skipped[reason] += 1
        if reason not in self._examples:
            self._examples[reason] = example[:300]

    def add(
        self, slot: int, labels: Mapping[str, str], value: str, sample_time: float | None
    ) -> None:
        """One series of metric ``METRICS[slot]``. A series carrying `SAMPLE_TIME_LABEL` gives
        its node's sample time for that metric instead of a value."""
        key = self._key(labels)
        self._add_keyed(slot, key, value, sample_time, labels)

    def add_json_answer(self, slot: int, series: Iterable[tuple[str, str]]) -> None:
        """Like `add` for each (label set, value) of a Prometheus answer, the label set as the
        JSON object text Prometheus wrote (without braces or escapes).

        This is the hot loop of a refresh (200,000 series for 40,000 GPUs), so the common case
        — a GPU already met in this refresh, a plain number, its first value for the metric —
        costs two dictionary lookups; anything else goes through `add`'s checks."""
        by_text, node_by_text, times = self._row_by_text, self._node_by_text, self._times[slot]
        for labels_text, value in series:
            row = by_text.get(labels_text)
            if row is not None and row[slot] is None:
                try:
                    number = float(value)
                except ValueError:
                    number = math.nan
                if 0.0 <= number < math.inf:
                    row[slot] = number
                    continue
            elif row is None:
                node = node_by_text.get(labels_text)
                if node is not None and node not in times:
                    try:
                        number = float(value)
                    except ValueError:
                        number = math.nan
                    if 0.0 <= number < math.inf:
                        times[node] = number
                        continue
            self._add_json_series(slot, labels_text, value)

    def _add_json_series(self, slot: int, labels_text: str, value: str) -> None:
        key = self._label_cache.get(labels_text)
        if key is None:
            key = self._key(dict(_LABEL_PAIR.findall(labels_text)))
            self._label_cache[labels_text] = key
        self._add_keyed(slot, key, value, None, labels_text)
        if isinstance(key, SkipReason):
            return
        if key[1] == _TIME_GPU:
            if key[0] in self._times[slot]:
                self._node_by_text[labels_text] = key[0]
        elif key in self._rows:
            self._row_by_text[labels_text] = self._rows[key]

    def _add_keyed(
        self,
        slot: int,
        key: tuple[str, int] | SkipReason,
        value: str,
        sample_time: float | None,
        labels: Mapping[str, str] | str,
    ) -> None:
        if isinstance(key, SkipReason):
            self.skip(key, f"{METRICS[slot]}{{{_show(labels)}}}")
            return
        node, gpu = key
        if self._known is not None and node not in self._known:
            self.skip(SkipReason.UNKNOWN_NODE, f"{METRICS[slot]} of node {node!r}")
            return
        number = self._number(slot, value, labels)
        if number is None:
            return
        if gpu == _TIME_GPU:
            self._note_time(slot, node, number)
            return
        if sample_time is not None:
            self._note_time(slot, node, sample_time)
        row = self._rows.get(key)
        if row is None:
            row = self._rows[key] = [None] * _SLOTS
        old = row[slot]
        if old is None:
            row[slot] = number
        else:
            row[slot] = _worse(slot, old, number)
            self.skip(SkipReason.DUPLICATE, f"{METRICS[slot]} of GPU {gpu} on {node}")

    def _note_time(self, slot: int, node: str, sample_time: float) -> None:
        times = self._times[slot]
        old = times.get(node)
        if old is None or sample_time < old:
            times[node] = sample_time

    def _key(self, labels: Mapping[str, str]) -> tuple[str, int] | SkipReason:
        for name in self._node_labels:
            node = labels.get(name)
            if node:
                break
        else:
            return SkipReason.MISSING_NODE_LABEL
        node = self._mapping.get(node, node)
        if SAMPLE_TIME_LABEL in labels:
            return (node, _TIME_GPU)
        gpu = labels.get(GPU_LABEL)
        if not gpu:
            return SkipReason.MISSING_GPU_LABEL
        if not (gpu.isascii() and gpu.isdigit()) or int(gpu) >= MAX_GPUS_PER_NODE:
            return SkipReason.BAD_GPU_LABEL
        return (node, int(gpu))

    def _number(self, slot: int, value: str, labels: Mapping[str, str] | str) -> float | None:
        try:
            number = float(value)
        except ValueError:
            self.skip(SkipReason.BAD_VALUE, f"{METRICS[slot]}{{{_show(labels)}}} {value!r}")
            return None
        if not math.isfinite(number):
            self.skip(SkipReason.NOT_FINITE, f"{METRICS[slot]}{{{_show(labels)}}} {value}")
            return None
        if number < 0:
            self.skip(SkipReason.BAD_VALUE, f"{METRICS[slot]}{{{_show(labels)}}} {value}")
            return None
        return number

    # ----- building -----------------------------------------------------------------------

    def build(self) -> TelemetryData:
        """Keeps each GPU that has every metric its node reports, each with a sample time.

        Completeness is judged per node: a metric no GPU of a node reports (an exporter
        configured without it) is ``None`` for that node's GPUs, but a GPU missing a metric
        its neighbours have (a scrape cut short, a series lost) is unknown as a whole."""
        masks = {key: _mask(row) for key, row in self._rows.items()}
        node_mask: dict[str, int] = {}
        for (node, _), mask in masks.items():
            node_mask[node] = node_mask.get(node, 0) | mask
        timed = self._timed_masks()
        values: dict[tuple[str, int], list[float | None]] = {}
        for key, row in self._rows.items():
            node, need = key[0], node_mask[key[0]]
            if masks[key] != need:
                missing = _names(need & ~masks[key])
                self.skip(SkipReason.INCOMPLETE, f"GPU {key[1]} on {node}: no {missing}")
            elif need & ~timed.get(node, 0):
                untimed = _names(need & ~timed.get(node, 0))
                self.skip(SkipReason.NO_SAMPLE_TIME, f"GPU {key[1]} on {node}: {untimed}")
            else:
                values[key] = row
        nodes = {node for node, _ in values}
        return TelemetryData(
            values=values,
            node_time={node: self._oldest(node, node_mask[node]) for node in nodes},
            skipped=dict(self._skipped),
            examples=dict(self._examples),
            metrics=tuple(_names(functools.reduce(operator.or_, node_mask.values(), 0))),
        )

    def _timed_masks(self) -> dict[str, int]:
        """Per node, the metrics (as bits by slot) that gave it a sample time."""
        timed: dict[str, int] = {}
        for slot, times in enumerate(self._times):
            for node in times:
                timed[node] = timed.get(node, 0) | 1 << slot
        return timed

    def _oldest(self, node: str, mask: int) -> float:
        return min(self._times[s][node] for s in range(_SLOTS) if mask >> s & 1)


_ALL = (1 << _SLOTS) - 1


def _names(mask: int) -> list[str]:
    return [METRICS[s] for s in range(_SLOTS) if mask >> s & 1]


def _mask(row: list[float | None]) -> int:
    """The slots a row has a value in, as bits."""
    if None not in row:
        return _ALL
    return sum(1 << s for s, value in enumerate(row) if value is not None)


def _show(labels: Mapping[str, str] | str) -> str:
    """Labels as in the text format, whichever form they came in."""
    if isinstance(labels, str):
        labels = dict(_LABEL_PAIR.findall(labels))
    return ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))

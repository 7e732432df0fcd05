"""Reads a saved ``/metrics`` scrape (Prometheus text exposition format) into `TelemetryData`.

``gpusched simulate --metrics FILE`` uses this; the series go through the same `SeriesIndex`
as Prometheus answers. Only the dcgm-exporter metrics of `METRICS` are read; other metrics and
``#`` lines are passed over. A line of one of our metrics that cannot be read (a scrape cut
mid-line, a stray quote) is skipped as `SkipReason.MALFORMED`, never fatal.

Sample times: a line's own timestamp (milliseconds) when it has one, else ``scrape_time``. The
default ``scrape_time`` is the newest timestamp in the file, or 0 when none has one, so that a
scrape without timestamps reads as taken "now" when viewed at that time.
"""

from __future__ import annotations

import re
from collections.abc import Collection

from gpusched.api.config import TelemetryConfig
from gpusched.telemetry.series import METRICS, SeriesIndex, SkipReason, TelemetryData

__all__ = ["parse_exposition"]

_SLOT = {name: slot for slot, name in enumerate(METRICS)}
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_TAIL = re.compile(r"\s+(\S+)(?:\s+(-?\d+))?\s*")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\\n]|\\.)*)"[ \t]*(,?)')
_UNESCAPE = re.compile(r"\\(.)")


def parse_exposition(
    text: str,
    config: TelemetryConfig,
    known_nodes: Collection[str] | None = None,
    scrape_time: float | None = None,
) -> TelemetryData:
    """Indexes the dcgm-exporter series of a scrape; see the module's docstring."""
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if _ours(line)]
    parsed = [(n, line, _parse_line(line)) for n, line in lines]
    if scrape_time is None:
        stamps = [p[3] for _, _, p in parsed if p is not None and p[3] is not None]
        scrape_time = max(stamps) if stamps else 0.0
    index = SeriesIndex(config, known_nodes)
    for number, line, fields in parsed:
        if fields is None:
            index.skip(SkipReason.MALFORMED, f"line {number}: {line}")
            continue
        name, labels, value, stamp = fields
        index.add(_SLOT[name], labels, value, scrape_time if stamp is None else stamp)
    return index.build()


def _ours(line: str) -> bool:
    """Whether a line is a sample of one of `METRICS` (cheap: most lines of a scrape are not)."""
    if not line.startswith("DCGM_FI_DEV_"):
        return False
    match = _NAME.match(line)
    return match is not None and match.group(0) in _SLOT


def _parse_line(line: str) -> tuple[str, dict[str, str], str, float | None] | None:
    """``name{a="b",…} value [timestamp_ms]``; ``None`` when the line does not have that form."""
    match = _NAME.match(line)
    if match is None:
        return None
    name, pos = match.group(0), match.end()
    labels: dict[str, str] = {}
    if line.startswith("{", pos):
        end = _labels(line, pos + 1, labels)
        if end is None:
            return None
        pos = end
    tail = _TAIL.fullmatch(line, pos)
    if tail is None:
        return None
    stamp = tail.group(2)
    return name, labels, tail.group(1), int(stamp) / 1000.0 if stamp is not None else None


def _labels(line: str, pos: int, labels: dict[str, str]) -> int | None:
    """Reads ``a="b",…}`` from ``pos``; returns the position after ``}``, or ``None``."""
    while True:
        pos = _skip_spaces(line, pos)
        if line.startswith("}", pos):
            return pos + 1
        match = _LABEL.match(line, pos)
        if match is None:
            return None
        name, value, comma = match.groups()
        if name in labels:
            return None
        labels[name] = _UNESCAPE.sub(_unescape, value) if "\\" in value else value
        pos = match.end()
        if not comma:
            pos = _skip_spaces(line, pos)
            return pos + 1 if line.startswith("}", pos) else None


def _skip_spaces(line: str, pos: int) -> int:
    while pos < len(line) and line[pos] in " \t":
        pos += 1
    return pos


def _unescape(match: re.Match[str]) -> str:
    char = match.group(1)
    return "\n" if char == "n" else char

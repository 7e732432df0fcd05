"""What telemetry a decision used, in a form status, Events and ``simulate`` can print."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpusched.telemetry.series import TelemetryData

__all__ = ["TelemetryStatus", "describe_data"]


@dataclass(frozen=True, slots=True, kw_only=True)
class TelemetryStatus:
    """The telemetry a scheduling cycle sees, as of ``now``."""

    source: str | None
    """``prometheus <url>``, ``file <path>``, or ``None`` when there is no source."""
    up: bool
    """The last refresh succeeded (always true for a file)."""
    gpus: int = 0
    """GPUs with usable data (before the age check)."""
    newest_age_seconds: float | None = None
    """Age of the freshest node's data; ``None`` without data."""
    oldest_age_seconds: float | None = None
    """Age of the stalest node's data; ``None`` without data."""
    max_age_seconds: float = 0.0
    last_error: str | None = None
    """Why the last refresh failed; ``None`` when it succeeded."""
    skipped: Mapping[str, int] = field(default_factory=dict)
    """Series (or GPUs) left out by the last successful refresh, by reason."""

    def summary(self) -> str:
        """One line, e.g. ``prometheus http://p:9090 up: 40 GPUs, data 3-5 s old``."""
        if self.source is None:
            return "no telemetry source: GPUs judged by allocation alone"
        state = "up" if self.up else f"down ({self.last_error})"
        if self.newest_age_seconds is None or self.oldest_age_seconds is None:
            data = "no GPU data"
        else:
            data = (
                f"{self.gpus} GPUs, data {self.newest_age_seconds:.0f}-"
                f"{self.oldest_age_seconds:.0f} s old"
            )
            if self.oldest_age_seconds > self.max_age_seconds:
                data += f" (older than {self.max_age_seconds:.0f} s is unknown)"
        skipped = ", ".join(f"{reason} {n}" for reason, n in sorted(self.skipped.items()))
        return f"{self.source} {state}: {data}" + (f"; skipped: {skipped}" if skipped else "")

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "up": self.up,
            "gpus": self.gpus,
            "newestAgeSeconds": _round(self.newest_age_seconds),
            "oldestAgeSeconds": _round(self.oldest_age_seconds),
            "maxAgeSeconds": self.max_age_seconds,
            "lastError": self.last_error,
            "skipped": dict(sorted(self.skipped.items())),
            "summary": self.summary(),
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def describe_data(
    data: TelemetryData | None,
    source: str | None,
    now: float,
    max_age_seconds: float,
    *,
    up: bool = True,
    last_error: str | None = None,
) -> TelemetryStatus:
    if data is None:
        return TelemetryStatus(
            source=source, up=up, max_age_seconds=max_age_seconds, last_error=last_error
        )
    newest, oldest = data.newest_time(), data.oldest_time()
    return TelemetryStatus(
        source=source,
        up=up,
        gpus=len(data.values),
        newest_age_seconds=None if newest is None else max(0.0, now - newest),
        oldest_age_seconds=None if oldest is None else max(0.0, now - oldest),
        max_age_seconds=max_age_seconds,
        last_error=last_error,
        skipped={str(reason): n for reason, n in data.skipped.items()},
    )

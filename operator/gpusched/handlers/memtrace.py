"""Where the running operator's memory goes: tracemalloc snapshots taken inside the process.

Off unless ``GPUSCHED_TRACEMALLOC`` names how many frames to keep of each allocation's
traceback (1 is cheap and tells the line; 10-25 tells who called it). On, tracemalloc starts
before the operator builds anything, and each ``SIGUSR2`` (and, with
``GPUSCHED_TRACEMALLOC_INTERVAL`` seconds, each interval) writes into
``GPUSCHED_TRACEMALLOC_DIR`` (default: the working directory) two files named
``<pid>-<n>``: the snapshot itself (``.tracemalloc``, for `tracemalloc.Snapshot.load` and
``compare_to``) and a summary (``.txt``): the process's RSS beside what Python traces, then the
biggest holders by traceback. Tracing costs CPU and about as much memory again as it traces:
for diagnosis, never in production. Off, nothing is installed and nothing is paid.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import tracemalloc
from collections.abc import Mapping
from pathlib import Path
from types import FrameType

logger = logging.getLogger(__name__)

FRAMES = "GPUSCHED_TRACEMALLOC"
DIRECTORY = "GPUSCHED_TRACEMALLOC_DIR"
INTERVAL = "GPUSCHED_TRACEMALLOC_INTERVAL"
TOP = 40
"""Holders listed in each summary, by traceback."""


class MemoryTrace:
    """Writes numbered snapshots of what this process's Python heap holds into ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.taken = 0
        self._lock = threading.Lock()

    def write(self) -> Path:
        """Takes a snapshot now and writes it with its summary; returns the summary's path."""
        with self._lock:
            self.taken += 1
            stem = self.directory / f"{os.getpid()}-{self.taken}"
            snapshot = tracemalloc.take_snapshot()
            current, peak = tracemalloc.get_traced_memory()
            snapshot.dump(str(stem.with_suffix(".tracemalloc")))
            summary = stem.with_suffix(".txt")
            summary.write_text("\n".join(_summary(snapshot, current, peak)) + "\n")
            return summary


def install(environ: Mapping[str, str] = os.environ) -> MemoryTrace | None:
    """Starts tracing as ``environ`` asks (see the module's note); None when it does not.
    A value that is not a positive whole number fails loudly, naming the variable."""
    frames_text = environ.get(FRAMES, "").strip()
    if not frames_text:
        return None
    frames = int(_positive(FRAMES, frames_text, int))
    directory = Path(environ.get(DIRECTORY) or ".")
    directory.mkdir(parents=True, exist_ok=True)
    interval_text = environ.get(INTERVAL, "").strip()
    interval = _positive(INTERVAL, interval_text, float) if interval_text else None
    tracemalloc.start(frames)
    trace = MemoryTrace(directory)

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        # Runs in the main thread between two bytecodes: the event loop waits meanwhile,
        # which a diagnosis can afford.
        logger.info("tracemalloc snapshot written: %s", trace.write())

    signal.signal(signal.SIGUSR2, on_signal)
    if interval is not None:
        threading.Thread(
            target=_every, args=(trace, interval), name="tracemalloc", daemon=True
        ).start()
    logger.info("tracemalloc on (%d frames): SIGUSR2 writes a snapshot to %s", frames, directory)
    return trace


def _every(trace: MemoryTrace, interval: float) -> None:
    pace = threading.Event()  # never set: the wait paces the snapshots
    while not pace.wait(interval):
        trace.write()


def _positive(name: str, text: str, kind: type[float]) -> float:
    try:
        value = kind(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise ValueError(f"{name}={text!r}: expected a positive {kind.__name__}")
    return value


def _summary(snapshot: tracemalloc.Snapshot, current: int, peak: int) -> list[str]:
    status = _proc_status()
    lines = [
        f"pid {os.getpid()}: VmRSS {status.get('VmRSS', 0) / 1024:.1f} MB, "
        f"VmHWM {status.get('VmHWM', 0) / 1024:.1f} MB; "
        f"traced {current / 1e6:.1f} MB (peak {peak / 1e6:.1f} MB)",
        f"top {TOP} by traceback (MB, blocks; innermost frame last):",
    ]
    for stat in snapshot.statistics("traceback")[:TOP]:
        lines.append(f"{stat.size / 1e6:9.2f} MB {stat.count:>9}")
        lines.extend(f"    {frame.filename}:{frame.lineno}" for frame in stat.traceback)
    return lines


def _proc_status() -> dict[str, int]:
    """The kB figures of /proc/self/status; empty where there is no /proc."""
    values: dict[str, int] = {}
    try:
        text = Path("/proc/self/status").read_text()
    except OSError:
        return values
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if len(parts) == 2 and parts[1] == "kB":
            values[key] = int(parts[0])
    return values

"""The operator's tracemalloc hook: off unless asked, and on SIGUSR2 a snapshot and a summary
that name the process's memory and the code holding it."""

from __future__ import annotations

import os
import signal
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpusched.handlers import memtrace


@pytest.fixture
def restored() -> Iterator[None]:
    """Whatever a test turns on is off again after it: tracing, and SIGUSR2's handler."""
    handler = signal.getsignal(signal.SIGUSR2)
    was_tracing = tracemalloc.is_tracing()
    yield
    signal.signal(signal.SIGUSR2, handler)
    if not was_tracing:
        tracemalloc.stop()


def test_unset_installs_nothing(restored: None) -> None:
    handler = signal.getsignal(signal.SIGUSR2)
    assert memtrace.install({}) is None
    assert not tracemalloc.is_tracing()
    assert signal.getsignal(signal.SIGUSR2) is handler


def test_sigusr2_writes_a_snapshot_and_a_summary_naming_the_holder(
    restored: None, tmp_path: Path
) -> None:
    folder = tmp_path / "traces"
    trace = memtrace.install({memtrace.FRAMES: "5", memtrace.DIRECTORY: str(folder)})
    assert trace is not None
    assert tracemalloc.is_tracing()
    held = [bytearray(4_000_000)]  # the biggest holder while the snapshot is taken
    os.kill(os.getpid(), signal.SIGUSR2)  # Python runs the handler before the next line
    stem = folder / f"{os.getpid()}-1"
    summary = stem.with_suffix(".txt").read_text().splitlines()
    assert summary[0].startswith(f"pid {os.getpid()}: VmRSS ")
    # the first holder: its size, then its 5 frames, innermost (this test's line) last
    assert float(summary[2].split()[0]) >= 4.0
    assert summary[7].startswith(f"    {__file__}:")
    snapshot = tracemalloc.Snapshot.load(str(stem.with_suffix(".tracemalloc")))
    biggest = snapshot.statistics("lineno")[0]
    assert biggest.size >= 4_000_000
    assert biggest.traceback[0].filename == __file__
    del held


@pytest.mark.parametrize(
    ("variable", "value"),
    [(memtrace.FRAMES, "ten"), (memtrace.FRAMES, "0"), (memtrace.INTERVAL, "-1")],
)
def test_a_bad_value_fails_naming_the_variable(
    restored: None, tmp_path: Path, variable: str, value: str
) -> None:
    environ = {memtrace.FRAMES: "1", memtrace.DIRECTORY: str(tmp_path), variable: value}
    with pytest.raises(ValueError, match=f"{variable}={value!r}"):
        memtrace.install(environ)
    assert not tracemalloc.is_tracing()

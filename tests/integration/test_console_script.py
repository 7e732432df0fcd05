"""The installed ``gpusched`` console script, run as a person runs it: a process of its own."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from gpusched.commands import EXIT_OK


def test_the_installed_console_script_runs_the_sample() -> None:
    script = Path(sys.executable).parent / "gpusched"
    command = str(script) if script.exists() else shutil.which("gpusched")
    assert command, "the gpusched console script is not installed (pip install -e .)"
    done = subprocess.run(
        [command, "simulate", "-o", "json"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == EXIT_OK, done.stderr
    assert set(json.loads(done.stdout)) == {"bindings", "podGroups", "unschedulable", "preemptions"}

"""`make help` lists every target the Makefile declares, and the targets name files that exist."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAKEFILE = ROOT / "Makefile"


def phony_targets() -> list[str]:
    match = re.search(r"^\.PHONY:(.*)$", MAKEFILE.read_text(), re.MULTILINE)
    assert match, "the Makefile declares no .PHONY targets"
    return match.group(1).split()


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_help_lists_every_declared_target_digits_included() -> None:
    done = subprocess.run(
        ["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    listed = {line.split()[0] for line in done.stdout.splitlines() if line.strip()}
    missing = [t for t in phony_targets() if t not in listed]
    assert missing == [], f"`make help` misses {missing}:\n{done.stdout}"


def test_every_bench_script_the_makefile_runs_exists() -> None:
    named = re.findall(r"\bbench/[\w./-]+\.py\b", MAKEFILE.read_text())
    assert named, "the Makefile runs no bench script"
    assert [n for n in named if not (ROOT / n).is_file()] == []


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_test_installs_helm_and_builds_the_control_plane_before_pytest_starts() -> None:
    # On a fresh machine the README's `make test` must run the chart and real-server tests,
    # not skip them (no helm) nor build the control plane inside a test's time.
    done = subprocess.run(
        ["make", "-n", "test"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    prepare = next(i for i, line in enumerate(lines) if "prepare-tests.sh" in line)
    pytest_at = next(i for i, line in enumerate(lines) if "-m pytest" in line)
    assert prepare < pytest_at, done.stdout
    assert ".ci/bin" in lines[pytest_at], "helm from .ci/bin must be on the tests' PATH"
    script = (ROOT / ".ci" / "prepare-tests.sh").read_text()
    assert "install-helm.sh" in script
    assert "build-controlplane.sh" in script

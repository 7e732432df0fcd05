"""Every script in bench/ starts, as ``python bench/NAME.py`` starts it.

Python puts the script's folder first on ``sys.path``, so a file in bench/ named like a
standard-library module (``operator.py`` once) replaces that module for everything the script
imports, and the script dies before it parses its options. An interpreter started with ``-S``
imports nothing before the script does, as a fresh virtual environment imports nothing; our
own development environment happens to import ``operator`` early (its ``.pth`` files), which
hid the crash. The site-packages folders and the source root go on ``PYTHONPATH`` instead.
"""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
SCRIPTS = sorted(BENCH.glob("*.py"))


def clean_python(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """Runs ``python -S ARGS`` in the repository root with only the source root and the
    site-packages folders on the path."""
    path = [str(ROOT / "operator"), *site.getsitepackages()]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    return subprocess.run(
        [sys.executable, "-S", *map(str, args)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_no_bench_script_is_named_like_a_standard_library_module() -> None:
    clashes = [p.name for p in SCRIPTS if p.stem in sys.stdlib_module_names]
    assert clashes == [], f"{clashes} would shadow the standard library inside bench/"


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_every_bench_script_prints_its_help(script: Path) -> None:
    done = clean_python(script, "--help")
    assert done.returncode == 0, f"{script.name} --help failed:\n{done.stderr}"
    assert "usage:" in done.stdout, done.stdout
    # argparse formats help strings with %, but prints descriptions as they are.
    assert "%%" not in done.stdout, done.stdout


@pytest.mark.parametrize("scenario", ["baseline", "snapshot", "snapshot+schedule"])
def test_the_engine_benchmarks_rss_children_report_their_peak(scenario: str) -> None:
    done = clean_python(BENCH / "engine.py", "--rss-child", scenario, "--rss-pods", "2000")
    assert done.returncode == 0, f"RSS child {scenario} failed:\n{done.stderr}"
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert facts["scenario"] == scenario
    assert facts["vm_hwm_kib"] > 0, facts
    if scenario != "baseline":
        assert facts["bound"] == 2000, facts


def test_gpusched_bench_openb_help_prints_single_percent_signs() -> None:
    done = clean_python("-m", "gpusched.cli", "bench", "openb", "--help")
    assert done.returncode == 0, done.stderr
    assert "130 % of GPU" in " ".join(done.stdout.split()), done.stdout
    assert "%%" not in done.stdout, done.stdout

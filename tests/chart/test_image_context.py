"""The image can run its own sample: the Docker build context is emulated (no Docker engine
here), the wheel is built from it as the Dockerfile's ``pip install .`` builds it, and
``gpusched simulate`` runs from the installed files, far from the source tree.

The build context is what ``.dockerignore`` lets through, copied as Docker sends it: links stay
links, so a link pointing outside the context (the sample once was ``samples -> ../../examples``)
arrives dangling, exactly as in the image.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PIP_WHEEL = (sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q")
"""The image builds with build isolation (it downloads setuptools); the test must not need the
network, so it builds with the setuptools and wheel installed here."""
SAMPLE_METRICS = "gpusched/samples/clusters/sample/dcgm-exporter.metrics.txt"


def dockerignore() -> tuple[list[str], list[str]]:
    """(included top-level paths, excluded patterns) of a ``*`` + ``!path`` .dockerignore."""
    lines = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*", "the context is built from an allow-list"
    included = [line[1:].rstrip("/") for line in lines[1:] if line.startswith("!")]
    excluded = [line for line in lines[1:] if not line.startswith("!")]
    return included, excluded


def _excluded(relative: str, patterns: list[str]) -> bool:
    # Docker's ** matches any number of folders; fnmatch's * already crosses "/".
    return any(fnmatch.fnmatch(relative, p.replace("**/", "*")) for p in patterns)


def build_context(target: Path) -> Path:
    included, excluded = dockerignore()
    for top in included:
        source = ROOT / top
        if source.is_file():
            shutil.copy2(source, target / top)
            continue
        for path in sorted(source.rglob("*")):
            relative = path.relative_to(ROOT).as_posix()
            if _excluded(relative, excluded) or any(
                _excluded(parent.relative_to(ROOT).as_posix(), excluded)
                for parent in path.parents
                if parent != ROOT and ROOT in parent.parents
            ):
                continue
            destination = target / relative
            destination.parent.mkdir(parents=True, exist_ok=True)
            if path.is_symlink():
                destination.symlink_to(os.readlink(path))
            elif path.is_file():
                shutil.copy2(path, destination)
            else:
                destination.mkdir(exist_ok=True)
    return target


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from the emulated context, unpacked as pip installs a pure wheel."""
    pytest.importorskip("wheel", reason="building the wheel needs the wheel package")
    context = build_context(tmp_path_factory.mktemp("context"))
    dist = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [*PIP_WHEEL, "-w", str(dist), str(context)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = dist.glob("gpusched-*.whl")
    site = tmp_path_factory.mktemp("site")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    return site


def gpusched(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The console script's entry point, importing gpusched from ``site`` only."""
    (entry,) = [
        line.split("=", 1)[1].strip()
        for line in next(site.glob("gpusched-*.dist-info/entry_points.txt"))
        .read_text()
        .splitlines()
        if line.startswith("gpusched =")
    ]
    module, function = entry.split(":")
    code = (
        "import sys, gpusched; assert gpusched.__file__.startswith(sys.argv[1]), gpusched.__file__;"
        f" from {module} import {function}; sys.exit({function}(sys.argv[2:]))"
    )
    return subprocess.run(
        [sys.executable, "-c", code, str(site), *args],
        cwd=site.parent,
        env={**os.environ, "PYTHONPATH": str(site)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_build_context_carries_the_sample_as_files_not_links(tmp_path: Path) -> None:
    context = build_context(tmp_path)
    samples = context / "operator" / "gpusched" / "samples"
    assert not samples.is_symlink(), "the sample is a link: it points outside the context"
    assert sorted(p.name for p in samples.rglob("*.yaml")), "no sample YAML in the context"


def test_the_wheel_built_like_the_image_runs_gpusched_simulate_on_its_sample(
    installed: Path,
) -> None:
    done = gpusched(installed, "simulate", "-o", "json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["bindings"], document
    assert {g["name"] for g in document["podGroups"]} >= {"ml/train-zone", "ml/pretrain"}


def test_the_wheel_ships_the_samples_dcgm_scrape(installed: Path) -> None:
    done = gpusched(installed, "simulate", "--metrics", str(installed / SAMPLE_METRICS))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Telemetry: file"), done.stdout

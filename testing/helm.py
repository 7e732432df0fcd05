"""Finding and running a real helm binary for the chart tests.

Where it is looked for, in order: ``$HELM`` (a path), ``helm`` on ``PATH``, then ``.ci/bin/helm``,
where ``.ci/install-helm.sh`` puts one (``.ci/run`` calls it on a clean machine). Without one the
chart tests skip saying so, unless ``GPUSCHED_REQUIRE_HELM=1`` (set by CI), where they fail.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "gpusched"
INSTALL_SCRIPT = ".ci/install-helm.sh"
TIMEOUT_SECONDS = 120


def find_helm() -> str | None:
    candidates = [os.environ.get("HELM"), shutil.which("helm"), str(ROOT / ".ci" / "bin" / "helm")]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def helm_or_skip() -> str:
    helm = find_helm()
    if helm is not None:
        return helm
    message = f"no helm binary: set $HELM, put helm on PATH, or run {INSTALL_SCRIPT}"
    if os.environ.get("GPUSCHED_REQUIRE_HELM") == "1":
        pytest.fail(message)
    pytest.skip(message)


@functools.lru_cache(maxsize=64)
def _run(helm: str, args: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [helm, *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS,
        check=False,
        cwd=ROOT,
        env={
            **os.environ,
            "HELM_CACHE_HOME": "/tmp/gpusched-helm/cache",
            "HELM_CONFIG_HOME": "/tmp/gpusched-helm/config",
            "HELM_DATA_HOME": "/tmp/gpusched-helm/data",
        },
    )


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    """Runs helm (cached: the same arguments give the same answer) and returns its result."""
    return _run(helm_or_skip(), tuple(args))


def template_args(*sets: str, namespace: str = "gpusched-system") -> tuple[str, ...]:
    args = ["template", "gpusched", str(CHART), "--namespace", namespace]
    for item in sets:
        args += ["--set", item]
    return tuple(args)


def render(*sets: str, namespace: str = "gpusched-system") -> list[dict[str, Any]]:
    """The chart's manifests (``--set`` each of ``sets``), as parsed YAML documents."""
    result = helm(*template_args(*sets, namespace=namespace))
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def find(docs: Sequence[dict[str, Any]], kind: str, name_suffix: str = "") -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(name_suffix)]
    assert len(found) == 1, f"want one {kind} named *{name_suffix}, got {len(found)}"
    return found[0]

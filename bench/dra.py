"""DRA on the real control plane: a 64-pod gang's created→all-bound time with ResourceClaims
allocated by gpusched against the same gang on device-plugin GPUs (the baseline, same run),
and the share of DRA pods given exactly the devices the engine picks.

The measurement lives in tests/integration/test_dra_figures.py, for the control-plane
fixtures; this runs it and prints its figures. Needs Go (the control plane is built on first
use) and helm (bash .ci/install-helm.sh).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "tests" / "integration" / "test_dra_figures.py"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python bench/dra.py", description=__doc__)
    parser.parse_args(argv)
    command = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", str(FIGURES)]
    env = {**os.environ, "GPUSCHED_FIGURES": "1"}
    return subprocess.run(command, cwd=ROOT, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())

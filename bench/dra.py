"""DRA on the real control plane: a 64-pod gang's created→all-bound time with ResourceClaims
allocated by gpusched (from claim templates, and created by gpusched for nvidia.com/gpu served
by a DeviceClass) against the same gang on device-plugin GPUs (the baseline, same run), and
the share of DRA pods given exactly the devices the engine picks.

    python bench/dra.py            # three runs, each on a fresh control plane
    python bench/dra.py --quick    # one run (about a minute)

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
    parser = argparse.ArgumentParser(
        prog="python bench/dra.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="one run instead of three")
    args = parser.parse_args(argv)
    command = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", str(FIGURES)]
    env = {**os.environ, "GPUSCHED_FIGURES": "1"}
    runs = 1 if args.quick else 3
    for run in range(runs):
        print(f"# run {run + 1} of {runs}", flush=True)
        code = subprocess.run(command, cwd=ROOT, env=env, check=False).returncode
        if code:
            return code
    return 0


if __name__ == "__main__":
    sys.exit(main())

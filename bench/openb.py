"""Placement quality on Alibaba's openb trace with the published FGD protocol.

The same benchmark as ``gpusched bench openb`` (same options, same output), as a script beside
the other benchmarks:

    python bench/openb.py --quick                       # CI: default trace, 3 seeds, checks
    python bench/openb.py --jobs 2 --plot openb.png     # 17 traces x 9 policies x 10 seeds
    python bench/openb.py --traces default --policies fgd,gpusched --seeds 42-51

See bench/README.md ("openb placement quality") for what it measures and the results.
"""

from __future__ import annotations

import sys
from pathlib import Path

from gpusched.commands.bench import main

DATA = Path(__file__).resolve().parent / "data" / "openb"
"""The trace files, beside this script (not shipped in the package: 8 MB)."""

if __name__ == "__main__":
    sys.exit(main(data=DATA))

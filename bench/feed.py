"""Per-cycle sync cost: the change feed against the full walk, at two sizes, in one run.

    python bench/feed.py                 # 10,000 and 50,000 bound pods on 5,000 nodes
    python bench/feed.py --sizes 2000 10000 --cycles 10

Builds one `ClusterState` from pod and Node bodies (as the watch hands them), then per cycle
changes one bound pod (deleted, and another created in its place) and brings two snapshot
caches up to date, each as the operator's decider does:

- full (the old cycle): `ClusterState.bound()` → `ActualAssignments.apply` →
  `SnapshotCache` comparing every bound pod;
- fed: `BoundFeed.take` → `SnapshotCache` applying the changed keys alone.

The collector's generations are frozen after each size is loaded, as the operator freezes
them after its lists (`gpusched.engine.collector`): a full collection walks every object held
and would land in whichever path happened to trigger it. Prints each path's median time a
cycle at each size, and the ratio of the sizes: a fed cycle whose cost does not grow with
bound pods stays near 1× (what it still pays is per Node: sorting them, checking them
unchanged). With ``--published`` every Node also
carries the node agent's record of the kubelet's GPUs (``gpusched.io/gpus-actual``), which
made the old `apply` look up every bound pod. Benchmarks are not tests: nothing is asserted.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: for testing

from gpusched.api.assignments import ACTUAL_GPUS_ANNOTATION
from gpusched.api.config import SchedulerConfig
from gpusched.engine.build import SnapshotCache, build_snapshot
from gpusched.scheduler.assignments import ActualAssignments
from gpusched.scheduler.feed import BoundFeed
from gpusched.scheduler.state import ClusterState
from testing.manifests import node, pod

NODES = 5_000
CONFIG = SchedulerConfig()


def _pod(i: int, generation: int = 0) -> dict[str, Any]:
    where = f"n{i % NODES:05d}"
    gpus = 1 if (i // NODES) % 10 < 8 else 0
    at = [(i // NODES) % 8] if gpus else None
    return pod(f"p{i:06d}", gpus, node=where, at=at, uid=f"u{i}-{generation}")


def _cycle_full(state: ClusterState, actual: ActualAssignments, cache: SnapshotCache) -> float:
    started = time.perf_counter()
    bound, _ = actual.apply(state.nodes, state.bound())
    build_snapshot(state.nodes.values(), bound, config=CONFIG, cache=cache)
    return time.perf_counter() - started


def _cycle_fed(
    state: ClusterState, feed: BoundFeed, actual: ActualAssignments, cache: SnapshotCache
) -> float:
    started = time.perf_counter()
    changes = feed.take(state.nodes, actual, ())
    build_snapshot(state.nodes.values(), changes, config=CONFIG, cache=cache)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 50_000])
    parser.add_argument("--cycles", type=int, default=20)
    parser.add_argument("--published", action="store_true")
    args = parser.parse_args()
    state = ClusterState()
    annotations = {ACTUAL_GPUS_ANNOTATION: "{}"} if args.published else None
    for n in range(NODES):
        state.upsert_node(node(f"n{n:05d}", annotations=annotations))
    full_actual, fed_actual = ActualAssignments(), ActualAssignments()
    full_cache, fed_cache = SnapshotCache(), SnapshotCache()
    feed = BoundFeed(state)
    made = 0
    rows = []
    for size in sorted(args.sizes):
        while made < size:
            state.upsert_pod(_pod(made))
            made += 1
        _cycle_full(state, full_actual, full_cache)  # the first sync: every pod, both ways
        _cycle_fed(state, feed, fed_actual, fed_cache)
        gc.collect()
        gc.freeze()  # as the operator does after its lists: no pass over the held pods
        full, fed = [], []
        for cycle in range(args.cycles):
            victim = (cycle * 7919) % size
            state.delete_pod(f"default/p{victim:06d}")
            state.upsert_pod(_pod(victim, generation=cycle + 1))
            full.append(_cycle_full(state, full_actual, full_cache))
            fed.append(_cycle_fed(state, feed, fed_actual, fed_cache))
        rows.append((size, statistics.median(full), statistics.median(fed)))
    print(f"{'bound pods':>10} | {'full walk ms':>12} | {'fed ms':>8} | full / fed")
    for size, full_s, fed_s in rows:
        print(f"{size:>10,} | {full_s * 1e3:>12.2f} | {fed_s * 1e3:>8.3f} | {full_s / fed_s:,.0f}×")
    (small, full_small, fed_small), (large, full_large, fed_large) = rows[0], rows[-1]
    print(
        f"{large:,} against {small:,} bound pods: full walk {full_large / full_small:.2f}×, "
        f"fed {fed_large / fed_small:.2f}× (load average {os.getloadavg()[0]:.1f})"
    )
    print(json.dumps({"rows": rows, "published": args.published}))


if __name__ == "__main__":
    main()

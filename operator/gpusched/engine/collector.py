"""Pausing Python's cyclic garbage collector while the engine decides.

A decision allocates thousands of objects that live only as long as it does (a trial's holdings
and journal entries, the attempts it records) and frees them by reference counting when it rolls
the snapshot back. The collector counts those objects while they are alive: left running, it
ran a few young collections during each 256-pod gang decision, moved what was alive at those
moments into the old generation, and so brought on full collections, which walk every object
the process keeps and landed inside decisions: 13 ms for a 5,000-node snapshot alone, 35-90 ms
beside the parsed Node objects it was built from, where the whole decision takes about 20 ms.
Paused, the collector first runs after the decision, when the trials are gone and only the
result is left to move to an older generation: no full collection in 200 gang decisions in a
row, and 0.02 ms of collections a decision instead of 0.4 ms (`bench/engine.py`, benchmark 2,
rows "in a row").

Paused by its threshold, not by `gc.disable`, and counted: the operator's resync pauses it too
while it reads its whole-cluster lists (a million short-lived dicts at 40,000 pods), decisions
run in a worker thread meanwhile, and whichever leaves first must not resume collections under
the other; `gc.isenabled` stays its embedder's switch.

The pause is an option of the run (`gpusched.engine.policy.Policy.pause_collector`, on by
default): the only process-wide setting the engine touches, and only for as long as it
decides. `freeze_survivors` is never called by the engine: it is for the process that owns
what it has parsed (the operator's resync).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0
"""Callers inside `collector_paused` now (decisions in several threads, or nested)."""
_threshold = 0
"""The youngest generation's threshold when the first of them came in."""


def freeze_survivors(generation: int = 2) -> None:
    """Collects ``generation`` (and the younger ones), then moves every object left out of the
    collector's sight (`gc.freeze`).

    What an operator has parsed once it has listed the cluster (every node and pod, the
    snapshot's static part) lives as long as it does: frozen, a collection no longer walks it,
    which halved the 256-pod gang's p99 (62 ms to 31 ms) where a collection landed
    mid-decision. Collected first, since garbage in reference cycles would be frozen with the
    rest and never freed: with ``generation`` below 2, what is cyclic garbage in the oldest
    generation is frozen too, for the price of not walking it."""
    gc.collect(generation)
    gc.freeze()


@contextmanager
def collector_paused(pause: bool = True) -> Iterator[None]:
    """No automatic collection until the last caller inside leaves (the youngest generation's
    threshold at 0, which stops them all), then the threshold as the first caller found it.
    ``pause`` False: nothing is touched (`gpusched.engine.policy.Policy.pause_collector`).
    `gc.isenabled` and `gc.collect` are left alone. Reference counting goes on meanwhile;
    only garbage in reference cycles waits for the next collection, which comes with the
    next allocations once the pause ends."""
    global _depth, _threshold
    if not pause:
        yield
        return
    with _lock:
        if _depth == 0:
            _threshold = gc.get_threshold()[0]
            gc.set_threshold(0)
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                gc.set_threshold(_threshold)

"""Pausing Python's cyclic garbage collector while the engine decides.

A decision allocates thousands of objects that live only as long as it does (a trial's holdings
and journal entries, the attempts it records) and frees them by reference counting when it rolls
the snapshot back. The collector counts those objects while they are alive: left running, it
ran a few young collections during each 256-pod gang decision, moved what was alive at those
moments into the old generation, and so brought on full collections, which walk every object
the process keeps and landed inside decisions: 13 ms for a 5,000-node snapshot alone, 70-90 ms
beside the parsed Node and Pod objects the cluster came from, where the whole decision takes
about 30 ms. Paused, the collector first runs after the decision, when the trials are gone and
only the result is left to move to an older generation: over 600 gang decisions, no full
collection instead of five, and the collections' time went from 650 ms to 9 ms
(`bench/engine.py`, benchmark 2).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0
"""Callers inside `collector_paused` now (decisions in several threads, or nested)."""
_resume = False
"""Whether the collector was enabled when the first of them came in."""


@contextmanager
def collector_paused() -> Iterator[None]:
    """Disables the cyclic collector until the last caller inside leaves, then enables it
    again if it was enabled when the first came in: a caller that disabled it itself (a
    resync reading large lists) finds it disabled still. Reference counting goes on
    meanwhile; only garbage in reference cycles waits for the next collection, which runs
    at the caller's next allocation once the pause ends."""
    global _depth, _resume
    with _lock:
        if _depth == 0:
            _resume = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _resume:
                gc.enable()

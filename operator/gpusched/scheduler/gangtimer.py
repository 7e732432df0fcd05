"""How long a gang waited: from the first scheduling cycle that saw its pods pending to its
last pod bound, on the service's clock (``gpusched_gang_bind_seconds``).

A pod's ``creationTimestamp`` has one-second resolution and comes from the API server's
clock, so a gang bound in 0.2 s could read 0 s or 1.2 s; the service's clock (monotonic in
the operator, a test's virtual clock in tests) is exact, and its first reading of a gang is
the first cycle after the watch delivered one of its pods: the time from creation to that
cycle (the watch's delay plus the batch window, ``operator.batchWindowSeconds``) is left out.
A gang this replica never saw pending (bound by a former leader) is not measured.
"""

from __future__ import annotations

from collections.abc import Collection

from gpusched.scheduler.clock import Clock


class GangTimer:
    """The first time each pending root group was seen, until it is bound or gone."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._since: dict[str, float] = {}

    def seen(self, pending: Collection[str], started: Collection[str]) -> None:
        """One cycle's roots with pods pending; ``started``: roots with a pod bound or
        reserved (still measured though none of their pods is pending). Roots in neither are
        forgotten (deleted, or bound without us)."""
        now = self._clock()
        for root in pending:
            self._since.setdefault(root, now)
        for root in [r for r in self._since if r not in pending and r not in started]:
            del self._since[root]

    def bound(self, root: str) -> float | None:
        """Seconds from the first sight of ``root`` to now, its last pod bound; ``None`` for
        a root never seen pending. Forgets it: a gang that loses pods is measured afresh."""
        since = self._since.pop(root, None)
        return None if since is None else max(0.0, self._clock() - since)

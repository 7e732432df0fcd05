"""Backoff of root groups (and loose pods) whose last attempt failed.

A group waits longer after each failure, up to ``maxBackoffSeconds``; a change that could make
room (`ClusterState.capacity_generation` moves) cuts the wait to the shortest delay."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gpusched.api.config import OperatorConfig


@dataclass(slots=True)
class _Entry:
    failures: int = 0
    failed_at: float = 0.0
    next_try: float = 0.0
    capacity_seen: int = 0


class Backoff:
    """``capacity`` reads the cluster's capacity generation."""

    def __init__(self, settings: OperatorConfig, capacity: Callable[[], int]) -> None:
        self.settings = settings
        self.capacity = capacity
        self._entries: dict[str, _Entry] = {}

    def failed(self, root: str, now: float, *, soon: bool = False) -> None:
        """``root`` failed at ``now``; with ``soon``, it waits the shortest delay (a refused
        bind, not a placement that did not fit)."""
        entry = self._entries.setdefault(root, _Entry())
        entry.failures = 1 if soon else entry.failures + 1
        entry.failed_at = now
        entry.next_try = now + self.delay(entry.failures)
        entry.capacity_seen = self.capacity()

    def delay(self, failures: int) -> float:
        """Seconds to wait after the ``failures``-th failure in a row (doubling, capped)."""
        return min(
            self.settings.initial_backoff_seconds * 2.0 ** (failures - 1),
            self.settings.max_backoff_seconds,
        )

    def clear(self, root: str) -> None:
        """``root`` was placed, or is gone: its next failure starts from the shortest delay."""
        self._entries.pop(root, None)

    def backing_off(self, root: str, now: float) -> bool:
        entry = self._entries.get(root)
        if entry is None:
            return False
        capacity = self.capacity()
        if entry.capacity_seen != capacity:
            # Room was freed since the failure: retry after the shortest delay.
            entry.capacity_seen = capacity
            entry.next_try = min(
                entry.next_try, entry.failed_at + self.settings.initial_backoff_seconds
            )
        return now < entry.next_try

    def next_tries(self) -> list[float]:
        """When each group backing off may try again."""
        return [entry.next_try for entry in self._entries.values()]

"""Backoff of root groups (and loose pods) whose last attempt failed.

A group waits ``initialBackoffSeconds`` after its first failure in a row, twice as long after
each next one, up to ``maxBackoffSeconds``. The count goes back to zero only when the group is
bound (or gone), or when something changed that could make its next attempt succeed; which
change that is depends on how it failed:

- **did not fit**: a change that makes room (`ClusterState.capacity_generation` moves) cuts
  the wait to the shortest delay. Room our own refused writes gave back is no news to a group
  that failed before those writes' decision (`Backoff.returned`): otherwise every refused
  attempt of one gang would wake every other group on that gang's cadence.
- **refused** by the API server (a ResourceClaim write or a bind answered 4xx, a claim taken
  by someone else meanwhile): capacity says nothing about it; the group tries again at once
  when its own pods or groups change, or a node it was refused on, or (a claim conflict:
  another writer allocated or deleted the claim between our read and our write) once the
  watch shows that claim changed: the next decision sees what the other writer did. A change
  of the refusing policy (an admission webhook or policy) is not watched: it is seen at the
  next try, after at most ``maxBackoffSeconds``. A placement that is decided again does not
  reset the count: only a bind does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpusched.api.config import OperatorConfig
from gpusched.engine.claims import held_claims

if TYPE_CHECKING:
    from gpusched.scheduler.state import ClusterState

Inputs = Callable[[str, tuple[str, ...]], object]
"""What a refused group's next attempt depends on, for a root and the nodes it was refused on
(compared with ``==``; see `refusal_inputs`)."""


@dataclass(slots=True)
class _Refusal:
    message: str
    nodes: tuple[str, ...]
    inputs: object
    attempt: float | None


@dataclass(slots=True, kw_only=True)
class _Entry:
    failures: int = 0
    failed_at: float = 0.0
    next_try: float = 0.0
    capacity_seen: int = 0
    refusal: _Refusal | None = None
    """Set while the last failure was a refusal."""
    said: set[str] = field(default_factory=set)
    """What the server said in the refusals since the count last started over (logged)."""


class Backoff:
    """``capacity`` reads the cluster's capacity generation; ``inputs`` what a refused
    group's attempt depends on (None: a refused group waits out its delay)."""

    def __init__(
        self, settings: OperatorConfig, capacity: Callable[[], int], inputs: Inputs | None = None
    ) -> None:
        self.settings = settings
        self.capacity = capacity
        self.inputs = inputs
        self._entries: dict[str, _Entry] = {}

    def failed(self, root: str, now: float) -> None:
        """``root`` did not fit at ``now``."""
        entry = self._failure(root, now)
        entry.refusal = None

    def refused(
        self,
        root: str,
        now: float,
        message: str,
        nodes: Iterable[str] = (),
        attempt: float | None = None,
    ) -> bool:
        """The API server refused ``root``'s writes at ``now`` (``message``: what it said;
        ``nodes``: where they would have placed it; ``attempt``: when the decision they
        carried out was made: a gang's binds refused one by one are one failed attempt).
        Returns whether this refusal is news to log: the first of its attempt, in words not
        heard since the count last started over (a gang's pods refused in the same words,
        each by its name, are told once)."""
        before = self._entries.get(root)
        last = before.refusal if before is not None else None
        on = tuple(sorted(set(nodes)))
        same = last is not None and attempt is not None and last.attempt == attempt
        if before is not None and last is not None and same:
            # Another pod of the same attempt: told already.
            before.said.add(message)
            last.nodes = tuple(sorted({*last.nodes, *on}))
            last.inputs = self.inputs(root, last.nodes) if self.inputs is not None else None
            return False
        news = before is None or message not in before.said
        entry = self._failure(root, now)
        inputs = self.inputs(root, on) if self.inputs is not None else None
        entry.refusal = _Refusal(message, on, inputs, attempt)
        entry.said.add(message)
        return news

    def _failure(self, root: str, now: float) -> _Entry:
        entry = self._entries.setdefault(root, _Entry())
        entry.failures += 1
        entry.failed_at = now
        entry.next_try = now + self.delay(entry.failures)
        entry.capacity_seen = self.capacity()
        return entry

    def delay(self, failures: int) -> float:
        """Seconds to wait after the ``failures``-th failure in a row (doubling, capped)."""
        return min(
            self.settings.initial_backoff_seconds * 2.0 ** (failures - 1),
            self.settings.max_backoff_seconds,
        )

    def placed(self, root: str) -> None:
        """A decision placed ``root``: a group that did not fit before starts over; a refused
        one keeps its count until a bind goes through (it may be refused again)."""
        entry = self._entries.get(root)
        if entry is not None and entry.refusal is None:
            del self._entries[root]

    def clear(self, root: str) -> None:
        """``root`` was bound, or is gone: its next failure starts from the shortest delay."""
        self._entries.pop(root, None)

    def returned(self, before: int, after: int, decided_at: float) -> None:
        """Refused writes of a decision made at ``decided_at`` gave their room back, moving
        the capacity generation from ``before`` to ``after``: a group that failed earlier
        and has seen every change up to then did not lack that room (it was free when it
        failed), so it is not woken."""
        for entry in self._entries.values():
            if entry.capacity_seen == before and entry.failed_at < decided_at:
                entry.capacity_seen = after

    def backing_off(self, root: str, now: float) -> bool:
        entry = self._entries.get(root)
        if entry is None:
            return False
        if entry.refusal is not None:
            return now < entry.next_try and not self._changed(root, entry.refusal)
        capacity = self.capacity()
        if entry.capacity_seen != capacity:
            # Room was freed since the failure: retry after the shortest delay.
            entry.capacity_seen = capacity
            entry.next_try = min(
                entry.next_try, entry.failed_at + self.settings.initial_backoff_seconds
            )
        return now < entry.next_try

    def _changed(self, root: str, refusal: _Refusal) -> bool:
        """Whether what the refused attempt depended on changed: the count starts over."""
        if self.inputs is None or self.inputs(root, refusal.nodes) == refusal.inputs:
            return False
        del self._entries[root]
        return True

    def next_tries(self) -> list[float]:
        """When each group backing off may try again."""
        return [entry.next_try for entry in self._entries.values()]


def refusal_inputs(
    state: ClusterState,
    root: str,
    nodes: tuple[str, ...],
    contested: Callable[[str], object] | None = None,
) -> object:
    """What a refused attempt of ``root`` depends on that the watches show: its pods as the
    engine reads them (not their status, which our own reports write), its groups' specs,
    the nodes it was refused on, and (``contested``: what others wrote on a claim whose last
    write met another writer's, else None) its pods' contested claims. Claims our own
    writes touched and gave back are not compared: they changed only by our hand."""
    if root in state.groups:
        keys = state.descendants(root)
        pods = state.pods_of(keys)
        groups = tuple(state.groups[key].spec for key in keys if key in state.groups)
    else:
        record = state.pods.get(root)
        pods, groups = ([record] if record is not None else []), ()
    claims = (
        tuple((key, contested(key)) for p in pods for key in held_claims(p.pod))
        if contested is not None
        else ()
    )
    return (
        tuple((p.uid, p.request, p.error) for p in pods),
        groups,
        tuple(state.node_versions.get(node) for node in nodes),
        claims,
    )

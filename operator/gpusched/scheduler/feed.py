"""The change feed from the watch state to the engine's snapshot cache.

A cycle used to hand the engine every bound pod (`ClusterState.bound`), walk them all again
for the kubelet's GPU record (`ActualAssignments.apply`) and once more to find what changed
(`SnapshotCache`): at 50,000 bound pods that was most of a cycle, whatever had changed.
`BoundFeed` keeps the bound pods as the engine sees them, by key, and per cycle recomputes
only the keys that may have changed:

- pods whose holding came, changed or went (`ClusterState.held_changes`);
- what the ledger holds (reservations, nominations, victims whose GPUs are promised) and
  what DRA claims hold: few, so taken whole each cycle;
- pods holding whole GPUs without naming them (their assumed GPUs can move): these are
  other schedulers' pods, taken whole each cycle too;
- pods on a node whose kubelet's GPU record changed.

It hands the snapshot cache a `BoundChanges`; the cache applies those keys alone while it
was last brought up to this feed's previous answer, and reads every pod otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from gpusched.api.k8s import Node
from gpusched.engine.build import BoundChanges
from gpusched.engine.snapshot import BoundPod
from gpusched.scheduler.assignments import ActualAssignments, Mismatch
from gpusched.scheduler.changes import ChangeLog
from gpusched.scheduler.ledger import Ledger
from gpusched.scheduler.records import PodRecord


class FeedSource(Protocol):
    """What the feed reads of the watch state (`ClusterState`)."""

    @property
    def held_changes(self) -> ChangeLog: ...

    @property
    def holding_records(self) -> Mapping[str, PodRecord]: ...

    @property
    def unnamed_records(self) -> Mapping[str, PodRecord]: ...

    @property
    def ledger(self) -> Ledger: ...

    def holders_on(self, node: str) -> Iterable[str]: ...

    def pinned(self) -> dict[str, BoundPod]: ...


class _Layers:
    """One cycle's inputs besides the pods' own holdings, read whole (they are few)."""

    def __init__(self, state: FeedSource, claimed: Iterable[BoundPod]) -> None:
        ledger = self.book = state.ledger
        self.promised = ledger.promised()
        self.pinned = state.pinned()
        self.ledger: dict[str, BoundPod] = {}
        for holding in ledger.holdings():
            self.ledger.setdefault(holding.pod.key, holding)
        self.claimed: dict[str, BoundPod] = {}
        for holding in claimed:
            self.claimed.setdefault(holding.pod.key, holding)


class BoundFeed:
    """The bound pods as the engine sees them, kept up to date key by key; one per snapshot
    cache, read through `take` (see the module's docstring)."""

    def __init__(self, state: FeedSource) -> None:
        self._state = state
        self._pods: dict[str, BoundPod] = {}
        self._mark = object()
        self._promised: dict[str, str] = {}
        self._extra: set[str] = set()
        self._published: dict[str, str] = {}
        self._mismatches: list[Mismatch] = []

    def take(
        self, nodes: Mapping[str, Node], actual: ActualAssignments, claimed: Iterable[BoundPod]
    ) -> BoundChanges:
        """The bound pods now, with ``actual``'s GPUs, and what DRA claims hold
        (``claimed``, after them), and the keys changed since the last call."""
        layers = _Layers(self._state, claimed)
        published = actual.published(nodes)
        changed = self._state.held_changes.take()
        if changed is None:
            keys = None
            self._pods = self._everything(nodes, actual, published, layers)
        else:
            keys = list(self._dirty(changed, layers, published))
            for key in keys:
                now = self._compose(key, nodes, actual, published, layers)
                if now is None:
                    self._pods.pop(key, None)
                else:
                    self._pods[key] = now
        self._promised = layers.promised
        self._extra = {*layers.ledger, *layers.claimed}
        self._published = published
        since, self._mark = self._mark, object()
        return BoundChanges(self._pods, keys, since, self._mark)

    def take_mismatches(self) -> list[Mismatch]:
        """Bound pods the kubelet gave other GPUs than gpusched chose, found since the last
        call (each once)."""
        found, self._mismatches = self._mismatches, []
        return found

    def _dirty(
        self, changed: list[str], layers: _Layers, published: Mapping[str, str]
    ) -> dict[str, None]:
        """The keys to compose again, in a deterministic order: those the watch changed
        first, then the rest sorted."""
        promised, promised_before = layers.promised, self._promised
        seen = self._published
        others = {*self._extra, *layers.ledger, *layers.claimed, *self._state.unnamed_records}
        others.update(
            key
            for key in promised_before.keys() | promised.keys()
            if promised_before.get(key) != promised.get(key)
        )
        for name in seen.keys() | published.keys():
            if seen.get(name) != published.get(name):
                others.update(self._state.holders_on(name))
        dirty = dict.fromkeys(changed)
        dirty.update(dict.fromkeys(sorted(others)))
        return dirty

    def _everything(
        self,
        nodes: Mapping[str, Node],
        actual: ActualAssignments,
        published: Mapping[str, str],
        layers: _Layers,
    ) -> dict[str, BoundPod]:
        found = self._mismatches
        pods: dict[str, BoundPod] = {}
        for key, record in self._state.holding_records.items():
            holding = self._held(key, record, layers)
            if holding is not None:
                pods[key] = actual.adjust(nodes, published, holding, found)
        for key, holding in layers.ledger.items():
            if key not in pods:
                pods[key] = actual.adjust(nodes, published, holding, found)
        for key, holding in layers.claimed.items():
            pods.setdefault(key, holding)
        return pods

    def _compose(
        self,
        key: str,
        nodes: Mapping[str, Node],
        actual: ActualAssignments,
        published: Mapping[str, str],
        layers: _Layers,
    ) -> BoundPod | None:
        """What the engine sees of ``key``: its own holding first, then the ledger's, then
        what its claims hold (the order `_everything` gives them precedence in)."""
        record = self._state.holding_records.get(key)
        holding = None if record is None else self._held(key, record, layers)
        if holding is None:
            holding = layers.ledger.get(key)
        if holding is not None:
            return actual.adjust(nodes, published, holding, self._mismatches)
        return layers.claimed.get(key)

    @staticmethod
    def _held(key: str, record: PodRecord, layers: _Layers) -> BoundPod | None:
        holding = record.holding
        if holding is None:
            return None
        if layers.promised.get(key) == record.uid:
            return layers.book.gpus_promised(key, holding)
        return layers.pinned.get(record.uid, holding)

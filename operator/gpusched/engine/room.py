"""How much room a domain has for a group's pods, counted before any trial: `Room` ranks a
PodGroup's domains and refuses those that cannot hold its minimum; `ChildBounds` does the same
for a CompositePodGroup's child groups."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

import numpy as np

from gpusched.api.config import NumaPolicy
from gpusched.engine.domains import Domain, copies, subdomains
from gpusched.engine.groups import GroupKind, GroupSpec
from gpusched.engine.nodes import IntArray
from gpusched.engine.request import PodRequest
from gpusched.engine.result import ChildBound
from gpusched.engine.snapshot import Snapshot


class Room:
    """How much of a set of pods a domain holds, by every resource they request: per pod
    shape, the copies that fit on its nodes now (`copies`: CPU, memory, GPUs, extended
    resources and the node's constraints at once)."""

    def __init__(self, snapshot: Snapshot, pods: Sequence[PodRequest], numa: NumaPolicy) -> None:
        shapes: dict[tuple[object, ...], list[PodRequest]] = defaultdict(list)
        for pod in pods:
            shapes[pod.shape_key].append(pod)
        self.total = len(pods)
        self.per_shape = [(len(same), copies(snapshot, same[0], numa)) for same in shapes.values()]

    def estimate(self, domain: Domain) -> int:
        """An optimistic count of the pods that fit in ``domain`` at once."""
        return sum(min(n, int(c[domain.mask].sum())) for n, c in self.per_shape)

    def tightest_first(self, domain: Domain) -> tuple[int, int, str]:
        """Sort key: domains that take every pod first, the least room left over first (so
        big domains stay free for big gangs), measured uncapped; then the domains that take
        the most; the name last."""
        estimate = self.estimate(domain)
        if estimate < self.total:
            return (1, -estimate, domain.name)
        room = sum(int(c[domain.mask].sum()) for _, c in self.per_shape)
        return (0, room, domain.name)


class _ChildKind(NamedTuple):
    """Children with equal kinds are interchangeable for `ChildBounds`."""

    topology_key: str | None
    needed: int
    shapes: tuple[str, ...]


class ChildBounds:
    """An upper bound on how many children of a CompositePodGroup fit in a domain at once, so
    domains that cannot reach ``minGroupCount`` are rejected before any trial.

    Per node, a child's pods fit at most ``cap`` times (the most copies of any of its pod
    shapes). A child with topology key k fits in a sub-domain only if the sub-domain's total
    cap reaches the pods it needs, and identical children share those sub-domains: ``n``
    identical children fit at most ``min(n, Σ_sub ⌊cap_sub / needed⌋)`` times. Composite
    children are not bounded (counted as fitting)."""

    def __init__(
        self,
        snapshot: Snapshot,
        children: list[GroupSpec],
        pods: Mapping[str, Sequence[PodRequest]],
        needed: Callable[[GroupSpec], int],
        numa: NumaPolicy,
    ) -> None:
        """``pods``: each child's pending pods; ``needed``: the pods each child must place;
        ``numa``: the NUMA rule their copies are counted under."""
        self.snapshot = snapshot
        self.numa = numa
        self.pods = pods
        self.kinds: dict[_ChildKind, list[GroupSpec]] = defaultdict(list)
        self.unbounded = 0
        for child in children:
            mine = pods.get(child.key, [])
            if child.kind is GroupKind.COMPOSITE or not mine or child.segment_size:
                # A segmented child spans several domains of its key: not bounded per domain.
                self.unbounded += 1
                continue
            shapes = tuple(sorted({repr(p.shape_key) for p in mine}))
            kind = _ChildKind(child.topology_key, needed(child), shapes)
            self.kinds[kind].append(child)
        self._caps: dict[_ChildKind, IntArray] = {}

    def _cap(self, kind: _ChildKind, child: GroupSpec) -> IntArray:
        cap = self._caps.get(kind)
        if cap is None:
            pods = self.pods[child.key]
            per_shape = {p.shape_key: p for p in pods}.values()
            cap = np.max(np.stack([copies(self.snapshot, p, self.numa) for p in per_shape]), axis=0)
            self._caps[kind] = cap
        return cap

    def _slots(self, kind: _ChildKind, child: GroupSpec, domain: Domain) -> int:
        needed = kind.needed
        if needed == 0:
            return len(self.kinds[kind])
        cap = self._cap(kind, child)
        if child.topology_key is None:
            return int(cap[domain.mask].sum()) // needed
        subs = subdomains(self.snapshot, domain, child.topology_key)
        return sum(int(cap[sub.mask].sum()) // needed for sub in subs)

    def at_most(self, domain: Domain) -> int:
        total = self.unbounded
        for kind, members in self.kinds.items():
            total += min(len(members), self._slots(kind, members[0], domain))
        return total

    def describe(self, domain: Domain) -> tuple[ChildBound, ...]:
        """Per kind of child gang, how many ``domain`` could hold."""
        return tuple(
            ChildBound(
                len(members),
                kind.needed,
                members[0].topology_key,
                min(self._slots(kind, members[0], domain), len(members)),
            )
            for kind, members in self.kinds.items()
        )

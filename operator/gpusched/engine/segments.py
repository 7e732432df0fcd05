"""Segments: a gang split into segments of ``segmentSize`` pods, each inside one domain of the
group's topology key (an NVLink domain, typically), all or nothing across segments.

Phases for one segmented PodGroup inside its parent's domain:
1. Enclosing domains (`enclosing`): where all the segments should land together, closest
   first — the domains of each ``topologyLevels`` key above the segment key, innermost level
   first (a block before a zone), then the parent's domain itself. Within a level, domains
   that cannot hold the segments (counted per segment domain) are left out, the rest are
   ordered tightest-fit first, as a PodGroup's domains are.
2. Trial in one enclosing domain (`place_segments`): the pods a bound segment lacks go to its
   domain first; then each new segment, pod by pod with `pick_node`, in the tightest segment
   domain that takes it whole (a segment that does not fit is rolled back and the next domain
   tried). The gang is placed when its minimum is; otherwise everything is rolled back.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from gpusched.api.config import NumaPolicy
from gpusched.engine.domains import Domain, copies
from gpusched.engine.nodes import IntArray
from gpusched.engine.pick import pick_node
from gpusched.engine.request import PodRequest
from gpusched.engine.result import SegmentCount, SegmentPlaced
from gpusched.engine.room import Room
from gpusched.engine.scoring import Scoring
from gpusched.engine.snapshot import Snapshot

Subdomains = Callable[[Domain, str], list[Domain]]
"""The planner's memoised `gpusched.engine.domains.subdomains`."""


def enclosing_keys(snapshot: Snapshot, key: str) -> tuple[str, ...]:
    """The ``topologyLevels`` keys segments of ``key`` are kept together in, innermost first:
    the levels above ``key`` when it is listed, else every level."""
    levels = snapshot.levels
    above = levels[: levels.index(key)] if key in levels else levels
    return tuple(reversed(above))


def enclosing(
    snapshot: Snapshot,
    key: str,
    size: int,
    pods: Sequence[PodRequest],
    parent: Domain,
    subdomains: Subdomains,
    segments: int,
    numa: NumaPolicy,
) -> list[Domain]:
    """Candidate domains for ``segments`` segments of ``size`` ``pods`` in domains of
    ``key``, all together, closest first; the parent's domain last. A domain with the same
    nodes as a closer one is tried once."""
    found: list[Domain] = []
    seen: set[bytes] = set()
    per_node = _copies(snapshot, pods, numa)
    room = Room(snapshot, pods, numa)
    for level_key in enclosing_keys(snapshot, key):
        level = []
        for domain in subdomains(parent, level_key):
            mask = domain.mask.tobytes()
            if mask in seen:
                continue
            if _segment_room(per_node, domain, subdomains, key, size) < segments:
                continue
            seen.add(mask)
            level.append((room.tightest_first(domain), domain))
        found.extend(d for _, d in sorted(level, key=lambda item: item[0]))
    if parent.mask.tobytes() not in seen:
        found.append(parent)
    return found


def _copies(snapshot: Snapshot, pods: Sequence[PodRequest], numa: NumaPolicy) -> IntArray:
    """Per node, the copies of the group's largest pod that fit now."""
    biggest = max(pods, key=lambda p: (p.gpu_demand_milli, p.key))
    return copies(snapshot, biggest, numa)


def _segment_room(
    per_node: IntArray, domain: Domain, subdomains: Subdomains, key: str, size: int
) -> int:
    """How many whole segments the segment domains inside ``domain`` could hold at most."""
    return sum(int(per_node[sub.mask].sum()) // size for sub in subdomains(domain, key))


@dataclass(slots=True)
class SegmentTrial:
    """What one trial in an enclosing domain placed."""

    placed: int
    failed: list[PodRequest]
    segments: list[SegmentPlaced]
    count: SegmentCount


def place_segments(
    snapshot: Snapshot,
    scoring: Scoring,
    key: str,
    size: int,
    pods: Sequence[PodRequest],
    bound_nodes: Sequence[int],
    domain: Domain,
    subdomains: Subdomains,
) -> SegmentTrial:
    """Places ``pods`` (sorted) as segments of ``size`` inside ``domain``, each in one
    domain of ``key``, assuming them on ``snapshot``; the caller rolls back when too few were
    placed."""
    parts = subdomains(domain, key)
    queue = list(pods)
    placed: list[SegmentPlaced] = []
    # Segments already started by bound pods: what each lacks goes to its own domain first.
    started = Counter(_index_of(parts, node) for node in bound_nodes)
    for index, count in sorted((i, c) for i, c in started.items() if i is not None):
        lacking = (-count) % size
        taken = _fill(snapshot, scoring, queue[:lacking], parts[index])
        del queue[: len(taken)]
        if taken:
            placed.append(SegmentPlaced(parts[index].name, tuple(p.key for p in taken)))
    failed: list[PodRequest] = []
    wanted = whole = 0
    while queue:
        chunk, queue = queue[:size], queue[size:]
        wanted += 1
        where = _segment(snapshot, scoring, chunk, parts)
        if where is None:
            failed.extend(chunk)
            continue
        whole += 1
        placed.append(SegmentPlaced(where.name, tuple(p.key for p in chunk)))
    total = sum(len(s.pods) for s in placed)
    return SegmentTrial(total, failed, placed, SegmentCount(whole, wanted, size, key))


def _index_of(parts: list[Domain], node: int) -> int | None:
    for index, part in enumerate(parts):
        if part.mask[node]:
            return index
    return None


def _fill(
    snapshot: Snapshot, scoring: Scoring, pods: Sequence[PodRequest], domain: Domain
) -> list[PodRequest]:
    """Assumes as many of ``pods`` as fit in ``domain``, in order; the ones placed."""
    taken = []
    for pod in pods:
        choice = pick_node(snapshot, pod, scoring, domain.mask)
        if choice is None:
            break
        snapshot.assume(pod, choice.node, choice.gpus)
        taken.append(pod)
    return taken


def _segment(
    snapshot: Snapshot, scoring: Scoring, chunk: Sequence[PodRequest], parts: list[Domain]
) -> Domain | None:
    """Places ``chunk`` whole in the tightest of ``parts`` that takes it; None (nothing
    assumed) when none does."""
    room = Room(snapshot, chunk, scoring.numa)
    ranked = sorted(
        (room.tightest_first(part), index)
        for index, part in enumerate(parts)
        if room.estimate(part) >= len(chunk)
    )
    for _, index in ranked:
        checkpoint = snapshot.checkpoint()
        if len(_fill(snapshot, scoring, chunk, parts[index])) == len(chunk):
            return parts[index]
        snapshot.rollback(checkpoint)
    return None


def segments_needed(needed: int, size: int) -> int:
    """Whole segments a gang needing ``needed`` more pods must place."""
    return int(np.ceil(needed / size)) if needed else 0

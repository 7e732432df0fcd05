"""Replaying the openb trace (`gpusched.offline.openb`) with the published protocol (FGD,
ATC'23), in four phases:

1. arrivals: pods sorted by name, shuffled with the seed, then inflated with pods drawn
   uniformly with replacement until the GPU request would pass 130 % of capacity (or, for a
   trace already above, thinned at random to it) — `arrivals`;
2. each pod is placed once, by the operator's engine (`pick_node` + `Snapshot.assume`), or
   fails: no queue, retry, preemption or departure — `replay`;
3. after each pod: arrived load %, GPU allocation rate %, FGD's fragmentation amount % — a
   `Replay` record;
4. the headline: unallocated GPU % when the arrived load reaches 100 % — `Replay.unallocated`.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from gpusched.api.config import SchedulerConfig
from gpusched.api.topology import LinkTier
from gpusched.engine import fragmentation
from gpusched.engine.gpushape import worst_tier
from gpusched.engine.pick import pick_node
from gpusched.engine.policy import Policy
from gpusched.engine.request import WHOLE_GPU_MILLI, PodRequest
from gpusched.engine.scoring import Scoring
from gpusched.engine.snapshot import Snapshot
from gpusched.engine.workload import TaskType
from gpusched.offline.openb import Trace

INFLATION = 1.30
"""Arrivals stop before the GPU request passes this share of capacity (the published 130 %)."""
HEADLINE_LOAD = 100.0
"""Arrived load (% of GPU capacity) at which the headline figure is read."""


def gpu_request(pod: PodRequest) -> int:
    """The pod's GPU request in milli-GPU (num_gpu × gpu_milli)."""
    return pod.gpu_demand_milli


def arrivals(pods: Sequence[PodRequest], capacity: int, seed: int) -> list[PodRequest]:
    """The published arrival sequence for ``seed``: ``pods`` sorted by name, shuffled, then
    inflated with pods drawn uniformly with replacement from the original list until the next
    one would take the total GPU request past 130 % of ``capacity`` (milli-GPU). A trace whose
    GPU request already passes 130 % is thinned instead: pods removed at random until it no
    longer does. Drawn copies get keys ``<key>#<n>`` so that every arrival is its own pod."""
    rng = np.random.default_rng(seed)
    ordered = sorted(pods, key=lambda p: p.key)
    sequence = [ordered[i] for i in rng.permutation(len(ordered))]
    limit = INFLATION * capacity
    total = sum(gpu_request(p) for p in sequence)
    if total > limit:
        return _thinned(sequence, total, limit, rng)
    if not any(gpu_request(p) for p in ordered):
        return sequence
    for copy in itertools.count(1):
        drawn = ordered[int(rng.integers(len(ordered)))]
        if total + gpu_request(drawn) > limit:
            break
        total += gpu_request(drawn)
        sequence.append(_renamed(drawn, f"{drawn.key}#{copy}"))
    return sequence


def _thinned(
    sequence: list[PodRequest], total: int, limit: float, rng: np.random.Generator
) -> list[PodRequest]:
    keep = np.ones(len(sequence), dtype=np.bool_)
    for index in rng.permutation(len(sequence)):
        if total <= limit:
            break
        keep[index] = False
        total -= gpu_request(sequence[int(index)])
    return [p for p, k in zip(sequence, keep, strict=True) if k]


def _renamed(pod: PodRequest, key: str) -> PodRequest:
    return PodRequest(
        key=key,
        resources=pod.resources,
        gpus=pod.gpus,
        gpu_milli=pod.gpu_milli,
        required_terms=pod.required_terms,
        created=pod.created,
    )


@dataclass(slots=True, kw_only=True)
class Replay:
    """One run's per-pod record, in arrival order."""

    arrived_pct: npt.NDArray[np.float64]
    """GPU request of every pod submitted so far, failed ones included, % of capacity."""
    allocated_pct: npt.NDArray[np.float64]
    """Allocated milli-GPU, % of capacity."""
    fragmented_pct: npt.NDArray[np.float64]
    """FGD's fragmentation amount, % of capacity."""
    placed: npt.NDArray[np.bool_]
    seconds: float
    """Wall time of the placement loop (decisions, assumes and the records)."""
    multi_gpu: int = 0
    """Multi-GPU pods placed on nodes with a known topology."""
    best_tier: int = 0
    """Of those, the ones whose GPUs have the best worst-link tier the node's free GPUs offered."""
    tier_misses: list[str] = field(default_factory=list)

    def at_load(self, load: float, series: npt.NDArray[np.float64]) -> float:
        """``series`` after the last pod that keeps the arrived load at or below ``load`` %."""
        last = int(np.searchsorted(self.arrived_pct, load, side="right")) - 1
        return float(series[last]) if last >= 0 else 0.0

    @property
    def unallocated(self) -> float:
        """The headline: 100 − allocation rate % when the arrived load reaches 100 %."""
        return 100.0 - self.at_load(HEADLINE_LOAD, self.allocated_pct)


def replay(
    base: Snapshot,
    sequence: Sequence[PodRequest],
    config: SchedulerConfig,
    workload: tuple[TaskType, ...],
) -> Replay:
    """Submits ``sequence`` one pod at a time to a copy of ``base`` under ``config``: each pod
    is placed once by `pick_node` (the operator's per-pod decision) or fails."""
    snapshot = base.copy()
    scoring = Scoring(Policy.of(config), workload)
    capacity = float(WHOLE_GPU_MILLI * int(snapshot.gpu_offset[-1]))
    count = len(sequence)
    arrived, allocated, fragmented = np.zeros(count), np.zeros(count), np.zeros(count)
    placed = np.zeros(count, dtype=np.bool_)
    request = allocation = 0
    tiers = _TierCount()
    start = time.perf_counter()
    for i, pod in enumerate(sequence):
        request += gpu_request(pod)
        choice = pick_node(snapshot, pod, scoring)
        if choice is not None:
            if pod.gpus > 1:
                tiers.add(snapshot, pod, choice.node, choice.gpus)
            snapshot.assume(pod, choice.node, choice.gpus)
            allocation += gpu_request(pod)
            placed[i] = True
        arrived[i], allocated[i] = request, allocation
        fragmented[i] = float(fragmentation.node_fragmentation(snapshot, workload).sum())
    seconds = time.perf_counter() - start
    scale = 100.0 / capacity
    return Replay(
        arrived_pct=arrived * scale,
        allocated_pct=allocated * scale,
        fragmented_pct=fragmented * scale,
        placed=placed,
        seconds=seconds,
        multi_gpu=tiers.multi_gpu,
        best_tier=tiers.best,
        tier_misses=tiers.misses,
    )


@dataclass(slots=True)
class _TierCount:
    """Counts multi-GPU placements on the best link tier the node's free GPUs offered (all
    subsets of the free GPUs of the pod's size, tried before the pod is assumed)."""

    multi_gpu: int = 0
    best: int = 0
    misses: list[str] = field(default_factory=list)

    def add(self, snapshot: Snapshot, pod: PodRequest, node: int, gpus: tuple[int, ...]) -> None:
        info = snapshot.nodes[node]
        if not info.topology_known:
            return
        free = [g for g in range(info.gpu_count) if snapshot.free_mask[node] >> g & 1]
        offered = min(
            (worst_tier(info.shape, subset) for subset in itertools.combinations(free, pod.gpus)),
            default=LinkTier.UNKNOWN,
        )
        got = worst_tier(info.shape, gpus)
        self.multi_gpu += 1
        if got <= offered:
            self.best += 1
        elif len(self.misses) < 5:
            self.misses.append(f"{pod.key} on {info.name}: {got.name}, {offered.name} offered")


# ----- policies --------------------------------------------------------------------------------

_OFF: dict[str, Any] = {
    "binpack": {"weight": 0},
    "gpuWeight": 0,
    "topologyWeight": 0,
    "leastAllocatedWeight": 0,
    "fragmentationWeight": 0,
}


def _baseline(scoring: Mapping[str, Any]) -> dict[str, Any]:
    return {**_OFF, **scoring, "tieBreak": {"order": "shuffled"}}


POLICIES: dict[str, dict[str, Any]] = {
    "random": {**_OFF, "tieBreak": {"order": "random"}},
    "dot-product": _baseline({"dotProductWeight": 1}),
    "packing": _baseline({"packingWeight": 1}),
    "best-fit": _baseline({"bestFitWeight": 1}),
    "fgd": _baseline(
        {
            "fragmentationWeight": 1,
            "fragmentationStep": 1,
            "fragmentationShareGpu": "leastFragmentation",
        }
    ),
    "volcano-binpack": _baseline({"binpack": {"weight": 1}}),
    "least-allocated": _baseline({"leastAllocatedWeight": 1}),
    "seed-gpu": _baseline({"gpuWeight": 1}),
    "gpusched": {},
}
"""Scoring sections of the benchmarked policies (`SchedulerConfig` ``scoring``, the config
file's words). ``gpusched`` is the default configuration, untouched. The baselines switch every
default score off and turn theirs on. They break ties as the protocol does, by a seeded random
node order, one per run (seeded with the run's seed), except ``random``, which scores every
node alike and draws a fresh order for each pod."""
PUBLISHED_NAMES = {
    "random": "01-Random",
    "dot-product": "02-DotProd",
    "packing": "04-GpuPacking",
    "best-fit": "05-BestFit",
    "fgd": "06-FGD",
}
"""Our policy → the FGD artifact's policy name, where the artifact has one."""


def policy_config(name: str, seed: int) -> SchedulerConfig:
    """The `SchedulerConfig` of a benchmarked policy for the run with ``seed``."""
    scoring = dict(POLICIES[name])
    if "tieBreak" in scoring:
        scoring["tieBreak"] = {**scoring["tieBreak"], "seed": seed}
    return SchedulerConfig.model_validate({"scoring": scoring} if scoring else {})


def run(trace: Trace, policy: str, seed: int) -> Replay:
    """One run of the published protocol: ``policy`` on ``trace`` with ``seed``."""
    sequence = arrivals(trace.pods, trace.capacity, seed)
    return replay(trace.snapshot, sequence, policy_config(policy, seed), trace.workload)

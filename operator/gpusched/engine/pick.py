"""Placing one pod: filter all nodes, rank them with the vectorised scores, then choose GPUs
inside the best few and add the GPU-level scores.

GPU-level scores (topology, the three GPU dimensions) need the exact GPU set, which costs
more than a vectorised score, so they are computed for the ``GPU_CANDIDATES`` best nodes by
the node-level scores only — the same trade kube-scheduler makes with
percentageOfNodesToScore. Ties go to the node first in ``scoring.tieBreak``'s order: node
name order by default, or a seeded shuffle (fixed, or fresh for every pod).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpusched.api.config import NumaPolicy, ShareGpu, TieBreakOrder
from gpusched.engine import partitions, scores
from gpusched.engine.fit import feasible_nodes
from gpusched.engine.gpuset import GpuChoice, choose_gpus
from gpusched.engine.nodes import BoolArray, IntArray
from gpusched.engine.request import PodRequest
from gpusched.engine.scoring import Scoring
from gpusched.engine.snapshot import Snapshot

GPU_CANDIDATES = 16


@dataclass(frozen=True, slots=True)
class NodeChoice:
    node: int
    gpus: tuple[int, ...]
    score: float


def pick_node(
    snapshot: Snapshot, pod: PodRequest, scoring: Scoring, allowed: BoolArray | None = None
) -> NodeChoice | None:
    """The best node (and GPUs) for ``pod`` among ``allowed`` nodes, by ``scoring``; ``None``
    if none fits."""
    candidates = feasible_nodes(snapshot, pod, scoring.numa, allowed)
    if candidates.size == 0:
        return None
    base = scores.node_scores(snapshot, pod, candidates, scoring)
    if not pod.wants_gpu:
        best = _first(snapshot, scoring, pod, candidates, base)
        return NodeChoice(int(candidates[best]), (), float(base[best]))
    shares = _fragmentation_shares(snapshot, scoring, pod, candidates)
    most_bonus = _most_gpu_bonus(snapshot, scoring, pod)
    if not _gpu_scores_vary(scoring, pod):
        # GPU-level scores add the same to every node: the first in order wins if it takes
        # the pod (it always does when the filters and the GPU choice agree).
        first = _first(snapshot, scoring, pod, candidates, base)
        choice = _with_gpus(
            snapshot,
            scoring,
            pod,
            int(candidates[first]),
            float(base[first]),
            _share(shares, first),
        )
        if choice is not None:
            return choice
    best_choice: NodeChoice | None = None
    tried = 0
    for position in _order(snapshot, scoring, pod, candidates, base):
        if best_choice is not None and base[position] + most_bonus <= best_choice.score:
            break  # no later node can catch up, and ties go to the earlier one
        choice = _with_gpus(
            snapshot,
            scoring,
            pod,
            int(candidates[position]),
            float(base[position]),
            _share(shares, position),
        )
        if choice is None:
            continue
        if best_choice is None or choice.score > best_choice.score:
            best_choice = choice
        tried += 1
        if tried >= GPU_CANDIDATES:
            break
    return best_choice


def _share(shares: BoolArray | None, position: int) -> BoolArray | None:
    return shares[position] if shares is not None else None


def _first(
    snapshot: Snapshot,
    scoring: Scoring,
    pod: PodRequest,
    candidates: IntArray,
    base: npt.NDArray[np.float64],
) -> int:
    """The position of the best candidate: the highest score, the first in tie-break order."""
    top = np.flatnonzero(base == base.max())
    if top.size == 1 or scoring.config.tie_break.order is TieBreakOrder.NAME:
        return int(top[0])  # candidates are in node index order, which is name order
    return int(top[np.argmin(_tie_keys(snapshot, scoring, pod, candidates[top]))])


def _order(
    snapshot: Snapshot,
    scoring: Scoring,
    pod: PodRequest,
    candidates: IntArray,
    base: npt.NDArray[np.float64],
) -> IntArray:
    """Positions of ``candidates`` best score first, equal scores in tie-break order."""
    if scoring.config.tie_break.order is TieBreakOrder.NAME:
        by_name: IntArray = np.argsort(-base, kind="stable")
        return by_name
    by_key: IntArray = np.lexsort((_tie_keys(snapshot, scoring, pod, candidates), -base))
    return by_key


def _tie_keys(
    snapshot: Snapshot, scoring: Scoring, pod: PodRequest, nodes: IntArray
) -> npt.NDArray[np.uint64]:
    """Per node, its place in the tie-break order (lower first); not for ``name`` order."""
    tie_break = scoring.config.tie_break
    if tie_break.order is TieBreakOrder.INTERLEAVED:
        return _ranks(snapshot, INTERLEAVED)[nodes]
    keys = _ranks(snapshot, tie_break.seed)[nodes]
    if tie_break.order is TieBreakOrder.RANDOM:
        keys = _mix(keys ^ _pod_key(pod.key, tie_break.seed))
    return keys


INTERLEAVED = -1
"""`_ranks`' seed for the interleaved order (seeds are >= 0)."""
PRODUCT_LABEL = "nvidia.com/gpu.product"
"""GPU feature discovery's GPU model label: part of a node's shape for the interleaved order."""


def _ranks(snapshot: Snapshot, seed: int) -> npt.NDArray[np.uint64]:
    """Per node, its rank in a static order (memoised with the snapshot's static facts, so
    every copy shares it): `INTERLEAVED`, or a seeded shuffle of the node names."""
    per_seed: dict[int, npt.NDArray[np.uint64]] = snapshot.derived.setdefault("tie ranks", {})
    ranks = per_seed.get(seed)
    if ranks is None:
        if seed == INTERLEAVED:
            order = _interleaved(snapshot)
        else:
            hashes = [int(_pod_key(info.name, seed)) for info in snapshot.nodes]
            order = sorted(range(len(hashes)), key=lambda n: (hashes[n], n))
        ranks = np.zeros(len(order), dtype=np.uint64)
        ranks[order] = np.arange(len(order), dtype=np.uint64)
        per_seed[seed] = ranks
    return ranks


def _interleaved(snapshot: Snapshot) -> list[int]:
    """Node indices in name order within each shape (GPU model, GPU count, allocatable), the
    shapes interleaved: the node at position i of a shape of n nodes sorts at (i + ½) / n, then
    by name. One shape: plain name order."""
    shapes: dict[tuple[object, ...], list[int]] = {}
    for node, info in enumerate(snapshot.nodes):
        resources = tuple(int(v) for v in snapshot.allocatable[node])
        shape = (info.gpu_count, info.labels.get(PRODUCT_LABEL, ""), resources)
        shapes.setdefault(shape, []).append(node)
    placed = [
        ((position + 0.5) / len(members), node)
        for members in shapes.values()
        for position, node in enumerate(members)
    ]
    return [node for _, node in sorted(placed)]


def _pod_key(name: str, seed: int) -> np.uint64:
    digest = hashlib.blake2b(name.encode(), digest_size=8, salt=seed.to_bytes(16, "little"))
    return np.uint64(int.from_bytes(digest.digest(), "little"))


def _mix(keys: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """SplitMix64's finaliser: every input bit moves about half the output bits, so one pod's
    order of the nodes tells nothing about the next pod's."""
    keys = (keys ^ (keys >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    keys = (keys ^ (keys >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    mixed: npt.NDArray[np.uint64] = keys ^ (keys >> np.uint64(31))
    return mixed


def _fragmentation_shares(
    snapshot: Snapshot, scoring: Scoring, pod: PodRequest, candidates: IntArray
) -> BoolArray | None:
    """With the fragmentation score on, a share may only take a GPU of the best fragmentation
    score on its node (FGD's choice), so the node's score and its GPU agree: per candidate and
    GPU, whether it may; ``None`` when the score is off."""
    config = scoring.config
    if config.fragmentation_share_gpu is not ShareGpu.LEAST_FRAGMENTATION:
        return None
    if not (pod.gpu_milli and config.fragmentation_weight and scoring.workload):
        return None
    return scores.best_share_gpus(snapshot, pod, candidates, scoring)


def _most_gpu_bonus(snapshot: Snapshot, scoring: Scoring, pod: PodRequest) -> float:
    """The most the GPU-level scores can add for ``pod`` on any node: candidates whose
    node-level score plus this cannot beat the best so far are not looked at. Whole GPUs are
    free GPUs (no pods, no apps), so for a single whole GPU without telemetry every node gets
    exactly this bonus and the first candidate wins at once."""
    config = scoring.config
    weights = config.gpu
    continuity = weights.memory_continuity if snapshot.has_memory_telemetry else 0.0
    same_app = weights.app_affinity if pod.gpu_milli and pod.app is not None else 0.0
    dimensions = continuity + same_app + weights.fewer_pods
    return config.topology_weight * scores.MAX_NODE_SCORE + config.gpu_weight * dimensions


def _gpu_scores_vary(scoring: Scoring, pod: PodRequest) -> bool:
    """Whether the GPU-level scores can differ between nodes for ``pod``: topology only for
    two GPUs or more (one GPU always scores 100), the GPU dimensions whenever weighted."""
    config = scoring.config
    return bool(config.gpu_weight or (config.topology_weight and pod.gpus > 1))


def _with_gpus(
    snapshot: Snapshot,
    scoring: Scoring,
    pod: PodRequest,
    node: int,
    base: float,
    among: BoolArray | None = None,
) -> NodeChoice | None:
    config = scoring.config
    if pod.gpu_milli:
        gpu = choose_share(snapshot, pod, node, among)
        if gpu is None:
            return None
        gpus: tuple[int, ...] = (gpu,)
        choice = None
    else:
        choice = _choose_whole(snapshot, pod, node, scoring.numa)
        if choice is None:
            return None
        gpus = choice.gpus
    score = base
    if config.topology_weight:
        score += config.topology_weight * scores.topology(choice)
    if config.gpu_weight:
        score += config.gpu_weight * scores.gpu_dimensions(snapshot, pod, node, gpus, config.gpu)
    return NodeChoice(node, gpus, score)


def _choose_whole(
    snapshot: Snapshot, pod: PodRequest, node: int, numa: NumaPolicy
) -> GpuChoice | None:
    info = snapshot.nodes[node]
    memory = None
    if snapshot.has_memory_telemetry:
        start, stop = int(snapshot.gpu_offset[node]), int(snapshot.gpu_offset[node + 1])
        free_memory = snapshot.gpu_mem_free[start:stop]
        memory = None if np.isnan(free_memory).all() else [float(m) for m in free_memory]
    held = info.devices.partitions if info.devices is not None else None
    if held is not None and pod.devices is not None:
        return _in_partition(snapshot, pod, node, held, memory, numa)
    return choose_gpus(
        info.shape,
        snapshot.free_mask[node],
        pod.gpus,
        numa,
        memory,
    )


def _in_partition(
    snapshot: Snapshot,
    pod: PodRequest,
    node: int,
    held: partitions.Partitions,
    memory: list[float] | None,
    numa: NumaPolicy,
) -> GpuChoice | None:
    """On a Fabric Manager partitioned node: the best free partition of the pod's size, by
    the same ranking as any GPU set (the driver prepares nothing else)."""
    info = snapshot.nodes[node]
    best: GpuChoice | None = None
    for mask in partitions.free_partitions(held, pod.gpus, snapshot.free_mask[node]):
        found = choose_gpus(info.shape, mask, pod.gpus, numa, memory)
        if found is not None and (best is None or found.link_cost < best.link_cost):
            best = found
    return best


def choose_share(
    snapshot: Snapshot, pod: PodRequest, node: int, among: BoolArray | None = None
) -> int | None:
    """The GPU for a GPU-sharing pod: best fit (least milli-GPU left over), then a GPU already
    running the same ``app``, then the lowest index. Whole free GPUs are kept for whole-GPU pods
    by best fit itself. ``among`` (per GPU of the node) limits the choice when given."""
    best: tuple[int, int, int] | None = None
    base = int(snapshot.gpu_offset[node])
    for gid in snapshot.node_gpus(node):
        free = int(snapshot.gpu_free[gid])
        if not snapshot.gpu_usable[gid] or free < pod.gpu_milli:
            continue
        if among is not None and not among[gid - base]:
            continue
        same_app = pod.app is not None and pod.app in snapshot.gpu_apps.get(gid, {})
        key = (free - pod.gpu_milli, 0 if same_app else 1, gid - base)
        if best is None or key < best:
            best = key
    return None if best is None else best[2]

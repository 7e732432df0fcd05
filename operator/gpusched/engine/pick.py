"""Placing one pod: filter all nodes, rank them with the vectorised scores, then choose GPUs
inside the best few and add the GPU-level scores.

GPU-level scores (topology, the seed's GPU dimensions) need the exact GPU set, which costs
more than a vectorised score, so they are computed for the ``GPU_CANDIDATES`` best nodes by
the node-level scores only — the same trade kube-scheduler makes with
percentageOfNodesToScore. Ties go to the lower node index, which is the node name order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpusched.engine import scores
from gpusched.engine.fit import feasible
from gpusched.engine.gpuset import GpuChoice, choose_gpus
from gpusched.engine.request import PodRequest
from gpusched.engine.snapshot import BoolArray, Snapshot

GPU_CANDIDATES = 16


@dataclass(frozen=True, slots=True)
class NodeChoice:
    node: int
    gpus: tuple[int, ...]
    score: float
    gpu_choice: GpuChoice | None = None


def pick_node(
    snapshot: Snapshot, pod: PodRequest, allowed: BoolArray | None = None
) -> NodeChoice | None:
    """The best node (and GPUs) for ``pod`` among ``allowed`` nodes; ``None`` if none fits."""
    candidates = np.flatnonzero(feasible(snapshot, pod, allowed))
    if candidates.size == 0:
        return None
    base = scores.node_scores(snapshot, pod, candidates, snapshot.workload)
    if not pod.wants_gpu:
        best = int(np.argmax(base))
        return NodeChoice(int(candidates[best]), (), float(base[best]))
    order = np.argsort(-base, kind="stable")
    most_bonus = _most_gpu_bonus(snapshot, pod)
    best_choice: NodeChoice | None = None
    tried = 0
    for position in order:
        if best_choice is not None and base[position] + most_bonus <= best_choice.score:
            break  # no later node can catch up, and ties go to the earlier one
        choice = _with_gpus(snapshot, pod, int(candidates[position]), float(base[position]))
        if choice is None:
            continue
        if best_choice is None or choice.score > best_choice.score:
            best_choice = choice
        tried += 1
        if tried >= GPU_CANDIDATES:
            break
    return best_choice


def _most_gpu_bonus(snapshot: Snapshot, pod: PodRequest) -> float:
    """The most the GPU-level scores can add for ``pod`` on any node: candidates whose
    node-level score plus this cannot beat the best so far are not looked at. Whole GPUs are
    free GPUs (no pods, no apps), so for a single whole GPU without telemetry every node gets
    exactly this bonus and the first candidate wins at once."""
    scoring = snapshot.config.scoring
    weights = scoring.gpu
    continuity = weights.memory_continuity if snapshot.has_memory_telemetry else 0.0
    same_app = weights.app_affinity if pod.gpu_milli and pod.app is not None else 0.0
    dimensions = continuity + same_app + weights.fewer_pods
    return scoring.topology_weight * scores.MAX_NODE_SCORE + scoring.gpu_weight * dimensions


def _with_gpus(snapshot: Snapshot, pod: PodRequest, node: int, base: float) -> NodeChoice | None:
    scoring = snapshot.config.scoring
    if pod.gpu_milli:
        gpu = choose_share(snapshot, pod, node)
        if gpu is None:
            return None
        gpus: tuple[int, ...] = (gpu,)
        choice = None
    else:
        choice = _choose_whole(snapshot, pod, node)
        if choice is None:
            return None
        gpus = choice.gpus
    score = base
    if scoring.topology_weight:
        score += scoring.topology_weight * scores.topology(choice)
    if scoring.gpu_weight:
        score += scoring.gpu_weight * scores.gpu_dimensions(snapshot, pod, node, gpus)
    return NodeChoice(node, gpus, score, choice)


def _choose_whole(snapshot: Snapshot, pod: PodRequest, node: int) -> GpuChoice | None:
    info = snapshot.nodes[node]
    memory = None
    if snapshot.has_memory_telemetry:
        start, stop = int(snapshot.gpu_offset[node]), int(snapshot.gpu_offset[node + 1])
        free_memory = snapshot.gpu_mem_free[start:stop]
        memory = None if np.isnan(free_memory).all() else [float(m) for m in free_memory]
    return choose_gpus(
        info.shape,
        snapshot.free_mask[node],
        pod.gpus,
        snapshot.config.numa_policy,
        memory,
    )


def choose_share(snapshot: Snapshot, pod: PodRequest, node: int) -> int | None:
    """The GPU for a GPU-sharing pod: best fit (least milli-GPU left over), then a GPU already
    running the same ``app``, then the lowest index. Whole free GPUs are kept for whole-GPU pods
    by best fit itself."""
    best: tuple[int, int, int] | None = None
    base = int(snapshot.gpu_offset[node])
    for gid in snapshot.node_gpus(node):
        free = int(snapshot.gpu_free[gid])
        if not snapshot.gpu_usable[gid] or free < pod.gpu_milli:
            continue
        same_app = pod.app is not None and pod.app in snapshot.gpu_apps.get(gid, {})
        key = (free - pod.gpu_milli, 0 if same_app else 1, gid - base)
        if best is None or key < best:
            best = key
    return None if best is None else best[2]

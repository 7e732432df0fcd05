"""Node scores. Vectorised scores rank every feasible node at once; GPU-level scores need the
GPU set chosen inside a node and are computed only for the best few nodes (see `pick`).

Ranges (before the weights of `ScoringConfig`):
- `binpack`: Volcano's formula, [0, 100 × binpack.weight].
- `least_allocated`: kube-scheduler's spread, [0, 100].
- `gpu_dimensions`: free-memory continuity, same-app affinity and fewer pods, [0, 40 + 30 + 50]
  with the defaults.
- `fragmentation_score`: FGD's sigmoid of the fragmentation growth, (0, 100).
- `topology`: [0, 100]; 100 when the pod's GPUs are all NVLink-connected, 0 when unknown.
- `best_fit`, `dot_product`, `packing`: the FGD paper's baselines, [0, 100] each.
- `domain_fill`: the share of GPUs in use in the node's NVLink domain, [0, 100].
"""

from __future__ import annotations

import math

import numpy as np

from gpusched.api.config import GPU_RESOURCE, BinpackConfig, GpuScoreConfig
from gpusched.api.topology import LinkTier
from gpusched.engine import fragmentation
from gpusched.engine.gpuset import GpuChoice
from gpusched.engine.nodes import BoolArray, FloatArray, IntArray
from gpusched.engine.request import WHOLE_GPU_MILLI, PodRequest
from gpusched.engine.scoring import Scoring
from gpusched.engine.snapshot import Snapshot

MAX_NODE_SCORE = 100.0
PODS_PER_GPU_FOR_ZERO = 4
"""`gpu_dimensions`' fewer-pods term reaches 0 at this many pods per chosen GPU."""


def binpack(
    snapshot: Snapshot, pod: PodRequest, nodes: IntArray, config: BinpackConfig
) -> FloatArray:
    """Volcano binpack: weight × Σ_r w_r·(request_r + used_r)/allocatable_r ÷ Σ_r w_r × 100,
    over the resources the pod requests that carry a weight (a resource the node would
    overflow scores 0, as in Volcano)."""
    total = np.zeros(nodes.size)
    weight_sum = 0.0
    for name, amount in pod.resources.items():
        weight = _resource_weight(config, name)
        column = snapshot.columns.get(name)
        if not weight or not amount or column is None:
            continue
        used = snapshot.used[nodes, column] + amount
        capacity = snapshot.allocatable[nodes, column]
        total += _ratio(used, capacity) * weight
        weight_sum += weight
    gpu_weight = config.resources.get(GPU_RESOURCE, 0.0)
    if pod.wants_gpu and gpu_weight:
        used = snapshot.gpu_allocated[nodes] + pod.gpu_demand_milli
        capacity = (snapshot.gpu_offset[nodes + 1] - snapshot.gpu_offset[nodes]) * WHOLE_GPU_MILLI
        total += _ratio(used, capacity) * gpu_weight
        weight_sum += gpu_weight
    if weight_sum == 0:
        return total
    return total / weight_sum * MAX_NODE_SCORE * config.weight


def _resource_weight(config: BinpackConfig, name: str) -> float:
    if name == "cpu":
        return config.cpu
    if name == "memory":
        return config.memory
    return config.resources.get(name, 0.0)


def _ratio(used: IntArray, capacity: IntArray) -> FloatArray:
    safe = np.where(capacity > 0, capacity, 1)
    ratio = used / safe
    return np.where((capacity > 0) & (used <= capacity), ratio, 0.0)


def least_allocated(snapshot: Snapshot, pod: PodRequest, nodes: IntArray) -> FloatArray:
    """kube-scheduler's LeastAllocated over cpu and memory: mean of free share after placing."""
    scores = np.zeros(nodes.size)
    for name in ("cpu", "memory"):
        column = snapshot.columns[name]
        capacity = snapshot.allocatable[nodes, column]
        free = capacity - snapshot.used[nodes, column] - pod.resources.get(name, 0)
        scores += np.where(capacity > 0, free / np.where(capacity > 0, capacity, 1), 0.0)
    return np.clip(scores / 2, 0.0, 1.0) * MAX_NODE_SCORE


def best_fit(snapshot: Snapshot, pod: PodRequest, nodes: IntArray) -> FloatArray:
    """Best fit as the FGD paper's baseline scores it: 100 × (1 − ½·cpu left ÷ largest node
    cpu − ½·milli-GPU left ÷ largest node milli-GPU) after placing, floored to an integer (the
    floor is part of the published policy: nodes within one point tie). Range [0, 100]."""
    cpu_max, gpu_max = _largest_node(snapshot)
    cpu = snapshot.columns["cpu"]
    cpu_left = snapshot.allocatable[nodes, cpu] - snapshot.used[nodes, cpu]
    cpu_left = cpu_left - pod.resources.get("cpu", 0)
    gpu_left = _gpu_capacity(snapshot, nodes) - snapshot.gpu_allocated[nodes]
    gpu_left = gpu_left - pod.gpu_demand_milli
    left = cpu_left / cpu_max * 0.5 + gpu_left / gpu_max * 0.5
    scored: FloatArray = np.floor((1.0 - left) * MAX_NODE_SCORE)
    return np.clip(scored, 0.0, MAX_NODE_SCORE)


def _largest_node(snapshot: Snapshot) -> tuple[float, float]:
    """The largest cpu (milli) and milli-GPU of any node: best fit's normalisers (never 0)."""
    cpu = int(snapshot.allocatable[:, snapshot.columns["cpu"]].max(initial=0))
    counts = np.diff(snapshot.gpu_offset)
    gpu = int(counts.max(initial=0)) * WHOLE_GPU_MILLI
    return float(max(cpu, 1)), float(max(gpu, 1))


def _gpu_capacity(snapshot: Snapshot, nodes: IntArray) -> IntArray:
    counts = snapshot.gpu_offset[nodes + 1] - snapshot.gpu_offset[nodes]
    capacity: IntArray = counts * WHOLE_GPU_MILLI
    return capacity


def dot_product(snapshot: Snapshot, pod: PodRequest, nodes: IntArray) -> FloatArray:
    """Tetris's alignment of the pod's request with what the node has free, over cpu and GPU:
    100 × ½ Σ_d (request_d ÷ capacity_d) × (free_d ÷ capacity_d). Higher when a big request
    meets a node with much of that resource free. Range [0, 100]."""
    cpu = snapshot.columns["cpu"]
    cpu_capacity = snapshot.allocatable[nodes, cpu]
    cpu_safe = np.where(cpu_capacity > 0, cpu_capacity, 1)
    cpu_free = cpu_capacity - snapshot.used[nodes, cpu]
    total = pod.resources.get("cpu", 0) / cpu_safe * (cpu_free / cpu_safe)
    gpu_capacity = _gpu_capacity(snapshot, nodes)
    gpu_safe = np.where(gpu_capacity > 0, gpu_capacity, 1)
    gpu_free = gpu_capacity - snapshot.gpu_allocated[nodes]
    total = total + pod.gpu_demand_milli / gpu_safe * (gpu_free / gpu_safe)
    aligned: FloatArray = np.clip(total / 2, 0.0, 1.0) * MAX_NODE_SCORE
    return aligned


PACKING_SHARED = 50.0
PACKING_USED_NODE = 100.0 / 3


def packing(snapshot: Snapshot, pod: PodRequest, nodes: IntArray) -> FloatArray:
    """GPU packing in three tiers, best first. A share that fits an already used GPU:
    [50, 100], 100 − (free % of the fullest such GPU) ÷ 10. A pod that must take free GPUs of a
    partly used node: [33, 50], 50 − GPUs taken. An idle node: [0, 33], 33 − its GPU count.
    Pods without GPUs score 0 everywhere. Range [0, 100]."""
    if not pod.wants_gpu:
        return np.zeros(nodes.size)
    free = fragmentation.free_matrix(snapshot, nodes)
    counts = snapshot.gpu_offset[nodes + 1] - snapshot.gpu_offset[nodes]
    idle = snapshot.gpu_allocated[nodes] == 0
    taken = pod.gpus or 1
    scored: FloatArray = np.where(
        idle,
        np.maximum(np.floor(PACKING_USED_NODE) - counts, counts),
        np.maximum(PACKING_SHARED - taken, np.floor(PACKING_USED_NODE)),
    ).astype(np.float64)
    if pod.gpu_milli:
        used = (free >= pod.gpu_milli) & (free < WHOLE_GPU_MILLI)
        fullest = np.where(used, free, WHOLE_GPU_MILLI).min(axis=1)
        shared = np.maximum(MAX_NODE_SCORE - (fullest * 100 // WHOLE_GPU_MILLI) // 10, 50)
        scored = np.where(used.any(axis=1), shared, scored)
    return scored


def node_scores(
    snapshot: Snapshot,
    pod: PodRequest,
    nodes: IntArray,
    scoring: Scoring,
) -> FloatArray:
    """The weighted vectorised scores of ``nodes`` for ``pod``; the fragmentation score is
    skipped without a target workload."""
    config = scoring.config
    total = np.zeros(nodes.size)
    if config.binpack.weight:
        total += binpack(snapshot, pod, nodes, config.binpack)
    if config.least_allocated_weight:
        total += config.least_allocated_weight * least_allocated(snapshot, pod, nodes)
    if config.fragmentation_weight and scoring.workload:
        fragments = fragmentation_score(snapshot, pod, nodes, scoring)
        total += config.fragmentation_weight * fragments
    if config.best_fit_weight:
        total += config.best_fit_weight * best_fit(snapshot, pod, nodes)
    if config.dot_product_weight:
        total += config.dot_product_weight * dot_product(snapshot, pod, nodes)
    if config.packing_weight:
        total += config.packing_weight * packing(snapshot, pod, nodes)
    if config.domain_fill_weight and pod.wants_gpu:
        total += config.domain_fill_weight * domain_fill(snapshot, nodes, config.domain_key)
    return total


def domain_fill(snapshot: Snapshot, nodes: IntArray, key: str) -> FloatArray:
    """Per node, 100 × the share of GPUs in use (milli-GPU allocated over capacity) in its
    domain of label ``key`` — an NVLink domain — and 0 for a node in no domain. Range [0, 100]:
    the fuller the domain, the better, so small pods fill partly used domains and leave whole
    ones free. Zeros at no cost when no node carries ``key``."""
    codes, paths = snapshot.domain_codes(key)
    if not paths:
        return np.zeros(nodes.size)
    inside = codes >= 0
    gpus = np.diff(snapshot.gpu_offset)[inside] * WHOLE_GPU_MILLI
    capacity = np.bincount(codes[inside], weights=gpus, minlength=len(paths))
    used = np.bincount(codes[inside], weights=snapshot.gpu_allocated[inside], minlength=len(paths))
    share = np.divide(used, capacity, out=np.zeros(len(paths)), where=capacity > 0)
    mine = codes[nodes]
    filled: FloatArray = np.where(mine >= 0, share[np.maximum(mine, 0)] * MAX_NODE_SCORE, 0.0)
    return filled


def gpu_dimensions(
    snapshot: Snapshot,
    pod: PodRequest,
    node: int,
    gpus: tuple[int, ...],
    weights: GpuScoreConfig,
) -> float:
    """The three GPU dimensions of the chosen GPUs: free-memory continuity (mean free-memory
    ratio; 0 when unknown or stale, which is never healthy), same-``app`` affinity (share of
    the GPUs already running a pod with the pod's ``app`` label) and fewer pods (fewer pods
    already on those GPUs is better). Called for every candidate node, so it avoids numpy for
    these few-element sums."""
    if not gpus:
        return 0.0
    base = int(snapshot.gpu_offset[node])
    ids = [base + g for g in gpus]
    continuity = _continuity(snapshot, ids) if snapshot.has_memory_telemetry else 0.0
    same_app = 0.0
    if pod.app is not None and snapshot.gpu_apps:
        same_app = sum(1 for gid in ids if pod.app in snapshot.gpu_apps.get(gid, {})) / len(ids)
    pods = sum(int(snapshot.gpu_pods[gid]) for gid in ids)
    fewer = max(0.0, 1.0 - pods / (PODS_PER_GPU_FOR_ZERO * len(ids)))
    return (
        weights.memory_continuity * continuity
        + weights.app_affinity * same_app
        + weights.fewer_pods * fewer
    )


def _continuity(snapshot: Snapshot, ids: list[int]) -> float:
    total_ratio = 0.0
    for gid in ids:
        free, total = snapshot.gpu_mem_free[gid], snapshot.gpu_mem_total[gid]
        if not (math.isnan(free) or math.isnan(total) or total <= 0):
            total_ratio += free / total
    return total_ratio / len(ids)


def topology(choice: GpuChoice | None) -> float:
    """100 × (UNKNOWN − worst tier) / UNKNOWN for multi-GPU sets: all-NVLink 100, SYS ≈ 17,
    unknown topology 0. Single-GPU and GPU-less pods score 100 (nothing to connect)."""
    if choice is None or len(choice.gpus) < 2:
        return MAX_NODE_SCORE
    return MAX_NODE_SCORE * (LinkTier.UNKNOWN - choice.worst_tier) / LinkTier.UNKNOWN


def fragmentation_score(
    snapshot: Snapshot, pod: PodRequest, nodes: IntArray, scoring: Scoring
) -> FloatArray:
    """FGD's node score, floored to ``scoring.fragmentationStep``. For a share, the score of
    the GPU it would take (``scoring.fragmentationShareGpu``: the best-fitting GPU, or the best
    score of any). Range [0, 100); 50 = no change."""
    config = scoring.config
    delta = fragmentation.growth(
        snapshot, pod, nodes, scoring.workload, config.fragmentation_share_gpu
    )
    scored = fragmentation.sigmoid_score(delta, config.fragmentation_step)
    if delta.ndim == 2:
        best: FloatArray = np.where(np.isinf(delta), -1.0, scored).max(axis=1)
        return best
    return scored


def best_share_gpus(
    snapshot: Snapshot, pod: PodRequest, nodes: IntArray, scoring: Scoring
) -> BoolArray:
    """Per node of ``nodes`` (rows) and GPU (columns), whether a share on that GPU gets the
    node's best fragmentation score (all ``False`` where it fits no GPU). The caller picks
    among them by best fit: GPUs in one score step are equally good for the cluster."""
    delta = fragmentation.growth(snapshot, pod, nodes, scoring.workload)
    scored = fragmentation.sigmoid_score(delta, scoring.config.fragmentation_step)
    masked = np.where(np.isinf(delta), -1.0, scored)
    best: BoolArray = (masked == masked.max(axis=1, keepdims=True)) & ~np.isinf(delta)
    return best

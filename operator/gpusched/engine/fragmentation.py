"""FGD's fragmentation measure (Weng et al., ATC'23, "Beware of Fragmentation"), in our words.

For a node with free CPU ``c`` and per-GPU free milli ``g_1..g_k``, and a task type ``m`` of the
target workload: if ``m`` needs no GPU, may not use the node's GPU model, or does not fit
(``c < cpu_m`` or fewer than ``k_m`` GPUs with ``g_j ≥ gpu_m``), every idle milli-GPU of the
node is a fragment for ``m``; if it fits, only the GPUs with ``0 < g_j < gpu_m`` are. The node's
fragmentation is ``Σ_m p_m · fragment(node, m)``. A pod is best placed where it grows least.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from gpusched.engine.request import WHOLE_GPU_MILLI, PodRequest
from gpusched.engine.snapshot import FloatArray, IntArray, Snapshot

COVERAGE = 0.95
"""Task types are taken, most frequent first, until they cover this share of pods (FGD's)."""


@dataclass(frozen=True, slots=True)
class TaskType:
    cpu_milli: int
    gpu_milli: int
    """Per GPU: 1000 for whole-GPU tasks, the share for sharing tasks, 0 for CPU-only."""
    gpus: int
    weight: float


def target_workload(pods: Iterable[PodRequest]) -> tuple[TaskType, ...]:
    """The most frequent (cpu, gpu milli, GPU count) types covering 95 % of ``pods``, with
    their frequencies renormalised to sum to 1."""
    counts = Counter(_task_key(p) for p in pods)
    total = sum(counts.values())
    chosen: list[tuple[tuple[int, int, int], int]] = []
    covered = 0
    for key, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        if covered >= COVERAGE * total:
            break
        chosen.append((key, count))
        covered += count
    return tuple(TaskType(c, g, k, n / covered) for (c, g, k), n in chosen)


def _task_key(pod: PodRequest) -> tuple[int, int, int]:
    cpu = pod.resources.get("cpu", 0)
    if pod.gpu_milli:
        return cpu, pod.gpu_milli, 1
    if pod.gpus:
        return cpu, WHOLE_GPU_MILLI, pod.gpus
    return cpu, 0, 0


def fragmentation(
    gpu_free: IntArray, cpu_free: IntArray, tasks: tuple[TaskType, ...]
) -> FloatArray:
    """Per node (rows of ``gpu_free``, padded with 0), the expected fragmented milli-GPU."""
    idle = gpu_free.sum(axis=1).astype(np.float64)
    total = np.zeros(gpu_free.shape[0])
    for task in tasks:
        if task.gpus == 0:
            total += task.weight * idle
            continue
        fits = ((gpu_free >= task.gpu_milli).sum(axis=1) >= task.gpus) & (
            cpu_free >= task.cpu_milli
        )
        partial = np.where((gpu_free > 0) & (gpu_free < task.gpu_milli), gpu_free, 0).sum(axis=1)
        total += task.weight * np.where(fits, partial, idle)
    return total


def free_matrix(snapshot: Snapshot, nodes: IntArray) -> IntArray:
    """Free milli of each usable GPU of ``nodes``, one row per node, padded with 0."""
    counts = snapshot.gpu_offset[nodes + 1] - snapshot.gpu_offset[nodes]
    width = int(counts.max()) if counts.size else 0
    matrix = np.zeros((nodes.size, width), dtype=np.int64)
    usable_free = np.where(snapshot.gpu_usable, snapshot.gpu_free, 0)
    for row, node in enumerate(nodes):
        start = int(snapshot.gpu_offset[node])
        matrix[row, : counts[row]] = usable_free[start : start + counts[row]]
    return matrix


def score(
    snapshot: Snapshot, pod: PodRequest, nodes: IntArray, tasks: tuple[TaskType, ...]
) -> FloatArray:
    """FGD's node score before its integer cut: 100 / (1 + exp(Δ / 1000)), Δ the growth of the
    node's fragmentation in milli-GPU if ``pod`` lands there. Range (0, 100); 50 = no change."""
    before = free_matrix(snapshot, nodes)
    cpu_column = snapshot.columns["cpu"]
    cpu_free = snapshot.allocatable[nodes, cpu_column] - snapshot.used[nodes, cpu_column]
    after = _after(before, pod)
    cpu_after = cpu_free - pod.resources.get("cpu", 0)
    delta = fragmentation(after, cpu_after, tasks) - fragmentation(before, cpu_free, tasks)
    return 100.0 / (1.0 + np.exp(np.clip(delta / 1000.0, -50, 50)))


def _after(free: IntArray, pod: PodRequest) -> IntArray:
    """Free milli after placing ``pod``: whole GPUs from the lowest fully free ones, a share on
    the best-fitting GPU (least left over)."""
    after = free.copy()
    if pod.gpus:
        whole = after >= WHOLE_GPU_MILLI
        taken = np.cumsum(whole, axis=1) <= pod.gpus
        after[whole & taken] = 0
    elif pod.gpu_milli:
        slack = np.where(after >= pod.gpu_milli, after - pod.gpu_milli, np.iinfo(np.int64).max)
        best = np.argmin(slack, axis=1)
        rows = np.arange(after.shape[0])
        ok = slack[rows, best] != np.iinfo(np.int64).max
        after[rows[ok], best[ok]] -= pod.gpu_milli
    return after

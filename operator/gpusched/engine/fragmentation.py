"""FGD's fragmentation measure (Weng et al., ATC'23, "Beware of Fragmentation"), in our words.

For a node with free CPU ``c`` and per-GPU free milli ``g_1..g_k``, and a task type ``m`` of the
target workload: if ``m`` needs no GPU, may not use the node (its GPU model), or does not fit
(``c < cpu_m`` or fewer than ``k_m`` GPUs with ``g_j ≥ gpu_m``), every idle milli-GPU of the
node is a fragment for ``m``; if it fits, only the GPUs with ``0 < g_j < gpu_m`` are. The node's
fragmentation is ``Σ_m p_m · fragment(node, m)``. A pod is best placed where it grows least.

Speed: the score is asked for every feasible node and every GPU pod, and a node's answer only
changes when the node does. A per-snapshot cache keeps, per pod shape, the growth on each node
and the node state it was computed for; each call recomputes only the nodes whose GPUs or CPU
changed since (found by comparing the state arrays, so it stays exact through copies, rollbacks
and anything else that changes usage).
"""

from __future__ import annotations

import math
import weakref
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from gpusched.api.config import ShareGpu
from gpusched.api.k8s import NodeSelectorTerm
from gpusched.engine.fit import static_mask
from gpusched.engine.request import WHOLE_GPU_MILLI, PodRequest
from gpusched.engine.snapshot import BoolArray, FloatArray, IntArray, Snapshot

COVERAGE = 0.95
"""Task types are taken, most frequent first, until they cover this share of pods (FGD's)."""


@dataclass(frozen=True, slots=True)
class TaskType:
    cpu_milli: int
    gpu_milli: int
    """Per GPU: 1000 for whole-GPU tasks, the share for sharing tasks, 0 for CPU-only."""
    gpus: int
    weight: float
    required_terms: tuple[NodeSelectorTerm, ...] | None = None
    """Required node affinity of the task's pods (e.g. the GPU models it may use); ``None``:
    any node."""


def target_workload(pods: Iterable[PodRequest]) -> tuple[TaskType, ...]:
    """The most frequent (cpu, gpu milli, GPU count, node constraints) types covering 95 % of
    ``pods``, with their frequencies renormalised to sum to 1."""
    counts: Counter[tuple[int, int, int, str]] = Counter()
    terms: dict[tuple[int, int, int, str], tuple[NodeSelectorTerm, ...] | None] = {}
    for pod in pods:
        key = _task_key(pod)
        counts[key] += 1
        terms.setdefault(key, pod.required_terms)
    total = sum(counts.values())
    chosen: list[tuple[tuple[int, int, int, str], int]] = []
    covered = 0
    for key, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        if covered >= COVERAGE * total:
            break
        chosen.append((key, count))
        covered += count
    return tuple(TaskType(c, g, k, n / covered, terms[(c, g, k, s)]) for (c, g, k, s), n in chosen)


def _task_key(pod: PodRequest) -> tuple[int, int, int, str]:
    cpu = pod.resources.get("cpu", 0)
    constraint = repr(pod.required_terms) if pod.required_terms is not None else ""
    if pod.gpu_milli:
        return cpu, pod.gpu_milli, 1, constraint
    if pod.gpus:
        return cpu, WHOLE_GPU_MILLI, pod.gpus, constraint
    return cpu, 0, 0, constraint


# ----- the measure ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Tables:
    """The target workload as arrays: GPU tasks index a sorted list of distinct per-GPU
    thresholds, so one comparison against all thresholds serves every task."""

    thresholds: IntArray
    column: IntArray
    gpus: IntArray
    cpu: IntArray
    weight: FloatArray
    idle_weight: float
    """Total weight of all tasks: every task first counts the node's idle milli-GPU; a GPU task
    that fits then swaps that for its partial GPUs."""

    @staticmethod
    def of(tasks: tuple[TaskType, ...]) -> _Tables:
        gpu_tasks = [t for t in tasks if t.gpus]
        thresholds = sorted({t.gpu_milli for t in gpu_tasks})
        position = {v: i for i, v in enumerate(thresholds)}
        return _Tables(
            thresholds=np.array(thresholds, dtype=np.int64),
            column=np.array([position[t.gpu_milli] for t in gpu_tasks], dtype=np.int64),
            gpus=np.array([t.gpus for t in gpu_tasks], dtype=np.int64),
            cpu=np.array([t.cpu_milli for t in gpu_tasks], dtype=np.int64),
            weight=np.array([t.weight for t in gpu_tasks], dtype=np.float64),
            idle_weight=math.fsum(t.weight for t in tasks),
        )


def fragmentation(
    gpu_free: IntArray, cpu_free: IntArray, tasks: tuple[TaskType, ...]
) -> FloatArray:
    """Per node (rows of ``gpu_free``, padded with 0), the expected fragmented milli-GPU, every
    task allowed on every node."""
    tables = _Tables.of(tasks)
    allowed = np.ones((gpu_free.shape[0], tables.gpus.size), dtype=np.bool_)
    return _measure(gpu_free, cpu_free, tables, allowed)


def _measure(free: IntArray, cpu: IntArray, tables: _Tables, allowed: BoolArray) -> FloatArray:
    """`fragmentation` with per node (row) and GPU task (column) permission. A task that fits
    turns the node's idle milli-GPU into fragments only on GPUs below its per-GPU need, i.e.
    it saves the milli-GPU on GPUs at or above that need."""
    idle: FloatArray = free.sum(axis=1, dtype=np.float64)
    if tables.gpus.size == 0:
        everything: FloatArray = tables.idle_weight * idle
        return everything
    wide = free[:, :, None]
    enough = wide >= tables.thresholds
    usable = (wide * enough).sum(axis=1)[:, tables.column]
    fits = (enough.sum(axis=1)[:, tables.column] >= tables.gpus) & allowed
    fits &= cpu[:, None] >= tables.cpu
    measured: FloatArray = tables.idle_weight * idle - (fits * usable) @ tables.weight
    return measured


def free_matrix(snapshot: Snapshot, nodes: IntArray) -> IntArray:
    """Free milli of each usable GPU of ``nodes``, one row per node, padded with 0."""
    start = snapshot.gpu_offset[nodes]
    counts = snapshot.gpu_offset[nodes + 1] - start
    width = int(counts.max()) if counts.size else 0
    columns = np.arange(width)
    present = columns < counts[:, None]
    index = np.where(present, start[:, None] + columns, 0)
    usable_free = np.where(snapshot.gpu_usable, snapshot.gpu_free, 0)
    if usable_free.size == 0:
        return np.zeros((nodes.size, width), dtype=np.int64)
    return np.where(present, usable_free[index], 0)


# ----- the cache -----------------------------------------------------------------------------


@dataclass(slots=True)
class _Growth:
    """Fragmentation growth of one pod shape, per node, and the node versions it is for."""

    version: IntArray
    delta: FloatArray
    """Whole-GPU pods: (nodes,). Sharing pods: (nodes, GPUs a node), +inf where it fits not."""


@dataclass(slots=True)
class _Cache:
    tasks: tuple[TaskType, ...]
    tables: _Tables
    allowed: BoolArray
    flat_free: IntArray
    """The snapshot's ``gpu_free`` when last seen: comparing against it finds changed GPUs."""
    gpus: IntArray
    cpu: IntArray
    version: IntArray
    before: FloatArray
    growth: dict[tuple[int, int, int, bool], _Growth] = field(default_factory=dict)
    """Per pod shape (cpu, GPUs, share milli, per-GPU variants): its growth on each node."""
    mark: int = 0
    """The snapshot's journal length when last seen (0: unknown, compare the arrays)."""
    tail: object = None
    """The journal entry just before ``mark``: if another one sits there now, the journal was
    rolled back or cleared and rewritten since, and cannot say what changed."""


_CACHES: weakref.WeakKeyDictionary[Snapshot, _Cache] = weakref.WeakKeyDictionary()


def _cache(snapshot: Snapshot, tasks: tuple[TaskType, ...]) -> _Cache:
    """The snapshot's cache, brought up to date with its usage (changed nodes get a new
    version and a new fragmentation)."""
    cache = _CACHES.get(snapshot)
    if cache is None or cache.tasks is not tasks:
        cache = _new_cache(snapshot, tasks)
        _CACHES[snapshot] = cache
    else:
        changed = _journal_changes(snapshot, cache)
        if changed is None:
            changed = _compared_changes(snapshot, cache)
        if changed.size:
            _update(snapshot, cache, changed)
    cache.mark = snapshot.checkpoint()
    cache.tail = snapshot.journal_since(cache.mark - 1)[0] if cache.mark else None
    return cache


def _new_cache(snapshot: Snapshot, tasks: tuple[TaskType, ...]) -> _Cache:
    everyone = np.arange(len(snapshot.nodes))
    gpus, cpu = free_matrix(snapshot, everyone), _cpu_free(snapshot, everyone)
    tables, allowed = _Tables.of(tasks), _allowed(snapshot, tasks)
    before = _measure(gpus, cpu, tables, allowed)
    version = np.zeros(everyone.size, dtype=np.int64)
    return _Cache(tasks, tables, allowed, snapshot.gpu_free.copy(), gpus, cpu, version, before)


def _journal_changes(snapshot: Snapshot, cache: _Cache) -> IntArray | None:
    """The nodes of the assumes and forgets since the cache last looked, read from the
    snapshot's journal (cheap: usually one entry); ``None`` when the journal cannot tell."""
    if cache.mark == 0 or snapshot.checkpoint() < cache.mark:
        return None
    since = snapshot.journal_since(cache.mark - 1)
    if since[0] is not cache.tail:
        return None
    return np.unique(np.array([holding.node for _, holding in since[1:]], dtype=np.int64))


def _compared_changes(snapshot: Snapshot, cache: _Cache) -> IntArray:
    """The nodes whose GPUs or CPU differ from what the cache saw (exact, slower)."""
    changed_gpus = np.flatnonzero(snapshot.gpu_free != cache.flat_free)
    owners = np.searchsorted(snapshot.gpu_offset, changed_gpus, side="right") - 1
    cpu = _cpu_free(snapshot, np.arange(len(snapshot.nodes)))
    changed: IntArray = np.union1d(owners, np.flatnonzero(cpu != cache.cpu))
    return changed


def _update(snapshot: Snapshot, cache: _Cache, changed: IntArray) -> None:
    for node in changed.tolist():
        start, stop = int(snapshot.gpu_offset[node]), int(snapshot.gpu_offset[node + 1])
        cache.flat_free[start:stop] = snapshot.gpu_free[start:stop]
    rows = free_matrix(snapshot, changed)
    cache.gpus[changed] = 0
    cache.gpus[changed, : rows.shape[1]] = rows
    cache.cpu[changed] = _cpu_free(snapshot, changed)
    cache.version[changed] += 1
    cache.before[changed] = _measure(
        cache.gpus[changed], cache.cpu[changed], cache.tables, cache.allowed[changed]
    )


def _cpu_free(snapshot: Snapshot, nodes: IntArray) -> IntArray:
    column = snapshot.columns["cpu"]
    free: IntArray = snapshot.allocatable[nodes, column] - snapshot.used[nodes, column]
    return free


def _allowed(snapshot: Snapshot, tasks: tuple[TaskType, ...]) -> BoolArray:
    """Per node and GPU task, whether the task's node constraints admit the node."""
    columns = [
        np.ones(len(snapshot.nodes), dtype=np.bool_)
        if task.required_terms is None
        else static_mask(snapshot, PodRequest(key="", required_terms=task.required_terms))
        for task in tasks
        if task.gpus
    ]
    if not columns:
        return np.ones((len(snapshot.nodes), 0), dtype=np.bool_)
    return np.stack(columns, axis=1)


def node_fragmentation(snapshot: Snapshot, tasks: tuple[TaskType, ...]) -> FloatArray:
    """Every node's current fragmentation (milli-GPU) for ``tasks``; read-only view."""
    before = _cache(snapshot, tasks).before
    view = before.view()
    view.flags.writeable = False
    return view


def growth(
    snapshot: Snapshot,
    pod: PodRequest,
    nodes: IntArray,
    tasks: tuple[TaskType, ...],
    share_gpu: ShareGpu = ShareGpu.LEAST_FRAGMENTATION,
) -> FloatArray:
    """How much each of ``nodes`` (which must fit ``pod``) fragments if ``pod`` lands there,
    in milli-GPU: per node for whole GPUs, and for a share on its best-fitting GPU with
    ``share_gpu`` ``bestFit``; else, for a share, (nodes, GPUs): one column per GPU it could
    take (+inf where it does not fit)."""
    cache = _cache(snapshot, tasks)
    per_gpu = bool(pod.gpu_milli) and share_gpu is ShareGpu.LEAST_FRAGMENTATION
    key = (pod.resources.get("cpu", 0), pod.gpus, pod.gpu_milli, per_gpu)
    entry = cache.growth.get(key)
    if entry is None:
        count = len(snapshot.nodes)
        shape = (count, cache.gpus.shape[1]) if per_gpu else (count,)
        entry = _Growth(np.full(count, -1, dtype=np.int64), np.zeros(shape))
        cache.growth[key] = entry
    stale = nodes[entry.version[nodes] != cache.version[nodes]]
    if stale.size:
        entry.delta[stale] = _delta(cache, pod, stale, per_gpu)
        entry.version[stale] = cache.version[stale]
    return entry.delta[nodes]


def _delta(cache: _Cache, pod: PodRequest, nodes: IntArray, per_gpu: bool) -> FloatArray:
    free, before = cache.gpus[nodes], cache.before[nodes]
    cpu_after = cache.cpu[nodes] - pod.resources.get("cpu", 0)
    allowed = cache.allowed[nodes]
    if per_gpu:
        return _share_delta(cache, pod.gpu_milli, free, cpu_after, allowed, before)
    after = free.copy()
    if pod.gpus:
        whole = after >= WHOLE_GPU_MILLI
        after[whole & (np.cumsum(whole, axis=1) <= pod.gpus)] = 0
    elif pod.gpu_milli:
        # The best fit: least left over, the lowest index among equals (as `choose_share`).
        slack = np.where(after >= pod.gpu_milli, after - pod.gpu_milli, np.iinfo(np.int64).max)
        after[np.arange(nodes.size), np.argmin(slack, axis=1)] -= pod.gpu_milli
    # Rounded so that float noise cannot move a node across a score step at Δ = 0.
    return np.round(_measure(after, cpu_after, cache.tables, allowed) - before, 6)


def _share_delta(
    cache: _Cache,
    milli: int,
    free: IntArray,
    cpu_after: IntArray,
    allowed: BoolArray,
    before: FloatArray,
) -> FloatArray:
    """Growth per node and GPU for a share of ``milli`` on that GPU: every variant at once."""
    count, width = free.shape
    variants = np.repeat(free[:, None, :], width, axis=1)
    diagonal = np.arange(width)
    variants[:, diagonal, diagonal] -= milli
    flat = variants.reshape(count * width, width)
    measured = _measure(
        flat,
        np.repeat(cpu_after, width),
        cache.tables,
        np.repeat(allowed, width, axis=0),
    ).reshape(count, width)
    delta = np.round(measured - before[:, None], 6)
    return np.where(free >= milli, delta, np.inf)


def sigmoid_score(delta: FloatArray, step: float) -> FloatArray:
    """FGD's score of a growth ``delta`` (milli-GPU): 100 / (1 + exp(Δ/1000)), range (0, 100),
    50 for no change, floored to a multiple of ``step`` (0: not floored)."""
    raw = 100.0 / (1.0 + np.exp(np.clip(delta / 1000.0, -50.0, 50.0)))
    if step <= 0:
        return raw
    floored: FloatArray = np.floor(raw / step) * step
    return floored


def score(
    snapshot: Snapshot, pod: PodRequest, nodes: IntArray, tasks: tuple[TaskType, ...]
) -> FloatArray:
    """FGD's node score, floored to ``scoring.fragmentationStep``. For a share, the score of
    the GPU it would take (``scoring.fragmentationShareGpu``: the best-fitting GPU, or the best
    score of any). Range [0, 100); 50 = no change."""
    scoring = snapshot.config.scoring
    delta = growth(snapshot, pod, nodes, tasks, scoring.fragmentation_share_gpu)
    scored = sigmoid_score(delta, scoring.fragmentation_step)
    if delta.ndim == 2:
        best: FloatArray = np.where(np.isinf(delta), -1.0, scored).max(axis=1)
        return best
    return scored


def best_share_gpus(
    snapshot: Snapshot, pod: PodRequest, nodes: IntArray, tasks: tuple[TaskType, ...]
) -> BoolArray:
    """Per node of ``nodes`` (rows) and GPU (columns), whether a share on that GPU gets the
    node's best fragmentation score (all ``False`` where it fits no GPU). The caller picks
    among them by best fit: GPUs in one score step are equally good for the cluster."""
    delta = growth(snapshot, pod, nodes, tasks)
    scored = sigmoid_score(delta, snapshot.config.scoring.fragmentation_step)
    masked = np.where(np.isinf(delta), -1.0, scored)
    best: BoolArray = (masked == masked.max(axis=1, keepdims=True)) & ~np.isinf(delta)
    return best

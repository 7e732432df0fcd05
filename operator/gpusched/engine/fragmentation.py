"""FGD's fragmentation measure (Weng et al., ATC'23, "Beware of Fragmentation"), in our words.

For a node with free CPU ``c`` and per-GPU free milli ``g_1..g_k``, and a task type ``m`` of the
target workload: if ``m`` needs no GPU, may not use the node (its GPU model), or does not fit
(``c < cpu_m`` or fewer than ``k_m`` GPUs with ``g_j ≥ gpu_m``), every idle milli-GPU of the
node is a fragment for ``m``; if it fits, only the GPUs with ``0 < g_j < gpu_m`` are. The node's
fragmentation is ``Σ_m p_m · fragment(node, m)``. A pod is best placed where it grows least.

Speed: the score is asked for every feasible node and every GPU pod, and a node's answer only
changes when the node does. The measure is linear in the task weights: per node it is
``Σ_m w_m · idle − Σ_m w_m · saved_m``, where ``idle`` and ``saved_m`` (the milli-GPU task
``m`` would use when it fits) do not depend on the weights. So a cache shared by every copy of
a snapshot keeps those weight-free parts per node, for the node as it is and, per pod shape,
as it would be with the pod on it; a node's rows are recomputed only when its stamp
(`Snapshot.stamp`) moved, which stays exact through copies and rollbacks, and it is asked
about. The weights, which
change with every cycle's target workload, are applied last, to the nodes asked about.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from gpusched.api.config import ShareGpu
from gpusched.engine.fit import static_mask
from gpusched.engine.nodes import BoolArray, FloatArray, IntArray
from gpusched.engine.request import WHOLE_GPU_MILLI, PodRequest
from gpusched.engine.snapshot import Snapshot
from gpusched.engine.workload import TaskKey, TaskType

# ----- the measure ---------------------------------------------------------------------------

SavedArray = npt.NDArray[np.uint16] | npt.NDArray[np.int32]


@dataclass(frozen=True, slots=True)
class _Tables:
    """The GPU tasks of a target workload as arrays, without their weights: GPU tasks index a
    sorted list of distinct per-GPU thresholds, so one comparison against all thresholds
    serves every task."""

    thresholds: IntArray
    column: IntArray
    gpus: IntArray
    cpu: IntArray

    @staticmethod
    def of(gpu_tasks: Iterable[TaskType]) -> _Tables:
        tasks = list(gpu_tasks)
        thresholds = sorted({t.gpu_milli for t in tasks})
        position = {v: i for i, v in enumerate(thresholds)}
        return _Tables(
            thresholds=np.array(thresholds, dtype=np.int64),
            column=np.array([position[t.gpu_milli] for t in tasks], dtype=np.int64),
            gpus=np.array([t.gpus for t in tasks], dtype=np.int64),
            cpu=np.array([t.cpu_milli for t in tasks], dtype=np.int64),
        )


@dataclass(frozen=True, slots=True)
class _Weights:
    """A target workload's weights: ``gpu`` per GPU task in the workload's order; ``idle``
    the total weight of all tasks (every task first counts the node's idle milli-GPU; a GPU
    task that fits then swaps that for its partial GPUs). ``order``: per GPU task of the
    workload, its column in the cache (``None``: the columns are the tasks, in order)."""

    tasks: tuple[TaskType, ...]
    gpu: FloatArray
    idle: float
    order: IntArray | None = None

    @staticmethod
    def of(tasks: tuple[TaskType, ...], order: IntArray | None = None) -> _Weights:
        gpu = np.array([t.weight for t in tasks if t.gpus], dtype=np.float64)
        return _Weights(tasks, gpu, math.fsum(t.weight for t in tasks), order)


def fragmentation(
    gpu_free: IntArray, cpu_free: IntArray, tasks: tuple[TaskType, ...]
) -> FloatArray:
    """Per node (rows of ``gpu_free``, padded with 0), the expected fragmented milli-GPU, every
    task allowed on every node."""
    tables = _Tables.of(t for t in tasks if t.gpus)
    allowed = np.ones((gpu_free.shape[0], tables.gpus.size), dtype=np.bool_)
    idle, saved = _parts(gpu_free, cpu_free, tables, allowed)
    return _weigh(idle, saved, _Weights.of(tasks))


def _parts(
    free: IntArray, cpu: IntArray, tables: _Tables, allowed: BoolArray
) -> tuple[FloatArray, SavedArray]:
    """The weight-free parts of the measure per node (row): its idle milli-GPU, and per GPU
    task (column, with per node permission ``allowed``) the milli-GPU it saves from the
    fragments when it fits: the milli-GPU on GPUs at or above its per-GPU need."""
    idle: FloatArray = free.sum(axis=1, dtype=np.float64)
    if tables.gpus.size == 0:
        return idle, np.zeros((free.shape[0], 0), dtype=_saved_type(free.shape[1]))
    wide = free[:, :, None]
    enough = wide >= tables.thresholds
    usable = (wide * enough).sum(axis=1)[:, tables.column]
    fits = (enough.sum(axis=1)[:, tables.column] >= tables.gpus) & allowed
    fits &= cpu[:, None] >= tables.cpu
    saved: SavedArray = (fits * usable).astype(_saved_type(free.shape[1]))
    return idle, saved


def _saved_type(width: int) -> type[np.unsignedinteger[Any]] | type[np.signedinteger[Any]]:
    """The narrowest exact type for milli-GPU saved on ``width`` GPUs a node: uint16 up to
    65 GPUs (64 of them hold 64,000), which halves the cache; int32 beyond. Both convert to
    float64 exactly, so the weighted sums are the same."""
    return np.uint16 if width * WHOLE_GPU_MILLI <= np.iinfo(np.uint16).max else np.int32


def _weigh(idle: FloatArray, saved: SavedArray, weights: _Weights) -> FloatArray:
    """The measure from its parts: total weight × idle − Σ_m w_m · saved_m (the last axis of
    ``saved`` is the task)."""
    if weights.gpu.size == 0:
        everything: FloatArray = weights.idle * idle
        return everything
    if weights.order is not None:
        saved = saved[..., weights.order]
    measured: FloatArray = weights.idle * idle - saved @ weights.gpu
    return measured


def free_matrix(snapshot: Snapshot, nodes: IntArray) -> IntArray:
    """Free milli of each usable GPU of ``nodes``, one row per node, padded with 0."""
    start = snapshot.gpu_offset[nodes]
    counts = snapshot.gpu_offset[nodes + 1] - start
    width = int(counts.max()) if counts.size else 0
    columns = np.arange(width)
    present = columns < counts[:, None]
    if snapshot.gpu_free.size == 0:
        return np.zeros((nodes.size, width), dtype=np.int64)
    index = np.where(present, start[:, None] + columns, 0)
    usable_free = np.where(snapshot.gpu_usable[index], snapshot.gpu_free[index], 0)
    return np.where(present, usable_free, 0)


# ----- the cache -----------------------------------------------------------------------------

CACHE_BYTES = 64 * 2**20
"""What the pod shapes' rows may take together (least recently asked dropped first). At
5,000 nodes and 50 task types a shape takes about 0.6 MB, so about a hundred shapes fit;
openb's default trace has 81 GPU pod shapes (1,213 nodes)."""


@dataclass(slots=True, kw_only=True)
class _Rows:
    """Per node, the weight-free parts of the measure (``seen``: the node stamps they are
    for, -1 none), and a value weighted by ``weights`` (``valued``: the stamps it is for).
    The cache's base rows are the nodes as they are (value: the measure); a pod shape's rows
    are the nodes with the pod on them (value: the growth; per GPU for a share measured on
    every GPU it could take)."""

    seen: IntArray
    idle: FloatArray
    saved: SavedArray
    valued: IntArray
    value: FloatArray
    weights: _Weights | None = None

    @staticmethod
    def empty(shape: tuple[int, ...], tasks: int, width: int) -> _Rows:
        count = shape[0]
        return _Rows(
            seen=np.full(count, -1, dtype=np.int64),
            idle=np.zeros(shape),
            saved=np.zeros((*shape, tasks), dtype=_saved_type(width)),
            valued=np.full(count, -1, dtype=np.int64),
            value=np.zeros(shape),
        )

    @property
    def nbytes(self) -> int:
        arrays = (self.seen, self.idle, self.saved, self.valued, self.value)
        return sum(a.nbytes for a in arrays)

    def stale_values(self, weights: _Weights, stamp: IntArray, nodes: IntArray) -> IntArray:
        """The nodes of ``nodes`` whose value is not for ``weights`` and their stamp."""
        if self.weights is not weights:
            self.weights = weights
            self.valued[:] = -1
        stale: IntArray = nodes[self.valued[nodes] != stamp[nodes]]
        return stale


@dataclass(slots=True, kw_only=True)
class _Cache:
    """The fragmentation cache of a snapshot's statics, shared by its copies. Its columns are
    every GPU task type any target workload asked for so far (the 95 % cut moves types in and
    out as pods come and go; a type's column stays), so a workload is a choice of columns and
    weights; the free GPUs and CPU of every node when last seen; and the rows."""

    keys: dict[TaskKey, int]
    """Column of each GPU task type."""
    tasks: list[TaskType]
    """The GPU task type of each column (its weight is not used)."""
    tables: _Tables
    allowed: BoolArray
    gpus: IntArray
    cpu: IntArray
    base: _Rows
    growth: OrderedDict[tuple[int, int, int, bool], _Rows] = field(default_factory=OrderedDict)
    """Per pod shape (cpu, GPUs, share milli, per-GPU variants): its rows."""
    last: tuple[tuple[TaskType, ...], _Weights] | None = None
    """The workload asked for last and its weights (a cycle asks with one workload)."""


def _gpu_key(task: TaskType) -> TaskKey:
    terms = repr(task.required_terms) if task.required_terms is not None else ""
    return task.cpu_milli, task.gpu_milli, task.gpus, terms


def _cache(
    snapshot: Snapshot, tasks: tuple[TaskType, ...], nodes: IntArray | None = None
) -> tuple[_Cache, _Weights]:
    """The cache with a column for every GPU task of ``tasks``, the base rows of ``nodes``
    (all by default) brought up to date with the snapshot's usage, and ``tasks``' weights
    with their columns. Only the nodes asked about: a gang's pick changes one node, which
    its next pick often no longer considers (a whole node taken), and refreshing it anyway
    cost a third of a 256-pod gang's decision."""
    cache: _Cache | None = snapshot.derived.get("fragmentation")
    if cache is None:
        cache = _new_cache(snapshot)
        snapshot.derived["fragmentation"] = cache
    if cache.last is None or cache.last[0] is not tasks:
        gpu_tasks = [t for t in tasks if t.gpus]
        keys = [_gpu_key(t) for t in gpu_tasks]
        new = {k: t for k, t in zip(keys, gpu_tasks, strict=True) if k not in cache.keys}
        if new:
            _add_columns(snapshot, cache, new)
        columns = np.array([cache.keys[k] for k in keys], dtype=np.int64)
        cache.last = (tasks, _Weights.of(tasks, columns))
    if nodes is None:
        changed = np.flatnonzero(cache.base.seen != snapshot.stamp)
    else:
        changed = nodes[cache.base.seen[nodes] != snapshot.stamp[nodes]]
    if changed.size:
        _update(snapshot, cache, changed)
    return cache, cache.last[1]


def _new_cache(snapshot: Snapshot) -> _Cache:
    """A cache without columns; workloads add them."""
    count = len(snapshot.nodes)
    everyone = np.arange(count)
    gpus = free_matrix(snapshot, everyone)
    return _Cache(
        keys={},
        tasks=[],
        tables=_Tables.of(()),
        allowed=np.ones((count, 0), dtype=np.bool_),
        gpus=gpus,
        cpu=_cpu_free(snapshot, everyone),
        base=_Rows.empty((count,), 0, gpus.shape[1]),
    )


def _add_columns(snapshot: Snapshot, cache: _Cache, new: dict[TaskKey, TaskType]) -> None:
    """Adds a column per task type of ``new``, computed at once for the base rows that are up
    to date (the others are recomputed whole when next asked for); pod shapes' rows get
    theirs when next asked for (`_extend`)."""
    first = len(cache.tasks)
    for key, task in new.items():
        cache.keys[key] = len(cache.tasks)
        cache.tasks.append(task)
    added = list(new.values())
    cache.tables = _Tables.of(cache.tasks)
    cache.allowed = np.concatenate([cache.allowed, _allowed(snapshot, added)], axis=1)
    base = cache.base
    _, columns = _parts(cache.gpus, cache.cpu, _Tables.of(added), cache.allowed[:, first:])
    base.saved = np.concatenate([base.saved, columns.astype(base.saved.dtype)], axis=-1)
    base.weights = None


def _extend(cache: _Cache, pod: PodRequest, entry: _Rows, per_gpu: bool) -> None:
    """Gives a pod shape's rows the columns added since they were made: computed for the
    nodes whose rows are for the usage the cache's free GPUs and CPU hold (the base rows'
    stamp); the others are marked unseen, so they are recomputed whole when next asked for.
    Marked, not merely left: copies sharing the cache hold other usage, and a row kept under
    one copy's stamp with zeros in its new columns would be taken as up to date by that copy."""
    first = entry.saved.shape[-1]
    added = cache.tasks[first:]
    same = (entry.seen == cache.base.seen) & (entry.seen >= 0)
    fresh = np.flatnonzero(same)
    entry.seen[~same] = -1
    columns = np.zeros((*entry.saved.shape[:-1], len(added)), dtype=entry.saved.dtype)
    if fresh.size:
        tables, allowed = _Tables.of(added), cache.allowed[:, first:]
        columns[fresh] = _after_parts(cache, pod, fresh, per_gpu, tables, allowed)[1]
    entry.saved = np.concatenate([entry.saved, columns], axis=-1)
    entry.weights = None


def _update(snapshot: Snapshot, cache: _Cache, changed: IntArray) -> None:
    """Reads the changed nodes' free GPUs and CPU again and recomputes their base rows."""
    rows = free_matrix(snapshot, changed)
    cache.gpus[changed] = 0
    cache.gpus[changed, : rows.shape[1]] = rows
    cache.cpu[changed] = _cpu_free(snapshot, changed)
    base = cache.base
    base.idle[changed], base.saved[changed] = _parts(
        cache.gpus[changed], cache.cpu[changed], cache.tables, cache.allowed[changed]
    )
    base.seen[changed] = snapshot.stamp[changed]


def _cpu_free(snapshot: Snapshot, nodes: IntArray) -> IntArray:
    column = snapshot.columns["cpu"]
    free: IntArray = snapshot.allocatable[nodes, column] - snapshot.used[nodes, column]
    return free


def _allowed(snapshot: Snapshot, gpu_tasks: list[TaskType]) -> BoolArray:
    """Per node and GPU task, whether the task's node constraints admit the node."""
    columns = [
        np.ones(len(snapshot.nodes), dtype=np.bool_)
        if task.required_terms is None
        else static_mask(snapshot, PodRequest(key="", required_terms=task.required_terms))
        for task in gpu_tasks
    ]
    if not columns:
        return np.ones((len(snapshot.nodes), 0), dtype=np.bool_)
    return np.stack(columns, axis=1)


def _before(snapshot: Snapshot, cache: _Cache, weights: _Weights, nodes: IntArray) -> FloatArray:
    """The measure of ``nodes`` as they are (the base rows must be up to date)."""
    base = cache.base
    stale = base.stale_values(weights, snapshot.stamp, nodes)
    if stale.size:
        base.value[stale] = _weigh(base.idle[stale], base.saved[stale], weights)
        base.valued[stale] = snapshot.stamp[stale]
    before: FloatArray = base.value[nodes]
    return before


def node_fragmentation(snapshot: Snapshot, tasks: tuple[TaskType, ...]) -> FloatArray:
    """Every node's current fragmentation (milli-GPU) for ``tasks``; read-only view."""
    cache, weights = _cache(snapshot, tasks)
    base = cache.base
    if base.weights is not weights:
        base.weights = weights
        base.valued[:] = -1
    stale = np.flatnonzero(base.valued != snapshot.stamp)
    if stale.size:
        base.value[stale] = _weigh(base.idle[stale], base.saved[stale], weights)
        base.valued[stale] = snapshot.stamp[stale]
    view = base.value.view()
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
    cache, weights = _cache(snapshot, tasks, nodes)
    per_gpu = bool(pod.gpu_milli) and share_gpu is ShareGpu.LEAST_FRAGMENTATION
    entry = _shape_rows(cache, pod, per_gpu)
    if entry.saved.shape[-1] < len(cache.tasks):
        _extend(cache, pod, entry, per_gpu)
    stale = entry.stale_values(weights, snapshot.stamp, nodes)
    if stale.size:
        unseen = stale[entry.seen[stale] != snapshot.stamp[stale]]
        if unseen.size:
            entry.idle[unseen], entry.saved[unseen] = _after_parts(
                cache, pod, unseen, per_gpu, cache.tables, cache.allowed
            )
            entry.seen[unseen] = snapshot.stamp[unseen]
        after = _weigh(entry.idle[stale], entry.saved[stale], weights)
        before = _before(snapshot, cache, weights, stale)
        if per_gpu:
            # Rounded so that float noise cannot move a node across a score step at Δ = 0.
            delta = np.round(after - before[:, None], 6)
            entry.value[stale] = np.where(cache.gpus[stale] >= pod.gpu_milli, delta, np.inf)
        else:
            entry.value[stale] = np.round(after - before, 6)
        entry.valued[stale] = snapshot.stamp[stale]
    grown: FloatArray = entry.value[nodes]
    return grown


def _shape_rows(cache: _Cache, pod: PodRequest, per_gpu: bool) -> _Rows:
    key = (pod.resources.get("cpu", 0), pod.gpus, pod.gpu_milli, per_gpu)
    entry = cache.growth.get(key)
    if entry is None:
        count, width = cache.gpus.shape
        shape = (count, width) if per_gpu else (count,)
        entry = _Rows.empty(shape, cache.tables.gpus.size, width)
        cache.growth[key] = entry
        held = sum(rows.nbytes for rows in cache.growth.values())
        while held > CACHE_BYTES and len(cache.growth) > 1:
            _, dropped = cache.growth.popitem(last=False)
            held -= dropped.nbytes
    else:
        cache.growth.move_to_end(key)
    return entry


def _after_parts(
    cache: _Cache,
    pod: PodRequest,
    nodes: IntArray,
    per_gpu: bool,
    tables: _Tables,
    allowed_all: BoolArray,
) -> tuple[FloatArray, SavedArray]:
    """The weight-free parts of ``nodes`` with ``pod`` on them, for the task ``tables`` (and
    their per node permission ``allowed_all``): the pod on its lowest free whole GPUs, on its
    best-fitting GPU, or (``per_gpu``) on each GPU in turn, (nodes, GPUs)."""
    free = cache.gpus[nodes]
    cpu_after = cache.cpu[nodes] - pod.resources.get("cpu", 0)
    allowed = allowed_all[nodes]
    if per_gpu:
        count, width = free.shape
        variants = np.repeat(free[:, None, :], width, axis=1)
        diagonal = np.arange(width)
        variants[:, diagonal, diagonal] -= pod.gpu_milli
        idle, saved = _parts(
            variants.reshape(count * width, width),
            np.repeat(cpu_after, width),
            tables,
            np.repeat(allowed, width, axis=0),
        )
        return idle.reshape(count, width), saved.reshape(count, width, saved.shape[1])
    after = free.copy()
    if pod.gpus:
        whole = after >= WHOLE_GPU_MILLI
        after[whole & (np.cumsum(whole, axis=1) <= pod.gpus)] = 0
    elif pod.gpu_milli:
        # The best fit: least left over, the lowest index among equals (as `choose_share`).
        slack = np.where(after >= pod.gpu_milli, after - pod.gpu_milli, np.iinfo(np.int64).max)
        after[np.arange(nodes.size), np.argmin(slack, axis=1)] -= pod.gpu_milli
    return _parts(after, cpu_after, tables, allowed)


def sigmoid_score(delta: FloatArray, step: float) -> FloatArray:
    """FGD's score of a growth ``delta`` (milli-GPU): 100 / (1 + exp(Δ/1000)), range (0, 100),
    50 for no change, floored to a multiple of ``step`` (0: not floored)."""
    # np.clip's Python wrapper cost more than the arithmetic on a rack's few candidates.
    raw = 100.0 / (1.0 + np.exp(np.minimum(np.maximum(delta / 1000.0, -50.0), 50.0)))
    if step <= 0:
        return raw
    floored: FloatArray = np.floor(raw / step) * step
    return floored

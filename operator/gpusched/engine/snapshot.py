"""The cluster as the engine sees it: static node facts plus mutable usage arrays.

Static parts (labels, taints, GPU shapes, label-value codes) are built once and shared by copies;
mutable parts (resource usage, per-GPU free milli, derived per-node GPU counters) are numpy
arrays so that filters and scores run over all nodes at once. Every change goes through
`Snapshot.assume` / `Snapshot.forget`, which are exact inverses, so a gang attempt can be
rolled back to a checkpoint (Volcano's Statement, without copying the cluster).
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from gpusched.api.config import GPU_RESOURCE, SchedulerConfig, StaleTelemetry
from gpusched.api.errors import InvalidObjectError
from gpusched.api.k8s import Node
from gpusched.api.selectors import Taint
from gpusched.api.topology import TOPOLOGY_ANNOTATION, parse_topology_annotation
from gpusched.engine.gpuset import NodeShape
from gpusched.engine.request import WHOLE_GPU_MILLI, PodRequest
from gpusched.engine.workload import TaskCounts

if TYPE_CHECKING:
    from gpusched.engine.fragmentation import TaskType

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

BASE_RESOURCES = ("cpu", "memory", "pods")


@dataclass(frozen=True, slots=True)
class GpuSample:
    """Telemetry of one GPU (dcgm-exporter fields); ``None`` where the metric is missing."""

    temperature_c: float | None = None
    fb_free_mib: float | None = None
    fb_used_mib: float | None = None
    utilization: float | None = None
    xid_errors: float | None = None
    age_seconds: float = 0.0
    """How old the oldest of these values is, in seconds, when the snapshot was taken."""


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """What never changes while a snapshot lives."""

    name: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    unschedulable: bool
    ready: bool
    shape: NodeShape
    topology_known: bool
    """The node has a valid ``gpusched.io/gpu-topology`` annotation."""
    topology_error: str | None
    """Why the annotation could not be used; such a node takes single-GPU pods only."""
    gpu_memory_mib: tuple[float | None, ...] = ()

    @property
    def gpu_count(self) -> int:
        return self.shape.gpu_count


@dataclass(frozen=True, slots=True)
class Holding:
    """A pod placed on a node: bound (by anyone) or assumed by this engine."""

    pod: PodRequest
    node: int
    gpus: tuple[int, ...]
    """Node-local GPU indices the pod holds."""
    milli_per_gpu: int
    vector: tuple[tuple[int, int], ...]
    """(column, amount) pairs added to the node's ``used`` row."""


@dataclass(frozen=True, slots=True)
class BoundPod:
    """A pod already on a node, as read from the API."""

    pod: PodRequest
    node: str
    gpus: tuple[int, ...] | None
    """Indices from ``gpusched.io/gpus``; ``None`` when the pod carries no such annotation."""


@dataclass(slots=True)
class _Statics:
    nodes: tuple[NodeInfo, ...]
    index: dict[str, int]
    columns: dict[str, int]
    allocatable: IntArray
    gpu_offset: IntArray
    gpu_usable: BoolArray
    gpu_slot: IntArray
    """Per GPU, its NUMA slot within its node: GPUs of one known NUMA node share a slot; a GPU
    of unknown NUMA node has a slot of its own (single-numa-node cannot vouch for it)."""
    numa_slots: int
    gpu_mem_free: FloatArray
    gpu_mem_total: FloatArray
    gpu_notes: dict[int, str]
    """Global GPU id → why it is excluded, or why its telemetry is unknown (reported)."""
    node_notes: dict[int, list[str]]
    label_codes: dict[str, tuple[IntArray, list[tuple[tuple[str, str], ...]]]] = field(
        default_factory=dict
    )
    static_masks: dict[str, BoolArray] = field(default_factory=dict)
    static_reasons: dict[str, tuple[IntArray, list[str]]] = field(default_factory=dict)
    has_memory_telemetry: bool = False
    derived: dict[str, Any] = field(default_factory=dict)
    """Caches computed from the static facts and shared by every copy (the tie-break orders,
    the fragmentation tables): a copy never pays for them again. A cache that also depends on
    usage keys its rows by `Snapshot.stamp`, so copies that diverge never read each other's."""
    clock: int = 0
    """The last stamp handed out (see `Snapshot.stamp`)."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    """Held by `schedule` while it works on a snapshot in place (it rolls its changes back
    before returning), and by `SnapshotCache.build`: one cluster, one writer at a time, even
    when a cancelled caller's thread is still finishing."""


class Snapshot:
    """Nodes, their usage and their GPUs. Node indices follow node names in sorted order, so
    every "lowest index" tie-break is a tie-break on the node name."""

    def __init__(self, config: SchedulerConfig, statics: _Statics) -> None:
        self.config = config
        self._s = statics
        n = len(statics.nodes)
        g = int(statics.gpu_offset[-1])
        self.used: IntArray = np.zeros_like(statics.allocatable)
        self.gpu_free: IntArray = np.full(g, WHOLE_GPU_MILLI, dtype=np.int64)
        self.gpu_pods: IntArray = np.zeros(g, dtype=np.int64)
        self.free_mask: list[int] = [0] * n
        """Per node, bit i set: GPU i is usable and wholly free. Python ints, because a node
        may have up to 64 GPUs and bit 63 does not fit a signed int64."""
        self.free_whole: IntArray = np.zeros(n, dtype=np.int64)
        self.numa_free: IntArray = np.zeros((n, statics.numa_slots), dtype=np.int64)
        """Per node and NUMA slot, the usable wholly free GPUs."""
        self.max_numa_free: IntArray = np.zeros(n, dtype=np.int64)
        self.max_share: IntArray = np.zeros(n, dtype=np.int64)
        self.gpu_allocated: IntArray = np.zeros(n, dtype=np.int64)
        self.stamp: IntArray = np.zeros(n, dtype=np.int64)
        """Per node, a number that changes with every assume or forget on the node and is never
        handed out twice by this cluster's statics (copies included): equal stamps mean equal
        usage, so caches of per-node results stay exact through copies and rollbacks."""
        self.holdings: dict[str, Holding] = {}
        self.gpu_apps: dict[int, dict[str, int]] = {}
        self._journal: list[tuple[bool, Holding]] = []
        self._tasks: TaskCounts | None = None
        self.workload: tuple[TaskType, ...] = ()
        """Target workload of the fragmentation score (FGD); empty turns the score off."""
        for node in range(n):
            self._refresh_node(node)

    # ----- static facts -------------------------------------------------------------------

    @property
    def nodes(self) -> tuple[NodeInfo, ...]:
        return self._s.nodes

    @property
    def derived(self) -> dict[str, Any]:
        return self._s.derived

    @property
    def lock(self) -> threading.Lock:
        return self._s.lock

    @property
    def index(self) -> Mapping[str, int]:
        return self._s.index

    @property
    def columns(self) -> Mapping[str, int]:
        return self._s.columns

    @property
    def allocatable(self) -> IntArray:
        return self._s.allocatable

    @property
    def gpu_offset(self) -> IntArray:
        return self._s.gpu_offset

    @property
    def gpu_usable(self) -> BoolArray:
        return self._s.gpu_usable

    @property
    def gpu_mem_free(self) -> FloatArray:
        return self._s.gpu_mem_free

    @property
    def gpu_mem_total(self) -> FloatArray:
        return self._s.gpu_mem_total

    @property
    def has_memory_telemetry(self) -> bool:
        """Whether any GPU has fresh free-memory telemetry (lets hot paths skip the NaNs)."""
        return self._s.has_memory_telemetry

    @property
    def gpu_notes(self) -> Mapping[int, str]:
        return self._s.gpu_notes

    @property
    def node_notes(self) -> dict[int, list[str]]:
        return self._s.node_notes

    @property
    def static_masks(self) -> dict[str, BoolArray]:
        return self._s.static_masks

    @property
    def static_reasons(self) -> dict[str, tuple[IntArray, list[str]]]:
        return self._s.static_reasons

    @property
    def largest(self) -> IntArray:
        """Per resource column, the most any node has allocatable (0 without nodes)."""
        cached: IntArray | None = self._s.derived.get("largest")
        if cached is None:
            cached = self.allocatable.max(axis=0, initial=0)
            self._s.derived["largest"] = cached
        return cached

    @property
    def most_gpus(self) -> int:
        """The most GPUs any node has."""
        cached: int | None = self._s.derived.get("most gpus")
        if cached is None:
            cached = int(np.diff(self.gpu_offset).max(initial=0))
            self._s.derived["most gpus"] = cached
        return cached

    def domain_codes(self, key: str) -> tuple[IntArray, list[tuple[tuple[str, str], ...]]]:
        """Per node, a code for its domain of label ``key`` (-1: no such label), and each
        domain's full path as (key, value) pairs by code, in path order. The path runs through
        every outer ``topologyLevels`` key the node has, so rack-1 of zone-a and rack-1 of
        zone-b are different domains."""
        cached = self._s.label_codes.get(key)
        if cached is None:
            levels = self.config.topology_levels
            outer = levels[: levels.index(key)] if key in levels else ()
            paths = [_path(n.labels, outer, key) for n in self.nodes]
            ordered = sorted({p for p in paths if p is not None})
            by_path = {p: i for i, p in enumerate(ordered)}
            codes = [by_path[p] if p is not None else -1 for p in paths]
            cached = (np.array(codes, dtype=np.int64), ordered)
            self._s.label_codes[key] = cached
        return cached

    def node_gpus(self, node: int) -> range:
        """Global GPU ids of ``node``."""
        return range(int(self.gpu_offset[node]), int(self.gpu_offset[node + 1]))

    # ----- copies and transactions --------------------------------------------------------

    def copy(self, cold: bool = False) -> Snapshot:
        """A scratch copy: statics shared, usage copied. ``cold``: the copy shares no cache
        and no lock with this one (its static facts are copied without the caches, its task
        counts are counted again when asked), so it pays what a newly built snapshot pays:
        what tests and benchmarks compare the caches against."""
        clone = Snapshot.__new__(Snapshot)
        clone.config = self.config
        clone._s = self._s
        if cold:
            clone._s = replace(
                self._s,
                label_codes={},
                static_masks={},
                static_reasons={},
                derived={},
                lock=threading.Lock(),
            )
        clone.free_mask = list(self.free_mask)
        for name in (
            "used",
            "gpu_free",
            "gpu_pods",
            "free_whole",
            "numa_free",
            "max_numa_free",
            "max_share",
            "gpu_allocated",
            "stamp",
        ):
            setattr(clone, name, getattr(self, name).copy())
        clone.holdings = dict(self.holdings)
        clone.gpu_apps = {gid: dict(apps) for gid, apps in self.gpu_apps.items()}
        clone._journal = []
        tasks = self._tasks
        clone._tasks = tasks.copy() if tasks is not None and not cold else None
        clone.workload = self.workload
        return clone

    def checkpoint(self) -> int:
        return len(self._journal)

    def rollback(self, checkpoint: int) -> None:
        """Undoes every assume/forget made after ``checkpoint``."""
        while len(self._journal) > checkpoint:
            added, holding = self._journal.pop()
            if added:
                self._remove(holding)
            else:
                self._add(holding)

    def journal_since(self, checkpoint: int) -> list[tuple[bool, Holding]]:
        """The changes made after ``checkpoint``: (added, holding) in order."""
        return list(self._journal[checkpoint:])

    def assume(self, pod: PodRequest, node: int, gpus: Sequence[int]) -> Holding:
        """Places ``pod`` on ``node`` holding node-local ``gpus``; journaled. A pod is held
        at most once: assuming it again is a caller's bug and raises ``ValueError`` rather
        than count its resources twice."""
        if pod.key in self.holdings:
            raise ValueError(
                f"{pod.key} is already placed on {self.nodes[self.holdings[pod.key].node].name}"
            )
        vector = tuple(
            (self.columns[name], amount)
            for name, amount in pod.resources.items()
            if name in self.columns and amount
        )
        milli = pod.gpu_milli if pod.gpu_milli else WHOLE_GPU_MILLI
        holding = Holding(pod, node, tuple(sorted(gpus)), milli, vector)
        self._add(holding)
        self._journal.append((True, holding))
        return holding

    def forget(self, key: str) -> Holding | None:
        """Releases the pod ``key`` (deleted, finished, or a failed bind); journaled."""
        holding = self.holdings.get(key)
        if holding is not None:
            self._remove(holding)
            self._journal.append((False, holding))
        return holding

    def load(self, bound: Iterable[BoundPod]) -> None:
        """Assumes every pod of ``bound`` on its node, as `_add_bound` does one by one, but
        over Python lists with each node's GPU counters refreshed once at the end: building a
        snapshot of 100,000 bound pods costs a few microseconds a pod. Not journaled (a new
        snapshot's journal is cleared anyway); pods on unknown nodes or held already are
        skipped."""
        index, columns, holdings = self.index, self.columns, self.holdings
        offset = self.gpu_offset.tolist()
        free = self.gpu_free.tolist()
        pods_on = self.gpu_pods.tolist()
        used = self.used.tolist()
        touched: set[int] = set()
        with_gpus: set[int] = set()
        vectors: dict[tuple[tuple[str, int], ...], tuple[tuple[int, int], ...]] = {}
        for bound_pod in bound:
            pod = bound_pod.pod
            node = index.get(bound_pod.node)
            if node is None or pod.key in holdings:
                continue
            gpus = _bound_gpus(self, node, bound_pod, free)
            requested = tuple(pod.resources.items())
            vector = vectors.get(requested)
            if vector is None:  # pods come in a few shapes: each vector is built once
                vector = tuple((columns[n], a) for n, a in requested if n in columns and a)
                vectors[requested] = vector
            milli = pod.gpu_milli if pod.gpu_milli else WHOLE_GPU_MILLI
            holding = Holding(pod, node, tuple(sorted(gpus)), milli, vector)
            holdings[pod.key] = holding
            if self._tasks is not None:
                self._tasks.add(pod)
            row = used[node]
            for column, amount in vector:
                row[column] += amount
            base = offset[node]
            for gpu in holding.gpus:
                free[base + gpu] -= milli
                pods_on[base + gpu] += 1
                if pod.app is not None:
                    self._count_app(base + gpu, pod.app, +1)
            touched.add(node)
            if holding.gpus:
                with_gpus.add(node)
        if not touched:
            return
        self.used[:] = np.array(used, dtype=np.int64).reshape(self.used.shape)
        self.gpu_free[:] = free
        self.gpu_pods[:] = pods_on
        for node in sorted(with_gpus):
            self._refresh_node(node)
        nodes = np.array(sorted(touched), dtype=np.int64)
        self.stamp[nodes] = np.arange(1, nodes.size + 1) + self._s.clock
        self._s.clock += nodes.size

    def task_counts(self) -> TaskCounts:
        """How many held pods there are of each task key (see `workload.task_key`): counted
        once, then kept up to date by every assume and forget, so the target workload of a
        scheduling cycle costs the number of task types, not the number of pods."""
        if self._tasks is None:
            tasks = TaskCounts()
            for holding in self.holdings.values():
                tasks.add(holding.pod)
            self._tasks = tasks
        return self._tasks

    def _add(self, holding: Holding) -> None:
        self.holdings[holding.pod.key] = holding
        if self._tasks is not None:
            self._tasks.add(holding.pod)
        self._apply(holding, +1)

    def _remove(self, holding: Holding) -> None:
        del self.holdings[holding.pod.key]
        if self._tasks is not None:
            self._tasks.remove(holding.pod)
        self._apply(holding, -1)

    def _apply(self, holding: Holding, sign: int) -> None:
        self._s.clock += 1
        self.stamp[holding.node] = self._s.clock
        row = self.used[holding.node]
        for column, amount in holding.vector:
            row[column] += sign * amount
        gpus = holding.gpus
        if not gpus:
            return
        base = int(self.gpu_offset[holding.node])
        first, count = gpus[0], len(gpus)
        if count > 2 and gpus[-1] - first == count - 1:
            # Consecutive GPUs (a whole node, half of one): one slice, not a scalar a GPU.
            start = base + first
            self.gpu_free[start : start + count] -= sign * holding.milli_per_gpu
            self.gpu_pods[start : start + count] += sign
        else:
            for gpu in gpus:
                self.gpu_free[base + gpu] -= sign * holding.milli_per_gpu
                self.gpu_pods[base + gpu] += sign
        app = holding.pod.app
        if app is not None:
            for gpu in gpus:
                self._count_app(base + gpu, app, sign)
        self._refresh_node(holding.node)

    def _count_app(self, gid: int, app: str, sign: int) -> None:
        apps = self.gpu_apps.setdefault(gid, {})
        apps[app] = apps.get(app, 0) + sign
        if apps[app] <= 0:
            del apps[app]
            if not apps:
                del self.gpu_apps[gid]

    def _refresh_node(self, node: int) -> None:
        """Recomputes the per-node GPU counters the filters read. Plain Python over the
        node's few GPUs: it runs on every assume and forget, where numpy's per-call cost
        on 8-element slices was most of the time."""
        start, stop = int(self.gpu_offset[node]), int(self.gpu_offset[node + 1])
        free = self.gpu_free[start:stop].tolist()
        usable = self._s.gpu_usable[start:stop].tolist()
        slots = self._s.gpu_slot[start:stop].tolist()
        counts = [0] * self._s.numa_slots
        mask = whole = 0
        share: int | None = None
        for i, milli in enumerate(free):
            if not usable[i]:
                continue
            if share is None or milli > share:
                share = milli
            if milli >= WHOLE_GPU_MILLI:
                mask |= 1 << i
                whole += 1
                counts[slots[i]] += 1
        self.free_mask[node] = mask
        self.free_whole[node] = whole
        self.max_share[node] = share if share is not None else 0
        self.gpu_allocated[node] = WHOLE_GPU_MILLI * (stop - start) - sum(free)
        if counts:
            self.numa_free[node] = counts
        self.max_numa_free[node] = max(counts, default=0)


def _path(
    labels: Mapping[str, str], outer: Sequence[str], key: str
) -> tuple[tuple[str, str], ...] | None:
    if key not in labels:
        return None
    return (*((k, labels[k]) for k in outer if k in labels), (key, labels[key]))


# ----- building a snapshot -----------------------------------------------------------------


class SnapshotCache:
    """Keeps the last snapshot and brings it up to date instead of building it anew.

    The operator needs a snapshot every scheduling cycle, from objects that mostly did not
    change since the last one. Its cluster state replaces a Node object on every watch
    update and keeps one `BoundPod` object per unchanged pod, so object identity is the change
    signal: per-node facts of an unchanged Node are reused; the static part (with its cached
    node masks) is reused while no Node, the telemetry mapping or the config changed; and
    then only the pods that came, went or changed are assumed or forgotten. A snapshot built
    through the cache belongs to it: callers must not change it (`schedule` works on it in
    place under `Snapshot.lock` and rolls its changes back before it returns).
    """

    def __init__(self) -> None:
        self._infos: dict[str, tuple[Node, NodeInfo]] = {}
        self._inputs: tuple[tuple[Node, ...], object, SchedulerConfig] | None = None
        self._snapshot: Snapshot | None = None
        self._held: dict[str, BoundPod] = {}

    def build(
        self,
        ordered: Sequence[Node],
        bound: Iterable[BoundPod],
        telemetry: Mapping[tuple[str, int], GpuSample] | None,
        config: SchedulerConfig,
    ) -> Snapshot:
        nodes = tuple(ordered)
        snapshot = self._snapshot
        if snapshot is None or not self._same(nodes, telemetry, config):
            infos = [self._info(node) for node in nodes]
            self._infos = {node.name: self._infos[node.name] for node in nodes}
            snapshot = Snapshot(config, _build_statics(nodes, infos, telemetry, config))
            self._inputs = (nodes, telemetry, config)
            self._snapshot = snapshot
            self._held = {}
        with snapshot.lock:
            self._sync(snapshot, bound)
        return snapshot

    def _sync(self, snapshot: Snapshot, bound: Iterable[BoundPod]) -> None:
        """Assumes the pods that came or changed, forgets those that went or changed."""
        current: dict[str, BoundPod] = {}
        for pod in bound:
            current.setdefault(pod.pod.key, pod)
        for key, before in list(self._held.items()):
            now = current.get(key)
            if now is None or (now is not before and now != before):
                snapshot.forget(key)
                del self._held[key]
        if not self._held:  # a new snapshot: every pod at once
            snapshot.load(current.values())
            self._held = dict(current)
        for key, pod in current.items():
            if key not in self._held:
                _add_bound(snapshot, pod)
                self._held[key] = pod
        snapshot._journal.clear()

    def _same(self, nodes: tuple[Node, ...], telemetry: object, config: SchedulerConfig) -> bool:
        if self._inputs is None:
            return False
        before, before_telemetry, before_config = self._inputs
        return (
            before_telemetry is telemetry
            and before_config is config
            and len(before) == len(nodes)
            and all(a is b for a, b in zip(before, nodes, strict=True))
        )

    def _info(self, node: Node) -> NodeInfo:
        hit = self._infos.get(node.name)
        if hit is not None and hit[0] is node:
            return hit[1]
        info = _node_info(node)
        self._infos[node.name] = (node, info)
        return info


def build_snapshot(
    nodes: Iterable[Node],
    bound: Iterable[BoundPod] = (),
    telemetry: Mapping[tuple[str, int], GpuSample] | None = None,
    config: SchedulerConfig | None = None,
    cache: SnapshotCache | None = None,
) -> Snapshot:
    """Builds a snapshot from parsed nodes, the pods already on them, and GPU telemetry keyed
    by (node name, GPU index). Pods on unknown nodes are ignored (the node is gone).

    ``telemetry=None`` means there is no telemetry source (``simulate`` without
    ``--metrics``): GPUs are judged by allocation alone and nothing is reported about them. A
    mapping, even an empty one, means a source exists: a GPU missing from it is unknown, which
    is never healthy (usable or not as ``telemetry.stale`` says, and always reported).
    With a ``cache`` the previous snapshot is brought up to date instead (see
    `SnapshotCache`); the result then belongs to the cache and must not be changed."""
    config = config or SchedulerConfig()
    ordered = sorted(nodes, key=lambda n: n.name)
    if cache is not None:
        return cache.build(ordered, bound, telemetry, config)
    allocatables = [node.allocatable_resources() for node in ordered]
    infos = [_node_info(node, a) for node, a in zip(ordered, allocatables, strict=True)]
    snapshot = Snapshot(config, _build_statics(ordered, infos, telemetry, config, allocatables))
    snapshot.load(bound)
    snapshot._journal.clear()
    return snapshot


def _build_statics(
    ordered: Sequence[Node],
    infos: list[NodeInfo],
    telemetry: Mapping[tuple[str, int], GpuSample] | None,
    config: SchedulerConfig,
    parsed: list[dict[str, int]] | None = None,
) -> _Statics:
    allocatables = parsed if parsed is not None else [n.allocatable_resources() for n in ordered]
    columns = _columns(allocatables)
    return _statics(config, infos, allocatables, columns, telemetry)


def _columns(allocatables: Sequence[Mapping[str, int]]) -> dict[str, int]:
    names = list(BASE_RESOURCES)
    extra = sorted({r for a in allocatables for r in a} - set(names) - {GPU_RESOURCE})
    return {name: i for i, name in enumerate(names + extra)}


@functools.lru_cache(maxsize=256)
def _parsed_topology(raw: str) -> tuple[int, NodeShape, tuple[float | None, ...]]:
    """A topology annotation's GPU count, shape and memory per GPU. Memoised on the text:
    the nodes of a cluster carry a handful of distinct annotations (one per hardware model),
    and parsing and checking one took most of building a 5,000-node snapshot. Raises
    `InvalidObjectError` (not memoised) for an annotation that does not parse."""
    topology = parse_topology_annotation("", raw)
    memory = tuple(float(g.memory_mib) if g.memory_mib is not None else None for g in topology.gpus)
    return len(topology.gpus), NodeShape.from_topology(topology), memory


def clear_topology_memo() -> None:
    """Forgets the parsed topology annotations (for benchmarks that time a first build)."""
    _parsed_topology.cache_clear()


def _node_info(node: Node, allocatable: Mapping[str, int] | None = None) -> NodeInfo:
    """The static facts of ``node``; ``allocatable``: its parsed allocatable resources, when
    the caller has them already (parsing quantities is not free)."""
    resources = allocatable if allocatable is not None else node.allocatable_resources()
    count = resources.get(GPU_RESOURCE, 0)
    raw = node.metadata.annotations.get(TOPOLOGY_ANNOTATION)
    shape: NodeShape | None = None
    known, error = False, None
    memory: tuple[float | None, ...] = (None,) * count
    if raw is not None:
        try:
            parsed = _parsed_topology(raw)
        except InvalidObjectError:
            try:  # again, for a message that names this node
                parse_topology_annotation(node.name, raw)
            except InvalidObjectError as err:
                error = str(err)
            else:  # pragma: no cover - the annotation parses the same for any node name
                raise
        else:
            described, parsed_shape, parsed_memory = parsed
            if described != count:
                error = (
                    f"Node {node.name}: metadata.annotations[{TOPOLOGY_ANNOTATION}]: describes "
                    f"{described} GPUs but the node advertises {count} {GPU_RESOURCE}"
                )
            else:
                shape, known, memory = parsed_shape, True, parsed_memory
    return NodeInfo(
        name=node.name,
        labels=dict(node.labels),
        taints=tuple(node.spec.taints),
        unschedulable=node.spec.unschedulable,
        ready=node.ready,
        shape=shape if shape is not None else NodeShape.unknown(count),
        topology_known=known,
        topology_error=error,
        gpu_memory_mib=memory,
    )


def _statics(
    config: SchedulerConfig,
    infos: list[NodeInfo],
    allocatables: list[dict[str, int]],
    columns: dict[str, int],
    telemetry: Mapping[tuple[str, int], GpuSample] | None,
) -> _Statics:
    allocatable = np.zeros((len(infos), len(columns)), dtype=np.int64)
    for row, resources in enumerate(allocatables):
        for name, amount in resources.items():
            if name in columns:
                allocatable[row, columns[name]] = amount
    counts = [info.gpu_count for info in infos]
    offset = np.zeros(len(infos) + 1, dtype=np.int64)
    offset[1:] = np.cumsum(counts)
    total = int(offset[-1])
    statics = _Statics(
        nodes=tuple(infos),
        index={info.name: i for i, info in enumerate(infos)},
        columns=columns,
        allocatable=allocatable,
        gpu_offset=offset,
        gpu_usable=np.ones(total, dtype=np.bool_),
        gpu_slot=_numa_slots(infos, total),
        numa_slots=max((len(_slot_ids(info)) for info in infos), default=0),
        gpu_mem_free=np.full(total, math.nan),
        gpu_mem_total=np.full(total, math.nan),
        gpu_notes={},
        node_notes={},
    )
    for n, info in enumerate(infos):
        _node_gpus_statics(config, statics, n, info, telemetry)
    statics.has_memory_telemetry = bool((~np.isnan(statics.gpu_mem_free)).any())
    return statics


def _slot_ids(info: NodeInfo) -> list[int]:
    """Per GPU of the node, its NUMA slot (see `_Statics.gpu_slot`): known NUMA nodes first,
    in id order, then one slot per GPU of unknown NUMA node."""
    known = sorted({numa for numa in info.shape.numa if numa is not None})
    slot_of = {numa: slot for slot, numa in enumerate(known)}
    next_slot = len(known)
    ids = []
    for numa in info.shape.numa:
        if numa is None:
            ids.append(next_slot)
            next_slot += 1
        else:
            ids.append(slot_of[numa])
    return ids


def _numa_slots(infos: Sequence[NodeInfo], total: int) -> IntArray:
    slots = np.zeros(total, dtype=np.int64)
    start = 0
    for info in infos:
        slots[start : start + info.gpu_count] = _slot_ids(info)
        start += info.gpu_count
    return slots


def _node_gpus_statics(
    config: SchedulerConfig,
    statics: _Statics,
    n: int,
    info: NodeInfo,
    telemetry: Mapping[tuple[str, int], GpuSample] | None,
) -> None:
    base = int(statics.gpu_offset[n])
    excluded = False
    for gpu in range(info.gpu_count):
        gid = base + gpu
        sample = telemetry.get((info.name, gpu)) if telemetry is not None else None
        total = info.gpu_memory_mib[gpu] if gpu < len(info.gpu_memory_mib) else None
        verdict = gpu_verdict(config, sample, total) if telemetry is not None else None
        fresh = sample is not None and sample.age_seconds <= config.telemetry.max_age_seconds
        if fresh and sample is not None and sample.fb_free_mib is not None:
            statics.gpu_mem_free[gid] = sample.fb_free_mib
        statics.gpu_mem_total[gid] = _total_memory(sample, total)
        if verdict is not None:
            usable, note = verdict
            statics.gpu_notes[gid] = note
            if not usable:
                statics.gpu_usable[gid] = False
                excluded = True
    if excluded and config.telemetry.exclude_whole_node:
        statics.gpu_usable[base : base + info.gpu_count] = False
        statics.node_notes.setdefault(n, []).append("excluded: a GPU failed a telemetry check")
    if info.topology_error:
        statics.node_notes.setdefault(n, []).append(info.topology_error)


def _total_memory(sample: GpuSample | None, total: float | None) -> float:
    if total is not None:
        return total
    if sample and sample.fb_free_mib is not None and sample.fb_used_mib is not None:
        return sample.fb_free_mib + sample.fb_used_mib
    return math.nan


def gpu_verdict(
    config: SchedulerConfig, sample: GpuSample | None, total_mib: float | None
) -> tuple[bool, str] | None:
    """Whether a GPU is usable by its telemetry: ``None`` when healthy, else (usable, why).

    Unknown or stale data is never called healthy: it is reported, and usable or not as
    ``telemetry.stale`` says."""
    limits = config.telemetry
    stale_usable = limits.stale is StaleTelemetry.USABLE
    if sample is None:
        return stale_usable, "no telemetry"
    if sample.age_seconds > limits.max_age_seconds:
        age = f"{sample.age_seconds:.0f} s > {limits.max_age_seconds:.0f} s"
        return stale_usable, f"telemetry stale ({age})"
    if sample.temperature_c is not None and sample.temperature_c > limits.temperature_limit_c:
        return False, f"{sample.temperature_c:.0f} °C > {limits.temperature_limit_c:.0f} °C"
    if limits.exclude_xid_errors and sample.xid_errors:
        return False, f"XID error {sample.xid_errors:.0f}"
    ratio = _free_ratio(sample, total_mib)
    if ratio is not None and ratio < limits.min_free_memory_ratio:
        return False, (
            f"free memory {ratio:.0%} < {limits.min_free_memory_ratio:.0%} "
            f"({sample.fb_free_mib:.0f} MiB free)"
        )
    return None


def _free_ratio(sample: GpuSample, total_mib: float | None) -> float | None:
    if sample.fb_free_mib is None:
        return None
    if total_mib is None:
        if sample.fb_used_mib is None:
            return None
        total_mib = sample.fb_free_mib + sample.fb_used_mib
    return sample.fb_free_mib / total_mib if total_mib > 0 else None


def _add_bound(snapshot: Snapshot, bound: BoundPod) -> None:
    node = snapshot.index.get(bound.node)
    if node is None or bound.pod.key in snapshot.holdings:
        return
    gpus = _bound_gpus(snapshot, node, bound, snapshot.gpu_free)
    snapshot.assume(bound.pod, node, gpus)


def _bound_gpus(
    snapshot: Snapshot, node: int, bound: BoundPod, gpu_free: Sequence[int] | IntArray
) -> list[int]:
    """The GPUs a bound pod holds. Without a valid ``gpusched.io/gpus`` annotation we cannot
    know which ones the device plugin gave it, so we take the highest-indexed free ones (the
    opposite end from where we allocate) and say so on the node."""
    wanted = bound.pod.gpus or (1 if bound.pod.gpu_milli else 0)
    if not wanted:
        return []
    count = snapshot.nodes[node].gpu_count
    if bound.gpus is not None and len(bound.gpus) == wanted and all(g < count for g in bound.gpus):
        return list(bound.gpus)
    need = bound.pod.gpu_milli or WHOLE_GPU_MILLI
    base = int(snapshot.gpu_offset[node])
    free = [g for g in reversed(range(count)) if gpu_free[base + g] >= need]
    chosen = sorted(free[:wanted])
    if chosen:
        note = (
            f"{bound.pod.key} holds {wanted} GPU(s) without a valid gpusched.io/gpus "
            f"annotation; assumed GPU(s) {','.join(map(str, chosen))}"
        )
        notes = snapshot.node_notes.setdefault(node, [])
        if note not in notes:  # a cached snapshot may see the same pod again
            notes.append(note)
    return chosen

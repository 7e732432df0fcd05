"""Building a snapshot from parsed Kubernetes objects: `build_snapshot` from scratch, or
`SnapshotCache` bringing the last one up to date."""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from gpusched.api.config import GPU_RESOURCE, SchedulerConfig
from gpusched.api.errors import InvalidObjectError
from gpusched.api.k8s import Node
from gpusched.api.topology import TOPOLOGY_ANNOTATION, parse_topology_annotation
from gpusched.engine import wording
from gpusched.engine.devices import CHANNEL_RESOURCE, NodeDevices, default_channel
from gpusched.engine.gpushape import NodeShape
from gpusched.engine.health import GpuSample, apply_telemetry
from gpusched.engine.nodes import IntArray, NodeInfo, Statics
from gpusched.engine.shares import SHARE_RESOURCE
from gpusched.engine.snapshot import BoundPod, Snapshot, add_bound

BASE_RESOURCES = ("cpu", "memory", "pods")


@dataclass(frozen=True, slots=True)
class BoundChanges:
    """The bound pods by key, and which keys changed since the feed's previous answer: what
    a change feed hands `SnapshotCache` so that a cycle touches only the pods that changed.

    ``changed`` None means anything may have changed (the feed's first answer, or one after
    it lost track). ``since`` and ``upto`` are the feed's marks before and after this
    answer: the cache applies only ``changed`` when its snapshot was last brought up to
    ``since``, and reads every pod otherwise (a snapshot rebuilt, another feed, or pods
    given as a plain iterable in between)."""

    pods: Mapping[str, BoundPod]
    changed: Collection[str] | None
    since: object
    upto: object


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
        self._infos: dict[str, tuple[Node, NodeDevices | None, NodeInfo]] = {}
        self._inputs: (
            tuple[tuple[Node, ...], tuple[NodeDevices | None, ...], object, SchedulerConfig] | None
        ) = None
        self._snapshot: Snapshot | None = None
        self._held: dict[str, BoundPod] = {}
        self._synced: object = None
        """The mark of the `BoundChanges` the snapshot was last brought up to (None: none)."""

    def build(
        self,
        ordered: Sequence[Node],
        bound: Iterable[BoundPod] | BoundChanges,
        telemetry: Mapping[tuple[str, int], GpuSample] | None,
        config: SchedulerConfig,
        devices: Mapping[str, NodeDevices] | None = None,
    ) -> Snapshot:
        nodes = tuple(ordered)
        found = (
            tuple(devices.get(n.metadata.name) for n in nodes) if devices else (None,) * len(nodes)
        )
        snapshot = self._snapshot
        if snapshot is None or not self._same(nodes, found, telemetry, config):
            infos = [self._info(node, d) for node, d in zip(nodes, found, strict=True)]
            self._infos = {node.name: self._infos[node.name] for node in nodes}
            snapshot = Snapshot(_build_statics(nodes, infos, telemetry, config))
            self._inputs = (nodes, found, telemetry, config)
            self._snapshot = snapshot
            self._held = {}
            self._synced = None
        with snapshot.lock:
            synced, self._synced = self._synced, None  # until this sync has completed
            if not isinstance(bound, BoundChanges):
                self._sync(snapshot, bound)
                return snapshot
            if bound.changed is None or bound.since is not synced:
                self._sync(snapshot, bound.pods.values())
            else:
                self._apply(snapshot, bound.pods, bound.changed)
            self._synced = bound.upto
        return snapshot

    def _apply(
        self, snapshot: Snapshot, pods: Mapping[str, BoundPod], changed: Iterable[str]
    ) -> None:
        """`_sync` for the keys that changed alone: the rest are held as they were."""
        held = self._held
        gone: list[str] = []
        came: list[BoundPod] = []
        for key in changed:
            now, before = pods.get(key), held.get(key)
            if now is before:
                continue
            if now is not None and before is not None and now == before:
                held[key] = now
                continue
            if before is not None:
                gone.append(key)
            if now is not None:
                came.append(now)
        if gone:
            snapshot.forget_many(gone)
            for key in gone:
                del held[key]
        for pod in came:
            add_bound(snapshot, pod)
            held[pod.pod.key] = pod
        snapshot.settle()

    def _sync(self, snapshot: Snapshot, bound: Iterable[BoundPod]) -> None:
        """Assumes the pods that came or changed, forgets those that went or changed. A pod
        that comes as a new but equal object (its watch event changed nothing the engine
        reads) is kept as it is, and its new object remembered, so that the next cycle finds
        it by identity: the comparison of two pods' requests (a few pydantic models each) ran
        again every cycle, for every bound pod that had ever had a MODIFIED event."""
        current: dict[str, BoundPod] = {}
        for pod in bound:
            current.setdefault(pod.pod.key, pod)
        held = self._held
        gone: list[str] = []
        for key, before in held.items():
            now = current.get(key)
            if now is before:
                continue
            if now is not None and now == before:
                held[key] = now  # a value replaced, no key added or removed: safe here
            else:
                gone.append(key)
        if gone:
            snapshot.forget_many(gone)
            for key in gone:
                del held[key]
        if not held:  # a new snapshot: every pod at once
            snapshot.load(current.values())
            self._held = dict(current)
        else:
            for key in [k for k in current if k not in held]:
                pod = current[key]
                add_bound(snapshot, pod)
                held[key] = pod
        snapshot.settle()

    def _same(
        self,
        nodes: tuple[Node, ...],
        devices: tuple[NodeDevices | None, ...],
        telemetry: object,
        config: SchedulerConfig,
    ) -> bool:
        if self._inputs is None:
            return False
        before, before_devices, before_telemetry, before_config = self._inputs
        return (
            before_telemetry is telemetry
            and before_config is config
            and len(before) == len(nodes)
            and all(a is b for a, b in zip(before, nodes, strict=True))
            and all(a is b for a, b in zip(before_devices, devices, strict=True))
        )

    def _info(self, node: Node, devices: NodeDevices | None) -> NodeInfo:
        hit = self._infos.get(node.name)
        if hit is not None and hit[0] is node and hit[1] is devices:
            return hit[2]
        info = _node_info(node, devices=devices)
        self._infos[node.name] = (node, devices, info)
        return info


_NAME = operator.attrgetter("metadata.name")
"""A Node's name without the property call: the operator sorts every node every cycle."""


def build_snapshot(
    nodes: Iterable[Node],
    bound: Iterable[BoundPod] | BoundChanges = (),
    telemetry: Mapping[tuple[str, int], GpuSample] | None = None,
    config: SchedulerConfig | None = None,
    cache: SnapshotCache | None = None,
    devices: Mapping[str, NodeDevices] | None = None,
) -> Snapshot:
    """Builds a snapshot from parsed nodes, the pods already on them, and GPU telemetry keyed
    by (node name, GPU index). Pods on unknown nodes are ignored (the node is gone). Of
    ``config`` only the telemetry limits (each GPU's verdict) and ``topologyLevels`` (how
    domains are named) are read, and kept with the static facts; what a decision prefers is
    the `policy.Policy` given to `schedule`. ``bound`` may come from a change feed
    (`BoundChanges`): with a ``cache``, only the pods it says changed are touched.

    ``telemetry=None`` means there is no telemetry source (``simulate`` without
    ``--metrics``): GPUs are judged by allocation alone and nothing is reported about them. A
    mapping, even an empty one, means a source exists: a GPU missing from it is unknown, which
    is never healthy (usable or not as ``telemetry.stale`` says, and always reported).
    With a ``cache`` the previous snapshot is brought up to date instead (see
    `SnapshotCache`); the result then belongs to the cache and must not be changed.
    ``devices``: the DRA devices of the nodes that publish some, by node name (their GPUs are
    counted from the devices, not from ``nvidia.com/gpu``)."""
    config = config or SchedulerConfig()
    ordered = sorted(nodes, key=_NAME)
    if cache is not None:
        return cache.build(ordered, bound, telemetry, config, devices)
    if isinstance(bound, BoundChanges):
        bound = bound.pods.values()
    allocatables = [node.allocatable_resources() for node in ordered]
    found = devices or {}
    infos = [
        _node_info(node, a, found.get(node.name))
        for node, a in zip(ordered, allocatables, strict=True)
    ]
    snapshot = Snapshot(_build_statics(ordered, infos, telemetry, config, allocatables))
    snapshot.load(bound)
    snapshot.settle()
    return snapshot


def _build_statics(
    ordered: Sequence[Node],
    infos: list[NodeInfo],
    telemetry: Mapping[tuple[str, int], GpuSample] | None,
    config: SchedulerConfig,
    parsed: list[dict[str, int]] | None = None,
) -> Statics:
    allocatables = parsed if parsed is not None else [n.allocatable_resources() for n in ordered]
    allocatables = [
        _with_channel(a, info.devices) for a, info in zip(allocatables, infos, strict=True)
    ]
    columns = _columns(allocatables)
    return _statics(config, infos, allocatables, columns, telemetry)


def _with_channel(allocatable: dict[str, int], devices: NodeDevices | None) -> dict[str, int]:
    """A node's allocatable resources with its default IMEX channel (`CHANNEL_RESOURCE`)."""
    channel = default_channel(devices)
    found = {**allocatable, CHANNEL_RESOURCE: channel} if channel else allocatable
    if devices is not None and devices.shares:  # the memory of its shared devices
        found = {**found, SHARE_RESOURCE: sum(s.capacity for s in devices.shares)}
    return found


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


def topology_problem(node: Node, devices: NodeDevices | None = None) -> str | None:
    """Why ``node``'s GPU topology annotation cannot be used (it does not parse, or describes
    another number of GPUs than the node advertises), or, on a DRA node (``devices``), why its
    devices and its topology do not agree; None when all is well, or there is nothing."""
    resources = node.allocatable_resources()
    if devices is None and GPU_RESOURCE not in resources:
        # No nvidia.com/gpu at all: its GPUs may come from ResourceSlices not seen yet (a
        # DRA node at start). Only an annotation that does not parse is wrong already.
        raw = node.metadata.annotations.get(TOPOLOGY_ANNOTATION)
        try:
            if raw is not None:
                parse_topology_annotation(node.name, raw)
        except InvalidObjectError as error:
            return str(error)
        return None
    found = _node_info(node, resources, devices).topology_error
    if found is None and devices is not None and devices.problem and not devices.updating:
        # A pool half-way through an update is not a mismatch: the driver is republishing.
        return wording.node_problem(node.name, devices.problem)
    return found


def _node_info(
    node: Node,
    allocatable: Mapping[str, int] | None = None,
    devices: NodeDevices | None = None,
) -> NodeInfo:
    """The static facts of ``node``; ``allocatable``: its parsed allocatable resources, when
    the caller has them already (parsing quantities is not free); ``devices``: its DRA
    devices, which say how many GPUs it has (it advertises no ``nvidia.com/gpu``)."""
    resources = allocatable if allocatable is not None else node.allocatable_resources()
    count = devices.gpu_count if devices is not None else resources.get(GPU_RESOURCE, 0)
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
                field = f"metadata.annotations[{TOPOLOGY_ANNOTATION}]"
                error = wording.gpu_count_mismatch(node.name, field, described, count, GPU_RESOURCE)
                # One of the two is wrong and we cannot tell which: the node is offered only
                # as many GPUs as both agree it has, so a stale count never overfills it.
                count = min(count, described)
                memory = (None,) * count
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
        advertised_gpus=devices.gpu_count
        if devices is not None
        else resources.get(GPU_RESOURCE, 0),
        devices=devices,
    )


def _statics(
    config: SchedulerConfig,
    infos: list[NodeInfo],
    allocatables: list[dict[str, int]],
    columns: dict[str, int],
    telemetry: Mapping[tuple[str, int], GpuSample] | None,
) -> Statics:
    allocatable = np.zeros((len(infos), len(columns)), dtype=np.int64)
    for row, resources in enumerate(allocatables):
        for name, amount in resources.items():
            if name in columns:
                allocatable[row, columns[name]] = amount
    counts = [info.gpu_count for info in infos]
    offset = np.zeros(len(infos) + 1, dtype=np.int64)
    offset[1:] = np.cumsum(counts)
    total = int(offset[-1])
    statics = Statics(
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
        gpu_reasons={},
        node_notes={},
        levels=tuple(config.topology_levels),
    )
    for n, info in enumerate(infos):
        apply_telemetry(config, statics, n, info, telemetry)
    statics.has_memory_telemetry = bool((~np.isnan(statics.gpu_mem_free)).any())
    return statics


def _slot_ids(info: NodeInfo) -> list[int]:
    """Per GPU of the node, its NUMA slot (see `Statics.gpu_slot`): known NUMA nodes first,
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

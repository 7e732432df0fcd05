"""What never changes while a snapshot lives: the nodes, their GPUs and the caches built from
them. Built once (see `build`) and shared by every copy of a snapshot; a snapshot adds the
usage (see `snapshot`)."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from gpusched.api.selectors import Taint
from gpusched.engine.devices import CLIQUE_LABEL, NodeDevices
from gpusched.engine.gpushape import NodeShape

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True, kw_only=True)
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
    advertised_gpus: int | None = None
    """The node's allocatable ``nvidia.com/gpu`` (None: as many as `gpu_count`). It exceeds
    `gpu_count` on a node whose topology annotation describes fewer GPUs: such a node is
    offered the smaller count."""
    devices: NodeDevices | None = None
    """The node's GPUs as DRA devices (ResourceSlices joined with its topology); None on a
    device-plugin node."""

    @property
    def gpu_count(self) -> int:
        return self.shape.gpu_count

    @property
    def advertised(self) -> int:
        return self.gpu_count if self.advertised_gpus is None else self.advertised_gpus


@dataclass(slots=True, kw_only=True)
class Statics:
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
    gpu_reasons: dict[int, str]
    """Global GPU id → the class of its note (`gpusched.engine.health.EXCLUSION_REASONS`)."""
    node_notes: dict[int, list[str]]
    levels: tuple[str, ...]
    """The node label keys that nest, outermost first (``topologyLevels``): a domain of one
    of them is named by its full path through the outer ones. How this cluster's labels are
    read, fixed when it is built, like the telemetry verdicts; no decision's preference."""
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


class NodeFacts:
    """The static side of a `Snapshot`: its nodes and their GPUs, by node index. Node indices
    follow node names in sorted order, so every "lowest index" tie-break is a tie-break on the
    node name. No setting rides here: what a decision prefers is its `policy.Policy`."""

    def __init__(self, statics: Statics) -> None:
        self._s = statics

    @property
    def levels(self) -> tuple[str, ...]:
        """The ``topologyLevels`` the cluster's domains are named by (see `Statics.levels`)."""
        return self._s.levels

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
    def gpu_reasons(self) -> Mapping[int, str]:
        return self._s.gpu_reasons

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
        """The most GPUs any node advertises, counting those a node whose topology annotation
        disagrees with it is not offered: a request above what any node is offered but within
        this may fit once that node is mended, so it is not impossible."""
        cached: int | None = self._s.derived.get("most gpus")
        if cached is None:
            cached = max((n.advertised for n in self.nodes), default=0)
            self._s.derived["most gpus"] = cached
        return cached

    def domain_codes(self, key: str) -> tuple[IntArray, list[tuple[tuple[str, str], ...]]]:
        """Per node, a code for its domain of label ``key`` (-1: no such label, or an empty
        value: NVIDIA's ``nvidia.com/gpu.clique`` is empty on a node whose NVLink fabric is
        not attached, and such a node is in no domain of it), and each
        domain's full path as (key, value) pairs by code, in path order. The path runs through
        every outer ``topologyLevels`` key the node has, so rack-1 of zone-a and rack-1 of
        zone-b are different domains."""
        cached = self._s.label_codes.get(key)
        if cached is None:
            levels = self._s.levels
            outer = levels[: levels.index(key)] if key in levels else ()
            clique = key == CLIQUE_LABEL
            paths = [
                None
                if clique and n.devices and n.devices.mixed(n.labels.get(key))
                else _path(n.labels, outer, key)
                for n in self.nodes
            ]
            ordered = sorted({p for p in paths if p is not None})
            by_path = {p: i for i, p in enumerate(ordered)}
            codes = [by_path[p] if p is not None else -1 for p in paths]
            cached = (np.array(codes, dtype=np.int64), ordered)
            self._s.label_codes[key] = cached
        return cached

    def node_gpus(self, node: int) -> range:
        """Global GPU ids of ``node``."""
        return range(int(self.gpu_offset[node]), int(self.gpu_offset[node + 1]))


def _path(
    labels: Mapping[str, str], outer: Sequence[str], key: str
) -> tuple[tuple[str, str], ...] | None:
    if not labels.get(key):
        return None
    return (*((k, labels[k]) for k in outer if k in labels), (key, labels[key]))

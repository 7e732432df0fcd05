"""The cluster as the engine sees it: static node facts (`nodes.NodeFacts`) plus mutable usage
arrays.

Static parts (labels, taints, GPU shapes, label-value codes) are built once and shared by copies;
mutable parts (resource usage, per-GPU free milli, derived per-node GPU counters) are numpy
arrays so that filters and scores run over all nodes at once. Every change goes through
`Snapshot.assume` / `Snapshot.forget` (or `Snapshot.forget_many`, many forgets at once), which
are exact inverses, so a gang attempt can be rolled back to a checkpoint (Volcano's Statement,
without copying the cluster).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from gpusched.engine import wording
from gpusched.engine.nodes import IntArray, NodeFacts, Statics
from gpusched.engine.request import WHOLE_GPU_MILLI, PodRequest
from gpusched.engine.workload import TaskCounts


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


class Snapshot(NodeFacts):
    """Nodes, their usage and their GPUs."""

    def __init__(self, statics: Statics) -> None:
        super().__init__(statics)
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
        for node in range(n):
            self._refresh_node(node)

    # ----- copies and transactions --------------------------------------------------------

    def copy(self, cold: bool = False) -> Snapshot:
        """A scratch copy: statics shared, usage copied. ``cold``: the copy shares no cache
        and no lock with this one (its static facts are copied without the caches, its task
        counts are counted again when asked), so it pays what a newly built snapshot pays:
        what tests and benchmarks compare the caches against."""
        clone = Snapshot.__new__(Snapshot)
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

    def settle(self) -> None:
        """Empties the journal: what is held now is the cluster as built, nothing to undo."""
        self._journal.clear()

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

    def forget_many(self, keys: Iterable[str]) -> list[Holding]:
        """Releases every pod of ``keys`` that is held, as `forget` would one by one (each
        journaled, in order, so a rollback undoes them), returning their holdings. The usage
        arrays are updated in a few array operations and each node's GPU counters refreshed
        once (`_refresh_nodes`): setting thousands of preemption victims aside one `forget`
        at a time cost a few microseconds of numpy scalar work each."""
        gone: list[Holding] = []
        holdings, journal, tasks = self.holdings, self._journal, self._tasks
        for key in keys:
            holding = holdings.pop(key, None)
            if holding is None:
                continue
            if tasks is not None:
                tasks.remove(holding.pod)
            journal.append((False, holding))
            gone.append(holding)
        if gone:
            self._release(gone)
        return gone

    def _release(self, gone: list[Holding]) -> None:
        """What `_apply` with sign -1 does for each of ``gone``, in bulk: holdings come in a
        few shapes (resource vector, GPU indices and milli), each shape's nodes updated in
        one array operation."""
        by_vector: dict[tuple[tuple[int, int], ...], list[int]] = {}
        by_gpus: dict[tuple[tuple[int, ...], int], list[int]] = {}
        for holding in gone:
            node = holding.node
            by_vector.setdefault(holding.vector, []).append(node)
            if holding.gpus:
                by_gpus.setdefault((holding.gpus, holding.milli_per_gpu), []).append(node)
                app = holding.pod.app
                if app is not None:
                    base = int(self.gpu_offset[node])
                    for gpu in holding.gpus:
                        self._count_app(base + gpu, app, -1)
        for vector, nodes in by_vector.items():
            if vector:
                columns, amounts = zip(*vector, strict=True)
                rows = np.array(nodes, dtype=np.int64)[:, None]
                np.subtract.at(self.used, (rows, np.array(columns)), np.array(amounts))
        with_gpus: set[int] = set()
        for (gpus, milli), nodes in by_gpus.items():
            rows = np.array(nodes, dtype=np.int64)
            ids = (self.gpu_offset[rows][:, None] + np.array(gpus, dtype=np.int64)).ravel()
            np.add.at(self.gpu_free, ids, milli)
            np.subtract.at(self.gpu_pods, ids, 1)
            with_gpus.update(nodes)
        touched = np.array(sorted({h.node for h in gone}), dtype=np.int64)
        self.stamp[touched] = np.arange(1, touched.size + 1) + self._s.clock
        self._s.clock += touched.size
        if with_gpus:
            self._refresh_nodes(np.array(sorted(with_gpus), dtype=np.int64))

    def load(self, bound: Iterable[BoundPod]) -> None:
        """Assumes every pod of ``bound`` on its node, as `add_bound` does one by one, but
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
            gpus = bound_gpus(self, node, bound_pod, free)
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
        base = self._layouts()[holding.node][0]
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

    def _refresh_nodes(self, nodes: IntArray) -> None:
        """`_refresh_node` for each of ``nodes`` (distinct, each with GPUs: those a bulk change
        released GPUs on), in array operations over their GPUs: the same counters, for the
        thousands of nodes a bulk change touches."""
        starts = self.gpu_offset[nodes]
        counts = self.gpu_offset[nodes + 1] - starts
        owner = np.repeat(np.arange(nodes.size), counts)
        firsts = np.cumsum(counts) - counts
        local = np.arange(owner.size) - firsts[owner]
        gids = starts[owner] + local
        free = self.gpu_free[gids]
        usable = self._s.gpu_usable[gids]
        whole = usable & (free >= WHOLE_GPU_MILLI)
        bits = np.left_shift(np.uint64(1), local.astype(np.uint64))
        masks = np.bitwise_or.reduceat(np.where(whole, bits, np.uint64(0)), firsts)
        for node, mask in zip(nodes.tolist(), masks.tolist(), strict=True):
            self.free_mask[node] = mask
        self.free_whole[nodes] = np.bincount(owner[whole], minlength=nodes.size)
        lowest = np.iinfo(np.int64).min
        share = np.maximum.reduceat(np.where(usable, free, lowest), firsts)
        self.max_share[nodes] = np.where(share == lowest, 0, share)
        self.gpu_allocated[nodes] = WHOLE_GPU_MILLI * counts - np.add.reduceat(free, firsts)
        slots = self._s.numa_slots  # at least 1: every GPU has a slot
        cells = owner[whole] * slots + self._s.gpu_slot[gids[whole]]
        numa = np.bincount(cells, minlength=nodes.size * slots).reshape(nodes.size, slots)
        self.numa_free[nodes] = numa
        self.max_numa_free[nodes] = numa.max(axis=1)

    def _refresh_node(self, node: int) -> None:
        """Recomputes the per-node GPU counters the filters read. Plain Python over the
        node's few GPUs, with its static layout read from `_layouts`: it runs on every
        assume and forget, where numpy's per-call cost on 8-element slices was most of the
        time."""
        start, stop, usable, slots = self._layouts()[node]
        free = self.gpu_free[start:stop].tolist()
        counts = [0] * self._s.numa_slots
        mask = whole = 0
        share: int | None = None
        for i, milli in enumerate(free):
            if usable is not None and not usable[i]:
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

    def _layouts(self) -> list[tuple[int, int, list[bool] | None, list[int]]]:
        """Per node, its GPUs' static layout as plain lists: the first and past-the-last
        global GPU ids, which are usable (None: all of them), their NUMA slots. Worked out
        once with the static facts, shared by every copy."""
        layouts: list[tuple[int, int, list[bool] | None, list[int]]] | None
        layouts = self._s.derived.get("gpu layouts")
        if layouts is None:
            offset = self.gpu_offset.tolist()
            usable = self._s.gpu_usable.tolist()
            slots = self._s.gpu_slot.tolist()
            layouts = [
                (a, b, None if all(usable[a:b]) else usable[a:b], slots[a:b])
                for a, b in itertools.pairwise(offset)
            ]
            self._s.derived["gpu layouts"] = layouts
        return layouts


def add_bound(snapshot: Snapshot, bound: BoundPod) -> None:
    node = snapshot.index.get(bound.node)
    if node is None or bound.pod.key in snapshot.holdings:
        return
    gpus = bound_gpus(snapshot, node, bound, snapshot.gpu_free)
    snapshot.assume(bound.pod, node, gpus)


def bound_gpus(
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
        note = wording.assumed_gpus(bound.pod.key, wanted, chosen)
        notes = snapshot.node_notes.setdefault(node, [])
        if note not in notes:  # a cached snapshot may see the same pod again
            notes.append(note)
    return chosen

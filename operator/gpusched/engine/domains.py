"""Topology domains: sets of nodes sharing a label value, nested inside their parent's domain.

A domain's identity is its full path of label values from the root ("zone-a", "rack-1"), as in
Kueue, so rack names need not be unique across zones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpusched.api.config import NumaPolicy
from gpusched.engine.devices import CLIQUE_LABEL
from gpusched.engine.fit import static_mask
from gpusched.engine.groups import GroupSpec
from gpusched.engine.nodes import BoolArray, IntArray
from gpusched.engine.policy import numa_copies
from gpusched.engine.request import WHOLE_GPU_MILLI, PodRequest
from gpusched.engine.result import EmptyLabel, PinnedApart
from gpusched.engine.snapshot import Snapshot


@dataclass(frozen=True, slots=True)
class Domain:
    labels: tuple[tuple[str, str], ...]
    """(label key, value) from the outermost level in."""
    mask: BoolArray

    @property
    def path(self) -> tuple[str, ...]:
        return tuple(value for _, value in self.labels)

    @property
    def name(self) -> str:
        return "/".join(self.path) if self.labels else "cluster"

    @property
    def placement(self) -> dict[str, str]:
        return dict(self.labels)

    def nodes(self) -> IntArray:
        return np.flatnonzero(self.mask)


def root_domain(snapshot: Snapshot) -> Domain:
    return Domain((), np.ones(len(snapshot.nodes), dtype=np.bool_))


def subdomains(snapshot: Snapshot, parent: Domain, key: str) -> list[Domain]:
    """The domains of label ``key`` inside ``parent``, in value order. When the parent already
    fixed ``key`` (a child with its parent's key) this is the parent itself."""
    if any(k == key for k, _ in parent.labels):
        return [parent]
    codes, paths = snapshot.domain_codes(key)
    inside = codes[parent.mask]
    known = dict(parent.labels)
    domains = []
    for code in np.unique(inside[inside >= 0]):
        mask = parent.mask & (codes == code)
        path = paths[int(code)]
        extra = tuple((k, v) for k, v in path if k not in known)
        domains.append(Domain((*parent.labels, *extra), mask))
    return domains


def pinned_domains(
    snapshot: Snapshot,
    group: GroupSpec,
    parent: Domain,
    domains: Sequence[Domain],
    bound: Sequence[int],
) -> list[Domain] | PinnedApart:
    """The one pinned-domains rule, for the planner and the preemption planner alike: which
    of ``domains`` (the domains of the group's topology key inside ``parent``) ``group`` may
    still use, given ``bound``, the nodes of its own and its descendants' bound pods.

    Without bound pods, every one. With some, only their domain (its full path): a
    re-created pod lands beside the others or stays pending. Bound pods in two domains
    already break the constraint, so nothing more is placed (a pod added to one side would
    report a placement that is not one); bound pods in none of them leave the group nowhere.
    A segmented gang is not pinned: its segments span domains of its key by design, and
    where they go is `gpusched.engine.segments`' to say."""
    key = group.topology_key
    if not bound or key is None or group.segment_size:
        return list(domains)
    touched = [d for d in domains if any(bool(d.mask[node]) for node in bound)]
    if len(touched) > 1:
        spans = tuple((d.name, _names(snapshot, [n for n in bound if d.mask[n]])) for d in touched)
        return PinnedApart(key, spans=spans)
    if not touched:
        return PinnedApart(key, outside=_names(snapshot, bound), parent=parent.name)
    return touched


def _names(snapshot: Snapshot, nodes: Sequence[int]) -> tuple[str, ...]:
    return tuple(sorted({snapshot.nodes[n].name for n in nodes}))


def empty_label(snapshot: Snapshot, parent: Domain, key: str) -> EmptyLabel | None:
    """The nodes of ``parent`` whose label ``key`` is present but empty (they are in no
    domain of ``key``); None when there are none."""
    memo: dict[str, BoolArray] = snapshot.derived.setdefault("empty labels", {})
    empty = memo.get(key)
    if empty is None:
        empty = np.array([n.labels.get(key) == "" for n in snapshot.nodes], dtype=np.bool_)
        empty.flags.writeable = False
        memo[key] = empty
    inside = np.flatnonzero(empty & parent.mask)
    mixed = _mixed_cliques(snapshot, key) & parent.mask
    others = np.flatnonzero(mixed & ~empty)
    if not inside.size and not others.size:
        return None
    names = tuple(snapshot.nodes[int(n)].name for n in inside[:3])
    if not others.size:
        return EmptyLabel(key=key, nodes=int(inside.size), examples=names)
    first = snapshot.nodes[int(others[0])]
    cliques = first.devices.mixed(first.labels.get(key)) if first.devices else ()
    mixed_names = tuple(snapshot.nodes[int(n)].name for n in others[:3])
    return EmptyLabel(
        key=key,
        nodes=int(inside.size),
        examples=names,
        mixed=int(others.size),
        mixed_examples=mixed_names,
        cliques=cliques,
    )


def _mixed_cliques(snapshot: Snapshot, key: str) -> BoolArray:
    """Nodes whose GPUs publish different cliques (or another than their label): in no
    domain of the clique label (`NodeDevices.mixed`)."""
    if key != CLIQUE_LABEL:
        return np.zeros(len(snapshot.nodes), dtype=np.bool_)
    memo: dict[str, BoolArray] = snapshot.derived.setdefault("mixed cliques", {})
    found = memo.get(key)
    if found is None:
        found = np.array(
            [bool(n.devices and n.devices.mixed(n.labels.get(key))) for n in snapshot.nodes],
            dtype=np.bool_,
        )
        found.flags.writeable = False
        memo[key] = found
    return found


def copies(snapshot: Snapshot, pod: PodRequest, numa: NumaPolicy) -> IntArray:
    """Per node, how many copies of ``pod`` would fit now under the NUMA rule ``numa``
    (ignoring GPU topology inside the node). Optimistic for multi-GPU pods under best-effort
    NUMA only in that it ignores link quality; exact in counts. Used to order and to reject
    domains early."""
    count = np.where(static_mask(snapshot, pod), np.iinfo(np.int64).max // 4, 0)
    for name, amount in pod.resources.items():
        column = snapshot.columns.get(name)
        if column is None:
            return np.zeros(len(snapshot.nodes), dtype=np.int64)
        free = snapshot.allocatable[:, column] - snapshot.used[:, column]
        count = np.minimum(count, np.maximum(free, 0) // amount)
    if pod.gpus:
        count = np.minimum(count, numa_copies(snapshot, numa, pod.gpus))
    elif pod.gpu_milli:
        count = np.minimum(count, _share_copies(snapshot, pod.gpu_milli))
    return count


def _share_copies(snapshot: Snapshot, milli: int) -> IntArray:
    per_gpu = np.where(snapshot.gpu_usable, snapshot.gpu_free // milli, 0)
    return per_node_sum(snapshot, np.minimum(per_gpu, WHOLE_GPU_MILLI // milli))


def per_node_sum(snapshot: Snapshot, per_gpu: IntArray) -> IntArray:
    """Sums a per-GPU array per node (0 for nodes without GPUs)."""
    result = np.zeros(len(snapshot.nodes), dtype=np.int64)
    has_gpus = snapshot.gpu_offset[1:] > snapshot.gpu_offset[:-1]
    if per_gpu.size:
        result[has_gpus] = np.add.reduceat(per_gpu, snapshot.gpu_offset[:-1][has_gpus])
    return result

"""Placement quality: what the cluster could still take, per topology domain.

For every domain of every ``topologyLevels`` key the nodes carry (zone, rack, …), and for the
whole cluster:

- free GPUs: usable and wholly free (telemetry exclusions are not free; cordoned and NotReady
  nodes' GPUs are, as capacity that comes back with the node: the gang counts leave them out);
- the largest gang of 1-, 2-, 4- and 8-GPU pods that would still fit, counted per node with the
  engine's own `copies` (NUMA policy included, so under ``single-numa-node`` an 8-GPU pod needs
  eight free GPUs in one NUMA node) and summed over the domain's nodes;
- stranded GPUs: FGD's fragmentation measure against a workload mix, in GPUs (see
  `gpusched.engine.fragmentation`): idle GPU capacity that the typical pod could not use.

Also, from a list of `Binding` s, how often a multi-GPU pod got a worse link tier than its
node's best, and per reason how many GPUs telemetry excludes.

The gang counts ask "bare" pods of each size: one pod slot and the GPUs, no CPU or memory, and
every taint tolerated (GPU nodes are commonly tainted and GPU pods tolerate it); cordoned and
NotReady nodes take nothing, nor, for multi-GPU pods, do nodes with a broken topology
annotation. Everything is vectorised over nodes: a 5,000-node cluster takes milliseconds
(``bench/quality.py``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from gpusched.api.config import NumaPolicy
from gpusched.api.selectors import Toleration
from gpusched.engine.domains import copies, per_node_sum
from gpusched.engine.fragmentation import fragmentation, free_matrix
from gpusched.engine.health import EXCLUSION_REASONS
from gpusched.engine.nodes import FloatArray, IntArray
from gpusched.engine.request import WHOLE_GPU_MILLI, PodRequest
from gpusched.engine.result import Binding
from gpusched.engine.snapshot import Snapshot
from gpusched.engine.workload import TaskType, target_workload

GANG_SIZES = (1, 2, 4, 8)
"""GPUs per pod of the gangs whose largest size is measured."""
CLUSTER_LEVEL = "cluster"
"""The ``level`` (and domain name) of the whole cluster."""
_TOLERATE_ALL = (Toleration(operator="Exists"),)


@dataclass(frozen=True, slots=True, kw_only=True)
class DomainQuality:
    """One topology domain (or the whole cluster)."""

    level: str
    """The node label key of the domain's level, or ``cluster``."""
    domain: str
    """The domain's full path, ``zone-a/rack-1`` (``cluster`` for the whole cluster)."""
    nodes: int
    gpus: int
    """Every GPU the domain's nodes advertise."""
    free_gpus: int
    """Usable and wholly free."""
    excluded_gpus: int
    """Excluded by telemetry (hot, XID, low memory, unknown under ``stale: exclude``)."""
    largest_gang: Mapping[int, int]
    """GPUs per pod → how many such pods would fit at once in the domain now."""
    stranded_gpus: float
    """FGD fragmentation of the domain's nodes against the workload mix, in GPUs."""


@dataclass(frozen=True, slots=True)
class ClusterQuality:
    domains: tuple[DomainQuality, ...]
    """The cluster first, then each level's domains (levels outermost first), in path order."""
    exclusions: Mapping[str, int]
    """Reason (temperature, xid, memory, stale, missing, node) → GPUs excluded for it."""
    workload: tuple[TaskType, ...]
    """The mix the stranded GPUs were measured against."""

    def domain(self, name: str) -> DomainQuality:
        """The domain called ``name`` (``cluster`` or a full path); ``KeyError`` if none."""
        for found in self.domains:
            if found.domain == name:
                return found
        raise KeyError(name)


def measure(
    snapshot: Snapshot,
    numa: NumaPolicy,
    levels: Sequence[str] | None = None,
    workload: tuple[TaskType, ...] | None = None,
) -> ClusterQuality:
    """The quality of ``snapshot`` per domain of ``levels`` (default: the snapshot's
    ``topologyLevels``; keys no node carries are left out), its gangs counted under the NUMA
    rule ``numa``. ``workload`` is the mix for the stranded GPUs; by default the mix of the
    pods the snapshot holds."""
    if workload is None:
        workload = target_workload(h.pod for h in snapshot.holdings.values())
    per_node = _per_node(snapshot, workload, numa)
    domains = [_summarise(CLUSTER_LEVEL, CLUSTER_LEVEL, per_node, slice(None))]
    for key in snapshot.levels if levels is None else levels:
        codes, paths = snapshot.domain_codes(key)
        if not paths:
            continue
        domains += _by_domain(key, codes, paths, per_node)
    return ClusterQuality(tuple(domains), exclusions(snapshot), workload)


@dataclass(frozen=True, slots=True)
class _PerNode:
    gpus: IntArray
    free: IntArray
    excluded: IntArray
    gangs: dict[int, IntArray]
    stranded_milli: FloatArray


def _per_node(snapshot: Snapshot, workload: tuple[TaskType, ...], numa: NumaPolicy) -> _PerNode:
    everyone = np.arange(len(snapshot.nodes), dtype=np.int64)
    counts = np.diff(snapshot.gpu_offset)
    unusable = (~snapshot.gpu_usable).astype(np.int64)
    return _PerNode(
        gpus=counts,
        free=snapshot.free_whole.copy(),
        excluded=per_node_sum(snapshot, unusable),
        gangs={size: gang_capacity(snapshot, size, numa) for size in GANG_SIZES},
        stranded_milli=_stranded(snapshot, everyone, workload),
    )


def gang_capacity(snapshot: Snapshot, gpus: int, numa: NumaPolicy) -> IntArray:
    """Per node, how many pods of ``gpus`` whole GPUs (and nothing else) it takes now under
    the NUMA rule ``numa``."""
    pod = PodRequest(key=f"quality/{gpus}-gpu", gpus=gpus, tolerations=_TOLERATE_ALL)
    count = copies(snapshot, pod, numa)
    if gpus > 1:
        broken = np.fromiter(
            (n.topology_error is not None for n in snapshot.nodes), np.bool_, len(snapshot.nodes)
        )
        count[broken] = 0
    return count


def _stranded(snapshot: Snapshot, nodes: IntArray, workload: tuple[TaskType, ...]) -> FloatArray:
    if not workload or not nodes.size:
        return np.zeros(nodes.size, dtype=np.float64)
    column = snapshot.columns["cpu"]
    cpu = snapshot.allocatable[nodes, column] - snapshot.used[nodes, column]
    measured: FloatArray = fragmentation(free_matrix(snapshot, nodes), cpu, workload)
    return measured


def _summarise(level: str, name: str, per_node: _PerNode, where: slice | IntArray) -> DomainQuality:
    return DomainQuality(
        level=level,
        domain=name,
        nodes=int(per_node.gpus[where].size),
        gpus=int(per_node.gpus[where].sum()),
        free_gpus=int(per_node.free[where].sum()),
        excluded_gpus=int(per_node.excluded[where].sum()),
        largest_gang={size: int(c[where].sum()) for size, c in per_node.gangs.items()},
        stranded_gpus=float(per_node.stranded_milli[where].sum()) / WHOLE_GPU_MILLI,
    )


def _by_domain(
    key: str,
    codes: IntArray,
    paths: Sequence[tuple[tuple[str, str], ...]],
    per_node: _PerNode,
) -> list[DomainQuality]:
    """Every domain of one level at once: sums per code with `np.bincount`."""
    inside = codes >= 0
    code = codes[inside]
    size = len(paths)

    def total(values: IntArray | FloatArray) -> FloatArray:
        return np.bincount(code, weights=values[inside], minlength=size).astype(np.float64)

    nodes = np.bincount(code, minlength=size)
    gpus, free, excluded = total(per_node.gpus), total(per_node.free), total(per_node.excluded)
    gangs = {s: total(c) for s, c in per_node.gangs.items()}
    stranded = total(per_node.stranded_milli) / WHOLE_GPU_MILLI
    return [
        DomainQuality(
            level=key,
            domain="/".join(value for _, value in path),
            nodes=int(nodes[i]),
            gpus=int(gpus[i]),
            free_gpus=int(free[i]),
            excluded_gpus=int(excluded[i]),
            largest_gang={s: int(c[i]) for s, c in gangs.items()},
            stranded_gpus=float(stranded[i]),
        )
        for i, path in enumerate(paths)
    ]


# ----- telemetry exclusions and link tiers ---------------------------------------------------


def exclusions(snapshot: Snapshot) -> dict[str, int]:
    """Excluded GPUs by the class of their verdict (every class present, 0 when none):
    `gpusched.engine.health.judge_gpu`'s, ``node`` for a GPU excluded only because another
    GPU of its node failed."""
    found: Counter[str] = Counter()
    for gid in np.flatnonzero(~snapshot.gpu_usable).tolist():
        found[snapshot.gpu_reasons.get(gid, "node")] += 1
    return {reason: found[reason] for reason in EXCLUSION_REASONS}


def link_tiers(bindings: Iterable[Binding]) -> dict[tuple[str, str], int]:
    """(tier given, best tier the node offered) → multi-GPU bindings, e.g.
    ``{("NVLINK", "NVLINK"): 12, ("SYS", "NVLINK"): 1}``."""
    found: Counter[tuple[str, str]] = Counter()
    for binding in bindings:
        if binding.link_tier is not None:
            found[(binding.link_tier, binding.best_tier or binding.link_tier)] += 1
    return dict(found)

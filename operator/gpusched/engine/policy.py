"""What the engine is told to prefer: one immutable `Policy`, handed to `schedule` and to the
preemption planner beside the snapshot. The snapshot is the cluster only (its nodes, their
usage, and the ``topologyLevels`` that name its domains, which say how the cluster's labels
nest rather than what to prefer); every setting a decision reads comes from here.

The NUMA rule lives here too, once: which pods must take all their GPUs in one NUMA node
(`one_numa_node`), and how many whole GPUs a node offers such a pod (`offered_gpus`,
`numa_copies`). Filters, domain estimates, the reports and the offline hints all ask it.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpusched.api.config import NumaPolicy, PreemptionConfig, SchedulerConfig, ScoringConfig
from gpusched.engine.nodes import IntArray
from gpusched.engine.snapshot import Snapshot

_DEFAULTS = SchedulerConfig()
"""The settings' defaults, read from the one model that documents them."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Policy:
    """The settings one engine run decides under; ``Policy()`` is the defaults of
    `SchedulerConfig`, `Policy.of` takes them from a loaded configuration."""

    scoring: ScoringConfig = _DEFAULTS.scoring
    """Weights of the node scores, the tie-break order and the fragmentation options."""
    numa: NumaPolicy = _DEFAULTS.numa_policy
    """How a multi-GPU pod's GPUs may spread over NUMA nodes (see `one_numa_node`)."""
    backtracking_budget: int = _DEFAULTS.backtracking_budget
    """Extra domain choices the placement of one root group may try (``backtrackingBudget``)."""
    max_domains_reported: int = _DEFAULTS.max_domains_reported
    """Per-domain lines at most in a group's report (``maxDomainsReported``)."""
    preemption: PreemptionConfig = _DEFAULTS.preemption
    """The preemption planner's budget and whom it may evict."""
    pause_collector: bool = True
    """Whether `schedule` and the preemption planner pause Python's cyclic garbage collector
    while they decide (`gpusched.engine.collector.collector_paused`: the only process-wide
    setting the engine touches, restored when it returns). Default on: what a decision
    allocates is freed by reference counting when it returns, and a collection landing
    inside one cost more than the decision. Off for an embedder that manages the collector
    itself, or one that decides in several threads and wants no shared setting changed."""

    @classmethod
    def of(cls, config: SchedulerConfig, *, pause_collector: bool = True) -> Policy:
        """The policy of a loaded configuration."""
        return cls(
            scoring=config.scoring,
            numa=config.numa_policy,
            backtracking_budget=config.backtracking_budget,
            max_domains_reported=config.max_domains_reported,
            preemption=config.preemption,
            pause_collector=pause_collector,
        )


def one_numa_node(numa: NumaPolicy, gpus: int) -> bool:
    """The NUMA rule: whether a pod of ``gpus`` whole GPUs must take them all in one NUMA
    node (``single-numa-node``, two GPUs or more). Under ``best-effort`` and ``none`` any free
    GPUs of the node will do for counting; ``best-effort`` only prefers fewer NUMA nodes among
    sets of the best link tier (`gpusched.engine.gpuset`)."""
    return gpus > 1 and numa is NumaPolicy.SINGLE_NUMA_NODE


def offered_gpus(
    snapshot: Snapshot, numa: NumaPolicy, gpus: int, nodes: IntArray | slice = slice(None)
) -> IntArray:
    """Per node of ``nodes`` (all by default), how many whole GPUs a pod of ``gpus`` may take
    together: its fullest NUMA node's under the rule, else every usable free one."""
    counts = snapshot.max_numa_free if one_numa_node(numa, gpus) else snapshot.free_whole
    found: IntArray = counts[nodes]
    return found


def numa_copies(snapshot: Snapshot, numa: NumaPolicy, gpus: int) -> IntArray:
    """Per node, how many pods of ``gpus`` whole GPUs its free GPUs hold: under the rule each
    copy inside one NUMA node (the copies each NUMA node holds, summed)."""
    if one_numa_node(numa, gpus):
        fitting: IntArray = (snapshot.numa_free // gpus).sum(axis=1)
        return fitting
    whole: IntArray = snapshot.free_whole // gpus
    return whole

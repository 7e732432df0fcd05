"""What a placement is judged by, beside the cluster it is judged on: the run's `Policy` (its
scoring settings and NUMA rule) and FGD's target workload. `schedule` makes one per call and
hands it to `pick_node` and the planner; they read it, never the snapshot, which holds no
policy."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpusched.api.config import NumaPolicy, ScoringConfig
from gpusched.engine.policy import Policy
from gpusched.engine.request import PodRequest
from gpusched.engine.snapshot import Snapshot
from gpusched.engine.workload import TaskType, workload_of


@dataclass(frozen=True, slots=True)
class Scoring:
    policy: Policy
    """The settings of the run."""
    workload: tuple[TaskType, ...] = ()
    """Target workload of the fragmentation score (FGD); empty turns the score off."""

    @property
    def config(self) -> ScoringConfig:
        """The policy's ``scoring``: weights, tie-break order, fragmentation options."""
        return self.policy.scoring

    @property
    def numa(self) -> NumaPolicy:
        """The policy's NUMA rule (`gpusched.engine.policy.one_numa_node`)."""
        return self.policy.numa

    @staticmethod
    def for_cycle(policy: Policy, snapshot: Snapshot, pending: Iterable[PodRequest]) -> Scoring:
        """The scoring of one scheduling cycle: with the fragmentation score weighted, its
        target workload is `cycle_workload` of the pending pods."""
        weighted = policy.scoring.fragmentation_weight
        workload = cycle_workload(snapshot, pending) if weighted else ()
        return Scoring(policy, workload)


def cycle_workload(snapshot: Snapshot, pending: Iterable[PodRequest]) -> tuple[TaskType, ...]:
    """`target_workload` of ``pending`` and of every pod ``snapshot`` holds, from the
    snapshot's task counts (the cost of a few dozen task types, not of every held pod)."""
    counts = snapshot.task_counts().copy()
    for pod in pending:
        counts.add(pod)
    return workload_of(counts)

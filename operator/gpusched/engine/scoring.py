"""What a placement is scored by, beside the cluster it is scored on: the scoring settings and
FGD's target workload. `schedule` makes one per call and hands it to `pick_node`; the scores
read it, never the snapshot, so a snapshot kept between calls holds no policy."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpusched.api.config import ScoringConfig
from gpusched.engine.request import PodRequest
from gpusched.engine.snapshot import Snapshot
from gpusched.engine.workload import TaskType, workload_of


@dataclass(frozen=True, slots=True)
class Scoring:
    config: ScoringConfig
    """The configuration's ``scoring``: weights, tie-break order, fragmentation options."""
    workload: tuple[TaskType, ...] = ()
    """Target workload of the fragmentation score (FGD); empty turns the score off."""

    @staticmethod
    def for_cycle(
        config: ScoringConfig, snapshot: Snapshot, pending: Iterable[PodRequest]
    ) -> Scoring:
        """The scoring of one scheduling cycle: with the fragmentation score weighted, its
        target workload is `cycle_workload` of the pending pods."""
        workload = cycle_workload(snapshot, pending) if config.fragmentation_weight else ()
        return Scoring(config, workload)


def cycle_workload(snapshot: Snapshot, pending: Iterable[PodRequest]) -> tuple[TaskType, ...]:
    """`target_workload` of ``pending`` and of every pod ``snapshot`` holds, from the
    snapshot's task counts (the cost of a few dozen task types, not of every held pod)."""
    counts = snapshot.task_counts().copy()
    for pod in pending:
        counts.add(pod)
    return workload_of(counts)

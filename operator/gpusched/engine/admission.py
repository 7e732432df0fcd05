"""Whether the cluster has room for a group's ``minResources`` before the group is tried.

Volcano (its ``enqueue`` action) and scheduler-plugins' coscheduling (its PreFilter) both let
a PodGroup that states ``minResources`` in only once the cluster's free resources could hold
them, summed over every node: a gang that cannot fit anyway does not take nodes piece by
piece meanwhile. gpusched does the same for such groups that have no pod bound yet: until
then the group waits, saying which resources are short (`Shortfall`)."""

from __future__ import annotations

from collections.abc import Sequence

from gpusched.engine.result import Shortfall
from gpusched.engine.snapshot import Snapshot

GPU = "nvidia.com/gpu"
"""Counted as the whole GPUs free (on device-plugin and DRA nodes alike)."""


def shortfalls(snapshot: Snapshot, wanted: Sequence[tuple[str, int]]) -> tuple[Shortfall, ...]:
    """The resources of ``wanted`` the cluster's free resources cannot hold, by name."""
    short = []
    for name, amount in sorted(wanted):
        free = _free(snapshot, name)
        if free < amount:
            short.append(Shortfall(name, amount, free))
    return tuple(short)


def _free(snapshot: Snapshot, name: str) -> int:
    if name == GPU:
        return int(snapshot.free_whole.sum())
    column = snapshot.columns.get(name)
    if column is None:
        return 0
    free = snapshot.allocatable[:, column] - snapshot.used[:, column]
    return int(free.clip(min=0).sum())

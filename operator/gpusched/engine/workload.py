"""Task keys: the kinds of pods FGD's target workload is made of.

Two pods with equal keys are the same task type for the fragmentation score: same CPU, same
per-GPU milli, same GPU count, same node constraints. `Snapshot.task_counts` keeps a count
per key of the pods it holds, so the target workload of a cycle is read from a few dozen
counts instead of every bound pod.
"""

from __future__ import annotations

from collections import Counter

from gpusched.api.selectors import NodeSelectorTerm
from gpusched.engine.request import WHOLE_GPU_MILLI, PodRequest

TaskKey = tuple[int, int, int, str]
"""(cpu milli, per-GPU milli, GPU count, the required node affinity as text)."""


def task_key(pod: PodRequest) -> TaskKey:
    """The pod's task type: per-GPU milli is 1000 for whole GPUs, the share for a share, 0
    for a pod without GPUs (then its GPU count is 0 too)."""
    cpu = pod.resources.get("cpu", 0)
    constraint = repr(pod.required_terms) if pod.required_terms is not None else ""
    if pod.gpu_milli:
        return cpu, pod.gpu_milli, 1, constraint
    if pod.gpus:
        return cpu, WHOLE_GPU_MILLI, pod.gpus, constraint
    return cpu, 0, 0, constraint


class TaskCounts:
    """Held pods per task key, and for each key with node constraints the constraints of a
    pod that had it (pods of one key have equal constraints: the key holds their text)."""

    __slots__ = ("counts", "terms")

    def __init__(
        self,
        counts: Counter[TaskKey] | None = None,
        terms: dict[TaskKey, tuple[NodeSelectorTerm, ...] | None] | None = None,
    ) -> None:
        self.counts: Counter[TaskKey] = counts if counts is not None else Counter()
        self.terms: dict[TaskKey, tuple[NodeSelectorTerm, ...] | None] = (
            terms if terms is not None else {}
        )

    def add(self, pod: PodRequest) -> None:
        key = task_key(pod)
        self.counts[key] += 1
        if key[3] and key not in self.terms:
            self.terms[key] = pod.required_terms

    def remove(self, pod: PodRequest) -> None:
        key = task_key(pod)
        left = self.counts[key] - 1
        if left > 0:
            self.counts[key] = left
        else:
            del self.counts[key]

    def copy(self) -> TaskCounts:
        """An independent count; the constraint representatives are shared (only added to)."""
        return TaskCounts(Counter(self.counts), self.terms)

"""FGD's target workload: the kinds of pods (task types) the fragmentation score measures
against, and how often each comes.

Two pods with equal task keys are the same task type: same CPU, same per-GPU milli, same GPU
count, same node constraints. `Snapshot.task_counts` keeps a count
per key of the pods it holds, so the target workload of a cycle is read from a few dozen
counts instead of every bound pod.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from operator import itemgetter

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


COVERAGE = 0.95
"""Task types are taken, most frequent first, until they cover this share of pods (FGD's)."""


@dataclass(frozen=True, slots=True)
class TaskType:
    cpu_milli: int
    gpu_milli: int
    """Per GPU: 1000 for whole-GPU tasks, the share for sharing tasks, 0 for CPU-only."""
    gpus: int
    weight: float
    required_terms: tuple[NodeSelectorTerm, ...] | None = None
    """Required node affinity of the task's pods (e.g. the GPU models it may use); ``None``:
    any node."""


def target_workload(pods: Iterable[PodRequest]) -> tuple[TaskType, ...]:
    """The most frequent (cpu, gpu milli, GPU count, node constraints) types covering 95 % of
    ``pods``, with their frequencies renormalised to sum to 1."""
    counts = TaskCounts()
    for pod in pods:
        counts.add(pod)
    return workload_of(counts)


def workload_of(tasks: TaskCounts) -> tuple[TaskType, ...]:
    """The target workload of counted task types: most frequent first (ties by key) until
    they cover 95 % of the pods."""
    total = sum(tasks.counts.values())
    chosen: list[tuple[TaskKey, int]] = []
    covered = 0
    ranked = sorted(tasks.counts.items())
    ranked.sort(key=itemgetter(1), reverse=True)  # stable: equal counts stay in key order
    for key, count in ranked:
        if covered >= COVERAGE * total:
            break
        chosen.append((key, count))
        covered += count
    return tuple(
        TaskType(c, g, k, n / covered, tasks.terms.get((c, g, k, s))) for (c, g, k, s), n in chosen
    )

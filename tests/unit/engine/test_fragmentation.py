"""FGD's fragmentation measure (engine/fragmentation.py): hand-computed cases, and the
published check on the real openb trace — 13.94 % of capacity fragmented on the empty cluster
for the default trace's target workload of 35 task types."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from gpusched.engine.build import build_snapshot
from gpusched.engine.fragmentation import fragmentation, free_matrix
from gpusched.engine.workload import TaskType, target_workload
from gpusched.offline.openb import load_nodes, load_pods
from testing.engine import pod

OPENB = Path(__file__).resolve().parents[3] / "bench" / "data" / "openb"


@dataclass(frozen=True)
class Case:
    id: str
    gpu_free: list[int]
    cpu_free: int
    tasks: list[TaskType]
    want: float


CASES = [
    Case(
        "a CPU-only task sees every idle milli-GPU as a fragment",
        [1000, 500],
        8000,
        [TaskType(1000, 0, 0, 1.0)],
        1500.0,
    ),
    Case(
        "a whole-GPU task that fits sees only the partly used GPU",
        [1000, 500],
        8000,
        [TaskType(1000, 1000, 1, 1.0)],
        500.0,
    ),
    Case(
        "a 2-GPU task that does not fit sees everything idle",
        [1000, 500],
        8000,
        [TaskType(1000, 1000, 2, 1.0)],
        1500.0,
    ),
    Case(
        "a share of 400 fits: only GPUs with less than 400 free are fragments",
        [1000, 300, 0],
        8000,
        [TaskType(1000, 400, 1, 1.0)],
        300.0,
    ),
    Case(
        "too little CPU left: the GPUs are all fragments for the task",
        [1000, 1000],
        500,
        [TaskType(1000, 1000, 1, 1.0)],
        2000.0,
    ),
    Case(
        "task types weigh in by their probability",
        [1000, 500],
        8000,
        [TaskType(1000, 1000, 1, 0.5), TaskType(1000, 0, 0, 0.5)],
        0.5 * 500 + 0.5 * 1500,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_node_fragmentation(case: Case) -> None:
    got = fragmentation(np.array([case.gpu_free]), np.array([case.cpu_free]), tuple(case.tasks))
    assert got[0] == pytest.approx(case.want), f"fragmentation {got[0]}, want {case.want}"


def test_target_workload_takes_the_most_frequent_types_covering_95_percent() -> None:
    pods = [pod(f"a{i}", cpu=1000, gpus=1) for i in range(60)]
    pods += [pod(f"b{i}", cpu=2000, milli=500) for i in range(36)]
    pods += [pod(f"c{i}", cpu=500) for i in range(4)]  # the last 4 % are left out
    tasks = target_workload(pods)
    assert tasks == (
        TaskType(1000, 1000, 1, pytest.approx(60 / 96)),
        TaskType(2000, 500, 1, pytest.approx(36 / 96)),
    ), tasks


def test_openb_default_trace_fragments_13_94_percent_of_the_empty_cluster() -> None:
    # The published check (FGD, ATC'23): 35 task types; 13.94 % of 6,212 GPUs.
    snapshot = build_snapshot(load_nodes(OPENB / "openb_node_list_gpu_node.csv"))
    tasks = target_workload(load_pods(OPENB / "openb_pod_list_default.csv"))
    nodes = np.arange(len(snapshot.nodes))
    cpu = snapshot.allocatable[:, snapshot.columns["cpu"]]
    amount = fragmentation(free_matrix(snapshot, nodes), cpu, tasks).sum()
    share = amount / (1000 * int(snapshot.gpu_offset[-1]))
    assert (len(snapshot.nodes), int(snapshot.gpu_offset[-1]), len(tasks)) == (1213, 6212, 35)
    assert share == pytest.approx(0.1394, abs=0.00005), f"fragmentation {share:.4%}"

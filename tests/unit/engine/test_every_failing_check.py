"""A pod that fits no node names every check that blocks it, with how many nodes fail each,
as kube-scheduler lists its filters ("0/12 nodes are available: 8 Insufficient
nvidia.com/gpu, 4 …"): a node short of both GPUs and memory counts under both, and the GPU
check comes first whenever it blocks, even where another check blocks more nodes."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gpusched.api.config import NumaPolicy
from gpusched.api.k8s import Node
from gpusched.engine.blockers import node_check
from gpusched.engine.policy import Policy
from gpusched.engine.schedule import schedule
from gpusched.engine.snapshot import BoundPod, Snapshot
from testing.engine import bound, cluster, messages, node, pod


@dataclass(frozen=True)
class Case:
    story: str
    short_of_gpus: int
    """Nodes whose GPUs are all held (memory is free there)."""
    short_of_both: int
    """Nodes with GPUs held and most memory held too."""
    short_of_memory: int
    """Nodes with GPUs free but most memory held."""
    want_counts: tuple[tuple[str, int], ...]


CASES = [
    Case(
        "8 nodes short of GPUs, 4 short of GPUs and memory: the GPU check names all 12",
        8,
        4,
        0,
        (("Insufficient nvidia.com/gpu", 12), ("Insufficient memory", 4)),
    ),
    Case(
        "memory blocks 10 nodes and GPUs 2: the GPUs still come first",
        2,
        0,
        10,
        (("Insufficient nvidia.com/gpu", 2), ("Insufficient memory", 10)),
    ),
    Case(
        "GPUs block nothing: memory alone is named",
        0,
        0,
        3,
        (("Insufficient memory", 3),),
    ),
]


def _cluster(case: Case) -> Snapshot:
    nodes: list[Node] = []
    held: list[BoundPod] = []
    kinds = [
        ("gpus", case.short_of_gpus),
        ("both", case.short_of_both),
        ("mem", case.short_of_memory),
    ]
    for kind, count in kinds:
        for i in range(count):
            name = f"{kind}-{i:02d}"
            nodes.append(node(name))
            if kind in ("gpus", "both"):
                held.append(bound(pod(f"{name}-gpus", gpus=8, memory=2**30), name))
            if kind in ("both", "mem"):
                held.append(bound(pod(f"{name}-mem", memory=1000 * 2**30), name))
    return cluster(nodes=nodes, bound=held)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.story)
def test_every_failing_check_is_counted_gpus_first(case: Case) -> None:
    snapshot = _cluster(case)
    request = pod("p", gpus=4, memory=64 * 2**30)
    check = node_check(snapshot, request, range(len(snapshot.nodes)), NumaPolicy.BEST_EFFORT)
    assert check.fitting == 0, case.story
    assert tuple((b.check, b.nodes) for b in check.blockers) == case.want_counts, case.story


def test_the_pods_message_reads_as_kube_schedulers() -> None:
    case = CASES[0]
    snapshot = _cluster(case)
    result = schedule(snapshot, [pod("p", gpus=4, memory=64 * 2**30)], [], Policy())
    message = messages(result)["p"]
    assert message.startswith("0/12 nodes are available: 12 Insufficient nvidia.com/gpu: "), message
    assert "; 4 Insufficient memory: both-00 (" in message, message

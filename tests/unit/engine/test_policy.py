"""One immutable `Policy`, passed to every decision: it carries each setting of the
configuration the engine reads, the snapshot carries none, and one snapshot decided under two
policies in turn decides each time as its policy says (no setting is remembered between
calls). The NUMA rule, written once (`one_numa_node`), is what every count of free GPUs
follows."""

from __future__ import annotations

import dataclasses

import pytest

from gpusched.api.config import NumaPolicy, SchedulerConfig
from gpusched.engine.policy import Policy, numa_copies, offered_gpus, one_numa_node
from gpusched.engine.schedule import schedule
from testing.engine import bound, cluster, node, placements, pod

SETTINGS = {
    "numaPolicy": "single-numa-node",
    "backtrackingBudget": 3,
    "maxDomainsReported": 7,
    "scoring": {"binpack": {"weight": 2}},
    "preemption": {"budget": 5, "evictOtherSchedulersPods": False},
}


def test_a_policy_carries_every_setting_the_engine_reads_from_the_configuration() -> None:
    config = SchedulerConfig.model_validate(SETTINGS)
    policy = Policy.of(config)
    assert (
        policy.numa,
        policy.backtracking_budget,
        policy.max_domains_reported,
        policy.scoring,
        policy.preemption,
        policy.pause_collector,
    ) == (NumaPolicy.SINGLE_NUMA_NODE, 3, 7, config.scoring, config.preemption, True)
    assert Policy() == Policy.of(SchedulerConfig()), "the defaults are the configuration's"
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.numa = NumaPolicy.NONE  # type: ignore[misc]


def test_one_snapshot_decides_as_each_policy_given_says() -> None:
    # node-a is a DGX A100: four NUMA nodes of two GPUs each; 0, 2 and 4 are busy. Four GPUs
    # fit under best-effort and never in one NUMA node.
    snapshot = cluster(
        nodes=[node("node-a")],
        bound=[bound(pod(f"busy-{g}", gpus=1), "node-a", [g]) for g in (0, 2, 4)],
    )
    single = Policy(numa=NumaPolicy.SINGLE_NUMA_NODE)
    request = [pod("p", gpus=4)]

    decided = [placements(schedule(snapshot, request, (), p)) for p in (single, Policy(), single)]

    assert not hasattr(snapshot, "config"), "the snapshot carries no settings"
    assert [list(d) for d in decided] == [[], ["p"], []]


@pytest.mark.parametrize(
    ("numa", "gpus", "want"),
    [
        (NumaPolicy.SINGLE_NUMA_NODE, 2, True),
        (NumaPolicy.SINGLE_NUMA_NODE, 1, False),  # one GPU is always in one NUMA node
        (NumaPolicy.BEST_EFFORT, 4, False),  # prefers fewer NUMA nodes, never requires one
        (NumaPolicy.NONE, 4, False),
    ],
)
def test_the_numa_rule(numa: NumaPolicy, gpus: int, want: bool) -> None:
    assert one_numa_node(numa, gpus) is want


def test_free_gpus_are_counted_by_the_numa_rule() -> None:
    # GPUs 0, 2 and 4 busy: five free, at most two of them (6 and 7) in one NUMA node.
    snapshot = cluster(
        nodes=[node("node-a")],
        bound=[bound(pod(f"busy-{g}", gpus=1), "node-a", [g]) for g in (0, 2, 4)],
    )
    single, loose = NumaPolicy.SINGLE_NUMA_NODE, NumaPolicy.BEST_EFFORT
    assert offered_gpus(snapshot, single, 2).tolist() == [2]
    assert offered_gpus(snapshot, loose, 2).tolist() == [5]
    assert numa_copies(snapshot, single, 2).tolist() == [1]
    assert numa_copies(snapshot, loose, 2).tolist() == [2]

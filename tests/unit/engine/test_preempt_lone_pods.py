"""Pods without a group preempt as kube-scheduler would: each one that does not fit is a unit of
one, with its own priority and ``preemptionPolicy``, planned in the cycle's queue order beside
the groups.

    #    r1: node-a node-b          8 GPUs each
    #    node-a: small-0 (2, p1) small-1 (2, p1) big (4, p1)
    #    node-b: mid-0 (4, p5)   mid-1 (4, p5)
"""

from __future__ import annotations

import dataclasses

import pytest

from gpusched.api.crds import PreemptionPolicy
from gpusched.engine.groups import GroupSpec
from gpusched.engine.policy import Policy
from gpusched.engine.preemption import PreemptionPlan, plan_cycle
from gpusched.engine.request import PodRequest
from gpusched.engine.schedule import schedule
from gpusched.engine.snapshot import Snapshot
from testing.engine import bound, cluster, gang, members, pod


def full() -> Snapshot:
    held = [
        bound(pod("small-0", gpus=2, priority=1), "node-a", [0, 1]),
        bound(pod("small-1", gpus=2, priority=1), "node-a", [2, 3]),
        bound(pod("big", gpus=4, priority=1), "node-a", [4, 5, 6, 7]),
        bound(pod("mid-0", gpus=4, priority=5), "node-b", [0, 1, 2, 3]),
        bound(pod("mid-1", gpus=4, priority=5), "node-b", [4, 5, 6, 7]),
    ]
    return cluster({"z1": {"r1": ["gpu8"] * 2}}, bound=held)


def plans_for(
    pods: list[PodRequest], groups: list[GroupSpec] | None = None
) -> list[PreemptionPlan]:
    snapshot = full()
    result = schedule(snapshot, pods, groups or [], Policy())
    return plan_cycle(snapshot, result, pods, groups or [], Policy())


def brief(plan: PreemptionPlan) -> tuple[str, str, list[str], dict[str, str]]:
    return (
        plan.preemptor,
        plan.outcome.value,
        sorted(v.pod for v in plan.victims),
        {b.pod: b.node for b in plan.bindings},
    )


def test_a_lone_pod_evicts_the_fewest_lowest_priority_pods_that_make_it_fit() -> None:
    # Four GPUs on node-a are cheapest (priority 1, not 5); one 4-GPU victim beats two
    # 2-GPU ones (fewer victims).
    [plan] = plans_for([pod("urgent", gpus=4, priority=100)])
    assert brief(plan) == (
        "default/urgent",
        "Planned",
        ["default/big"],
        {"default/urgent": "node-a"},
    )


@pytest.mark.parametrize(
    ("story", "priority", "policy"),
    [
        ("of the lowest priority held", 1, PreemptionPolicy.PREEMPT_LOWER_PRIORITY),
        ("whose policy is Never", 100, PreemptionPolicy.NEVER),
    ],
)
def test_a_lone_pod_that_may_not_preempt_gets_no_plan(
    story: str, priority: int, policy: PreemptionPolicy
) -> None:
    # Such pods come by the thousand in a full cluster: none costs a plan.
    lone = dataclasses.replace(pod("urgent", gpus=4, priority=priority), preemption_policy=policy)
    assert plans_for([lone]) == [], story


def test_a_lone_pod_above_the_lowest_priority_held_evicts_only_pods_below_it() -> None:
    # Priority 3 is above small's and big's (1), not mid's (5): it plans, and evicts big.
    [plan] = plans_for([pod("urgent", gpus=4, priority=3)])
    assert brief(plan)[1:3] == ("Planned", ["default/big"])


def test_lone_pods_and_gangs_are_planned_in_priority_order_each_on_what_the_last_left() -> None:
    # The gang (priority 50) is planned after the lone pod (100), which took big's room: the
    # gang's two 2-GPU pods then take the small ones', not the room already promised.
    gang_pods = members("pair", 2, gpus=2, group="pair", priority=50)
    pair = dataclasses.replace(gang("pair", 2), priority=50)
    plans = plans_for([*gang_pods, pod("urgent", gpus=4, priority=100)], [pair])
    assert [brief(p) for p in plans] == [
        ("default/urgent", "Planned", ["default/big"], {"default/urgent": "node-a"}),
        (
            "default/pair",
            "Planned",
            ["default/small-0", "default/small-1"],
            {"default/pair-0": "node-a", "default/pair-1": "node-a"},
        ),
    ]


def test_a_lone_pod_named_like_a_group_of_its_namespace_does_not_preempt() -> None:
    # Its unit's key would be the group's too: nothing is planned for it, and nothing evicted.
    other = dataclasses.replace(gang("urgent", 1), priority=100)
    plans = plans_for([pod("urgent", gpus=4, priority=100)], [other])
    assert plans == []

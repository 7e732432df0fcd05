"""Preemption stories: which lower-priority pods a unit that does not fit evicts, and where.

Each case is a cluster drawn above it, a preemptor (a gang that does not fit) and what the
plan must come to: its outcome, its domain, its victims and where the preemptor's pods go.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from gpusched.api.config import SchedulerConfig
from gpusched.api.crds import DisruptionMode, PreemptionPolicy
from gpusched.engine.groups import GroupSpec
from gpusched.engine.health import GpuSample
from gpusched.engine.policy import Policy
from gpusched.engine.preemption import DisruptionBudget, PreemptionPlan, plan_cycle, plan_preemption
from gpusched.engine.request import PodRequest
from gpusched.engine.schedule import schedule
from gpusched.engine.snapshot import BoundPod, Snapshot
from testing.engine import RACK, ZONE, bound, cluster, composite, gang, members, pod

ALL8 = tuple(range(8))


def prioritized(
    group: GroupSpec,
    priority: int | None = None,
    mode: DisruptionMode = DisruptionMode.SINGLE,
    policy: PreemptionPolicy = PreemptionPolicy.PREEMPT_LOWER_PRIORITY,
) -> GroupSpec:
    """``group`` as the API layer hands it over once its priority fields are resolved."""
    return dataclasses.replace(
        group, priority=priority, disruption_mode=mode, preemption_policy=policy
    )


def holders(
    group: str, nodes: Sequence[str], *, priority: int, gpus: int = 8, first: int = 0, **kw: Any
) -> list[BoundPod]:
    """One pod of ``group`` on each of ``nodes``, holding GPUs ``first`` … ``first+gpus-1``."""
    return [
        bound(
            pod(f"{group}-{i}", gpus=gpus, priority=priority, group=group, **kw),
            name,
            range(first, first + gpus),
        )
        for i, name in enumerate(nodes)
    ]


@dataclass(frozen=True)
class Story:
    id: str
    snapshot: Snapshot
    unit: str
    pods: Sequence[PodRequest]
    groups: Sequence[GroupSpec]
    budgets: Sequence[DisruptionBudget] = ()
    foreign: frozenset[str] = frozenset()
    policy: Policy = field(default_factory=Policy)
    want_outcome: str = "Planned"
    want_domain: str = ""
    want_victims: tuple[str, ...] = ()
    want_nominated: Mapping[str, str] = field(default_factory=dict)
    """Preemptor pod → node (only when the story is about where they go)."""


def summary(plan: PreemptionPlan, want_nominated: bool) -> dict[str, object]:
    return {
        "outcome": plan.outcome.value,
        "domain": "/".join(plan.placement.values()),
        "victims": tuple(sorted(v.pod.removeprefix("default/") for v in plan.victims)),
        "nominated": (
            {b.pod.removeprefix("default/"): b.node for b in plan.bindings}
            if want_nominated
            else {}
        ),
    }


def want(story: Story) -> dict[str, object]:
    return {
        "outcome": story.want_outcome,
        "domain": story.want_domain,
        "victims": tuple(sorted(story.want_victims)),
        "nominated": dict(story.want_nominated),
    }


def big_gang(
    priority: int = 100, count: int = 2, topology: str | None = RACK
) -> tuple[list[PodRequest], GroupSpec]:
    return (
        members("big", count, gpus=8, group="big", priority=priority),
        prioritized(gang("big", count, topology=topology), priority),
    )


BIG_PODS, BIG = big_gang()
LOW = prioritized(gang("low", 1), 1)
MID = prioritized(gang("mid", 1), 5)

#        z1
#      /    \
#    r1      r2
#   a  b    c  d        every node full: r1 holds priority 5, r2 priority 1
TWO_RACKS = {"z1": {"r1": ["gpu8"] * 2, "r2": ["gpu8"] * 2}}

#    r1: a b c d, one victim gang of four 8-GPU pods
ONE_RACK = {"z1": {"r1": ["gpu8"] * 4}}
ONE = prioritized(gang("one", 1), 100)
ONE_POD = [pod("one-0", gpus=8, group="one", priority=100)]


def aged(group: str, nodes: Sequence[str], priority: int) -> list[BoundPod]:
    """Holders created 10 s apart, the last the youngest."""
    return [
        bound(
            pod(f"{group}-{i}", gpus=8, priority=priority, group=group, created=10.0 * (i + 1)),
            n,
            ALL8,
        )
        for i, n in enumerate(nodes)
    ]


#   one DGX-1 V100 (hybrid cube mesh: GPUs 0-3 and 4-7 are NVLink quads, few links between)
#   GPU 0 1 | 2 3 | 4 5 | 6 7
#       a   |  b  |  c  |  d      four 2-GPU pods; a and c the youngest, d of priority 1000
def quad_story() -> Story:
    pairs = {"a": (0, 1), "b": (2, 3), "c": (4, 5), "d": (6, 7)}
    created = {"a": 40.0, "b": 10.0, "c": 30.0, "d": 20.0}
    priority = {"a": 1, "b": 1, "c": 1, "d": 1000}
    held = [
        bound(pod(f"two-{n}", gpus=2, priority=priority[n], created=created[n]), "node-a", g)
        for n, g in pairs.items()
    ]
    return Story(
        "NVLink: a 4-GPU pod evicts the two 2-GPU pods of a quad, not two on two quads",
        cluster({"z1": {"r1": ["v100x8"]}}, bound=held),
        "default/quad",
        [pod("quad-0", gpus=4, group="quad", priority=100)],
        [prioritized(gang("quad", 1), 100)],
        want_domain="",
        want_victims=("two-a", "two-b"),
        want_nominated={"quad-0": "node-a"},
    )


#   r1: a b. a holds a cheap victim on GPUs 0-3 but its GPU 0 is hot; b holds a dearer one
#   on 0-3. The other GPUs of both nodes run priority-1000 pods.
def hot_story() -> Story:
    held = [
        bound(pod("cheap", gpus=4, priority=1), "node-a", range(4)),
        bound(pod("dear", gpus=4, priority=5), "node-b", range(4)),
        bound(pod("keep-a", gpus=4, priority=1000), "node-a", range(4, 8)),
        bound(pod("keep-b", gpus=4, priority=1000), "node-b", range(4, 8)),
    ]
    hot = {("node-a", 0): GpuSample(temperature_c=95.0, fb_free_mib=80000.0, fb_used_mib=0.0)}
    return Story(
        "a hot GPU is never the freed GPU the plan relies on: the dearer victim on a cool node",
        cluster({"z1": {"r1": ["a100x8"] * 2}}, bound=held, telemetry=hot),
        "default/four",
        [pod("four-0", gpus=4, group="four", priority=100)],
        [prioritized(gang("four", 1), 100)],
        want_victims=("dear",),
        want_nominated={"four-0": "node-b"},
    )


STORIES = [
    Story(
        "the gang needs a whole rack: of two full racks it takes the one with cheaper victims",
        cluster(
            TWO_RACKS,
            bound=holders("mid", ["node-a", "node-b"], priority=5)
            + holders("low", ["node-c", "node-d"], priority=1),
        ),
        "default/big",
        BIG_PODS,
        [BIG, MID, LOW],
        want_domain="z1/r2",
        want_victims=("low-0", "low-1"),
        want_nominated={"big-0": "node-c", "big-1": "node-d"},
    ),
    Story(
        "a victim gang with disruptionMode All larger than needed is evicted whole",
        cluster(
            ONE_RACK, bound=holders("low", ["node-a", "node-b", "node-c", "node-d"], priority=1)
        ),
        "default/one",
        ONE_POD,
        [ONE, prioritized(gang("low", 4), 1, DisruptionMode.ALL)],
        want_victims=("low-0", "low-1", "low-2", "low-3"),
    ),
    Story(
        "a Single victim gang loses only the pod needed, its youngest",
        cluster(ONE_RACK, bound=aged("low", ["node-a", "node-b", "node-c", "node-d"], 1)),
        "default/one",
        ONE_POD,
        [ONE, prioritized(gang("low", 4), 1, DisruptionMode.SINGLE)],
        want_victims=("low-3",),
        want_nominated={"one-0": "node-d"},
    ),
    Story(
        "a child group under a CompositePodGroup with disruptionMode All takes its siblings along",
        cluster(
            ONE_RACK,
            bound=holders("left", ["node-a", "node-b"], priority=1)
            + holders("right", ["node-c", "node-d"], priority=1),
        ),
        "default/one",
        ONE_POD,
        [
            ONE,
            prioritized(composite("pair", 2), 1, DisruptionMode.ALL),
            prioritized(gang("left", 2, parent="pair"), 1),
            prioritized(gang("right", 2, parent="pair"), 1),
        ],
        want_victims=("left-0", "left-1", "right-0", "right-1"),
    ),
    Story(
        "pods of equal priority are never preempted",
        cluster(
            TWO_RACKS, bound=holders("peer", ["node-a", "node-b", "node-c", "node-d"], priority=100)
        ),
        "default/big",
        BIG_PODS,
        [BIG, prioritized(gang("peer", 4), 100)],
        want_outcome="NoLowerPriority",
    ),
    Story(
        "preemptionPolicy Never: the gang waits, nothing is evicted",
        cluster(
            TWO_RACKS, bound=holders("low", ["node-a", "node-b", "node-c", "node-d"], priority=1)
        ),
        "default/big",
        BIG_PODS,
        [prioritized(gang("big", 2, topology=RACK), 100, policy=PreemptionPolicy.NEVER), LOW],
        want_outcome="PreemptionPolicyNever",
    ),
    Story(
        "a PDB would be violated in r2 (the cheaper rack) but not in r1: r1's victims go",
        cluster(
            TWO_RACKS,
            bound=holders("mid", ["node-a", "node-b"], priority=5)
            + holders("low", ["node-c", "node-d"], priority=1),
        ),
        "default/big",
        BIG_PODS,
        [BIG, MID, LOW],
        budgets=[
            DisruptionBudget("default/low-pdb", 0, frozenset({"default/low-0", "default/low-1"}))
        ],
        want_domain="z1/r1",
        want_victims=("mid-0", "mid-1"),
    ),
    Story(
        "a re-created member of a running gang preempts inside its gang's rack only",
        cluster(
            TWO_RACKS,
            bound=[
                bound(pod("big-0", gpus=8, group="big", priority=100), "node-a", ALL8),
                *holders("mid", ["node-b"], priority=5),
                *holders("low", ["node-c", "node-d"], priority=1),
            ],
        ),
        "default/big",
        [pod("big-1", gpus=8, group="big", priority=100)],
        [BIG, MID, LOW],
        want_domain="z1/r1",
        want_victims=("mid-0",),
        want_nominated={"big-1": "node-b"},
    ),
    quad_story(),
    hot_story(),
    Story(
        "pods of another scheduler are victims when of lower priority; here they are the cheapest",
        cluster(
            TWO_RACKS,
            bound=holders("mid", ["node-a", "node-b"], priority=5)
            + holders("other", ["node-c", "node-d"], priority=1),
        ),
        "default/big",
        BIG_PODS,
        [BIG, MID],
        foreign=frozenset({"default/other-0", "default/other-1"}),
        want_domain="z1/r2",
        want_victims=("other-0", "other-1"),
    ),
    Story(
        "with evictOtherSchedulersPods off, the other scheduler's cheaper pods stay",
        cluster(
            TWO_RACKS,
            bound=holders("mid", ["node-a", "node-b"], priority=5)
            + holders("other", ["node-c", "node-d"], priority=1),
        ),
        "default/big",
        BIG_PODS,
        [BIG, MID],
        foreign=frozenset({"default/other-0", "default/other-1"}),
        policy=Policy.of(
            SchedulerConfig.model_validate({"preemption": {"evictOtherSchedulersPods": False}})
        ),
        want_domain="z1/r1",
        want_victims=("mid-0", "mid-1"),
    ),
    Story(
        "a rack too small whatever is evicted is refused; the gang takes the rack that can hold it",
        cluster(
            {"z1": {"r1": ["gpu8"], "r2": ["gpu8"] * 2}},
            bound=holders("low", ["node-a"], priority=1)
            + holders("mid", ["node-b", "node-c"], priority=5),
        ),
        "default/big",
        BIG_PODS,
        [BIG, LOW, MID],
        want_domain="z1/r2",
        want_victims=("mid-0", "mid-1"),
    ),
]


@pytest.mark.parametrize("story", STORIES, ids=[s.id for s in STORIES])
def test_preemption_story(story: Story) -> None:
    plan = plan_preemption(
        story.snapshot,
        story.unit,
        story.pods,
        story.groups,
        story.policy,
        story.budgets,
        story.foreign,
    )
    assert summary(plan, bool(story.want_nominated)) == want(story), plan.message


def test_two_preemptors_in_one_cycle_never_count_on_the_same_freed_rack() -> None:
    """Both gangs want r2, whose victims are the cheapest; the higher one gets it, and the
    lower one's plan is made with r2 already taken, so it evicts r1's victims instead."""
    snapshot = cluster(
        TWO_RACKS,
        bound=holders("mid", ["node-a", "node-b"], priority=5)
        + holders("low", ["node-c", "node-d"], priority=1),
    )
    first = members("first", 2, gpus=8, group="first", priority=100)
    second = members("second", 2, gpus=8, group="second", priority=50)
    groups = [
        prioritized(gang("first", 2, topology=RACK), 100),
        prioritized(gang("second", 2, topology=RACK), 50),
        MID,
        LOW,
    ]
    result = schedule(snapshot, [*first, *second], groups, Policy())
    plans = plan_cycle(snapshot, result, [*first, *second], groups, Policy())
    got = [
        (
            p.preemptor,
            p.outcome.value,
            "/".join(p.placement.values()),
            sorted(v.pod for v in p.victims),
        )
        for p in plans
    ]
    assert got == [
        ("default/first", "Planned", "z1/r2", ["default/low-0", "default/low-1"]),
        ("default/second", "Planned", "z1/r1", ["default/mid-0", "default/mid-1"]),
    ]


def test_a_plan_is_data_for_simulate_and_explain() -> None:
    """The ``preemptions`` entry: for whom, victims, domain, why, the other domains' costs,
    the budget used."""
    story = STORIES[0]
    plan = plan_preemption(story.snapshot, story.unit, story.pods, story.groups, Policy())
    document = plan.to_dict()
    assert {k: document[k] for k in ("preemptor", "outcome", "placement", "priority")} == {
        "preemptor": "default/big",
        "outcome": "Planned",
        "placement": {ZONE: "z1", RACK: "r2"},
        "priority": 100,
    }
    assert [v["pod"] for v in document["victims"]] == ["default/low-0", "default/low-1"]
    assert [(d["domain"], d["verdict"]) for d in document["domains"]] == [
        ("z1/r2", "Chosen"),
        ("z1/r1", "NotTried"),
    ]
    # r1 is not tried: its victims' priority 5 alone makes it dearer than r2's plan.
    assert document["domains"][1]["atLeast"] == {"highestVictimPriority": 5, "gpusEvicted": 16.0}
    assert document["budget"] == {"trials": 16, "used": plan.trials}
    assert plan.message == (
        "evict 2 pods in z1/r2: no PDB violated, highest victim priority 1, "
        "16 GPUs, 1 victim group; 1 other domain weighed"
    )


def test_room_an_evicted_all_gang_leaves_unused_spares_a_single_pod() -> None:
    #          r1
    #   a    b    c    d          s0, s1: single pods; wide: an All gang on c and d
    #   s0   s1   wide wide       (all priority 1, 8 GPUs each)
    # The rack gang needs three nodes. A trial that takes a, b and c evicts all four (wide
    # goes whole, d is left idle): sparing s0 for d evicts 24 GPUs, not 32.
    wide = prioritized(gang("wide", 2), 1, DisruptionMode.ALL)
    high = prioritized(gang("high", 3, topology=RACK), 10)
    held = [
        bound(pod("s0", gpus=8, priority=1), "node-a", ALL8),
        bound(pod("s1", gpus=8, priority=1), "node-b", ALL8),
        *holders("wide", ["node-c", "node-d"], priority=1),
    ]
    snapshot = cluster({"z1": {"r1": ["a100x8"] * 4}}, bound=held)
    pods = members("high", 3, gpus=8, group="high", priority=10)
    plan = plan_preemption(snapshot, "default/high", pods, [high, wide], Policy())
    assert sorted(v.pod for v in plan.victims) == [
        "default/s1",
        "default/wide-0",
        "default/wide-1",
    ]
    assert plan.cost is not None
    assert plan.cost.gpu_milli == 24_000
    assert sorted(b.node for b in plan.bindings) == ["node-b", "node-c", "node-d"]


def test_a_domain_tying_on_gpus_is_still_tried_when_it_may_need_fewer_victim_groups() -> None:
    #   r1: a, b held by two one-pod gangs; r2: c, d by one two-pod gang; the same priority
    #   and GPUs either way. Fewer victim groups (the (d)) decides: r2, though r1 is
    #   weighed first and a bound on priority and GPUs alone cannot tell them apart.
    held = (
        holders("x", ["node-a"], priority=1)
        + holders("y", ["node-b"], priority=1)
        + holders("w", ["node-c", "node-d"], priority=1)
    )
    groups = [
        BIG,
        prioritized(gang("x", 1), 1),
        prioritized(gang("y", 1), 1),
        prioritized(gang("w", 2), 1),
    ]
    plan = plan_preemption(
        cluster(TWO_RACKS, bound=held), "default/big", BIG_PODS, groups, Policy()
    )
    assert summary(plan, False)["domain"] == "z1/r2", plan.message
    assert summary(plan, False)["victims"] == ("w-0", "w-1"), plan.message
    assert plan.message.endswith("1 victim group; 1 other domain weighed"), plan.message

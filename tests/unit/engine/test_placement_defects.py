"""Placements that were wrong, each a class of inputs (issue 13, items 1-3 and 6).

Every story compares the whole result: pod → (node, GPUs), group → (phase, domain, reason),
pending pod → reason, and, where the story is about a reason, the messages too. Nodes are DGX
A100s (8 GPUs, 252 CPUs) unless drawn otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from gpusched.api.config import SchedulerConfig
from gpusched.engine.groups import GroupSpec
from gpusched.engine.policy import Policy
from gpusched.engine.request import PodRequest
from gpusched.engine.result import ScheduleResult
from gpusched.engine.schedule import schedule
from gpusched.engine.snapshot import BoundPod, Snapshot
from testing.engine import (
    RACK,
    ZONE,
    bound,
    cluster,
    composite,
    gang,
    members,
    node,
    outcomes,
    pending,
    placements,
    pod,
)

ALL = tuple(range(8))
SCHEDULED = ("Scheduled", "Scheduled")
UNSCHEDULABLE = ("Unschedulable", "Unschedulable")


def g(phase_reason: tuple[str, str], domain: str = "") -> tuple[str, str, str]:
    """A want_groups entry: (phase, domain, reason)."""
    return (phase_reason[0], domain, phase_reason[1])


def held(name: str, node_name: str, group: str | None = None, gpus: int = 8) -> BoundPod:
    """A pod already bound to ``node_name``, holding its first ``gpus`` GPUs."""
    return bound(pod(name, gpus=gpus, group=group), node_name, tuple(range(gpus)))


@dataclass(frozen=True)
class Story:
    id: str
    snapshot: Snapshot
    pods: Sequence[PodRequest]
    groups: Sequence[GroupSpec]
    want_bindings: Mapping[str, tuple[str, tuple[int, ...]]]
    want_groups: Mapping[str, tuple[str, str, str]]
    """group → (phase, domain path, reason)."""
    want_pending: Mapping[str, str] = field(default_factory=dict)
    """pod → reason."""
    want_messages: Mapping[str, str] = field(default_factory=dict)
    """group or pending pod → its message, for the names given."""


def whole(result: ScheduleResult, story: Story) -> dict[str, Any]:
    said = {d.name.removeprefix("default/"): d.message for d in result.groups}
    said |= {u.pod.removeprefix("default/"): u.message for u in result.unschedulable}
    return {
        "bindings": placements(result),
        "groups": outcomes(result),
        "pending": pending(result),
        "messages": {name: said.get(name) for name in story.want_messages},
    }


def check(story: Story) -> None:
    result = schedule(story.snapshot, story.pods, story.groups, Policy())
    want = {
        "bindings": dict(story.want_bindings),
        "groups": dict(story.want_groups),
        "pending": dict(story.want_pending),
        "messages": dict(story.want_messages),
    }
    assert whole(result, story) == want, [(d.name, d.message, d.attempts) for d in result.groups]


def two_racks(*bound_pods: BoundPod, per_rack: int = 2) -> Snapshot:
    #        z1
    #      /    \
    #  rack-1   rack-2
    #  a   b    c   d
    return cluster(
        zones={"z1": {"rack-1": ["a100x8"] * per_rack, "rack-2": ["a100x8"] * per_rack}},
        bound=bound_pods,
    )


# ----- item 1: bound members in two domains are never extended --------------------------------

SPREAD_MESSAGE = (
    "no placement in any domain: bound pods already span 2 topology.example.com/rack domains, "
    "which its constraint forbids: z1/rack-1 (node-a); z1/rack-2 (node-c)"
)

PINNED_STORIES = [
    # train-0 on a (rack-1), train-1 on c (rack-2): the gang already breaks its constraint
    Story(
        "a gang whose bound pods sit in two racks is not extended into either",
        two_racks(held("train-0", "node-a", "train"), held("train-1", "node-c", "train")),
        [pod("train-2", gpus=8, group="train")],
        [gang("train", 3, topology=RACK)],
        want_bindings={},
        want_groups={"train": g(UNSCHEDULABLE)},
        want_pending={"train-2": "Unschedulable"},
        want_messages={"train": SPREAD_MESSAGE},
    ),
    # job (rack) ├── lead (bound on a, rack-1)  ├── ps (bound on c, rack-2)  └── workers
    Story(
        "a CompositePodGroup whose children sit in two racks does not place its third child",
        two_racks(held("lead-0", "node-a", "lead"), held("ps-0", "node-c", "ps")),
        [pod("workers-0", gpus=8, group="workers")],
        [
            composite("job", 3, topology=RACK),
            gang("lead", 1, parent="job"),
            gang("ps", 1, parent="job"),
            gang("workers", 1, parent="job"),
        ],
        want_bindings={},
        want_groups={
            "job": g(UNSCHEDULABLE),
            "lead": g(UNSCHEDULABLE),
            "ps": g(UNSCHEDULABLE),
            "workers": g(UNSCHEDULABLE),
        },
        want_pending={"workers-0": "Unschedulable"},
        want_messages={"job": SPREAD_MESSAGE},
    ),
    #      z1          z2
    #      |           |
    #    rack-1      rack-2
    #    a   b       c   d
    Story(
        "children of a zone-wide job bound in two zones: the job is not extended, though each "
        "child keeps to one rack",
        cluster(
            zones={"z1": {"rack-1": ["a100x8"] * 2}, "z2": {"rack-2": ["a100x8"] * 2}},
            bound=[held("lead-0", "node-a", "lead"), held("ps-0", "node-c", "ps")],
        ),
        [pod("workers-0", gpus=8, group="workers")],
        [
            composite("job", 3, topology=ZONE),
            gang("lead", 1, topology=RACK, parent="job"),
            gang("ps", 1, topology=RACK, parent="job"),
            gang("workers", 1, topology=RACK, parent="job"),
        ],
        want_bindings={},
        want_groups={
            "job": g(UNSCHEDULABLE),
            "lead": g(UNSCHEDULABLE),
            "ps": g(UNSCHEDULABLE),
            "workers": g(UNSCHEDULABLE),
        },
        want_pending={"workers-0": "Unschedulable"},
        want_messages={
            "job": "no placement in any domain: bound pods already span 2 "
            "topology.kubernetes.io/zone domains, which its constraint forbids: "
            "z1 (node-a); z2 (node-c)"
        },
    ),
    Story(
        "bound pods in one rack still pin the gang there, though the other rack is emptier",
        two_racks(held("train-0", "node-c", "train"), held("other", "node-a")),
        [pod("train-1", gpus=8, group="train")],
        [gang("train", 2, topology=RACK)],
        want_bindings={"train-1": ("node-d", ALL)},
        want_groups={"train": g(SCHEDULED, "z1/rack-2")},
    ),
    Story(
        "a gang without a topology key may have bound pods anywhere and still grows",
        two_racks(held("train-0", "node-a", "train"), held("train-1", "node-c", "train")),
        [pod("train-2", gpus=8, group="train")],
        [gang("train", 3)],
        want_bindings={"train-2": ("node-b", ALL)},
        want_groups={"train": g(SCHEDULED)},
    ),
]


@pytest.mark.parametrize("story", PINNED_STORIES, ids=lambda s: s.id)
def test_bound_members_pin_their_group(story: Story) -> None:
    check(story)


# ----- a gang bound below its minCount: it grows by what fits, before anything new ------------
#
# rack-1: a holds train-0 (8 GPUs), b is free; rack-2: c and d are full. train needs 3 pods:
# 2 more, room for 1. An older 8-GPU pod without a group wants b as well.

SHORT_GANG = two_racks(held("train-0", "node-a", "train"), held("x", "node-c"), held("y", "node-d"))
SHORT_STORIES = [
    Story(
        "a gang bound below its minCount places the one pod that fits, before an older pod",
        SHORT_GANG,
        [
            pod("train-1", gpus=8, group="train", created=100.0),
            pod("train-2", gpus=8, group="train", created=100.0),
            pod("solo", gpus=8, created=1.0),
        ],
        [gang("train", 3, topology=RACK, created=100.0)],
        want_bindings={"train-1": ("node-b", ALL)},
        want_groups={"train": g(SCHEDULED, "z1/rack-1")},
        want_pending={"train-2": "Unschedulable", "solo": "Unschedulable"},
    ),
    Story(
        "a higher priority still goes first: the short gang waits for the next freed room",
        SHORT_GANG,
        [
            pod("train-1", gpus=8, group="train"),
            pod("train-2", gpus=8, group="train"),
            pod("urgent", gpus=8, priority=10),
        ],
        [gang("train", 3, topology=RACK)],
        want_bindings={"urgent": ("node-b", ALL)},
        want_groups={"train": g(UNSCHEDULABLE)},
        want_pending={"train-1": "Unschedulable", "train-2": "Unschedulable"},
    ),
    Story(
        "a gang not yet bound keeps all or nothing: 1 of 2 fits, nothing is placed",
        two_racks(held("x", "node-c"), held("y", "node-d"), held("z", "node-a")),
        [pod("train-0", gpus=8, group="train"), pod("train-1", gpus=8, group="train")],
        [gang("train", 2, topology=RACK)],
        want_bindings={},
        want_groups={"train": g(UNSCHEDULABLE)},
        want_pending={"train-0": "Unschedulable", "train-1": "Unschedulable"},
    ),
]


@pytest.mark.parametrize("story", SHORT_STORIES, ids=lambda s: s.id)
def test_a_gang_bound_below_its_min_count_grows_first(story: Story) -> None:
    check(story)


# ----- item 3: "tightest fit first" for CompositePodGroups counts every resource -------------
#
#        z1
#      /    \
#  rack-1   rack-2
#    a        b          both 8 free GPUs; b has less CPU (or memory) than a
#
# small (older) needs one 4-GPU pod with 100 CPUs (and 100 GiB); big needs two of them. Only a
# holds two, so small must take the tighter rack-2. Counting free GPUs only, the racks tie and
# rack-1 wins on its name, and big finds no rack.

GIB = 2**30


def cpu_or_memory_racks(allocatable: Mapping[str, str]) -> Snapshot:
    return cluster(
        nodes=[
            node_in("node-a", "rack-1"),
            node_in("node-b", "rack-2", allocatable=allocatable),
        ]
    )


def node_in(
    name: str,
    rack: str,
    allocatable: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
) -> Any:
    everything = {ZONE: "z1", RACK: rack, **(labels or {})}
    return node(name, "a100x8", labels=everything, allocatable=allocatable)


def job(name: str, pods: int, created: float) -> tuple[list[GroupSpec], list[PodRequest]]:
    groups = [
        composite(name, 1, topology=RACK, created=created),
        gang(f"{name}-w", pods, parent=name, created=created),
    ]
    return groups, members(
        f"{name}-w", pods, gpus=4, cpu=100_000, memory=100 * GIB, group=f"{name}-w", created=created
    )


def two_jobs() -> tuple[list[GroupSpec], list[PodRequest]]:
    small_groups, small_pods = job("small", 1, created=1.0)
    big_groups, big_pods = job("big", 2, created=2.0)
    return [*small_groups, *big_groups], [*small_pods, *big_pods]


TIGHTEST_STORIES = [
    Story(
        f"the rack with less {what} is the tighter fit, so the small job leaves rack-1 to the "
        "big one",
        cpu_or_memory_racks(allocatable),
        two_jobs()[1],
        two_jobs()[0],
        want_bindings={
            "small-w-0": ("node-b", (0, 1, 2, 3)),
            "big-w-0": ("node-a", (0, 1, 2, 3)),
            "big-w-1": ("node-a", (4, 5, 6, 7)),
        },
        want_groups={
            "small": g(SCHEDULED, "z1/rack-2"),
            "small-w": g(SCHEDULED, "z1/rack-2"),
            "big": g(SCHEDULED, "z1/rack-1"),
            "big-w": g(SCHEDULED, "z1/rack-1"),
        },
    )
    for what, allocatable in (("CPU", {"cpu": "150"}), ("memory", {"memory": "150Gi"}))
]


@pytest.mark.parametrize("story", TIGHTEST_STORIES, ids=lambda s: s.id)
def test_composite_domains_tightest_fit_first_by_every_resource(story: Story) -> None:
    check(story)


# ----- item 2: siblings inside one domain are re-tried in other orders -------------------------
#
#        z1
#         |
#       rack-1
#     a       b          a: 252 CPUs, b: 64 CPUs (both 8 GPUs)
#
# job (CompositePodGroup, rack, minGroupCount 2) with two children and no topology key of
# their own, so the rack is their only domain: only the order they are placed in can change.


POOL = {"example.com/pool": "special"}
"""node-a's label, which a pod's nodeSelector may ask for."""


def leader_rack() -> Snapshot:
    return cluster(
        nodes=[
            node_in("node-a", "rack-1", labels=POOL),
            node_in("node-b", "rack-1", {"cpu": "64"}),
        ],
    )


def two_children(first: str, second: str) -> list[GroupSpec]:
    return [
        composite("job", 2, topology=RACK),
        gang(first, 1, parent="job"),
        gang(second, 1, parent="job"),
    ]


@dataclass(frozen=True)
class SiblingStory:
    story: Story
    want_explored: int
    """Trials of (group, domain) for the job: the job's rack, then each child's per order."""


def sibling_story(
    id: str,
    snapshot: Snapshot,
    pods: Sequence[PodRequest],
    groups: Sequence[GroupSpec],
    want_bindings: Mapping[str, tuple[str, tuple[int, ...]]],
    want_explored: int,
) -> SiblingStory:
    names = [grp.key.removeprefix("default/") for grp in groups]
    placed = bool(want_bindings)
    want_groups = {n: g(SCHEDULED, "z1/rack-1") if placed else g(UNSCHEDULABLE) for n in names}
    want_pending = {} if placed else {p.key.removeprefix("default/"): "Unschedulable" for p in pods}
    story = Story(id, snapshot, pods, groups, want_bindings, want_groups, want_pending)
    return SiblingStory(story, want_explored)


SIBLING_STORIES = [
    # greedy: workers (8 GPUs) first take a, whose CPUs the leader (250 CPUs) needs; the
    # leader asks for 79 % of the rack's CPUs, the workers for 50 % of its GPUs: tighter first
    # puts the leader on a and the workers on b.
    sibling_story(
        "GPU workers placed first take the only node the CPU-heavy leader fits: the tighter "
        "leader goes first on the retry",
        leader_rack(),
        [
            pod("workers-0", gpus=8, cpu=8_000, group="workers"),
            pod("leader-0", cpu=250_000, group="leader"),
        ],
        two_children("leader", "workers"),
        {"leader-0": ("node-a", ()), "workers-0": ("node-b", ALL)},
        # job; workers, then the leader refused by the rack (greedy); leader, workers
        # (tighter first)
        want_explored=5,
    ),
    # Neither child asks for GPUs, so greedy orders them by name alone.
    *(
        sibling_story(
            f"a small CPU-only leader named {name!r} and CPU-only workers that fit only a: "
            "placed whatever the names",
            leader_rack(),
            [
                pod(f"{name}-0", cpu=8_000, group=name),
                pod("workers-0", cpu=250_000, group="workers"),
            ],
            two_children(name, "workers"),
            {f"{name}-0": ("node-b", ()), "workers-0": ("node-a", ())},
            want_explored=explored,
        )
        for name, explored in (("lead", 5), ("zz-lead", 3))
    ),
    # p and q both take a whole node and are alike by every resource, so the tighter order
    # is the greedy one again; q may only go to a, which p (first by name) took.
    sibling_story(
        "two alike siblings, the second pinned to the node the first took: the failing one "
        "first, within the budget",
        leader_rack(),
        [
            pod("p-0", gpus=8, group="p"),
            pod("q-0", gpus=8, group="q", selector=POOL),
        ],
        two_children("p", "q"),
        {"q-0": ("node-a", ALL), "p-0": ("node-b", ALL)},
        want_explored=5,  # job; p, q refused (greedy = tighter); q, p (q failed, so q first)
    ),
]


@pytest.mark.parametrize("case", SIBLING_STORIES, ids=lambda c: c.story.id)
def test_siblings_are_retried_in_other_orders_inside_their_domain(case: SiblingStory) -> None:
    check(case.story)
    result = schedule(case.story.snapshot, case.story.pods, case.story.groups, Policy())
    (job_decision,) = [d for d in result.groups if d.name == "default/job"]
    assert job_decision.explored == case.want_explored, job_decision


def test_with_no_budget_the_failing_sibling_is_not_moved_first() -> None:
    pods = [pod("p-0", gpus=8, group="p"), pod("q-0", gpus=8, group="q", selector=POOL)]
    greedy = Policy.of(SchedulerConfig.model_validate({"backtrackingBudget": 0}))
    result = schedule(leader_rack(), pods, two_children("p", "q"), greedy)
    assert (placements(result), pending(result)) == (
        {},
        {"p-0": "Unschedulable", "q-0": "Unschedulable"},
    )


# ----- item 6: every reason says the real cause -----------------------------------------------

MISSING_LABEL = {"example.com/pool": "none-such"}
"""A nodeSelector no node matches."""

REASON_STORIES = [
    # job (zone, minGroupCount 1) ├── a: a gang of 2, fits   └── sub (minGroupCount 2) └── b
    Story(
        "a pod under a sub-group that lacks child groups waits, and says for what",
        two_racks(),
        [*members("a", 2, gpus=8, group="a"), pod("b-0", gpus=8, group="b")],
        [
            composite("job", 1, topology=ZONE),
            gang("a", 2, parent="job"),
            composite("sub", 2, parent="job"),
            gang("b", 1, parent="sub"),
        ],
        want_bindings={"a-0": ("node-a", ALL), "a-1": ("node-b", ALL)},
        want_groups={
            "job": g(SCHEDULED, "z1"),
            "a": g(SCHEDULED, "z1"),
            "sub": ("Pending", "", "WaitingForPods"),
            "b": ("Pending", "", "WaitingForPods"),
        },
        want_pending={"b-0": "WaitingForPods"},
        want_messages={
            "b-0": "CompositePodGroup default/sub: 1 of 2 child groups exist (minGroupCount)"
        },
    ),
    Story(
        "a pod under a sub-group short of pods for its minCount waits, and says so",
        two_racks(),
        [*members("a", 2, gpus=8, group="a"), pod("b-0", gpus=8, group="b")],
        [
            composite("job", 1, topology=RACK),
            gang("a", 2, parent="job"),
            gang("b", 2, parent="job"),
        ],
        want_bindings={"a-0": ("node-a", ALL), "a-1": ("node-b", ALL)},
        want_groups={
            "job": g(SCHEDULED, "z1/rack-1"),
            "a": g(SCHEDULED, "z1/rack-1"),
            "b": ("Pending", "", "WaitingForPods"),
        },
        want_pending={"b-0": "WaitingForPods"},
        want_messages={"b-0": "1 of 2 valid pods exist (minCount 2)"},
    ),
    Story(
        "a basic group's pod whose nodeSelector matches no node says so, not that it did not fit",
        two_racks(),
        [
            pod("web-0", gpus=8, group="web"),
            pod("web-1", gpus=8, group="web", selector=MISSING_LABEL),
        ],
        [gang("web", 0, basic=True)],
        want_bindings={"web-0": ("node-a", ALL)},
        want_groups={"web": g(SCHEDULED)},
        want_pending={"web-1": "Unschedulable"},
        want_messages={
            "web-1": "0/4 nodes are available beside its group's other pods: 4 nodeSelector "
            "example.com/pool=none-such does not match: node-a, node-b, …"
        },
    ),
    Story(
        "a gang's pod beyond minCount that fits no node of the gang's rack says why",
        two_racks(),
        [
            pod("train-0", gpus=8, group="train"),
            pod("train-1", gpus=8, group="train", selector=MISSING_LABEL),
        ],
        [gang("train", 1, topology=RACK)],
        want_bindings={"train-0": ("node-a", ALL)},
        want_groups={"train": g(SCHEDULED, "z1/rack-1")},
        want_pending={"train-1": "Unschedulable"},
        want_messages={
            "train-1": "0/2 nodes of z1/rack-1 are available beside its group's other pods: "
            "2 nodeSelector example.com/pool=none-such does not match: node-a, node-b"
        },
    ),
    # A later cycle sees what an earlier one bound: the group keeps running (Scheduled) and the
    # pod that still does not fit says so in the same words as in the cycle that placed the rest.
    Story(
        "a running basic group's pod that fits nowhere beside the bound ones: group stays placed",
        two_racks(held("web-0", "node-a", "web"), held("web-1", "node-b", "web")),
        [pod("web-2", gpus=4, group="web")],
        [gang("web", 0, basic=True, topology=RACK)],
        want_bindings={},
        want_groups={"web": g(SCHEDULED, "z1/rack-1")},
        want_pending={"web-2": "Unschedulable"},
        want_messages={
            "web-2": "0/2 nodes of z1/rack-1 are available beside its group's other pods: "
            "2 Insufficient nvidia.com/gpu: node-a (0 free usable GPUs, needs 4), node-b "
            "(0 free usable GPUs, needs 4)"
        },
    ),
    Story(
        "a running gang's pod beyond minCount that does not fit: the gang stays placed",
        two_racks(held("train-0", "node-a", "train"), held("train-1", "node-b", "train")),
        [pod("train-2", gpus=8, group="train")],
        [gang("train", 2, topology=RACK)],
        want_bindings={},
        want_groups={"train": g(SCHEDULED, "z1/rack-1")},
        want_pending={"train-2": "Unschedulable"},
    ),
    #        z1
    #   /   |    |   \
    # r-0  r-1  r-2  r-3      one node each: no rack holds two 8-GPU pods
    Story(
        "the summary names every rack tried, not the first one only",
        cluster(zones={"z1": {f"r-{i}": ["a100x8"] for i in range(4)}}),
        members("train", 2, gpus=8, group="train"),
        [gang("train", 2, topology=RACK)],
        want_bindings={},
        want_groups={"train": g(UNSCHEDULABLE)},
        want_pending={"train-0": "Unschedulable", "train-1": "Unschedulable"},
        want_messages={
            "train": "no placement in any domain: z1/r-0: at most 1 of 2 pods fit; "
            "z1/r-1: at most 1 of 2 pods fit; z1/r-2: at most 1 of 2 pods fit; "
            "z1/r-3: at most 1 of 2 pods fit",
        },
    ),
    # job (rack) └── w: one 8-GPU pod and one 4-GPU pod: every rack has room for one only
    Story(
        "a child that fits no rack of its job carries the job's reason naming every rack, not "
        "the last rack's",
        cluster(zones={"z1": {f"r-{i}": ["a100x8"] for i in range(2)}}),
        [pod("w-0", gpus=8, group="w"), pod("w-1", gpus=4, group="w")],
        [composite("job", 1, topology=RACK), gang("w", 2, parent="job")],
        want_bindings={},
        want_groups={"job": g(UNSCHEDULABLE), "w": g(UNSCHEDULABLE)},
        want_pending={"w-0": "Unschedulable", "w-1": "Unschedulable"},
        want_messages={
            "w-1": "CompositePodGroup default/job: no placement in any domain: "
            "z1/r-0: 0 of 1 child groups fit (default/w: no placement in z1/r-0: 1 of 2 pods "
            "fit: 1 Insufficient nvidia.com/gpu: node-a (0 free usable GPUs, needs 4)); "
            "z1/r-1: 0 of 1 child groups fit (default/w: no placement in z1/r-1: 1 of 2 pods "
            "fit: 1 Insufficient nvidia.com/gpu: node-b (0 free usable GPUs, needs 4))",
        },
    ),
]


@pytest.mark.parametrize("story", REASON_STORIES, ids=lambda s: s.id)
def test_every_reason_says_the_real_cause(story: Story) -> None:
    check(story)


def test_explored_counts_the_domains_refused_before_a_trial() -> None:
    # Four racks of one node, two 8-GPU pods: each rack is refused by its count alone.
    story = next(s for s in REASON_STORIES if s.id.startswith("the summary names every rack"))
    result = schedule(story.snapshot, story.pods, story.groups, Policy())
    (train,) = result.groups
    assert (train.explored, len(train.attempts)) == (4, 4), train

"""Gangs and topology domains (`gpusched.engine.planner` through `schedule`): where a PodGroup
or CompositePodGroup lands, and why it did not when it did not.

Every story compares the whole result: pod → (node, GPUs), group → (phase, domain, reason),
pending pod → reason. Nodes are DGX A100s (8 GPUs) unless drawn otherwise, and most pods take a
whole node, so that who fits where is easy to see.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from gpusched.api.config import SchedulerConfig
from gpusched.engine import wording
from gpusched.engine.domains import root_domain, subdomains
from gpusched.engine.groups import GroupSpec
from gpusched.engine.planner import Planner
from gpusched.engine.policy import Policy
from gpusched.engine.request import PodRequest
from gpusched.engine.result import ScheduleResult
from gpusched.engine.schedule import schedule
from gpusched.engine.scoring import Scoring
from gpusched.engine.snapshot import BoundPod, Snapshot
from testing.engine import (
    RACK,
    ZONE,
    bound,
    cluster,
    composite,
    decision,
    gang,
    members,
    node,
    outcomes,
    pending,
    placements,
    pod,
)

ALL = tuple(range(8))
HALF = (0, 1, 2, 3)
SCHEDULED = ("Scheduled", "Scheduled")
UNSCHEDULABLE = ("Unschedulable", "Unschedulable")


def whole(result: ScheduleResult) -> dict[str, Any]:
    return {"bindings": placements(result), "groups": outcomes(result), "pending": pending(result)}


def busy(name: str, node_name: str) -> BoundPod:
    """A pod of no group holding all 8 GPUs of ``node_name``."""
    return bound(pod(name, gpus=8), node_name, ALL)


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


def g(phase_reason: tuple[str, str], domain: str = "") -> tuple[str, str, str]:
    """A want_groups entry: (phase, domain, reason)."""
    return (phase_reason[0], domain, phase_reason[1])


STORIES = [
    #        z1
    #      /    \
    #  rack-1   rack-2
    #  a*  b*   c   d        * all 8 GPUs bound to other pods
    Story(
        "rack-1 is full so the gang lands in rack-2",
        cluster(
            zones={"z1": {"rack-1": ["a100x8"] * 2, "rack-2": ["a100x8"] * 2}},
            bound=[busy("busy-a", "node-a"), busy("busy-b", "node-b")],
        ),
        members("train", 2, gpus=8, group="train"),
        [gang("train", 2, topology=RACK)],
        want_bindings={"train-0": ("node-c", ALL), "train-1": ("node-d", ALL)},
        want_groups={"train": g(SCHEDULED, "z1/rack-2")},
    ),
    #              z1
    #          /        \
    #      rack-1       rack-2
    #   a  b  c  d      e  f
    #
    # small is older, so it chooses first; both racks fit it, and the tighter one, rack-2,
    # keeps rack-1 whole for big.
    Story(
        "a 2-node gang takes the 2-node rack, leaving the 4-node rack for the 4-node gang after it",
        cluster(zones={"z1": {"rack-1": ["a100x8"] * 4, "rack-2": ["a100x8"] * 2}}),
        [
            *members("small", 2, gpus=8, group="small", created=1.0),
            *members("big", 4, gpus=8, group="big", created=2.0),
        ],
        [gang("small", 2, topology=RACK, created=1.0), gang("big", 4, topology=RACK, created=2.0)],
        want_bindings={
            "small-0": ("node-e", ALL),
            "small-1": ("node-f", ALL),
            "big-0": ("node-a", ALL),
            "big-1": ("node-b", ALL),
            "big-2": ("node-c", ALL),
            "big-3": ("node-d", ALL),
        },
        want_groups={"small": g(SCHEDULED, "z1/rack-2"), "big": g(SCHEDULED, "z1/rack-1")},
    ),
    Story(
        "one pod too many for any rack: nothing of the gang is bound",
        cluster(
            zones={"z1": {"rack-1": ["a100x8"] * 2, "rack-2": ["a100x8"] * 2}},
            bound=[busy("busy-a", "node-a")],
        ),
        members("train", 3, gpus=8, group="train"),
        [gang("train", 3, topology=RACK)],
        want_bindings={},
        want_groups={"train": g(UNSCHEDULABLE)},
        want_pending={f"train-{i}": "Unschedulable" for i in range(3)},
    ),
    Story(
        "without a topology key a gang may span racks",
        cluster(
            zones={"z1": {"rack-1": ["a100x8"] * 2, "rack-2": ["a100x8"] * 2}},
            bound=[busy("busy-a", "node-a")],
        ),
        members("train", 3, gpus=8, group="train"),
        [gang("train", 3)],
        want_bindings={
            f"train-{i}": (n, ALL) for i, n in enumerate(["node-b", "node-c", "node-d"])
        },
        want_groups={"train": g(SCHEDULED)},
    ),
    Story(
        "without a topology key it is still all or nothing: 4 pods, 3 free nodes",
        cluster(
            zones={"z1": {"rack-1": ["a100x8"] * 2, "rack-2": ["a100x8"] * 2}},
            bound=[busy("busy-a", "node-a")],
        ),
        members("train", 4, gpus=8, group="train"),
        [gang("train", 4)],
        want_bindings={},
        want_groups={"train": g(UNSCHEDULABLE)},
        want_pending={f"train-{i}": "Unschedulable" for i in range(4)},
    ),
    Story(
        "a gang with fewer pods than minCount waits for them and holds nothing",
        cluster(zones={"z1": {"rack-1": ["a100x8"] * 4}}),
        members("train", 3, gpus=8, group="train"),
        [gang("train", 4, topology=RACK)],
        want_bindings={},
        want_groups={"train": ("Pending", "", "WaitingForPods")},
        want_pending={f"train-{i}": "WaitingForPods" for i in range(3)},
    ),
    Story(
        "a CompositePodGroup with fewer child groups than minGroupCount waits, and so do its pods",
        cluster(zones={"z1": {"rack-1": ["a100x8"] * 4}}),
        members("workers", 2, gpus=8, group="workers"),
        [composite("job", 2, topology=ZONE), gang("workers", 2, topology=RACK, parent="job")],
        want_bindings={},
        want_groups={
            "job": ("Pending", "", "WaitingForPods"),
            "workers": ("Pending", "", "WaitingForPods"),
        },
        want_pending={"workers-0": "WaitingForPods", "workers-1": "WaitingForPods"},
    ),
    Story(
        "a basic group places what fits and leaves the rest pending",
        cluster(zones={"z1": {"rack-1": ["a100x8"] * 2}}),
        members("web", 3, gpus=8, group="web"),
        [gang("web", 0, basic=True)],
        want_bindings={"web-0": ("node-a", ALL), "web-1": ("node-b", ALL)},
        want_groups={"web": g(SCHEDULED)},
        want_pending={"web-2": "Unschedulable"},
    ),
    #        z1
    #      /    \
    #  rack-1   rack-2
    #  a   b    c°  d        ° train-0 of the gang is bound here
    Story(
        "a re-created pod joins its gang's rack, though rack-1 would come first",
        cluster(
            zones={"z1": {"rack-1": ["a100x8"] * 2, "rack-2": ["a100x8"] * 2}},
            bound=[bound(pod("train-0", gpus=8, group="train"), "node-c", ALL)],
        ),
        [pod("train-1", gpus=8, group="train")],
        [gang("train", 2, topology=RACK)],
        want_bindings={"train-1": ("node-d", ALL)},
        want_groups={"train": g(SCHEDULED, "z1/rack-2")},
    ),
    Story(
        "a re-created pod stays pending when its gang's rack is full, though rack-1 is empty",
        cluster(
            zones={"z1": {"rack-1": ["a100x8"] * 2, "rack-2": ["a100x8"] * 2}},
            bound=[
                bound(pod("train-0", gpus=8, group="train"), "node-c", ALL),
                busy("busy-d", "node-d"),
            ],
        ),
        [pod("train-1", gpus=8, group="train")],
        [gang("train", 2, topology=RACK)],
        want_bindings={},
        want_groups={"train": g(UNSCHEDULABLE)},
        want_pending={"train-1": "Unschedulable"},
    ),
    Story(
        "the higher-priority gang is placed first when both cannot fit, though it is younger",
        cluster(zones={"z1": {"rack-1": ["a100x8"] * 2}}),
        [
            *members("low", 2, gpus=8, group="low", created=1.0),
            *members("high", 2, gpus=8, group="high", created=2.0, priority=100),
        ],
        [gang("low", 2, topology=RACK, created=1.0), gang("high", 2, topology=RACK, created=2.0)],
        want_bindings={"high-0": ("node-a", ALL), "high-1": ("node-b", ALL)},
        want_groups={"high": g(SCHEDULED, "z1/rack-1"), "low": g(UNSCHEDULABLE)},
        want_pending={"low-0": "Unschedulable", "low-1": "Unschedulable"},
    ),
    Story(
        "of equal priority the older gang goes first",
        cluster(zones={"z1": {"rack-1": ["a100x8"] * 2}}),
        [
            *members("young", 2, gpus=8, group="young", created=2.0),
            *members("old", 2, gpus=8, group="old", created=1.0),
        ],
        [gang("young", 2, topology=RACK, created=2.0), gang("old", 2, topology=RACK, created=1.0)],
        want_bindings={"old-0": ("node-a", ALL), "old-1": ("node-b", ALL)},
        want_groups={"old": g(SCHEDULED, "z1/rack-1"), "young": g(UNSCHEDULABLE)},
        want_pending={"young-0": "Unschedulable", "young-1": "Unschedulable"},
    ),
    Story(
        "a gang that cannot fit does not block a smaller one behind it",
        cluster(zones={"z1": {"rack-1": ["a100x8"] * 2}}),
        [
            *members("big", 3, gpus=8, group="big", created=1.0),
            *members("small", 1, gpus=8, group="small", created=2.0),
        ],
        [gang("big", 3, topology=RACK, created=1.0), gang("small", 1, topology=RACK, created=2.0)],
        want_bindings={"small-0": ("node-a", ALL)},
        want_groups={"big": g(UNSCHEDULABLE), "small": g(SCHEDULED, "z1/rack-1")},
        want_pending={f"big-{i}": "Unschedulable" for i in range(3)},
    ),
    #     zone-a      zone-b
    #       |           |
    #     rack-1      rack-1
    #       a           b
    Story(
        "rack-1 of zone-a and rack-1 of zone-b are different racks: a 2-node gang fits neither",
        cluster(zones={"zone-a": {"rack-1": ["a100x8"]}, "zone-b": {"rack-1": ["a100x8"]}}),
        members("train", 2, gpus=8, group="train"),
        [gang("train", 2, topology=RACK)],
        want_bindings={},
        want_groups={"train": g(UNSCHEDULABLE)},
        want_pending={"train-0": "Unschedulable", "train-1": "Unschedulable"},
    ),
    #     zone-a      zone-b
    #       |           |
    #     rack-1      rack-1
    #       a         b°  c        ° train-0 of the gang is bound here
    Story(
        "a re-created pod of a gang in zone-b/rack-1 stays in zone-b/rack-1, not zone-a/rack-1",
        cluster(
            zones={"zone-a": {"rack-1": ["a100x8"]}, "zone-b": {"rack-1": ["a100x8"] * 2}},
            bound=[bound(pod("train-0", gpus=8, group="train"), "node-b", ALL)],
        ),
        [pod("train-1", gpus=8, group="train")],
        [gang("train", 2, topology=RACK)],
        want_bindings={"train-1": ("node-c", ALL)},
        want_groups={"train": g(SCHEDULED, "zone-b/rack-1")},
    ),
]


@pytest.mark.parametrize("story", STORIES, ids=lambda s: s.id)
def test_story(story: Story) -> None:
    result = schedule(story.snapshot, story.pods, story.groups, Policy())
    want = {
        "bindings": dict(story.want_bindings),
        "groups": dict(story.want_groups),
        "pending": dict(story.want_pending),
    }
    assert whole(result) == want, [(d.name, d.message, d.attempts) for d in result.groups]


# ----- why a gang did not fit: one line per domain tried ----------------------------------------


@dataclass(frozen=True)
class ReportCase:
    id: str
    snapshot: Snapshot
    pods: Sequence[PodRequest]
    group: GroupSpec
    want_attempts: tuple[str, ...]
    want_message: str
    """The one-line summary: every domain tried, each with why in short (one domain: in
    full)."""


REPORT_CASES = [
    # 4-GPU pods: a free node takes two of them, so the counts say more than node counts
    ReportCase(
        "one pod too many for any rack: each rack says how many fit, and on which nodes",
        cluster(
            zones={"z1": {"rack-1": ["a100x8"] * 2, "rack-2": ["a100x8"] * 2}},
            bound=[busy("busy-a", "node-a")],
        ),
        members("train", 5, gpus=4, group="train"),
        gang("train", 5, topology=RACK),
        (
            "z1/rack-1: at most 2 of 5 pods fit: 1 node fits (node-b ×2); "
            "1 Insufficient nvidia.com/gpu: node-a (0 free usable GPUs, needs 4)",
            "z1/rack-2: at most 4 of 5 pods fit: 2 nodes fit (node-c ×2, node-d ×2)",
        ),
        "no placement in any domain: z1/rack-1: at most 2 of 5 pods fit; "
        "z1/rack-2: at most 4 of 5 pods fit",
    ),
    ReportCase(
        "no topology key: the whole cluster is the one domain tried",
        cluster(
            zones={"z1": {"rack-1": ["a100x8"] * 2, "rack-2": ["a100x8"] * 2}},
            bound=[busy("busy-a", "node-a")],
        ),
        members("train", 4, gpus=8, group="train"),
        gang("train", 4),
        (
            "cluster: at most 3 of 4 pods fit: 3 nodes fit (node-b ×1, node-c ×1, node-d ×1); "
            "1 Insufficient nvidia.com/gpu: node-a (0 free usable GPUs, needs 8)",
        ),
        "no placement in any domain: cluster: at most 3 of 4 pods fit: 3 nodes fit (node-b ×1, "
        "node-c ×1, node-d ×1); 1 Insufficient nvidia.com/gpu: node-a (0 free usable GPUs, "
        "needs 8)",
    ),
    # The count estimate (one 8-GPU pod, two 4-GPU copies) passes; the trial does not.
    ReportCase(
        "pods of two shapes: the rack is tried, and the line says which pod did not fit",
        cluster(zones={"z1": {"rack-1": ["a100x8"]}}),
        [pod("big", gpus=8, group="train"), pod("small", gpus=4, group="train")],
        gang("train", 2, topology=RACK),
        (
            "z1/rack-1: 1 of 2 pods fit: "
            "1 Insufficient nvidia.com/gpu: node-a (0 free usable GPUs, needs 4)",
        ),
        "no placement in any domain: z1/rack-1: 1 of 2 pods fit: "
        "1 Insufficient nvidia.com/gpu: node-a (0 free usable GPUs, needs 4)",
    ),
    ReportCase(
        "rack-1 of zone-a and rack-1 of zone-b are reported as two racks",
        cluster(zones={"zone-a": {"rack-1": ["a100x8"]}, "zone-b": {"rack-1": ["a100x8"]}}),
        members("train", 2, gpus=8, group="train"),
        gang("train", 2, topology=RACK),
        (
            "zone-a/rack-1: at most 1 of 2 pods fit: 1 node fits (node-a ×1)",
            "zone-b/rack-1: at most 1 of 2 pods fit: 1 node fits (node-b ×1)",
        ),
        "no placement in any domain: zone-a/rack-1: at most 1 of 2 pods fit; "
        "zone-b/rack-1: at most 1 of 2 pods fit",
    ),
]


@pytest.mark.parametrize("case", REPORT_CASES, ids=lambda c: c.id)
def test_unschedulable_gang_reports_every_domain_tried(case: ReportCase) -> None:
    result = schedule(case.snapshot, case.pods, [case.group], Policy())
    assert placements(result) == {}, "a gang that does not fit binds nothing"
    got = decision(result, case.group.key.removeprefix("default/"))
    assert (got.phase.value, got.reason.value, got.attempts) == (
        "Unschedulable",
        "Unschedulable",
        case.want_attempts,
    ), got.message
    assert got.message == case.want_message
    messages = {u.message for u in result.unschedulable}
    assert messages == {got.message}, "every pod of the gang carries the group's reason"


# ----- five nodes, two zones: a CompositePodGroup on zone over PodGroups on rack ---------------
#
#            z1                  z2
#          /    \                 |
#        r1      r2              r3
#       a  b      c            d    e
#
# job (CompositePodGroup, zone, minGroupCount 2)
#   ├── workers (PodGroup, rack, gang of 2 × 8 GPUs)
#   └── ps      (PodGroup, rack, gang of 1 × 8 GPUs)
#
# Demand 24 GPUs: z1 has 24 free, z2 only 16, so z1 comes first. Inside z1 the workers fit only
# r1; the ps fits either rack and takes the tightest, r2, which is also the only one left.


def five_nodes(*busy_nodes: str) -> Snapshot:
    return cluster(
        zones={"z1": {"r1": ["a100x8"] * 2, "r2": ["a100x8"]}, "z2": {"r3": ["a100x8"] * 2}},
        bound=[busy(f"busy-{n}", n) for n in busy_nodes],
    )


FIVE_GROUPS = [
    composite("job", 2, topology=ZONE),
    gang("workers", 2, topology=RACK, parent="job"),
    gang("ps", 1, topology=RACK, parent="job"),
]
FIVE_PODS = [*members("w", 2, gpus=8, group="workers"), pod("ps-0", gpus=8, group="ps")]


def planner(snapshot: Snapshot, pods: Sequence[PodRequest], groups: Sequence[GroupSpec]) -> Planner:
    by_group: dict[str, list[PodRequest]] = defaultdict(list)
    for p in pods:
        by_group[f"{p.namespace}/{p.group}"].append(p)
    return Planner(snapshot.copy(), Scoring(Policy()), groups, by_group)


def test_five_nodes_candidate_domains_per_level() -> None:
    snapshot = five_nodes()
    plan = planner(snapshot, FIVE_PODS, FIVE_GROUPS)
    job, workers, ps = FIVE_GROUPS
    root = root_domain(snapshot)
    zones = {z.name: z for z in subdomains(snapshot, root, ZONE)}

    # level → group → (candidate domains in the order tried, lines of the domains rejected)
    got = {
        "zone": {"job": _candidates(plan, job, root)},
        "rack in z1": {
            "workers": _candidates(plan, workers, zones["z1"]),
            "ps": _candidates(plan, ps, zones["z1"]),
        },
        "rack in z2": {
            "workers": _candidates(plan, workers, zones["z2"]),
            "ps": _candidates(plan, ps, zones["z2"]),
        },
    }
    assert got == {
        "zone": {"job": (["z1", "z2"], [])},
        "rack in z1": {
            "workers": (["z1/r1"], ["z1/r2: at most 1 of 2 pods fit: 1 node fits (node-c ×1)"]),
            "ps": (["z1/r2", "z1/r1"], []),
        },
        "rack in z2": {
            "workers": (["z2/r3"], []),
            "ps": (["z2/r3"], []),
        },
    }


def _candidates(plan: Planner, group: GroupSpec, parent: Any) -> tuple[list[str], list[str]]:
    found = plan.candidates(group, parent)
    return [d.name for d in found.domains], [wording.full(line.done()) for line in found.lines]


def test_five_nodes_placement() -> None:
    result = schedule(five_nodes(), FIVE_PODS, FIVE_GROUPS, Policy())
    assert whole(result) == {
        "bindings": {"w-0": ("node-a", ALL), "w-1": ("node-b", ALL), "ps-0": ("node-c", ALL)},
        "groups": {
            "job": g(SCHEDULED, "z1"),
            "workers": g(SCHEDULED, "z1/r1"),
            "ps": g(SCHEDULED, "z1/r2"),
        },
        "pending": {},
    }
    placed = {d.name: d.placement for d in result.groups}
    assert placed == {
        "default/job": {ZONE: "z1"},
        "default/workers": {ZONE: "z1", RACK: "r1"},
        "default/ps": {ZONE: "z1", RACK: "r2"},
    }


def test_five_nodes_with_c_busy_nothing_fits_and_each_zone_says_why() -> None:
    # z1 keeps r1 for the workers but has no rack left for the ps; z2 has one rack only.
    result = schedule(five_nodes("node-c"), FIVE_PODS, FIVE_GROUPS, Policy())
    assert placements(result) == {}
    job = decision(result, "job")
    assert (job.phase.value, job.reason.value) == ("Unschedulable", "Unschedulable")
    assert [line.split(":")[0] for line in job.attempts] == ["z1", "z2"], job.attempts
    assert all("1 of 2 child groups fit" in line for line in job.attempts), job.attempts
    assert pending(result) == {
        "w-0": "Unschedulable",
        "w-1": "Unschedulable",
        "ps-0": "Unschedulable",
    }
    not_scheduled = {n: o for n, o in outcomes(result).items() if o[0] == "Scheduled"}
    assert not_scheduled == {}, "no group of a job that did not fit may be reported Scheduled"


# ----- CompositePodGroup backtracking -----------------------------------------------------------
#
#              z1
#          /        \
#        r1          r2
#   a (8 × A100)   b, c (4 × H100 each)
#
# job (CompositePodGroup, zone, minGroupCount 2)
#   ├── a-gang: 2 pods × 4 GPUs — fits r1 (both on node-a) or r2 (one each on b, c)
#   └── b-gang: 1 pod × 8 GPUs  — fits only r1 (no 8-GPU node in r2)
#
# Both children demand 8 GPUs, so a-gang (first by name) is placed first, and its candidate
# racks tie, so it tries r1 first (by name): greedy then leaves b-gang nowhere to go.


def backtracking_cluster() -> Snapshot:
    layout = [("node-a", "a100x8", "r1"), ("node-b", "h100x4", "r2"), ("node-c", "h100x4", "r2")]
    return cluster(nodes=[node(n, kind, labels={ZONE: "z1", RACK: r}) for n, kind, r in layout])


def budget(extra: int) -> Policy:
    """The default policy with a backtracking budget of ``extra`` choices."""
    return Policy.of(SchedulerConfig.model_validate({"backtrackingBudget": extra}))


BACKTRACKING_GROUPS = [
    composite("job", 2, topology=ZONE),
    gang("a-gang", 2, topology=RACK, parent="job"),
    gang("b-gang", 1, topology=RACK, parent="job"),
]
BACKTRACKING_PODS = [*members("a", 2, gpus=4, group="a-gang"), pod("b-0", gpus=8, group="b-gang")]


@dataclass(frozen=True)
class BacktrackingCase:
    id: str
    budget: int
    want: dict[str, Any]
    want_explored: int


BACKTRACKING_CASES = [
    # explored: job in z1; a-gang in r1; b-gang refused by r1 (now full) and r2 (no 8-GPU
    # node); a-gang in r2; b-gang refused by r2, tried in r1
    BacktrackingCase(
        "with a budget, a-gang moves to r2 so that b-gang fits r1",
        64,
        {
            "bindings": {"a-0": ("node-b", HALF), "a-1": ("node-c", HALF), "b-0": ("node-a", ALL)},
            "groups": {
                "job": g(SCHEDULED, "z1"),
                "a-gang": g(SCHEDULED, "z1/r2"),
                "b-gang": g(SCHEDULED, "z1/r1"),
            },
            "pending": {},
        },
        want_explored=7,
    ),
    # explored: job in z1; a-gang in r1; b-gang refused by r1 and r2; then no budget
    BacktrackingCase(
        "with backtrackingBudget 0 greedy is final: nothing is bound, nothing reported placed",
        0,
        {
            "bindings": {},
            "groups": {
                "job": g(UNSCHEDULABLE),
                "a-gang": g(UNSCHEDULABLE),
                "b-gang": g(UNSCHEDULABLE),
            },
            "pending": {"a-0": "Unschedulable", "a-1": "Unschedulable", "b-0": "Unschedulable"},
        },
        want_explored=4,
    ),
]


@pytest.mark.parametrize("case", BACKTRACKING_CASES, ids=lambda c: c.id)
def test_composite_backtracking(case: BacktrackingCase) -> None:
    result = schedule(
        backtracking_cluster(), BACKTRACKING_PODS, BACKTRACKING_GROUPS, budget(case.budget)
    )
    assert whole(result) == case.want, [(d.name, d.message) for d in result.groups]
    assert decision(result, "job").explored == case.want_explored


def test_greedy_failure_names_the_child_that_did_not_fit() -> None:
    result = schedule(backtracking_cluster(), BACKTRACKING_PODS, BACKTRACKING_GROUPS, budget(0))
    job = decision(result, "job")
    assert job.attempts[0].startswith("z1: 1 of 2 child groups fit (default/b-gang: "), job.attempts


def test_each_root_group_gets_its_own_backtracking_budget() -> None:
    # The backtracking story twice, one job per zone, with a budget of exactly one extra
    # choice: each job needs that one choice, so a shared budget would starve the second.
    layout = [
        (f"node-{zone}{suffix}", kind, zone, rack)
        for zone in ("x", "y")
        for suffix, kind, rack in (
            ("a", "a100x8", "r1"),
            ("b", "h100x4", "r2"),
            ("c", "h100x4", "r2"),
        )
    ]
    snapshot = cluster(
        nodes=[node(n, kind, labels={ZONE: z, RACK: r}) for n, kind, z, r in layout],
    )
    groups, pods = [], []
    for job in ("job1", "job2"):
        groups += [
            composite(job, 2, topology=ZONE),
            gang(f"{job}-a", 2, topology=RACK, parent=job),
            gang(f"{job}-b", 1, topology=RACK, parent=job),
        ]
        pods += [*members(f"{job}-a", 2, gpus=4, group=f"{job}-a")]
        pods.append(pod(f"{job}-b-0", gpus=8, group=f"{job}-b"))
    result = schedule(snapshot, pods, groups, budget(1))
    phases = {name: phase for name, (phase, _, _) in outcomes(result).items()}
    assert phases == dict.fromkeys(
        ["job1", "job1-a", "job1-b", "job2", "job2-a", "job2-b"], "Scheduled"
    ), result.groups

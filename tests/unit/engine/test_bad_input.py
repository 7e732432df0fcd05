"""Input the engine must survive: impossible requests, broken group trees, dangling references,
and clusters with nothing in them. Bad input is reported per pod and per group (reason
``Invalid`` when the spec itself is wrong, ``Unschedulable`` when the world may still change),
and never stops the rest from being scheduled; nothing here may raise.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pytest

from gpusched.api.crds import API_VERSION, parse_pod_group
from gpusched.api.errors import InvalidObjectError
from gpusched.api.priority import priority_classes
from gpusched.engine.groups import GroupSpec
from gpusched.engine.policy import Policy
from gpusched.engine.preemption import plan_preemption
from gpusched.engine.request import PodRequest
from gpusched.engine.result import ScheduleResult
from gpusched.engine.schedule import schedule
from gpusched.engine.snapshot import Snapshot
from testing.engine import (
    RACK,
    ZONE,
    bound,
    cluster,
    composite,
    gang,
    members,
    messages,
    node,
    outcomes,
    pending,
    placements,
    pod,
)

ALL = tuple(range(8))


def invalid(group: GroupSpec, why: str) -> GroupSpec:
    """``group`` as the API layer hands over an object that failed validation."""
    return dataclasses.replace(group, invalid=why)


@dataclass(frozen=True)
class Case:
    id: str
    snapshot: Snapshot
    pods: Sequence[PodRequest]
    groups: Sequence[GroupSpec] = ()
    want_bindings: Mapping[str, tuple[str, tuple[int, ...]]] = field(default_factory=dict)
    want_groups: Mapping[str, tuple[str, str, str]] = field(default_factory=dict)
    """group → (phase, domain path, reason)."""
    want_pending: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    """pod → (reason, message)."""


def whole(result: ScheduleResult) -> dict[str, object]:
    reasons = pending(result)
    texts = messages(result)
    return {
        "bindings": placements(result),
        "groups": outcomes(result),
        "pending": {p: (reasons[p], texts[p]) for p in reasons},
    }


ONE_A100 = cluster(zones={"z1": {"rack-1": ["a100x8"]}})
TWO_A100 = cluster(zones={"z1": {"rack-1": ["a100x8"] * 2}})
CPU_ONLY = cluster(zones={"z1": {"rack-1": ["cpu"] * 2}})
EMPTY = cluster()

INVALID_SCHEDULED = ("Pending", "", "Invalid")
SCHEDULED_R1 = ("Scheduled", "z1/rack-1", "Scheduled")


CASES = [
    # ----- requests no node could ever satisfy --------------------------------------------
    Case(
        "more GPUs than any node has is Invalid, not merely Unschedulable",
        ONE_A100,
        [pod("huge", gpus=9), pod("fine", gpus=1)],
        want_bindings={"fine": ("node-a", (0,))},
        want_pending={
            "huge": ("Invalid", "requests 9 nvidia.com/gpu; the largest node has 8"),
        },
    ),
    Case(
        "more cpu than any node has is Invalid",
        ONE_A100,
        [pod("huge", cpu=300_000)],
        want_pending={"huge": ("Invalid", "requests 300000 cpu; the largest node has 252000")},
    ),
    Case(
        "an extended resource no node offers is Invalid",
        ONE_A100,
        [pod("fpga", extra={"example.com/fpga": 1})],
        want_pending={
            "fpga": ("Invalid", "requests 1 example.com/fpga; the largest node has 0"),
        },
    ),
    Case(
        "a gang member larger than any node makes only itself Invalid; its gang then waits",
        TWO_A100,
        [pod("train-0", gpus=8, group="train"), pod("train-1", gpus=16, group="train")],
        [gang("train", 2, topology=RACK)],
        want_groups={"train": ("Pending", "", "WaitingForPods")},
        want_pending={
            "train-0": ("WaitingForPods", "1 of 2 valid pods exist (minCount 2)"),
            "train-1": ("Invalid", "requests 16 nvidia.com/gpu; the largest node has 8"),
        },
    ),
    # ----- broken groups --------------------------------------------------------------------
    Case(
        "an invalid PodGroup keeps its pods pending as Invalid; another group is still placed",
        TWO_A100,
        [pod("bad-0", gpus=8, group="bad"), pod("good-0", gpus=8, group="good")],
        [
            invalid(gang("bad", 1), "spec.schedulingPolicy: exactly one of gang or basic"),
            gang("good", 1, topology=RACK),
        ],
        want_bindings={"good-0": ("node-a", ALL)},
        want_groups={"bad": INVALID_SCHEDULED, "good": SCHEDULED_R1},
        want_pending={
            "bad-0": ("Invalid", "spec.schedulingPolicy: exactly one of gang or basic"),
        },
    ),
    Case(
        "a PodGroup whose parent CompositePodGroup does not exist is Invalid",
        TWO_A100,
        [pod("orphan-0", gpus=8, group="orphan"), pod("good-0", gpus=8, group="good")],
        [gang("orphan", 1, parent="ghost"), gang("good", 1, topology=RACK)],
        want_bindings={"good-0": ("node-a", ALL)},
        want_groups={"orphan": INVALID_SCHEDULED, "good": SCHEDULED_R1},
        want_pending={
            "orphan-0": (
                "Invalid",
                "PodGroup default/orphan: parent CompositePodGroup default/ghost not found",
            ),
        },
    ),
    Case(
        "a parent that is a PodGroup, not a CompositePodGroup, is Invalid",
        TWO_A100,
        [pod("child-0", gpus=8, group="child")],
        [gang("child", 1, parent="plain"), gang("plain", 1)],
        want_groups={"child": INVALID_SCHEDULED, "plain": ("Pending", "", "WaitingForPods")},
        want_pending={
            "child-0": (
                "Invalid",
                "PodGroup default/child: parent default/plain is not a CompositePodGroup",
            ),
        },
    ),
    Case(
        "CompositePodGroups that are each other's parent are Invalid, and so is all below them",
        TWO_A100,
        [pod("w-0", gpus=8, group="workers"), pod("good-0", gpus=8, group="good")],
        [
            composite("left", 1, parent="right"),
            composite("right", 1, parent="left"),
            gang("workers", 1, parent="left"),
            gang("good", 1, topology=RACK),
        ],
        want_bindings={"good-0": ("node-a", ALL)},
        want_groups={
            "left": INVALID_SCHEDULED,
            "right": INVALID_SCHEDULED,
            "workers": INVALID_SCHEDULED,
            "good": SCHEDULED_R1,
        },
        want_pending={
            "w-0": (
                "Invalid",
                "PodGroup default/workers: parentCompositePodGroupName forms a cycle",
            ),
        },
    ),
    Case(
        "a child of an invalid CompositePodGroup is Invalid too",
        TWO_A100,
        [pod("w-0", gpus=8, group="workers")],
        [
            invalid(composite("job", 1), "spec.schedulingPolicy.gang.minGroupCount: must be > 0"),
            gang("workers", 1, parent="job"),
        ],
        want_groups={"job": INVALID_SCHEDULED, "workers": INVALID_SCHEDULED},
        want_pending={
            "w-0": ("Invalid", "PodGroup default/workers: parent default/job is invalid"),
        },
    ),
    # ----- dangling pod references ----------------------------------------------------------
    Case(
        "a pod naming a PodGroup that does not exist (yet) waits as Unschedulable",
        TWO_A100,
        [pod("lost", gpus=8, group="ghost"), pod("loose", gpus=8)],
        want_bindings={"loose": ("node-a", ALL)},
        want_pending={"lost": ("Unschedulable", "PodGroup default/ghost not found")},
    ),
    Case(
        "a pod naming a CompositePodGroup as its group is Invalid",
        TWO_A100,
        [pod("w-0", gpus=8, group="job"), pod("w-1", gpus=8, group="workers")],
        [composite("job", 1, topology=ZONE), gang("workers", 1, topology=RACK, parent="job")],
        want_bindings={"w-1": ("node-a", ALL)},
        want_groups={
            "job": ("Scheduled", "z1", "Scheduled"),
            "workers": SCHEDULED_R1,
        },
        want_pending={
            "w-0": ("Invalid", "default/job is a CompositePodGroup; pods belong to PodGroups"),
        },
    ),
    # ----- nothing to work with -------------------------------------------------------------
    Case("zero pods and no groups: an empty result", TWO_A100, []),
    Case(
        "groups without pods: a gang and a basic group both wait for pods",
        TWO_A100,
        [],
        [gang("train", 2, topology=RACK), gang("web", 0, basic=True)],
        want_groups={
            "train": ("Pending", "", "WaitingForPods"),
            "web": ("Pending", "", "WaitingForPods"),
        },
    ),
    Case(
        "an empty cluster: every kind of pod stays pending as Unschedulable, nothing raises",
        EMPTY,
        [
            pod("cpu"),
            pod("gpu", gpus=1),
            pod("share", milli=300),
            pod("train-0", gpus=1, group="train"),
        ],
        [gang("train", 1, topology=RACK)],
        want_groups={"train": ("Unschedulable", "", "Unschedulable")},
        want_pending={
            "cpu": ("Unschedulable", "0/0 nodes are available: no nodes"),
            "gpu": ("Unschedulable", "0/0 nodes are available: no nodes"),
            "share": ("Unschedulable", "0/0 nodes are available: no nodes"),
            "train-0": (
                "Unschedulable",
                f"no placement in any domain: cluster: no node has label {RACK}",
            ),
        },
    ),
    Case(
        "nodes without GPUs: cpu pods and groups are placed, a GPU pod is Invalid",
        CPU_ONLY,
        [pod("cpu"), pod("gpu", gpus=1), pod("w-0", group="workers")],
        [composite("job", 1, topology=ZONE), gang("workers", 1, topology=RACK, parent="job")],
        want_bindings={"cpu": ("node-a", ()), "w-0": ("node-a", ())},
        want_groups={"job": ("Scheduled", "z1", "Scheduled"), "workers": SCHEDULED_R1},
        want_pending={"gpu": ("Invalid", "requests 1 nvidia.com/gpu; the largest node has 0")},
    ),
    #        z1
    #         |
    #       rack-1
    #   node-a (8 GPUs)   node-b (no GPUs; sorts last)
    Case(
        "a CompositePodGroup on a cluster whose last node has no GPUs",
        cluster(zones={"z1": {"rack-1": ["a100x8", "cpu"]}}),
        members("w", 2, gpus=1, group="workers"),
        [composite("job", 1, topology=ZONE), gang("workers", 2, topology=RACK, parent="job")],
        want_bindings={"w-0": ("node-a", (0,)), "w-1": ("node-a", (1,))},
        want_groups={"job": ("Scheduled", "z1", "Scheduled"), "workers": SCHEDULED_R1},
    ),
    Case(
        "a GPU pod on a cluster with a GPU-less node among GPU nodes goes to a GPU node",
        cluster(nodes=[node("cpu-z", "cpu"), node("gpu-a", "a100x8"), node("cpu-m", "cpu")]),
        [pod("p", gpus=2)],
        want_bindings={"p": ("gpu-a", (0, 1))},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_bad_input(case: Case) -> None:
    result = schedule(case.snapshot, case.pods, case.groups, Policy())
    want = {
        "bindings": dict(case.want_bindings),
        "groups": dict(case.want_groups),
        "pending": dict(case.want_pending),
    }
    assert whole(result) == want


def test_empty_cluster_with_nothing_to_do() -> None:
    result = schedule(EMPTY, [], [], Policy())
    assert result.to_dict() == {"bindings": [], "podGroups": [], "unschedulable": []}


def test_a_64_gpu_node_hands_out_its_last_gpu() -> None:
    # Bit 63 of the free-GPU mask does not fit a signed 64-bit integer.
    big = node("node-a", "gpu8", allocatable={"nvidia.com/gpu": "64"})
    holders = [bound(pod(f"held-{i}", gpus=1), "node-a", [i]) for i in range(63)]
    snapshot = cluster(nodes=[big], bound=holders)
    result = schedule(snapshot, [pod("last", gpus=1)], (), Policy())
    assert placements(result) == {"last": ("node-a", (63,))}, result.unschedulable


def test_a_pod_listed_twice_or_already_bound_is_never_placed_twice() -> None:
    held = pod("held", gpus=8)
    snapshot = cluster(nodes=[node("node-a"), node("node-b")], bound=[bound(held, "node-a")])
    twice = pod("twice", gpus=8)
    result = schedule(snapshot, [twice, twice, held], (), Policy())
    assert placements(result) == {"twice": ("node-b", ALL)}, result.to_dict()
    assert result.unschedulable == [], result.unschedulable


def test_assuming_a_held_pod_again_raises_instead_of_counting_it_twice() -> None:
    snapshot = cluster(nodes=[node("node-a")])
    snapshot.assume(pod("p", gpus=1), 0, [0])
    with pytest.raises(ValueError, match="default/p is already placed on node-a"):
        snapshot.assume(pod("p", gpus=1), 0, [1])
    assert int(snapshot.free_whole[0]) == 7, "the failed assume changed the snapshot"


# ----- preemption with priorities that cannot be trusted -----------------------------------------

PRIORITY_CLASSES = priority_classes(
    [{"kind": "PriorityClass", "metadata": {"name": "high"}, "value": 1000}]
)


def pod_group_object(name: str, **spec: object) -> dict[str, object]:
    return {
        "apiVersion": API_VERSION,
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 1}}, **spec},
    }


def group_from(name: str, **spec: object) -> GroupSpec:
    """As the operator reads a group: parsed, resolved, or marked invalid with the error."""
    try:
        return GroupSpec.from_pod_group(
            parse_pod_group(pod_group_object(name, **spec)), PRIORITY_CLASSES
        )
    except InvalidObjectError as err:
        return invalid(gang(name, 1), str(err))


#   one full node: a priority-1 pod holds all 8 GPUs
FULL = cluster(nodes=[node("node-a")], bound=[bound(pod("low-0", gpus=8, group="low"), "node-a")])
LOW_GROUP = dataclasses.replace(gang("low", 1), priority=1)

UNTRUSTED = [
    (
        "a PriorityClass that does not exist",
        {"priorityClassName": "urgent"},
        "PriorityUnresolved",
        "PodGroup default/big: spec.priorityClassName: PriorityClass 'urgent' not found",
    ),
    (
        "a negative priority beyond int32",
        {"priority": -(2**31) - 1},
        "Invalid",
        "PodGroup default/big: spec.priority: Input should be greater than or equal to -2147483648",
    ),
    (
        "a priority that conflicts with its priorityClassName",
        {"priorityClassName": "high", "priority": 2000},
        "PriorityUnresolved",
        "PodGroup default/big: spec.priority: is 2000, but PriorityClass 'high'",
    ),
]


@pytest.mark.parametrize(
    ("story", "spec", "want_outcome", "want_message"), UNTRUSTED, ids=[u[0] for u in UNTRUSTED]
)
def test_a_preemptor_whose_priority_cannot_be_trusted_evicts_nothing(
    story: str, spec: dict[str, object], want_outcome: str, want_message: str
) -> None:
    big = group_from("big", **spec)
    plan = plan_preemption(
        FULL, "default/big", [pod("big-0", gpus=8, group="big")], [big, LOW_GROUP], Policy()
    )
    assert (plan.outcome.value, plan.victims) == (want_outcome, ()), story
    assert want_message in plan.message


def test_a_victim_whose_priority_cannot_be_trusted_is_never_evicted() -> None:
    low = group_from("low", priorityClassName="gone")
    big = dataclasses.replace(gang("big", 1), priority=1000)
    plan = plan_preemption(
        FULL, "default/big", [pod("big-0", gpus=8, group="big")], [big, low], Policy()
    )
    assert (plan.outcome.value, plan.victims) == ("NoLowerPriority", ())
    assert "1 protected" in plan.message

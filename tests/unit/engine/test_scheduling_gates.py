"""Pods with ``spec.schedulingGates`` (issue 13 item 5).

Kubernetes never schedules a gated pod: it waits (``PodScheduled=False``, reason
``SchedulingGated``) until every gate is removed, and a gang's gated pods do not count toward
its minCount meanwhile. The engine, ``simulate`` and ``explain`` behave alike: a gated pod is
reported ``SchedulingGated`` with its gates, never placed, never counted.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpusched.api.errors import InvalidObjectError
from gpusched.api.k8s import parse_pod
from gpusched.cli import main
from gpusched.engine.groups import GroupSpec
from gpusched.engine.policy import Policy
from gpusched.engine.request import PodRequest
from gpusched.engine.schedule import schedule
from testing.engine import (
    RACK,
    cluster,
    composite,
    gang,
    members,
    messages,
    outcomes,
    pending,
    placements,
    pod,
)

ALL = tuple(range(8))
QUOTA = ("example.com/quota",)


def gated(request: PodRequest, gates: tuple[str, ...] = QUOTA) -> PodRequest:
    return dataclasses.replace(request, gates=gates)


@dataclass(frozen=True)
class GateStory:
    id: str
    pods: Sequence[PodRequest]
    groups: Sequence[GroupSpec]
    want_bindings: Mapping[str, tuple[str, tuple[int, ...]]]
    want_groups: Mapping[str, tuple[str, str, str]]
    want_pending: Mapping[str, str]
    want_messages: Mapping[str, str] = field(default_factory=dict)
    """pending pod or group → message, for the names given."""


def two_nodes() -> Any:
    return cluster(zones={"z1": {"rack-1": ["a100x8"] * 2}})


WAITING = ("Pending", "", "WaitingForPods")
GATED_MESSAGE = "waiting for scheduling gates to be removed: example.com/quota"

GATE_STORIES = [
    GateStory(
        "a gated pod without a group is not placed, though both nodes are free",
        [gated(pod("solo", gpus=8), ("example.com/quota", "example.com/provisioned"))],
        [],
        want_bindings={},
        want_groups={},
        want_pending={"solo": "SchedulingGated"},
        want_messages={
            "solo": "waiting for scheduling gates to be removed: example.com/quota, "
            "example.com/provisioned"
        },
    ),
    GateStory(
        "a gang of 2 with one pod gated waits: the gated pod does not count toward minCount",
        [pod("train-0", gpus=8, group="train"), gated(pod("train-1", gpus=8, group="train"))],
        [gang("train", 2, topology=RACK)],
        want_bindings={},
        want_groups={"train": WAITING},
        want_pending={"train-0": "WaitingForPods", "train-1": "SchedulingGated"},
        want_messages={
            "train": "1 of 2 valid pods exist (minCount 2); 1 more is held back by scheduling "
            "gates",
            "train-1": GATED_MESSAGE,
        },
    ),
    GateStory(
        "a gang whose ungated pods reach minCount is placed; its gated pod stays gated",
        [
            *members("train", 2, gpus=8, group="train"),
            gated(pod("train-2", gpus=8, group="train")),
        ],
        [gang("train", 2, topology=RACK)],
        want_bindings={"train-0": ("node-a", ALL), "train-1": ("node-b", ALL)},
        want_groups={"train": ("Scheduled", "z1/rack-1", "Scheduled")},
        want_pending={"train-2": "SchedulingGated"},
    ),
    GateStory(
        "a basic group whose pods are all gated waits for them",
        [gated(p) for p in members("web", 2, gpus=1, group="web")],
        [gang("web", 0, basic=True)],
        want_bindings={},
        want_groups={"web": WAITING},
        want_pending={"web-0": "SchedulingGated", "web-1": "SchedulingGated"},
        want_messages={"web": "no valid pods exist; 2 more are held back by scheduling gates"},
    ),
    GateStory(
        "a CompositePodGroup whose only child is gated waits, and holds nothing",
        [gated(p) for p in members("w", 2, gpus=8, group="w")],
        [composite("job", 1, topology=RACK), gang("w", 2, parent="job")],
        want_bindings={},
        want_groups={"job": WAITING, "w": WAITING},
        want_pending={"w-0": "SchedulingGated", "w-1": "SchedulingGated"},
    ),
    GateStory(
        "a gated pod listed twice is reported once, and a later ungated copy is not placed",
        [gated(pod("solo", gpus=1)), gated(pod("solo", gpus=1)), pod("solo", gpus=1)],
        [],
        want_bindings={},
        want_groups={},
        want_pending={"solo": "SchedulingGated"},
    ),
]


@pytest.mark.parametrize("story", GATE_STORIES, ids=lambda s: s.id)
def test_gated_pods_wait(story: GateStory) -> None:
    result = schedule(two_nodes(), story.pods, story.groups, Policy())
    said = messages(result) | {d.name.removeprefix("default/"): d.message for d in result.groups}
    assert {
        "bindings": placements(result),
        "groups": outcomes(result),
        "pending": pending(result),
        "messages": {name: said.get(name) for name in story.want_messages},
        "listed": len(result.unschedulable),
    } == {
        "bindings": dict(story.want_bindings),
        "groups": dict(story.want_groups),
        "pending": dict(story.want_pending),
        "messages": dict(story.want_messages),
        "listed": len(story.want_pending),
    }, [(d.name, d.message) for d in result.groups]


# ----- reading spec.schedulingGates ------------------------------------------------------------


def pod_body(name: str, gates: list[Any] | None = None, group: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "gpusched",
        "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "8"}}}],
    }
    if gates is not None:
        spec["schedulingGates"] = gates
    labels = {"scheduling.gpusched.io/pod-group": group} if group else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "labels": labels},
        "spec": spec,
    }


@pytest.mark.parametrize(
    ("gates", "want"),
    [
        (None, ()),
        ([], ()),
        ([{"name": "example.com/quota"}], ("example.com/quota",)),
        ([{"name": "a"}, {"name": "b"}], ("a", "b")),
    ],
    ids=["no field", "an empty list", "one gate", "two gates, in order"],
)
def test_a_pods_scheduling_gates_reach_the_engine(
    gates: list[Any] | None, want: tuple[str, ...]
) -> None:
    request = PodRequest.from_pod(parse_pod(pod_body("p", gates)))
    assert (request.gates, request.gated) == (want, bool(want))


def test_a_gate_without_a_name_is_refused_as_the_api_server_refuses_it() -> None:
    with pytest.raises(InvalidObjectError, match="schedulingGates"):
        parse_pod(pod_body("p", [{"name": ""}]))


# ----- simulate and explain --------------------------------------------------------------------

NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "node-a", "labels": {RACK: "rack-1"}},
    "status": {
        "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "8"},
        "conditions": [{"type": "Ready", "status": "True"}],
    },
}
GANG = {
    "apiVersion": "scheduling.gpusched.io/v1alpha1",
    "kind": "PodGroup",
    "metadata": {"name": "train", "namespace": "ml"},
    "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
}


def write_cluster(tmp_path: Path) -> Path:
    small = [pod_body("train-0", group="train"), pod_body("train-1", [{"name": "q"}], "train")]
    for body in small:
        body["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "2"
    objects = [NODE, GANG, *small, pod_body("solo", [{"name": "example.com/quota"}])]
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    return path


def test_simulate_places_no_gated_pod_and_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["simulate", str(write_cluster(tmp_path)), "-o", "json"])
    document = json.loads(capsys.readouterr().out)
    got = {
        "code": code,
        "bindings": document["bindings"],
        "unschedulable": {u["pod"]: u["reason"] for u in document["unschedulable"]},
        "groups": {g["name"]: g["reason"] for g in document["podGroups"]},
    }
    assert got == {
        "code": 0,
        "bindings": [],
        "unschedulable": {
            "ml/solo": "SchedulingGated",
            "ml/train-0": "WaitingForPods",
            "ml/train-1": "SchedulingGated",
        },
        "groups": {"ml/train": "WaitingForPods"},
    }


def test_explain_tells_a_gated_pod_to_lose_its_gates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["explain", "pod/solo", "-n", "ml", "-f", str(write_cluster(tmp_path))])
    out = capsys.readouterr().out
    assert (code, out.splitlines()) == (
        0,
        [
            "Pod ml/solo: SchedulingGated",
            "  reason: SchedulingGated",
            "  message: waiting for scheduling gates to be removed: example.com/quota",
            "  what would make it fit:",
            "  - remove the scheduling gates of 1 pod: ml/solo (example.com/quota); no "
            "scheduler places a pod while spec.schedulingGates has an entry",
        ],
    )


def test_explain_of_a_gang_short_of_pods_names_its_gated_pod(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["explain", "pg/train", "-n", "ml", "-f", str(write_cluster(tmp_path))])
    out = capsys.readouterr().out
    hints = out.split("what would make it fit:\n", 1)[1].splitlines()
    assert (code, hints) == (
        0,
        [
            "  - remove the scheduling gates of 1 pod: ml/train-1 (q); no scheduler places a "
            "pod while spec.schedulingGates has an entry"
        ],
    )

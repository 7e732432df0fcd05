"""A group's priority, preemption policy and disruption mode: from its own fields, its
PriorityClass, or its pods; and what an unresolved one means (nothing preempts, nothing goes)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from gpusched.api.crds import (
    API_VERSION,
    DisruptionMode,
    PreemptionPolicy,
    parse_composite_pod_group,
    parse_pod_group,
    parse_workload,
)
from gpusched.api.errors import InvalidObjectError
from gpusched.api.materialize import materialize
from gpusched.api.priority import PriorityClass, parse_priority_class, priority_classes
from gpusched.engine.groups import GroupSpec

CLASSES = priority_classes(
    [
        {"kind": "PriorityClass", "metadata": {"name": "high"}, "value": 1000},
        {
            "kind": "PriorityClass",
            "metadata": {"name": "batch"},
            "value": 10,
            "preemptionPolicy": "Never",
        },
    ]
)


def pod_group(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "PodGroup",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}, **spec},
    }


@dataclass(frozen=True)
class Case:
    id: str
    spec: dict[str, Any]
    classes: dict[str, PriorityClass] | None = None
    want_priority: int | None = None
    want_policy: PreemptionPolicy = PreemptionPolicy.PREEMPT_LOWER_PRIORITY
    want_mode: DisruptionMode = DisruptionMode.SINGLE
    want_problem: str | None = None


CASES = [
    Case("no fields: the pods' priority decides", {}, CLASSES),
    Case("a priority of its own", {"priority": 7}, CLASSES, want_priority=7),
    Case(
        "a class name alone takes the class's value", {"priorityClassName": "high"}, CLASSES, 1000
    ),
    Case(
        "a class with preemptionPolicy Never passes it on",
        {"priorityClassName": "batch"},
        CLASSES,
        10,
        PreemptionPolicy.NEVER,
    ),
    Case(
        "the group's own policy wins over its class's",
        {"priorityClassName": "batch", "preemptionPolicy": "PreemptLowerPriority"},
        CLASSES,
        10,
    ),
    Case(
        "a priority equal to its class's value is consistent",
        {"priorityClassName": "high", "priority": 1000, "disruptionMode": "All"},
        CLASSES,
        1000,
        want_mode=DisruptionMode.ALL,
    ),
    Case(
        "a class that does not exist is unresolved, naming the field",
        {"priorityClassName": "urgent"},
        CLASSES,
        want_policy=PreemptionPolicy.NEVER,
        want_problem="PodGroup ml/train: spec.priorityClassName: PriorityClass 'urgent' not found",
    ),
    Case(
        "a priority that disagrees with its class is unresolved",
        {"priorityClassName": "high", "priority": 5},
        CLASSES,
        want_policy=PreemptionPolicy.NEVER,
        want_problem=(
            "PodGroup ml/train: spec.priority: is 5, but PriorityClass 'high' "
            "(spec.priorityClassName) has value 1000; give one or make them agree"
        ),
    ),
    Case(
        "with no PriorityClasses known a class name alone is unresolved",
        {"priorityClassName": "high"},
        None,
        want_policy=PreemptionPolicy.NEVER,
        want_problem="PodGroup ml/train: spec.priorityClassName: PriorityClass 'high' not found",
    ),
    Case(
        "with no PriorityClasses known a priority beside the name is trusted",
        {"priorityClassName": "high", "priority": 1000},
        None,
        1000,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_priority_resolution(case: Case) -> None:
    group = GroupSpec.from_pod_group(parse_pod_group(pod_group(**case.spec)), case.classes)
    got = (group.priority, group.preemption_policy, group.disruption_mode, group.priority_problem)
    assert got == (case.want_priority, case.want_policy, case.want_mode, case.want_problem)


def test_a_composite_resolves_its_class_too() -> None:
    raw = {
        "apiVersion": API_VERSION,
        "kind": "CompositePodGroup",
        "metadata": {"name": "zone", "namespace": "ml"},
        "spec": {"schedulingPolicy": {"gang": {"minGroupCount": 1}}, "priorityClassName": "high"},
    }
    group = GroupSpec.from_composite(parse_composite_pod_group(raw), CLASSES)
    assert (group.priority, group.priority_problem) == (1000, None)


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        (
            {"kind": "PriorityClass", "metadata": {"name": "huge"}, "value": 2**31},
            "PriorityClass huge: value: ",
        ),
        (
            {
                "kind": "PriorityClass",
                "metadata": {"name": "odd"},
                "value": 1,
                "preemptionPolicy": "Sometimes",
            },
            "PriorityClass odd: preemptionPolicy: ",
        ),
        (
            {"kind": "PriorityClass", "metadata": {}, "value": 1},
            "PriorityClass <unnamed>: metadata.name",
        ),
    ],
)
def test_a_bad_priority_class_names_itself_and_the_field(raw: dict[str, Any], want: str) -> None:
    with pytest.raises(InvalidObjectError) as caught:
        parse_priority_class(raw)
    assert str(caught.value).startswith(want)


def test_templates_pass_their_priority_fields_to_the_objects_they_make() -> None:
    fields = {"priorityClassName": "high", "preemptionPolicy": "Never", "disruptionMode": "All"}
    raw = {
        "apiVersion": API_VERSION,
        "kind": "Workload",
        "metadata": {"name": "train", "namespace": "ml", "uid": "u1"},
        "spec": {
            "compositePodGroupTemplates": [
                {
                    "name": "zone",
                    "schedulingPolicy": {"gang": {"minGroupCount": 1}},
                    "priority": 1000,
                    **fields,
                    "podGroupTemplates": [
                        {
                            "name": "workers",
                            "schedulingPolicy": {"gang": {"minCount": 2}},
                            "priority": 5,
                        }
                    ],
                }
            ]
        },
    }
    made = [o.to_manifest()["spec"] for o in materialize(parse_workload(raw))]
    assert [{k: s.get(k) for k in ("priority", *fields)} for s in made] == [
        {"priority": 1000, **fields},
        {
            "priority": 5,
            "priorityClassName": None,
            "preemptionPolicy": None,
            "disruptionMode": None,
        },
    ]

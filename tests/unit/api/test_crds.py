"""Parsing, validation and materialisation of our CRDs (gpusched.api.crds)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpusched.api.crds import (
    API_VERSION,
    CompositePodGroup,
    CustomResource,
    PodGroup,
    Workload,
    parse_composite_pod_group,
    parse_custom_resource,
    parse_pod_group,
    parse_workload,
)
from gpusched.api.errors import InvalidObjectError
from gpusched.api.materialize import materialize
from gpusched.api.names import check_label_key
from gpusched.api.status import GroupPhase

ZONE = "topology.kubernetes.io/zone"
RACK = "topology.example.com/rack"

Raw = dict[str, Any]


# --- builders: a case states only what differs from a valid object ----------------------------


def gang(min_count: int) -> Raw:
    return {"gang": {"minCount": min_count}}


def topology(*keys: str) -> Raw:
    return {"topology": [{"key": key} for key in keys]}


def pod_group(name: str = "train", **spec: Any) -> Raw:
    return {
        "apiVersion": API_VERSION,
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"schedulingPolicy": gang(8), **spec},
    }


def composite(name: str = "zone", **spec: Any) -> Raw:
    return {
        "apiVersion": API_VERSION,
        "kind": "CompositePodGroup",
        "metadata": {"name": name},
        "spec": {"schedulingPolicy": {"gang": {"minGroupCount": 2}}, **spec},
    }


def pg_template(name: str, min_count: int = 1, *keys: str) -> Raw:
    template: Raw = {"name": name, "schedulingPolicy": gang(min_count)}
    if keys:
        template["schedulingConstraints"] = topology(*keys)
    return template


def cpg_template(name: str, *children: Raw, min_groups: int = 1, **extra: Any) -> Raw:
    return {
        "name": name,
        "schedulingPolicy": {"gang": {"minGroupCount": min_groups}},
        "podGroupTemplates": list(children),
        **extra,
    }


def workload(name: str = "train", uid: str | None = "uid-1", **spec: Any) -> Raw:
    metadata: Raw = {"name": name, "namespace": "ml"}
    if uid:
        metadata["uid"] = uid
    return {"apiVersion": API_VERSION, "kind": "Workload", "metadata": metadata, "spec": spec}


def training_workload() -> Raw:
    """The seed document's example: a zone-wide composite gang of a rack-local worker gang and
    a rack-local driver."""
    zone = cpg_template(
        "zone",
        pg_template("workers", 8, RACK),
        pg_template("driver", 1, RACK),
        min_groups=2,
        schedulingConstraints=topology(ZONE),
    )
    return workload(compositePodGroupTemplates=[zone])


def with_field(raw: Raw, path: str, value: Any) -> Raw:
    """A copy of ``raw`` with the dotted ``path`` (``spec.x.0.y``) set to ``value``."""
    result = copy.deepcopy(raw)
    *parents, last = path.split(".")
    node: Any = result
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return result


# --- valid objects -----------------------------------------------------------------------------


@dataclass
class ValidCase:
    id: str
    raw: Raw
    want_type: type[CustomResource]
    want_key: str
    check: Callable[[Any], object] = field(default=lambda obj: True)


VALID = [
    ValidCase(
        "a gang PodGroup confined to one rack",
        pod_group(schedulingConstraints=topology(RACK)),
        PodGroup,
        "default/train",
        lambda pg: pg.spec.scheduling_constraints.topology[0].key == RACK,
    ),
    ValidCase(
        "a basic PodGroup gets the default five-minute timeout",
        pod_group(schedulingPolicy={"basic": {}}),
        PodGroup,
        "default/train",
        lambda pg: (
            pg.spec.schedule_timeout_seconds == 300 and pg.spec.scheduling_policy.gang is None
        ),
    ),
    ValidCase(
        "a PodGroup without namespace lands in default",
        {**pod_group(), "metadata": {"name": "train"}},
        PodGroup,
        "default/train",
    ),
    ValidCase(
        "metadata written by the API server is ignored, not rejected",
        {
            **pod_group(),
            "metadata": {
                "name": "train",
                "namespace": "team-a",
                "uid": "1234",
                "resourceVersion": "42",
                "managedFields": [{"manager": "kubectl"}],
                "creationTimestamp": "2024-05-01T12:00:00Z",
            },
        },
        PodGroup,
        "team-a/train",
        lambda pg: pg.metadata.uid == "1234" and pg.metadata.creation_timestamp.year == 2024,
    ),
    ValidCase(
        "a status with fields from a newer operator still parses",
        {
            **pod_group(),
            "status": {
                "phase": "Unschedulable",
                "placement": {RACK: "rack-1"},
                "futureField": True,
                "lastAttempt": {
                    "time": "2024-05-01T12:00:00Z",
                    "reason": "Unschedulable",
                    "domains": ["rack-1: only 3 of 8 pods fit"],
                },
                "conditions": [
                    {"type": "PodGroupScheduled", "status": "False", "reason": "Unschedulable"}
                ],
            },
        },
        PodGroup,
        "default/train",
        lambda pg: (
            pg.status.phase is GroupPhase.UNSCHEDULABLE
            and pg.status.last_attempt.domains == ["rack-1: only 3 of 8 pods fit"]
        ),
    ),
    ValidCase(
        "snake_case field names are accepted too",
        pod_group(schedulingPolicy={"gang": {"min_count": 2}}, schedule_timeout_seconds=60),
        PodGroup,
        "default/train",
        lambda pg: pg.spec.scheduling_policy.gang.min_count == 2,
    ),
    ValidCase(
        "a zone-wide CompositePodGroup",
        composite(schedulingConstraints=topology(ZONE)),
        CompositePodGroup,
        "default/zone",
        lambda cpg: cpg.spec.scheduling_policy.gang.min_group_count == 2,
    ),
    ValidCase(
        "a Workload of plain pod-group templates",
        workload(podGroupTemplates=[pg_template("workers", 4), pg_template("driver")]),
        Workload,
        "ml/train",
    ),
    ValidCase(
        "a Workload of a zone holding a gang of workers and a driver",
        training_workload(),
        Workload,
        "ml/train",
    ),
]


@pytest.mark.parametrize("case", VALID, ids=lambda case: case.id)
def test_valid_objects_parse_and_round_trip(case: ValidCase) -> None:
    obj = parse_custom_resource(case.raw)

    assert isinstance(obj, case.want_type)
    assert obj.key == case.want_key
    assert case.check(obj), f"check failed on {obj!r}"
    assert parse_custom_resource(obj.to_manifest()) == obj


# --- materialisation ---------------------------------------------------------------------------


def test_training_workload_materialises_into_a_composite_and_two_children() -> None:
    owner = {
        "apiVersion": API_VERSION,
        "kind": "Workload",
        "name": "train",
        "uid": "uid-1",
        "controller": True,
        "blockOwnerDeletion": True,
    }

    objects = materialize(parse_workload(training_workload()))

    got = [
        (
            obj.kind,
            obj.key,
            obj.spec.parent_composite_pod_group_name,
            obj.spec.workload_ref.model_dump(by_alias=True) if obj.spec.workload_ref else None,
            [ref.model_dump(by_alias=True) for ref in obj.metadata.owner_references],
            obj.spec.scheduling_constraints.topology[0].key
            if obj.spec.scheduling_constraints
            else None,
        )
        for obj in objects
    ]
    assert got == [
        (
            "CompositePodGroup",
            "ml/train-zone",
            None,
            {"workloadName": "train", "templateName": "zone"},
            [owner],
            ZONE,
        ),
        (
            "PodGroup",
            "ml/train-workers",
            "train-zone",
            {"workloadName": "train", "templateName": "workers"},
            [owner],
            RACK,
        ),
        (
            "PodGroup",
            "ml/train-driver",
            "train-zone",
            {"workloadName": "train", "templateName": "driver"},
            [owner],
            RACK,
        ),
    ]
    workers = objects[1]
    assert isinstance(workers, PodGroup)
    assert workers.spec.scheduling_policy.gang is not None
    assert workers.spec.scheduling_policy.gang.min_count == 8


def test_materialised_objects_are_valid_objects_in_dependency_order() -> None:
    #           outer
    #          /     \
    #       solo    inner
    #               /   \
    #             a      b
    inner = cpg_template("inner", pg_template("a"), pg_template("b"), min_groups=2)
    outer = cpg_template("outer", pg_template("solo"), compositePodGroupTemplates=[inner])
    raw = workload(podGroupTemplates=[pg_template("lone")], compositePodGroupTemplates=[outer])

    objects = materialize(parse_workload(raw))

    assert [(o.metadata.name, o.spec.parent_composite_pod_group_name) for o in objects] == [
        ("train-lone", None),
        ("train-outer", None),
        ("train-solo", "train-outer"),
        ("train-inner", "train-outer"),
        ("train-a", "train-inner"),
        ("train-b", "train-inner"),
    ]
    assert [parse_custom_resource(o.to_manifest()) for o in objects] == objects


# --- invalid objects ---------------------------------------------------------------------------


@dataclass
class ErrorCase:
    id: str
    raw: Any
    want_obj: str
    want_field: str
    want_message: str
    parse: Callable[[Any], object] = parse_custom_resource


TOO_LONG_NAME = "w" * 250

ERRORS = [
    ErrorCase(
        "gang and basic together are ambiguous",
        pod_group(schedulingPolicy={"gang": {"minCount": 2}, "basic": {}}),
        "PodGroup default/train",
        "spec.schedulingPolicy",
        "exactly one of gang or basic",
    ),
    ErrorCase(
        "neither gang nor basic",
        pod_group(schedulingPolicy={}),
        "PodGroup default/train",
        "spec.schedulingPolicy",
        "exactly one of gang or basic",
    ),
    ErrorCase(
        "two topology levels for one group",
        pod_group(schedulingConstraints=topology(ZONE, RACK)),
        "PodGroup default/train",
        "spec.schedulingConstraints.topology",
        "at most 1 item",
    ),
    ErrorCase(
        "a gang of zero pods",
        pod_group(schedulingPolicy=gang(0)),
        "PodGroup default/train",
        "spec.schedulingPolicy.gang.minCount",
        "greater than or equal to 1",
    ),
    ErrorCase(
        "a typo in a field name is named, not ignored",
        pod_group(schedulingPolicy={"gang": {"minCont": 8}}),
        "PodGroup default/train",
        "spec.schedulingPolicy.gang.minCont",
        "unknown field",
    ),
    ErrorCase(
        "a topology key that is no label key",
        pod_group(schedulingConstraints=topology("bad key/rack")),
        "PodGroup default/train",
        "spec.schedulingConstraints.topology[0].key",
        "prefix before '/'",
    ),
    ErrorCase(
        "a timeout of zero seconds",
        pod_group(scheduleTimeoutSeconds=0),
        "PodGroup default/train",
        "spec.scheduleTimeoutSeconds",
        "greater than or equal to 1",
    ),
    ErrorCase(
        "an object without a name",
        {**pod_group(), "metadata": {"namespace": "team-a"}},
        "PodGroup team-a/<unnamed>",
        "metadata.name",
        "Field required",
    ),
    ErrorCase(
        "an upper-case object name",
        pod_group(name="Train"),
        "PodGroup default/Train",
        "metadata.name",
        "DNS-1123 subdomain",
    ),
    ErrorCase(
        "a wrong apiVersion",
        {**pod_group(), "apiVersion": "scheduling.gpusched.io/v1"},
        "PodGroup default/train",
        "apiVersion",
        API_VERSION,
    ),
    ErrorCase(
        "a kind we do not serve",
        {**pod_group(), "kind": "Job"},
        "Job default/train",
        "kind",
        "unknown kind 'Job'",
    ),
    ErrorCase(
        "a Workload handed to the PodGroup parser",
        training_workload(),
        "PodGroup ml/train",
        "kind",
        "'PodGroup'",
        parse_pod_group,
    ),
    ErrorCase(
        "a list instead of an object",
        ["PodGroup"],
        "object default/<unnamed>",
        "kind",
        "unknown kind None",
    ),
    ErrorCase(
        "a parent name that no object can have",
        pod_group(parentCompositePodGroupName="Zone_1"),
        "PodGroup default/train",
        "spec.parentCompositePodGroupName",
        "DNS-1123 subdomain",
    ),
    ErrorCase(
        "a CompositePodGroup without a gang",
        composite(schedulingPolicy={}),
        "CompositePodGroup default/zone",
        "spec.schedulingPolicy.gang",
        "Field required",
        parse_composite_pod_group,
    ),
    ErrorCase(
        "a Workload without templates",
        workload(),
        "Workload ml/train",
        "spec",
        "at least one",
    ),
    ErrorCase(
        "a template name with upper case and underscore",
        workload(podGroupTemplates=[pg_template("Workers_1")]),
        "Workload ml/train",
        "spec.podGroupTemplates[0].name",
        "DNS-1123 label",
    ),
    ErrorCase(
        "a bad template name deep in the tree",
        with_field(
            training_workload(), "spec.compositePodGroupTemplates.0.podGroupTemplates.1.name", "-"
        ),
        "Workload ml/train",
        "spec.compositePodGroupTemplates[0].podGroupTemplates[1].name",
        "DNS-1123 label",
        parse_workload,
    ),
    ErrorCase(
        "two sibling templates with the same name",
        with_field(
            training_workload(),
            "spec.compositePodGroupTemplates.0.podGroupTemplates.1.name",
            "workers",
        ),
        "Workload ml/train",
        "spec.compositePodGroupTemplates[0].podGroupTemplates[1].name",
        "already used at spec.compositePodGroupTemplates[0].podGroupTemplates[0].name",
    ),
    ErrorCase(
        "a pod-group and a composite sibling with the same name",
        workload(
            podGroupTemplates=[pg_template("zone")],
            compositePodGroupTemplates=[cpg_template("zone", pg_template("workers"))],
        ),
        "Workload ml/train",
        "spec.compositePodGroupTemplates[0].name",
        "'zone' is already used at spec.podGroupTemplates[0].name",
    ),
    ErrorCase(
        "cousins with the same name would generate the same object name",
        workload(
            compositePodGroupTemplates=[
                cpg_template("zone-a", pg_template("workers")),
                cpg_template("zone-b", pg_template("workers")),
            ]
        ),
        "Workload ml/train",
        "spec.compositePodGroupTemplates[1].podGroupTemplates[0].name",
        "already used at spec.compositePodGroupTemplates[0].podGroupTemplates[0].name",
    ),
    ErrorCase(
        "a composite template asks for more groups than it has children",
        workload(compositePodGroupTemplates=[cpg_template("zone", pg_template("a"), min_groups=2)]),
        "Workload ml/train",
        "spec.compositePodGroupTemplates[0].schedulingPolicy.gang.minGroupCount",
        "only 1 child templates",
    ),
    ErrorCase(
        "a composite template without children",
        workload(compositePodGroupTemplates=[cpg_template("zone")]),
        "Workload ml/train",
        "spec.compositePodGroupTemplates[0]",
        "at least one child template",
    ),
    ErrorCase(
        "the generated object name is longer than 253 characters",
        workload(name=TOO_LONG_NAME, podGroupTemplates=[pg_template("workers")]),
        f"Workload ml/{TOO_LONG_NAME}",
        "spec.podGroupTemplates[0].name",
        "generated object name",
    ),
]


def _nested(depth: int) -> Raw:
    """``depth`` composite templates, each the only child of the one above."""
    template = cpg_template("level-1", pg_template("leaf"))
    for level in range(2, depth + 1):
        template = cpg_template(f"level-{level}", compositePodGroupTemplates=[template])
    return template


ERRORS.append(
    ErrorCase(
        "composite templates nested nine levels deep",
        workload(compositePodGroupTemplates=[_nested(9)]),
        "Workload ml/train",
        "spec" + ".compositePodGroupTemplates[0]" * 9,
        "more than 8 levels",
    )
)


@pytest.mark.parametrize("case", ERRORS, ids=lambda case: case.id)
def test_invalid_objects_name_the_object_and_field(case: ErrorCase) -> None:
    with pytest.raises(InvalidObjectError) as caught:
        case.parse(case.raw)

    err = caught.value
    assert (err.obj, err.field) == (case.want_obj, case.want_field), str(err)
    assert case.want_message in err.message, str(err)


def test_materialize_rejects_too_long_names_of_a_workload_built_in_code() -> None:
    raw = workload(name=TOO_LONG_NAME, podGroupTemplates=[pg_template("workers")])
    built = Workload.model_validate(raw)  # bypasses parse_workload's early check

    with pytest.raises(InvalidObjectError, match="generated object name") as caught:
        materialize(built)
    assert caught.value.field == "spec.podGroupTemplates[0].name"


@pytest.mark.parametrize(
    ("key", "want_valid"),
    [
        (ZONE, True),
        ("rack", True),
        ("example.com/Rack_1.a", True),
        ("a" * 253 + "/" + "b" * 63, True),
        ("a" * 253 + "/" + "b" * 64, False),
        ("/rack", False),
        ("example.com/", False),
        ("a/b/c", False),
        ("Example.com/rack", False),
        ("-rack", False),
        ("", False),
    ],
)
def test_label_keys_follow_kubernetes_rules(key: str, want_valid: bool) -> None:
    try:
        check_label_key(key)
    except ValueError:
        valid = False
    else:
        valid = True
    assert valid == want_valid


# --- property: garbage in, InvalidObjectError out ----------------------------------------------

FIELD_NAMES = [
    "apiVersion", "kind", "metadata", "name", "namespace", "uid", "spec", "status",
    "schedulingPolicy", "gang", "basic", "minCount", "minGroupCount", "schedulingConstraints",
    "topology", "key", "parentCompositePodGroupName", "workloadRef", "workloadName",
    "templateName", "scheduleTimeoutSeconds", "podGroupTemplates", "compositePodGroupTemplates",
    "phase", "conditions", "placement", "lastAttempt", "ownerReferences", "labels",
]  # fmt: skip

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=20)
    | st.sampled_from(["PodGroup", "CompositePodGroup", "Workload", API_VERSION, "x", "a-b"]),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.sampled_from(FIELD_NAMES) | st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=8,
)

VALID_SEEDS = [
    pod_group(schedulingConstraints=topology(RACK)),
    composite(schedulingConstraints=topology(ZONE)),
    training_workload(),
]


def _paths(node: Any, prefix: str = "") -> list[str]:
    """Every dotted path inside a raw object, so a mutation can reach any depth."""
    items: list[tuple[str, Any]] = []
    if isinstance(node, dict):
        items = list(node.items())
    elif isinstance(node, list):
        items = [(str(i), child) for i, child in enumerate(node)]
    paths: list[str] = []
    for name, child in items:
        path = f"{prefix}.{name}" if prefix else name
        paths += [path, *_paths(child, path)]
    return paths


def _parse_and_materialize(raw: Any) -> None:
    """Parsing garbage must fail only with InvalidObjectError; whatever parses must
    materialise into objects that parse again."""
    try:
        obj = parse_custom_resource(raw)
    except InvalidObjectError:
        return
    if isinstance(obj, Workload):
        for child in materialize(obj):
            assert parse_custom_resource(child.to_manifest()) == child


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(["PodGroup", "CompositePodGroup", "Workload"]),
    body=st.dictionaries(st.sampled_from(FIELD_NAMES), json_values, max_size=4),
)
def test_random_objects_only_ever_raise_invalid_object_error(kind: str, body: Raw) -> None:
    _parse_and_materialize({"apiVersion": API_VERSION, "kind": kind, **body})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), seed=st.sampled_from(VALID_SEEDS), value=json_values)
def test_mutated_valid_objects_only_ever_raise_invalid_object_error(
    data: st.DataObject, seed: Raw, value: Any
) -> None:
    path = data.draw(st.sampled_from(_paths(seed)))
    _parse_and_materialize(with_field(seed, path, value))

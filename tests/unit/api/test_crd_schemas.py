"""The CRDs in crds/ accept what the operator accepts and reject nonsense, naming the field.

No API server runs here, so the checks the API server makes are emulated:

- the OpenAPI schema as a JSON schema (``jsonschema``), strict about unknown fields as
  ``kubectl apply`` is by default (``--validate=strict``), plus the uniqueness of
  ``x-kubernetes-list-type: map`` keys;
- every ``x-kubernetes-validations`` rule, evaluated with ``cel-python`` where the API server
  would evaluate it (at each value present), its error placed at the rule's ``fieldPath``;
- the CRD objects themselves against Kubernetes' own schema (``kubernetes-validate``).

Errors are reported with the operator's field paths (`format_field_path`), so the same bad
object can be checked against the CRD and against the operator's parser in one table.
"""

from __future__ import annotations

import copy
import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import celpy
import celpy.adapter
import celpy.evaluation
import jsonschema
import kubernetes_validate
import pytest
import yaml
from pydantic import BaseModel

from gpusched.api import crds as api
from gpusched.api import status as statuses
from gpusched.api.errors import InvalidObjectError, format_field_path
from gpusched.api.materialize import materialize

ROOT = Path(__file__).resolve().parents[3]
CRD_DIR = ROOT / "crds"
KINDS = {
    "PodGroup": "podgroups",
    "CompositePodGroup": "compositepodgroups",
    "Workload": "workloads",
}
KUBERNETES_VERSION = "1.30"
"""The Kubernetes version the CRD objects are checked against (kind's default node image is
newer; the CRDs need 1.28 for ``fieldPath`` in CEL rules)."""

COST_LIMIT = 100_000_000
"""The API server's limit on a schema's estimated CEL cost (StaticEstimatedCRDCostLimit)."""
COST_PER_EVALUATION = 20
"""A generous bound on one evaluation of our rules: a few ``has``/``size`` calls, a comparison."""

_Path = tuple[str | int, ...]


# --- the emulated API server ------------------------------------------------------------------


@dataclass(frozen=True)
class Violation:
    field: str
    message: str


def load_crd(kind: str) -> dict[str, Any]:
    crd: dict[str, Any] = yaml.safe_load((CRD_DIR / f"{KINDS[kind]}.yaml").read_text())
    return crd


def openapi_schema(crd: Mapping[str, Any]) -> dict[str, Any]:
    (version,) = crd["spec"]["versions"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def _strict(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The schema with unknown fields forbidden wherever the API server would drop them."""
    out = {key: value for key, value in schema.items() if not key.startswith("x-kubernetes")}
    if "properties" in schema:
        out["properties"] = {k: _strict(v) for k, v in schema["properties"].items()}
        if not schema.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    if isinstance(schema.get("additionalProperties"), Mapping):
        out["additionalProperties"] = _strict(schema["additionalProperties"])
    if "items" in schema:
        out["items"] = _strict(schema["items"])
    return out


def _schema_violations(schema: Mapping[str, Any], obj: Mapping[str, Any]) -> Iterator[Violation]:
    validator = jsonschema.Draft202012Validator(
        _strict(schema), format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    for error in validator.iter_errors(obj):
        path: _Path = tuple(error.absolute_path)
        message = error.message
        # Name the field itself, as the API server does, not the object holding it.
        if error.validator == "required":
            missing = message.split("'")[1]
            path, message = (*path, missing), "Required value"
        elif error.validator == "additionalProperties":
            (unknown,) = sorted(set(error.instance) - set(error.schema.get("properties", {})))[:1]
            path, message = (*path, unknown), "unknown field"
        yield Violation(format_field_path(path), message)


def _walk(
    schema: Mapping[str, Any], value: Any, path: _Path = ()
) -> Iterator[tuple[Mapping[str, Any], Any, _Path]]:
    """Every (schema, value, path) where the value is present and of the schema's type."""
    if schema.get("type") == "object" and isinstance(value, Mapping):
        yield schema, value, path
        for name, sub in schema.get("properties", {}).items():
            if name in value:
                yield from _walk(sub, value[name], (*path, name))
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping):
            for name, item in value.items():
                yield from _walk(extra, item, (*path, name))
    elif schema.get("type") == "array" and isinstance(value, list):
        yield schema, value, path
        for i, item in enumerate(value):
            yield from _walk(schema.get("items", {}), item, (*path, i))
    elif schema.get("type") not in ("object", "array"):
        yield schema, value, path


_CEL = celpy.Environment()


def cel_program(rule: str) -> celpy.Runner:
    return _CEL.program(_CEL.compile(rule))


def _cel_violations(
    schema: Mapping[str, Any], obj: Mapping[str, Any], old: Mapping[str, Any] | None
) -> Iterator[Violation]:
    """Transition rules (those that read ``oldSelf``) run only on an update, and only where
    the old object had a value too, as the API server runs them."""
    for node, value, path in _walk(schema, obj):
        for rule in node.get("x-kubernetes-validations", []):
            activation = {"self": celpy.adapter.json_to_cel(value)}
            if "oldSelf" in rule["rule"]:
                before = _at(old, path)
                if before is _ABSENT:
                    continue
                activation["oldSelf"] = celpy.adapter.json_to_cel(before)
            result = cel_program(rule["rule"]).evaluate(activation)
            if isinstance(result, celpy.evaluation.CELEvalError):
                raise AssertionError(f"rule {rule['rule']!r} failed at {path}: {result}")
            if result != celpy.celtypes.BoolType(True):
                where = (*path, *rule.get("fieldPath", "").split(".")[1:])
                yield Violation(format_field_path(where), rule["message"])


_ABSENT = object()


def _at(obj: Any, path: _Path) -> Any:
    """The value at ``path`` in ``obj``, or `_ABSENT`."""
    for part in path:
        if isinstance(part, int):
            if not isinstance(obj, list) or part >= len(obj):
                return _ABSENT
        elif not isinstance(obj, Mapping) or part not in obj:
            return _ABSENT
        obj = obj[part]
    return obj


def _duplicate_keys(schema: Mapping[str, Any], obj: Mapping[str, Any]) -> Iterator[Violation]:
    for node, value, path in _walk(schema, obj):
        if node.get("x-kubernetes-list-type") != "map":
            continue
        keys = node["x-kubernetes-list-map-keys"]
        seen: set[tuple[Any, ...]] = set()
        for i, item in enumerate(value):
            key = tuple(item.get(k) for k in keys) if isinstance(item, Mapping) else ()
            if key in seen:
                yield Violation(format_field_path((*path, i)), f"Duplicate value: {key}")
            seen.add(key)


def validate(obj: Mapping[str, Any], old: Mapping[str, Any] | None = None) -> list[Violation]:
    """What the API server would say about creating ``obj`` (or updating ``old`` to it);
    [] when it accepts it."""
    schema = openapi_schema(load_crd(obj["kind"]))
    found = list(_schema_violations(schema, obj))
    found += _duplicate_keys(schema, obj)
    found += _cel_violations(schema, obj, old)
    return found


# --- the objects ------------------------------------------------------------------------------


def example_objects() -> list[tuple[str, dict[str, Any]]]:
    """Every PodGroup, CompositePodGroup and Workload under examples/, with where it is."""
    found = []
    for path in sorted((ROOT / "examples").rglob("*.yaml")):
        for i, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if isinstance(doc, dict) and doc.get("kind") in KINDS:
                found.append((f"{path.relative_to(ROOT)}#{i}", doc))
    return found


EXAMPLES = example_objects()


def test_examples_include_every_kind() -> None:
    kinds = {doc["kind"] for _, doc in EXAMPLES}
    assert kinds >= {"Workload", "PodGroup"}, f"examples hold only {sorted(kinds)}"


@pytest.mark.parametrize(("where", "obj"), EXAMPLES, ids=[w for w, _ in EXAMPLES])
def test_every_example_is_accepted(where: str, obj: dict[str, Any]) -> None:
    assert validate(obj) == [], where


def _materialized() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for where, doc in EXAMPLES:
        if doc["kind"] == "Workload":
            workload = api.parse_workload({**doc, "metadata": {**doc["metadata"], "uid": "u-1"}})
            found += [
                (f"{where}→{o.metadata.name}", o.to_manifest()) for o in materialize(workload)
            ]
    return found


MATERIALIZED = _materialized()


@pytest.mark.parametrize(("where", "obj"), MATERIALIZED, ids=[w for w, _ in MATERIALIZED])
def test_objects_the_operator_creates_are_accepted(where: str, obj: dict[str, Any]) -> None:
    assert validate(obj) == [], where


GROUP_STATUS = statuses.GroupStatus(
    phase=statuses.GroupPhase.UNSCHEDULABLE,
    conditions=[
        statuses.Condition(
            type=api.CONDITION_SCHEDULED,
            status="False",
            reason=api.Reason.UNSCHEDULABLE,
            message="no rack fits 4 pods",
            last_transition_time="2026-11-30T02:11:30.123456Z",
        )
    ],
    placement={"topology.kubernetes.io/zone": "zone-a", "topology.example.com/rack": "rack-1"},
    scheduled=1,
    running=1,
    lastAttempt=statuses.LastAttempt(
        time="2026-11-30T02:11:30Z",
        reason=api.Reason.UNSCHEDULABLE,
        message="0 of 4 racks fit",
        domains=["zone-a/rack-1: 2 of 4 pods fit"],
    ),
)
WORKLOAD_STATUS = statuses.WorkloadStatus(
    phase=statuses.GroupPhase.RUNNING,
    conditions=[
        statuses.Condition(type=api.CONDITION_MATERIALIZED, status="True", reason="Materialized")
    ],
    groups=[statuses.WorkloadGroupStatus(name="train-zone", kind="CompositePodGroup")],
    scheduled=9,
    running=9,
)


@pytest.mark.parametrize(
    ("kind", "status"),
    [
        ("PodGroup", GROUP_STATUS),
        ("CompositePodGroup", GROUP_STATUS),
        ("Workload", WORKLOAD_STATUS),
    ],
)
def test_the_status_the_operator_writes_is_accepted(kind: str, status: BaseModel) -> None:
    (_, obj) = next((w, o) for w, o in MATERIALIZED + EXAMPLES if o["kind"] == kind)
    written = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert validate({**obj, "status": written}) == []


# --- invalid objects: rejected by both, naming the same field ----------------------------------


def pod_group(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": api.API_VERSION,
        "kind": "PodGroup",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}, **spec},
    }


def composite(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": api.API_VERSION,
        "kind": "CompositePodGroup",
        "metadata": {"name": "train-zone", "namespace": "ml"},
        "spec": {"schedulingPolicy": {"gang": {"minGroupCount": 2}}, **spec},
    }


def workload(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": api.API_VERSION,
        "kind": "Workload",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": spec,
    }


def gang(n: int) -> dict[str, Any]:
    return {"gang": {"minCount": n}}


def rack() -> dict[str, Any]:
    return {"topology": [{"key": "topology.example.com/rack"}]}


def zone_template(min_groups: int, *children: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": "zone",
        "schedulingPolicy": {"gang": {"minGroupCount": min_groups}},
        "podGroupTemplates": [{"name": c, "schedulingPolicy": gang(1)} for c in children],
        **extra,
    }


@dataclass(frozen=True)
class Bad:
    story: str
    obj: dict[str, Any]
    want_field: str
    want_message: str
    operator_field: str | None = None
    """Where the operator's parser reports it, when that is not ``want_field``."""
    operator_message: str | None = None


BAD = [
    Bad(
        "gang and basic together",
        pod_group(schedulingPolicy={**gang(2), "basic": {}}),
        "spec.schedulingPolicy",
        "exactly one of gang or basic",
    ),
    Bad(
        "neither gang nor basic",
        pod_group(schedulingPolicy={}),
        "spec.schedulingPolicy",
        "exactly one of gang or basic",
    ),
    Bad(
        "a gang of zero pods",
        pod_group(schedulingPolicy=gang(0)),
        "spec.schedulingPolicy.gang.minCount",
        "less than the minimum of 1",
        operator_message="greater than or equal to 1",
    ),
    Bad(
        "a typo in minCount is an unknown field, not a missing gang",
        pod_group(schedulingPolicy={"gang": {"minCont": 2}}),
        "spec.schedulingPolicy.gang.minCont",
        "unknown field",
    ),
    Bad(
        "two topology entries",
        pod_group(schedulingConstraints={"topology": rack()["topology"] * 2}),
        "spec.schedulingConstraints.topology",
        "is too long",
        operator_message="at most 1 item",
    ),
    Bad(
        "a topology key that is no label key",
        pod_group(schedulingConstraints={"topology": [{"key": "example.com/-rack"}]}),
        "spec.schedulingConstraints.topology[0].key",
        "does not match",
        operator_message="is not a qualified label key",
    ),
    Bad(
        "a timeout of zero seconds",
        pod_group(scheduleTimeoutSeconds=0),
        "spec.scheduleTimeoutSeconds",
        "less than the minimum of 1",
        operator_message="greater than or equal to 1",
    ),
    Bad(
        "a parent name with capitals and an underscore",
        pod_group(parentCompositePodGroupName="Train_Zone"),
        "spec.parentCompositePodGroupName",
        "does not match",
        operator_message="is not a DNS-1123 subdomain",
    ),
    Bad(
        "a workloadRef without its template",
        pod_group(workloadRef={"workloadName": "train"}),
        "spec.workloadRef.templateName",
        "Required value",
        operator_message="Field required",
    ),
    Bad(
        "an unknown spec field (a typo of priority)",
        pod_group(priorty=3),
        "spec.priorty",
        "unknown field",
    ),
    Bad(
        "a composite of zero groups",
        composite(schedulingPolicy={"gang": {"minGroupCount": 0}}),
        "spec.schedulingPolicy.gang.minGroupCount",
        "less than the minimum of 1",
        operator_message="greater than or equal to 1",
    ),
    Bad(
        "a composite without a gang",
        composite(schedulingPolicy={}),
        "spec.schedulingPolicy.gang",
        "Required value",
        operator_message="Field required",
    ),
    Bad(
        "a Workload without templates",
        workload(),
        "spec",
        "at least one podGroupTemplate or compositePodGroupTemplate",
    ),
    Bad(
        "a template name with capitals",
        workload(podGroupTemplates=[{"name": "Workers", "schedulingPolicy": gang(8)}]),
        "spec.podGroupTemplates[0].name",
        "does not match",
        operator_message="is not a DNS-1123 label",
    ),
    Bad(
        "two sibling templates of one name",
        workload(
            podGroupTemplates=[
                {"name": "workers", "schedulingPolicy": gang(8)},
                {"name": "workers", "schedulingPolicy": gang(1)},
            ]
        ),
        "spec.podGroupTemplates[1]",
        "Duplicate value",
        operator_field="spec.podGroupTemplates[1].name",
        operator_message="already used",
    ),
    Bad(
        "a zone gang over more groups than it has templates",
        workload(compositePodGroupTemplates=[zone_template(3, "workers", "driver")]),
        "spec.compositePodGroupTemplates[0].schedulingPolicy.gang.minGroupCount",
        "more than the number of child templates",
        operator_message="minGroupCount is 3 but the template has only 2 child templates",
    ),
    Bad(
        "a composite template without children",
        workload(compositePodGroupTemplates=[zone_template(1)]),
        "spec.compositePodGroupTemplates[0].schedulingPolicy.gang.minGroupCount",
        "more than the number of child templates",
        operator_field="spec.compositePodGroupTemplates[0]",
        operator_message="needs at least one child template",
    ),
    Bad(
        "gang and basic together in a nested template",
        workload(
            compositePodGroupTemplates=[
                zone_template(
                    1,
                    compositePodGroupTemplates=[
                        {
                            "name": "rack",
                            "schedulingPolicy": {"gang": {"minGroupCount": 1}},
                            "podGroupTemplates": [
                                {"name": "w", "schedulingPolicy": {**gang(1), "basic": {}}}
                            ],
                        }
                    ],
                )
            ]
        ),
        "spec.compositePodGroupTemplates[0].compositePodGroupTemplates[0]"
        ".podGroupTemplates[0].schedulingPolicy",
        "exactly one of gang or basic",
    ),
    Bad(
        "a priority beyond int32",
        pod_group(priority=2**31),
        "spec.priority",
        "2147483647",
        operator_message="less than or equal to 2147483647",
    ),
    Bad(
        "a negative priority beyond int32",
        composite(priority=-(2**31) - 1),
        "spec.priority",
        "-2147483648",
        operator_message="greater than or equal to -2147483648",
    ),
    Bad(
        "a preemption policy that does not exist",
        pod_group(preemptionPolicy="Always"),
        "spec.preemptionPolicy",
        "PreemptLowerPriority",
    ),
    Bad(
        "a disruption mode in lower case",
        composite(disruptionMode="all"),
        "spec.disruptionMode",
        "'All'",
    ),
    Bad(
        "a priority class name that is no object name",
        workload(
            podGroupTemplates=[
                {"name": "w", "schedulingPolicy": gang(1), "priorityClassName": "High"}
            ]
        ),
        "spec.podGroupTemplates[0].priorityClassName",
        "",
    ),
]


@pytest.mark.parametrize("bad", BAD, ids=[b.story for b in BAD])
def test_the_api_server_rejects_it_naming_the_field(bad: Bad) -> None:
    """The object may break more than one rule (a typo also leaves a required field out); the
    one the story is about must be among them, at its field, saying what is wrong."""
    found = validate(bad.obj)
    messages = [v.message for v in found if v.field == bad.want_field]
    assert messages, f"nothing reported at {bad.want_field}: {found}"
    assert any(bad.want_message in m for m in messages), found


@pytest.mark.parametrize("bad", BAD, ids=[b.story for b in BAD])
def test_the_operator_rejects_it_naming_the_same_field(bad: Bad) -> None:
    with pytest.raises(InvalidObjectError) as caught:
        api.parse_custom_resource(bad.obj)
    assert caught.value.field == (bad.operator_field or bad.want_field)
    assert (bad.operator_message or bad.want_message) in caught.value.message


def nested(depth: int) -> dict[str, Any]:
    """A Workload whose composite templates nest ``depth`` levels deep."""
    template: dict[str, Any] = {"name": f"l{depth}", "schedulingPolicy": gang(1)}
    key = "podGroupTemplates"
    for level in range(depth - 1, 0, -1):
        template = {
            "name": f"l{level}",
            "schedulingPolicy": {"gang": {"minGroupCount": 1}},
            key: [template],
        }
        key = "compositePodGroupTemplates"
    return workload(**{key: [template]})


SINGLE_UNDER_ALL = workload(
    compositePodGroupTemplates=[
        zone_template(1, "w", disruptionMode="All")
        | {
            "podGroupTemplates": [
                {"name": "w", "schedulingPolicy": gang(1), "disruptionMode": "Single"}
            ]
        }
    ]
)

OPERATOR_ONLY = [
    (
        "one template name under two parents",
        workload(
            podGroupTemplates=[{"name": "workers", "schedulingPolicy": gang(1)}],
            compositePodGroupTemplates=[zone_template(1, "workers")],
        ),
        "spec.compositePodGroupTemplates[0].podGroupTemplates[0].name",
    ),
    (
        "templates nested nine levels deep",
        nested(api.MAX_TEMPLATE_DEPTH + 1),
        "spec" + ".compositePodGroupTemplates[0]" * 8,
    ),
    (
        "a child template evicted alone under a template evicted whole",
        SINGLE_UNDER_ALL,
        "spec.compositePodGroupTemplates[0].podGroupTemplates[0].disruptionMode",
    ),
]


@pytest.mark.parametrize(
    ("story", "obj", "operator_field"), OPERATOR_ONLY, ids=[s for s, _, _ in OPERATOR_ONLY]
)
def test_what_only_the_operator_checks(
    story: str, obj: dict[str, Any], operator_field: str
) -> None:
    """Rules over the whole template tree, which a structural schema cannot express: the API
    server accepts the object, the operator marks the Workload Invalid naming the field."""
    assert validate(obj) == [], story
    with pytest.raises(InvalidObjectError) as caught:
        api.parse_custom_resource(obj)
    assert caught.value.field.startswith(operator_field), caught.value


def test_a_template_tree_evicted_whole_with_a_child_evicted_alone_is_refused_by_the_operator() -> (
    None
):
    with pytest.raises(InvalidObjectError) as caught:
        api.parse_custom_resource(SINGLE_UNDER_ALL)
    assert "parent template's disruptionMode is All" in caught.value.message


IMMUTABLE = [
    (
        "the disruption mode of a PodGroup",
        pod_group(disruptionMode="All"),
        {"disruptionMode": "Single"},
        "spec.disruptionMode",
    ),
    (
        "the priority of a CompositePodGroup",
        composite(priority=10),
        {"priority": 1000},
        "spec.priority",
    ),
    (
        "the priority class of a PodGroup",
        pod_group(priorityClassName="low"),
        {"priorityClassName": "high"},
        "spec.priorityClassName",
    ),
]


@pytest.mark.parametrize(
    ("story", "old", "change", "want_field"), IMMUTABLE, ids=[i[0] for i in IMMUTABLE]
)
def test_priority_and_disruption_fields_cannot_change_once_set(
    story: str, old: dict[str, Any], change: dict[str, Any], want_field: str
) -> None:
    """A group's priority decides who it may evict and who may evict it; changing it under a
    running gang would re-decide evictions already made, so the API server refuses it."""
    new = copy.deepcopy(old)
    new["spec"].update(change)
    assert validate(old, old) == [], story
    assert Violation(want_field, f"{want_field.split('.')[-1]} is immutable") in validate(new, old)


def test_the_deepest_nesting_the_operator_allows_is_accepted_by_both() -> None:
    obj = nested(api.MAX_TEMPLATE_DEPTH)
    assert validate(obj) == []
    api.parse_custom_resource(obj)


# --- the CRD objects --------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_the_crd_is_a_valid_kubernetes_object(kind: str) -> None:
    kubernetes_validate.validate(load_crd(kind), KUBERNETES_VERSION, strict=True)


def _nodes(
    schema: Mapping[str, Any], path: _Path = ()
) -> Iterator[tuple[Mapping[str, Any], _Path]]:
    yield schema, path
    for name, sub in schema.get("properties", {}).items():
        yield from _nodes(sub, (*path, name))
    if isinstance(schema.get("additionalProperties"), Mapping):
        yield from _nodes(schema["additionalProperties"], (*path, "*"))
    if "items" in schema:
        yield from _nodes(schema["items"], (*path, 0))


@pytest.mark.parametrize("kind", KINDS)
def test_the_schema_is_structural(kind: str) -> None:
    """The API server's rules for structural schemas, the ones a hand edit can break."""
    for node, path in _nodes(openapi_schema(load_crd(kind))):
        where = format_field_path(path) or "<root>"
        assert "type" in node or node.get("x-kubernetes-preserve-unknown-fields"), where
        assert not ("properties" in node and "additionalProperties" in node), where
        assert not ({"$ref", "anyOf", "oneOf", "allOf", "not"} & node.keys()), where
        if node.get("x-kubernetes-list-type") == "map":
            keys = set(node["x-kubernetes-list-map-keys"])
            assert keys <= set(node["items"].get("required", [])), f"{where}: map keys required"


def _rules(
    schema: Mapping[str, Any], cardinality: int = 1, path: _Path = ()
) -> Iterator[tuple[str, int, _Path]]:
    """Every CEL rule with how many times one object can make the API server run it."""
    for rule in schema.get("x-kubernetes-validations", []):
        yield rule["rule"], cardinality, path
    for name, sub in schema.get("properties", {}).items():
        yield from _rules(sub, cardinality, (*path, name))
    if "items" in schema:
        # Without maxItems the API server assumes a list as long as a request can hold.
        most = schema.get("maxItems", COST_LIMIT)
        yield from _rules(schema["items"], cardinality * most, (*path, 0))


@pytest.mark.parametrize("kind", KINDS)
def test_cel_rules_compile_and_their_cost_is_bounded(kind: str) -> None:
    rules = list(_rules(openapi_schema(load_crd(kind))))
    for rule, _, _ in rules:
        cel_program(rule)
    estimated = sum(cardinality * COST_PER_EVALUATION for _, cardinality, _ in rules)
    assert estimated < COST_LIMIT, f"{estimated:,} > {COST_LIMIT:,}"


def _composite_levels(schema: Mapping[str, Any]) -> list[dict[str, Any]]:
    levels = []
    node = schema["properties"]["spec"]["properties"]["compositePodGroupTemplates"]["items"]
    while "schedulingPolicy" in node["properties"]:
        level = copy.deepcopy(node)
        level["properties"].pop("compositePodGroupTemplates")
        levels.append(level)
        node = node["properties"]["compositePodGroupTemplates"]["items"]
    return levels


def test_every_unrolled_template_level_is_the_same() -> None:
    """Structural schemas cannot recurse, so composite templates are spelled out level by
    level; an edit to one level must be made to all."""
    levels = _composite_levels(openapi_schema(load_crd("Workload")))
    assert len(levels) >= 4, "zone > block > rack > node needs four levels"
    for depth, level in enumerate(levels[1:], start=2):
        assert level == levels[0], f"level {depth} differs from level 1"


# --- the CRDs and the operator's models name the same fields ----------------------------------


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (list, tuple, typing.Union, types.UnionType):
        return [m for arg in args for m in _models_in(arg)]
    return []


def _field_mismatches(
    model: type[BaseModel], schema: Mapping[str, Any], path: str, depth: int = 0
) -> Iterator[str]:
    if depth > 6 or schema.get("x-kubernetes-preserve-unknown-fields"):
        return
    names = {f.alias or n for n, f in model.model_fields.items()}
    properties = schema.get("properties", {})
    if names != set(properties):
        yield f"{path}: model {sorted(names)} vs CRD {sorted(properties)}"
    for name, info in model.model_fields.items():
        sub = properties.get(info.alias or name, {})
        sub = sub.get("items", sub)
        for inner in _models_in(info.annotation):
            yield from _field_mismatches(inner, sub, f"{path}.{info.alias or name}", depth + 1)


@pytest.mark.parametrize(
    ("kind", "model"),
    [
        ("PodGroup", api.PodGroupSpec),
        ("CompositePodGroup", api.CompositePodGroupSpec),
        ("Workload", api.WorkloadSpec),
    ],
)
def test_spec_fields_match_the_operators_model(kind: str, model: type[BaseModel]) -> None:
    spec = openapi_schema(load_crd(kind))["properties"]["spec"]
    assert list(_field_mismatches(model, spec, "spec")) == []


@pytest.mark.parametrize(
    ("kind", "model"),
    [
        ("PodGroup", statuses.GroupStatus),
        ("CompositePodGroup", statuses.GroupStatus),
        ("Workload", statuses.WorkloadStatus),
    ],
)
def test_status_fields_match_the_operators_model(kind: str, model: type[BaseModel]) -> None:
    status = dict(openapi_schema(load_crd(kind))["properties"]["status"])
    status.pop("x-kubernetes-preserve-unknown-fields")
    assert list(_field_mismatches(model, status, "status")) == []


@pytest.mark.parametrize(
    ("kind", "want"),
    [
        (
            "PodGroup",
            [
                "Min",
                "Scheduled",
                "Running",
                "Phase",
                "Priority",
                "Placement",
                "Age",
                "Resolved Priority",
            ],
        ),
        (
            "CompositePodGroup",
            [
                "MinGroups",
                "Scheduled",
                "Running",
                "Phase",
                "Priority",
                "Placement",
                "Age",
                "Resolved Priority",
            ],
        ),
        ("Workload", ["Phase", "Scheduled", "Running", "Age"]),
    ],
)
def test_printer_columns_point_at_fields_that_exist(kind: str, want: list[str]) -> None:
    crd = load_crd(kind)
    (version,) = crd["spec"]["versions"]
    columns = version["additionalPrinterColumns"]
    assert [c["name"] for c in columns] == want
    schema = openapi_schema(crd)
    for column in columns:
        node: Mapping[str, Any] = schema
        for part in column["jsonPath"].lstrip(".").split("."):
            if part in ("metadata",) and node is schema:
                break
            node = node["properties"][part]
        else:
            assert node["type"] == column["type"] or column["type"] == "string", column

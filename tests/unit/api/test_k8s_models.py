"""Stories about reading Nodes and Pods: quantities, effective requests, node affinity,
tolerations, readiness, our annotations, and errors that name the object and the field."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusched.api.config import GPU_RESOURCE
from gpusched.api.errors import InvalidObjectError
from gpusched.api.k8s import (
    GPU_MILLI_ANNOTATION,
    GPUS_ANNOTATION,
    POD_GROUP_LABEL,
    Pod,
    parse_node,
    parse_pod,
)
from gpusched.api.quantity import parse_bytes, parse_cpu_milli, parse_quantity
from gpusched.api.selectors import (
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Taint,
    Toleration,
    first_untolerated_taint,
    required_terms_match,
)

KI, MI, GI = 2**10, 2**20, 2**30

# ---------------------------------------------------------------------------------------------
# Builders: a case states only what matters
# ---------------------------------------------------------------------------------------------


def ctr(
    name: str = "main",
    requests: dict[str, Any] | None = None,
    limits: dict[str, Any] | None = None,
    restart: str | None = None,
) -> dict[str, Any]:
    """A container body; ``restart="Always"`` on an init container makes it a sidecar."""
    body: dict[str, Any] = {"name": name, "resources": {}}
    if requests is not None:
        body["resources"]["requests"] = requests
    if limits is not None:
        body["resources"]["limits"] = limits
    if restart is not None:
        body["restartPolicy"] = restart
    return body


def pod_body(
    *,
    name: str = "p",
    namespace: str = "default",
    containers: list[dict[str, Any]] | None = None,
    init: list[dict[str, Any]] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    phase: str | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A Pod body with one empty container unless told otherwise; ``spec`` keys are camelCase."""
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": containers if containers is not None else [ctr()], **spec},
    }
    if init is not None:
        body["spec"]["initContainers"] = init
    if labels is not None:
        body["metadata"]["labels"] = labels
    if annotations is not None:
        body["metadata"]["annotations"] = annotations
    if phase is not None:
        body["status"] = {"phase": phase}
    return body


def pod(**kwargs: Any) -> Pod:
    return parse_pod(pod_body(**kwargs))


def node_body(name: str = "n1", **status: Any) -> dict[str, Any]:
    return {"kind": "Node", "metadata": {"name": name}, "status": status}


def requirement(key: str, operator: str, *values: str) -> NodeSelectorRequirement:
    return NodeSelectorRequirement.model_validate(
        {"key": key, "operator": operator, "values": list(values)}
    )


def expect_invalid(raw: dict[str, Any], *, parse: Any = parse_pod) -> InvalidObjectError:
    with pytest.raises(InvalidObjectError) as caught:
        parse(raw)
    return caught.value


# ---------------------------------------------------------------------------------------------
# Quantities
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "want"),
    [
        pytest.param("500m", 500, id="millicores are taken as written"),
        pytest.param("2", 2000, id="whole cores become thousands of millicores"),
        pytest.param(2, 2000, id="a YAML integer is cores"),
        pytest.param(1.5, 1500, id="a YAML float is cores"),
        pytest.param(0.1, 100, id="a binary float like 0.1 is read as the decimal it spells"),
        pytest.param("0.25", 250, id="a decimal fraction of a core"),
        pytest.param(".5", 500, id="a leading dot is a valid number"),
        pytest.param("0.0001", 1, id="a fraction of a millicore rounds up, as MilliValue does"),
        pytest.param("100u", 1, id="microcores round up to one millicore"),
        pytest.param("1500000n", 2, id="nanocores round up to whole millicores"),
        pytest.param("1k", 1_000_000, id="decimal kilo of cores"),
        pytest.param("2e3", 2_000_000, id="an exponent suffix multiplies by a power of ten"),
        pytest.param("5E-1", 500, id="a negative exponent in capitals"),
        pytest.param("+1", 1000, id="a leading plus sign is allowed"),
        pytest.param(" 250m ", 250, id="surrounding spaces are trimmed like UnmarshalJSON does"),
        pytest.param("0", 0, id="zero is a valid request"),
        pytest.param("-0", 0, id="minus zero is zero, not negative"),
    ],
)
def test_cpu_quantities_become_millicores(value: str | float, want: int) -> None:
    got = parse_cpu_milli(value)
    assert got == want, f"parse_cpu_milli({value!r}) = {got}, want {want}"


@pytest.mark.parametrize(
    ("value", "want"),
    [
        pytest.param("1Ki", KI, id="kibibyte"),
        pytest.param("123Mi", 123 * MI, id="mebibytes"),
        pytest.param("4Gi", 4 * GI, id="gibibytes"),
        pytest.param("1.5Gi", 3 * GI // 2, id="a fractional binary quantity"),
        pytest.param("2Ti", 2 * 2**40, id="tebibytes"),
        pytest.param("1Pi", 2**50, id="pebibytes"),
        pytest.param("1Ei", 2**60, id="exbibytes still fit in an int64"),
        pytest.param("1k", 1000, id="decimal kilo is lower-case k"),
        pytest.param("1M", 10**6, id="decimal mega"),
        pytest.param("1G", 10**9, id="decimal giga is not a gibibyte"),
        pytest.param("3T", 3 * 10**12, id="decimal tera"),
        pytest.param("1P", 10**15, id="decimal peta"),
        pytest.param("2E", 2 * 10**18, id="a bare capital E is exa, not an exponent"),
        pytest.param("128974848", 128974848, id="plain bytes as a string"),
        pytest.param(128974848, 128974848, id="plain bytes as a YAML integer"),
        pytest.param("129e6", 129_000_000, id="lower-case exponent"),
        pytest.param("129E6", 129_000_000, id="upper-case exponent followed by digits"),
        pytest.param("1.29e+8", 129_000_000, id="fractional mantissa and signed exponent"),
        pytest.param("100m", 1, id="a fraction of a byte rounds up to one byte"),
        pytest.param("1e-999", 1, id="a vanishingly small positive value still rounds up to 1"),
        pytest.param("0e999999999", 0, id="a huge exponent on zero is zero, computed cheaply"),
    ],
)
def test_memory_quantities_become_bytes(value: str | int, want: int) -> None:
    got = parse_bytes(value)
    assert got == want, f"parse_bytes({value!r}) = {got}, want {want}"


@pytest.mark.parametrize(
    ("name", "value", "want"),
    [
        pytest.param("cpu", "250m", 250, id="cpu is counted in millicores"),
        pytest.param("memory", "1Gi", GI, id="memory is counted in bytes"),
        pytest.param("ephemeral-storage", "10G", 10**10, id="ephemeral storage is bytes"),
        pytest.param("hugepages-2Mi", "4Mi", 4 * MI, id="hugepages of any size are bytes"),
        pytest.param("pods", "110", 110, id="pods is a plain count"),
        pytest.param(GPU_RESOURCE, 8, 8, id="whole GPUs are a plain count"),
        pytest.param(GPU_RESOURCE, "2000m", 2, id="a whole number written in milli is whole"),
        pytest.param(GPU_RESOURCE, "1e1", 10, id="an exponent that lands on a whole number"),
        pytest.param("example.com/fpga", "2", 2, id="any extended resource is a count"),
    ],
)
def test_parse_quantity_picks_the_unit_from_the_resource_name(
    name: str, value: str | int, want: int
) -> None:
    got = parse_quantity(name, value)
    assert got == want, f"parse_quantity({name!r}, {value!r}) = {got}, want {want}"


@pytest.mark.parametrize(
    ("name", "value", "want_in_message"),
    [
        pytest.param(GPU_RESOURCE, "0.5", "whole number", id="half a GPU is not a count"),
        pytest.param(GPU_RESOURCE, "500m", "whole number", id="milli-GPUs are not a count"),
        pytest.param("pods", 1.5, "whole number", id="a float count with a fraction"),
        pytest.param("cpu", "-1", "negative", id="a negative request"),
        pytest.param("memory", -5, "negative", id="a negative integer"),
        pytest.param("cpu", "abc", "not a quantity", id="words are not quantities"),
        pytest.param("cpu", "", "not a quantity", id="the empty string"),
        pytest.param("memory", "1K", "not a quantity", id="capital K is not a suffix"),
        pytest.param("memory", "1e", "not a quantity", id="a lone lower-case e is not a suffix"),
        pytest.param("memory", "1GiB", "not a quantity", id="a trailing B is not Kubernetes"),
        pytest.param("memory", "1 Gi", "not a quantity", id="no space inside a quantity"),
        pytest.param("memory", "1_000", "not a quantity", id="no digit separators"),
        pytest.param("memory", "0x10", "not a quantity", id="no hexadecimal"),
        pytest.param("memory", "1.2.3", "not a quantity", id="two decimal points"),
        pytest.param("memory", "1e99999999", "too large", id="a giant exponent is refused early"),
        pytest.param("memory", "8Ei", "too large", id="past the int64 range"),
        pytest.param("cpu", "1E", "too large", id="an exa of cores overflows in millicores"),
        pytest.param("memory", "1" * 200, "longer than", id="absurdly long strings are unread"),
        pytest.param("memory", float("inf"), "finite", id="infinity"),
        pytest.param("memory", float("nan"), "finite", id="not a number"),
        pytest.param("memory", True, "boolean", id="YAML yes is not a quantity"),
    ],
)
def test_bad_quantities_raise_value_error(name: str, value: Any, want_in_message: str) -> None:
    with pytest.raises(ValueError, match=want_in_message) as caught:
        parse_quantity(name, value)
    assert not isinstance(caught.value, InvalidObjectError), "plain parsers raise ValueError"


@given(
    number=st.integers(min_value=0, max_value=10**6),
    suffix=st.sampled_from(["", "k", "M", "G", "Ki", "Mi", "Gi", "Ti"]),
)
def test_integer_with_suffix_is_exact_multiple(number: int, suffix: str) -> None:
    scale = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "Ki": KI, "Mi": MI, "Gi": GI}
    scale["Ti"] = 2**40
    assert parse_bytes(f"{number}{suffix}") == number * scale[suffix]


# ---------------------------------------------------------------------------------------------
# Effective requests
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "want"),
    [
        pytest.param(pod_body(), {"pods": 1}, id="a pod without requests still takes a pod slot"),
        pytest.param(
            pod_body(
                containers=[
                    ctr("a", {"cpu": "500m", "memory": "1Gi"}),
                    ctr("b", {"cpu": "1", "memory": "512Mi"}),
                ]
            ),
            {"cpu": 1500, "memory": GI + 512 * MI, "pods": 1},
            id="app containers add up",
        ),
        pytest.param(
            pod_body(containers=[ctr(limits={GPU_RESOURCE: 2, "cpu": "4"})]),
            {GPU_RESOURCE: 2, "cpu": 4000, "pods": 1},
            id="limits without requests become the requests",
        ),
        pytest.param(
            pod_body(containers=[ctr(requests={"cpu": "1"}, limits={"cpu": "4", "memory": "2Gi"})]),
            {"cpu": 1000, "memory": 2 * GI, "pods": 1},
            id="an explicit request wins over its limit, other limits still default",
        ),
        pytest.param(
            pod_body(
                containers=[ctr(requests={"cpu": "1"})],
                init=[ctr("setup", {"cpu": "3", "memory": "1Gi"})],
            ),
            {"cpu": 3000, "memory": GI, "pods": 1},
            id="a bigger init container sets the request, it runs alone",
        ),
        pytest.param(
            pod_body(
                containers=[ctr(requests={"cpu": "2"})],
                init=[ctr("i1", {"cpu": "1"}), ctr("i2", {"cpu": "1500m"})],
            ),
            {"cpu": 2000, "pods": 1},
            id="init containers are max'd not summed, and smaller ones change nothing",
        ),
        pytest.param(
            pod_body(
                containers=[ctr(requests={"cpu": "1"})],
                init=[ctr("proxy", {"cpu": "500m"}, restart="Always")],
            ),
            {"cpu": 1500, "pods": 1},
            id="a sidecar runs beside the app so it adds to the containers",
        ),
        pytest.param(
            pod_body(
                containers=[ctr(requests={"cpu": "1"})],
                init=[
                    ctr("proxy", {"cpu": "500m"}, restart="Always"),
                    ctr("migrate", {"cpu": "3"}),
                ],
            ),
            {"cpu": 3500, "pods": 1},
            id="an init container after a sidecar runs beside it",
        ),
        pytest.param(
            pod_body(
                containers=[ctr(requests={"cpu": "1"})],
                init=[
                    ctr("migrate", {"cpu": "3"}),
                    ctr("proxy", {"cpu": "500m"}, restart="Always"),
                ],
            ),
            {"cpu": 3000, "pods": 1},
            id="an init container before the sidecar starts does not share with it",
        ),
        pytest.param(
            pod_body(
                containers=[ctr(requests={"cpu": "100m"})],
                init=[
                    ctr("s1", {"cpu": "1"}, restart="Always"),
                    ctr("s2", {"cpu": "2"}, restart="Always"),
                ],
            ),
            {"cpu": 3100, "pods": 1},
            id="sidecars accumulate",
        ),
        pytest.param(
            pod_body(containers=[ctr(requests={"cpu": "1"})], overhead={"cpu": "250m"}),
            {"cpu": 1250, "pods": 1},
            id="runtime overhead is added on top",
        ),
        pytest.param(
            pod_body(
                containers=[ctr(requests={"cpu": "1"})],
                init=[ctr("setup", {"cpu": "2"})],
                overhead={"cpu": "100m", "memory": "64Mi"},
            ),
            {"cpu": 2100, "memory": 64 * MI, "pods": 1},
            id="overhead is added after the init maximum",
        ),
        pytest.param(
            pod_body(
                containers=[ctr(requests={"cpu": "1", "memory": "1Gi"})],
                resources={"requests": {"cpu": "3"}},
            ),
            {"cpu": 3000, "memory": GI, "pods": 1},
            id="pod-level resources replace the containers' sum for what they name",
        ),
        pytest.param(
            pod_body(containers=[ctr(requests={"cpu": "0", GPU_RESOURCE: 0})]),
            {"pods": 1},
            id="zero requests are dropped",
        ),
        pytest.param(
            pod_body(containers=[ctr(requests={"pods": 5})]),
            {"pods": 1},
            id="a pod always takes exactly one pod slot",
        ),
    ],
)
def test_effective_requests(body: dict[str, Any], want: dict[str, int]) -> None:
    got = parse_pod(body).requests()
    assert got == want, f"requests() = {got}, want {want}"


sensible_requests = st.dictionaries(
    st.sampled_from(["cpu", "memory", GPU_RESOURCE]),
    st.sampled_from(["0", "1", "2", "8"]),
    max_size=3,
)


@settings(max_examples=200, deadline=None)
@given(
    apps=st.lists(sensible_requests, min_size=1, max_size=3),
    inits=st.lists(st.tuples(sensible_requests, st.booleans()), max_size=3),
)
def test_requests_cover_the_app_containers_and_every_init_container(
    apps: list[dict[str, str]], inits: list[tuple[dict[str, str], bool]]
) -> None:
    """Whatever the mix, the pod asks for at least the sum of its app containers and at least
    what any one init container needs."""
    body = pod_body(
        containers=[ctr(f"app{i}", req) for i, req in enumerate(apps)],
        init=[
            ctr(f"init{i}", req, restart="Always" if side else None)
            for i, (req, side) in enumerate(inits)
        ],
    )
    got = parse_pod(body).requests()
    for name in ("cpu", "memory", GPU_RESOURCE):
        app_sum = sum(parse_quantity(name, req.get(name, 0)) for req in apps)
        init_max = max((parse_quantity(name, req.get(name, 0)) for req, _ in inits), default=0)
        assert got.get(name, 0) >= max(app_sum, init_max), (
            f"{name}: requests()={got} below app sum {app_sum} or init max {init_max}"
        )


@pytest.mark.parametrize(
    ("body", "want_field", "want_in_message"),
    [
        pytest.param(
            pod_body(containers=[ctr(requests={"cpu": "2"}, limits={"cpu": "1"})]),
            "spec.containers[0].resources.requests.cpu",
            "must not exceed the limit",
            id="a request above its limit",
        ),
        pytest.param(
            pod_body(containers=[ctr(requests={GPU_RESOURCE: 1}, limits={GPU_RESOURCE: 2})]),
            f"spec.containers[0].resources.requests[{GPU_RESOURCE}]",
            "must equal the limit",
            id="GPUs cannot be overcommitted so request and limit must agree",
        ),
        pytest.param(
            pod_body(containers=[ctr(), ctr("b", {"cpu": "-1"})]),
            "spec.containers[1].resources.requests.cpu",
            "negative",
            id="a negative request in the second container",
        ),
        pytest.param(
            pod_body(containers=[ctr(limits={GPU_RESOURCE: "0.5"})]),
            f"spec.containers[0].resources.limits[{GPU_RESOURCE}]",
            "whole number",
            id="half a GPU as a limit",
        ),
        pytest.param(
            pod_body(init=[ctr("setup", {"memory": "lots"})]),
            "spec.initContainers[0].resources.requests.memory",
            "not a quantity",
            id="a bad quantity in an init container",
        ),
        pytest.param(
            pod_body(overhead={"cpu": [1]}),
            "spec.overhead.cpu",
            "quantity string or number",
            id="a list where a quantity belongs",
        ),
        pytest.param(
            pod_body(containers=[ctr(requests={"memory": True})]),
            "spec.containers[0].resources.requests.memory",
            "got bool",
            id="a YAML boolean where a quantity belongs",
        ),
        pytest.param(
            pod_body(containers=[]),
            "spec.containers",
            "at least 1",
            id="a pod needs at least one container",
        ),
    ],
)
def test_resource_errors_name_the_exact_field(
    body: dict[str, Any], want_field: str, want_in_message: str
) -> None:
    error = expect_invalid(body)
    assert error.obj == "Pod default/p", f"error names {error.obj!r}"
    assert error.field == want_field, f"error names field {error.field!r}: {error}"
    assert want_in_message in error.message, f"message {error.message!r} lacks {want_in_message!r}"


# ---------------------------------------------------------------------------------------------
# Node affinity
# ---------------------------------------------------------------------------------------------

A100_NODE = {"gpu": "a100", "gpus": "8", "zone": "z1"}


@pytest.mark.parametrize(
    ("req", "labels", "want"),
    [
        pytest.param(requirement("gpu", "In", "a100", "h100"), A100_NODE, True, id="In, listed"),
        pytest.param(requirement("gpu", "In", "h100"), A100_NODE, False, id="In, not listed"),
        pytest.param(requirement("rack", "In", "r1"), A100_NODE, False, id="In, label missing"),
        pytest.param(requirement("gpu", "NotIn", "h100"), A100_NODE, True, id="NotIn, other"),
        pytest.param(requirement("gpu", "NotIn", "a100"), A100_NODE, False, id="NotIn, listed"),
        pytest.param(
            requirement("rack", "NotIn", "r1"), A100_NODE, True, id="NotIn matches a missing label"
        ),
        pytest.param(requirement("gpu", "Exists"), A100_NODE, True, id="Exists, present"),
        pytest.param(requirement("rack", "Exists"), A100_NODE, False, id="Exists, missing"),
        pytest.param(requirement("rack", "DoesNotExist"), A100_NODE, True, id="DoesNotExist"),
        pytest.param(
            requirement("gpu", "DoesNotExist"), A100_NODE, False, id="DoesNotExist, present"
        ),
        pytest.param(requirement("gpus", "Gt", "4"), A100_NODE, True, id="Gt, 8 > 4"),
        pytest.param(requirement("gpus", "Gt", "8"), A100_NODE, False, id="Gt is strict"),
        pytest.param(requirement("gpus", "Lt", "16"), A100_NODE, True, id="Lt, 8 < 16"),
        pytest.param(requirement("gpus", "Lt", "-1"), A100_NODE, False, id="Lt, negative bound"),
        pytest.param(
            requirement("gpu", "Gt", "1"), A100_NODE, False, id="Gt on a non-integer label fails"
        ),
        pytest.param(requirement("rack", "Lt", "9"), A100_NODE, False, id="Lt, label missing"),
        pytest.param(
            requirement("n", "Gt", "1"), {"n": " 2"}, False, id="Gt reads labels like ParseInt"
        ),
    ],
)
def test_requirement_operators(
    req: NodeSelectorRequirement, labels: dict[str, str], want: bool
) -> None:
    got = req.matches(labels)
    assert got is want, f"{req.key} {req.operator} {req.values} on {labels}: {got}, want {want}"


@pytest.mark.parametrize(
    ("raw", "want_in_message"),
    [
        pytest.param({"key": "a", "operator": "In"}, "must not be empty", id="In without values"),
        pytest.param(
            {"key": "a", "operator": "NotIn", "values": []}, "must not be empty", id="NotIn, empty"
        ),
        pytest.param(
            {"key": "a", "operator": "Exists", "values": ["x"]},
            "must be empty",
            id="Exists with a value",
        ),
        pytest.param(
            {"key": "a", "operator": "DoesNotExist", "values": ["x"]},
            "must be empty",
            id="DoesNotExist with a value",
        ),
        pytest.param({"key": "a", "operator": "Gt"}, "exactly one integer", id="Gt, no value"),
        pytest.param(
            {"key": "a", "operator": "Lt", "values": ["1", "2"]},
            "exactly one integer",
            id="Lt with two values",
        ),
        pytest.param(
            {"key": "a", "operator": "Gt", "values": ["four"]},
            "exactly one integer",
            id="Gt with a word",
        ),
        pytest.param(
            {"key": "a", "operator": "Gt", "values": ["99999999999999999999"]},
            "exactly one integer",
            id="Gt past int64",
        ),
    ],
)
def test_invalid_requirements_name_values(raw: dict[str, Any], want_in_message: str) -> None:
    term = {"matchExpressions": [raw]}
    body = pod_body(
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
            }
        }
    )
    error = expect_invalid(body)
    want_field = (
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        ".nodeSelectorTerms[0].matchExpressions[0].values"
    )
    assert error.field == want_field, f"field {error.field!r}: {error}"
    assert want_in_message in error.message, f"message {error.message!r} lacks {want_in_message!r}"


def test_unknown_operator_is_refused() -> None:
    term = {"matchExpressions": [{"key": "a", "operator": "Like", "values": ["x"]}]}
    error = expect_invalid(pod_body(affinity={"nodeAffinity": _required([term])}))
    assert error.field.endswith("matchExpressions[0].operator"), f"field {error.field!r}"


def _required(terms: list[dict[str, Any]]) -> dict[str, Any]:
    return {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}


@pytest.mark.parametrize(
    ("field", "want_field_end", "want_in_message"),
    [
        pytest.param(
            {"key": "metadata.labels", "operator": "In", "values": ["a"]},
            "matchFields[0].key",
            "metadata.name",
            id="matchFields can only name metadata.name",
        ),
        pytest.param(
            {"key": "metadata.name", "operator": "Exists"},
            "matchFields[0].operator",
            "In or NotIn",
            id="matchFields allows only In and NotIn",
        ),
        pytest.param(
            {"key": "metadata.name", "operator": "In", "values": ["a", "b"]},
            "matchFields[0].values",
            "exactly one",
            id="matchFields takes exactly one node name",
        ),
    ],
)
def test_invalid_match_fields(
    field: dict[str, Any], want_field_end: str, want_in_message: str
) -> None:
    body = pod_body(affinity={"nodeAffinity": _required([{"matchFields": [field]}])})
    error = expect_invalid(body)
    assert error.field.endswith(want_field_end), f"field {error.field!r}: {error}"
    assert want_in_message in error.message, f"message {error.message!r}"


def _term(raw: dict[str, Any]) -> NodeSelectorTerm:
    return NodeSelectorTerm.model_validate(raw)


@pytest.mark.parametrize(
    ("terms", "node_name", "want"),
    [
        pytest.param([], "n1", False, id="no terms match no node"),
        pytest.param([{}], "n1", False, id="an empty term matches no node"),
        pytest.param(
            [{"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100"]}]}],
            "n1",
            True,
            id="one matching term",
        ),
        pytest.param(
            [
                {
                    "matchExpressions": [
                        {"key": "gpu", "operator": "In", "values": ["a100"]},
                        {"key": "zone", "operator": "In", "values": ["z2"]},
                    ]
                }
            ],
            "n1",
            False,
            id="requirements in one term are ANDed",
        ),
        pytest.param(
            [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z2"]}]},
                {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]},
            ],
            "n1",
            True,
            id="terms are ORed",
        ),
        pytest.param(
            [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}],
            "n1",
            True,
            id="matchFields picks the node by name",
        ),
        pytest.param(
            [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}],
            "n2",
            False,
            id="matchFields rejects other nodes",
        ),
        pytest.param(
            [
                {
                    "matchExpressions": [{"key": "gpu", "operator": "Exists"}],
                    "matchFields": [
                        {"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}
                    ],
                }
            ],
            "n1",
            False,
            id="fields and expressions of one term are ANDed",
        ),
    ],
)
def test_required_terms(terms: list[dict[str, Any]], node_name: str, want: bool) -> None:
    parsed = [_term(raw) for raw in terms]
    got = required_terms_match(parsed, A100_NODE, node_name)
    assert got is want, f"terms {terms} on node {node_name} {A100_NODE}: {got}, want {want}"


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param({}, id="no affinity"),
        pytest.param({"affinity": {}}, id="empty affinity"),
        pytest.param({"affinity": {"nodeAffinity": {}}}, id="node affinity without required"),
    ],
)
def test_pod_required_terms_are_none_without_required_affinity(spec: dict[str, Any]) -> None:
    got = pod(**spec).required_terms
    assert got is None, f"spec {spec} should have no required terms, got {got}"


def test_pod_required_terms_come_from_node_affinity() -> None:
    term = {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100"]}]}
    got = pod(affinity={"nodeAffinity": _required([term])}).required_terms
    assert got == (_term(term),), f"required_terms = {got}"


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        pytest.param({}, True, id="no selector fits every node"),
        pytest.param({"nodeSelector": {"gpu": "a100"}}, True, id="nodeSelector matches"),
        pytest.param({"nodeSelector": {"gpu": "h100"}}, False, id="nodeSelector differs"),
        pytest.param(
            {
                "nodeSelector": {"gpu": "a100"},
                "affinity": {
                    "nodeAffinity": _required(
                        [
                            {
                                "matchExpressions": [
                                    {"key": "zone", "operator": "In", "values": ["z9"]}
                                ]
                            }
                        ]
                    )
                },
            },
            False,
            id="nodeSelector and required affinity must both hold",
        ),
    ],
)
def test_pod_matches_node_labels(spec: dict[str, Any], want: bool) -> None:
    got = pod(**spec).matches_node_labels(A100_NODE, "n1")
    assert got is want, f"spec {spec} on {A100_NODE}: {got}, want {want}"


# ---------------------------------------------------------------------------------------------
# Taints and tolerations
# ---------------------------------------------------------------------------------------------

GPU_TAINT = Taint(key="nvidia.com/gpu", value="present", effect="NoSchedule")


@pytest.mark.parametrize(
    ("toleration", "taint", "want"),
    [
        pytest.param(
            {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present"},
            GPU_TAINT,
            True,
            id="Equal with the same key and value, any effect",
        ),
        pytest.param(
            {"key": "nvidia.com/gpu", "value": "present"},
            GPU_TAINT,
            True,
            id="operator defaults to Equal",
        ),
        pytest.param(
            {"key": "nvidia.com/gpu", "operator": "", "value": "present"},
            GPU_TAINT,
            True,
            id="an empty operator means Equal",
        ),
        pytest.param(
            {"key": "nvidia.com/gpu", "value": "absent"},
            GPU_TAINT,
            False,
            id="Equal with another value",
        ),
        pytest.param(
            {"key": "nvidia.com/gpu"},
            GPU_TAINT,
            False,
            id="Equal without a value only tolerates an empty value",
        ),
        pytest.param(
            {"key": "dedicated"},
            Taint(key="dedicated", effect="NoSchedule"),
            True,
            id="Equal without a value tolerates an empty-valued taint",
        ),
        pytest.param(
            {"key": "nvidia.com/gpu", "operator": "Exists"},
            GPU_TAINT,
            True,
            id="Exists ignores the value",
        ),
        pytest.param(
            {"key": "other", "operator": "Exists"}, GPU_TAINT, False, id="Exists, other key"
        ),
        pytest.param({"operator": "Exists"}, GPU_TAINT, True, id="keyless Exists tolerates all"),
        pytest.param(
            {"key": "", "operator": "Exists", "effect": ""},
            Taint(key="x", value="y", effect="NoExecute"),
            True,
            id="empty key and effect are read as any",
        ),
        pytest.param(
            {"operator": "Exists", "effect": "NoExecute"},
            GPU_TAINT,
            False,
            id="keyless Exists limited to another effect",
        ),
        pytest.param(
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            GPU_TAINT,
            True,
            id="matching effect",
        ),
        pytest.param(
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "PreferNoSchedule"},
            GPU_TAINT,
            False,
            id="effects are compared exactly",
        ),
        pytest.param(
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
            Taint(key="node.kubernetes.io/not-ready", effect="NoExecute"),
            True,
            id="tolerationSeconds does not change whether it tolerates",
        ),
    ],
)
def test_tolerations(toleration: dict[str, Any], taint: Taint, want: bool) -> None:
    got = Toleration.model_validate(toleration).tolerates(taint)
    assert got is want, f"{toleration} on {taint}: {got}, want {want}"


@pytest.mark.parametrize(
    ("toleration", "want_field", "want_in_message"),
    [
        pytest.param(
            {"operator": "Equal", "value": "x"},
            "spec.tolerations[0].operator",
            "must be Exists",
            id="a keyless toleration must be Exists",
        ),
        pytest.param(
            {"key": "a", "operator": "Exists", "value": "x"},
            "spec.tolerations[0].value",
            "must be empty",
            id="Exists takes no value",
        ),
        pytest.param(
            {"key": "a", "operator": "Gte"},
            "spec.tolerations[0].operator",
            "Equal",
            id="an unknown operator",
        ),
        pytest.param(
            {"key": "a", "operator": "Exists", "effect": "NoRun"},
            "spec.tolerations[0].effect",
            "NoSchedule",
            id="an unknown effect",
        ),
    ],
)
def test_invalid_tolerations(
    toleration: dict[str, Any], want_field: str, want_in_message: str
) -> None:
    error = expect_invalid(pod_body(tolerations=[toleration]))
    assert error.field == want_field, f"field {error.field!r}: {error}"
    assert want_in_message in error.message, f"message {error.message!r}"


def test_first_untolerated_taint_skips_preferences_and_tolerated_taints() -> None:
    soft = Taint(key="spot", effect="PreferNoSchedule")
    evict = Taint(key="maintenance", effect="NoExecute")
    tolerations = [Toleration(key="nvidia.com/gpu", operator="Exists")]
    got = first_untolerated_taint([soft, GPU_TAINT, evict], tolerations)
    assert got == evict, f"want the maintenance taint, got {got}"
    assert first_untolerated_taint([soft, GPU_TAINT], tolerations) is None


# ---------------------------------------------------------------------------------------------
# Nodes
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "want"),
    [
        pytest.param({}, True, id="a hand-written node without conditions is ready"),
        pytest.param({"conditions": None}, True, id="null conditions count as absent"),
        pytest.param({"conditions": []}, False, id="listed but empty conditions: not ready"),
        pytest.param({"conditions": [{"type": "Ready", "status": "True"}]}, True, id="Ready=True"),
        pytest.param(
            {"conditions": [{"type": "Ready", "status": "False"}]}, False, id="Ready=False"
        ),
        pytest.param(
            {"conditions": [{"type": "Ready", "status": "Unknown"}]},
            False,
            id="kubelet stopped reporting",
        ),
        pytest.param(
            {"conditions": [{"type": "MemoryPressure", "status": "False"}]},
            False,
            id="conditions without Ready: not ready",
        ),
    ],
)
def test_node_readiness(status: dict[str, Any], want: bool) -> None:
    got = parse_node(node_body(**status)).ready
    assert got is want, f"status {status}: ready={got}, want {want}"


@pytest.mark.parametrize(
    ("status", "want"),
    [
        pytest.param(
            {
                "capacity": {"cpu": "64", "memory": "512Gi", GPU_RESOURCE: "8", "pods": "110"},
                "allocatable": {"cpu": "63500m", "memory": "500Gi", GPU_RESOURCE: 8, "pods": 110},
            },
            {"cpu": 63500, "memory": 500 * GI, GPU_RESOURCE: 8, "pods": 110},
            id="allocatable wins over capacity",
        ),
        pytest.param(
            {"capacity": {"cpu": 32, "memory": "256Gi", GPU_RESOURCE: 4}},
            {"cpu": 32000, "memory": 256 * GI, GPU_RESOURCE: 4},
            id="capacity stands in when allocatable is absent",
        ),
        pytest.param(
            {"capacity": {"cpu": 32}, "allocatable": {GPU_RESOURCE: 0}},
            {GPU_RESOURCE: 0},
            id="a given allocatable is used as is, zeros kept",
        ),
        pytest.param({}, {}, id="a node without status has nothing"),
    ],
)
def test_node_allocatable(status: dict[str, Any], want: dict[str, int]) -> None:
    got = parse_node(node_body(**status)).allocatable_resources()
    assert got == want, f"allocatable_resources() = {got}, want {want}"


def test_node_reads_spec_labels_and_ignores_unknown_fields() -> None:
    node = parse_node(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": "gpu-a",
                "labels": {"topology.example.com/rack": "r1"},
                "managedFields": [{"manager": "kubelet"}],
            },
            "spec": {
                "unschedulable": True,
                "podCIDR": "10.0.0.0/24",
                "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
            },
            "status": {"nodeInfo": {"kubeletVersion": "v1.30"}},
        }
    )
    assert node.name == "gpu-a"
    assert node.labels == {"topology.example.com/rack": "r1"}
    assert node.spec.unschedulable is True
    assert node.spec.taints == [Taint(key="nvidia.com/gpu", effect="NoSchedule")]


@pytest.mark.parametrize(
    ("raw", "want_obj", "want_field"),
    [
        pytest.param(
            node_body("gpu-a", allocatable={"memory": "-1Gi"}),
            "Node gpu-a",
            "status.allocatable.memory",
            id="negative allocatable memory",
        ),
        pytest.param(
            node_body("gpu-a", capacity={GPU_RESOURCE: "1.5"}),
            "Node gpu-a",
            f"status.capacity[{GPU_RESOURCE}]",
            id="a fractional GPU capacity",
        ),
        pytest.param(
            {"metadata": {"name": "gpu-a"}, "spec": {"taints": [{"key": "k", "effect": "Soon"}]}},
            "Node gpu-a",
            "spec.taints[0].effect",
            id="an unknown taint effect",
        ),
        pytest.param(
            {"metadata": {"name": "gpu-a"}, "spec": {"taints": [{"effect": "NoSchedule"}]}},
            "Node gpu-a",
            "spec.taints[0].key",
            id="a taint without key",
        ),
        pytest.param(
            {"kind": "Pod", "metadata": {"name": "gpu-a"}},
            "Node gpu-a",
            "kind",
            id="a Pod handed to parse_node",
        ),
        pytest.param({"metadata": {}}, "Node <unnamed>", "metadata.name", id="a node without name"),
    ],
)
def test_node_errors_name_node_and_field(
    raw: dict[str, Any], want_obj: str, want_field: str
) -> None:
    error = expect_invalid(raw, parse=parse_node)
    assert (error.obj, error.field) == (want_obj, want_field), f"got {error}"


# ---------------------------------------------------------------------------------------------
# Pods: identity, labels, phase
# ---------------------------------------------------------------------------------------------


def test_pod_identity_and_labels() -> None:
    got = pod(
        name="w-0",
        namespace="ml",
        labels={POD_GROUP_LABEL: "train", "app": "llm"},
        schedulerName="gpusched",
        priority=100,
        nodeName="gpu-a",
    )
    assert (got.key, got.group, got.app) == ("ml/w-0", "train", "llm")
    assert (got.spec.scheduler_name, got.spec.priority, got.spec.node_name) == (
        "gpusched",
        100,
        "gpu-a",
    )


def test_pod_defaults() -> None:
    got = pod()
    assert (got.group, got.app, got.spec.priority, got.spec.node_name) == (None, None, None, None)
    assert got.spec.scheduler_name == "default-scheduler", "kube's default scheduler name"
    assert not got.is_terminal, "a pod without status is not terminal"


def test_app_falls_back_to_the_recommended_label() -> None:
    got = pod(labels={"app.kubernetes.io/name": "vllm"}).app
    assert got == "vllm", f"app = {got!r}"


@pytest.mark.parametrize(
    ("phase", "want"),
    [
        pytest.param("Pending", False, id="pending"),
        pytest.param("Running", False, id="running"),
        pytest.param("Succeeded", True, id="succeeded holds nothing"),
        pytest.param("Failed", True, id="failed holds nothing"),
        pytest.param("Unknown", False, id="unknown may still run"),
    ],
)
def test_terminal_phases(phase: str, want: bool) -> None:
    got = pod(phase=phase).is_terminal
    assert got is want, f"phase {phase}: is_terminal={got}, want {want}"


# ---------------------------------------------------------------------------------------------
# Our annotations
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotations", "want"),
    [
        pytest.param({}, None, id="no annotation, no share"),
        pytest.param({GPU_MILLI_ANNOTATION: "250"}, 250, id="a quarter GPU"),
        pytest.param({GPU_MILLI_ANNOTATION: "1"}, 1, id="the smallest share"),
        pytest.param({GPU_MILLI_ANNOTATION: "999"}, 999, id="the largest share"),
    ],
)
def test_gpu_milli(annotations: dict[str, str], want: int | None) -> None:
    got = pod(annotations=annotations).gpu_milli()
    assert got == want, f"gpu_milli() = {got}, want {want}"


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("0", id="zero is no share"),
        pytest.param("1000", id="a whole GPU is nvidia.com/gpu, not a share"),
        pytest.param("-5", id="negative"),
        pytest.param("0.5", id="a fraction"),
        pytest.param("500m", id="a quantity"),
        pytest.param("", id="empty"),
        pytest.param(" 250", id="spaces"),
        pytest.param("9" * 5000, id="huge"),
    ],
)
def test_bad_gpu_milli_names_the_annotation(value: str) -> None:
    got = pod(name="share", annotations={GPU_MILLI_ANNOTATION: value})
    with pytest.raises(InvalidObjectError) as caught:
        got.gpu_milli()
    error = caught.value
    want = ("Pod default/share", f"metadata.annotations[{GPU_MILLI_ANNOTATION}]")
    assert (error.obj, error.field) == want, f"got {error}"
    assert "1..999" in error.message, f"message {error.message!r} should state the range"


@pytest.mark.parametrize(
    ("annotations", "want"),
    [
        pytest.param({}, None, id="not bound by us"),
        pytest.param({GPUS_ANNOTATION: "0,1,3,4"}, (0, 1, 3, 4), id="four GPUs, one skipped"),
        pytest.param({GPUS_ANNOTATION: "5"}, (5,), id="one GPU"),
        pytest.param({GPUS_ANNOTATION: "3, 1"}, (3, 1), id="spaces allowed, order kept"),
        pytest.param({GPUS_ANNOTATION: ""}, (), id="empty means no GPU"),
        pytest.param(
            {GPUS_ANNOTATION: ",".join(str(i) for i in range(64))},
            tuple(range(64)),
            id="all 64 GPUs a node can have",
        ),
    ],
)
def test_assigned_gpus(annotations: dict[str, str], want: tuple[int, ...] | None) -> None:
    got = pod(annotations=annotations).assigned_gpus()
    assert got == want, f"assigned_gpus() = {got}, want {want}"


@pytest.mark.parametrize(
    ("value", "want_in_message"),
    [
        pytest.param("0,0", "listed twice", id="a duplicate index"),
        pytest.param("-1", "not a GPU index", id="a negative index"),
        pytest.param("64", "not a GPU index", id="an index past the largest node"),
        pytest.param("a,b", "not a GPU index", id="words"),
        pytest.param("0,,1", "not a GPU index", id="an empty entry"),
        pytest.param("1.0", "not a GPU index", id="a float"),
        pytest.param(",".join(["1"] * 65), "more than 64", id="too many entries"),
        pytest.param("0," + " " * 1100 + "1", "longer than 1024", id="over 1 KiB"),
    ],
)
def test_bad_assigned_gpus_name_the_annotation(value: str, want_in_message: str) -> None:
    with pytest.raises(InvalidObjectError) as caught:
        pod(namespace="ml", name="w-1", annotations={GPUS_ANNOTATION: value}).assigned_gpus()
    error = caught.value
    want = ("Pod ml/w-1", f"metadata.annotations[{GPUS_ANNOTATION}]")
    assert (error.obj, error.field) == want, f"got {error}"
    assert want_in_message in error.message, f"message {error.message!r}"


def test_annotations_over_256_kib_are_refused_at_parse() -> None:
    error = expect_invalid(pod_body(annotations={"big": "x" * (256 * 1024)}))
    assert error.field == "metadata.annotations", f"got {error}"
    assert "262144" in error.message, f"message {error.message!r} should state the limit"


def test_annotations_just_under_the_limit_are_read() -> None:
    value = "x" * (256 * 1024 - len("big"))
    got = pod(annotations={"big": value}).metadata.annotations["big"]
    assert len(got) == len(value)


# ---------------------------------------------------------------------------------------------
# Errors name the object even when the body is broken
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "want_obj", "want_field"),
    [
        pytest.param([], "Pod default/<unnamed>", "", id="not a mapping at all"),
        pytest.param({"metadata": {"name": "a"}}, "Pod default/a", "spec", id="spec missing"),
        pytest.param(
            {"metadata": "oops", "spec": {}}, "Pod default/<unnamed>", "metadata", id="bad metadata"
        ),
        pytest.param(
            {"metadata": {"name": 7, "namespace": "ml"}},
            "Pod ml/<unnamed>",
            "metadata.name",
            id="a name that is not a string",
        ),
        pytest.param(
            {"kind": "Node", "metadata": {"name": "a"}}, "Pod default/a", "kind", id="wrong kind"
        ),
        pytest.param(
            pod_body(labels={"app": 1}),  # type: ignore[dict-item]
            "Pod default/p",
            "metadata.labels.app",
            id="a label value that YAML read as a number",
        ),
        pytest.param(
            pod_body(labels={POD_GROUP_LABEL: None}),  # type: ignore[dict-item]
            "Pod default/p",
            f"metadata.labels[{POD_GROUP_LABEL}]",
            id="odd label keys are bracketed",
        ),
        pytest.param(
            pod_body(containers=[{"resources": {}}]),
            "Pod default/p",
            "spec.containers[0].name",
            id="a container without a name",
        ),
        pytest.param(
            pod_body(init=[ctr("s", restart="Sometimes")]),
            "Pod default/p",
            "spec.initContainers[0].restartPolicy",
            id="an unknown restart policy",
        ),
        pytest.param(
            pod_body(priority=2**31),
            "Pod default/p",
            "spec.priority",
            id="priority past int32",
        ),
        pytest.param(
            pod_body(phase="Exploded"), "Pod default/p", "status.phase", id="an unknown phase"
        ),
    ],
)
def test_pod_errors_name_pod_and_field(raw: Any, want_obj: str, want_field: str) -> None:
    error = expect_invalid(raw)
    assert (error.obj, error.field) == (want_obj, want_field), f"got {error}"


# ---------------------------------------------------------------------------------------------
# Property: whatever comes in, only InvalidObjectError comes out
# ---------------------------------------------------------------------------------------------

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)


def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly the plausible shape (nine times in ten), sometimes any JSON value in its place:
    rarely enough that most bodies get deep into the model before something is wrong."""
    return st.integers(0, 9).flatmap(lambda roll: json_values if roll == 9 else strategy)


def one_of(*choices: Any) -> st.SearchStrategy[Any]:
    return maybe(st.sampled_from(choices))


def shaped(
    required: dict[str, st.SearchStrategy[Any]] | None = None, **optional: st.SearchStrategy[Any]
) -> st.SearchStrategy[Any]:
    """A JSON object with these keys (the optional ones sometimes missing), or any JSON value."""
    return maybe(st.fixed_dictionaries(required or {}, optional=optional))


def few(strategy: st.SearchStrategy[Any], min_size: int = 0) -> st.SearchStrategy[Any]:
    return maybe(st.lists(strategy, min_size=min_size, max_size=3))


QUANTITY_LIKE = r"\A[+-]?[0-9]{0,3}(\.[0-9]{0,3})?([eE][+-]?[0-9]{1,4}|[KMGTPE]i|[numkKMGTPE])?\Z"
quantities = maybe(
    st.sampled_from(["0", "1", "250m", "2Gi", "1.5", "8"])
    | st.integers(min_value=0, max_value=64)
    | st.from_regex(QUANTITY_LIKE)
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
)
resource_lists = maybe(
    st.dictionaries(
        st.sampled_from(["cpu", "memory", "pods", GPU_RESOURCE, "hugepages-2Mi", "x.io/y", ""]),
        quantities,
        max_size=3,
    )
)
resources = shaped(requests=resource_lists, limits=resource_lists)
container = shaped({"name": maybe(st.text(min_size=1, max_size=4))}, resources=resources)
init_container = shaped(
    {"name": st.just("init")}, resources=resources, restartPolicy=one_of("Always", "Never")
)
requirement_bodies = shaped(
    {
        "key": one_of("gpu", "metadata.name", ""),
        "operator": one_of("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"),
    },
    values=few(st.sampled_from(["1", "a100", "n1", "x"])),
)
terms = few(shaped(matchExpressions=few(requirement_bodies), matchFields=few(requirement_bodies)))
affinities = shaped(
    nodeAffinity=shaped(
        requiredDuringSchedulingIgnoredDuringExecution=shaped({"nodeSelectorTerms": terms})
    )
)
tolerations = few(
    shaped(
        key=one_of("", "a"),
        operator=one_of("", "Equal", "Exists"),
        value=one_of("", "v"),
        effect=one_of("", "NoSchedule", "NoExecute"),
    )
)
taints = shaped(
    {"key": one_of("a", "b"), "effect": one_of("NoSchedule", "NoExecute", "PreferNoSchedule")},
    value=one_of("", "v"),
)
annotation_maps = maybe(
    st.dictionaries(
        st.sampled_from([GPU_MILLI_ANNOTATION, GPUS_ANNOTATION]),
        maybe(st.from_regex(r"\A[0-9, -]{0,12}\Z") | st.text(max_size=8)),
    )
)
metadata = shaped(
    {"name": maybe(st.text(min_size=1, max_size=6))},
    namespace=maybe(st.text(min_size=1, max_size=6)),
    labels=maybe(st.dictionaries(st.sampled_from([POD_GROUP_LABEL, "app"]), st.text(max_size=4))),
    annotations=annotation_maps,
    creationTimestamp=maybe(st.just("2024-05-01T12:00:00Z")),
)
pod_specs = shaped(
    {"containers": few(container, min_size=1)},
    initContainers=few(init_container),
    overhead=resource_lists,
    resources=resources,
    tolerations=tolerations,
    priority=maybe(st.integers()),
    affinity=affinities,
)
pod_bodies = shaped(
    {"metadata": metadata, "spec": pod_specs},
    kind=st.just("Pod"),
    status=shaped(phase=one_of("Running", "Failed")),
)
node_bodies = shaped(
    {"metadata": metadata},
    spec=shaped(taints=few(taints), unschedulable=maybe(st.booleans())),
    status=shaped(
        allocatable=resource_lists,
        capacity=resource_lists,
        conditions=few(shaped(type=one_of("Ready"), status=one_of("True", "False"))),
    ),
)


def _use_everything(parsed: Pod) -> None:
    """What the engine calls on a parsed pod: none of it may fail in another way."""
    parsed.requests()
    _ = (parsed.key, parsed.group, parsed.app, parsed.is_terminal, parsed.required_terms)
    parsed.matches_node_labels({"gpu": "a100"}, "n1")
    first_untolerated_taint([GPU_TAINT], parsed.spec.tolerations)
    for method in (parsed.gpu_milli, parsed.assigned_gpus):
        with contextlib.suppress(InvalidObjectError):
            method()


def _parse_or_error(parse: Any, body: Any) -> tuple[Any, InvalidObjectError | None]:
    try:
        return parse(body), None
    except InvalidObjectError as error:
        return None, error


@settings(max_examples=400, deadline=None)
@given(body=pod_bodies)
def test_parse_pod_raises_only_invalid_object_error(body: Any) -> None:
    parsed, error = _parse_or_error(parse_pod, body)
    if error is not None:
        assert error.obj.startswith("Pod "), f"error does not name a pod: {error}"
        return
    _use_everything(parsed)


@settings(max_examples=200, deadline=None)
@given(body=node_bodies)
def test_parse_node_raises_only_invalid_object_error(body: Any) -> None:
    parsed, error = _parse_or_error(parse_node, body)
    if error is not None:
        assert error.obj.startswith("Node "), f"error does not name a node: {error}"
        return
    parsed.allocatable_resources()
    _ = (parsed.ready, parsed.name, parsed.labels)

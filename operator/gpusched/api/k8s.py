"""Pydantic models of the Kubernetes objects the placement engine reads: Nodes and Pods.

Parsing only, no I/O. The models keep what scheduling needs and ignore every other field (real
objects carry managedFields, images, probes, volumes... that would only cost memory). What they
keep is validated the way the API server would, so a hand-written snapshot that a cluster would
refuse is refused here too, naming the object and the field (``Pod default/a:
spec.containers[0].resources.requests.cpu: ...``).

Resource quantities follow ``k8s.io/apimachinery/pkg/api/resource``: CPU is counted in
millicores, memory-like resources in bytes, everything else (``pods``, ``nvidia.com/gpu``, other
extended resources) in whole units. Fractions round up, as ``Quantity.MilliValue`` and
``Quantity.Value`` do, so a request is never under-counted.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from fractions import Fraction
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from gpusched.api.errors import (
    InvalidObjectError,
    field_error,
    format_field_path,
    from_validation_error,
)
from gpusched.api.topology import MAX_GPUS_PER_NODE

POD_GROUP_LABEL = "scheduling.gpusched.io/pod-group"
GPU_MILLI_ANNOTATION = "gpusched.io/gpu-milli"
GPUS_ANNOTATION = "gpusched.io/gpus"

MAX_ANNOTATIONS_BYTES = 256 * 1024
"""The API server's limit on all annotations of one object together (keys plus values)."""
MAX_GPUS_ANNOTATION_BYTES = 1024
"""``gpusched.io/gpus`` holds at most 64 indices; anything longer is not ours and is not read."""
MAX_QUANTITY_CHARS = 128
"""Longer quantity strings are refused unread: no real request needs them, and a 10,000-digit
number would cost real time to convert."""
INT64_MAX = 2**63 - 1
"""Quantities are int64 in Kubernetes; larger values cannot come from a real cluster."""

_SIDECAR_RESTART_POLICY = "Always"
_NO_SCHEDULE_EFFECTS = ("NoSchedule", "NoExecute")

# ---------------------------------------------------------------------------------------------
# Quantities
# ---------------------------------------------------------------------------------------------

_QUANTITY_RE = re.compile(
    r"(?P<sign>[+-]?)(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<exponent>[eE][+-]?[0-9]+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?"
)
_SUFFIX_SCALE: dict[str, Fraction] = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}
_MAX_EXPONENT = 400
"""Beyond ±400 the exponent only decides "too large" or "rounds up to 1"; clamping it keeps a
string like ``1e999999999`` from allocating a billion-digit integer."""

_BYTE_RESOURCES = frozenset({"memory", "ephemeral-storage", "storage"})
_INT64_RE = re.compile(r"[+-]?[0-9]{1,19}")


def _quantity_value(value: str | int | float) -> Fraction:
    """The exact value of a quantity, before any unit or rounding is applied."""
    if isinstance(value, bool):
        raise ValueError(f"must be a quantity, got the boolean {value}")
    if isinstance(value, int):
        number = Fraction(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"must be a finite quantity, got {value}")
        number = Fraction(Decimal(repr(value)))
    elif isinstance(value, str):
        number = _parse_quantity_string(value)
    else:
        raise ValueError(f"must be a quantity string or number, got {type(value).__name__}")
    if number < 0:
        raise ValueError(f"must not be negative, got {_show(value)}")
    return number


def _parse_quantity_string(text: str) -> Fraction:
    """Kubernetes' quantity grammar: a decimal number then a binary-SI (``Ki``..``Ei``),
    decimal-SI (``n u m k M G T P E``) or exponent (``e3``, ``E-2``) suffix, nothing else.
    Surrounding spaces are dropped, as ``Quantity.UnmarshalJSON`` does."""
    if len(text) > MAX_QUANTITY_CHARS:
        raise ValueError(f"quantity longer than {MAX_QUANTITY_CHARS} characters")
    match = _QUANTITY_RE.fullmatch(text.strip())
    if match is None:
        raise ValueError(
            f"{_show(text)} is not a quantity (want e.g. '500m', '2', '4Gi', '1G', '129e6')"
        )
    number = Fraction(match["number"])
    if match["sign"] == "-":
        number = -number
    if match["exponent"] is not None:
        return number * _power_of_ten(int(match["exponent"][1:]), number)
    return number * _SUFFIX_SCALE[match["suffix"] or ""]


def _power_of_ten(exponent: int, number: Fraction) -> Fraction:
    if exponent > _MAX_EXPONENT and number != 0:
        raise ValueError(f"exponent {exponent} is far too large")
    return Fraction(10) ** max(-_MAX_EXPONENT, min(exponent, _MAX_EXPONENT))


def _to_int64(value: Fraction, original: str | int | float) -> int:
    """Rounds up (``Quantity.Value`` semantics) and refuses what does not fit an int64."""
    result = math.ceil(value)
    if result > INT64_MAX:
        raise ValueError(f"{_show(original)} is too large (more than 2^63-1)")
    return result


def parse_cpu_milli(value: str | int | float) -> int:
    """CPU quantity in millicores: ``"500m"`` → 500, ``"2"`` → 2000, ``1.5`` → 1500.

    Like ``Quantity.MilliValue``, a fraction of a millicore rounds up (``"0.0001"`` → 1).
    Raises ``ValueError`` on anything Kubernetes would not accept, or a negative value.
    """
    return _to_int64(_quantity_value(value) * 1000, value)


def parse_bytes(value: str | int | float) -> int:
    """Memory-like quantity in bytes: ``"4Gi"``, ``"1G"``, ``"129e6"``, ``"1.5Gi"``, ``128974848``.

    Fractions of a byte round up (``"100m"`` → 1), as ``Quantity.Value`` does.
    Raises ``ValueError`` on anything Kubernetes would not accept, or a negative value.
    """
    return _to_int64(_quantity_value(value), value)


def parse_count(value: str | int | float) -> int:
    """Whole-unit quantity (``pods``, ``nvidia.com/gpu``): the API server refuses fractions of
    extended resources (``"0.5"``, ``"500m"``), so do we, with ``ValueError``. ``"2000m"`` is 2."""
    number = _quantity_value(value)
    if number.denominator != 1:
        raise ValueError(f"must be a whole number, got {_show(value)}")
    return _to_int64(number, value)


def is_byte_resource(name: str) -> bool:
    """Resources Kubernetes measures in bytes: memory, storage and every ``hugepages-<size>``."""
    return name in _BYTE_RESOURCES or name.startswith("hugepages-")


def parse_quantity(name: str, value: str | int | float) -> int:
    """The canonical integer of resource ``name``: millicores for ``cpu``, bytes for memory-like
    resources, a whole count for everything else. Raises ``ValueError``."""
    if name == "cpu":
        return parse_cpu_milli(value)
    if is_byte_resource(name):
        return parse_bytes(value)
    return parse_count(value)


def _parse_int64(text: str) -> int | None:
    """Go's ``strconv.ParseInt(text, 10, 64)``: no spaces, no underscores, in range."""
    if _INT64_RE.fullmatch(text) is None:
        return None
    number = int(text)
    return number if -(2**63) <= number <= INT64_MAX else None


def _show(value: object, limit: int = 60) -> str:
    """A value for an error message, cut short: errors must stay readable whatever the input."""
    if isinstance(value, int) and value.bit_length() > 200:
        return f"a {value.bit_length()}-bit integer"  # repr() of a huge int is slow or refused
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}...'"


# ---------------------------------------------------------------------------------------------
# Errors with exact field paths
# ---------------------------------------------------------------------------------------------


def _invalid(obj: str, error: ValidationError) -> InvalidObjectError:
    return from_validation_error(obj, error)


# ---------------------------------------------------------------------------------------------
# Shared pieces
# ---------------------------------------------------------------------------------------------


class _K8sModel(BaseModel):
    """Kubernetes objects are big and grow new fields every release: unknown fields are
    ignored, not errors. Read-only: the engine plans on copies (``model_copy(update=...)``)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)


def _quantity_input(value: object) -> str | int | float:
    """Accepts exactly what YAML or JSON can hold for a quantity (no booleans, no lists)."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise PydanticCustomError(
            "quantity_type",
            "must be a quantity string or number, got {type}",
            {"type": type(value).__name__},
        )
    return value


def _check_resource_list(resources: dict[str, str | int | float]) -> dict[str, str | int | float]:
    """Parses every entry with its unit, so bad quantities fail at parse time, naming the key."""
    for name, value in resources.items():
        if not name:
            raise field_error("resource names must not be empty")
        try:
            parse_quantity(name, value)
        except ValueError as err:
            raise field_error(str(err), name) from None
    return resources


QuantityValue = Annotated[str | int | float, PlainValidator(_quantity_input)]
ResourceList = Annotated[dict[str, QuantityValue], AfterValidator(_check_resource_list)]
"""A ``ResourceList`` as written (``{"cpu": "500m", "nvidia.com/gpu": 2}``), validated."""


def parse_resource_list(resources: Mapping[str, str | int | float]) -> dict[str, int]:
    """Every entry in its canonical unit (see `parse_quantity`)."""
    return {name: parse_quantity(name, value) for name, value in resources.items()}


def _check_annotations_size(annotations: dict[str, str]) -> dict[str, str]:
    """The API server caps annotations at 256 KiB together; more is not from a real cluster and
    is refused before anything reads it."""
    size = sum(_utf8_len(key) + _utf8_len(value) for key, value in annotations.items())
    if size > MAX_ANNOTATIONS_BYTES:
        raise field_error(f"total size {size} bytes exceeds {MAX_ANNOTATIONS_BYTES} bytes")
    return annotations


def _utf8_len(text: str) -> int:
    # surrogatepass: a lone surrogate (possible in JSON) must count, not crash the check.
    return len(text.encode("utf-8", "surrogatepass"))


class OwnerReference(_K8sModel):
    """``uid`` is optional because objects read from files (``simulate``) have none."""

    api_version: str = Field(alias="apiVersion")
    kind: str
    name: str
    uid: str | None = None
    controller: bool | None = None
    block_owner_deletion: bool | None = Field(default=None, alias="blockOwnerDeletion")


class ObjectMeta(_K8sModel):
    """The part of ``metadata`` the scheduler uses. ``namespace`` defaults to ``default`` as
    kubectl does for namespaced objects (and is meaningless for Nodes)."""

    name: str = Field(min_length=1)
    namespace: str = Field(default="default", min_length=1)
    uid: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: Annotated[dict[str, str], AfterValidator(_check_annotations_size)] = Field(
        default_factory=dict
    )
    creation_timestamp: datetime | None = Field(default=None, alias="creationTimestamp")
    deletion_timestamp: datetime | None = Field(default=None, alias="deletionTimestamp")
    """Set while the object is being deleted; a terminating pod still holds its resources."""
    owner_references: list[OwnerReference] = Field(default_factory=list, alias="ownerReferences")


# ---------------------------------------------------------------------------------------------
# Taints and tolerations
# ---------------------------------------------------------------------------------------------

TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class Taint(_K8sModel):
    key: str = Field(min_length=1)
    value: str = ""
    effect: TaintEffect


class Toleration(_K8sModel):
    """A pod's toleration. An empty ``key`` or ``effect`` is read as ``None`` (meaning "any"),
    an empty ``operator`` as ``Equal``, exactly as the API server defaults them."""

    key: str | None = None
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str | None = None
    effect: TaintEffect | None = None
    toleration_seconds: int | None = Field(default=None, alias="tolerationSeconds")

    @field_validator("key", "effect", mode="before")
    @classmethod
    def _empty_is_any(cls, value: object) -> object:
        return None if value == "" else value

    @field_validator("operator", mode="before")
    @classmethod
    def _empty_is_equal(cls, value: object) -> object:
        return "Equal" if value in ("", None) else value

    @model_validator(mode="after")
    def _check_operator(self) -> Toleration:
        """API-server validation: a keyless toleration must be ``Exists`` (it would otherwise
        tolerate every taint with a given value, which nobody means), and ``Exists`` takes no
        value."""
        if self.key is None and self.operator == "Equal":
            raise field_error("must be Exists when key is empty", "operator")
        if self.operator == "Exists" and self.value:
            raise field_error("must be empty when operator is Exists", "value")
        return self

    def tolerates(self, taint: Taint) -> bool:
        """Kubernetes' ``Toleration.ToleratesTaint``: effect and key match when given (or are
        empty, matching all), then ``Exists`` matches any value and ``Equal`` the same value."""
        if self.effect is not None and self.effect != taint.effect:
            return False
        if self.key is not None and self.key != taint.key:
            return False
        return self.operator == "Exists" or (self.value or "") == taint.value


def first_untolerated_taint(
    taints: Iterable[Taint],
    tolerations: Sequence[Toleration],
    effects: Iterable[str] = _NO_SCHEDULE_EFFECTS,
) -> Taint | None:
    """The first taint with one of ``effects`` that no toleration tolerates, or ``None``.

    By default only ``NoSchedule`` and ``NoExecute`` taints count, as in the kube-scheduler's
    TaintToleration filter (``PreferNoSchedule`` is a preference, not a filter). The taint is
    returned, not a bool, so the engine can say which taint kept a pod off a node.
    """
    wanted = set(effects)
    for taint in taints:
        if taint.effect in wanted and not any(tol.tolerates(taint) for tol in tolerations):
            return taint
    return None


# ---------------------------------------------------------------------------------------------
# Node affinity
# ---------------------------------------------------------------------------------------------

SelectorOperator = Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]


class NodeSelectorRequirement(_K8sModel):
    """One ``matchExpressions`` (or ``matchFields``) entry, validated as the API server does."""

    key: str = Field(min_length=1)
    operator: SelectorOperator
    values: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check_values(self) -> NodeSelectorRequirement:
        count = len(self.values)
        if self.operator in ("In", "NotIn") and count == 0:
            raise field_error(f"must not be empty when operator is {self.operator}", "values")
        if self.operator in ("Exists", "DoesNotExist") and count != 0:
            raise field_error(f"must be empty when operator is {self.operator}", "values")
        if self.operator in ("Gt", "Lt") and (count != 1 or _parse_int64(self.values[0]) is None):
            raise field_error(
                f"must be exactly one integer when operator is {self.operator}", "values"
            )
        return self

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Label-selector semantics: ``NotIn`` and ``DoesNotExist`` match nodes without the
        label; ``Gt``/``Lt`` never match a missing or non-integer label."""
        present = self.key in labels
        match self.operator:
            case "In":
                return present and labels[self.key] in self.values
            case "NotIn":
                return not present or labels[self.key] not in self.values
            case "Exists":
                return present
            case "DoesNotExist":
                return not present
            case _:
                return present and self._compare(labels[self.key])

    def _compare(self, label: str) -> bool:
        actual = _parse_int64(label)
        bound = _parse_int64(self.values[0])
        if actual is None or bound is None:
            return False
        return actual > bound if self.operator == "Gt" else actual < bound


NODE_NAME_FIELD = "metadata.name"


class NodeSelectorTerm(_K8sModel):
    """Requirements that must all hold. ``matchFields`` can only name ``metadata.name``."""

    match_expressions: list[NodeSelectorRequirement] = Field(
        default_factory=list, alias="matchExpressions"
    )
    match_fields: list[NodeSelectorRequirement] = Field(default_factory=list, alias="matchFields")

    @field_validator("match_fields")
    @classmethod
    def _only_node_name(
        cls, fields: list[NodeSelectorRequirement]
    ) -> list[NodeSelectorRequirement]:
        """The API server allows exactly ``metadata.name`` with ``In``/``NotIn`` and one value."""
        for index, field in enumerate(fields):
            if field.key != NODE_NAME_FIELD:
                raise field_error(f"must be {NODE_NAME_FIELD}", index, "key")
            if field.operator not in ("In", "NotIn"):
                raise field_error("must be In or NotIn for matchFields", index, "operator")
            if len(field.values) != 1:
                raise field_error("must be exactly one node name", index, "values")
        return fields

    def matches(self, labels: Mapping[str, str], node_name: str) -> bool:
        """All requirements ANDed. An empty term matches no node, as in Kubernetes (it is
        almost always a mistake, and matching everything would hide it)."""
        if not self.match_expressions and not self.match_fields:
            return False
        fields = {NODE_NAME_FIELD: node_name}
        return all(req.matches(labels) for req in self.match_expressions) and all(
            req.matches(fields) for req in self.match_fields
        )


def required_terms_match(
    terms: Sequence[NodeSelectorTerm], labels: Mapping[str, str], node_name: str
) -> bool:
    """Terms are ORed; no terms at all matches no node (the API server refuses an empty list)."""
    return any(term.matches(labels, node_name) for term in terms)


# ---------------------------------------------------------------------------------------------
# Node
# ---------------------------------------------------------------------------------------------


class NodeCondition(_K8sModel):
    type: str
    status: str
    reason: str | None = None
    message: str | None = None


class NodeSpec(_K8sModel):
    unschedulable: bool = False
    taints: list[Taint] = Field(default_factory=list)


class NodeStatus(_K8sModel):
    allocatable: ResourceList | None = None
    """``None`` when absent; then `Node.allocatable_resources` falls back to ``capacity``."""
    capacity: ResourceList = Field(default_factory=dict)
    conditions: list[NodeCondition] | None = None
    """``None`` when absent (hand-written snapshots); ``[]`` when present but empty."""


class Node(_K8sModel):
    metadata: ObjectMeta
    spec: NodeSpec = Field(default_factory=NodeSpec)
    status: NodeStatus = Field(default_factory=NodeStatus)

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def labels(self) -> dict[str, str]:
        return self.metadata.labels

    @property
    def annotations(self) -> dict[str, str]:
        return self.metadata.annotations

    @property
    def ready(self) -> bool:
        """``Ready`` condition is ``"True"``.

        When ``status.conditions`` is absent altogether the node counts as ready: that is a
        hand-written snapshot, and making every author spell out a Ready condition would only
        add noise. A node that lists conditions but no ``Ready=True`` (kubelet stopped
        reporting, or reports ``False``/``Unknown``) is not ready: there the silence means
        something.
        """
        conditions = self.status.conditions
        if conditions is None:
            return True
        ready = next((c for c in conditions if c.type == "Ready"), None)
        return ready is not None and ready.status == "True"

    def allocatable_resources(self) -> dict[str, int]:
        """``status.allocatable`` in canonical units (`parse_quantity`); ``status.capacity``
        when allocatable is absent, as in snapshots that only state what the node has."""
        status = self.status
        return parse_resource_list(
            status.allocatable if status.allocatable is not None else status.capacity
        )


# ---------------------------------------------------------------------------------------------
# Pod
# ---------------------------------------------------------------------------------------------


def _is_extended_resource(name: str) -> bool:
    """Kubernetes' ``IsExtendedResourceName``: domain-qualified, outside ``kubernetes.io``."""
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


class ResourceRequirements(_K8sModel):
    requests: ResourceList = Field(default_factory=dict)
    limits: ResourceList = Field(default_factory=dict)

    @model_validator(mode="after")
    def _requests_within_limits(self) -> ResourceRequirements:
        """API-server validation: a request may not exceed its limit, and extended resources
        (GPUs) cannot be overcommitted, so their request must equal the limit."""
        for name, value in self.requests.items():
            if name not in self.limits:
                continue
            request, limit = parse_quantity(name, value), parse_quantity(name, self.limits[name])
            if _is_extended_resource(name) and request != limit:
                raise field_error(
                    f"must equal the limit {_show(self.limits[name])}", "requests", name
                )
            if request > limit:
                raise field_error(
                    f"must not exceed the limit {_show(self.limits[name])}", "requests", name
                )
        return self

    def effective_requests(self) -> dict[str, int]:
        """Requests in canonical units; a resource with a limit and no request requests its
        limit (the API server's defaulting, so ``limits: {nvidia.com/gpu: 1}`` asks for 1)."""
        return parse_resource_list({**self.limits, **self.requests})


class Container(_K8sModel):
    name: str = Field(min_length=1)
    resources: ResourceRequirements = Field(default_factory=ResourceRequirements)
    restart_policy: Literal["Always", "OnFailure", "Never"] | None = Field(
        default=None, alias="restartPolicy"
    )
    """On an init container, ``Always`` makes it a sidecar that runs beside the app."""


class NodeSelector(_K8sModel):
    node_selector_terms: list[NodeSelectorTerm] = Field(alias="nodeSelectorTerms")


class NodeAffinity(_K8sModel):
    required: NodeSelector | None = Field(
        default=None, alias="requiredDuringSchedulingIgnoredDuringExecution"
    )


class Affinity(_K8sModel):
    node_affinity: NodeAffinity | None = Field(default=None, alias="nodeAffinity")


class PodResourceClaim(_K8sModel):
    """One ``spec.resourceClaims`` entry: a claim by name, or one made from a template."""

    name: str
    resource_claim_name: str | None = Field(default=None, alias="resourceClaimName")
    resource_claim_template_name: str | None = Field(
        default=None, alias="resourceClaimTemplateName"
    )


class PodResourceClaimStatus(_K8sModel):
    name: str
    resource_claim_name: str | None = Field(default=None, alias="resourceClaimName")


class ExtendedResourceClaimStatus(_K8sModel):
    resource_claim_name: str = Field(default="", alias="resourceClaimName")


class PodSchedulingGate(_K8sModel):
    """One entry of ``spec.schedulingGates``: while any is left, no scheduler places the pod."""

    name: str = Field(min_length=1)


class PodSpec(_K8sModel):
    containers: list[Container] = Field(min_length=1)
    init_containers: list[Container] = Field(default_factory=list, alias="initContainers")
    overhead: ResourceList = Field(default_factory=dict)
    resources: ResourceRequirements | None = None
    """Pod-level resources (``PodLevelResources``); when set they replace the sum of the
    containers for the resources they name."""
    node_selector: dict[str, str] = Field(default_factory=dict, alias="nodeSelector")
    affinity: Affinity | None = None
    tolerations: list[Toleration] = Field(default_factory=list)
    priority: int | None = Field(default=None, ge=-(2**31), le=2**31 - 1)
    scheduler_name: str = Field(default="default-scheduler", alias="schedulerName")
    node_name: str | None = Field(default=None, alias="nodeName")
    resource_claims: list[PodResourceClaim] = Field(default_factory=list, alias="resourceClaims")
    scheduling_gates: list[PodSchedulingGate] = Field(default_factory=list, alias="schedulingGates")


class PodStatus(_K8sModel):
    phase: Literal["Pending", "Running", "Succeeded", "Failed", "Unknown"] | None = None
    resource_claim_statuses: list[PodResourceClaimStatus] = Field(
        default_factory=list, alias="resourceClaimStatuses"
    )
    extended_resource_claim_status: ExtendedResourceClaimStatus | None = Field(
        default=None, alias="extendedResourceClaimStatus"
    )


def _add_into(total: dict[str, int], extra: Mapping[str, int]) -> None:
    for name, value in extra.items():
        total[name] = total.get(name, 0) + value


def _max_into(total: dict[str, int], other: Mapping[str, int]) -> None:
    for name, value in other.items():
        total[name] = max(total.get(name, 0), value)


_GPU_MILLI_RE = re.compile(r"[0-9]{1,4}")
_GPU_INDEX_RE = re.compile(r"[0-9]{1,3}")


class Pod(_K8sModel):
    metadata: ObjectMeta
    spec: PodSpec
    status: PodStatus = Field(default_factory=PodStatus)

    @property
    def key(self) -> str:
        """``namespace/name``: the pod's identity in messages, bindings and sort keys."""
        return f"{self.metadata.namespace}/{self.metadata.name}"

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def namespace(self) -> str:
        return self.metadata.namespace

    @property
    def labels(self) -> dict[str, str]:
        return self.metadata.labels

    @property
    def group(self) -> str | None:
        """Name of the pod's PodGroup (same namespace), from label ``POD_GROUP_LABEL``."""
        return self.metadata.labels.get(POD_GROUP_LABEL)

    @property
    def app(self) -> str | None:
        """The application, for GPU app-affinity scoring: label ``app``, else
        ``app.kubernetes.io/name``."""
        labels = self.metadata.labels
        return labels.get("app") or labels.get("app.kubernetes.io/name")

    @property
    def scheduling_gates(self) -> tuple[str, ...]:
        """Names of the pod's scheduling gates, in order; empty when it may be scheduled."""
        return tuple(gate.name for gate in self.spec.scheduling_gates)

    @property
    def is_terminal(self) -> bool:
        """Succeeded or Failed pods hold no resources any more."""
        return self.status.phase in ("Succeeded", "Failed")

    @property
    def required_terms(self) -> tuple[NodeSelectorTerm, ...] | None:
        """Required node-affinity terms (ORed), or ``None`` when the pod has none."""
        affinity = self.spec.affinity
        node_affinity = affinity.node_affinity if affinity is not None else None
        if node_affinity is None or node_affinity.required is None:
            return None
        return tuple(node_affinity.required.node_selector_terms)

    def matches_node_labels(self, labels: Mapping[str, str], node_name: str) -> bool:
        """``spec.nodeSelector`` and required node affinity together, as the kube-scheduler's
        NodeAffinity filter combines them (both must hold)."""
        if any(labels.get(key) != value for key, value in self.spec.node_selector.items()):
            return False
        terms = self.required_terms
        return terms is None or required_terms_match(terms, labels, node_name)

    def requests(self) -> dict[str, int]:
        """The pod's effective request per resource, as Kubernetes' ``PodRequests`` computes it.

        Phases: (1) app containers and sidecars run together, so they add up; (2) each regular
        init container runs alone beside the sidecars started before it, so the pod needs the
        largest of those moments; (3) the pod needs the larger of (1) and (2); (4) pod-level
        resources, when given, replace the result for their resources; (5) overhead is added.
        Always has ``"pods": 1``; resources that come to 0 are left out.
        """
        total = self._running_requests()
        _max_into(total, self._init_peak_requests())
        if self.spec.resources is not None:
            total.update(self.spec.resources.effective_requests())
        _add_into(total, parse_resource_list(self.spec.overhead))
        total["pods"] = 1
        return {name: value for name, value in total.items() if value != 0}

    def _running_requests(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for container in self.spec.containers:
            _add_into(total, container.resources.effective_requests())
        for init in self.spec.init_containers:
            if init.restart_policy == _SIDECAR_RESTART_POLICY:
                _add_into(total, init.resources.effective_requests())
        return total

    def _init_peak_requests(self) -> dict[str, int]:
        sidecars: dict[str, int] = {}
        peak: dict[str, int] = {}
        for init in self.spec.init_containers:
            moment = init.resources.effective_requests()
            if init.restart_policy == _SIDECAR_RESTART_POLICY:
                _add_into(sidecars, moment)
                moment = dict(sidecars)
            else:
                _add_into(moment, sidecars)
            _max_into(peak, moment)
        return peak

    def gpu_milli(self) -> int | None:
        """Share of one GPU from annotation ``GPU_MILLI_ANNOTATION`` (1..999), or ``None``.

        Raises `InvalidObjectError` naming the annotation: a share that cannot be read must
        not silently become a whole GPU or no GPU.
        """
        value = self.metadata.annotations.get(GPU_MILLI_ANNOTATION)
        if value is None:
            return None
        milli = int(value) if _GPU_MILLI_RE.fullmatch(value) else 0
        if not 1 <= milli <= 999:
            raise self._annotation_error(
                GPU_MILLI_ANNOTATION,
                f"must be an integer 1..999 (thousandths of one GPU), got {_show(value)}",
            )
        return milli

    def assigned_gpus(self) -> tuple[int, ...] | None:
        """GPU indices from annotation ``GPUS_ANNOTATION`` (``"0,1,3"`` → ``(0, 1, 3)``), in
        the order written, or ``None``; ``""`` is ``()``. Raises `InvalidObjectError` naming
        the annotation when it is not a short list of distinct indices below 64."""
        value = self.metadata.annotations.get(GPUS_ANNOTATION)
        if value is None:
            return None
        try:
            return _parse_gpu_indices(value)
        except ValueError as err:
            raise self._annotation_error(GPUS_ANNOTATION, str(err)) from None

    def _annotation_error(self, annotation: str, message: str) -> InvalidObjectError:
        return InvalidObjectError(
            f"Pod {self.key}", format_field_path(["metadata", "annotations", annotation]), message
        )


def _parse_gpu_indices(value: str) -> tuple[int, ...]:
    if _utf8_len(value) > MAX_GPUS_ANNOTATION_BYTES:
        raise ValueError(f"longer than {MAX_GPUS_ANNOTATION_BYTES} bytes")
    if not value.strip():
        return ()
    parts = [part.strip() for part in value.split(",")]
    if len(parts) > MAX_GPUS_PER_NODE:
        raise ValueError(f"more than {MAX_GPUS_PER_NODE} GPU indices")
    indices: list[int] = []
    for part in parts:
        index = int(part) if _GPU_INDEX_RE.fullmatch(part) else MAX_GPUS_PER_NODE
        if index >= MAX_GPUS_PER_NODE:
            raise ValueError(
                f"{_show(part)} is not a GPU index 0..{MAX_GPUS_PER_NODE - 1} (want e.g. '0,1,3')"
            )
        if index in indices:
            raise ValueError(f"GPU index {index} is listed twice")
        indices.append(index)
    return tuple(indices)


# ---------------------------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------------------------

_MAX_NAME_IN_ERRORS = 253
_ModelT = TypeVar("_ModelT", bound=BaseModel)


def _describe(kind: str, raw: object, namespaced: bool) -> str:
    """``Pod ns/name`` or ``Node name``, as well as a possibly broken body allows, so an error
    always says which object it is about."""
    meta = raw.get("metadata") if isinstance(raw, Mapping) else None
    name = meta.get("name") if isinstance(meta, Mapping) else None
    name = name[:_MAX_NAME_IN_ERRORS] if isinstance(name, str) and name else "<unnamed>"
    if not namespaced:
        return f"{kind} {name}"
    namespace = meta.get("namespace") if isinstance(meta, Mapping) else None
    if not isinstance(namespace, str) or not namespace:
        namespace = "default"
    return f"{kind} {namespace[:_MAX_NAME_IN_ERRORS]}/{name}"


def _check_kind(obj: str, raw: Mapping[str, Any], kind: str) -> None:
    found = raw.get("kind")
    if found is not None and found != kind:
        raise InvalidObjectError(obj, "kind", f"must be {kind}, got {_show(found)}")


def _validate(model: type[_ModelT], kind: str, raw: object, namespaced: bool) -> _ModelT:
    obj = _describe(kind, raw, namespaced)
    if not isinstance(raw, Mapping):
        raise InvalidObjectError(obj, "", f"must be a mapping, got {type(raw).__name__}")
    _check_kind(obj, raw, kind)
    try:
        return model.model_validate(raw)
    except ValidationError as err:
        raise _invalid(obj, err) from None


def parse_node(raw: Mapping[str, Any]) -> Node:
    """A Node from its JSON/YAML body. Raises `InvalidObjectError` naming node and field."""
    return _validate(Node, "Node", raw, namespaced=False)


def parse_pod(raw: Mapping[str, Any]) -> Pod:
    """A Pod from its JSON/YAML body. Raises `InvalidObjectError` naming pod and field."""
    return _validate(Pod, "Pod", raw, namespaced=True)

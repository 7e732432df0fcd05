"""Our three custom resources: `PodGroup`, `CompositePodGroup` and `Workload`.

Group ``scheduling.gpusched.io``, version ``v1alpha1``, all namespaced. Field names mirror the
upstream Kubernetes Workload API (KEP-4671, KEP-5732) so that a later move to the in-tree
objects is a rename, not a redesign.

Specs are what users write, so they are strict: unknown fields are errors (a typo such as
``minCont`` must not silently become "no gang"). Statuses are ours to write, so they are
permissive: a field added by a newer operator version must not make an object unreadable.

Name rules live in `gpusched.api.names`, the statuses in `gpusched.api.status`, and turning a
Workload into its groups in `gpusched.api.materialize`.

Every parser raises `InvalidObjectError` naming the object (``PodGroup default/train``) and the
field as the user wrote it (``spec.compositePodGroupTemplates[0].podGroupTemplates[1].name``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from enum import StrEnum
from typing import Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from gpusched.api.errors import (
    InvalidObjectError,
    field_error,
    format_field_path,
    from_validation_error,
)
from gpusched.api.meta import ObjectMeta as _KubeObjectMeta
from gpusched.api.names import DnsLabel, DnsSubdomain, LabelKey, check_dns_subdomain
from gpusched.api.segments import SEGMENT_SIZE_ANNOTATION, segment_problem, segment_size_annotation
from gpusched.api.status import GroupStatus, WorkloadStatus

GROUP = "scheduling.gpusched.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

DEFAULT_SCHEDULE_TIMEOUT_SECONDS = 300
"""How long a PodGroup may wait for a complete placement before it is marked Unschedulable.
Measured in seconds; five minutes is long enough for a cluster autoscaler to add a node."""

MAX_TEMPLATE_DEPTH = 8
"""Most levels of nested composite templates in one Workload. Real topologies have a handful
of levels (zone > block > rack > node); a deeper tree is a mistake, not a topology."""

# The condition every group carries; `Reason` holds the reasons it may have.
CONDITION_SCHEDULED = "PodGroupScheduled"
CONDITION_MATERIALIZED = "Materialized"


class Reason(StrEnum):
    """Reason codes of the ``PodGroupScheduled`` condition, of pending pods and of Events: the
    engine decides some, the scheduling service the others."""

    SCHEDULED = "Scheduled"
    UNSCHEDULABLE = "Unschedulable"
    INVALID = "Invalid"
    WAITING_FOR_PODS = "WaitingForPods"
    """A gang has fewer pods (or a CompositePodGroup fewer child groups) than its minimum."""
    SCHEDULING_GATED = "SchedulingGated"
    """A pod with ``spec.schedulingGates`` left: not placed, not counted toward its gang, until
    every gate is removed (Kubernetes' own reason for its ``PodScheduled=False`` condition)."""
    SCHEDULER_ERROR = "SchedulerError"
    TIMEOUT = "Timeout"
    """A group waited longer than its schedule timeout for a complete placement."""
    BINDING = "Binding"
    """A gang below its minCount has pods bound and binds of the rest in flight or retried."""
    DEGRADED = "Degraded"
    """A gang below its minCount has pods bound and the rest waiting to be placed again (their
    room was lost: a refused bind, a node gone, a pod re-created); it is placed first."""
    PREEMPTING = "Preempting"
    """A group that did not fit has room nominated for it (its pods' ``nominatedNodeName``)
    and waits for the lower-priority victims evicted there to go; then it is bound there."""


# --- spec building blocks ---------------------------------------------------------------------


class _Spec(BaseModel):
    """What users write: unknown fields rejected, camelCase on the wire, snake_case in code."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class GangPolicy(_Spec):
    """All-or-nothing: no pod of the group is bound until ``minCount`` of them can be."""

    min_count: int = Field(alias="minCount", ge=1)


class BasicPolicy(_Spec):
    """No gang: each pod is placed as soon as it fits (the group only carries constraints)."""


class PreemptionPolicy(StrEnum):
    """Whether a group that does not fit may evict lower-priority pods (upstream's values)."""

    PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"
    NEVER = "Never"


class DisruptionMode(StrEnum):
    """How a group may be disrupted (upstream's values): ``All`` evicts the group (and,
    when it is a child, the whole group tree under its highest ``All`` ancestor) together or
    not at all; ``Single`` lets pods go one by one. Unset means ``Single``, as upstream."""

    ALL = "All"
    SINGLE = "Single"


PRIORITY_MIN = -(2**31)
PRIORITY_MAX = 2**31 - 1
"""Priorities are int32 in Kubernetes (``PriorityClass.value``, ``Pod.spec.priority``)."""


class PriorityFields(_Spec):
    """Priority and disruption fields, named and placed as upstream's PodGroup spec places
    them. ``priority`` is resolved from the PriorityClass when only ``priorityClassName`` is
    given, and from the pods' own priority when neither is (`gpusched.api.priority`)."""

    priority_class_name: DnsSubdomain | None = Field(default=None, alias="priorityClassName")
    priority: int | None = Field(default=None, ge=PRIORITY_MIN, le=PRIORITY_MAX)
    preemption_policy: PreemptionPolicy | None = Field(default=None, alias="preemptionPolicy")
    """Unset: the PriorityClass's policy, else ``PreemptLowerPriority``."""
    disruption_mode: DisruptionMode | None = Field(default=None, alias="disruptionMode")


class PodGroupSchedulingPolicy(_Spec):
    """Exactly one of ``gang`` or ``basic``, as upstream: the choice must be explicit."""

    gang: GangPolicy | None = None
    basic: BasicPolicy | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> PodGroupSchedulingPolicy:
        if (self.gang is None) == (self.basic is None):
            raise ValueError("exactly one of gang or basic must be set")
        return self


class TopologyConstraint(_Spec):
    """All pods of the group land in nodes sharing one value of the node label ``key``."""

    key: LabelKey


class SchedulingConstraints(_Spec):
    """A list for upstream compatibility; one entry at most because the engine places a group
    in a single domain of a single level."""

    topology: list[TopologyConstraint] = Field(default_factory=list, max_length=1)


class PodGroupTopologyConstraint(TopologyConstraint):
    """A PodGroup's constraint may split the gang into segments (`gpusched.api.segments`)."""

    segment_size: int | None = Field(default=None, alias="segmentSize", ge=1)
    """Pods per segment: the gang is placed as segments of this many pods, each inside one
    domain of ``key``, the segments as close together as ``topologyLevels`` allows. Must
    divide ``minCount``. Unset: the whole gang inside one domain."""


class PodGroupSchedulingConstraints(_Spec):
    """`SchedulingConstraints` with segments."""

    topology: list[PodGroupTopologyConstraint] = Field(default_factory=list, max_length=1)

    @property
    def segment_size(self) -> int | None:
        return self.topology[0].segment_size if self.topology else None


def _check_segments(
    policy: PodGroupSchedulingPolicy, constraints: PodGroupSchedulingConstraints | None
) -> None:
    """A ``segmentSize`` that cannot segment the gang, as a field error."""
    size = constraints.segment_size if constraints is not None else None
    if size is None or constraints is None:
        return
    gang = policy.gang.min_count if policy.gang is not None else None
    problem = segment_problem(size, gang, constraints.topology[0].key)
    if problem is not None:
        subpath = ("schedulingConstraints", "topology", 0, "segmentSize")
        raise field_error(problem, *subpath)


class WorkloadRef(_Spec):
    """Which Workload template an object was materialised from."""

    workload_name: DnsSubdomain = Field(alias="workloadName")
    template_name: DnsLabel = Field(alias="templateName")


class PodGroupSpec(PriorityFields):
    scheduling_policy: PodGroupSchedulingPolicy = Field(alias="schedulingPolicy")
    scheduling_constraints: PodGroupSchedulingConstraints | None = Field(
        default=None, alias="schedulingConstraints"
    )
    parent_composite_pod_group_name: DnsSubdomain | None = Field(
        default=None, alias="parentCompositePodGroupName"
    )
    """Name of the CompositePodGroup (same namespace) this group is one child of."""
    workload_ref: WorkloadRef | None = Field(default=None, alias="workloadRef")
    schedule_timeout_seconds: int = Field(
        default=DEFAULT_SCHEDULE_TIMEOUT_SECONDS, alias="scheduleTimeoutSeconds", ge=1
    )
    """Seconds; see `DEFAULT_SCHEDULE_TIMEOUT_SECONDS`."""

    @model_validator(mode="after")
    def _segments(self) -> PodGroupSpec:
        _check_segments(self.scheduling_policy, self.scheduling_constraints)
        return self


class CompositeGangPolicy(_Spec):
    """All-or-nothing over child groups: at least ``minGroupCount`` of them placed together."""

    min_group_count: int = Field(alias="minGroupCount", ge=1)


class CompositePodGroupSchedulingPolicy(_Spec):
    gang: CompositeGangPolicy


class CompositePodGroupSpec(PriorityFields):
    scheduling_policy: CompositePodGroupSchedulingPolicy = Field(alias="schedulingPolicy")
    scheduling_constraints: SchedulingConstraints | None = Field(
        default=None, alias="schedulingConstraints"
    )
    parent_composite_pod_group_name: DnsSubdomain | None = Field(
        default=None, alias="parentCompositePodGroupName"
    )
    workload_ref: WorkloadRef | None = Field(default=None, alias="workloadRef")


# --- Workload templates -----------------------------------------------------------------------


class PodGroupTemplate(PriorityFields):
    name: DnsLabel
    scheduling_policy: PodGroupSchedulingPolicy = Field(alias="schedulingPolicy")
    scheduling_constraints: PodGroupSchedulingConstraints | None = Field(
        default=None, alias="schedulingConstraints"
    )

    @model_validator(mode="after")
    def _segments(self) -> PodGroupTemplate:
        _check_segments(self.scheduling_policy, self.scheduling_constraints)
        return self


class CompositePodGroupTemplate(PriorityFields):
    name: DnsLabel
    scheduling_policy: CompositePodGroupSchedulingPolicy = Field(alias="schedulingPolicy")
    scheduling_constraints: SchedulingConstraints | None = Field(
        default=None, alias="schedulingConstraints"
    )
    pod_group_templates: list[PodGroupTemplate] = Field(
        default_factory=list, alias="podGroupTemplates"
    )
    composite_pod_group_templates: list[CompositePodGroupTemplate] = Field(
        default_factory=list, alias="compositePodGroupTemplates"
    )

    @model_validator(mode="after")
    def _satisfiable(self) -> CompositePodGroupTemplate:
        """Each child template makes one group, so a gang over more groups than there are
        children could never be placed; say so now rather than leave it Pending forever."""
        children = len(self.pod_group_templates) + len(self.composite_pod_group_templates)
        if children == 0:
            raise ValueError("a composite template needs at least one child template")
        wanted = self.scheduling_policy.gang.min_group_count
        if wanted > children:
            raise field_error(
                f"minGroupCount is {wanted} but the template has only {children} child templates",
                "schedulingPolicy",
                "gang",
                "minGroupCount",
            )
        return self


_AnyTemplate = PodGroupTemplate | CompositePodGroupTemplate


_Path = tuple[str | int, ...]


def _children(
    parent: WorkloadSpec | CompositePodGroupTemplate, path: _Path
) -> Iterator[tuple[_Path, _AnyTemplate]]:
    """Direct child templates with their paths, in spec order (pod groups, then composites)."""
    for i, pod_group in enumerate(parent.pod_group_templates):
        yield (*path, "podGroupTemplates", i), pod_group
    for i, composite in enumerate(parent.composite_pod_group_templates):
        yield (*path, "compositePodGroupTemplates", i), composite


def _all_templates(
    parent: WorkloadSpec | CompositePodGroupTemplate, path: _Path = (), depth: int = 1
) -> Iterator[tuple[_Path, int, _AnyTemplate]]:
    """Every template of the tree, parents before children, with its path and depth."""
    for child_path, child in _children(parent, path):
        yield child_path, depth, child
        if isinstance(child, CompositePodGroupTemplate):
            yield from _all_templates(child, child_path, depth + 1)


class WorkloadSpec(_Spec):
    pod_group_templates: list[PodGroupTemplate] = Field(
        default_factory=list, alias="podGroupTemplates"
    )
    composite_pod_group_templates: list[CompositePodGroupTemplate] = Field(
        default_factory=list, alias="compositePodGroupTemplates"
    )

    @model_validator(mode="after")
    def _check_tree(self) -> WorkloadSpec:
        """At least one template; at most `MAX_TEMPLATE_DEPTH` levels; names unique in the whole
        tree, not only among siblings: every template becomes an object named
        ``<workload>-<template>`` in one namespace, so two ``workers`` under different parents
        would collide."""
        if not self.pod_group_templates and not self.composite_pod_group_templates:
            raise ValueError(
                "a Workload needs at least one podGroupTemplate or compositePodGroupTemplate"
            )
        first_seen: dict[str, str] = {}
        for path, depth, template in _all_templates(self):
            if depth > MAX_TEMPLATE_DEPTH:
                message = f"templates are nested more than {MAX_TEMPLATE_DEPTH} levels deep"
                raise field_error(message, *path)
            if template.name in first_seen:
                message = (
                    f"template name '{template.name}' is already used at "
                    f"{first_seen[template.name]}"
                )
                raise field_error(message, *path, "name")
            first_seen[template.name] = format_field_path(("spec", *path, "name"))
        _check_disruption_modes(self, ())
        return self


def _check_disruption_modes(parent: WorkloadSpec | CompositePodGroupTemplate, path: _Path) -> None:
    """Under a composite evicted whole (``All``), no child may ask to lose pods one by one:
    upstream refuses that contradiction too."""
    whole = isinstance(parent, CompositePodGroupTemplate) and parent.disruption_mode is (
        DisruptionMode.ALL
    )
    for child_path, child in _children(parent, path):
        if whole and child.disruption_mode is DisruptionMode.SINGLE:
            message = "is Single, but its parent template's disruptionMode is All"
            raise field_error(message, *child_path, "disruptionMode")
        if isinstance(child, CompositePodGroupTemplate):
            _check_disruption_modes(child, child_path)


# --- status -----------------------------------------------------------------------------------


# --- objects ----------------------------------------------------------------------------------


class ObjectMeta(_KubeObjectMeta):
    """Kubernetes metadata with our objects' naming rules: the name becomes a label value of
    pods and part of generated names, so it must be a DNS subdomain, the namespace a label."""

    name: DnsSubdomain
    namespace: DnsLabel = "default"


class _Object(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    api_version: Literal["scheduling.gpusched.io/v1alpha1"] = Field(alias="apiVersion")
    kind: str
    """Narrowed to one literal by each subclass."""
    metadata: ObjectMeta

    @property
    def key(self) -> str:
        """``namespace/name``, the key every cache and log line uses."""
        return f"{self.metadata.namespace}/{self.metadata.name}"

    def to_manifest(self) -> dict[str, Any]:
        """The object as the API server wants it: camelCase, no nulls, JSON types."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class PodGroup(_Object):
    kind: Literal["PodGroup"]
    spec: PodGroupSpec
    status: GroupStatus | None = None

    @property
    def segment_size(self) -> int | None:
        """Pods per segment: the field, else the annotation (`gpusched.api.segments`)."""
        constraints = self.spec.scheduling_constraints
        field = constraints.segment_size if constraints is not None else None
        return field if field is not None else segment_size_annotation(self.metadata.annotations)

    @model_validator(mode="after")
    def _segment_annotation(self) -> PodGroup:
        """The annotation is checked as the field is, and must not contradict it."""
        subpath = ("metadata", "annotations", SEGMENT_SIZE_ANNOTATION)
        try:
            size = segment_size_annotation(self.metadata.annotations)
        except ValueError as error:
            raise field_error(str(error), *subpath) from None
        if size is None:
            return self
        constraints = self.spec.scheduling_constraints
        field = constraints.segment_size if constraints is not None else None
        if field is not None and field != size:
            message = (
                f"{size} contradicts spec.schedulingConstraints.topology[0].segmentSize {field}"
            )
            raise field_error(message, *subpath)
        gang = self.spec.scheduling_policy.gang
        key = constraints.topology[0].key if constraints and constraints.topology else None
        problem = segment_problem(size, gang.min_count if gang else None, key)
        if problem is not None:
            raise field_error(problem, *subpath)
        return self


class CompositePodGroup(_Object):
    kind: Literal["CompositePodGroup"]
    spec: CompositePodGroupSpec
    status: GroupStatus | None = None


class Workload(_Object):
    kind: Literal["Workload"]
    spec: WorkloadSpec
    status: WorkloadStatus | None = None


CustomResource = PodGroup | CompositePodGroup | Workload


# --- parsing ----------------------------------------------------------------------------------

_ObjectT = TypeVar("_ObjectT", bound=_Object)


def _describe(kind: str, raw: object) -> str:
    """``PodGroup default/train``, from whatever the raw object holds, however malformed."""
    metadata = raw.get("metadata") if isinstance(raw, Mapping) else None
    name: object = metadata.get("name") if isinstance(metadata, Mapping) else None
    namespace: object = metadata.get("namespace") if isinstance(metadata, Mapping) else None
    name = name if isinstance(name, str) and name else "<unnamed>"
    namespace = namespace if isinstance(namespace, str) and namespace else "default"
    return f"{kind} {namespace}/{name}"


def _name_of(obj: _Object) -> str:
    return f"{obj.kind} {obj.key}"


def _invalid(obj: str, error: ValidationError) -> InvalidObjectError:
    return from_validation_error(obj, error)


def _parse(model: type[_ObjectT], kind: str, raw: object) -> _ObjectT:
    obj = _describe(kind, raw)
    try:
        return model.model_validate(raw)
    except ValidationError as err:
        raise _invalid(obj, err) from None


def parse_pod_group(raw: object) -> PodGroup:
    """Parses a PodGroup body (from the API server or a YAML document)."""
    return _parse(PodGroup, "PodGroup", raw)


def parse_composite_pod_group(raw: object) -> CompositePodGroup:
    """Parses a CompositePodGroup body."""
    return _parse(CompositePodGroup, "CompositePodGroup", raw)


def parse_workload(raw: object) -> Workload:
    """Parses a Workload body, including the check `materialize` would otherwise fail on later:
    an invalid Workload should be reported when it is read, not when it is acted on."""
    workload = _parse(Workload, "Workload", raw)
    check_object_names(workload)
    return workload


_PARSERS: dict[str, Callable[[object], CustomResource]] = {
    "PodGroup": parse_pod_group,
    "CompositePodGroup": parse_composite_pod_group,
    "Workload": parse_workload,
}


def parse_custom_resource(raw: object) -> CustomResource:
    """Parses any of our three kinds, chosen by the body's ``kind``."""
    kind = raw.get("kind") if isinstance(raw, Mapping) else None
    parser = _PARSERS.get(kind) if isinstance(kind, str) else None
    if parser is None:
        want = ", ".join(_PARSERS)
        obj = _describe(kind if isinstance(kind, str) and kind else "object", raw)
        raise InvalidObjectError(obj, "kind", f"unknown kind {kind!r} (want one of {want})")
    return parser(raw)


# --- generated names ----------------------------------------------------------------------------


def object_name(workload: Workload, template: _AnyTemplate) -> str:
    return f"{workload.metadata.name}-{template.name}"


def check_object_names(workload: Workload) -> None:
    """Every generated ``<workload>-<template>`` must be a valid object name. Both parts are
    valid on their own, but together they may be too long."""
    for path, _, template in _all_templates(workload.spec, ("spec",)):
        try:
            check_dns_subdomain(object_name(workload, template))
        except ValueError as err:
            field = format_field_path((*path, "name"))
            raise InvalidObjectError(
                _name_of(workload), field, f"generated object name: {err}"
            ) from None

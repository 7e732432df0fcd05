"""Our three custom resources: `PodGroup`, `CompositePodGroup` and `Workload`.

Group ``scheduling.gpusched.io``, version ``v1alpha1``, all namespaced. Field names mirror the
upstream Kubernetes Workload API (KEP-4671, KEP-5732) so that a later move to the in-tree
objects is a rename, not a redesign.

Specs are what users write, so they are strict: unknown fields are errors (a typo such as
``minCont`` must not silently become "no gang"). Statuses are ours to write, so they are
permissive: a field added by a newer operator version must not make an object unreadable.

Every parser raises `InvalidObjectError` naming the object (``PodGroup default/train``) and the
field as the user wrote it (``spec.compositePodGroupTemplates[0].podGroupTemplates[1].name``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from gpusched.api import k8s
from gpusched.api.errors import (
    InvalidObjectError,
    field_error,
    format_field_path,
    from_validation_error,
)

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


# --- names ------------------------------------------------------------------------------------
# The same rules as k8s.io/apimachinery/pkg/util/validation, so that what we accept the API
# server accepts too.

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
DNS_LABEL_MAX = 63
DNS_SUBDOMAIN_MAX = 253
LABEL_KEY_MAX = DNS_SUBDOMAIN_MAX + 1 + DNS_LABEL_MAX
"""A label key is ``[prefix/]name``: a subdomain prefix, a slash and a 63-character name."""


def check_dns_label(value: str) -> str:
    """Template names become part of object names, so they follow RFC 1123 label rules."""
    if len(value) > DNS_LABEL_MAX or not _DNS_LABEL.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a DNS-1123 label (lower-case letters, digits and '-', "
            f"starting and ending with a letter or digit, at most {DNS_LABEL_MAX} characters)"
        )
    return value


def check_dns_subdomain(value: str) -> str:
    """Object names: RFC 1123 subdomain, as the API server requires for custom resources."""
    if len(value) > DNS_SUBDOMAIN_MAX or not _DNS_SUBDOMAIN.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a DNS-1123 subdomain (lower-case letters, digits, '-' and '.', "
            f"starting and ending with a letter or digit, at most {DNS_SUBDOMAIN_MAX} characters)"
        )
    return value


def check_label_key(value: str) -> str:
    """Topology keys are node label keys; one the API server would refuse can match no node."""
    if len(value) > LABEL_KEY_MAX:
        raise ValueError(f"label key is longer than {LABEL_KEY_MAX} characters")
    prefix, slash, name = value.rpartition("/")
    if slash and (
        not prefix
        or len(prefix) > DNS_SUBDOMAIN_MAX
        or not _DNS_SUBDOMAIN.fullmatch(prefix)
        or "/" in prefix
    ):
        raise ValueError(f"{value!r}: the prefix before '/' must be a DNS-1123 subdomain")
    if len(name) > DNS_LABEL_MAX or not _QUALIFIED_NAME.fullmatch(name):
        raise ValueError(
            f"{value!r} is not a qualified label key (name part: letters, digits, '-', '_' and "
            f"'.', starting and ending with a letter or digit, at most {DNS_LABEL_MAX} characters)"
        )
    return value


DnsLabel = Annotated[str, AfterValidator(check_dns_label)]
DnsSubdomain = Annotated[str, AfterValidator(check_dns_subdomain)]
LabelKey = Annotated[str, AfterValidator(check_label_key)]


# --- spec building blocks ---------------------------------------------------------------------


class _Spec(BaseModel):
    """What users write: unknown fields rejected, camelCase on the wire, snake_case in code."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class GangPolicy(_Spec):
    """All-or-nothing: no pod of the group is bound until ``minCount`` of them can be."""

    min_count: int = Field(alias="minCount", ge=1)


class BasicPolicy(_Spec):
    """No gang: each pod is placed as soon as it fits (the group only carries constraints)."""


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


class WorkloadRef(_Spec):
    """Which Workload template an object was materialised from."""

    workload_name: DnsSubdomain = Field(alias="workloadName")
    template_name: DnsLabel = Field(alias="templateName")


class PodGroupSpec(_Spec):
    scheduling_policy: PodGroupSchedulingPolicy = Field(alias="schedulingPolicy")
    scheduling_constraints: SchedulingConstraints | None = Field(
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


class CompositeGangPolicy(_Spec):
    """All-or-nothing over child groups: at least ``minGroupCount`` of them placed together."""

    min_group_count: int = Field(alias="minGroupCount", ge=1)


class CompositePodGroupSchedulingPolicy(_Spec):
    gang: CompositeGangPolicy


class CompositePodGroupSpec(_Spec):
    scheduling_policy: CompositePodGroupSchedulingPolicy = Field(alias="schedulingPolicy")
    scheduling_constraints: SchedulingConstraints | None = Field(
        default=None, alias="schedulingConstraints"
    )
    parent_composite_pod_group_name: DnsSubdomain | None = Field(
        default=None, alias="parentCompositePodGroupName"
    )
    workload_ref: WorkloadRef | None = Field(default=None, alias="workloadRef")


# --- Workload templates -----------------------------------------------------------------------


class PodGroupTemplate(_Spec):
    name: DnsLabel
    scheduling_policy: PodGroupSchedulingPolicy = Field(alias="schedulingPolicy")
    scheduling_constraints: SchedulingConstraints | None = Field(
        default=None, alias="schedulingConstraints"
    )


class CompositePodGroupTemplate(_Spec):
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
        return self


# --- status -----------------------------------------------------------------------------------


class _Status(BaseModel):
    """Written by us; fields we do not know (from a newer operator) are ignored, not errors."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)


class GroupPhase(StrEnum):
    PENDING = "Pending"
    SCHEDULED = "Scheduled"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNSCHEDULABLE = "Unschedulable"


class Condition(_Status):
    """A standard Kubernetes condition (``metav1.Condition`` without observedGeneration)."""

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str = ""
    message: str = ""
    last_transition_time: datetime | None = Field(default=None, alias="lastTransitionTime")


class LastAttempt(_Status):
    """The latest placement attempt, kept so `kubectl get -o yaml` explains a Pending group."""

    time: datetime
    reason: str
    message: str = ""
    domains: list[str] = Field(default_factory=list)
    """One line per topology domain tried, saying why it did not fit."""


class GroupStatus(_Status):
    """Status of a PodGroup or CompositePodGroup (for a composite, counts are over pods of all
    its descendants)."""

    phase: GroupPhase = GroupPhase.PENDING
    conditions: list[Condition] = Field(default_factory=list)
    placement: dict[str, str] = Field(default_factory=dict)
    """The topology domain chosen, e.g. ``{"topology.example.com/rack": "rack-1"}``."""
    scheduled: int = Field(default=0, ge=0)
    running: int = Field(default=0, ge=0)
    succeeded: int = Field(default=0, ge=0)
    failed: int = Field(default=0, ge=0)
    last_attempt: LastAttempt | None = Field(default=None, alias="lastAttempt")


class WorkloadGroupStatus(_Status):
    """One materialised group as seen from its Workload."""

    name: str
    kind: str
    phase: GroupPhase = GroupPhase.PENDING


class WorkloadStatus(_Status):
    """The Workload's groups at a glance: ``phase`` is the least advanced of its groups'
    (Failed or Unschedulable as soon as one group is), counts are summed over its PodGroups."""

    phase: GroupPhase = GroupPhase.PENDING
    conditions: list[Condition] = Field(default_factory=list)
    """``Materialized``: every template has its object (reason ``Invalid`` naming the field
    when the templates cannot be materialised)."""
    groups: list[WorkloadGroupStatus] = Field(default_factory=list)
    scheduled: int = Field(default=0, ge=0)
    running: int = Field(default=0, ge=0)
    succeeded: int = Field(default=0, ge=0)
    failed: int = Field(default=0, ge=0)


# --- objects ----------------------------------------------------------------------------------


class ObjectMeta(k8s.ObjectMeta):
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


# --- materialisation --------------------------------------------------------------------------


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


def _owner_reference(workload: Workload) -> k8s.OwnerReference:
    """Controller reference, so deleting the Workload garbage-collects what it created."""
    return k8s.OwnerReference(
        api_version=workload.api_version,
        kind=workload.kind,
        name=workload.metadata.name,
        uid=workload.metadata.uid,
        controller=True,
        block_owner_deletion=True,
    )


def _metadata(workload: Workload, template: _AnyTemplate) -> ObjectMeta:
    return ObjectMeta(
        name=object_name(workload, template),
        namespace=workload.metadata.namespace,
        owner_references=[_owner_reference(workload)],
    )


def _workload_ref(workload: Workload, template: _AnyTemplate) -> WorkloadRef:
    return WorkloadRef(workload_name=workload.metadata.name, template_name=template.name)


def _pod_group(workload: Workload, template: PodGroupTemplate, parent: str | None) -> PodGroup:
    spec = PodGroupSpec(
        scheduling_policy=template.scheduling_policy,
        scheduling_constraints=template.scheduling_constraints,
        parent_composite_pod_group_name=parent,
        workload_ref=_workload_ref(workload, template),
    )
    return PodGroup(
        api_version=API_VERSION,
        kind="PodGroup",
        metadata=_metadata(workload, template),
        spec=spec,
    )


def _composite(
    workload: Workload, template: CompositePodGroupTemplate, parent: str | None
) -> CompositePodGroup:
    spec = CompositePodGroupSpec(
        scheduling_policy=template.scheduling_policy,
        scheduling_constraints=template.scheduling_constraints,
        parent_composite_pod_group_name=parent,
        workload_ref=_workload_ref(workload, template),
    )
    return CompositePodGroup(
        api_version=API_VERSION,
        kind="CompositePodGroup",
        metadata=_metadata(workload, template),
        spec=spec,
    )


def _materialize_level(
    workload: Workload,
    pod_groups: Sequence[PodGroupTemplate],
    composites: Sequence[CompositePodGroupTemplate],
    parent: str | None,
) -> Iterator[PodGroup | CompositePodGroup]:
    for pod_group in pod_groups:
        yield _pod_group(workload, pod_group, parent)
    for template in composites:
        composite = _composite(workload, template, parent)
        yield composite
        yield from _materialize_level(
            workload,
            template.pod_group_templates,
            template.composite_pod_group_templates,
            composite.metadata.name,
        )


def materialize(workload: Workload) -> list[PodGroup | CompositePodGroup]:
    """One object per template, named ``<workload>-<template>``, owned by the Workload.

    The order is the spec's, depth first, each composite right before its children: creating
    objects in this order means a child never names a parent that does not exist yet.
    """
    check_object_names(workload)
    spec = workload.spec
    return list(
        _materialize_level(
            workload, spec.pod_group_templates, spec.composite_pod_group_templates, None
        )
    )

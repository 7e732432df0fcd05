"""Pydantic models of the Kubernetes objects the placement engine reads: Nodes and Pods.

Parsing only, no I/O. The models keep what scheduling needs and ignore every other field (real
objects carry managedFields, images, probes, volumes... that would only cost memory). What they
keep is validated the way the API server would, so a hand-written snapshot that a cluster would
refuse is refused here too, naming the object and the field (``Pod default/a:
spec.containers[0].resources.requests.cpu: ...``).

Their pieces live beside them: quantities in `gpusched.api.quantity`, metadata in
`gpusched.api.meta`, taints, tolerations and node selectors in `gpusched.api.selectors`.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Hashable, Mapping
from typing import Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from gpusched.api.crds import PreemptionPolicy
from gpusched.api.errors import (
    InvalidObjectError,
    field_error,
    format_field_path,
    from_validation_error,
)
from gpusched.api.grouprefs import POD_GROUP_LABEL as POD_GROUP_LABEL
from gpusched.api.grouprefs import GroupRef, resolve_group
from gpusched.api.meta import K8sModel, ObjectMeta, utf8_len
from gpusched.api.quantity import (
    ResourceList,
    parse_quantity,
    parse_resource_list,
    shown,
)
from gpusched.api.selectors import NodeSelectorTerm, Taint, Toleration, required_terms_match
from gpusched.api.topology import MAX_GPUS_PER_NODE

GPU_MILLI_ANNOTATION = "gpusched.io/gpu-milli"
GPUS_ANNOTATION = "gpusched.io/gpus"

MAX_GPUS_ANNOTATION_BYTES = 1024
"""``gpusched.io/gpus`` holds at most 64 indices; anything longer is not ours and is not read."""

_SIDECAR_RESTART_POLICY = "Always"


def _invalid(obj: str, error: ValidationError) -> InvalidObjectError:
    return from_validation_error(obj, error)


# ---------------------------------------------------------------------------------------------
# Parts that many objects share
# ---------------------------------------------------------------------------------------------

SHARED_PARTS = 4096
"""How many distinct parts of objects `_shared` remembers. The pods of one template (a
Job's, a Deployment's) have equal container lists, every pod the API server admits carries
the same two not-ready tolerations, and most pods' and machines' statuses read alike: each
is held once, not once an object (3.6 KB a pod of the 12.9 KB the leader held per pod at
5,000 nodes). Past this many, the memory starts over: parts parsed later are then not shared
with those parsed before, and nothing else changes."""

_parts: dict[Hashable, Any] = {}
_PartT = TypeVar("_PartT")


def _shared(key: Hashable, part: _PartT) -> _PartT:
    """``part``, or the equal one parsed before it under ``key``. Sharing is safe because the
    models are frozen and nothing changes the lists they hold."""
    kept = _parts.get(key)
    if kept is not None:
        return kept  # type: ignore[no-any-return]
    if len(_parts) >= SHARED_PARTS:
        _parts.clear()
    _parts[key] = part
    return part


def _resources_key(resources: Mapping[str, object]) -> Hashable:
    """Quantities keep their type: ``1`` and ``1.0`` are one key to Python, not one input to
    a person."""
    return tuple((name, type(value), value) for name, value in resources.items())


# ---------------------------------------------------------------------------------------------
# Node
# ---------------------------------------------------------------------------------------------


class NodeCondition(K8sModel):
    type: str
    status: str
    reason: str | None = None
    message: str | None = None


class NodeSpec(K8sModel):
    unschedulable: bool = False
    taints: list[Taint] = Field(default_factory=list)


class NodeStatus(K8sModel):
    allocatable: ResourceList | None = None
    """``None`` when absent; then `Node.allocatable_resources` falls back to ``capacity``."""
    capacity: ResourceList = Field(default_factory=dict)
    conditions: list[NodeCondition] | None = None
    """``None`` when absent (hand-written snapshots); ``[]`` when present but empty."""


class Node(K8sModel):
    metadata: ObjectMeta
    spec: NodeSpec = Field(default_factory=NodeSpec)
    status: NodeStatus = Field(default_factory=NodeStatus)

    @field_validator("status")
    @classmethod
    def _shared_status(cls, status: NodeStatus) -> NodeStatus:
        """Machines of one kind report the same resources and, when healthy, the same
        conditions."""
        allocatable, conditions = status.allocatable, status.conditions
        key = (
            "node-status",
            None if allocatable is None else _resources_key(allocatable),
            _resources_key(status.capacity),
            None
            if conditions is None
            else tuple((c.type, c.status, c.reason, c.message) for c in conditions),
            frozenset(status.model_fields_set),
        )
        return _shared(key, status)

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


class ResourceRequirements(K8sModel):
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
                    f"must equal the limit {shown(self.limits[name])}", "requests", name
                )
            if request > limit:
                raise field_error(
                    f"must not exceed the limit {shown(self.limits[name])}", "requests", name
                )
        return self

    def effective_requests(self) -> dict[str, int]:
        """Requests in canonical units; a resource with a limit and no request requests its
        limit (the API server's defaulting, so ``limits: {nvidia.com/gpu: 1}`` asks for 1)."""
        return parse_resource_list({**self.limits, **self.requests})


class Container(K8sModel):
    name: str = Field(min_length=1)
    resources: ResourceRequirements = Field(default_factory=ResourceRequirements)
    restart_policy: Literal["Always", "OnFailure", "Never"] | None = Field(
        default=None, alias="restartPolicy"
    )
    """On an init container, ``Always`` makes it a sidecar that runs beside the app."""


class NodeSelector(K8sModel):
    node_selector_terms: list[NodeSelectorTerm] = Field(alias="nodeSelectorTerms")


class NodeAffinity(K8sModel):
    required: NodeSelector | None = Field(
        default=None, alias="requiredDuringSchedulingIgnoredDuringExecution"
    )


class Affinity(K8sModel):
    node_affinity: NodeAffinity | None = Field(default=None, alias="nodeAffinity")


class PodResourceClaim(K8sModel):
    """One ``spec.resourceClaims`` entry: a claim by name, or one made from a template."""

    name: str
    resource_claim_name: str | None = Field(default=None, alias="resourceClaimName")
    resource_claim_template_name: str | None = Field(
        default=None, alias="resourceClaimTemplateName"
    )


class PodResourceClaimStatus(K8sModel):
    name: str
    resource_claim_name: str | None = Field(default=None, alias="resourceClaimName")


class ExtendedResourceClaimStatus(K8sModel):
    resource_claim_name: str = Field(default="", alias="resourceClaimName")


class PodSchedulingGroup(K8sModel):
    """``spec.schedulingGroup``: the ``scheduling.k8s.io`` PodGroup the pod belongs to."""

    pod_group_name: str | None = Field(default=None, alias="podGroupName")


class PodSchedulingGate(K8sModel):
    """One entry of ``spec.schedulingGates``: while any is left, no scheduler places the pod."""

    name: str = Field(min_length=1)


def _container_key(container: Container) -> Hashable:
    resources = container.resources
    return (
        container.name,
        container.restart_policy,
        _resources_key(resources.requests),
        _resources_key(resources.limits),
        frozenset(container.model_fields_set),
        frozenset(resources.model_fields_set),
    )


def _toleration_key(toleration: Toleration) -> Hashable:
    t = toleration
    fields = frozenset(t.model_fields_set)
    return (t.key, t.operator, t.value, t.effect, t.toleration_seconds, fields)


class PodSpec(K8sModel):
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
    preemption_policy: PreemptionPolicy | None = Field(default=None, alias="preemptionPolicy")
    """Set with ``priority`` from the pod's PriorityClass when the pod is admitted; None is
    ``PreemptLowerPriority``."""
    scheduler_name: str = Field(default="default-scheduler", alias="schedulerName")
    node_name: str | None = Field(default=None, alias="nodeName")
    resource_claims: list[PodResourceClaim] = Field(default_factory=list, alias="resourceClaims")
    scheduling_gates: list[PodSchedulingGate] = Field(default_factory=list, alias="schedulingGates")
    scheduling_group: PodSchedulingGroup | None = Field(default=None, alias="schedulingGroup")

    @field_validator("containers", "init_containers")
    @classmethod
    def _shared_containers(cls, containers: list[Container]) -> list[Container]:
        return _shared(("containers", *map(_container_key, containers)), containers)

    @field_validator("tolerations")
    @classmethod
    def _shared_tolerations(cls, tolerations: list[Toleration]) -> list[Toleration]:
        return _shared(("tolerations", *map(_toleration_key, tolerations)), tolerations)

    @field_validator("scheduler_name", "node_name")
    @classmethod
    def _interned(cls, name: str | None) -> str | None:
        """Every pod of a node names it, and nearly every pod its scheduler: one string."""
        return None if name is None else sys.intern(name)


POD_SCHEDULED = "PodScheduled"
"""The pod condition kube-scheduler writes (``False``/``Unschedulable`` while no node takes the
pod) and the API server sets ``True`` on bind; cluster autoscalers read it."""


def scheduled_conditions(conditions: object) -> object:
    """The ``PodScheduled`` entries of a pod's ``status.conditions`` (anything else as it is):
    the only ones the scheduler reads; the kubelet's Ready going back and forth is a
    heartbeat, not a change."""
    if not isinstance(conditions, list | tuple):
        return conditions
    return [c for c in conditions if isinstance(c, Mapping) and c.get("type") == POD_SCHEDULED]


class PodCondition(K8sModel):
    type: str
    status: str
    reason: str | None = None
    message: str | None = None


class PodStatus(K8sModel):
    phase: Literal["Pending", "Running", "Succeeded", "Failed", "Unknown"] | None = None
    resource_claim_statuses: list[PodResourceClaimStatus] = Field(
        default_factory=list, alias="resourceClaimStatuses"
    )
    extended_resource_claim_status: ExtendedResourceClaimStatus | None = Field(
        default=None, alias="extendedResourceClaimStatus"
    )
    conditions: tuple[PodCondition, ...] = ()
    """Only the ``PodScheduled`` condition is kept (the others are the kubelet's): what the pod
    shows now, so that the scheduler writes it only when it would change."""

    @field_validator("conditions", mode="before")
    @classmethod
    def _only_scheduled(cls, value: object) -> object:
        return scheduled_conditions(value)

    @property
    def scheduled(self) -> PodCondition | None:
        """The ``PodScheduled`` condition, if the pod has one."""
        return self.conditions[0] if self.conditions else None


def _add_into(total: dict[str, int], extra: Mapping[str, int]) -> None:
    for name, value in extra.items():
        total[name] = total.get(name, 0) + value


def _max_into(total: dict[str, int], other: Mapping[str, int]) -> None:
    for name, value in other.items():
        total[name] = max(total.get(name, 0), value)


_GPU_MILLI_RE = re.compile(r"[0-9]{1,4}")
_GPU_INDEX_RE = re.compile(r"[0-9]{1,3}")


class Pod(K8sModel):
    metadata: ObjectMeta
    spec: PodSpec
    status: PodStatus = Field(default_factory=PodStatus)

    @field_validator("status")
    @classmethod
    def _shared_status(cls, status: PodStatus) -> PodStatus:
        """Most pods' status reads as one of a few (Pending, Running: no claims)."""
        extended = status.extended_resource_claim_status
        key = (
            "status",
            status.phase,
            tuple((s.name, s.resource_claim_name) for s in status.resource_claim_statuses),
            None if extended is None else extended.resource_claim_name,
            tuple((c.status, c.reason, c.message) for c in status.conditions),
            frozenset(status.model_fields_set),
        )
        return _shared(key, status)

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
        """The engine's name of the pod's group (same namespace), from whichever source names
        it (`gpusched.api.grouprefs`); None without one, or when it names two
        (`group_ref` raises then)."""
        try:
            ref = self.group_ref()
        except InvalidObjectError:
            return None
        return ref.group_name if ref is not None else None

    def group_ref(self) -> GroupRef | None:
        """The pod's group reference; raises `InvalidObjectError` naming the fields when the
        pod names two different groups or a Kueue group without its size."""
        named = self.spec.scheduling_group
        return resolve_group(
            f"Pod {self.key}",
            self.metadata.labels,
            self.metadata.annotations,
            named.pod_group_name if named is not None else None,
        )

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
                f"must be an integer 1..999 (thousandths of one GPU), got {shown(value)}",
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
    if utf8_len(value) > MAX_GPUS_ANNOTATION_BYTES:
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
                f"{shown(part)} is not a GPU index 0..{MAX_GPUS_PER_NODE - 1} (want e.g. '0,1,3')"
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
        raise InvalidObjectError(obj, "kind", f"must be {kind}, got {shown(found)}")


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

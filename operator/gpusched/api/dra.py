"""Dynamic Resource Allocation objects (``resource.k8s.io/v1``), as far as gpusched reads them.

ResourceSlices say which devices a node has, DeviceClasses name kinds of device, and
ResourceClaims ask for devices and record which ones they got. gpusched reads the fields it
allocates by and writes ``status.allocation`` and ``status.reservedFor`` of claims; every
other field is ignored here (and left untouched on the server, which keeps it).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpusched.api.errors import from_validation_error

DRA_GROUP = "resource.k8s.io"
DRA_VERSION = "v1"
DRA_API_VERSION = f"{DRA_GROUP}/{DRA_VERSION}"
DELETE_PROTECTION_FINALIZER = "resource.kubernetes.io/delete-protection"
"""kube-scheduler's finalizer on a claim it allocated: the claim cannot vanish while its
devices are in use. gpusched adds the same one, for the same reason, before allocating."""
EXTENDED_RESOURCE_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
"""Marks a claim created for a pod's extended-resource request (KEP-5004), as kube-scheduler
marks it."""


_ModelT = TypeVar("_ModelT", bound=BaseModel)


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)


class OwnerReference(_Model):
    kind: str = ""
    name: str = ""
    uid: str = ""
    controller: bool = False


class Meta(_Model):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    resource_version: str = Field(default="", alias="resourceVersion")
    generation: int = 0
    finalizers: tuple[str, ...] = ()
    annotations: dict[str, str] = Field(default_factory=dict)
    owner_references: tuple[OwnerReference, ...] = Field(default=(), alias="ownerReferences")
    deletion_timestamp: datetime | None = Field(default=None, alias="deletionTimestamp")

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


# ----- ResourceSlice ---------------------------------------------------------------------------


AttributeValue = int | bool | str | tuple[int, ...] | tuple[bool, ...] | tuple[str, ...]


class DeviceAttribute(_Model):
    """Exactly one field is set: a scalar, or (``DRAListTypeAttributes``, alpha in 1.36) a
    non-empty list, read as a tuple."""

    int_value: int | None = Field(default=None, alias="int")
    bool_value: bool | None = Field(default=None, alias="bool")
    string: str | None = None
    version: str | None = None
    ints: tuple[int, ...] | None = None
    bools: tuple[bool, ...] | None = None
    strings: tuple[str, ...] | None = None
    versions: tuple[str, ...] | None = None

    @property
    def value(self) -> AttributeValue | None:
        for value in (
            self.int_value,
            self.bool_value,
            self.string,
            self.version,
            self.ints,
            self.bools,
            self.strings,
            self.versions,
        ):
            if value is not None:
                return value
        return None


class DeviceCapacity(_Model):
    value: str | int
    request_policy: dict[str, Any] | None = Field(default=None, alias="requestPolicy")
    """DRAConsumableCapacity: what a claim may consume of a shared device (``default``,
    ``validRange`` with ``min``/``max``/``step``, or ``validValues``)."""


class Device(_Model):
    name: str
    attributes: dict[str, DeviceAttribute] = Field(default_factory=dict)
    capacity: dict[str, DeviceCapacity] = Field(default_factory=dict)
    allow_multiple_allocations: bool | None = Field(default=None, alias="allowMultipleAllocations")
    """DRAConsumableCapacity (beta in 1.36): several claims may share the device, each
    consuming some of its capacity (the NVIDIA driver's ConsumableShares)."""

    def attribute(self, driver: str, name: str) -> AttributeValue | None:
        """An attribute by its short name (the driver's own domain) or fully qualified."""
        found = self.attributes.get(name) or self.attributes.get(f"{driver}/{name}")
        return found.value if found is not None else None


class ResourcePool(_Model):
    name: str
    generation: int = 0
    resource_slice_count: int = Field(default=1, alias="resourceSliceCount")


class ResourceSliceSpec(_Model):
    driver: str
    pool: ResourcePool
    node_name: str | None = Field(default=None, alias="nodeName")
    devices: tuple[Device, ...] = ()


class ResourceSlice(_Model):
    metadata: Meta
    spec: ResourceSliceSpec


# ----- DeviceClass -----------------------------------------------------------------------------


class CelSelector(_Model):
    expression: str


class DeviceSelector(_Model):
    cel: CelSelector | None = None


class OpaqueConfig(_Model):
    driver: str
    parameters: Any = None


class DeviceConfiguration(_Model):
    opaque: OpaqueConfig | None = None


class DeviceClassSpec(_Model):
    selectors: tuple[DeviceSelector, ...] = ()
    config: tuple[DeviceConfiguration, ...] = ()
    extended_resource_name: str | None = Field(default=None, alias="extendedResourceName")


class DeviceClass(_Model):
    metadata: Meta
    spec: DeviceClassSpec = Field(default_factory=DeviceClassSpec)


# ----- ResourceClaim ---------------------------------------------------------------------------


class ExactDeviceRequest(_Model):
    device_class_name: str = Field(alias="deviceClassName")
    selectors: tuple[DeviceSelector, ...] = ()
    allocation_mode: Literal["ExactCount", "All"] = Field(
        default="ExactCount", alias="allocationMode"
    )
    count: int = 1
    admin_access: bool | None = Field(default=None, alias="adminAccess")
    capacity: dict[str, Any] | None = None
    """DRAConsumableCapacity: how much of a shared device's capacity the request consumes."""


class DeviceRequest(_Model):
    name: str
    exactly: ExactDeviceRequest | None = None
    first_available: tuple[dict[str, Any], ...] = Field(default=(), alias="firstAvailable")


class ClaimConfiguration(_Model):
    requests: tuple[str, ...] = ()
    opaque: OpaqueConfig | None = None


class DeviceClaim(_Model):
    requests: tuple[DeviceRequest, ...] = ()
    constraints: tuple[dict[str, Any], ...] = ()
    config: tuple[ClaimConfiguration, ...] = ()


class ResourceClaimSpec(_Model):
    devices: DeviceClaim = Field(default_factory=DeviceClaim)


class DeviceResult(_Model):
    request: str
    driver: str
    pool: str
    device: str
    consumed_capacity: dict[str, str | int] | None = Field(default=None, alias="consumedCapacity")
    """DRAConsumableCapacity: what the claim consumes of a shared device."""
    share_id: str | None = Field(default=None, alias="shareID")


class DeviceAllocation(_Model):
    results: tuple[DeviceResult, ...] = ()
    config: tuple[dict[str, Any], ...] = ()


class Allocation(_Model):
    devices: DeviceAllocation = Field(default_factory=DeviceAllocation)
    node_selector: dict[str, Any] | None = Field(default=None, alias="nodeSelector")


class ConsumerReference(_Model):
    api_group: str = Field(default="", alias="apiGroup")
    resource: str
    name: str
    uid: str


class ResourceClaimStatus(_Model):
    allocation: Allocation | None = None
    reserved_for: tuple[ConsumerReference, ...] = Field(default=(), alias="reservedFor")


class ResourceClaim(_Model):
    metadata: Meta
    spec: ResourceClaimSpec = Field(default_factory=ResourceClaimSpec)
    status: ResourceClaimStatus = Field(default_factory=ResourceClaimStatus)

    @property
    def key(self) -> str:
        return self.metadata.key

    def reserved_for_pod(self, uid: str) -> bool:
        return any(r.resource == "pods" and r.uid == uid for r in self.status.reserved_for)

    def extended_for_pod(self, uid: str) -> bool:
        """Whether this is the claim made for pod ``uid``'s extended-resource requests (the
        annotation, and the pod as its controlling owner, as kube-scheduler finds it)."""
        if self.metadata.annotations.get(EXTENDED_RESOURCE_CLAIM_ANNOTATION) != "true":
            return False
        return any(
            o.kind == "Pod" and o.uid == uid and o.controller
            for o in self.metadata.owner_references
        )


class ResourceClaimTemplateSpec(_Model):
    spec: ResourceClaimSpec = Field(default_factory=ResourceClaimSpec)


class ResourceClaimTemplate(_Model):
    """What kube-controller-manager makes each pod's claim from (``spec.spec``)."""

    metadata: Meta
    spec: ResourceClaimTemplateSpec = Field(default_factory=ResourceClaimTemplateSpec)

    @property
    def key(self) -> str:
        return self.metadata.key


def _parse(model: type[_ModelT], kind: str, raw: Mapping[str, Any]) -> _ModelT:
    metadata = raw.get("metadata") if isinstance(raw, Mapping) else None
    name = metadata.get("name", "?") if isinstance(metadata, Mapping) else "?"
    try:
        return model.model_validate(raw)
    except ValidationError as error:
        raise from_validation_error(f"{kind} {name}", error) from None


def parse_resource_slice(raw: Mapping[str, Any]) -> ResourceSlice:
    return _parse(ResourceSlice, "ResourceSlice", raw)


def parse_device_class(raw: Mapping[str, Any]) -> DeviceClass:
    return _parse(DeviceClass, "DeviceClass", raw)


def parse_resource_claim(raw: Mapping[str, Any]) -> ResourceClaim:
    return _parse(ResourceClaim, "ResourceClaim", raw)


def parse_resource_claim_template(raw: Mapping[str, Any]) -> ResourceClaimTemplate:
    return _parse(ResourceClaimTemplate, "ResourceClaimTemplate", raw)

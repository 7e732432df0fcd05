"""The DRA objects as last watched: ResourceSlices, DeviceClasses and ResourceClaims."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpusched.api.dra import (
    DeviceClass,
    ResourceClaim,
    ResourceSlice,
    parse_device_class,
    parse_resource_claim,
    parse_resource_slice,
)
from gpusched.api.errors import InvalidObjectError
from gpusched.scheduler.ports import Fence
from gpusched.scheduler.records import name_of, namespace_of


class ClaimApi(Protocol):
    """Reads are not fenced; every write takes the fence of the decision it carries out, asked
    as the request goes out (nothing is sent once it says no: `FencedError`)."""

    async def list_resource_slices(self) -> list[dict[str, Any]]:
        """Every ResourceSlice."""

    async def list_device_classes(self) -> list[dict[str, Any]]:
        """Every DeviceClass."""

    async def list_resource_claims(self) -> list[dict[str, Any]]:
        """Every ResourceClaim of every namespace."""

    async def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The claim as the server has it now; None when it does not exist."""

    async def update_claim(
        self, body: Mapping[str, Any], fence: Fence | None = None
    ) -> dict[str, Any]:
        """PUTs the claim (its metadata: the finalizers); ApiError 409 on a stale version."""

    async def update_claim_status(
        self, body: Mapping[str, Any], fence: Fence | None = None
    ) -> dict[str, Any]:
        """PUTs the claim's status subresource; ApiError 409 on a stale version."""

    async def create_claim(
        self, body: Mapping[str, Any], fence: Fence | None = None
    ) -> dict[str, Any]:
        """POSTs a new claim (``generateName``: the server names it); the claim created."""

    async def delete_claim(
        self, namespace: str, name: str, uid: str, fence: Fence | None = None
    ) -> None:
        """Deletes the claim if it still has ``uid``; gone already is not an error."""

    async def patch_pod_status(
        self, namespace: str, name: str, status: Mapping[str, Any], fence: Fence | None = None
    ) -> None:
        """Patches (strategic merge) the pod's status."""


@dataclass(slots=True, kw_only=True)
class ClaimBook:
    slices: dict[str, ResourceSlice] = field(default_factory=dict)
    classes: dict[str, DeviceClass] = field(default_factory=dict)
    claims: dict[str, ResourceClaim] = field(default_factory=dict)
    raw_claims: dict[str, dict[str, Any]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    """Objects that could not be parsed, by kind and name: why."""
    slices_generation: int = 0
    releasing: set[str] = field(default_factory=set)
    """Claims whose unfinished allocation is being undone (not planned for meanwhile)."""
    listed: bool = False
    """Claims, slices and classes were listed afresh since this replica took the lead."""
    compute_domains: dict[str, tuple[str, str]] = field(default_factory=dict)
    """The NVIDIA driver's ComputeDomains as watched, by uid: (namespace, name)."""

    def upsert_compute_domain(self, body: Mapping[str, Any]) -> None:
        uid = str((body.get("metadata") or {}).get("uid") or "")
        if uid:
            self.compute_domains[uid] = (namespace_of(body), name_of(body))

    def delete_compute_domain(self, body: Mapping[str, Any]) -> None:
        self.compute_domains.pop(str((body.get("metadata") or {}).get("uid") or ""), None)

    def upsert_slice(self, body: Mapping[str, Any]) -> None:
        name = name_of(body)
        try:
            self.slices[name] = parse_resource_slice(body)
            self.errors.pop(f"ResourceSlice {name}", None)
        except InvalidObjectError as error:
            self.slices.pop(name, None)
            self.errors[f"ResourceSlice {name}"] = str(error)
        self.slices_generation += 1

    def delete_slice(self, name: str) -> None:
        self.slices.pop(name, None)
        self.slices_generation += 1

    def upsert_class(self, body: Mapping[str, Any]) -> None:
        name = name_of(body)
        try:
            self.classes[name] = parse_device_class(body)
        except InvalidObjectError as error:
            self.classes.pop(name, None)
            self.errors[f"DeviceClass {name}"] = str(error)

    def delete_class(self, name: str) -> None:
        self.classes.pop(name, None)

    def upsert_claim(self, body: Mapping[str, Any]) -> None:
        key = f"{namespace_of(body)}/{name_of(body)}"
        try:
            claim = parse_resource_claim(body)
        except InvalidObjectError as error:
            self.claims.pop(key, None)
            self.errors[f"ResourceClaim {key}"] = str(error)
            return
        before = self.claims.get(key)
        if before is not None and _version(before) > _version(claim):
            return  # an older version than the one our own write returned
        self.claims[key] = claim
        self.raw_claims[key] = dict(body)

    def delete_claim(self, key: str) -> None:
        self.claims.pop(key, None)
        self.raw_claims.pop(key, None)

    def replace_all(
        self,
        slices: Iterable[Mapping[str, Any]],
        classes: Iterable[Mapping[str, Any]],
        claims: Iterable[Mapping[str, Any]],
    ) -> None:
        self.slices.clear()
        self.classes.clear()
        self.claims.clear()
        self.raw_claims.clear()
        for body in slices:
            self.upsert_slice(body)
        for body in classes:
            self.upsert_class(body)
        for body in claims:
            self.upsert_claim(body)
        self.listed = True


def _version(claim: ResourceClaim) -> int:
    version = claim.metadata.resource_version
    return int(version) if version.isdigit() else 0

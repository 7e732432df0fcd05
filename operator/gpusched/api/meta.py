"""What every Kubernetes object the engine reads shares: the read-only base model and the
part of ``metadata`` scheduling uses."""

from __future__ import annotations

import sys
from datetime import datetime
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from gpusched.api.errors import field_error

MAX_ANNOTATIONS_BYTES = 256 * 1024
"""The API server's limit on all annotations of one object together (keys plus values)."""


class K8sModel(BaseModel):
    """Kubernetes objects are big and grow new fields every release: unknown fields are
    ignored, not errors. Read-only: the engine plans on copies (``model_copy(update=...)``)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)


def _check_annotations_size(annotations: dict[str, str]) -> dict[str, str]:
    """The API server caps annotations at 256 KiB together; more is not from a real cluster and
    is refused before anything reads it."""
    size = sum(utf8_len(key) + utf8_len(value) for key, value in annotations.items())
    if size > MAX_ANNOTATIONS_BYTES:
        raise field_error(f"total size {size} bytes exceeds {MAX_ANNOTATIONS_BYTES} bytes")
    return annotations


def _interned(values: dict[str, str]) -> dict[str, str]:
    """Label and annotation keys repeat on every object, and so do most values (an app's
    name, a zone, a node kind's GPU topology, the GPUs a pod holds): one string each, not one
    an object (a decoded body has its own copy of every string)."""
    return {sys.intern(key): sys.intern(value) for key, value in values.items()}


def utf8_len(text: str) -> int:
    # surrogatepass: a lone surrogate (possible in JSON) must count, not crash the check.
    return len(text.encode("utf-8", "surrogatepass"))


class OwnerReference(K8sModel):
    """``uid`` is optional because objects read from files (``simulate``) have none."""

    api_version: str = Field(alias="apiVersion")
    kind: str
    name: str
    uid: str | None = None
    controller: bool | None = None
    block_owner_deletion: bool | None = Field(default=None, alias="blockOwnerDeletion")


class ObjectMeta(K8sModel):
    """The part of ``metadata`` the scheduler uses. ``namespace`` defaults to ``default`` as
    kubectl does for namespaced objects (and is meaningless for Nodes)."""

    name: str = Field(min_length=1)
    namespace: Annotated[str, AfterValidator(sys.intern)] = Field(default="default", min_length=1)
    uid: str | None = None
    labels: Annotated[dict[str, str], AfterValidator(_interned)] = Field(default_factory=dict)
    annotations: Annotated[
        dict[str, str], AfterValidator(_check_annotations_size), AfterValidator(_interned)
    ] = Field(default_factory=dict)
    creation_timestamp: datetime | None = Field(default=None, alias="creationTimestamp")
    deletion_timestamp: datetime | None = Field(default=None, alias="deletionTimestamp")
    """Set while the object is being deleted; a terminating pod still holds its resources."""
    owner_references: list[OwnerReference] = Field(default_factory=list, alias="ownerReferences")

"""What the operator keeps of a watched pod, its reservations, and how raw bodies are read.

A body from a watch may be malformed in any way: the readers here never raise on one."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpusched.api.k8s import Pod, PodStatus, scheduled_conditions
from gpusched.engine.request import PodRequest
from gpusched.engine.snapshot import BoundPod


@dataclass(frozen=True, slots=True, kw_only=True)
class PodRecord:
    """A watched pod, parsed once per change."""

    pod: Pod
    uid: str
    request: PodRequest | None
    """None when the pod's own fields make it unschedulable (``error`` says why)."""
    assigned: tuple[int, ...] | None
    error: str | None = None
    holding: BoundPod | None = None
    """The engine's view of the pod while it holds resources (one object per pod version,
    so the snapshot cache can tell unchanged pods by identity)."""
    source: bytes | None = None
    """`pod_fingerprint` of the body this record was parsed from (None: not from a body)."""
    version: str = ""
    """``metadata.resourceVersion``: a resync parses only the pods whose version moved."""

    @property
    def key(self) -> str:
        return self.pod.key

    @property
    def node(self) -> str | None:
        return self.pod.spec.node_name or None

    @property
    def deleting(self) -> bool:
        return self.pod.metadata.deletion_timestamp is not None


@dataclass(frozen=True, slots=True)
class Reservation:
    """GPUs and resources promised to a pod whose bind is in flight or not yet watched."""

    request: PodRequest
    uid: str
    node: str
    gpus: tuple[int, ...]
    holding: BoundPod


@dataclass(frozen=True, slots=True, kw_only=True)
class Nomination:
    """Room held for a preemptor while its victims go: the freed GPUs count as the
    preemptor's pods' (``holdings``, where the plan put them), and the victims, on their
    way out, no longer count (their GPUs are promised). No other unit is placed there."""

    root: str
    """The preemptor's root group."""
    pods: Mapping[str, str]
    """Nominated pod key → its uid when nominated."""
    holdings: tuple[BoundPod, ...]
    victims: Mapping[str, str]
    """Victim pod key → its uid when the plan was made."""
    since: float
    """When it was nominated (our clock), or recovered by this replica."""
    plan: str = ""
    """The plan's identity in its durable record (`gpusched.scheduler.nominations`)."""
    claims: tuple[str, ...] = ()
    """ResourceClaims (``namespace/name``) the victims' eviction frees: the room is free once
    kube-controller-manager has deallocated them too."""


def holds(record: PodRecord) -> bool:
    """Bound and not finished: a terminating pod still holds its GPUs until it is gone."""
    return record.node is not None and not record.pod.is_terminal


def version_order(body: Mapping[str, Any], record: PodRecord) -> int:
    """-1, 0 or 1 as ``body`` is an older, unknown-order or newer version of the very pod
    ``record`` holds. Versions are compared as numbers where both are (etcd's revisions, as
    every kube-apiserver has them); another pod, or versions that are not numbers, give 0."""
    metadata = metadata_of(body)
    version = str(metadata.get("resourceVersion") or "")
    if str(metadata.get("uid") or "") != record.uid:
        return 0
    if not (version.isdigit() and record.version.isdigit()):
        return 0
    return (int(version) > int(record.version)) - (int(version) < int(record.version))


def pod_fingerprint(body: Mapping[str, Any]) -> bytes | None:
    """A digest of the parts of a pod body that `parse_pod` reads (metadata but its versions
    and managed fields, the spec, the status fields the Pod model has): equal digests parse
    to equal records, so a MODIFIED event that only touched the rest of the status
    (conditions, container states: the kubelet's heartbeats) costs this instead of a pydantic
    parse. Kept with every record, so a digest (16 bytes) rather than the text it is taken
    of (about 1.5 KB a pod: an eighth of what the leader held per pod at 15,000). None when
    the body does not serialise (it is parsed, and reported, as before)."""
    metadata = metadata_of(body)
    read = {k: v for k, v in metadata.items() if k not in UNREAD_METADATA}
    status = mapping(body.get("status"))
    read_status = [status.get(key) for key in READ_STATUS if key != "conditions"]
    read_status.append(scheduled_conditions(status.get("conditions") or []))
    try:
        text = json.dumps((read, body.get("spec"), read_status), separators=(",", ":"), default=str)
    except (TypeError, ValueError):
        return None
    return hashlib.blake2b(text.encode(), digest_size=16).digest()  # the text is ASCII


UNREAD_METADATA = frozenset({"resourceVersion", "managedFields", "generation"})
"""Metadata that changes with every write and that `parse_pod` does not read."""
READ_STATUS = tuple(field.alias or name for name, field in PodStatus.model_fields.items())
"""The status fields the Pod model reads (the phase, the ResourceClaims made for the pod):
derived from the model, so a field added there is never missed here."""


def mapping(value: object) -> Mapping[str, Any]:
    """``value`` if it is a JSON object, else empty: a malformed body must never raise here."""
    return value if isinstance(value, Mapping) else {}


def metadata_of(body: Mapping[str, Any]) -> Mapping[str, Any]:
    return mapping(body.get("metadata"))


def generation_of(metadata: Mapping[str, Any]) -> int:
    try:
        return int(metadata.get("generation") or 0)
    except (TypeError, ValueError, OverflowError):
        return 0


def name_of(body: Mapping[str, Any]) -> str:
    return str(metadata_of(body).get("name") or "")


def namespace_of(body: Mapping[str, Any]) -> str:
    return str(metadata_of(body).get("namespace") or "default")

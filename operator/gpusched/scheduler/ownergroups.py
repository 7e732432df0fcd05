"""The operator's owner groups: pods of ours that name no group, in a namespace where
``ownerGroups`` is on, join their top owner's gang (`gpusched.api.owners`).

Owners come from the watches of `gpusched.handlers.owners` (Jobs and the kinds
`gpusched.api.owners.SIZES` sizes). A pod whose owner chain reaches an owner of a watched kind
that has not been seen yet waits for it ("not found"), never placed alone: at start the pods'
list may come before the Jobs'. When an owner appears, changes or goes, the pods whose chain
passes through it are grouped again (`regroup`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gpusched.api.errors import InvalidObjectError
from gpusched.api.grouprefs import GroupSource, group_name
from gpusched.api.owners import SIZES, OwnerKey, controller_of, owner_key, top_owner
from gpusched.engine.groups import GroupKind, GroupSpec
from gpusched.engine.groupsources import foreign_key, owner_group_name, owner_spec
from gpusched.engine.snapshot import BoundPod
from gpusched.scheduler.records import PodRecord

logger = logging.getLogger(__name__)

WATCHED_KINDS = frozenset({*SIZES, "Job"})
"""Owner kinds the operator watches: an unseen owner of these is waited for."""


@dataclass(slots=True, kw_only=True)
class OwnerGroups:
    namespaces: tuple[str, ...] = ()
    """``ownerGroups.namespaces``: where it is on (``*``: everywhere)."""
    owners: dict[OwnerKey, Mapping[str, Any]] = field(default_factory=dict)
    specs: dict[str, GroupSpec] = field(default_factory=dict)
    """Owner group key → its spec (one per top owner that has pods)."""
    _members: dict[str, dict[str, float]] = field(default_factory=dict)
    """Owner group key → pod key → the pod's creation time."""
    _through: dict[OwnerKey, set[str]] = field(default_factory=dict)
    """Owner → keys of the pods whose chain passes through it (seen or awaited)."""
    _group_of: dict[str, str] = field(default_factory=dict)
    unknown_kinds: dict[str, str] = field(default_factory=dict)
    """Top owner kinds without a sizing rule, with one owner of each (logged once)."""
    untold: dict[str, str] = field(default_factory=dict)
    """Pod key → why it is a gang of one (its owner's kind has no sizing rule), until the
    reporter has posted it as an Event on the pod (`drain_untold`)."""

    def enabled(self, namespace: str) -> bool:
        return "*" in self.namespaces or namespace in self.namespaces

    def group(self, record: PodRecord) -> PodRecord:
        """``record`` with its owner group, when it should have one."""
        key = record.pod.key
        request = record.request
        if key in self._group_of and request is not None:
            request = replace(request, group=None)  # grouped by us before: group it afresh
            record = replace(record, request=request)
        self.forget(key)
        pod = record.pod
        if (
            request is None
            or request.group is not None
            or not pod.metadata.owner_references
            or not self.enabled(pod.namespace)
        ):
            return record
        metadata = pod.metadata.model_dump(by_alias=True)
        self._note_chain(key, pod.namespace, metadata)
        try:
            top = top_owner(f"Pod {key}", pod.namespace, metadata, self.owners)
        except InvalidObjectError as error:
            name = f"Pod.{pod.name}"
            spec = GroupSpec(
                key=foreign_key(GroupSource.OWNER, pod.namespace, name),
                kind=GroupKind.POD_GROUP,
                invalid=str(error),
            )
            return self._join(record, group_name(GroupSource.OWNER, name), spec)
        if top is None:
            return record
        engine_name = owner_group_name(top, pod.labels)
        if not top.known and top.kind in WATCHED_KINDS:
            return self._join(record, engine_name, None)  # its owner not seen yet: it waits
        if not top.known:
            self.untold[key] = (
                f"owner {top.kind} {pod.namespace}/{top.name} is of a kind gpusched cannot "
                "size (Job, JobSet, LeaderWorkerSet, PyTorchJob, MPIJob, RayCluster): this pod "
                "is a gang of one"
            )
        if not top.known and top.kind not in self.unknown_kinds:
            self.unknown_kinds[top.kind] = f"{pod.namespace}/{top.name}"
            logger.warning(
                "owner kind %s (%s/%s) has no sizing rule: its pods are gangs of one",
                top.kind,
                pod.namespace,
                top.name,
            )
        spec = owner_spec(pod.namespace, engine_name, top, request.created)
        return self._join(record, engine_name, spec)

    def _join(self, record: PodRecord, engine_name: str, spec: GroupSpec | None) -> PodRecord:
        assert record.request is not None
        request = replace(record.request, group=engine_name)
        key = f"{record.pod.namespace}/{engine_name}"
        members = self._members.setdefault(key, {})
        members[record.pod.key] = request.created
        self._group_of[record.pod.key] = key
        if spec is not None:
            self.specs[key] = replace(spec, created=min(members.values()))
        holding = record.holding
        if holding is not None:
            holding = BoundPod(request, holding.node, holding.gpus)
        return replace(record, request=request, holding=holding)

    def _note_chain(self, pod_key: str, namespace: str, metadata: Mapping[str, Any]) -> None:
        current: Mapping[str, Any] = metadata
        for _ in range(16):
            ref = controller_of(current)
            if ref is None:
                return
            key = owner_key(ref[0], ref[1], namespace, ref[2])
            pods = self._through.setdefault(key, set())
            if pod_key in pods:
                return  # a loop: top_owner names it
            pods.add(pod_key)
            body = self.owners.get(key)
            meta = body.get("metadata") if body is not None else None
            if not isinstance(meta, Mapping):
                return
            current = meta

    def drain_untold(self) -> dict[str, str]:
        told, self.untold = self.untold, {}
        return told

    def forget(self, pod_key: str) -> None:
        self.untold.pop(pod_key, None)
        group = self._group_of.pop(pod_key, None)
        if group is not None:
            members = self._members.get(group, {})
            members.pop(pod_key, None)
            if not members:
                self._members.pop(group, None)
                self.specs.pop(group, None)
        for pods in self._through.values():
            pods.discard(pod_key)

    def upsert(self, api_version: str, kind: str, body: Mapping[str, Any]) -> set[str]:
        """An owner appeared or changed; returns the pods to group again."""
        metadata = body.get("metadata")
        metadata = metadata if isinstance(metadata, Mapping) else {}
        key = owner_key(
            api_version,
            kind,
            str(metadata.get("namespace") or "default"),
            str(metadata.get("name")),
        )
        if not self.namespaces or not self.enabled(key[1]):
            return set()
        before = self.owners.get(key)
        self.owners[key] = body
        if before is not None and _same_shape(before, body):
            return set()
        return set(self._through.get(key, ()))

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> set[str]:
        key = owner_key(api_version, kind, namespace, name)
        self.owners.pop(key, None)
        return set(self._through.get(key, ()))


def _same_shape(before: Mapping[str, Any], after: Mapping[str, Any]) -> bool:
    """Whether what grouping reads (spec, annotations, owners) is unchanged."""

    def shape(body: Mapping[str, Any]) -> tuple[Any, Any, Any]:
        meta = body.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        return body.get("spec"), meta.get("annotations"), meta.get("ownerReferences")

    return shape(before) == shape(after)

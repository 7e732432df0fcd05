"""The operator's owner groups: pods of ours that name no group, in a namespace where
owner groups are on, join their top owner's gang (`gpusched.api.owners`). They are on in the
namespaces of ``ownerGroups.namespaces`` (``*``: all) and in every Namespace labelled
``scheduling.gpusched.io/owner-groups=enabled``; the label ``disabled`` turns them off in a
namespace the configuration names (or ``*`` covers).

Owners come from the watches of `gpusched.handlers.owners` (Jobs, the StatefulSets between a
LeaderWorkerSet and its pods, and the kinds `gpusched.api.owners.SIZES` sizes). They are kept
in every namespace, their pod templates dropped (`slim_owner`), so a namespace labelled later
finds them. A pod whose owner chain reaches an owner of a watched kind that has not been seen
yet waits for it ("not found"), never placed alone: at start the pods' list may come before
the Jobs'. When an owner or a namespace's label appears, changes or goes, the pods it concerns
are grouped again (`regroup`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gpusched.api.errors import InvalidObjectError
from gpusched.api.grouprefs import GroupSource, group_name
from gpusched.api.owners import SIZES, OwnerKey, controller_of, owner_key, top_owner
from gpusched.engine.groups import GroupKind, GroupSpec
from gpusched.engine.groupsources import (
    foreign_key,
    owner_gang_size,
    owner_group_name,
    owner_spec,
)
from gpusched.engine.snapshot import BoundPod
from gpusched.scheduler.records import PodRecord

logger = logging.getLogger(__name__)

WATCHED_KINDS = frozenset({*SIZES, "Job", "StatefulSet", "Pod"})
"""Owner kinds the operator watches: an unseen owner of these is waited for. A Pod owns the
StatefulSet of a LeaderWorkerSet's workers (its leader's)."""
POD_OWNER = owner_key("v1", "Pod", "", "")[0]
NAMESPACE_LABEL = "scheduling.gpusched.io/owner-groups"
"""On a Namespace: ``enabled`` turns owner groups on there, ``disabled`` off (either way
whatever ``ownerGroups.namespaces`` says)."""
_POD_SPEC_KEYS = frozenset({"containers", "initContainers", "volumes"})


@dataclass(slots=True, kw_only=True)
class OwnerGroups:
    namespaces: tuple[str, ...] = ()
    """``ownerGroups.namespaces``: where it is on (``*``: everywhere)."""
    labelled: dict[str, bool] = field(default_factory=dict)
    """Namespace → on (True) or off (False), from its `NAMESPACE_LABEL`."""
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

    pod_metadata: Callable[[str], Mapping[str, Any] | None] = field(default=lambda key: None)
    """Pod key → its metadata (the cluster state's pods): a Pod may be an owner in a chain."""

    def enabled(self, namespace: str) -> bool:
        label = self.labelled.get(namespace)
        if label is not None:
            return label
        return "*" in self.namespaces or namespace in self.namespaces

    @property
    def active(self) -> bool:
        """Whether any namespace may have owner groups (pods are worth grouping)."""
        return bool(self.namespaces) or any(self.labelled.values())

    def label(self, namespace: str, labels: Mapping[str, str] | None) -> bool:
        """A Namespace's labels seen (None: it is gone); whether that turned owner groups on
        or off there."""
        before = self.enabled(namespace)
        value = (labels or {}).get(NAMESPACE_LABEL)
        if value in ("enabled", "disabled"):
            self.labelled[namespace] = value == "enabled"
        else:
            if value is not None:
                logger.warning(
                    "Namespace %s: metadata.labels[%s]: %r is neither enabled nor disabled: "
                    "ignored",
                    namespace,
                    NAMESPACE_LABEL,
                    value,
                )
            self.labelled.pop(namespace, None)
        return self.enabled(namespace) != before

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
            top = top_owner(f"Pod {key}", pod.namespace, metadata, self._view())
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
        size = owner_gang_size(top, pod.labels)
        spec = owner_spec(pod.namespace, engine_name, top, request.created, size)
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
            body = self._view().get(key)
            meta = body.get("metadata") if body is not None else None
            if not isinstance(meta, Mapping):
                return
            current = meta

    def _view(self) -> _Owners:
        return _Owners(self.owners, self.pod_metadata)

    def pod_seen(self, namespace: str, name: str) -> set[str]:
        """A pod appeared, changed or went: the pods whose chain passes through it (a
        LeaderWorkerSet's workers through their leader) are grouped again."""
        return set(self._through.get((POD_OWNER, namespace, name), ()))

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
        body = slim_owner(body)
        before = self.owners.get(key)
        self.owners[key] = body
        if not self.enabled(key[1]) or (before is not None and _same_shape(before, body)):
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


def slim_owner(body: Mapping[str, Any]) -> Mapping[str, Any]:
    """An owner as kept: its pod templates' containers and volumes dropped (no sizing rule
    reads them, and they are most of a Job's bytes)."""

    def slim(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {k: slim(v) for k, v in value.items() if k not in _POD_SPEC_KEYS}
        if isinstance(value, list):
            return [slim(v) for v in value]
        return value

    kept = slim(body)
    assert isinstance(kept, Mapping)
    return kept


class _Owners(Mapping[OwnerKey, Mapping[str, Any]]):
    """The owners seen, and the pods (read from the cluster state when a chain reaches one)."""

    def __init__(
        self,
        owners: Mapping[OwnerKey, Mapping[str, Any]],
        pods: Callable[[str], Mapping[str, Any] | None],
    ) -> None:
        self.owners = owners
        self.pods = pods

    def __getitem__(self, key: OwnerKey) -> Mapping[str, Any]:
        if key[0] != POD_OWNER:
            return self.owners[key]
        metadata = self.pods(f"{key[1]}/{key[2]}")
        if metadata is None:
            raise KeyError(key)
        return {"metadata": metadata}

    def __iter__(self) -> Iterator[OwnerKey]:
        return iter(self.owners)

    def __len__(self) -> int:
        return len(self.owners)

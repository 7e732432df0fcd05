"""Groups and Workloads as last watched, and the group tree they form."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpusched.api.crds import (
    API_VERSION,
    CompositePodGroup,
    PodGroup,
    Workload,
    parse_composite_pod_group,
    parse_pod_group,
    parse_workload,
)
from gpusched.api.errors import InvalidObjectError
from gpusched.api.foreign import ForeignGroup, describe, parse_foreign, source_of
from gpusched.api.grouprefs import GroupRef, GroupSource
from gpusched.api.materialize import materialize
from gpusched.api.priority import PriorityClass, parse_priority_class
from gpusched.engine.groups import GroupKind, GroupSpec
from gpusched.engine.groupsources import (
    foreign_key,
    foreign_spec,
    implicit_specs,
    invalid_spec,
)
from gpusched.engine.request import PodRequest
from gpusched.scheduler.records import generation_of, mapping, metadata_of, name_of, namespace_of

logger = logging.getLogger(__name__)

Group = PodGroup | CompositePodGroup


@dataclass(slots=True, kw_only=True)
class GroupRecord:
    obj: Group | None
    spec: GroupSpec
    uid: str
    generation: int
    timeout_seconds: float
    raw_status: Mapping[str, Any]
    api_version: str = API_VERSION
    """Whose object it is: ours, or a foreign group's (`gpusched.api.foreign`)."""
    foreign: ForeignGroup | None = None

    @property
    def source(self) -> GroupSource:
        return GroupSource.GPUSCHED if self.foreign is None else self.foreign.source


@dataclass(slots=True, kw_only=True)
class WorkloadRecord:
    key: str
    uid: str
    generation: int
    workload: Workload | None
    error: InvalidObjectError | None
    raw_status: Mapping[str, Any]
    groups: tuple[Group, ...] = ()
    """What its templates materialise to, computed once per spec generation."""


@dataclass(slots=True, kw_only=True)
class GroupBook:
    """PodGroups, CompositePodGroups and Workloads, parsed once per spec generation."""

    groups: dict[str, GroupRecord] = field(default_factory=dict)
    workloads: dict[str, WorkloadRecord] = field(default_factory=dict)
    priority_classes: dict[str, PriorityClass] = field(default_factory=dict)
    """The cluster's PriorityClasses by name, as last watched."""
    groups_generation: int = 0
    """Bumped when a group's spec (or a PriorityClass it may name) appears, changes or goes."""
    _children_index: tuple[int, dict[str, list[str]]] | None = None
    implicit: dict[str, dict[str, tuple[GroupRef, float]]] = field(default_factory=dict)
    """Kueue plain-pod groups, which have no object: group key → pod key → (its reference,
    its creation time). Their specs are made from their pods (`group_specs`)."""

    def upsert_group(self, kind: GroupKind, body: Mapping[str, Any]) -> bool:
        """Returns whether the spec changed (status-only updates do not wake the scheduler)."""
        key = f"{namespace_of(body)}/{name_of(body)}"
        metadata = metadata_of(body)
        generation = generation_of(metadata)
        status = mapping(body.get("status"))
        if self._status_only(key, generation, status):
            return False
        obj: Group | None = None
        try:
            obj = (
                parse_pod_group(body)
                if kind is GroupKind.POD_GROUP
                else parse_composite_pod_group(body)
            )
            spec = self._spec(obj)
            timeout = float(obj.spec.schedule_timeout_seconds) if isinstance(obj, PodGroup) else 0
        except InvalidObjectError as error:
            spec = GroupSpec(key=key, kind=kind, invalid=str(error))
            timeout = 0.0
        self.groups[key] = GroupRecord(
            obj=obj,
            spec=spec,
            uid=str(metadata.get("uid") or ""),
            generation=generation,
            timeout_seconds=timeout,
            raw_status=status,
        )
        self.groups_generation += 1
        self._changed(capacity=False)
        return True

    def _status_only(self, key: str, generation: int, status: Mapping[str, Any]) -> bool:
        """Whether an update of group ``key`` changed only its status (same generation): the
        status is kept, the spec is not read again and the scheduler is not woken."""
        before = self.groups.get(key)
        if before is None or before.generation != generation or not generation:
            return False
        before.raw_status = status
        return True

    def upsert_foreign(self, body: Mapping[str, Any]) -> bool:
        """A Volcano, coscheduling or upstream group object (`gpusched.api.foreign`); returns
        whether its spec changed."""
        api_version = str(body.get("apiVersion") or "")
        source = source_of(api_version)
        kind = str(body.get("kind") or "PodGroup")
        if source is None or kind not in (GroupKind.POD_GROUP, GroupKind.COMPOSITE):
            return False
        namespace, name = namespace_of(body), name_of(body)
        key = foreign_key(source, namespace, name)
        metadata = metadata_of(body)
        generation = generation_of(metadata)
        status = mapping(body.get("status"))
        if self._status_only(key, generation, status):
            return False
        found: ForeignGroup | None = None
        timeout = 0.0
        try:
            found = parse_foreign(body)
            spec = foreign_spec(found, self.priority_classes or None)
            if isinstance(found.group, PodGroup):
                timeout = float(found.group.spec.schedule_timeout_seconds)
        except InvalidObjectError as error:
            spec = invalid_spec(source, kind, namespace, name, str(error))
            logger.warning("%s", error)
        obj = found.group if found is not None else None
        uid = str(metadata.get("uid") or "")
        self.groups[key] = GroupRecord(
            obj=obj,
            spec=spec,
            uid=uid,
            generation=generation,
            timeout_seconds=timeout,
            raw_status=status,
            api_version=api_version,
            foreign=found,
        )
        if found is not None and found.unhonoured:
            logger.info(
                "%s: read past %s (gpusched does not act on them)",
                describe(kind, api_version, body),
                ", ".join(found.unhonoured),
            )
        self.groups_generation += 1
        self._changed(capacity=False)
        return True

    def note_member(
        self, pod_key: str, namespace: str, ref: GroupRef | None, created: float
    ) -> None:
        """Keeps the members of Kueue's implicit groups: ``ref`` is the pod's reference now
        (None when it has none or is gone)."""
        for key, members in list(self.implicit.items()):
            if pod_key in members and (
                ref is None or foreign_key(ref.source, namespace, ref.name) != key
            ):
                del members[pod_key]
                if not members:
                    del self.implicit[key]
                self.groups_generation += 1
        if ref is None or ref.source is not GroupSource.KUEUE:
            return
        key = foreign_key(ref.source, namespace, ref.name)
        members = self.implicit.setdefault(key, {})
        if members.get(pod_key) != (ref, created):
            members[pod_key] = (ref, created)
            self.groups_generation += 1

    def _implicit_specs(self) -> list[GroupSpec]:
        # An object of the same name wins over the group its pods make.
        return implicit_specs({k: m for k, m in self.implicit.items() if k not in self.groups})

    def delete_foreign(self, api_version: str, namespace: str, name: str) -> None:
        source = source_of(api_version)
        if source is not None:
            self.delete_group(foreign_key(source, namespace, name))

    def _spec(self, obj: Group, foreign: ForeignGroup | None = None) -> GroupSpec:
        # Until the PriorityClasses are listed (a cluster always has the system ones), a
        # name alone is left unresolved rather than judged not found.
        classes = self.priority_classes or None
        if foreign is not None:
            return foreign_spec(foreign, classes)
        if isinstance(obj, PodGroup):
            return GroupSpec.from_pod_group(obj, classes)
        return GroupSpec.from_composite(obj, classes)

    def upsert_priority_class(self, body: Mapping[str, Any]) -> None:
        try:
            found = parse_priority_class(body)
        except InvalidObjectError as error:
            logger.warning("ignoring PriorityClass: %s", error)
            self.delete_priority_class(name_of(body))
            return
        if self.priority_classes.get(found.name) != found:
            self.priority_classes[found.name] = found
            self._respec()

    def delete_priority_class(self, name: str) -> None:
        if self.priority_classes.pop(name, None) is not None:
            self._respec()

    def _respec(self) -> None:
        """A PriorityClass changed: every group's priority is resolved again."""
        for record in self.groups.values():
            if record.obj is not None:
                try:
                    record.spec = self._spec(record.obj, record.foreign)
                except InvalidObjectError as error:
                    record.spec = GroupSpec(
                        key=record.spec.key, kind=record.spec.kind, invalid=str(error)
                    )
        self.groups_generation += 1
        self._changed(capacity=False)

    def delete_group(self, key: str) -> None:
        if self.groups.pop(key, None) is not None:
            self.groups_generation += 1
            self._changed(capacity=False)

    def group_specs(self) -> list[GroupSpec]:
        specs = [record.spec for record in self.groups.values()]
        if self.implicit:
            specs.extend(self._implicit_specs())
        return specs

    def upsert_workload(self, body: Mapping[str, Any]) -> WorkloadRecord:
        key = f"{namespace_of(body)}/{name_of(body)}"
        metadata = metadata_of(body)
        generation = generation_of(metadata)
        status = mapping(body.get("status"))
        before = self.workloads.get(key)
        if before is not None and before.generation == generation and generation:
            before.raw_status = status
            return before
        workload: Workload | None = None
        error: InvalidObjectError | None = None
        try:
            workload = parse_workload(body)
        except InvalidObjectError as err:
            error = err
        groups = tuple(materialize(workload)) if workload is not None else ()
        record = WorkloadRecord(
            key=key,
            uid=str(metadata.get("uid") or ""),
            generation=generation,
            workload=workload,
            error=error,
            raw_status=status,
            groups=groups,
        )
        self.workloads[key] = record
        return record

    def delete_workload(self, key: str) -> None:
        self.workloads.pop(key, None)

    def _children(self) -> dict[str, list[str]]:
        """Group key → its child groups' keys, rebuilt only when a group spec changed."""
        cached = self._children_index
        if cached is not None and cached[0] == self.groups_generation:
            return cached[1]
        children: dict[str, list[str]] = {}
        for record in self.groups.values():
            if record.spec.parent is not None:
                children.setdefault(record.spec.parent, []).append(record.spec.key)
        self._children_index = (self.groups_generation, children)
        return children

    def descendants(self, key: str) -> list[str]:
        """``key`` and every group under it, parents before children."""
        children = self._children()
        found, stack = [], [key]
        while stack:
            current = stack.pop()
            if current in found:
                continue
            found.append(current)
            stack.extend(sorted(children.get(current, []), reverse=True))
        return found

    def root_of(self, key: str) -> str:
        seen = {key}
        record = self.groups.get(key)
        while record is not None and record.spec.parent is not None:
            if record.spec.parent in seen:
                break
            seen.add(record.spec.parent)
            key = record.spec.parent
            record = self.groups.get(key)
        return key

    def root_of_request(self, request: PodRequest) -> str:
        """The key of the root group a pod belongs to (its own key when it has no group)."""
        if request.group is None:
            return request.key
        return self.root_of(f"{request.namespace}/{request.group}")

    def _changed(self, *, capacity: bool) -> None:
        """A change that could alter a scheduling decision (`ClusterState` counts them)."""

"""Groups and Workloads as last watched, and the group tree they form."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpusched.api.crds import (
    CompositePodGroup,
    PodGroup,
    Workload,
    parse_composite_pod_group,
    parse_pod_group,
    parse_workload,
)
from gpusched.api.errors import InvalidObjectError
from gpusched.api.materialize import materialize
from gpusched.engine.groups import GroupKind, GroupSpec
from gpusched.engine.request import PodRequest
from gpusched.scheduler.records import generation_of, mapping, metadata_of, name_of, namespace_of

Group = PodGroup | CompositePodGroup


@dataclass(slots=True)
class GroupRecord:
    obj: Group | None
    spec: GroupSpec
    uid: str
    generation: int
    timeout_seconds: float
    raw_status: Mapping[str, Any]


@dataclass(slots=True)
class WorkloadRecord:
    key: str
    uid: str
    generation: int
    workload: Workload | None
    error: InvalidObjectError | None
    raw_status: Mapping[str, Any]
    groups: tuple[Group, ...] = ()
    """What its templates materialise to, computed once per spec generation."""


@dataclass(slots=True)
class GroupBook:
    """PodGroups, CompositePodGroups and Workloads, parsed once per spec generation."""

    groups: dict[str, GroupRecord] = field(default_factory=dict)
    workloads: dict[str, WorkloadRecord] = field(default_factory=dict)
    groups_generation: int = 0
    """Bumped when a group's spec appears, changes or goes."""
    _children_index: tuple[int, dict[str, list[str]]] | None = None

    def upsert_group(self, kind: GroupKind, body: Mapping[str, Any]) -> bool:
        """Returns whether the spec changed (status-only updates do not wake the scheduler)."""
        key = f"{namespace_of(body)}/{name_of(body)}"
        metadata = metadata_of(body)
        generation = generation_of(metadata)
        before = self.groups.get(key)
        status = mapping(body.get("status"))
        if before is not None and before.generation == generation and generation:
            before.raw_status = status
            return False
        obj: Group | None = None
        try:
            obj = (
                parse_pod_group(body)
                if kind is GroupKind.POD_GROUP
                else parse_composite_pod_group(body)
            )
            spec = (
                GroupSpec.from_pod_group(obj)
                if isinstance(obj, PodGroup)
                else GroupSpec.from_composite(obj)
            )
            timeout = float(obj.spec.schedule_timeout_seconds) if isinstance(obj, PodGroup) else 0
        except InvalidObjectError as error:
            spec = GroupSpec(key=key, kind=kind, invalid=str(error))
            timeout = 0.0
        self.groups[key] = GroupRecord(
            obj, spec, str(metadata.get("uid") or ""), generation, timeout, status
        )
        self.groups_generation += 1
        self._changed(capacity=False)
        return True

    def delete_group(self, key: str) -> None:
        if self.groups.pop(key, None) is not None:
            self.groups_generation += 1
            self._changed(capacity=False)

    def group_specs(self) -> list[GroupSpec]:
        return [record.spec for record in self.groups.values()]

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
            key, str(metadata.get("uid") or ""), generation, workload, error, status, groups
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

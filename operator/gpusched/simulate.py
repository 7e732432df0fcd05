"""`gpusched simulate`: read Kubernetes objects from YAML, run the engine, report.

This module does the file I/O the engine must not: it reads documents, parses them with the
``api`` models, builds a snapshot and calls `gpusched.engine.schedule.schedule`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from gpusched.api.config import SchedulerConfig, load_config
from gpusched.api.crds import (
    CompositePodGroup,
    PodGroup,
    parse_composite_pod_group,
    parse_pod_group,
    parse_workload,
)
from gpusched.api.errors import InvalidObjectError, format_field_path
from gpusched.api.k8s import Node, Pod, parse_node, parse_pod
from gpusched.api.materialize import materialize
from gpusched.api.strict import check_pod_fields
from gpusched.engine.groups import GroupKind, GroupSpec
from gpusched.engine.request import PodRequest
from gpusched.engine.result import Phase, ScheduleResult
from gpusched.engine.schedule import schedule
from gpusched.engine.snapshot import BoundPod, GpuSample, Snapshot, build_snapshot

YAML_SUFFIXES = (".yaml", ".yml", ".json")
CLUSTER_SCOPED = frozenset(
    {"Node", "Namespace", "PersistentVolume", "StorageClass", "PriorityClass"}
)
"""Kinds without a namespace, among those a snapshot may hold."""
SAMPLE_DIR = Path(__file__).resolve().parent / "samples"
"""The embedded sample: ``examples/`` of the source tree, shipped inside the package."""


class InputError(Exception):
    """Unreadable or invalid input; the message names the file, the object and the field."""


@dataclass(slots=True)
class ClusterObjects:
    nodes: list[Node] = field(default_factory=list)
    pods: list[Pod] = field(default_factory=list)
    groups: list[PodGroup | CompositePodGroup] = field(default_factory=list)
    invalid_groups: list[GroupSpec] = field(default_factory=list)
    """PodGroups and CompositePodGroups that failed validation: reported ``Invalid`` naming
    the field, their pods left pending, exactly as the operator treats them."""
    invalid_workloads: dict[str, str] = field(default_factory=dict)
    """Workload key → why it failed validation (it materialises no group)."""
    ignored: dict[str, int] = field(default_factory=dict)
    """Kinds we read past, with counts (Jobs, Namespaces, …)."""


@dataclass(slots=True)
class _Reading:
    """What `load` has read so far: each object once, by identity, with where it came from."""

    objects: ClusterObjects = field(default_factory=ClusterObjects)
    seen: dict[tuple[str, str, str], tuple[str, Any]] = field(default_factory=dict)
    """(kind, namespace, name) → (where it was first read, its document)."""
    explicit: list[PodGroup | CompositePodGroup] = field(default_factory=list)
    materialised: list[PodGroup | CompositePodGroup] = field(default_factory=list)
    documents: int = 0


def load(paths: Iterable[Path]) -> ClusterObjects:
    """Reads every YAML document under ``paths`` (files or folders, recursively, sorted).

    An object given twice (a folder and a file inside it) is read once when both copies are
    the same, and is an error naming both places and the first field that differs when they
    are not. A PodGroup, CompositePodGroup or Workload that fails validation is kept as
    invalid, as the operator keeps it; anything else that cannot be parsed is an error. An
    input without a Node is an error: there would be nothing to place pods on.
    """
    paths = list(paths)
    reading = _Reading()
    for path in _files(paths):
        for number, document in _documents(path):
            where = f"{path}: document {number}"
            reading.documents += 1
            if _seen_before(reading, document, where):
                continue
            try:
                _add(reading, document)
            except InvalidObjectError as err:
                raise InputError(f"{where}: {err}") from None
    objects = reading.objects
    if not objects.nodes:
        raise InputError(
            f"{', '.join(map(str, paths))}: no Node among {reading.documents} documents read: "
            "pods are placed on the Nodes of the input (kubectl get nodes -o yaml)"
        )
    names = {g.key for g in reading.explicit} | {g.key for g in objects.invalid_groups}
    objects.groups = reading.explicit + [g for g in reading.materialised if g.key not in names]
    return objects


def _files(paths: Iterable[Path]) -> Iterator[Path]:
    for path in paths:
        if path.is_dir():
            yield from sorted(p for p in path.rglob("*") if p.suffix in YAML_SUFFIXES)
        elif path.is_file():
            yield path
        else:
            raise InputError(f"{path}: no such file or directory")


def _documents(path: Path) -> Iterator[tuple[int, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
        documents = list(yaml.safe_load_all(text))
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: cannot read: {err}") from None
    except yaml.YAMLError as err:
        raise InputError(f"{path}: not valid YAML: {err}") from None
    number = 0
    for document in documents:
        number += 1
        if document is None:
            continue
        if isinstance(document, dict) and document.get("kind") == "List":
            for item in document.get("items") or []:
                yield number, item
        else:
            yield number, document


def _identity(document: Any) -> tuple[str, str, str] | None:
    """(kind, namespace, name) as the API server keys objects; ``None`` for a document too
    broken to have one (the parser then names what is wrong)."""
    if not isinstance(document, dict):
        return None
    kind, metadata = document.get("kind"), document.get("metadata")
    if not isinstance(kind, str) or not isinstance(metadata, dict):
        return None
    name, namespace = metadata.get("name"), metadata.get("namespace") or "default"
    if not isinstance(name, str) or not isinstance(namespace, str):
        return None
    return kind, "" if kind in CLUSTER_SCOPED else namespace, name


def _seen_before(reading: _Reading, document: Any, where: str) -> bool:
    """Whether ``document`` is an object already read; `InputError` when its contents differ."""
    identity = _identity(document)
    if identity is None:
        return False
    first = reading.seen.setdefault(identity, (where, document))
    if first[1] is document:
        return False
    if first[1] == document:
        return True
    kind, namespace, name = identity
    obj = f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"
    raise InputError(
        f"{obj} is given twice with different contents, in {first[0]} and in {where}: "
        f"{format_field_path(_first_difference(first[1], document))} differs"
    )


def _first_difference(a: Any, b: Any, path: tuple[str | int, ...] = ()) -> tuple[str | int, ...]:
    """The path of the first field where ``a`` and ``b`` differ (they do differ)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in [*a, *(k for k in b if k not in a)]:
            if key not in a or key not in b or a[key] != b[key]:
                if key in a and key in b:
                    return _first_difference(a[key], b[key], (*path, str(key)))
                return (*path, str(key))
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for index, (x, y) in enumerate(zip(a, b, strict=True)):
            if x != y:
                return _first_difference(x, y, (*path, index))
    return path


def _add(reading: _Reading, document: Any) -> None:
    objects = reading.objects
    if not isinstance(document, dict):
        raise InvalidObjectError("document", "", "must be a mapping (a Kubernetes object)")
    kind = document.get("kind")
    if kind == "Node":
        objects.nodes.append(parse_node(document))
    elif kind == "Pod":
        pod = parse_pod(document)
        # A file has been through no API server: refuse unknown fields as it would.
        check_pod_fields(document, f"Pod {pod.key}")
        # Fields read only when scheduling (GPU share, GPU indices) are checked now, while
        # the file and document are known for the message.
        PodRequest.from_pod(pod)
        pod.assigned_gpus()
        objects.pods.append(pod)
    elif kind in (GroupKind.POD_GROUP, GroupKind.COMPOSITE):
        _add_group(reading, GroupKind(kind), document)
    elif kind == "Workload":
        try:
            reading.materialised.extend(materialize(parse_workload(document)))
        except InvalidObjectError as error:
            objects.invalid_workloads[_key(document)] = str(error)
    elif isinstance(kind, str) and kind:
        objects.ignored[kind] = objects.ignored.get(kind, 0) + 1
    else:
        raise InvalidObjectError("document", "kind", "missing or not a string")


def _add_group(reading: _Reading, kind: GroupKind, document: dict[str, Any]) -> None:
    """A valid group, or an invalid one kept with its error (the operator's way)."""
    try:
        if kind is GroupKind.POD_GROUP:
            reading.explicit.append(parse_pod_group(document))
        else:
            reading.explicit.append(parse_composite_pod_group(document))
    except InvalidObjectError as error:
        if _identity(document) is None:
            raise  # not even a name: nothing to report it under
        spec = GroupSpec(_key(document), kind, invalid=str(error))
        reading.objects.invalid_groups.append(spec)


def _key(document: dict[str, Any]) -> str:
    metadata = document.get("metadata") or {}
    return f"{metadata.get('namespace') or 'default'}/{metadata.get('name')}"


def read_config(path: Path | None) -> SchedulerConfig:
    """The SchedulerConfig in ``path``, or the defaults; `InputError` naming the file."""
    if path is None:
        return SchedulerConfig()
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        return load_config(raw, source=str(path))
    except (OSError, yaml.YAMLError) as error:
        raise InputError(f"{path}: cannot read: {error}") from None
    except InvalidObjectError as error:
        raise InputError(str(error)) from None


@dataclass(slots=True)
class Simulation:
    snapshot: Snapshot
    result: ScheduleResult
    pending: int
    ignored: dict[str, int]
    invalid_workloads: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The ``-o json`` document: the engine's, plus ``invalid`` when a Workload failed
        validation (invalid PodGroups and CompositePodGroups are in ``podGroups``)."""
        document = self.result.to_dict()
        if self.invalid_workloads:
            document["invalid"] = [
                {"kind": "Workload", "name": key, "reason": "Invalid", "message": message}
                for key, message in sorted(self.invalid_workloads.items())
            ]
        return document


def run(
    objects: ClusterObjects,
    config: SchedulerConfig,
    telemetry: Mapping[tuple[str, int], GpuSample] | None = None,
) -> Simulation:
    """Bound pods consume capacity; pending pods with our scheduler name are placed.
    ``telemetry`` goes to `build_snapshot` unchanged (``None``: no telemetry source)."""
    bound, pending = [], []
    ignored = dict(objects.ignored)
    for pod in objects.pods:
        if pod.is_terminal:
            continue
        request = PodRequest.from_pod(pod)  # validated by `load`
        if pod.spec.node_name:
            bound.append(BoundPod(request, pod.spec.node_name, pod.assigned_gpus()))
        elif pod.spec.scheduler_name == config.scheduler_name:
            pending.append(request)
        else:
            other = "Pod (other scheduler, pending)"
            ignored[other] = ignored.get(other, 0) + 1
    snapshot = build_snapshot(objects.nodes, bound, telemetry, config)
    groups = [_group_spec(g) for g in objects.groups] + objects.invalid_groups
    result = first_attempt(schedule(snapshot, pending, groups))
    return Simulation(snapshot, result, len(pending), ignored, dict(objects.invalid_workloads))


def first_attempt(result: ScheduleResult) -> ScheduleResult:
    """The result with each group's phase as the operator's status shows it after one
    attempt: a group that does not fit stays ``Pending`` (reason ``Unschedulable``) until its
    ``scheduleTimeoutSeconds`` pass, and an offline run never waits that long."""
    result.groups = [
        replace(g, phase=Phase.PENDING) if g.phase is Phase.UNSCHEDULABLE else g
        for g in result.groups
    ]
    return result


def _group_spec(group: PodGroup | CompositePodGroup) -> GroupSpec:
    if isinstance(group, PodGroup):
        return GroupSpec.from_pod_group(group)
    return GroupSpec.from_composite(group)

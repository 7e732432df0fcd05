"""`gpusched simulate`: read Kubernetes objects from YAML, run the engine, report.

This module does the file I/O the engine must not: it reads documents, parses them with the
``api`` models, builds a snapshot and calls `gpusched.engine.schedule.schedule`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpusched.api.config import SchedulerConfig
from gpusched.api.crds import (
    CompositePodGroup,
    PodGroup,
    materialize,
    parse_composite_pod_group,
    parse_pod_group,
    parse_workload,
)
from gpusched.api.errors import InvalidObjectError
from gpusched.api.k8s import Node, Pod, parse_node, parse_pod
from gpusched.engine.groups import GroupSpec
from gpusched.engine.request import PodRequest
from gpusched.engine.result import ScheduleResult
from gpusched.engine.schedule import schedule
from gpusched.engine.snapshot import BoundPod, GpuSample, Snapshot, build_snapshot

YAML_SUFFIXES = (".yaml", ".yml", ".json")
SAMPLE_DIR = Path(__file__).resolve().parent / "samples"
"""The embedded sample: ``examples/`` of the source tree, shipped inside the package."""


class InputError(Exception):
    """Unreadable or invalid input; the message names the file, the object and the field."""


@dataclass(slots=True)
class ClusterObjects:
    nodes: list[Node] = field(default_factory=list)
    pods: list[Pod] = field(default_factory=list)
    groups: list[PodGroup | CompositePodGroup] = field(default_factory=list)
    ignored: dict[str, int] = field(default_factory=dict)
    """Kinds we read past, with counts (Jobs, Namespaces, …)."""


def load(paths: Iterable[Path]) -> ClusterObjects:
    """Reads every YAML document under ``paths`` (files or folders, recursively, sorted)."""
    objects = ClusterObjects()
    explicit: list[PodGroup | CompositePodGroup] = []
    workload_groups: list[PodGroup | CompositePodGroup] = []
    for path in _files(paths):
        for number, document in _documents(path):
            where = f"{path}: document {number}"
            try:
                _add(objects, document, explicit, workload_groups)
            except InvalidObjectError as err:
                raise InputError(f"{where}: {err}") from None
    names = {g.key for g in explicit}
    objects.groups = explicit + [g for g in workload_groups if g.key not in names]
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


def _add(
    objects: ClusterObjects,
    document: Any,
    explicit: list[PodGroup | CompositePodGroup],
    workload_groups: list[PodGroup | CompositePodGroup],
) -> None:
    if not isinstance(document, dict):
        raise InvalidObjectError("document", "", "must be a mapping (a Kubernetes object)")
    kind = document.get("kind")
    if kind == "Node":
        objects.nodes.append(parse_node(document))
    elif kind == "Pod":
        pod = parse_pod(document)
        # Fields read only when scheduling (GPU share, GPU indices) are checked now, while
        # the file and document are known for the message.
        PodRequest.from_pod(pod)
        pod.assigned_gpus()
        objects.pods.append(pod)
    elif kind == "PodGroup":
        explicit.append(parse_pod_group(document))
    elif kind == "CompositePodGroup":
        explicit.append(parse_composite_pod_group(document))
    elif kind == "Workload":
        workload_groups.extend(materialize(parse_workload(document)))
    elif isinstance(kind, str) and kind:
        objects.ignored[kind] = objects.ignored.get(kind, 0) + 1
    else:
        raise InvalidObjectError("document", "kind", "missing or not a string")


@dataclass(slots=True)
class Simulation:
    snapshot: Snapshot
    result: ScheduleResult
    pending: int
    ignored: dict[str, int]


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
    groups = [_group_spec(g) for g in objects.groups]
    return Simulation(snapshot, schedule(snapshot, pending, groups), len(pending), ignored)


def _group_spec(group: PodGroup | CompositePodGroup) -> GroupSpec:
    if isinstance(group, PodGroup):
        return GroupSpec.from_pod_group(group)
    return GroupSpec.from_composite(group)

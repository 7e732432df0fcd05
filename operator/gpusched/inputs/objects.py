"""Kubernetes objects a person hands us, read once: YAML files, or the documents of a live
cluster.

They are read in one of two ways:
- **strict** (files, `load`): a file has been through no API server, so anything the API
  server or the operator would refuse is an `InputError` naming the file, the object and the
  field — except PodGroups, CompositePodGroups and Workloads, which the operator keeps as
  invalid and reports (so do we);
- **lenient** (a live cluster, `from_documents`): the API server already took every object,
  so an object that fails our validation is kept with its error, as the operator keeps it,
  and is explained as Invalid if asked about.

Each pod's `PodRequest` and GPU indices are parsed once, here, and travel with the pod.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from gpusched.api.budgets import PodDisruptionBudget, parse_pod_disruption_budget
from gpusched.api.config import SchedulerConfig
from gpusched.api.crds import (
    CompositePodGroup,
    PodGroup,
    parse_composite_pod_group,
    parse_pod_group,
    parse_workload,
)
from gpusched.api.dra import (
    DeviceClass,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
    parse_device_class,
    parse_resource_claim,
    parse_resource_claim_template,
    parse_resource_slice,
)
from gpusched.api.errors import InvalidObjectError, format_field_path
from gpusched.api.foreign import ForeignGroup, parse_foreign, source_of
from gpusched.api.grouprefs import GroupRef, GroupSource, group_name
from gpusched.api.k8s import Node, Pod, parse_node, parse_pod
from gpusched.api.materialize import materialize
from gpusched.api.owners import SIZES, OwnerKey, owner_key, top_owner
from gpusched.api.priority import PriorityClass, parse_priority_class
from gpusched.api.strict import check_pod_fields
from gpusched.engine.groups import GroupKind, GroupSpec
from gpusched.engine.groupsources import (
    foreign_key,
    foreign_spec,
    implicit_specs,
    invalid_spec,
    owner_gang_size,
    owner_group_name,
    owner_spec,
)
from gpusched.engine.request import PodRequest
from gpusched.inputs import InputError

YAML_SUFFIXES = (".yaml", ".yml", ".json")
CLUSTER_SCOPED = frozenset(
    {
        "Node",
        "Namespace",
        "PersistentVolume",
        "StorageClass",
        "PriorityClass",
        "ResourceSlice",
        "DeviceClass",
    }
)
"""Kinds without a namespace, among those a snapshot may hold."""
_GROUP_KINDS = ("PodGroup", "CompositePodGroup", "Workload")
"""Kinds other projects define too (`gpusched.api.foreign`), told apart by apiVersion."""
SAMPLE_DIR = Path(__file__).resolve().parent.parent / "samples"
"""The embedded sample: ``examples/`` of the source tree, shipped inside the package."""


@dataclass(frozen=True, slots=True)
class ReadPod:
    """A pod as read, with what the engine needs of it, parsed once."""

    pod: Pod
    request: PodRequest
    gpus: tuple[int, ...] | None
    """The GPU indices its annotation assigns (bound pods), or None."""
    ref: GroupRef | None = None
    """The group it names, from whichever source (`gpusched.api.grouprefs`)."""


@dataclass(slots=True)
class DraRead:
    """The DRA objects read, by name (cluster-scoped) or ``namespace/name``."""

    slices: dict[str, ResourceSlice] = field(default_factory=dict)
    classes: dict[str, DeviceClass] = field(default_factory=dict)
    claims: dict[str, ResourceClaim] = field(default_factory=dict)
    templates: dict[str, ResourceClaimTemplate] = field(default_factory=dict)
    compute_domains: dict[str, tuple[str, str]] = field(default_factory=dict)
    """The NVIDIA driver's ComputeDomains, by uid: (namespace, name)."""


@dataclass(slots=True, kw_only=True)
class ClusterObjects:
    nodes: list[Node] = field(default_factory=list)
    pods: list[ReadPod] = field(default_factory=list)
    groups: list[PodGroup | CompositePodGroup] = field(default_factory=list)
    invalid_groups: list[GroupSpec] = field(default_factory=list)
    """PodGroups and CompositePodGroups that failed validation: reported ``Invalid`` naming
    the field, their pods left pending, exactly as the operator treats them."""
    invalid_workloads: dict[str, str] = field(default_factory=dict)
    """Workload key → why it failed validation (it materialises no group)."""
    invalid_pods: dict[str, str] = field(default_factory=dict)
    """Pod key → why it failed validation (lenient reading only: strict reading refuses)."""
    ignored: dict[str, int] = field(default_factory=dict)
    """Kinds we read past, with counts (Jobs, Namespaces, …)."""
    priority_classes: dict[str, PriorityClass] = field(default_factory=dict)
    """By name: what a group's ``priorityClassName`` resolves to."""
    dra: DraRead = field(default_factory=lambda: DraRead())
    """ResourceSlices, DeviceClasses, ResourceClaims and their templates."""
    budgets: list[PodDisruptionBudget] = field(default_factory=list)
    """PodDisruptionBudgets, by key order as read."""
    foreign: list[ForeignGroup] = field(default_factory=list)
    """Upstream, Volcano and coscheduling groups (`gpusched.api.foreign`), read as ours."""
    owners: dict[OwnerKey, dict[str, Any]] = field(default_factory=dict)
    """Objects that may own pods (Jobs, JobSets, RayClusters, …), for `group_by_owner`."""
    owner_groups: dict[str, GroupSpec] = field(default_factory=dict)
    """The implicit gangs `group_by_owner` made, by key."""

    def group_specs(self) -> dict[str, GroupSpec]:
        """Every group the engine is given, by key: the valid ones and the invalid ones, ours
        and other projects' (Kueue's plain-pod groups made from their pods)."""
        specs = {g.key: _spec(g, self.priority_classes) for g in self.groups}
        for found in self.foreign:
            spec = foreign_spec(found, self.priority_classes)
            specs[spec.key] = spec
        specs.update({g.key: g for g in self.invalid_groups if g.key not in specs})
        specs.update(self.owner_groups)
        for spec in implicit_specs(self._implicit_members(specs)):
            specs[spec.key] = spec
        return specs

    def group_by_owner(self, config: SchedulerConfig) -> None:
        """Puts each pod of ours that names no group, in a namespace where owner grouping is
        on, in its top owner's gang (`gpusched.api.owners`), as the operator does. A pod whose
        owner chain loops is kept invalid, naming the chain."""
        for index, read in enumerate(self.pods):
            pod = read.pod
            if read.ref is not None or read.request.group is not None:
                continue
            if pod.spec.scheduler_name not in config.scheduler_names:
                continue
            if not config.owner_grouped(pod.namespace):
                continue
            metadata = pod.metadata.model_dump(by_alias=True)
            try:
                top = top_owner(f"Pod {pod.key}", pod.namespace, metadata, self.owners)
            except InvalidObjectError as error:
                # Its gang cannot be known: it waits, Invalid, naming the chain.
                name = group_name(GroupSource.OWNER, f"Pod.{pod.name}")
                self.pods[index] = replace(read, request=replace(read.request, group=name))
                key = foreign_key(GroupSource.OWNER, pod.namespace, f"Pod.{pod.name}")
                self.owner_groups[key] = GroupSpec(
                    key=key, kind=GroupKind.POD_GROUP, invalid=str(error)
                )
                continue
            if top is None:
                continue
            name = owner_group_name(top, pod.labels)
            request = replace(read.request, group=name)
            self.pods[index] = replace(read, request=request)
            size = owner_gang_size(top, pod.labels)
            spec = owner_spec(pod.namespace, name, top, request.created, size)
            before = self.owner_groups.get(spec.key)
            if before is None or before.created > spec.created:
                self.owner_groups[spec.key] = spec

    def _implicit_members(
        self, specs: Mapping[str, GroupSpec]
    ) -> dict[str, dict[str, tuple[GroupRef, float]]]:
        members: dict[str, dict[str, tuple[GroupRef, float]]] = {}
        for read in self.pods:
            ref = read.ref
            if ref is None or ref.source is not GroupSource.KUEUE:
                continue
            key = foreign_key(ref.source, read.pod.namespace, ref.name)
            if key not in specs:
                members.setdefault(key, {})[read.pod.key] = (ref, read.request.created)
        return members

    def workload_groups(self) -> dict[str, list[str]]:
        """Workload key → keys of the groups it materialises."""
        found: dict[str, list[str]] = {}
        for group in self.groups:
            ref = group.spec.workload_ref
            if ref is not None:
                key = f"{group.metadata.namespace}/{ref.workload_name}"
                found.setdefault(key, []).append(group.key)
        return found


def _spec(group: PodGroup | CompositePodGroup, classes: Mapping[str, PriorityClass]) -> GroupSpec:
    if isinstance(group, PodGroup):
        return GroupSpec.from_pod_group(group, classes)
    return GroupSpec.from_composite(group, classes)


# ----- objects ---------------------------------------------------------------------------------


class _Reader:
    """Adds documents to a `ClusterObjects`, strictly or leniently (see the module)."""

    def __init__(self, strict: bool) -> None:
        self.strict = strict
        self.objects = ClusterObjects()
        self.explicit: list[PodGroup | CompositePodGroup] = []
        self.materialised: list[PodGroup | CompositePodGroup] = []

    def add(self, document: Any) -> None:
        """Strict: `InvalidObjectError` for an object that must not be kept."""
        objects = self.objects
        if not isinstance(document, dict):
            raise InvalidObjectError("document", "", "must be a mapping (a Kubernetes object)")
        kind = document.get("kind")
        if kind == "Node":
            self._lenient(document, lambda: objects.nodes.append(parse_node(document)))
        elif kind == "Pod":
            self._lenient(document, lambda: self._add_pod(document))
        elif kind in _GROUP_KINDS and source_of(str(document.get("apiVersion") or "")):
            self._add_foreign(document)
        elif kind in (GroupKind.POD_GROUP, GroupKind.COMPOSITE):
            self._add_group(GroupKind(kind), document)
        elif kind == "PriorityClass":
            found = parse_priority_class(document)  # a class read wrong would mislead: strict
            objects.priority_classes[found.name] = found
        elif kind in _DRA_KINDS or kind == "PodDisruptionBudget":
            self._lenient(document, lambda: self._add_input(kind, document))
        elif kind == "ComputeDomain" and str(document.get("apiVersion")).startswith(
            "resource.nvidia.com/"
        ):
            meta = document.get("metadata") or {}
            if meta.get("uid"):  # without one, no claim's domainID can name it
                where = (str(meta.get("namespace") or "default"), str(meta.get("name") or ""))
                objects.dra.compute_domains[str(meta["uid"])] = where
        elif kind == "Workload":
            try:
                self.materialised.extend(materialize(parse_workload(document)))
            except InvalidObjectError as error:
                objects.invalid_workloads[_key(document)] = str(error)
        elif isinstance(kind, str) and kind:
            objects.ignored[kind] = objects.ignored.get(kind, 0) + 1
            self._keep_owner(kind, document)
        else:
            raise InvalidObjectError("document", "kind", "missing or not a string")

    def _add_input(self, kind: str, document: dict[str, Any]) -> None:
        """A DRA object or a PodDisruptionBudget: strict in files (one read wrong would
        change where pods go); leniently read, one the operator cannot parse is left out, as
        its watch leaves it out."""
        found = self.objects.dra
        if kind == "ResourceSlice":
            item = parse_resource_slice(document)
            found.slices[item.metadata.name] = item
        elif kind == "DeviceClass":
            device_class = parse_device_class(document)
            found.classes[device_class.metadata.name] = device_class
        elif kind == "ResourceClaim":
            claim = parse_resource_claim(document)
            found.claims[_key(document)] = claim
        elif kind == "ResourceClaimTemplate":
            template = parse_resource_claim_template(document)
            found.templates[_key(document)] = template
        else:
            self.objects.budgets.append(parse_pod_disruption_budget(document))

    def _keep_owner(self, kind: str, document: dict[str, Any]) -> None:
        """Objects that own pods, kept for `ClusterObjects.group_by_owner`: the kinds it sizes,
        and any other that itself has an owner (a ReplicaSet under a Deployment)."""
        identity = _identity(document)
        metadata = document.get("metadata") or {}
        if identity is None or (kind not in SIZES and not metadata.get("ownerReferences")):
            return
        api_version = str(document.get("apiVersion") or "")
        self.objects.owners[owner_key(api_version, kind, identity[1], identity[2])] = document

    def _lenient(self, document: dict[str, Any], add: Callable[[], None]) -> None:
        try:
            add()
        except InvalidObjectError as error:
            if self.strict:
                raise
            if document.get("kind") == "Pod":
                self.objects.invalid_pods[_key(document)] = str(error)
            # A Node the operator cannot read is one it does not place pods on.

    def _add_pod(self, document: dict[str, Any]) -> None:
        pod = parse_pod(document)
        if self.strict:
            # A file has been through no API server: refuse unknown fields as it would.
            check_pod_fields(document, f"Pod {pod.key}")
        # Fields read only when scheduling (GPU share, GPU indices) are parsed now, while the
        # file and document are known for the message.
        request = PodRequest.from_pod(pod)
        self.objects.pods.append(ReadPod(pod, request, pod.assigned_gpus(), pod.group_ref()))

    def _add_foreign(self, document: dict[str, Any]) -> None:
        """Another project's group (the Workload API's Workload itself places nothing: its
        controller creates the groups). Kept with its error when invalid, as the operator."""
        kind = document.get("kind")
        if kind not in (GroupKind.POD_GROUP, GroupKind.COMPOSITE):
            self.objects.ignored[str(kind)] = self.objects.ignored.get(str(kind), 0) + 1
            return
        try:
            self.objects.foreign.append(parse_foreign(document))
        except InvalidObjectError as error:
            identity = _identity(document)
            source = source_of(str(document.get("apiVersion")))
            if identity is None or source is None:
                raise
            spec = invalid_spec(source, str(kind), identity[1], identity[2], str(error))
            self.objects.invalid_groups.append(spec)

    def _add_group(self, kind: GroupKind, document: dict[str, Any]) -> None:
        """A valid group, or an invalid one kept with its error (the operator's way)."""
        try:
            if kind is GroupKind.POD_GROUP:
                self.explicit.append(parse_pod_group(document))
            else:
                self.explicit.append(parse_composite_pod_group(document))
        except InvalidObjectError as error:
            if self.strict and _identity(document) is None:
                raise  # not even a name: nothing to report it under
            spec = GroupSpec(key=_key(document), kind=kind, invalid=str(error))
            self.objects.invalid_groups.append(spec)

    def done(self) -> ClusterObjects:
        """The objects; a group given explicitly (valid or not) wins over a Workload's."""
        objects = self.objects
        names = {g.key for g in self.explicit} | {g.key for g in objects.invalid_groups}
        objects.groups = self.explicit + [g for g in self.materialised if g.key not in names]
        return objects


_DRA_KINDS = frozenset({"ResourceSlice", "DeviceClass", "ResourceClaim", "ResourceClaimTemplate"})


def _key(document: Mapping[str, Any]) -> str:
    metadata = document.get("metadata") or {}
    return f"{metadata.get('namespace') or 'default'}/{metadata.get('name') or '<unnamed>'}"


def load(paths: Iterable[Path]) -> ClusterObjects:
    """Reads every YAML document under ``paths`` (files or folders, recursively, sorted),
    strictly.

    An object given twice (a folder and a file inside it) is read once when both copies are
    the same, and is an error naming both places and the first field that differs when they
    are not. An input without a Node is an error: there would be nothing to place pods on.
    """
    paths = list(paths)
    reader, seen = _Reader(strict=True), _Seen()
    documents = 0
    for path in _files(paths):
        for number, document in _documents(path):
            where = f"{path}: document {number}"
            documents += 1
            try:
                if seen.before(document, where):
                    continue
                reader.add(document)
            except InvalidObjectError as err:
                raise InputError(f"{where}: {err}") from None
    if not reader.objects.nodes:
        raise InputError(
            f"{', '.join(map(str, paths))}: no Node among {documents} documents read: "
            "pods are placed on the Nodes of the input (kubectl get nodes -o yaml)"
        )
    return reader.done()


def from_documents(documents: Iterable[Mapping[str, Any]]) -> ClusterObjects:
    """The objects of a live cluster, read leniently (see the module)."""
    reader = _Reader(strict=False)
    for document in documents:
        reader.add(dict(document))
    return reader.done()


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


# ----- the same object twice -------------------------------------------------------------------


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


class _Seen:
    """Each object once, by identity, with where it was first read and its document."""

    def __init__(self) -> None:
        self.first: dict[tuple[str, str, str], tuple[str, Any]] = {}

    def before(self, document: Any, where: str) -> bool:
        """Whether ``document`` is an object already read; `InputError` when its contents
        differ."""
        identity = _identity(document)
        if identity is None:
            return False
        first = self.first.setdefault(identity, (where, document))
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

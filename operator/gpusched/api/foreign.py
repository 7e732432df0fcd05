"""Other projects' group objects, read as our PodGroup and CompositePodGroup models.

Each kind is translated into the body of our own object, field by field, and parsed by our
own parser, so one set of rules (and one engine) serves all of them:

- ``scheduling.k8s.io`` PodGroup (``v1`` from 1.38, ``v1beta1`` in 1.37, ``v1alpha2`` in
  1.36; the newest one served is read, `served_versions`): our PodGroup, same fields;
  ``disruptionMode: {all: {}}`` is ``All``;
- ``scheduling.k8s.io`` CompositePodGroup (``v1alpha3`` in 1.37): our CompositePodGroup,
  same fields; the ``basic`` policy (children scheduled independently) is read as upstream
  defines it (`ForeignGroup.basic`);
- ``scheduling.volcano.sh/v1beta1`` PodGroup: a gang of ``minMember``, ``priorityClassName``,
  per-task ``minTaskMember`` (`ForeignGroup.task_minimums`) and ``minResources``
  (`ForeignGroup.min_resources`);
- ``scheduling.x-k8s.io/v1alpha1`` PodGroup: a gang of ``minMember``,
  ``scheduleTimeoutSeconds``, ``minResources``.

What their schemas cannot say is set with annotations on the object (`TOPOLOGY_ANNOTATION`,
`TIMEOUT_ANNOTATION`); everything else (NUMA policy, scoring, the backtracking budget) is
the operator's configuration, as for our own objects. Fields read but not acted on
(`ForeignGroup.unhonoured`): Volcano's ``queue`` (gpusched has no queues) and
``networkTopology``, upstream's ``resourceClaims`` (the PodGroup's shared claims).

Errors name the object as ``<Kind>.<api group> ns/name`` and the field as its author wrote it
(``spec.minMember``), not as our translation spells it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpusched.api.crds import (
    API_VERSION,
    CompositePodGroup,
    PodGroup,
    parse_composite_pod_group,
    parse_pod_group,
)
from gpusched.api.errors import InvalidObjectError, format_field_path
from gpusched.api.grouprefs import GroupSource
from gpusched.api.quantity import parse_quantity

TOPOLOGY_ANNOTATION = "scheduling.gpusched.io/topology-key"
"""On a Volcano or coscheduling PodGroup: the node label whose one value all its pods share
(our ``schedulingConstraints.topology[0].key``); their schemas have no such field."""
VOLCANO_TASK_ANNOTATION = "volcano.sh/task-spec"
"""On a pod of a Volcano PodGroup: the task it belongs to (``minTaskMember``'s keys), as
Volcano's Job controller and Kubeflow's training operators write it."""
TIMEOUT_ANNOTATION = "scheduling.gpusched.io/schedule-timeout-seconds"
"""On an upstream or Volcano PodGroup: our ``scheduleTimeoutSeconds``."""

_META_KEYS = ("name", "namespace", "uid", "creationTimestamp", "labels", "annotations")
_UPSTREAM_SPEC_KEYS = (
    "schedulingPolicy",
    "schedulingConstraints",
    "parentCompositePodGroupName",
    "workloadRef",
    "priorityClassName",
    "priority",
    "preemptionPolicy",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ForeignGroup:
    """A foreign group read as ours: ``group`` has the object's own name; the engine keys it
    by ``grouprefs.group_name(source, name)``."""

    source: GroupSource
    api_version: str
    group: PodGroup | CompositePodGroup
    unhonoured: tuple[str, ...] = ()
    """Fields present on the object that gpusched reads past (see the module docstring)."""
    min_resources: tuple[tuple[str, int], ...] = ()
    """Volcano's or coscheduling's ``minResources`` (resource, canonical amount): the group
    waits until the cluster's free resources could hold them, as their schedulers do."""
    task_minimums: tuple[tuple[str, int], ...] = ()
    """Volcano's ``minTaskMember`` (task, its minimum), by task: besides ``minMember``, each
    task needs that many of its pods (`VOLCANO_TASK_ANNOTATION`), all or nothing."""
    basic: bool = False
    """An upstream CompositePodGroup with the ``basic`` policy: its child groups are
    scheduled independently (each by its own policy), none waits for its siblings; the
    composite's topology constraint still holds all of them in one domain. ``group`` carries
    ``minGroupCount: 1``: a domain is chosen where at least one child fits."""


CANDIDATES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("scheduling.k8s.io", ("v1", "v1beta1", "v1alpha3", "v1alpha2"), "PodGroup"),
    ("scheduling.k8s.io", ("v1", "v1beta1", "v1alpha3"), "CompositePodGroup"),
    ("scheduling.volcano.sh", ("v1beta1",), "PodGroup"),
    ("scheduling.x-k8s.io", ("v1alpha1",), "PodGroup"),
)
"""Each foreign group kind gpusched reads: its API group, the versions it reads, newest
first, and its kind. Upstream's PodGroup is GA as ``v1`` in 1.38, ``v1beta1`` in 1.37 (which
also serves ``v1alpha3``), ``v1alpha2`` in 1.36; its CompositePodGroup is ``v1alpha3`` in
1.37. The versions share the fields gpusched reads."""
FOREIGN_PLURALS = {"PodGroup": "podgroups", "CompositePodGroup": "compositepodgroups"}


@dataclass(frozen=True, slots=True)
class Served:
    """What `served_versions` found: the version of each kind to read, and the kinds the
    server serves in none of the versions gpusched reads."""

    chosen: tuple[tuple[str, str], ...]
    """(apiVersion, kind), one per kind served, its newest served version."""
    unserved: tuple[str, ...]
    """``CompositePodGroup.scheduling.k8s.io (v1, v1beta1, v1alpha3)``: not served in any."""


def group_versions() -> list[str]:
    """Every ``group/version`` whose discovery `served_versions` reads, in order."""
    return list(dict.fromkeys(f"{g}/{v}" for g, versions, _ in CANDIDATES for v in versions))


def served_versions(discovery: Mapping[str, Mapping[str, Any] | None]) -> Served:
    """The newest served version of each foreign kind, from the API server's discovery:
    ``discovery`` maps each of `group_versions` to its ``APIResourceList`` document (None, or
    missing, when the server answers 404: that version is not served)."""
    chosen: list[tuple[str, str]] = []
    for group, versions, kind in CANDIDATES:
        plural = FOREIGN_PLURALS[kind]
        found = next(
            (v for v in versions if plural in _plurals(discovery.get(f"{group}/{v}"))), None
        )
        if found is not None:
            chosen.append((f"{group}/{found}", kind))
    return with_chosen(chosen)


def with_chosen(chosen: Sequence[tuple[str, str]]) -> Served:
    """`Served` of the (apiVersion, kind) pairs ``chosen``: every other candidate unserved."""
    picked = {(api_version.partition("/")[0], kind) for api_version, kind in chosen}
    unserved = tuple(
        f"{kind}.{group} ({', '.join(versions)})"
        for group, versions, kind in CANDIDATES
        if (group, kind) not in picked
    )
    return Served(tuple(chosen), unserved)


def _plurals(document: Mapping[str, Any] | None) -> set[str]:
    resources = document.get("resources") if isinstance(document, Mapping) else None
    if not isinstance(resources, list):
        return set()
    return {str(r.get("name")) for r in resources if isinstance(r, Mapping)}


def source_of(api_version: str) -> GroupSource | None:
    """Which source defines objects of ``api_version`` (None: not a group source we read)."""
    group = api_version.partition("/")[0]
    for source in (GroupSource.UPSTREAM, GroupSource.VOLCANO, GroupSource.COSCHEDULING):
        if group == source.value:
            return source
    return None


def describe(kind: str, api_version: str, raw: Mapping[str, Any]) -> str:
    """``PodGroup.scheduling.volcano.sh ml/train``."""
    meta = raw.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    group = api_version.partition("/")[0]
    return f"{kind}.{group} {meta.get('namespace') or 'default'}/{meta.get('name') or '<unnamed>'}"


def parse_foreign(raw: Mapping[str, Any]) -> ForeignGroup:
    """Reads a foreign group object; raises `InvalidObjectError` naming it and its field."""
    api_version = str(raw.get("apiVersion") or "")
    kind = str(raw.get("kind") or "")
    source = source_of(api_version)
    obj = describe(kind, api_version, raw)
    if source is None:
        raise InvalidObjectError(obj, "apiVersion", "not a group API gpusched reads")
    spec = raw.get("spec")
    if not isinstance(spec, Mapping):
        raise InvalidObjectError(obj, "spec", "missing or not a mapping")
    basic = False
    min_resources: tuple[tuple[str, int], ...] = ()
    task_minimums: tuple[tuple[str, int], ...] = ()
    if source is GroupSource.UPSTREAM:
        body, unhonoured = _upstream(kind, spec, obj)
        basic = kind == "CompositePodGroup" and _composite_basic(body, obj)
    elif kind != "PodGroup":
        raise InvalidObjectError(obj, "kind", "only PodGroup is read from this API group")
    else:
        body, unhonoured = _min_member(source, spec, obj)
        min_resources = _min_resources(spec, obj)
        if source is GroupSource.VOLCANO:
            task_minimums = _task_minimums(spec, obj)
    annotations = _annotations(raw)
    if (topology := annotations.get(TOPOLOGY_ANNOTATION)) is not None:
        body.setdefault("schedulingConstraints", {"topology": [{"key": topology}]})
    if kind == "PodGroup" and (timeout := annotations.get(TIMEOUT_ANNOTATION)) is not None:
        body["scheduleTimeoutSeconds"] = _int(
            obj, timeout, f"metadata.annotations[{TIMEOUT_ANNOTATION}]"
        )
    ours = {"apiVersion": API_VERSION, "kind": kind, "metadata": _metadata(raw), "spec": body}
    try:
        group = parse_pod_group(ours) if kind == "PodGroup" else parse_composite_pod_group(ours)
    except InvalidObjectError as error:
        raise InvalidObjectError(obj, _their_field(source, error.field), error.message) from None
    return ForeignGroup(
        source=source,
        api_version=api_version,
        group=group,
        unhonoured=unhonoured,
        min_resources=min_resources,
        task_minimums=task_minimums,
        basic=basic,
    )


def _upstream(
    kind: str, spec: Mapping[str, Any], obj: str
) -> tuple[dict[str, Any], tuple[str, ...]]:
    if kind not in ("PodGroup", "CompositePodGroup"):
        raise InvalidObjectError(obj, "kind", "want PodGroup or CompositePodGroup")
    body = {key: spec[key] for key in _UPSTREAM_SPEC_KEYS if spec.get(key) is not None}
    mode = spec.get("disruptionMode")
    if isinstance(mode, Mapping) and mode:
        chosen = [name for name in ("all", "single") if mode.get(name) is not None]
        if len(chosen) != 1:
            raise InvalidObjectError(obj, "spec.disruptionMode", "exactly one of all or single")
        body["disruptionMode"] = chosen[0].capitalize()
    unhonoured = tuple(f"spec.{key}" for key in ("resourceClaims",) if spec.get(key))
    return body, unhonoured


def _composite_basic(body: dict[str, Any], obj: str) -> bool:
    """Whether an upstream CompositePodGroup's policy is ``basic``; if so, its body says
    ``minGroupCount: 1`` for our parser (`ForeignGroup.basic`)."""
    policy = body.get("schedulingPolicy")
    if not isinstance(policy, Mapping) or policy.get("basic") is None:
        return False
    if policy.get("gang") is not None:
        raise InvalidObjectError(obj, "spec.schedulingPolicy", "exactly one of gang or basic")
    if not isinstance(policy["basic"], Mapping):
        raise InvalidObjectError(obj, "spec.schedulingPolicy.basic", "must be an object ({})")
    body["schedulingPolicy"] = {"gang": {"minGroupCount": 1}}
    return True


def _min_member(
    source: GroupSource, spec: Mapping[str, Any], obj: str
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Volcano's and coscheduling's PodGroup: a gang of ``minMember`` pods."""
    raw = spec.get("minMember", 1 if source is GroupSource.VOLCANO else None)
    if not isinstance(raw, int) or isinstance(raw, bool) or raw < 1:
        raise InvalidObjectError(obj, "spec.minMember", f"must be an integer >= 1, got {raw!r}")
    body: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": raw}}}
    if source is GroupSource.VOLCANO and spec.get("priorityClassName"):
        body["priorityClassName"] = spec["priorityClassName"]
    if source is GroupSource.COSCHEDULING and spec.get("scheduleTimeoutSeconds") is not None:
        body["scheduleTimeoutSeconds"] = spec["scheduleTimeoutSeconds"]
    read_past = ("queue", "networkTopology")
    return body, tuple(f"spec.{key}" for key in read_past if spec.get(key))


def _min_resources(spec: Mapping[str, Any], obj: str) -> tuple[tuple[str, int], ...]:
    """``minResources`` as (resource, canonical amount), by name; raises naming the entry."""
    raw = spec.get("minResources")
    if raw is None:
        return ()
    if not isinstance(raw, Mapping):
        raise InvalidObjectError(obj, "spec.minResources", "must be a map of resource quantities")
    found = []
    for name, value in sorted(raw.items()):
        field = format_field_path(["spec", "minResources", str(name)])
        try:
            amount = parse_quantity(str(name), value)
        except (TypeError, ValueError) as error:
            raise InvalidObjectError(obj, field, str(error)) from None
        if amount < 0:
            raise InvalidObjectError(obj, field, f"must not be negative, got {value!r}")
        if amount:
            found.append((str(name), amount))
    return tuple(found)


def _task_minimums(spec: Mapping[str, Any], obj: str) -> tuple[tuple[str, int], ...]:
    """Volcano's ``minTaskMember``, by task; raises naming the entry."""
    raw = spec.get("minTaskMember")
    if raw is None:
        return ()
    if not isinstance(raw, Mapping):
        raise InvalidObjectError(obj, "spec.minTaskMember", "must be a map of task → count")
    found = []
    for task, count in sorted(raw.items()):
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            field = format_field_path(["spec", "minTaskMember", str(task)])
            raise InvalidObjectError(obj, field, f"must be an integer >= 0, got {count!r}")
        if count:
            found.append((str(task), count))
    return tuple(found)


_THEIR_FIELDS = {
    "spec.schedulingPolicy.gang.minCount": "spec.minMember",
    "spec.scheduleTimeoutSeconds": "spec.scheduleTimeoutSeconds",
}


def _their_field(source: GroupSource, field: str) -> str:
    if source is GroupSource.UPSTREAM:
        return field
    if field.startswith("spec.schedulingConstraints"):
        return f"metadata.annotations[{TOPOLOGY_ANNOTATION}]"
    return _THEIR_FIELDS.get(field, field)


def _annotations(raw: Mapping[str, Any]) -> Mapping[str, str]:
    meta = raw.get("metadata")
    found = meta.get("annotations") if isinstance(meta, Mapping) else None
    return found if isinstance(found, Mapping) else {}


def _metadata(raw: Mapping[str, Any]) -> dict[str, Any]:
    meta = raw.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    return {key: meta[key] for key in _META_KEYS if meta.get(key) is not None}


def _int(obj: str, value: str, field: str) -> int:
    if not value.strip().isdigit():
        raise InvalidObjectError(obj, field, f"must be a whole number of seconds, got {value!r}")
    return int(value)

"""Which group a pod belongs to, read from every place a controller may say it.

A pod names its gang in one of six ways, depending on who made it:

- gpusched: label ``scheduling.gpusched.io/pod-group``, our PodGroup;
- Kubernetes' Workload API: ``spec.schedulingGroup.podGroupName``, a ``scheduling.k8s.io``
  PodGroup;
- Volcano: annotation ``scheduling.k8s.io/group-name``, a ``scheduling.volcano.sh`` PodGroup;
- scheduler-plugins coscheduling: label ``scheduling.x-k8s.io/pod-group``, a
  ``scheduling.x-k8s.io`` PodGroup;
- Kueue plain pods: label ``kueue.x-k8s.io/pod-group-name`` and annotation
  ``kueue.x-k8s.io/pod-group-total-count``, an implicit gang of that size.

`resolve_group` is the one place that reads them. A pod that names two different groups is
refused, naming both fields: guessing which one its author meant could split a gang. The
groups of different sources live in different name spaces (a Volcano PodGroup ``train`` is
not our PodGroup ``train``), so the engine keys a group by `GroupRef.group_name`: the plain
name for ours, ``<source>:<name>`` for the others (a ``:`` never occurs in an object name).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from gpusched.api.errors import InvalidObjectError, format_field_path

POD_GROUP_LABEL = "scheduling.gpusched.io/pod-group"
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
COSCHEDULING_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
KUEUE_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
KUEUE_TOTAL_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"
SCHEDULING_GROUP_FIELD = "spec.schedulingGroup.podGroupName"

MAX_KUEUE_GROUP = 100_000
"""The largest total count read from Kueue's annotation; more is a typo, not a gang."""


class GroupSource(StrEnum):
    """Who defines the group a pod names (the API group of its object, where it has one)."""

    GPUSCHED = "scheduling.gpusched.io"
    UPSTREAM = "scheduling.k8s.io"
    VOLCANO = "scheduling.volcano.sh"
    COSCHEDULING = "scheduling.x-k8s.io"
    KUEUE = "kueue.x-k8s.io"
    OWNER = "owner"
    """An implicit group made for the top owner of pods that name no group (opt-in)."""


PREFIXES: Mapping[GroupSource, str] = {
    GroupSource.UPSTREAM: "k8s",
    GroupSource.VOLCANO: "volcano",
    GroupSource.COSCHEDULING: "coscheduling",
    GroupSource.KUEUE: "kueue",
    GroupSource.OWNER: "owner",
}
"""The prefix of a foreign group's name in the engine's keys (``ml/volcano:train``)."""


def group_name(source: GroupSource, name: str) -> str:
    """The name the engine keys a group of ``source`` by (see the module's docstring)."""
    prefix = PREFIXES.get(source)
    return name if prefix is None else f"{prefix}:{name}"


def split_group_name(engine_name: str) -> tuple[GroupSource, str]:
    """The inverse of `group_name`."""
    prefix, colon, name = engine_name.partition(":")
    if colon:
        for source, known in PREFIXES.items():
            if known == prefix:
                return source, name
    return GroupSource.GPUSCHED, engine_name


@dataclass(frozen=True, slots=True)
class GroupRef:
    """A pod's reference to its group: who defines it, its name, and the field that said so.
    ``total`` is Kueue's total count (the gang's size), None for the others."""

    source: GroupSource
    name: str
    field: str
    total: int | None = None

    @property
    def group_name(self) -> str:
        return group_name(self.source, self.name)


_COUNT_RE = re.compile(r"[0-9]{1,6}")


def group_refs(
    obj: str,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    scheduling_group: str | None,
) -> list[GroupRef]:
    """Every group reference on a pod, in the table's order. Raises `InvalidObjectError`
    naming the field for a Kueue group without a readable total count."""
    found: list[GroupRef] = []
    if (name := labels.get(POD_GROUP_LABEL)) is not None:
        found.append(GroupRef(GroupSource.GPUSCHED, name, _label(POD_GROUP_LABEL)))
    if scheduling_group:
        found.append(GroupRef(GroupSource.UPSTREAM, scheduling_group, SCHEDULING_GROUP_FIELD))
    if (name := annotations.get(VOLCANO_GROUP_ANNOTATION)) is not None:
        found.append(GroupRef(GroupSource.VOLCANO, name, _annotation(VOLCANO_GROUP_ANNOTATION)))
    if (name := labels.get(COSCHEDULING_GROUP_LABEL)) is not None:
        field = _label(COSCHEDULING_GROUP_LABEL)
        found.append(GroupRef(GroupSource.COSCHEDULING, name, field))
    if (name := labels.get(KUEUE_GROUP_LABEL)) is not None:
        found.append(_kueue(obj, name, annotations))
    return found


def resolve_group(
    obj: str,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    scheduling_group: str | None,
) -> GroupRef | None:
    """The one group a pod belongs to, or None. Raises `InvalidObjectError` for ``obj``
    (``Pod ns/name``) when it names two different groups (naming both fields) or a Kueue
    group whose size cannot be read."""
    found = group_refs(obj, labels, annotations, scheduling_group)
    if not found:
        return None
    first = found[0]
    for other in found[1:]:
        if (other.source, other.name) != (first.source, first.name):
            raise InvalidObjectError(
                obj,
                other.field,
                f"names the group {other.source.value} {other.name!r}, but {first.field} "
                f"names {first.source.value} {first.name!r}; a pod belongs to one group",
            )
    return first


def _kueue(obj: str, name: str, annotations: Mapping[str, str]) -> GroupRef:
    field = _label(KUEUE_GROUP_LABEL)
    value = annotations.get(KUEUE_TOTAL_ANNOTATION)
    total = int(value) if value is not None and _COUNT_RE.fullmatch(value.strip()) else 0
    if not 1 <= total <= MAX_KUEUE_GROUP:
        got = "it is missing" if value is None else f"got {value!r}"
        raise InvalidObjectError(
            obj,
            _annotation(KUEUE_TOTAL_ANNOTATION),
            f"a Kueue pod group ({field}={name}) needs its size here, "
            f"an integer 1..{MAX_KUEUE_GROUP}; {got}",
        )
    return GroupRef(GroupSource.KUEUE, name, field, total)


def _label(key: str) -> str:
    return format_field_path(["metadata", "labels", key])


def _annotation(key: str) -> str:
    return format_field_path(["metadata", "annotations", key])


MEMBER_FIELDS: Mapping[GroupSource, str] = {
    GroupSource.GPUSCHED: f"labelled {POD_GROUP_LABEL}=",
    GroupSource.UPSTREAM: f"with {SCHEDULING_GROUP_FIELD}=",
    GroupSource.VOLCANO: f"annotated {VOLCANO_GROUP_ANNOTATION}=",
    GroupSource.COSCHEDULING: f"labelled {COSCHEDULING_GROUP_LABEL}=",
    GroupSource.KUEUE: f"labelled {KUEUE_GROUP_LABEL}=",
    GroupSource.OWNER: "owned by ",
}
"""How a pod joins a group of each source, for hints (``labelled …=train``)."""


def how_to_join(engine_name: str) -> str:
    """``labelled scheduling.gpusched.io/pod-group=train``, ``with
    spec.schedulingGroup.podGroupName=train``, … for the group the engine calls
    ``engine_name``."""
    source, name = split_group_name(engine_name)
    return f"{MEMBER_FIELDS[source]}{name}"

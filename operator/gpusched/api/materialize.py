"""Materialisation: a Workload's templates become the PodGroups and CompositePodGroups they
describe, named ``<workload>-<template>`` and owned by the Workload."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from gpusched.api.crds import (
    API_VERSION,
    CompositePodGroup,
    CompositePodGroupSpec,
    CompositePodGroupTemplate,
    ObjectMeta,
    PodGroup,
    PodGroupSpec,
    PodGroupTemplate,
    PriorityFields,
    Workload,
    WorkloadRef,
    check_object_names,
    object_name,
)
from gpusched.api.meta import OwnerReference

_AnyTemplate = PodGroupTemplate | CompositePodGroupTemplate


def _owner_reference(workload: Workload) -> OwnerReference:
    """Controller reference, so deleting the Workload garbage-collects what it created."""
    return OwnerReference(
        api_version=workload.api_version,
        kind=workload.kind,
        name=workload.metadata.name,
        uid=workload.metadata.uid,
        controller=True,
        block_owner_deletion=True,
    )


def _metadata(workload: Workload, template: _AnyTemplate) -> ObjectMeta:
    return ObjectMeta(
        name=object_name(workload, template),
        namespace=workload.metadata.namespace,
        owner_references=[_owner_reference(workload)],
    )


def _workload_ref(workload: Workload, template: _AnyTemplate) -> WorkloadRef:
    return WorkloadRef(workload_name=workload.metadata.name, template_name=template.name)


def _priority_fields(template: _AnyTemplate) -> dict[str, Any]:
    """The template's priority and disruption fields, passed on unchanged to its object."""
    return {name: getattr(template, name) for name in PriorityFields.model_fields}


def _pod_group(workload: Workload, template: PodGroupTemplate, parent: str | None) -> PodGroup:
    spec = PodGroupSpec(
        **_priority_fields(template),
        scheduling_policy=template.scheduling_policy,
        scheduling_constraints=template.scheduling_constraints,
        parent_composite_pod_group_name=parent,
        workload_ref=_workload_ref(workload, template),
    )
    return PodGroup(
        api_version=API_VERSION,
        kind="PodGroup",
        metadata=_metadata(workload, template),
        spec=spec,
    )


def _composite(
    workload: Workload, template: CompositePodGroupTemplate, parent: str | None
) -> CompositePodGroup:
    spec = CompositePodGroupSpec(
        **_priority_fields(template),
        scheduling_policy=template.scheduling_policy,
        scheduling_constraints=template.scheduling_constraints,
        parent_composite_pod_group_name=parent,
        workload_ref=_workload_ref(workload, template),
    )
    return CompositePodGroup(
        api_version=API_VERSION,
        kind="CompositePodGroup",
        metadata=_metadata(workload, template),
        spec=spec,
    )


def _materialize_level(
    workload: Workload,
    pod_groups: Sequence[PodGroupTemplate],
    composites: Sequence[CompositePodGroupTemplate],
    parent: str | None,
) -> Iterator[PodGroup | CompositePodGroup]:
    for pod_group in pod_groups:
        yield _pod_group(workload, pod_group, parent)
    for template in composites:
        composite = _composite(workload, template, parent)
        yield composite
        yield from _materialize_level(
            workload,
            template.pod_group_templates,
            template.composite_pod_group_templates,
            composite.metadata.name,
        )


def materialize(workload: Workload) -> list[PodGroup | CompositePodGroup]:
    """One object per template, named ``<workload>-<template>``, owned by the Workload.

    The order is the spec's, depth first, each composite right before its children: creating
    objects in this order means a child never names a parent that does not exist yet.
    """
    check_object_names(workload)
    spec = workload.spec
    return list(
        _materialize_level(
            workload, spec.pod_group_templates, spec.composite_pod_group_templates, None
        )
    )

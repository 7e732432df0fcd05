"""Edits of a Workload that its groups do not show.

The groups a Workload's templates describe are created once and are then the user's: gpusched
never changes or deletes them (a running gang's minCount or topology changed under it would
strand its bound pods, and the immutable fields cannot change at all). An edited template is
therefore not applied; the Workload's ``Materialized`` condition says so instead of staying
``True``, naming each field that differs, both values, and how to apply the edit: delete the
group, and the Workload makes it again from the template (its pods wait meanwhile)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from gpusched.api.errors import format_field_path
from gpusched.scheduler.groups import Group


@dataclass(frozen=True, slots=True)
class Drift:
    group: str
    """The group's kind and name (``PodGroup train-workers``)."""
    field: str
    """``spec.schedulingPolicy.gang.minCount``."""
    template: Any
    shown: Any


def drift(template: Group, existing: Group) -> list[Drift]:
    """The fields of ``existing``'s spec that differ from its Workload's ``template``."""
    want = template.spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    have = existing.spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    name = f"{existing.kind} {existing.metadata.name}"
    return [
        Drift(name, format_field_path(("spec", *path)), a, b) for path, a, b in _diff(want, have)
    ]


def _diff(want: Any, have: Any, path: tuple[str | int, ...] = ()) -> Iterator[tuple[Any, Any, Any]]:
    if isinstance(want, Mapping) and isinstance(have, Mapping):
        for key in sorted(set(want) | set(have)):
            yield from _diff(want.get(key), have.get(key), (*path, key))
    elif want != have:
        yield path, want, have


def describe(drifts: list[Drift]) -> str:
    """The ``Materialized=False`` message (reason ``Drifted``)."""
    fields = "; ".join(
        f"{d.group} {d.field} is {_show(d.shown)}, the template says {_show(d.template)}"
        for d in drifts
    )
    return (
        f"edits not applied: {fields}. Groups are never changed once made; delete a group to "
        "have it made again from the template (its pods wait meanwhile)"
    )


def _show(value: Any) -> str:
    return "unset" if value is None else str(value)

"""Status documents of groups and Workloads, computed from what the cluster shows.

Counts and placement come from the pods themselves (where they are bound, what phase they
are in), never from memory of past decisions, so a restarted operator writes the same status.
The latest attempt's reason and per-domain lines come from the engine's decision.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpusched.api.crds import CONDITION_MATERIALIZED, CONDITION_SCHEDULED, Reason
from gpusched.api.k8s import Node
from gpusched.api.status import (
    Condition,
    GroupPhase,
    GroupStatus,
    LastAttempt,
    WorkloadGroupStatus,
    WorkloadStatus,
)
from gpusched.engine.groups import GroupKind
from gpusched.scheduler.state import GroupRecord, PodRecord

ADVANCEMENT = (
    GroupPhase.FAILED,
    GroupPhase.UNSCHEDULABLE,
    GroupPhase.PENDING,
    GroupPhase.SCHEDULED,
    GroupPhase.RUNNING,
    GroupPhase.SUCCEEDED,
)
"""Phases from least to most advanced; a Workload shows its least advanced group's."""


@dataclass(frozen=True, slots=True)
class Attempt:
    """The engine's latest word on a group."""

    time: datetime
    reason: str
    message: str
    domains: tuple[str, ...] = ()
    placement: Mapping[str, str] | None = None


@dataclass(frozen=True, slots=True)
class Counts:
    scheduled: int = 0
    running: int = 0
    succeeded: int = 0
    failed: int = 0


def count(pods: Sequence[PodRecord]) -> Counts:
    phases = [p.pod.status.phase for p in pods]
    return Counts(
        scheduled=sum(1 for p in pods if p.node is not None),
        running=phases.count("Running"),
        succeeded=phases.count("Succeeded"),
        failed=phases.count("Failed"),
    )


def pod_group_phase(minimum: int, counts: Counts, timed_out: bool) -> GroupPhase:
    """Volcano's rules: a gang is Running once ``minimum`` of its pods run, Failed once so
    many failed that ``minimum`` can no longer succeed or run."""
    minimum = max(minimum, 1)
    alive = counts.scheduled - counts.failed
    if counts.succeeded >= minimum and counts.running == 0:
        return GroupPhase.SUCCEEDED
    if counts.failed and alive < minimum:
        return GroupPhase.FAILED
    if counts.running + counts.succeeded >= minimum:
        return GroupPhase.RUNNING
    if counts.scheduled >= minimum:
        return GroupPhase.SCHEDULED
    return GroupPhase.UNSCHEDULABLE if timed_out else GroupPhase.PENDING


def composite_phase(minimum: int, children: Sequence[GroupPhase], timed_out: bool) -> GroupPhase:
    """A CompositePodGroup is as far as its ``minGroupCount``-th most advanced child."""
    minimum = max(minimum, 1)
    if sum(1 for c in children if c is GroupPhase.FAILED) > len(children) - minimum:
        return GroupPhase.FAILED
    ranked = sorted(children, key=ADVANCEMENT.index, reverse=True)
    if len(ranked) < minimum:
        return GroupPhase.UNSCHEDULABLE if timed_out else GroupPhase.PENDING
    phase = ranked[minimum - 1]
    if phase in (GroupPhase.PENDING, GroupPhase.UNSCHEDULABLE, GroupPhase.FAILED):
        return GroupPhase.UNSCHEDULABLE if timed_out else GroupPhase.PENDING
    return phase


def placement(
    topology_key: str | None,
    levels: Sequence[str],
    pods: Sequence[PodRecord],
    nodes: Mapping[str, Node],
    segmented: int | None = None,
) -> dict[str, str]:
    """The domain the group's bound pods share, as a full path: the label of every topology
    level down to the group's key (rack names need not be unique across zones, so the zone
    is part of a rack's name). {} when nothing is bound or the pods disagree at the key.
    ``segmented``: the gang's minCount when the key bounds each segment only: the path of
    levels above it that the pods share (the engine's placement of a segmented gang), once at
    least minCount are bound, since a status patch merges keys and a path read while the
    first segment binds would be narrower than the gang's."""
    if topology_key is None:
        return {}
    if segmented is not None:
        bound = sum(1 for p in pods if p.node is not None and p.node in nodes)
        return _shared_above(topology_key, levels, pods, nodes) if bound >= segmented else {}
    path = list(levels[: levels.index(topology_key) + 1]) if topology_key in levels else []
    if topology_key not in path:
        path = [topology_key]
    labels = [nodes[p.node].metadata.labels for p in pods if p.node is not None and p.node in nodes]
    if not labels:
        return {}
    where: dict[str, str] = {}
    for level in path:
        values = {node_labels.get(level) for node_labels in labels}
        if len(values) != 1 or None in values:
            if level == topology_key:
                return {}
            continue  # a level above the key that these nodes do not carry
        where[level] = values.pop()  # type: ignore[assignment]
    return where


def _shared_above(
    key: str, levels: Sequence[str], pods: Sequence[PodRecord], nodes: Mapping[str, Node]
) -> dict[str, str]:
    above = levels[: levels.index(key)] if key in levels else levels
    labels = [nodes[p.node].metadata.labels for p in pods if p.node is not None and p.node in nodes]
    where: dict[str, str] = {}
    for level in above if labels else ():
        values = {node_labels.get(level) for node_labels in labels}
        if None in values:
            continue  # a level these nodes do not carry
        if len(values) != 1:
            break
        where[level] = values.pop()  # type: ignore[assignment]
    return where


@dataclass(frozen=True, slots=True)
class Partial:
    """A gang partly bound below its minCount: which reason, and the pods not bound."""

    reason: str
    minimum: int
    missing: tuple[str, ...]

    def message(self, counts: Counts, attempt: Attempt | None) -> str:
        names = ", ".join(self.missing[:10]) + (", …" if len(self.missing) > 10 else "")
        text = f"{counts.scheduled} of {self.minimum} pods bound; not yet: {names or 'none'}"
        if self.reason == Reason.DEGRADED and attempt is not None:
            text += f"; {attempt.message}"
        return text


def group_status(
    record: GroupRecord,
    phase: GroupPhase,
    counts: Counts,
    where: Mapping[str, str],
    attempt: Attempt | None,
    previous: Mapping[str, Any],
    now: datetime,
    partial: Partial | None = None,
) -> GroupStatus:
    if record.spec.invalid is not None:
        condition = _condition(previous, "False", "Invalid", record.spec.invalid, now)
    elif partial is not None and phase in (GroupPhase.PENDING, GroupPhase.UNSCHEDULABLE):
        message = partial.message(counts, attempt)
        condition = _condition(previous, "False", partial.reason, message, now)
    elif phase in (GroupPhase.SCHEDULED, GroupPhase.RUNNING, GroupPhase.SUCCEEDED):
        message = _scheduled_message(record, counts, where)
        condition = _condition(previous, "True", Reason.SCHEDULED, message, now)
    elif attempt is not None:
        reason = Reason.TIMEOUT if phase is GroupPhase.UNSCHEDULABLE else attempt.reason
        condition = _condition(previous, "False", reason, attempt.message, now)
    else:
        condition = _condition(previous, "False", "WaitingForPods", "no attempt yet", now)
    last = None
    if attempt is not None:
        last = LastAttempt(
            time=attempt.time,
            reason=attempt.reason,
            message=attempt.message,
            domains=list(attempt.domains),
        )
    if not where and attempt is not None and attempt.placement:
        where = attempt.placement
    return GroupStatus(
        phase=phase,
        conditions=[condition],
        placement=dict(where),
        domain=_domain(record, phase, counts, where),
        priority=record.spec.priority,
        scheduled=counts.scheduled,
        running=counts.running,
        succeeded=counts.succeeded,
        failed=counts.failed,
        lastAttempt=last,
    )


def _domain(
    record: GroupRecord, phase: GroupPhase, counts: Counts, where: Mapping[str, str]
) -> str | None:
    """``placement`` in one word for ``kubectl get``: its values from the top level down."""
    if where:
        return "/".join(where.values())
    placed = counts.scheduled or phase in (GroupPhase.SCHEDULED, GroupPhase.RUNNING)
    if record.spec.topology_key is None and placed:
        return "anywhere"
    return None


def _scheduled_message(record: GroupRecord, counts: Counts, where: Mapping[str, str]) -> str:
    domain = ", ".join(f"{k}={v}" for k, v in sorted(where.items())) or "the cluster"
    if record.spec.kind is GroupKind.COMPOSITE:
        return f"placed in {domain}"
    return f"{counts.scheduled} pods placed in {domain}"


def workload_status(
    groups: Sequence[tuple[str, str, GroupStatus]],
    materialized: Condition,
) -> WorkloadStatus:
    """``groups``: (name, kind, status) of every materialised group."""
    phases = [status.phase for _, _, status in groups]
    phase = min(phases, key=ADVANCEMENT.index) if phases else GroupPhase.PENDING
    pod_groups = [status for _, kind, status in groups if kind == GroupKind.POD_GROUP.value]
    return WorkloadStatus(
        phase=phase,
        conditions=[materialized],
        groups=[WorkloadGroupStatus(name=n, kind=k, phase=s.phase) for n, k, s in groups],
        scheduled=sum(s.scheduled for s in pod_groups),
        running=sum(s.running for s in pod_groups),
        succeeded=sum(s.succeeded for s in pod_groups),
        failed=sum(s.failed for s in pod_groups),
    )


def materialized_condition(
    previous: Mapping[str, Any],
    error: str | None,
    missing: Sequence[str],
    now: datetime,
    drifted: str | None = None,
) -> Condition:
    """``drifted``: the message naming template edits its groups do not show."""
    if error is not None:
        return _condition(previous, "False", "Invalid", error, now, CONDITION_MATERIALIZED)
    if missing:
        message = "creating " + ", ".join(missing)
        return _condition(previous, "False", "Creating", message, now, CONDITION_MATERIALIZED)
    if drifted is not None:
        return _condition(previous, "False", "Drifted", drifted, now, CONDITION_MATERIALIZED)
    return _condition(
        previous,
        "True",
        "Materialized",
        "every template has its object",
        now,
        CONDITION_MATERIALIZED,
    )


def _condition(
    previous: Mapping[str, Any],
    status: str,
    reason: str,
    message: str,
    now: datetime,
    type_: str = CONDITION_SCHEDULED,
) -> Condition:
    """A condition whose ``lastTransitionTime`` moves only when its status flips."""
    since = now
    for old in previous.get("conditions") or []:
        if isinstance(old, dict) and old.get("type") == type_ and old.get("status") == status:
            stamp = old.get("lastTransitionTime")
            if isinstance(stamp, str):
                try:
                    since = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
                except ValueError:
                    since = now
    return Condition(
        type=type_,
        status=status,
        reason=reason,
        message=message,
        lastTransitionTime=since,
    )

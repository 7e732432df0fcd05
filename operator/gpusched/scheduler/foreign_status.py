"""Our status of a group, written in the fields of the foreign object it came from.

- ``scheduling.k8s.io`` PodGroup / CompositePodGroup: only the condition upstream defines,
  ``PodGroupInitiallyScheduled`` (``CompositePodGroupInitiallyScheduled``): ``True`` with
  reason ``Scheduled`` once placed, and terminal from then on, as upstream's; else ``False``
  with ``Unschedulable`` (``SchedulerError`` for an invalid PodGroup, ``Invalid`` for an
  invalid CompositePodGroup). Upstream's schema has no room for more: our richer facts
  (the domain chosen, why each domain tried did not fit) go into the condition's message.
- Volcano PodGroup: ``phase`` (Pending, Inqueue once placed, Running, Completed, Unknown for
  failed pods), ``running`` / ``succeeded`` / ``failed``, and the ``Scheduled`` or
  ``Unschedulable`` condition (reason ``NotEnoughResources`` as Volcano's own). Volcano's CRD
  has no status subresource, so this status is patched on the object itself.
- coscheduling PodGroup: ``phase`` (Pending, Scheduled, Running, Finished, Failed) and its
  counts ``running`` / ``succeeded`` / ``failed`` (its schema has no more).

``lastTransitionTime`` moves only when a condition's status flips, so an unchanged group is
never patched again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpusched.api.crds import Reason
from gpusched.api.grouprefs import GroupSource
from gpusched.api.status import GroupPhase, GroupStatus
from gpusched.engine.groups import GroupKind
from gpusched.scheduler.nominations import Mark
from gpusched.scheduler.views import OursView, Promises, Watched

INITIALLY_SCHEDULED = "PodGroupInitiallyScheduled"
COMPOSITE_INITIALLY_SCHEDULED = "CompositePodGroupInitiallyScheduled"
ALPHA2_SCHEDULED = "PodGroupScheduled"
"""The condition's name on a ``scheduling.k8s.io/v1alpha2`` PodGroup (1.36), same reasons."""
ALPHA2 = "scheduling.k8s.io/v1alpha2"
DISRUPTION_TARGET = "DisruptionTarget"
PREEMPTION_BY_SCHEDULER = "PreemptionByScheduler"

_PLACED = (GroupPhase.SCHEDULED, GroupPhase.RUNNING, GroupPhase.SUCCEEDED)
_VOLCANO_PHASES = {
    GroupPhase.PENDING: "Pending",
    GroupPhase.UNSCHEDULABLE: "Pending",
    GroupPhase.SCHEDULED: "Inqueue",
    GroupPhase.RUNNING: "Running",
    GroupPhase.SUCCEEDED: "Completed",
    GroupPhase.FAILED: "Unknown",
}
_COSCHEDULING_PHASES = {
    GroupPhase.PENDING: "Pending",
    GroupPhase.UNSCHEDULABLE: "Pending",
    GroupPhase.SCHEDULED: "Scheduled",
    GroupPhase.RUNNING: "Running",
    GroupPhase.SUCCEEDED: "Finished",
    GroupPhase.FAILED: "Failed",
}


def their_status(
    source: GroupSource,
    kind: GroupKind,
    status: GroupStatus,
    previous: Mapping[str, Any],
    preempted_by: str | None = None,
    *,
    api_version: str = "",
) -> dict[str, Any]:
    """``status`` in the fields of ``source``'s object (of ``api_version``); ``previous`` is
    what it shows now. ``preempted_by``: the preemptor whose plan evicts pods of the group
    (upstream objects then carry ``DisruptionTarget``, reason ``PreemptionByScheduler``, as
    upstream's)."""
    if source is GroupSource.UPSTREAM:
        conditions = [_upstream_condition(kind, status, previous, api_version)]
        if preempted_by is not None:
            message = f"gpusched: preempted to make room for {preempted_by}"
            conditions.append(
                _condition(previous, DISRUPTION_TARGET, "True", PREEMPTION_BY_SCHEDULER, message)
            )
        elif (kept := _condition_of(previous, DISRUPTION_TARGET)) is not None:
            conditions.append(dict(kept))  # the merge patch replaces the list: keep it
        return {"conditions": conditions}
    if source is GroupSource.VOLCANO:
        return {
            "phase": _VOLCANO_PHASES[status.phase],
            "running": status.running,
            "succeeded": status.succeeded,
            "failed": status.failed,
            "conditions": [_volcano_condition(status, previous)],
        }
    return {
        "phase": _COSCHEDULING_PHASES[status.phase],
        "running": status.running,
        "succeeded": status.succeeded,
        "failed": status.failed,
    }


def _ours(status: GroupStatus) -> tuple[str, str]:
    """Our condition's reason and message, with the domains tried."""
    if not status.conditions:
        return Reason.WAITING_FOR_PODS.value, ""
    condition = status.conditions[0]
    message = condition.message
    if status.last_attempt is not None and status.last_attempt.domains:
        message = f"{message} ({'; '.join(status.last_attempt.domains)})"
    return condition.reason, message


def _upstream_condition(
    kind: GroupKind, status: GroupStatus, previous: Mapping[str, Any], api_version: str = ""
) -> dict[str, Any]:
    type_ = INITIALLY_SCHEDULED if kind is GroupKind.POD_GROUP else COMPOSITE_INITIALLY_SCHEDULED
    if api_version == ALPHA2:
        type_ = ALPHA2_SCHEDULED
    before = _condition_of(previous, type_)
    if before is not None and before.get("status") == "True":
        return dict(before)  # terminal, as upstream's: it never goes back to False
    reason, message = _ours(status)
    if status.phase in _PLACED:
        return _condition(previous, type_, "True", "Scheduled", message)
    if reason == Reason.INVALID:
        theirs = "SchedulerError" if kind is GroupKind.POD_GROUP else "Invalid"
        return _condition(previous, type_, "False", theirs, message)
    return _condition(previous, type_, "False", "Unschedulable", f"{reason}: {message}")


def _volcano_condition(status: GroupStatus, previous: Mapping[str, Any]) -> dict[str, Any]:
    reason, message = _ours(status)
    if status.phase in _PLACED:
        return _condition(previous, "Scheduled", "True", "tasks in gang are ready", message)
    return _condition(
        previous, "Unschedulable", "True", "NotEnoughResources", f"{reason}: {message}"
    )


def _condition(
    previous: Mapping[str, Any], type_: str, status: str, reason: str, message: str
) -> dict[str, Any]:
    """A condition dict; ``lastTransitionTime`` kept from ``previous`` while the status
    holds, else left for `stamp` to fill."""
    before = _condition_of(previous, type_)
    since = before.get("lastTransitionTime") if before and before.get("status") == status else None
    made = {"type": type_, "status": status, "reason": reason, "message": message}
    if since:
        made["lastTransitionTime"] = since
    return made


def stamp(body: dict[str, Any], now: str) -> dict[str, Any]:
    """Fills the ``lastTransitionTime`` of conditions that flipped (``now``, RFC 3339)."""
    for condition in body.get("conditions") or []:
        condition.setdefault("lastTransitionTime", now)
    return body


def _condition_of(previous: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    for item in previous.get("conditions") or []:
        if isinstance(item, Mapping) and item.get("type") == type_:
            return item
    return None


def preemptor_of(state: Watched, ledger: Promises, key: str) -> str | None:
    """The preemptor whose plan has marked pods of group ``key`` (or of a group under it)
    for eviction, None when none has."""
    for record in state.pods_of(state.descendants(key)):
        mark = ledger.marked.get(record.pod.key)
        found = Mark.parse(mark) if mark is not None else None
        if found is not None:
            return found.preemptor
    return None


def has_our_pods(state: OursView, key: str) -> bool:
    """Whether a pod of group ``key`` (or of a group under it) is ours: only then is a
    foreign group's status ours to write (kube-scheduler, Volcano and coscheduling write
    their own groups')."""
    return any(
        state.is_ours(r.pod.spec.scheduler_name) for r in state.pods_of(state.descendants(key))
    )

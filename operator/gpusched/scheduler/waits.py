"""What a pod left pending is told: its ``PodScheduled`` condition and its Event, from the
engine's `PodFailure` (its group missing, a wait, a refusal) and what the cluster holds (is
the group valid: a user's fix, or a larger node, is needed).

The engine's reasons map onto the pod's condition so that cluster autoscalers add nodes only
where a node could help (``Unschedulable``), and not for a gang still short of pods, a group not
created yet, or a group a user must fix."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gpusched.engine.groups import GroupKind
from gpusched.engine.result import PodFailure, Reason
from gpusched.scheduler.groups import GroupRecord
from gpusched.scheduler.podconditions import UNSCHEDULABLE, WAITING_FOR_POD_GROUP, Wanted
from gpusched.scheduler.records import PodRecord
from gpusched.scheduler.views import Promises, Watched


@dataclass(frozen=True, slots=True)
class Told:
    """What a pending pod is told: its condition (None: left to the API server, as for
    scheduling gates) and the Event posted when the reason changes."""

    condition: Wanted | None
    event_type: str
    event_reason: str
    message: str

    @property
    def reason(self) -> str:
        return self.event_reason if self.condition is None else self.condition.reason


def told(record: PodRecord, failure: PodFailure, groups: Mapping[str, GroupRecord]) -> Told:
    message = failure.message
    if failure.reason is Reason.SCHEDULING_GATED:
        return Told(None, "Normal", Reason.SCHEDULING_GATED.value, message)
    if failure.reason is Reason.WAITING_FOR_PODS:
        wanted = Wanted(Reason.WAITING_FOR_PODS.value, message)
        return Told(wanted, "Normal", Reason.WAITING_FOR_PODS.value, message)
    if failure.group_missing:
        # Read from the decision, not from today's groups: a group that appeared since
        # (a Workload's, materialized meanwhile) must not turn this wait into a Warning.
        return Told(
            Wanted(WAITING_FOR_POD_GROUP, message), "Normal", WAITING_FOR_POD_GROUP, message
        )
    key = record.request.group_key if record.request is not None else None
    if failure.reason is Reason.INVALID and not _capacity(key, groups):
        return Told(Wanted(Reason.INVALID.value, message), "Warning", "FailedScheduling", message)
    return Told(Wanted(UNSCHEDULABLE, message), "Warning", "FailedScheduling", message)


def _capacity(key: str | None, groups: Mapping[str, GroupRecord]) -> bool:
    """Whether an ``Invalid`` pod is one no node of today's cluster can take (it asks more
    than the largest has: a larger node would help, so autoscalers should see it) rather than
    one whose group is wrong (a user's fix is needed)."""
    if key is None:
        return True
    group = groups.get(key)
    return (
        group is not None and group.spec.invalid is None and group.spec.kind is GroupKind.POD_GROUP
    )


def unplaced(state: Watched, ledger: Promises) -> Callable[[str], bool]:
    """Whether a pod still waits for a node, with none reserved for it: asked right before
    its condition is written (a pod bound since gets ``PodScheduled=True`` from its bind)."""

    def waiting(key: str) -> bool:
        record = state.pods.get(key)
        return record is not None and record.node is None and key not in ledger.reservations

    return waiting

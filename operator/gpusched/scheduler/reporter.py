"""Reporting: group and Workload status from what the pods show, and Events.

Statuses go out through the `StatusOutbox` (coalesced, only when they change), Events through
the `EventRecorder` (aggregated); both send from background tasks, so a slow API server never
slows the loop down."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections import defaultdict
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from gpusched.api.config import SchedulerConfig
from gpusched.api.crds import DEFAULT_SCHEDULE_TIMEOUT_SECONDS
from gpusched.api.k8s import POD_GROUP_LABEL, Node
from gpusched.api.status import GroupStatus
from gpusched.engine.build import topology_problem
from gpusched.engine.devices import NodeDevices
from gpusched.engine.groups import GroupKind
from gpusched.engine.result import GroupDecision, PodFailure, Reason
from gpusched.scheduler import metrics
from gpusched.scheduler.drift import Drift, describe, drift
from gpusched.scheduler.events import EventRecorder
from gpusched.scheduler.foreign_status import has_our_pods, preemptor_of, stamp, their_status
from gpusched.scheduler.groups import GroupRecord
from gpusched.scheduler.outbox import StatusOutbox
from gpusched.scheduler.podconditions import PodConditions
from gpusched.scheduler.ports import ObjectRef
from gpusched.scheduler.records import PodRecord
from gpusched.scheduler.refs import group_ref, pod_ref, workload_ref
from gpusched.scheduler.status import (
    Attempt,
    Counts,
    Partial,
    composite_phase,
    count,
    group_status,
    materialized_condition,
    placement,
    pod_group_phase,
    workload_status,
)
from gpusched.scheduler.views import Promises, ReportView
from gpusched.scheduler.waits import told

logger = logging.getLogger(__name__)

OTHER_SCHEDULER = "NotForGpusched"
"""The Warning on a pod that names one of our PodGroups but another scheduler."""
NAMED_NODES = 10
"""How many nominated nodes a Preempting status names (then an ellipsis)."""


class Reporter:
    def __init__(
        self,
        *,
        config: SchedulerConfig,
        state: ReportView,
        ledger: Promises,
        recorder: EventRecorder,
        outbox: StatusOutbox,
        conditions: PodConditions,
    ) -> None:
        self.config = config
        self.state = state
        self.ledger = ledger
        self.recorder = recorder
        self.outbox = outbox
        self.conditions = conditions
        self._told: dict[str, str] = {}
        """Pod uid → the reason its latest wait Event gave: a wait is told once per change."""
        self.attempts: dict[str, Attempt] = {}
        """Each group's latest attempt, as its status shows it."""
        self._node_problems: dict[str, str] = {}
        """Nodes whose GPU topology cannot be used, with why: reported once per change."""

    # ----- events from the service -------------------------------------------------------------

    def event(self, ref: ObjectRef, type_: str, reason: str, message: str) -> None:
        """An Event about ``ref`` (aggregated with the same ones before it)."""
        self.recorder.record(ref, type_, reason, message)

    def attempted(self, decision: GroupDecision, wall: datetime) -> None:
        """The engine's latest word on a group, for its ``lastAttempt``."""
        self.attempts[decision.name] = Attempt(
            time=wall,
            reason=decision.reason.value,
            message=decision.message,
            domains=decision.attempts,
            placement=decision.placement or None,
        )

    def node_seen(self, node: Node, devices: NodeDevices | None = None) -> None:
        """A node that lies about its GPUs (its topology annotation describes more or fewer
        than it advertises, or does not parse) is reported once per change: a log line, a
        Warning Event on the Node, the ``gpusched_nodes_with_unusable_topology`` gauge. The
        engine places only single-GPU pods there (no GPU set can be judged without links), on
        the smaller of the two counts. A DRA node (``devices``) is judged by its
        ResourceSlices, not by ``nvidia.com/gpu`` (it advertises none): its devices that do
        not match its topology are reported the same way."""
        problem = topology_problem(node, devices)
        if problem == self._node_problems.get(node.name):
            return
        if problem is None:
            self._node_problems.pop(node.name, None)
        else:
            self._node_problems[node.name] = problem
            logger.warning("node GPU topology unusable: %s", problem)
            self._warn_node(node, problem)
        metrics.NODES_UNUSABLE_TOPOLOGY.set(len(self._node_problems))

    def _warn_node(self, node: Node, problem: str) -> None:
        message = f"{problem}; only single-GPU pods are placed on it, on the smaller count"
        ref = ObjectRef("v1", "Node", "", node.name, node.metadata.uid or "")
        self.recorder.record(ref, "Warning", "GPUTopologyMismatch", message)

    def leading(self) -> None:
        """This replica leads now: the Node Warnings it noted while it could not write yet
        (before its first list, or standing by) are sent; those sent already are not."""
        for name, problem in self._node_problems.items():
            node = self.state.nodes.get(name)
            if node is not None:
                self._warn_node(node, problem)

    def node_gone(self, name: str) -> None:
        if self._node_problems.pop(name, None) is not None:
            metrics.NODES_UNUSABLE_TOPOLOGY.set(len(self._node_problems))

    def pod_gone(self, uid: str) -> None:
        self.recorder.forget(uid)
        self.conditions.forget(uid)
        self._told.pop(uid, None)

    def unplaced(self, record: PodRecord, failure: PodFailure) -> None:
        """A pod the engine left pending: its ``PodScheduled=False`` condition, written when
        it changes, and an Event. Waits (a gang short of pods, a group not created yet,
        scheduling gates) are told once per change of reason; a failure to fit is the
        aggregated ``FailedScheduling`` Event kube-scheduler posts."""
        what = told(record, failure, self.state.groups)
        if what.condition is not None:
            shown = record.pod.status.scheduled
            self.conditions.want(pod_ref(record), record.version, shown, what.condition)
        if what.event_type == "Warning":
            self._told.pop(record.uid, None)
            self.recorder.record(pod_ref(record), "Warning", what.event_reason, what.message)
            return
        shown = record.pod.status.scheduled
        before = self._told.get(record.uid) or (shown.reason if shown is not None else None)
        if before == what.reason:
            return
        self._told[record.uid] = what.reason
        self.recorder.record(pod_ref(record), "Normal", what.event_reason, what.message)
        logger.info("pod %s waits (%s): %s", record.key, what.reason, what.message)

    def group_gone(self, key: str) -> None:
        record = self.state.groups.get(key)
        if record is not None:
            self.outbox.forget(group_ref(record))
            self.recorder.forget(record.uid)
        self.attempts.pop(key, None)

    def reset(self) -> None:
        """Leadership was lost: another replica writes these statuses and Events now."""
        self.outbox.reset()
        self.recorder.reset()
        self.conditions.reset()
        self._told.clear()

    # ----- running ----------------------------------------------------------------------------

    def start(self) -> list[asyncio.Task[None]]:
        """Starts sending statuses and Events; the caller cancels the tasks at exit."""
        return [
            asyncio.create_task(self.recorder.run()),
            asyncio.create_task(self.outbox.run()),
            asyncio.create_task(self.conditions.run()),
        ]

    async def flush(self) -> None:
        """Sends every status and Event offered so far."""
        await self.outbox.flush()
        await self.conditions.flush()
        await self.recorder.flush()

    @property
    def idle(self) -> bool:
        return self.outbox.idle and self.conditions.idle

    # ----- status ----------------------------------------------------------------------------

    def report(self, wall: datetime) -> None:
        """Offers every group's and Workload's status, as the pods show it at ``wall``."""
        by_group: dict[str, list[PodRecord]] = defaultdict(list)
        for record in self.state.pods.values():
            if record.request is not None and record.request.group is not None:
                by_group[f"{record.pod.metadata.namespace}/{record.request.group}"].append(record)
                if record.node is None and record.uid not in self._told:
                    self._other_scheduler(record)
        statuses: dict[str, GroupStatus] = {}
        for key in self._parents_last():
            statuses[key] = self._group_status(key, by_group, statuses, wall)
            group = self.state.groups[key]
            if group.foreign is not None and not has_our_pods(self.state, key):
                continue  # another scheduler's group (kube-scheduler's, Volcano's): theirs to write
            if group.spec.invalid is not None:
                self.recorder.record(
                    group_ref(group), "Warning", Reason.INVALID, group.spec.invalid
                )
            self.outbox.offer(
                group_ref(group), self._written(group, statuses[key], wall), group.raw_status
            )
        self._report_workloads(statuses, wall)
        for key, message in self.state.owner_groups.drain_untold().items():
            if (member := self.state.pods.get(key)) is not None:
                self.recorder.record(pod_ref(member), "Normal", "OwnerKindUnknown", message)

    def _written(self, group: GroupRecord, status: GroupStatus, wall: datetime) -> dict[str, Any]:
        """The status body for ``group``'s object: ours, or in a foreign object's own fields."""
        if group.foreign is None:
            return status.model_dump(mode="json", by_alias=True, exclude_none=True)
        previous = self.outbox.last(group_ref(group)) or group.raw_status
        preempted_by = preemptor_of(self.state, self.ledger, group.spec.key)
        body = their_status(
            group.source,
            group.spec.kind,
            status,
            previous,
            preempted_by,
            api_version=group.foreign.api_version,
        )
        return stamp(body, wall.isoformat().replace("+00:00", "Z"))

    def _other_scheduler(self, record: PodRecord) -> None:
        """A pending pod that names one of our PodGroups but another scheduler: it will never
        be part of the gang, which will wait for it. Warned once."""
        scheduler = record.pod.spec.scheduler_name
        group = record.pod.metadata.labels.get(POD_GROUP_LABEL)
        if scheduler == self.state.scheduler_name or group is None:
            return
        self._told[record.uid] = OTHER_SCHEDULER
        message = (
            f"labelled {POD_GROUP_LABEL}={group} but spec.schedulerName is {scheduler!r}: "
            f"gpusched never places it, and the group does not count it; set "
            f"schedulerName: {self.state.scheduler_name}"
        )
        self.recorder.record(pod_ref(record), "Warning", OTHER_SCHEDULER, message)

    def _parents_last(self) -> list[str]:
        """Group keys, children before their parents."""
        ordered: list[str] = []
        for key in sorted(self.state.groups):
            if self.state.groups[key].spec.parent is None:
                ordered.extend(reversed(self.state.descendants(key)))
        rest = sorted(set(self.state.groups) - set(ordered))  # orphans and cycles
        return [k for k in ordered if k in self.state.groups] + rest

    def _group_status(
        self,
        key: str,
        by_group: Mapping[str, list[PodRecord]],
        done: Mapping[str, GroupStatus],
        wall: datetime,
    ) -> GroupStatus:
        record = self.state.groups[key]
        tree = self.state.descendants(key)
        pods = [p for k in tree for p in by_group.get(k, [])]
        counts = count(pods)
        timed_out = self._timed_out(self.state.root_of(key), by_group, wall)
        if record.spec.kind is GroupKind.POD_GROUP:
            phase = pod_group_phase(record.spec.minimum, counts, timed_out)
        else:
            children = [
                done[k].phase
                for k in tree[1:]
                if k in done and self.state.groups[k].spec.parent == key
            ]
            phase = composite_phase(record.spec.minimum, children, timed_out)
        where = placement(
            record.spec.topology_key,
            self.config.topology_levels,
            pods,
            self.state.nodes,
            segmented=record.spec.minimum if record.spec.segment_size is not None else None,
        )
        previous = self.outbox.last(group_ref(record)) or record.raw_status
        attempt = self._preempting(key, self._priority_noted(key, self.attempts.get(key)), wall)
        partial = self._partial(record, pods, counts)
        return group_status(record, phase, counts, where, attempt, previous, wall, partial)

    def _priority_noted(self, key: str, attempt: Attempt | None) -> Attempt | None:
        """A group left unschedulable whose priority (or its tree's) could not be resolved
        says so: it preempts nobody until the field is fixed."""
        if attempt is None or attempt.reason != Reason.UNSCHEDULABLE:
            return attempt
        tree = self.state.descendants(self.state.root_of(key))
        problems = sorted(
            {
                problem
                for k in tree
                if (group := self.state.groups.get(k)) is not None
                and (problem := group.spec.priority_problem) is not None
            }
        )
        if not problems:
            return attempt
        why = "; ".join(problems)
        return dataclasses.replace(attempt, message=f"{attempt.message}; preempts nobody: {why}")

    def _preempting(self, key: str, attempt: Attempt | None, wall: datetime) -> Attempt | None:
        """While room is nominated for the group's root, its status says so (which nodes,
        how many victims are still there) instead of the failure that led to preempting."""
        nomination = self.ledger.nominations.get(self.state.root_of(key))
        if nomination is None:
            return attempt
        tree = set(self.state.descendants(key))
        nodes = sorted({h.node for h in nomination.holdings if h.pod.group_key in tree})
        named = ", ".join(nodes[:NAMED_NODES]) + (", …" if len(nodes) > NAMED_NODES else "")
        left = sum(self.state.victim_present(k, uid) for k, uid in nomination.victims.items())
        victims = "victim" if left == 1 else "victims"
        waiting = f"waiting for {left} {victims} to go" if left else "victims gone, binding"
        message = (
            f"room nominated on {len(nodes)} nodes ({named}) by preempting "
            f"{len(nomination.victims)} lower-priority pods; {waiting}"
        )
        return Attempt(
            time=attempt.time if attempt is not None else wall,
            reason=Reason.PREEMPTING,
            message=message,
            domains=attempt.domains if attempt is not None else (),
        )

    def _partial(
        self, record: GroupRecord, pods: list[PodRecord], counts: Counts
    ) -> Partial | None:
        """A gang with some pods bound but fewer than its minCount: named, not hidden."""
        minimum = record.spec.minimum
        if record.spec.kind is not GroupKind.POD_GROUP or not 0 < counts.scheduled < minimum:
            return None
        waiting = sorted(
            p.pod.metadata.name for p in pods if p.node is None and not p.pod.is_terminal
        )
        binding = any(p.key in self.ledger.reservations for p in pods)
        return Partial(Reason.BINDING if binding else Reason.DEGRADED, minimum, tuple(waiting))

    def _timed_out(
        self, root: str, by_group: Mapping[str, list[PodRecord]], wall: datetime
    ) -> bool:
        tree = self.state.descendants(root)
        waiting = [
            p.request.created
            for k in tree
            for p in by_group.get(k, [])
            if p.node is None and p.request is not None and not p.pod.is_terminal
        ]
        if not waiting:
            return False
        timeouts = [
            self.state.groups[k].timeout_seconds
            for k in tree
            if k in self.state.groups and self.state.groups[k].timeout_seconds
        ]
        timeout = min(timeouts, default=float(DEFAULT_SCHEDULE_TIMEOUT_SECONDS))
        return wall.timestamp() - min(waiting) > timeout

    def _report_workloads(self, statuses: Mapping[str, GroupStatus], wall: datetime) -> None:
        for record in self.state.workloads.values():
            ref = workload_ref(record)
            groups: list[tuple[str, str, GroupStatus]] = []
            missing: list[str] = []
            drifts: list[Drift] = []
            error = str(record.error) if record.error is not None else None
            if record.workload is not None:
                for group in record.groups:
                    status = statuses.get(group.key)
                    if status is None:
                        missing.append(group.metadata.name)
                    else:
                        groups.append((group.metadata.name, group.kind, status))
                    existing = self.state.groups.get(group.key)
                    if existing is not None and existing.obj is not None:
                        drifts += drift(group, existing.obj)
            else:
                self.recorder.record(ref, "Warning", Reason.INVALID, error or "")
            previous = self.outbox.last(ref) or record.raw_status
            drifted = describe(drifts) if drifts else None
            condition = materialized_condition(previous, error, missing, wall, drifted)
            summary = workload_status(groups, condition)
            self.outbox.offer(
                ref,
                summary.model_dump(mode="json", by_alias=True, exclude_none=True),
                record.raw_status,
            )

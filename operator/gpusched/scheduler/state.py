"""The operator's picture of the cluster: watched objects, and the ledger beside them.

Watches feed `ClusterState` with raw bodies; it keeps them parsed, with the indexes a cycle
and a bind read. What this scheduler holds that the watch does not show yet (reservations,
nominations, preemption marks, pins) is its `Ledger` (`gpusched.scheduler.ledger`). A
snapshot for the engine is built from both, so a decision never trusts a watch that lags
behind our own binds.

Everything here runs on the operator's one event loop and never awaits, so each method is
atomic with respect to the others.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gpusched.api.config import GPU_RESOURCE
from gpusched.api.errors import InvalidObjectError
from gpusched.api.grouprefs import GroupSource, group_name
from gpusched.api.k8s import Node, parse_node, parse_pod
from gpusched.engine.groups import GroupSpec
from gpusched.engine.request import PodRequest
from gpusched.engine.snapshot import BoundPod
from gpusched.scheduler.budgets import Budgets
from gpusched.scheduler.changes import ChangeLog
from gpusched.scheduler.groups import GroupBook, GroupRecord, WorkloadRecord
from gpusched.scheduler.ledger import PREEMPTION_ANNOTATION, Ledger, Release
from gpusched.scheduler.ownergroups import OwnerGroups
from gpusched.scheduler.records import (
    Nomination,
    PodRecord,
    Reservation,
    holds,
    mapping,
    metadata_of,
    name_of,
    namespace_of,
    pod_fingerprint,
    version_order,
)

__all__ = [
    "ClusterState",
    "GroupRecord",
    "Nomination",
    "PodRecord",
    "Reservation",
    "WorkloadRecord",
]

logger = logging.getLogger(__name__)

IMPLICIT_PREFIX = group_name(GroupSource.KUEUE, "")
"""The start of the engine names of groups made from their pods."""

MAX_GONE_UIDS = 10_000
"""How many uids of deleted pods are remembered (see `ClusterState.gone`): far more than the
events a lagging watch can hold back."""


@dataclass(slots=True, kw_only=True)
class ClusterState(GroupBook):
    """Nodes, pods, groups and Workloads as last watched, and the `Ledger` beside them."""

    scheduler_name: str = "gpusched"
    scheduler_aliases: frozenset[str] = frozenset()
    """Other scheduler names whose pods are ours too (``schedulerNameAliases``)."""
    owner_groups: OwnerGroups = field(default_factory=OwnerGroups)
    """Pods without a group joined to their top owner's gang (``ownerGroups``)."""
    nodes: dict[str, Node] = field(default_factory=dict)
    node_errors: dict[str, str] = field(default_factory=dict)
    pods: dict[str, PodRecord] = field(default_factory=dict)
    """Written only through `_store`, which keeps the indexes below in step. They spare each
    cycle and each bind a walk over every pod (15,000 at the scale benchmark): each keeps the
    order of `pods`, so what is read through them comes in the order a walk would give."""
    _holders: dict[str, set[str]] = field(default_factory=dict)
    """Node → keys of the pods whose record holds resources there: what is on one node is
    read without a walk over every pod (the last check before each bind)."""
    _holding: dict[str, PodRecord] = field(default_factory=dict)
    """The records that hold resources (bound, not finished), for `bound`."""
    _unnamed: dict[str, PodRecord] = field(default_factory=dict)
    """Those of them holding whole GPUs without saying which (`GpuPins` assumes theirs)."""
    _waiting: dict[str, PodRecord] = field(default_factory=dict)
    """Our unbound pods that are neither finished nor deleting, for `pending`."""
    _members: dict[str, dict[str, None]] = field(default_factory=dict)
    """``namespace/PodGroup`` → keys of the pods labelled with it, for `pods_of`."""
    budgets: Budgets = field(default_factory=Budgets)
    """PodDisruptionBudgets, for the preemption planner."""
    gone: OrderedDict[str, None] = field(default_factory=OrderedDict)
    """Uids of pods known to be deleted, oldest first. A uid never comes back, so a watch event
    about one is older than what we know (a fresh list showed the name's new pod before the
    lagging watch told the old one's deletion) and must not replace the new pod."""
    generation: int = 0
    """Bumped by every change that could alter a scheduling decision."""
    capacity_generation: int = 0
    """Bumped by every change that could make room: a pod gone or finished, a node added or
    changed, a reservation released. Groups backing off retry at once when it moves."""
    _gpu_counts: dict[str, int] = field(default_factory=dict)
    """Node → its allocatable device-plugin GPUs, parsed on first use after each change of
    the node (the check before each bind asks)."""
    node_versions: dict[str, str] = field(default_factory=dict)
    """``metadata.resourceVersion`` of each node held: a relist of 5,000 unchanged Nodes
    parses none of them again, and the snapshot cache keeps their static part."""
    ledger: Ledger = field(init=False)
    """Reservations, nominations, preemption marks and pins: what this scheduler holds that
    the watch does not show yet."""
    held_changes: ChangeLog = field(default_factory=ChangeLog)
    """Keys of the pods whose holding came, changed or went: read by the one `BoundFeed`
    that brings the engine's snapshot up to date, so that a cycle touches only those."""

    def __post_init__(self) -> None:
        self.ledger = Ledger(self, lambda capacity: self._changed(capacity=capacity))

    # ----- nodes -------------------------------------------------------------------------------

    def upsert_node(self, body: Mapping[str, Any]) -> None:
        name = name_of(body)
        version = str(metadata_of(body).get("resourceVersion") or "")
        if version and name in self.nodes and self.node_versions.get(name) == version:
            return  # the same object again (a relist): nothing to parse, nothing changed
        try:
            node = parse_node(body)
        except InvalidObjectError as error:
            # One malformed Node never stops scheduling elsewhere: it takes no pods.
            if self.node_errors.get(name) != str(error):
                logger.warning("ignoring node: %s", error)
            self.node_errors[name] = str(error)
            self.nodes.pop(name, None)
            self.node_versions.pop(name, None)
            self._gpu_counts.pop(name, None)
            self._changed(capacity=False)
            return
        self.node_errors.pop(name, None)
        self.node_versions[name] = version
        if self.nodes.get(name) == node:
            # A heartbeat: what is kept of a Node (no timestamps) did not change. The held
            # object stays, so the snapshot cache keeps its static part by identity.
            return
        self._gpu_counts.pop(name, None)
        self.nodes[name] = node
        self._changed(capacity=True)

    def delete_node(self, name: str) -> None:
        self.node_errors.pop(name, None)
        self.node_versions.pop(name, None)
        self._gpu_counts.pop(name, None)
        if self.nodes.pop(name, None) is not None:
            self._changed(capacity=False)

    # ----- pods ------------------------------------------------------------------------------

    def upsert_pod(self, body: Mapping[str, Any]) -> None:
        key = f"{namespace_of(body)}/{name_of(body)}"
        if str(metadata_of(body).get("uid") or "") in self.gone:
            return  # an older pod of this name: its deletion is known already
        seen = pod_fingerprint(body)
        before = self.pods.get(key)
        if before is not None and version_order(body, before) < 0:
            # A list read before a watch event we already took (a new leader's list answered
            # after the event that followed it): taking it would undo that event for good.
            return
        if before is not None and _predecessor(body, before):
            # An older pod of this name, told late by a lagging watch after a list showed
            # its successor: it was gone before the one we hold was created.
            self._bury(str(metadata_of(body).get("uid") or ""))
            return
        if before is not None and seen is not None and before.source == seen:
            # A status heartbeat: nothing a decision reads changed, nothing to parse; only the
            # version moves, so that a resync does not parse it either.
            version = str(metadata_of(body).get("resourceVersion") or "")
            if version != before.version:
                self._store(key, replace(before, version=version))
            return
        record = _pod_record(key, body, self.scheduler_name, self.scheduler_aliases)
        if record is None:
            self.delete_pod(key)
            return
        record = replace(record, source=seen)
        if self.owner_groups.active and self.is_ours(record.pod.spec.scheduler_name):
            record = self.owner_groups.group(record)
        if (
            before is not None
            and before.node is not None
            and record.node is None
            and before.uid == record.uid
        ):
            # A pod's nodeName never goes back to empty: this version is older than the bind
            # we already know of (a lagging watch, or a list read before our bind landed).
            # Taking it would free the pod's GPUs for another pod while it holds them.
            return
        if before is not None and before.uid and before.uid != record.uid:
            self._bury(before.uid)  # a name holds one pod at a time: the old one is gone
        self._store(key, record)
        chain = record.pod.metadata.owner_references
        if self.owner_groups.active and (
            before is None or before.pod.metadata.owner_references != chain
        ):
            # a pod that owns others (a LeaderWorkerSet's leader) appeared or changed owners
            self._regroup(self.owner_groups.pod_seen(record.pod.namespace, record.pod.name))
        annotations = record.pod.metadata.annotations
        self.ledger.mark(key, annotations.get(PREEMPTION_ANNOTATION) if holds(record) else None)
        reservation = self.ledger.reservations.get(key)
        if reservation is not None and (record.node is not None or reservation.uid != record.uid):
            # The watch caught up with our bind (or the pod was replaced): the pod itself
            # now says where it is, so the ledger entry would count it twice.
            why = Release.SEEN_BOUND if reservation.uid == record.uid else Release.REPLACED
            self.ledger.release(key, why)
        freed = before is not None and holds(before) and not holds(record)
        self._changed(capacity=freed)

    def delete_pod(self, key: str, uid: str | None = None) -> None:
        """Forgets the pod ``key``; with ``uid``, only if that is the pod we have (a deletion
        of an older pod of the same name, told late, leaves the new one alone)."""
        if uid:
            self._bury(uid)
            current = self.pods.get(key)
            if current is not None and current.uid != uid:
                return
        before = self._store(key, None)
        self.owner_groups.forget(key)
        if before is not None and self.owner_groups.active:
            self._regroup(self.owner_groups.pod_seen(before.pod.namespace, before.pod.name))
        self.ledger.release(key, Release.POD_DELETED)
        self.ledger.mark(key, None)
        if before is not None:
            self._changed(capacity=True)

    def _store(self, key: str, record: PodRecord | None) -> PodRecord | None:
        """Puts (or, with None, drops) the record of ``key``; returns the one it replaces."""
        before = self.pods.pop(key, None)
        if (before.holding if before else None) is not (record.holding if record else None):
            self.held_changes.note(key)
        self._holding.pop(key, None)
        self._unnamed.pop(key, None)
        self._waiting.pop(key, None)
        if before is not None:
            self._unindex(key, before)
        if record is not None:
            self.pods[key] = record
            if record.holding is not None:
                self._holders.setdefault(record.holding.node, set()).add(key)
                self._holding[key] = record
                if _unnamed_gpus(record.holding):
                    self._unnamed[key] = record
            if self._waits(record):
                self._waiting[key] = record
            if (group := _group_of(record)) is not None:
                self._members.setdefault(group, {})[key] = None
        if _implicit(before) or _implicit(record):
            self._note_implicit(key, record)
        return before

    def _note_implicit(self, key: str, record: PodRecord | None) -> None:
        """Kueue's plain-pod groups have no object: their members make them."""
        if record is None or record.request is None or not _implicit(record):
            self.note_member(key, key.split("/", 1)[0], None, 0.0)
            return
        ref = record.pod.group_ref()
        self.note_member(key, record.pod.metadata.namespace, ref, record.request.created)

    def _unindex(self, key: str, record: PodRecord) -> None:
        if record.holding is not None:
            keys = self._holders[record.holding.node]
            keys.discard(key)
            if not keys:
                del self._holders[record.holding.node]
        if (group := _group_of(record)) is not None:
            members = self._members[group]
            del members[key]
            if not members:
                del self._members[group]

    def _waits(self, record: PodRecord) -> bool:
        """Ours, unbound, and neither finished nor deleting: pending unless reserved or
        nominated (which `pending` checks, as those change without the record changing)."""
        return (
            record.node is None
            and self.is_ours(record.pod.spec.scheduler_name)
            and not record.pod.is_terminal
            and not record.deleting
        )

    def group_specs(self) -> list[GroupSpec]:
        specs = GroupBook.group_specs(self)
        specs.extend(self.owner_groups.specs.values())
        return specs

    def owner_changed(self, api_version: str, kind: str, body: Mapping[str, Any]) -> None:
        """A Job, JobSet, RayCluster, … appeared or changed: its pods are grouped again."""
        self._regroup(self.owner_groups.upsert(api_version, kind, body))

    def owner_deleted(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        self._regroup(self.owner_groups.delete(api_version, kind, namespace, name))

    def pod_metadata(self, key: str) -> Mapping[str, Any] | None:
        """The metadata of the pod ``key`` as its author wrote it (an owner in a chain)."""
        record = self.pods.get(key)
        return None if record is None else record.pod.metadata.model_dump(by_alias=True)

    def namespace_labelled(self, name: str, labels: Mapping[str, str] | None) -> bool:
        """A Namespace's labels seen (None: gone): where owner groups turned on or off, its
        pods are grouped again; returns whether they did."""
        changed = self.owner_groups.label(name, labels)
        if changed:
            prefix = f"{name}/"
            self._regroup(
                key
                for key, record in self.pods.items()
                if key.startswith(prefix) and self.is_ours(record.pod.spec.scheduler_name)
            )
        return changed

    def _regroup(self, keys: Iterable[str]) -> None:
        changed = False
        for key in sorted(keys):
            record = self.pods.get(key)
            if record is not None and record.request is not None:
                self._store(key, self.owner_groups.group(record))
                changed = True
        if changed:
            self.groups_generation += 1
            self._changed(capacity=False)

    def is_ours(self, scheduler_name: str) -> bool:
        return scheduler_name == self.scheduler_name or scheduler_name in self.scheduler_aliases

    def _bury(self, uid: str) -> None:
        self.gone[uid] = None
        self.gone.move_to_end(uid)
        while len(self.gone) > MAX_GONE_UIDS:
            self.gone.popitem(last=False)

    def pending(self) -> list[PodRecord]:
        """Our pods waiting for a node: not bound, reserved, nominated, finished or deleting."""
        nominated = self.ledger.nominated_pods()
        reservations = self.ledger.reservations
        return [
            record
            for key, record in self._waiting.items()
            if key not in reservations and key not in nominated
        ]

    def bound(self) -> Iterator[BoundPod]:
        """Every pod holding resources: bound ones of any scheduler, and our reservations."""
        pinned = self._pinned()
        promised = self.ledger.promised()
        for key, record in self._holding.items():
            if record.holding is None:
                continue
            if promised and promised.get(key) == record.uid:
                yield self.ledger.gpus_promised(key, record.holding)
                continue
            yield pinned.get(record.uid, record.holding) if pinned else record.holding
        yield from self.ledger.holdings()

    def _pinned(self) -> dict[str, BoundPod]:
        return self.ledger.pins.pinned(self._unnamed, self._explicit(), self._gpu_count)

    def _explicit(self) -> Iterator[BoundPod]:
        """Holdings that name their GPUs on the nodes of pods that do not (the only ones
        `GpuPins.pinned` reads): annotated bound pods and our reservations."""
        nodes = {r.holding.node for r in self._unnamed.values() if r.holding is not None}
        for node in nodes:
            for key in self._holders.get(node, ()):
                holding = self.pods[key].holding
                if holding is not None and holding.gpus is not None:
                    yield holding
        yield from self.ledger.holdings()

    # ----- the change feed -----------------------------------------------------------------

    @property
    def holding_records(self) -> Mapping[str, PodRecord]:
        """The records that hold resources (bound, not finished), in the order of `pods`."""
        return self._holding

    @property
    def unnamed_records(self) -> Mapping[str, PodRecord]:
        """Those holding whole GPUs without saying which (their GPUs are pinned)."""
        return self._unnamed

    def holders_on(self, node: str) -> Iterable[str]:
        """Keys of the pods whose record holds resources on ``node``."""
        return self._holders.get(node, ())

    def pinned(self) -> dict[str, BoundPod]:
        """By uid: the holdings of `unnamed_records` with their GPUs assumed (`GpuPins`)."""
        return self._pinned()

    def _gpu_count(self, node: str) -> int:
        count = self._gpu_counts.get(node)
        if count is None:
            known = self.nodes.get(node)
            if known is None:
                return 0
            count = self._gpu_counts[node] = known.allocatable_resources().get(GPU_RESOURCE, 0)
        return count

    def taken_by_others(self, key: str, reservation: Reservation) -> bool:
        """Whether another pod now holds (or is assumed to hold) GPUs of ``reservation``, or
        the node's GPUs are all held without it."""
        mine, pinned = set(reservation.gpus), self._pinned()
        for other in self._holders.get(reservation.node, ()):
            record = self.pods[other]
            seen = pinned.get(record.uid, record.holding)
            if other != key and seen is not None and mine & set(seen.gpus or ()):
                return True
        return self.overcommits(key, reservation)

    def overcommits(self, key: str, reservation: Reservation) -> bool:
        """Whether the node's device-plugin GPUs would be over-committed by count with
        ``reservation`` beside every other pod bound there now (whatever GPUs each holds).

        Only device-plugin GPUs (allocatable nvidia.com/gpu) are counted: a node whose GPUs
        come from ResourceSlices advertises none, and its devices are held only through
        claims, which the claim ledger accounts for."""
        count = self._gpu_count(reservation.node)
        if not reservation.gpus or count <= 0:
            return False
        held = sum(h.pod.gpus for h in self._held_on(reservation.node) if h.pod.key != key)
        return held + len(reservation.gpus) > count

    def _held_on(self, node: str) -> Iterator[BoundPod]:
        """What `bound` yields on ``node`` — bound pods, reservations, nominations — from the
        index (GPUs assumed for pods that do not name theirs aside: they move GPUs, not
        counts)."""
        promised = self.ledger.promised()
        for key in self._holders.get(node, ()):
            record = self.pods[key]
            if record.holding is not None and promised.get(key) != record.uid:
                yield record.holding
        for reservation in self.ledger.reserved_on(node):
            yield reservation.holding
        for nomination in self.ledger.nominations.values():
            yield from (h for h in nomination.holdings if h.node == node)

    # ----- binds ---------------------------------------------------------------------------

    def confirm(self, key: str, reservation: Reservation) -> None:
        """The bind succeeded: until the watch shows it, the pod is bound where we put it."""
        record = self.pods.get(key)
        if record is None or record.uid != reservation.uid:
            return
        if record.node == reservation.node and record.assigned == reservation.gpus:
            # The watch showed the bind before its answer came (often, on a busy leader): the
            # pod's own record says it all already. A copy would hold a second spec and pod
            # (about 1 KB a pod in the real leader, `bench/memory.py --real`) until the pod
            # next changes, and drop its fingerprint, so that the next heartbeat is parsed.
            return
        bound = record.pod.spec.model_copy(update={"node_name": reservation.node})
        self._store(
            key,
            PodRecord(
                pod=record.pod.model_copy(update={"spec": bound}),
                uid=record.uid,
                request=record.request,
                assigned=reservation.gpus,
                holding=reservation.holding,
                version=record.version,  # still orders the name's older pods before it
            ),
        )
        self.ledger.release(key, Release.BOUND)

    def victim_present(self, key: str, uid: str) -> bool:
        """Whether the victim ``key`` (the pod ``uid``) still holds its resources."""
        record = self.pods.get(key)
        return record is not None and record.uid == uid and holds(record)

    def pods_of(self, group_keys: Iterable[str]) -> list[PodRecord]:
        """The pods labelled with any of these PodGroups (each group's in the order of
        `pods`)."""
        return [
            self.pods[key]
            for group in dict.fromkeys(group_keys)
            for key in self._members.get(group, ())
        ]

    def _changed(self, *, capacity: bool) -> None:
        self.generation += 1
        if capacity:
            self.capacity_generation += 1


def _unnamed_gpus(holding: BoundPod) -> bool:
    """Whole GPUs held without saying which: the pods `GpuPins.pinned` assumes GPUs for."""
    return holding.gpus is None and bool(holding.pod.gpus) and not holding.pod.gpu_milli


def _implicit(record: PodRecord | None) -> bool:
    """Whether the pod belongs to a group made from its pods (`GroupBook.implicit`)."""
    group = record.request.group if record is not None and record.request is not None else None
    return group is not None and group.startswith(IMPLICIT_PREFIX)


def _group_of(record: PodRecord) -> str | None:
    """``namespace/PodGroup`` of the pod's group label, None without one."""
    if record.request is None or record.request.group is None:
        return None
    return f"{record.pod.metadata.namespace}/{record.request.group}"


def _predecessor(body: Mapping[str, Any], record: PodRecord) -> bool:
    """Whether ``body`` is another pod of ``record``'s name at a lower resourceVersion: one
    that held the name before it (a name's pods follow each other, and etcd's revisions
    only grow)."""
    metadata = metadata_of(body)
    version = str(metadata.get("resourceVersion") or "")
    if str(metadata.get("uid") or "") == record.uid:
        return False
    return version.isdigit() and record.version.isdigit() and int(version) < int(record.version)


def _pod_record(
    key: str, body: Mapping[str, Any], scheduler_name: str, aliases: frozenset[str] = frozenset()
) -> PodRecord | None:
    """The record of a pod body (None: not a pod we can use; a stub when it is ours)."""
    uid = str(metadata_of(body).get("uid") or "")
    try:
        pod = parse_pod(body)
    except InvalidObjectError as error:
        spec = mapping(body.get("spec"))
        named = spec.get("schedulerName")
        ours = named == scheduler_name or (isinstance(named, str) and named in aliases)
        if ours and not spec.get("nodeName"):
            # Ours and pending: keep a stub so the pod gets an Event naming the field.
            stub = _invalid_pod(key, uid, scheduler_name, str(error))
            if stub is not None:
                return stub
        logger.warning("ignoring pod %s: %s", key, error)
        return None
    try:
        request = PodRequest.from_pod(pod)
    except InvalidObjectError as error:
        if pod.spec.node_name:
            logger.warning("bound pod %s not counted: %s", key, error)
        return PodRecord(pod=pod, uid=uid, request=None, assigned=None, error=str(error))
    assigned = None
    if pod.spec.node_name:
        try:
            assigned = pod.assigned_gpus()
        except InvalidObjectError as error:
            # Unknown indices: the engine assumes the highest free GPUs, and says so.
            logger.warning("pod %s: %s", key, error)
    holding = None
    if pod.spec.node_name and not pod.is_terminal:
        holding = BoundPod(request, pod.spec.node_name, assigned)
    version = str(metadata_of(body).get("resourceVersion") or "")
    return PodRecord(
        pod=pod, uid=uid, request=request, assigned=assigned, holding=holding, version=version
    )


def _invalid_pod(key: str, uid: str, scheduler: str, error: str) -> PodRecord | None:
    """A stand-in for one of our pending pods that failed to parse, carrying the error (None
    when even its name is unusable). It needs a container to be a valid pod: without one,
    every invalid pod of ours made the watch handler raise instead of getting its Event."""
    namespace, name = key.split("/", 1)
    try:
        stub = parse_pod(
            {
                "metadata": {"name": name, "namespace": namespace, "uid": uid},
                "spec": {"schedulerName": scheduler, "containers": [{"name": "invalid"}]},
            }
        )
    except InvalidObjectError:
        return None
    return PodRecord(pod=stub, uid=uid, request=None, assigned=None, error=error)

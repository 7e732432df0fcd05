"""The operator's picture of the cluster: watched objects plus its own reservation ledger.

Watches feed `ClusterState` with raw bodies; it keeps them parsed. The ledger ("assume
cache") holds the pods this scheduler has decided to bind but the watch has not yet shown as
bound. A snapshot for the engine is built from both, so a decision never trusts a watch that
lags behind our own binds — a prototype that did bound 3–4 pods onto a 2-GPU node.

Everything here runs on the operator's one event loop and never awaits, so each method is
atomic with respect to the others: the ledger needs no lock of its own.
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gpusched.api.config import GPU_RESOURCE
from gpusched.api.crds import (
    CompositePodGroup,
    PodGroup,
    Workload,
    parse_composite_pod_group,
    parse_pod_group,
    parse_workload,
)
from gpusched.api.errors import InvalidObjectError
from gpusched.api.k8s import Node, Pod, PodStatus, parse_node, parse_pod
from gpusched.api.materialize import materialize
from gpusched.engine.groups import GroupKind, GroupSpec
from gpusched.engine.request import PodRequest
from gpusched.engine.snapshot import BoundPod

logger = logging.getLogger(__name__)

MAX_GONE_UIDS = 10_000
"""How many uids of deleted pods are remembered (see `ClusterState.gone`): far more than the
events a lagging watch can hold back."""

Group = PodGroup | CompositePodGroup


@dataclass(frozen=True, slots=True)
class PodRecord:
    """A watched pod, parsed once per change."""

    pod: Pod
    uid: str
    request: PodRequest | None
    """None when the pod's own fields make it unschedulable (``error`` says why)."""
    assigned: tuple[int, ...] | None
    error: str | None = None
    holding: BoundPod | None = None
    """The engine's view of the pod while it holds resources (one object per pod version,
    so the snapshot cache can tell unchanged pods by identity)."""
    source: str | None = None
    """`_pod_fingerprint` of the body this record was parsed from (None: not from a body)."""
    version: str = ""
    """``metadata.resourceVersion``: a resync parses only the pods whose version moved."""

    @property
    def key(self) -> str:
        return self.pod.key

    @property
    def node(self) -> str | None:
        return self.pod.spec.node_name or None

    @property
    def deleting(self) -> bool:
        return self.pod.metadata.deletion_timestamp is not None


@dataclass(frozen=True, slots=True)
class Reservation:
    """GPUs and resources promised to a pod whose bind is in flight or not yet watched."""

    request: PodRequest
    uid: str
    node: str
    gpus: tuple[int, ...]
    holding: BoundPod


@dataclass(slots=True)
class GroupRecord:
    obj: Group | None
    spec: GroupSpec
    uid: str
    generation: int
    timeout_seconds: float
    raw_status: Mapping[str, Any]


@dataclass(slots=True)
class WorkloadRecord:
    key: str
    uid: str
    generation: int
    workload: Workload | None
    error: InvalidObjectError | None
    raw_status: Mapping[str, Any]
    groups: tuple[Group, ...] = ()
    """What its templates materialise to, computed once per spec generation."""


@dataclass(slots=True)
class ClusterState:
    """Nodes, pods, groups and Workloads as last watched, plus the reservation ledger."""

    scheduler_name: str = "gpusched"
    nodes: dict[str, Node] = field(default_factory=dict)
    node_errors: dict[str, str] = field(default_factory=dict)
    pods: dict[str, PodRecord] = field(default_factory=dict)
    groups: dict[str, GroupRecord] = field(default_factory=dict)
    workloads: dict[str, WorkloadRecord] = field(default_factory=dict)
    reservations: dict[str, Reservation] = field(default_factory=dict)
    gone: OrderedDict[str, None] = field(default_factory=OrderedDict)
    """Uids of pods known to be deleted, oldest first. A uid never comes back, so a watch event
    about one is older than what we know (a fresh list showed the name's new pod before the
    lagging watch told the old one's deletion) and must not replace the new pod."""
    generation: int = 0
    """Bumped by every change that could alter a scheduling decision."""
    groups_generation: int = 0
    """Bumped when a group's spec appears, changes or goes."""
    _children_index: tuple[int, dict[str, list[str]]] | None = None
    _pins: dict[str, tuple[BoundPod, BoundPod]] = field(default_factory=dict)
    """Bound pods holding whole GPUs without saying which (other schedulers' pods carry no
    ``gpusched.io/gpus``), by uid: (their holding, the same with GPUs assumed). The
    assumption is made once and kept, so that it never moves onto GPUs one of our pods
    was given meanwhile (see `_pinned`)."""
    capacity_generation: int = 0
    """Bumped by every change that could make room: a pod gone or finished, a node added or
    changed, a reservation released. Groups backing off retry at once when it moves."""

    # ----- nodes -------------------------------------------------------------------------------

    def upsert_node(self, body: Mapping[str, Any]) -> None:
        name = _name(body)
        try:
            node = parse_node(body)
        except InvalidObjectError as error:
            # One malformed Node never stops scheduling elsewhere: it takes no pods.
            if self.node_errors.get(name) != str(error):
                logger.warning("ignoring node: %s", error)
            self.node_errors[name] = str(error)
            self.nodes.pop(name, None)
            self._changed(capacity=False)
            return
        self.node_errors.pop(name, None)
        self.nodes[name] = node
        self._changed(capacity=True)

    def delete_node(self, name: str) -> None:
        self.node_errors.pop(name, None)
        if self.nodes.pop(name, None) is not None:
            self._changed(capacity=False)

    # ----- pods ------------------------------------------------------------------------------

    def upsert_pod(self, body: Mapping[str, Any]) -> None:
        key = f"{_namespace(body)}/{_name(body)}"
        if str(_metadata(body).get("uid") or "") in self.gone:
            return  # an older pod of this name: its deletion is known already
        seen = _pod_fingerprint(body)
        before = self.pods.get(key)
        if before is not None and _version_order(body, before) < 0:
            # A list read before a watch event we already took (a new leader's list answered
            # after the event that followed it): taking it would undo that event for good.
            return
        if before is not None and seen is not None and before.source == seen:
            # A status heartbeat: nothing a decision reads changed, nothing to parse; only the
            # version moves, so that a resync does not parse it either.
            version = str(_metadata(body).get("resourceVersion") or "")
            if version != before.version:
                self.pods[key] = replace(before, version=version)
            return
        record = self._pod_record(key, body)
        if record is None:
            self.delete_pod(key)
            return
        record = replace(record, source=seen)
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
        self.pods[key] = record
        reservation = self.reservations.get(key)
        if reservation is not None and (record.node is not None or reservation.uid != record.uid):
            # The watch caught up with our bind (or the pod was replaced): the pod itself
            # now says where it is, so the ledger entry would count it twice.
            del self.reservations[key]
        freed = before is not None and _holds(before) and not _holds(record)
        self._changed(capacity=freed)

    def delete_pod(self, key: str, uid: str | None = None) -> None:
        """Forgets the pod ``key``; with ``uid``, only if that is the pod we have (a deletion
        of an older pod of the same name, told late, leaves the new one alone)."""
        if uid:
            self._bury(uid)
            current = self.pods.get(key)
            if current is not None and current.uid != uid:
                return
        before = self.pods.pop(key, None)
        reserved = self.reservations.pop(key, None)
        if before is not None or reserved is not None:
            self._changed(capacity=True)

    def _bury(self, uid: str) -> None:
        self.gone[uid] = None
        self.gone.move_to_end(uid)
        while len(self.gone) > MAX_GONE_UIDS:
            self.gone.popitem(last=False)

    def _pod_record(self, key: str, body: Mapping[str, Any]) -> PodRecord | None:
        uid = str(_metadata(body).get("uid") or "")
        try:
            pod = parse_pod(body)
        except InvalidObjectError as error:
            spec = _mapping(body.get("spec"))
            if spec.get("schedulerName") == self.scheduler_name and not spec.get("nodeName"):
                # Ours and pending: keep a stub so the pod gets an Event naming the field.
                stub = _invalid_pod(key, uid, self.scheduler_name, str(error))
                if stub is not None:
                    return stub
            logger.warning("ignoring pod %s: %s", key, error)
            return None
        try:
            request = PodRequest.from_pod(pod)
        except InvalidObjectError as error:
            if pod.spec.node_name:
                logger.warning("bound pod %s not counted: %s", key, error)
            return PodRecord(pod, uid, None, None, str(error))
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
        version = str(_metadata(body).get("resourceVersion") or "")
        return PodRecord(pod, uid, request, assigned, holding=holding, version=version)

    def resync_pods(self, bodies: Iterable[Mapping[str, Any]]) -> None:
        """Replaces every pod with a fresh list from the API (a new leader's first step)."""
        seen = set()
        for body in bodies:
            self.upsert_pod(body)
            seen.add(f"{_namespace(body)}/{_name(body)}")
        for key in [k for k in self.pods if k not in seen]:
            self.delete_pod(key)

    def refresh(self, bodies: Iterable[Mapping[str, Any]]) -> list[str]:
        """Takes the listed versions of known pods that are newer than the ones we hold (a
        watch event that never reached us), and returns their keys. Pods we do not know are
        left to the watch."""
        taken = []
        for body in bodies:
            key = f"{_namespace(body)}/{_name(body)}"
            before = self.pods.get(key)
            if before is None or _version_order(body, before) <= 0:
                continue
            self.upsert_pod(body)
            taken.append(key)
        return taken

    def forget_missing(
        self, known: Mapping[str, str], bodies: Iterable[Mapping[str, Any]]
    ) -> list[str]:
        """Deletes the pods of ``known`` (key → uid, taken before ``bodies`` was listed) that
        the list no longer has, and returns their keys. A pod that appeared after ``known``
        was taken may be missing from an older list, so only those are candidates."""
        listed = {
            (f"{_namespace(b)}/{_name(b)}", str(_metadata(b).get("uid") or "")) for b in bodies
        }
        gone = [
            key
            for key, uid in known.items()
            if (key, uid) not in listed and key in self.pods and self.pods[key].uid == uid
        ]
        for key in gone:
            self.delete_pod(key, known[key])
        return gone

    def forget_missing_nodes(
        self, known: Iterable[str], bodies: Iterable[Mapping[str, Any]]
    ) -> list[str]:
        """Deletes the nodes of ``known`` (names taken before ``bodies`` was listed) that the
        list no longer has, and returns their names."""
        listed = {_name(b) for b in bodies}
        gone = sorted(n for n in known if n not in listed and n in self.nodes)
        for name in gone:
            self.delete_node(name)
        return gone

    def pending(self) -> list[PodRecord]:
        """Our pods waiting for a node: not bound, not reserved, not finished or deleting."""
        return [
            record
            for key, record in self.pods.items()
            if record.node is None
            and record.pod.spec.scheduler_name == self.scheduler_name
            and not record.pod.is_terminal
            and not record.deleting
            and key not in self.reservations
        ]

    def bound(self) -> Iterator[BoundPod]:
        """Every pod holding resources: bound ones of any scheduler, and our reservations."""
        pinned = self._pinned()
        for record in self.pods.values():
            if record.holding is not None:
                yield pinned.get(record.uid, record.holding)
        for reservation in self.reservations.values():
            yield reservation.holding

    def _pinned(self) -> dict[str, BoundPod]:
        """Holdings with GPUs assumed for the bound pods that do not say which they hold.

        Left to the engine, the assumption (the highest free GPUs) would be remade at every
        snapshot rebuild, in whatever order the pods come, and could land on GPUs one of our
        pods holds: both would then count as one, and the node would take more GPUs than it
        has. Here each such pod gets GPUs once, kept while it is bound: GPUs no pod says it
        holds and no other assumption took, highest first; when too few are left (another
        scheduler over-committed the node) the rest overlap, so the node shows none free."""
        unknown = [
            r
            for r in self.pods.values()
            if r.holding is not None
            and r.holding.gpus is None
            and r.holding.pod.gpus
            and not r.holding.pod.gpu_milli
        ]
        if not unknown and not self._pins:
            return {}
        nodes = {r.holding.node for r in unknown if r.holding is not None}
        taken: dict[str, set[int]] = {n: set() for n in nodes}
        for named in self._explicit():
            if named.node in taken and named.gpus is not None:
                taken[named.node].update(named.gpus)
        pins: dict[str, tuple[BoundPod, BoundPod]] = {}
        fresh = []
        for record in unknown:
            holding = record.holding
            assert holding is not None
            kept = self._pins.get(record.uid)
            gpus = kept[1].gpus if kept is not None and kept[1].node == holding.node else None
            if gpus is None or len(gpus) != holding.pod.gpus or taken[holding.node] & set(gpus):
                fresh.append(record)  # new, resized, or one of ours says it holds them
                continue
            taken[holding.node].update(gpus)
            same = kept is not None and kept[0] is holding
            pins[record.uid] = kept if same and kept else (holding, _assume(holding, gpus))
        for record in sorted(fresh, key=lambda r: r.key):
            holding = record.holding
            assert holding is not None
            gpus = _assumed_gpus(self._gpu_count(holding.node), taken[holding.node], holding)
            taken[holding.node].update(gpus)
            pins[record.uid] = (holding, _assume(holding, gpus))
        self._pins = pins
        return {uid: pinned for uid, (_, pinned) in pins.items()}

    def _explicit(self) -> Iterator[BoundPod]:
        """Holdings that name their GPUs: annotated bound pods and our reservations."""
        for record in self.pods.values():
            if record.holding is not None and record.holding.gpus is not None:
                yield record.holding
        for reservation in self.reservations.values():
            yield reservation.holding

    def _gpu_count(self, node: str) -> int:
        known = self.nodes.get(node)
        return known.allocatable_resources().get(GPU_RESOURCE, 0) if known is not None else 0

    def taken_by_others(self, key: str, reservation: Reservation) -> bool:
        """Whether another pod now holds (or is assumed to hold) GPUs of ``reservation``, or
        the node's GPUs are all held without it."""
        mine = set(reservation.gpus)
        for seen in self._others_on(key, reservation.node):
            if mine & set(seen.gpus or ()):
                return True
        return self.overcommits(key, reservation)

    def overcommits(self, key: str, reservation: Reservation) -> bool:
        """Whether the node's device-plugin GPUs would be over-committed by count with
        ``reservation`` beside every other pod bound there now (whatever GPUs each holds).

        Only device-plugin GPUs (allocatable nvidia.com/gpu) are counted: a node whose GPUs
        come from ResourceSlices advertises none, and its devices are held only through
        claims, which the claim ledger accounts for."""
        count = self._gpu_count(reservation.node)
        held = sum(seen.pod.gpus for seen in self._others_on(key, reservation.node))
        return bool(reservation.gpus) and count > 0 and held + len(reservation.gpus) > count

    def _others_on(self, key: str, node: str) -> Iterator[BoundPod]:
        pinned = self._pinned()
        for record in self.pods.values():
            seen = pinned.get(record.uid, record.holding)
            if seen is not None and seen.node == node and record.key != key:
                yield seen

    # ----- the ledger ------------------------------------------------------------------------

    def reserve(self, key: str, node: str, gpus: tuple[int, ...]) -> Reservation | None:
        """Records a decision before its bind is sent; None when the pod changed meanwhile
        (deleted, bound by someone else) and must not be bound."""
        record = self.pods.get(key)
        if (
            record is None
            or record.request is None
            or record.node is not None
            or record.deleting
            or key in self.reservations
            or node not in self.nodes
        ):
            return None
        holding = BoundPod(record.request, node, gpus)
        reservation = Reservation(record.request, record.uid, node, gpus, holding)
        self.reservations[key] = reservation
        self._changed(capacity=False)
        return reservation

    def release(self, key: str, reservation: Reservation) -> None:
        """Drops a reservation whose bind failed; the pod is pending again."""
        if self.reservations.get(key) is reservation:
            del self.reservations[key]
            self._changed(capacity=True)

    def confirm(self, key: str, reservation: Reservation) -> None:
        """The bind succeeded: until the watch shows it, the pod is bound where we put it."""
        record = self.pods.get(key)
        if record is None or record.uid != reservation.uid:
            return
        self.pods[key] = PodRecord(
            record.pod.model_copy(
                update={"spec": record.pod.spec.model_copy(update={"node_name": reservation.node})}
            ),
            record.uid,
            record.request,
            reservation.gpus,
            holding=reservation.holding,
        )
        self.reservations.pop(key, None)

    def reserved_gpus(self) -> int:
        return sum(len(r.gpus) for r in self.reservations.values())

    # ----- groups and Workloads ----------------------------------------------------------------

    def upsert_group(self, kind: GroupKind, body: Mapping[str, Any]) -> bool:
        """Returns whether the spec changed (status-only updates do not wake the scheduler)."""
        key = f"{_namespace(body)}/{_name(body)}"
        metadata = _metadata(body)
        generation = _generation(metadata)
        before = self.groups.get(key)
        status = _mapping(body.get("status"))
        if before is not None and before.generation == generation and generation:
            before.raw_status = status
            return False
        obj: Group | None = None
        try:
            obj = (
                parse_pod_group(body)
                if kind is GroupKind.POD_GROUP
                else parse_composite_pod_group(body)
            )
            spec = (
                GroupSpec.from_pod_group(obj)
                if isinstance(obj, PodGroup)
                else GroupSpec.from_composite(obj)
            )
            timeout = float(obj.spec.schedule_timeout_seconds) if isinstance(obj, PodGroup) else 0
        except InvalidObjectError as error:
            spec = GroupSpec(key=key, kind=kind, invalid=str(error))
            timeout = 0.0
        self.groups[key] = GroupRecord(
            obj, spec, str(metadata.get("uid") or ""), generation, timeout, status
        )
        self.groups_generation += 1
        self._changed(capacity=False)
        return True

    def delete_group(self, key: str) -> None:
        if self.groups.pop(key, None) is not None:
            self.groups_generation += 1
            self._changed(capacity=False)

    def group_specs(self) -> list[GroupSpec]:
        return [record.spec for record in self.groups.values()]

    def upsert_workload(self, body: Mapping[str, Any]) -> WorkloadRecord:
        key = f"{_namespace(body)}/{_name(body)}"
        metadata = _metadata(body)
        generation = _generation(metadata)
        status = _mapping(body.get("status"))
        before = self.workloads.get(key)
        if before is not None and before.generation == generation and generation:
            before.raw_status = status
            return before
        workload: Workload | None = None
        error: InvalidObjectError | None = None
        try:
            workload = parse_workload(body)
        except InvalidObjectError as err:
            error = err
        groups = tuple(materialize(workload)) if workload is not None else ()
        record = WorkloadRecord(
            key, str(metadata.get("uid") or ""), generation, workload, error, status, groups
        )
        self.workloads[key] = record
        return record

    def delete_workload(self, key: str) -> None:
        self.workloads.pop(key, None)

    def pods_of(self, group_keys: Iterable[str]) -> list[PodRecord]:
        """The pods labelled with any of these PodGroups."""
        wanted = set(group_keys)
        return [
            record
            for record in self.pods.values()
            if record.request is not None
            and record.request.group is not None
            and f"{record.pod.metadata.namespace}/{record.request.group}" in wanted
        ]

    def _children(self) -> dict[str, list[str]]:
        """Group key → its child groups' keys, rebuilt only when a group spec changed."""
        cached = self._children_index
        if cached is not None and cached[0] == self.groups_generation:
            return cached[1]
        children: dict[str, list[str]] = {}
        for record in self.groups.values():
            if record.spec.parent is not None:
                children.setdefault(record.spec.parent, []).append(record.spec.key)
        self._children_index = (self.groups_generation, children)
        return children

    def descendants(self, key: str) -> list[str]:
        """``key`` and every group under it, parents before children."""
        children = self._children()
        found, stack = [], [key]
        while stack:
            current = stack.pop()
            if current in found:
                continue
            found.append(current)
            stack.extend(sorted(children.get(current, []), reverse=True))
        return found

    def root_of(self, key: str) -> str:
        seen = {key}
        record = self.groups.get(key)
        while record is not None and record.spec.parent is not None:
            if record.spec.parent in seen:
                break
            seen.add(record.spec.parent)
            key = record.spec.parent
            record = self.groups.get(key)
        return key

    def _changed(self, *, capacity: bool) -> None:
        self.generation += 1
        if capacity:
            self.capacity_generation += 1


def _assume(holding: BoundPod, gpus: tuple[int, ...]) -> BoundPod:
    return BoundPod(holding.pod, holding.node, gpus)


def _assumed_gpus(count: int, taken: set[int], holding: BoundPod) -> tuple[int, ...]:
    """``holding.pod.gpus`` GPUs of a node of ``count``: free ones first, highest first (the
    far end from where the engine allocates), then taken ones if it must."""
    wanted = min(holding.pod.gpus, count)
    order = [g for g in reversed(range(count)) if g not in taken]
    order += [g for g in reversed(range(count)) if g in taken]
    return tuple(sorted(order[:wanted]))


def _holds(record: PodRecord) -> bool:
    """Bound and not finished: a terminating pod still holds its GPUs until it is gone."""
    return record.node is not None and not record.pod.is_terminal


def _version_order(body: Mapping[str, Any], record: PodRecord) -> int:
    """-1, 0 or 1 as ``body`` is an older, unknown-order or newer version of the very pod
    ``record`` holds. Versions are compared as numbers where both are (etcd's revisions, as
    every kube-apiserver has them); another pod, or versions that are not numbers, give 0."""
    metadata = _metadata(body)
    version = str(metadata.get("resourceVersion") or "")
    if str(metadata.get("uid") or "") != record.uid:
        return 0
    if not (version.isdigit() and record.version.isdigit()):
        return 0
    return (int(version) > int(record.version)) - (int(version) < int(record.version))


def _pod_fingerprint(body: Mapping[str, Any]) -> str | None:
    """The parts of a pod body that `parse_pod` reads (metadata but its versions and managed
    fields, the spec, the status fields the Pod model has) as one string: equal strings parse
    to equal records, so a MODIFIED event that only touched the rest of the status
    (conditions, container states: the kubelet's heartbeats) costs this instead of a pydantic
    parse. None when the body does not serialise (it is parsed, and reported, as before)."""
    metadata = _metadata(body)
    read = {k: v for k, v in metadata.items() if k not in _UNREAD_METADATA}
    status = _mapping(body.get("status"))
    read_status = [status.get(key) for key in _READ_STATUS]
    try:
        return json.dumps((read, body.get("spec"), read_status), separators=(",", ":"), default=str)
    except (TypeError, ValueError):
        return None


_UNREAD_METADATA = frozenset({"resourceVersion", "managedFields", "generation"})
"""Metadata that changes with every write and that `parse_pod` does not read."""
_READ_STATUS = tuple(field.alias or name for name, field in PodStatus.model_fields.items())
"""The status fields the Pod model reads (the phase, the ResourceClaims made for the pod):
derived from the model, so a field added there is never missed here."""


def _mapping(value: object) -> Mapping[str, Any]:
    """``value`` if it is a JSON object, else empty: a malformed body must never raise here."""
    return value if isinstance(value, Mapping) else {}


def _metadata(body: Mapping[str, Any]) -> Mapping[str, Any]:
    return _mapping(body.get("metadata"))


def _generation(metadata: Mapping[str, Any]) -> int:
    try:
        return int(metadata.get("generation") or 0)
    except (TypeError, ValueError, OverflowError):
        return 0


def _name(body: Mapping[str, Any]) -> str:
    return str(_metadata(body).get("name") or "")


def _namespace(body: Mapping[str, Any]) -> str:
    return str(_metadata(body).get("namespace") or "default")


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
    return PodRecord(stub, uid, None, None, error)

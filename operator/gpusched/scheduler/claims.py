"""ResourceClaims: the ledger of DRA GPUs, and gpusched's allocation of them.

On a node whose GPUs are published as ResourceSlices the GPUs a pod gets are the devices
written into its ResourceClaims' ``status.allocation``: the kubelet and the DRA driver prepare
exactly those. So gpusched writes its own choice there, as kube-scheduler's dynamicresources
plugin would, and reads holdings back from the claims, never from its memory.

Three parts:
- `ClaimBook`: the watched ResourceSlices, DeviceClasses and ResourceClaims.
- `DraView`: per cycle, what the engine sees. DRA nodes advertise the GPUs of their slices
  (joined with the topology by UUID) and carry a label that only DRA pods select; a DRA pod
  asks for its claims' GPU count and selects nodes whose every GPU passes its claims'
  checks; every allocated claim (or one we are writing) holds its devices, whichever pod, if
  any, still runs. A claim that cannot be allocated exactly is a reason on the pod.
- `ClaimAllocator`: the transaction. For every pod of a gang, in kube-scheduler's order: the
  finalizer ``resource.kubernetes.io/delete-protection`` (an update of the claim), then
  ``status.allocation`` with the pod in ``status.reservedFor`` (one status update, as
  kube-scheduler writes them), and only when every claim of the gang is written are the pods
  bound. Any failure releases every claim the transaction touched (our reservedFor entry
  removed, the allocation we made cleared, our finalizer dropped) and binds nothing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpusched.api.config import GPU_RESOURCE
from gpusched.api.dra import (
    DELETE_PROTECTION_FINALIZER,
    DeviceClass,
    ResourceClaim,
    ResourceSlice,
    parse_device_class,
    parse_resource_claim,
    parse_resource_slice,
)
from gpusched.api.errors import InvalidObjectError
from gpusched.api.k8s import Node, NodeStatus, Pod
from gpusched.api.selectors import NodeSelectorRequirement, NodeSelectorTerm
from gpusched.api.topology import TOPOLOGY_ANNOTATION, GpuTopology, parse_topology_annotation
from gpusched.engine.devices import (
    NVIDIA_DRIVER,
    Check,
    ClaimError,
    NodeDevices,
    RequestDemand,
    claim_demand,
    device_passes,
    node_devices,
)
from gpusched.engine.request import PodRequest
from gpusched.engine.result import GroupDecision, Phase, PodFailure, Reason, ScheduleResult
from gpusched.engine.snapshot import BoundPod
from gpusched.scheduler.assignments import ActualAssignments, Mismatch
from gpusched.scheduler.ports import ApiError

logger = logging.getLogger(__name__)

DRA_NODE_LABEL = "dra.gpusched.io/gpus"
"""Put (in the engine's view only) on nodes whose GPUs come from ResourceSlices. DRA pods
select it; pods asking for device-plugin GPUs avoid it: the kubelet of a DRA node has no
``nvidia.com/gpu`` to give them."""
MATCH_LABEL_PREFIX = "dra.gpusched.io/match-"
"""Per distinct set of device checks, on the nodes whose every GPU passes them."""
WRITE_ATTEMPTS = 3
"""Tries of one claim write that met a conflict (someone else updated the claim meanwhile)."""
WRITE_CONCURRENCY = 16
"""Claims of one gang written at the same time (each claim's own writes stay in order)."""


class ClaimApi(Protocol):
    async def list_resource_slices(self) -> list[dict[str, Any]]:
        """Every ResourceSlice."""

    async def list_device_classes(self) -> list[dict[str, Any]]:
        """Every DeviceClass."""

    async def list_resource_claims(self) -> list[dict[str, Any]]:
        """Every ResourceClaim of every namespace."""

    async def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The claim as the server has it now; None when it does not exist."""

    async def update_claim(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """PUTs the claim (its metadata: the finalizers); ApiError 409 on a stale version."""

    async def update_claim_status(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """PUTs the claim's status subresource; ApiError 409 on a stale version."""


# ----- the watched objects ---------------------------------------------------------------------


@dataclass(slots=True)
class ClaimBook:
    slices: dict[str, ResourceSlice] = field(default_factory=dict)
    classes: dict[str, DeviceClass] = field(default_factory=dict)
    claims: dict[str, ResourceClaim] = field(default_factory=dict)
    raw_claims: dict[str, dict[str, Any]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    """Objects that could not be parsed, by kind and name: why."""
    slices_generation: int = 0
    releasing: set[str] = field(default_factory=set)
    """Claims whose unfinished allocation is being undone (not planned for meanwhile)."""
    listed: bool = False
    """Claims, slices and classes were listed afresh since this replica took the lead."""

    def upsert_slice(self, body: Mapping[str, Any]) -> None:
        name = _name(body)
        try:
            self.slices[name] = parse_resource_slice(body)
            self.errors.pop(f"ResourceSlice {name}", None)
        except InvalidObjectError as error:
            self.slices.pop(name, None)
            self.errors[f"ResourceSlice {name}"] = str(error)
        self.slices_generation += 1

    def delete_slice(self, name: str) -> None:
        self.slices.pop(name, None)
        self.slices_generation += 1

    def upsert_class(self, body: Mapping[str, Any]) -> None:
        name = _name(body)
        try:
            self.classes[name] = parse_device_class(body)
        except InvalidObjectError as error:
            self.classes.pop(name, None)
            self.errors[f"DeviceClass {name}"] = str(error)

    def delete_class(self, name: str) -> None:
        self.classes.pop(name, None)

    def upsert_claim(self, body: Mapping[str, Any]) -> None:
        key = f"{_namespace(body)}/{_name(body)}"
        try:
            claim = parse_resource_claim(body)
        except InvalidObjectError as error:
            self.claims.pop(key, None)
            self.errors[f"ResourceClaim {key}"] = str(error)
            return
        before = self.claims.get(key)
        if before is not None and _version(before) > _version(claim):
            return  # an older version than the one our own write returned
        self.claims[key] = claim
        self.raw_claims[key] = dict(body)

    def delete_claim(self, key: str) -> None:
        self.claims.pop(key, None)
        self.raw_claims.pop(key, None)

    def replace_all(
        self,
        slices: Iterable[Mapping[str, Any]],
        classes: Iterable[Mapping[str, Any]],
        claims: Iterable[Mapping[str, Any]],
    ) -> None:
        self.slices.clear()
        self.classes.clear()
        self.claims.clear()
        self.raw_claims.clear()
        for body in slices:
            self.upsert_slice(body)
        for body in classes:
            self.upsert_class(body)
        for body in claims:
            self.upsert_claim(body)
        self.listed = True


def _version(claim: ResourceClaim) -> int:
    version = claim.metadata.resource_version
    return int(version) if version.isdigit() else 0


# ----- what the engine sees --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClaimPlan:
    """A claim to allocate for a pod: its requests in order."""

    key: str
    demands: tuple[RequestDemand, ...]


@dataclass(frozen=True, slots=True)
class PodPlan:
    pod: str
    uid: str
    claims: tuple[ClaimPlan, ...]

    @property
    def gpus(self) -> int:
        return sum(d.count for c in self.claims for d in c.demands)

    @property
    def checks(self) -> tuple[Check, ...]:
        return tuple(sorted({c for p in self.claims for d in p.demands for c in d.checks}))


@dataclass(slots=True)
class View:
    nodes: list[Node]
    bound: list[BoundPod]
    ready: list[PodRequest]
    plans: dict[str, PodPlan]
    failures: dict[str, str]
    """Pods of ours that cannot be placed for a DRA reason: why."""
    problems: dict[str, tuple[str, ...]]
    """DRA nodes whose devices cannot all be used: why."""
    stale: list[tuple[str, str, str]]
    """(claim, pod uid): allocations a previous leader wrote for a pod it never bound."""
    group_of: dict[str, str] = field(default_factory=dict)
    """Pod → its group's key, for the pods above."""
    mismatches: list[Mismatch] = field(default_factory=list)
    """Bound pods the kubelet gave other GPUs than gpusched chose, new this cycle."""
    waiting: set[str] = field(default_factory=set)
    """Pods among ``failures`` that only wait (their claim is being made or released)."""
    extended: dict[str, str] = field(default_factory=dict)
    """Pods asking a GPU resource that a DeviceClass also serves through DRA (KEP-5004), which
    gpusched does not allocate yet: the note their reasons carry."""

    def amend(self, result: ScheduleResult) -> None:
        """Puts our reasons into the engine's result: a pod that could not even be offered to
        the engine, and the DRA nodes' problems on every DRA pod or group left unplaced."""
        failed_groups: dict[str, list[str]] = {}
        only_waiting: dict[str, bool] = {}
        for pod, why in sorted(self.failures.items()):
            waits = pod in self.waiting
            reason = Reason.WAITING_FOR_PODS if waits else Reason.UNSCHEDULABLE
            result.unschedulable.append(PodFailure(pod, reason, why))
            group = self.group_of.get(pod)
            if group is not None:
                failed_groups.setdefault(group, []).append(f"{pod}: {why}")
                only_waiting[group] = only_waiting.get(group, True) and waits
        problems = self.problem_text()
        for index, decision in enumerate(result.groups):
            lines = failed_groups.get(decision.name)
            if lines:
                waits = only_waiting[decision.name]
                result.groups[index] = dataclasses.replace(
                    decision,
                    phase=Phase.PENDING if waits else Phase.UNSCHEDULABLE,
                    reason=Reason.WAITING_FOR_PODS if waits else Reason.UNSCHEDULABLE,
                    message="; ".join(lines),
                )
            elif (
                problems
                and decision.phase is not Phase.SCHEDULED
                and _has_dra(decision, self.plans, self.group_of)
            ):
                result.groups[index] = dataclasses.replace(
                    decision, message=f"{decision.message}; {problems}"
                )
        for index, failure in enumerate(result.unschedulable):
            if problems and failure.pod in self.plans:
                result.unschedulable[index] = dataclasses.replace(
                    failure, message=f"{failure.message}; {problems}"
                )
            elif failure.pod in self.extended:
                note = self.extended[failure.pod]
                result.unschedulable[index] = dataclasses.replace(
                    failure, message=f"{failure.message}; {note}"
                )
        noted = {self.group_of[p]: n for p, n in self.extended.items() if p in self.group_of}
        for index, decision in enumerate(result.groups):
            if decision.name in noted and decision.phase is not Phase.SCHEDULED:
                result.groups[index] = dataclasses.replace(
                    decision, message=f"{decision.message}; {noted[decision.name]}"
                )

    def problem_text(self) -> str:
        return "; ".join(
            f"DRA node {node}: {problem}"
            for node, problems in sorted(self.problems.items())
            for problem in problems
        )


def _has_dra(
    decision: GroupDecision, plans: Mapping[str, PodPlan], group_of: Mapping[str, str]
) -> bool:
    return any(group_of.get(pod) == decision.name for pod in plans)


class ClaimWaitingError(ClaimError):
    """Not wrong, only not ready: the claim is being made, written or released. The pod waits
    without backing off, as a gang waits for its pods."""


class PodSource(Protocol):
    """A watched pod, as the scheduler's state keeps it."""

    @property
    def pod(self) -> Pod: ...

    @property
    def uid(self) -> str: ...


class DraView:
    """Builds `View`s, keeping every derived object alive while its inputs are unchanged
    (the snapshot cache tells unchanged nodes and pods by identity)."""

    def __init__(self, book: ClaimBook, gpu_resource: str = GPU_RESOURCE) -> None:
        self.book = book
        self.gpu_resource = gpu_resource
        self._devices: dict[str, tuple[Node, int, NodeDevices | None]] = {}
        self._nodes: dict[str, tuple[Node, int, frozenset[str], Node]] = {}
        self._holdings: dict[str, tuple[object, BoundPod]] = {}
        self._requests: dict[str, tuple[PodRequest, tuple[object, ...], PodRequest]] = {}
        self._by_node: tuple[int, dict[str, list[ResourceSlice]]] = (-1, {})
        self.actual = ActualAssignments()

    def devices(self, node: Node) -> NodeDevices | None:
        generation = self.book.slices_generation
        hit = self._devices.get(node.name)
        if hit is not None and hit[0] is node and hit[1] == generation:
            return hit[2]
        found = node_devices(node.name, self._slices_of(node.name), *_topology(node))
        self._devices[node.name] = (node, generation, found)
        return found

    def _slices_of(self, node: str) -> list[ResourceSlice]:
        generation = self.book.slices_generation
        if self._by_node[0] != generation:
            index: dict[str, list[ResourceSlice]] = {}
            for item in self.book.slices.values():
                index.setdefault(item.spec.node_name or "", []).append(item)
            self._by_node = (generation, index)
        return self._by_node[1].get(node, [])

    def build(
        self,
        nodes: Iterable[Node],
        bound: Iterable[BoundPod],
        ready: Sequence[PodRequest],
        pods: Mapping[str, PodSource],
        busy: Mapping[str, tuple[str, tuple[str, ...]]],
    ) -> View:
        """``busy``: claims being written by a running transaction (claim → node, devices)."""
        all_nodes = list(nodes)
        bound, mismatches = self.actual.apply({n.name: n for n in all_nodes}, bound)
        inventory = {n.name: d for n in all_nodes if (d := self.devices(n)) is not None}
        plans: dict[str, PodPlan] = {}
        failures: dict[str, str] = {}
        stale: list[tuple[str, str, str]] = []
        group_of: dict[str, str] = {}
        waiting: set[str] = set()
        for request in ready:
            record = pods.get(request.key)
            if record is None or not record.pod.spec.resource_claims:
                continue
            if request.group is not None:
                group_of[request.key] = f"{request.namespace}/{request.group}"
            try:
                plan = self._plan(record.pod, record.uid, busy, stale)
            except ClaimError as why:
                failures[request.key] = str(why)
                if isinstance(why, ClaimWaitingError):
                    waiting.add(request.key)
                continue
            plans[request.key] = plan
        extended = self._extended_note()
        noted: dict[str, str] = {}
        if extended and inventory:
            for request in ready:
                if request.key not in plans and request.key not in failures and request.wants_gpu:
                    noted[request.key] = extended
                    if request.group is not None:
                        group_of[request.key] = f"{request.namespace}/{request.group}"
        signatures = {p.checks for p in plans.values()}
        view_nodes = [self._node(n, inventory.get(n.name), signatures) for n in all_nodes]
        view_ready = [
            self._request(r, plans.get(r.key), bool(inventory))
            for r in ready
            if r.key not in failures
        ]
        held = self._claim_holdings(inventory, busy)
        unusable = [self._unusable(d) for d in inventory.values() if d.unusable]
        problems = {name: d.problems for name, d in inventory.items() if d.problems}
        return View(
            view_nodes,
            [*bound, *held, *unusable],
            view_ready,
            plans,
            failures,
            problems,
            stale,
            group_of,
            mismatches,
            waiting,
            noted,
        )

    def _extended_note(self) -> str:
        classes = sorted(
            name
            for name, c in self.book.classes.items()
            if c.spec.extended_resource_name == self.gpu_resource
        )
        if not classes:
            return ""
        return (
            f"DRA nodes serve {self.gpu_resource} through DeviceClass {', '.join(classes)} "
            "(extended resources backed by DRA), which gpusched does not allocate yet: on DRA "
            "nodes ask for GPUs with a ResourceClaimTemplate"
        )

    # ----- pods ---------------------------------------------------------------------------------

    def _plan(
        self,
        pod: Pod,
        uid: str,
        busy: Mapping[str, tuple[str, tuple[str, ...]]],
        stale: list[tuple[str, str, str]],
    ) -> PodPlan:
        claims: list[ClaimPlan] = []
        for key in claim_keys(pod):
            claim = self.book.claims.get(key)
            if claim is None:
                raise ClaimWaitingError(f"waiting for ResourceClaim {key} to exist")
            if claim.metadata.deletion_timestamp is not None:
                raise ClaimError(f"ResourceClaim {key} is being deleted")
            if key in self.book.releasing:
                raise ClaimWaitingError(f"ResourceClaim {key} is being released")
            if claim.status.allocation is not None:
                if claim.reserved_for_pod(uid) and key not in busy:
                    stale.append((key, uid, claim.metadata.resource_version))
                    raise ClaimWaitingError(
                        f"ResourceClaim {key} holds an allocation made for this pod by a "
                        "scheduler that never bound it; releasing it"
                    )
                if key in busy:
                    raise ClaimWaitingError(f"ResourceClaim {key} is being allocated")
                raise ClaimError(
                    f"ResourceClaim {key} is already allocated (shared with another pod); "
                    "gpusched does not place pods onto an existing allocation yet"
                )
            claims.append(ClaimPlan(key, claim_demand(claim, self.book.classes)))
        return PodPlan(pod.key, uid, tuple(claims))

    def _request(self, request: PodRequest, plan: PodPlan | None, dra_nodes: bool) -> PodRequest:
        if plan is None and not (dra_nodes and request.wants_gpu):
            return request
        inputs: tuple[object, ...] = (plan, dra_nodes)
        hit = self._requests.get(request.key)
        if hit is not None and hit[0] is request and hit[1] == inputs:
            return hit[2]
        if plan is None:
            changed = _avoid_dra_nodes(request)
        else:
            selector = {
                *request.node_selector,
                (DRA_NODE_LABEL, "true"),
                (_match_label(plan.checks), "true"),
            }
            changed = dataclasses.replace(
                request,
                gpus=request.gpus + plan.gpus,
                gpu_milli=0,
                node_selector=tuple(sorted(selector)),
            )
        self._requests[request.key] = (request, inputs, changed)
        return changed

    # ----- nodes --------------------------------------------------------------------------------

    def _node(
        self, node: Node, devices: NodeDevices | None, signatures: set[tuple[Check, ...]]
    ) -> Node:
        if devices is None:
            return node
        passing = frozenset(
            _match_label(checks)
            for checks in signatures
            if devices.devices and all(device_passes(checks, d) for d in devices.devices.values())
        )
        generation = self.book.slices_generation
        hit = self._nodes.get(node.name)
        if hit is not None and hit[0] is node and hit[1] == generation and hit[2] == passing:
            return hit[3]
        labels = {**node.labels, DRA_NODE_LABEL: "true", **dict.fromkeys(passing, "true")}
        base = node.status.allocatable
        allocatable = dict(base if base is not None else node.status.capacity)
        allocatable[self.gpu_resource] = str(devices.gpu_count)
        view = node.model_copy(
            update={
                "metadata": node.metadata.model_copy(update={"labels": labels}),
                "status": NodeStatus.model_validate(
                    {**node.status.model_dump(by_alias=True), "allocatable": allocatable}
                ),
            }
        )
        self._nodes[node.name] = (node, generation, passing, view)
        return view

    # ----- holdings -----------------------------------------------------------------------------

    def _claim_holdings(
        self,
        inventory: Mapping[str, NodeDevices],
        busy: Mapping[str, tuple[str, tuple[str, ...]]],
    ) -> list[BoundPod]:
        """Every claim holding NVIDIA devices: allocated ones, whether their pods still run
        or not (kube-controller-manager frees them, not we), and those being written now."""
        held: list[BoundPod] = []
        seen: set[str] = set()
        for key, claim in self.book.claims.items():
            allocation = claim.status.allocation
            if allocation is None:
                continue
            devices = tuple(
                sorted(r.device for r in allocation.devices.results if r.driver == NVIDIA_DRIVER)
            )
            pools = {r.pool for r in allocation.devices.results if r.driver == NVIDIA_DRIVER}
            if devices and len(pools) == 1:
                holding = self._holding(key, pools.pop(), devices, inventory, claim)
                if holding is not None:
                    held.append(holding)
                    seen.add(key)
        for key, (node, devices) in busy.items():
            if key not in seen:
                holding = self._holding(key, node, devices, inventory, ("busy", node, devices))
                if holding is not None:
                    held.append(holding)
        return held

    def _holding(
        self,
        key: str,
        pool: str,
        devices: tuple[str, ...],
        inventory: Mapping[str, NodeDevices],
        version: object,
    ) -> BoundPod | None:
        node = _pool_node(pool, inventory)
        if node is None:
            return None
        indices = tuple(
            sorted(g.index for d in devices if (g := node.by_name(pool, d)) is not None)
        )
        if not indices:
            return None
        marker = (version, indices)
        hit = self._holdings.get(key)
        if hit is not None and hit[0] == marker:
            return hit[1]
        request = PodRequest(key=f"ResourceClaim {key}", resources={}, gpus=len(indices))
        holding = BoundPod(request, node.node, indices)
        self._holdings[key] = (marker, holding)
        return holding

    def _unusable(self, devices: NodeDevices) -> BoundPod:
        key = f"unusable/{devices.node}"
        marker = (devices.unusable,)
        hit = self._holdings.get(key)
        if hit is not None and hit[0] == marker:
            return hit[1]
        request = PodRequest(
            key=f"GPUs not published by {NVIDIA_DRIVER} on {devices.node}",
            resources={},
            gpus=len(devices.unusable),
        )
        holding = BoundPod(request, devices.node, devices.unusable)
        self._holdings[key] = (marker, holding)
        return holding


def claim_keys(pod: Pod) -> list[str]:
    """The ResourceClaims of the pod's ``spec.resourceClaims``, in order; raises
    `ClaimError` while one made from a template is not created yet."""
    made = {s.name: s.resource_claim_name for s in pod.status.resource_claim_statuses}
    keys: list[str] = []
    for entry in pod.spec.resource_claims:
        if entry.resource_claim_name:
            keys.append(f"{pod.metadata.namespace}/{entry.resource_claim_name}")
            continue
        if entry.name not in made:
            raise ClaimWaitingError(
                f"waiting for the ResourceClaim of {entry.name} (from ResourceClaimTemplate "
                f"{entry.resource_claim_template_name}) to be created"
            )
        name = made[entry.name]
        if name:  # None: the template decided the pod needs no claim
            keys.append(f"{pod.metadata.namespace}/{name}")
    return keys


def held_claims(pod: Pod) -> list[str]:
    """The pod's claims that exist by name now (for releasing them)."""
    try:
        return claim_keys(pod)
    except ClaimError:
        return [
            f"{pod.metadata.namespace}/{s.resource_claim_name}"
            for s in pod.status.resource_claim_statuses
            if s.resource_claim_name
        ]


def _pool_node(pool: str, inventory: Mapping[str, NodeDevices]) -> NodeDevices | None:
    for devices in inventory.values():
        if any(g.pool == pool for g in devices.devices.values()):
            return devices
    return None


def _topology(node: Node) -> tuple[GpuTopology | None, str | None]:
    raw = node.annotations.get(TOPOLOGY_ANNOTATION)
    if raw is None:
        return None, None
    try:
        return parse_topology_annotation(node.name, raw), None
    except InvalidObjectError as error:
        return None, str(error)


def _match_label(checks: tuple[Check, ...]) -> str:
    digest = hashlib.sha256(repr(checks).encode()).hexdigest()[:16]
    return f"{MATCH_LABEL_PREFIX}{digest}"


def _avoid_dra_nodes(request: PodRequest) -> PodRequest:
    avoid = NodeSelectorRequirement(key=DRA_NODE_LABEL, operator="DoesNotExist")
    terms = request.required_terms or (NodeSelectorTerm(),)
    combined = tuple(
        term.model_copy(update={"match_expressions": [*term.match_expressions, avoid]})
        for term in terms
    )
    return dataclasses.replace(request, required_terms=combined)


# ----- the transaction -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClaimWrite:
    """The allocation of one claim for one pod."""

    key: str
    pod: str
    uid: str
    node: str
    pool: str
    results: tuple[tuple[str, str], ...]
    """(request, device) pairs, in request order."""
    demands: tuple[RequestDemand, ...]

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(device for _, device in self.results)


@dataclass(slots=True)
class _Done:
    write: ClaimWrite
    finalizer: bool = False
    allocated: bool = False


class ClaimAllocator:
    """Writes and releases claims for the scheduler; see the module docstring."""

    def __init__(
        self,
        book: ClaimBook,
        api: ClaimApi | None,
        leading: Callable[[], bool] = lambda: True,
    ) -> None:
        self.book = book
        self.view = DraView(book)
        self.api = api
        self.leading = leading
        self.writes: dict[str, ClaimWrite] = {}
        """Claims being written, by claim key: they hold their devices until done."""
        self.allocation_seconds = 0.0
        """Total time spent writing claims (for the figures of the closing note)."""

    @property
    def busy(self) -> dict[str, tuple[str, tuple[str, ...]]]:
        return {key: (w.pool, w.devices) for key, w in self.writes.items()}

    async def resync(self) -> None:
        """Lists slices, classes and claims afresh (a new leader's first step): holdings
        come from what the API server has, never from what a previous leader remembered."""
        if self.api is None:
            self.book.listed = True
            return
        try:
            slices = await self.api.list_resource_slices()
            classes = await self.api.list_device_classes()
            claims = await self.api.list_resource_claims()
        except ApiError as error:
            if error.status != 404:
                raise
            logger.info("the API server serves no resource.k8s.io/v1: no DRA devices")
            slices, classes, claims = [], [], []
        self.book.replace_all(slices, classes, claims)

    def plan(
        self, pod: str, node: str, gpus: Sequence[int], view: View | None
    ) -> list[ClaimWrite] | str:
        """The claim writes placing ``pod`` on ``gpus`` of ``node``, held from now on; or why
        they cannot be made (the devices' state changed since the view was built)."""
        plan = view.plans.get(pod) if view is not None else None
        if plan is None or view is None:
            return []
        node_obj = next((n for n in view.nodes if n.name == node), None)
        devices = self.view.devices(node_obj) if node_obj is not None else None
        if devices is None:
            return f"node {node} publishes no {NVIDIA_DRIVER} devices"
        chosen = [devices.devices.get(i) for i in gpus]
        if any(d is None for d in chosen) or len(chosen) != plan.gpus:
            return f"GPUs {list(gpus)} of {node} are not all published as devices"
        taken = self._taken()
        writes: list[ClaimWrite] = []
        queue = [d for d in chosen if d is not None]
        for claim in plan.claims:
            results: list[tuple[str, str]] = []
            for demand in claim.demands:
                for _ in range(demand.count):
                    gpu = queue.pop(0)
                    if (gpu.pool, gpu.device) in taken:
                        return f"device {gpu.device} of {node} is held by another claim"
                    results.append((demand.request, gpu.device))
            pool = chosen[0].pool if chosen[0] is not None else node
            writes.append(
                ClaimWrite(claim.key, pod, plan.uid, node, pool, tuple(results), claim.demands)
            )
        for write in writes:
            self.writes[write.key] = write
        return writes

    def _taken(self) -> set[tuple[str, str]]:
        taken = {(w.pool, d) for w in self.writes.values() for d in w.devices}
        for claim in self.book.claims.values():
            if claim.status.allocation is not None:
                taken |= {(r.pool, r.device) for r in claim.status.allocation.devices.results}
        return taken

    def drop(self, writes: Iterable[ClaimWrite]) -> None:
        for write in writes:
            if self.writes.get(write.key) is write:
                del self.writes[write.key]

    async def allocate(self, writes: Sequence[ClaimWrite]) -> str | None:
        """Writes every claim of a gang (each claim's two writes in order, claims side by
        side, as kube-scheduler's PreBind runs per pod); on any failure releases every claim
        the gang's writes touched and returns why. Done, the writes stop holding devices
        through `writes`: the claims hold them."""
        if not writes:
            return None
        loop = asyncio.get_running_loop()
        started = loop.time()
        slots = asyncio.Semaphore(WRITE_CONCURRENCY)
        steps = [_Done(write) for write in writes]

        async def write_one(step: _Done) -> None:
            async with slots:
                await self._write(step)

        try:
            outcomes = await asyncio.gather(
                *(write_one(step) for step in steps), return_exceptions=True
            )
            failed = [(s, o) for s, o in zip(steps, outcomes, strict=True) if o is not None]
            if failed:
                await self._release_all([s for s in steps if s.finalizer or s.allocated])
                step, error = failed[0]
                if not isinstance(error, ApiError | _RefusedError):
                    raise error
                return f"allocating ResourceClaim {step.write.key} failed: {error}"
        finally:
            self.drop(writes)
            self.allocation_seconds += loop.time() - started
        return None

    async def _write(self, step: _Done) -> None:
        assert self.api is not None
        write = step.write
        namespace, name = write.key.split("/", 1)
        for attempt in range(WRITE_ATTEMPTS):
            if not self.leading():
                raise _RefusedError("not the leader any more; not allocating")
            body = self.book.raw_claims.get(write.key) if attempt == 0 else None
            if body is None:
                body = await self.api.get_claim(namespace, name)
                if body is None:
                    raise _RefusedError(f"ResourceClaim {write.key} is gone")
            try:
                await self._write_once(step, body)
                return
            except ApiError as error:
                if error.status != 409 or attempt == WRITE_ATTEMPTS - 1:
                    raise

    async def _write_once(self, step: _Done, body: Mapping[str, Any]) -> None:
        assert self.api is not None
        write = step.write
        claim = parse_resource_claim(body)
        if claim.metadata.deletion_timestamp is not None:
            raise _RefusedError(f"ResourceClaim {write.key} is being deleted")
        if claim.status.allocation is not None:
            raise _RefusedError(f"ResourceClaim {write.key} got allocated elsewhere meanwhile")
        current = dict(body)
        if DELETE_PROTECTION_FINALIZER not in claim.metadata.finalizers:
            metadata = dict(current["metadata"])
            metadata["finalizers"] = [*claim.metadata.finalizers, DELETE_PROTECTION_FINALIZER]
            current = await self.api.update_claim({**current, "metadata": metadata})
            step.finalizer = True
            self.book.upsert_claim(current)
        status = dict(current.get("status") or {})
        status["allocation"] = self._allocation(write, claim)
        status["reservedFor"] = [
            *(status.get("reservedFor") or []),
            {"resource": "pods", "name": write.pod.split("/", 1)[1], "uid": write.uid},
        ]
        updated = await self.api.update_claim_status({**current, "status": status})
        step.allocated = True
        self.book.upsert_claim(updated)

    def _allocation(self, write: ClaimWrite, claim: ResourceClaim) -> dict[str, Any]:
        results = [
            {"request": request, "driver": NVIDIA_DRIVER, "pool": write.pool, "device": device}
            for request, device in write.results
        ]
        config: list[dict[str, Any]] = []
        for demand in write.demands:
            device_class = self.book.classes.get(demand.device_class)
            for item in device_class.spec.config if device_class is not None else ():
                if item.opaque is not None:
                    config.append(
                        {
                            "source": "FromClass",
                            "requests": [demand.request],
                            "opaque": item.opaque.model_dump(exclude_none=True),
                        }
                    )
        for own in claim.spec.devices.config:
            if own.opaque is not None:
                entry: dict[str, Any] = {
                    "source": "FromClaim",
                    "opaque": own.opaque.model_dump(exclude_none=True),
                }
                if own.requests:
                    entry["requests"] = list(own.requests)
                config.append(entry)
        allocation: dict[str, Any] = {
            "devices": {"results": results},
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": [write.node]}
                        ]
                    }
                ]
            },
        }
        if config:
            allocation["devices"]["config"] = config
        return allocation

    # ----- releasing ----------------------------------------------------------------------------

    async def _release_all(self, done: Sequence[_Done]) -> None:
        for step in reversed(done):
            try:
                await self.release(step.write.key, step.write.uid, clear=True)
            except ApiError as error:
                logger.warning("cannot release ResourceClaim %s: %s", step.write.key, error)

    async def release(self, key: str, uid: str, *, clear: bool) -> None:
        """Removes pod ``uid`` from the claim's reservedFor and, with ``clear`` and nobody
        else reserving it, its allocation and our finalizer (the claim is free again)."""
        if self.api is None:
            return
        namespace, name = key.split("/", 1)
        for attempt in range(WRITE_ATTEMPTS):
            body = await self.api.get_claim(namespace, name)
            if body is None:
                return
            try:
                await self._release_once(body, uid, clear=clear)
                return
            except ApiError as error:
                if error.status != 409 or attempt == WRITE_ATTEMPTS - 1:
                    raise

    async def _release_once(self, body: Mapping[str, Any], uid: str, *, clear: bool) -> None:
        assert self.api is not None
        current = dict(body)
        status = dict(current.get("status") or {})
        reserved = [r for r in status.get("reservedFor") or [] if r.get("uid") != uid]
        changed = len(reserved) != len(status.get("reservedFor") or [])
        if reserved:
            status["reservedFor"] = reserved
        else:
            status.pop("reservedFor", None)
            if clear and status.get("allocation") is not None:
                status.pop("allocation")
                changed = True
        if changed:
            current = await self.api.update_claim_status({**current, "status": status})
            self.book.upsert_claim(current)
        finalizers = list((current.get("metadata") or {}).get("finalizers") or [])
        if clear and not reserved and DELETE_PROTECTION_FINALIZER in finalizers:
            metadata = dict(current["metadata"])
            metadata["finalizers"] = [f for f in finalizers if f != DELETE_PROTECTION_FINALIZER]
            current = await self.api.update_claim({**current, "metadata": metadata})
            self.book.upsert_claim(current)

    async def release_stale(self, key: str, uid: str, version: str) -> None:
        """Undoes an allocation a scheduler wrote for pod ``uid`` and never bound, if the
        claim is still exactly as it was seen (``version``): a claim that changed since may
        have been allocated afresh, and must not lose that allocation."""
        if self.api is None or key in self.book.releasing:
            return
        self.book.releasing.add(key)
        try:
            namespace, name = key.split("/", 1)
            body = await self.api.get_claim(namespace, name)
            seen = ((body or {}).get("metadata") or {}).get("resourceVersion")
            if body is not None and seen == version:
                await self._release_once(body, uid, clear=True)
        except ApiError as error:
            logger.warning("cannot release the unfinished allocation of %s: %s", key, error)
        finally:
            self.book.releasing.discard(key)

    async def release_pod(self, pod: str, uid: str, keys: Iterable[str]) -> None:
        """After a refused bind: the pod's claims are released as kube-scheduler's Unreserve
        does, so that the devices go back to the pool."""
        for key in keys:
            claim = self.book.claims.get(key)
            if claim is not None and claim.reserved_for_pod(uid):
                try:
                    await self.release(key, uid, clear=True)
                except ApiError as error:
                    logger.warning("cannot release ResourceClaim %s of %s: %s", key, pod, error)


class _RefusedError(Exception):
    """A claim cannot be written as planned (gone, deleted, allocated meanwhile)."""


def _name(body: Mapping[str, Any]) -> str:
    return str((body.get("metadata") or {}).get("name") or "")


def _namespace(body: Mapping[str, Any]) -> str:
    return str((body.get("metadata") or {}).get("namespace") or "default")

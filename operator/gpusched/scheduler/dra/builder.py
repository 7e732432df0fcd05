"""Builds each cycle's `View`: DRA nodes and DRA pods as the engine sees them."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Mapping, Sequence

from pydantic import ValidationError

from gpusched.api.config import GPU_RESOURCE
from gpusched.api.dra import DeviceClass, ResourceClaim, ResourceSlice
from gpusched.api.errors import InvalidObjectError
from gpusched.api.k8s import Node, NodeStatus
from gpusched.api.selectors import NodeSelectorRequirement, NodeSelectorTerm
from gpusched.api.topology import TOPOLOGY_ANNOTATION, GpuTopology, parse_topology_annotation
from gpusched.engine.devices import (
    Check,
    ClaimError,
    NodeDevices,
    RequestDemand,
    claim_demand,
    class_checks,
    device_passes,
    node_devices,
)
from gpusched.engine.request import PodRequest
from gpusched.engine.snapshot import BoundPod
from gpusched.scheduler.assignments import ActualAssignments
from gpusched.scheduler.dra.book import ClaimBook
from gpusched.scheduler.dra.extended import extended_claim
from gpusched.scheduler.dra.holdings import ClaimHoldings
from gpusched.scheduler.dra.view import (
    ClaimPlan,
    ClaimWaitingError,
    PodPlan,
    PodSource,
    View,
    claim_keys,
    extended_key,
)

DRA_NODE_LABEL = "dra.gpusched.io/gpus"
"""Put (in the engine's view only) on nodes whose GPUs come from ResourceSlices. DRA pods
select it; pods asking for device-plugin GPUs avoid it: the kubelet of a DRA node has no
``nvidia.com/gpu`` to give them."""
MATCH_LABEL_PREFIX = "dra.gpusched.io/match-"
"""Per distinct set of device checks, on the nodes whose every GPU passes them."""


class DraView:
    """Builds `View`s, keeping every derived object alive while its inputs are unchanged
    (the snapshot cache tells unchanged nodes and pods by identity)."""

    def __init__(self, book: ClaimBook, gpu_resource: str = GPU_RESOURCE) -> None:
        self.book = book
        self.gpu_resource = gpu_resource
        self._devices: dict[str, tuple[Node, int, NodeDevices | None]] = {}
        self._nodes: dict[str, tuple[Node, int, frozenset[str], Node]] = {}
        self.holdings = ClaimHoldings(book)
        self._requests: dict[str, tuple[PodRequest, tuple[object, ...], PodRequest]] = {}
        self._by_node: tuple[int, dict[str, list[ResourceSlice]]] = (-1, {})
        self.actual = ActualAssignments()
        self._signatures: set[tuple[Check, ...]] = set()
        """The device checks of the last `build`'s plans (`cluster` labels nodes alike)."""

    def devices(self, node: Node) -> NodeDevices | None:
        generation = self.book.slices_generation
        hit = self._devices.get(node.name)
        if hit is not None and hit[0] is node and hit[1] == generation:
            return hit[2]
        slices = self._slices_of(node.name)
        # No slice, no DRA GPU: the topology annotation is parsed only to join the devices
        # of a node that publishes some (a new leader's first view of 5,000 device-plugin
        # nodes parsed every one, 1.66 s).
        found = node_devices(node.name, slices, *_topology(node)) if slices else None
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
        allocating: dict[str, PodRequest] = {}
        serving = self._extended_class() if inventory else None
        extended = {
            uid: claim
            for claim in self.book.claims.values()
            for uid in _controlling_pods(claim)
            if claim.extended_for_pod(uid)
        }
        for request in ready:
            record = pods.get(request.key)
            if record is None:
                continue
            by_template = bool(record.pod.spec.resource_claims)
            if not by_template and not (serving is not None and _whole_gpus(request)):
                continue
            if request.group is not None:
                group_of[request.key] = f"{request.namespace}/{request.group}"
            try:
                if by_template and request.wants_gpu:
                    raise ClaimError(
                        f"the pod asks for {self.gpu_resource} besides ResourceClaims; "
                        "gpusched places GPUs of one kind per pod: ask for them all through "
                        "its claims"
                    )
                if by_template:
                    plan = self._plan(request, record, busy, stale, allocating)
                else:
                    assert serving is not None
                    found = extended.get(record.uid)
                    plan = self._extended_plan(record, request, serving, found, busy, stale)
            except ClaimError as why:
                failures[request.key] = str(why)
                if isinstance(why, ClaimWaitingError):
                    waiting.add(request.key)
                continue
            plans[request.key] = plan
        self._signatures = {p.checks for p in plans.values()}
        view_nodes, held = self._engine_side(all_nodes, inventory, busy)
        view_ready = [
            self._request(r, plans.get(r.key), bool(inventory))
            for r in ready
            if r.key not in failures
        ]
        problems = {name: d.problems for name, d in inventory.items() if d.problems}
        return View(
            view_nodes,
            [*bound, *held],
            view_ready,
            plans,
            failures,
            problems,
            stale,
            group_of,
            mismatches,
            waiting,
        )

    def cluster(
        self,
        nodes: Iterable[Node],
        bound: Iterable[BoundPod],
        busy: Mapping[str, tuple[str, tuple[str, ...]]],
    ) -> tuple[list[Node], list[BoundPod]]:
        """The cluster as `build` shows it to the engine, without pods to place (for the
        placement-quality gauges): DRA nodes with their devices' GPUs, and what the claims
        hold. Node objects are the last build's where unchanged, so that the snapshot cache
        keeps them; mismatches are left for `build` to report."""
        all_nodes = list(nodes)
        bound, _ = self.actual.apply({n.name: n for n in all_nodes}, bound, report=False)
        inventory = {n.name: d for n in all_nodes if (d := self.devices(n)) is not None}
        view_nodes, held = self._engine_side(all_nodes, inventory, busy)
        return view_nodes, [*bound, *held]

    def _engine_side(
        self,
        nodes: Sequence[Node],
        inventory: Mapping[str, NodeDevices],
        busy: Mapping[str, tuple[str, tuple[str, ...]]],
    ) -> tuple[list[Node], list[BoundPod]]:
        """The nodes as the engine sees them (DRA nodes labelled for the last plans' checks),
        and what the claims, and the GPUs a DRA node does not publish, hold."""
        view_nodes = [self._node(n, inventory.get(n.name), self._signatures) for n in nodes]
        held = self.holdings.claims(inventory, busy)
        unusable = [self.holdings.unusable(d) for d in inventory.values() if d.unusable]
        return view_nodes, [*held, *unusable]

    def _extended_class(self) -> DeviceClass | None:
        """The DeviceClass serving the GPU resource through DRA (the first by name, should
        several claim it)."""
        serving = sorted(
            (
                c
                for c in self.book.classes.values()
                if c.spec.extended_resource_name == self.gpu_resource
            ),
            key=lambda c: c.metadata.name,
        )
        return serving[0] if serving else None

    # ----- pods ---------------------------------------------------------------------------------

    def _plan(
        self,
        request: PodRequest,
        record: PodSource,
        busy: Mapping[str, tuple[str, tuple[str, ...]]],
        stale: list[tuple[str, str, str]],
        allocating: dict[str, PodRequest],
    ) -> PodPlan:
        """The pod's claims: to allocate, or (a shared claim allocated already) to join, on
        its allocation's node. Pods of different gangs may all plan to allocate one shared
        claim; the first whose bind goes out does, and the others are refused by
        `ClaimAllocator.plan` and join it next time, as kube-scheduler's in-flight
        allocations work. ``allocating``: the first pod planning each unallocated claim
        this cycle, to tell pods of one gang sharing one."""
        pod, uid = record.pod, record.uid
        claims: list[ClaimPlan] = []
        terms: tuple[NodeSelectorTerm, ...] | None = None
        for key in claim_keys(pod):
            claim = self.book.claims.get(key)
            if claim is None:
                raise ClaimWaitingError(f"waiting for ResourceClaim {key} to exist")
            if claim.metadata.deletion_timestamp is not None:
                raise ClaimError(f"ResourceClaim {key} is being deleted")
            if key in self.book.releasing:
                raise ClaimWaitingError(f"ResourceClaim {key} is being released")
            if claim.reserved_for_pod(uid) and key not in busy:
                stale.append((key, uid, claim.metadata.resource_version))
                raise ClaimWaitingError(
                    f"ResourceClaim {key} is reserved for this pod by a scheduler that never "
                    "bound it; releasing it"
                )
            if key in busy:
                raise ClaimWaitingError(f"ResourceClaim {key} is being allocated")
            if claim.status.allocation is not None:
                claims.append(ClaimPlan(key, (), joins=True))
                terms = _and_terms(terms, _allocation_terms(claim))
                continue
            first = allocating.setdefault(key, request)
            same_gang = request.group is not None and request.group_key == first.group_key
            if first is not request and same_gang:
                raise _one_gang(key, first)
            claims.append(ClaimPlan(key, claim_demand(claim, self.book.classes)))
        return PodPlan(pod.key, uid, tuple(claims), node_terms=terms)

    def _extended_plan(
        self,
        record: PodSource,
        request: PodRequest,
        device_class: DeviceClass,
        found: ResourceClaim | None,
        busy: Mapping[str, tuple[str, tuple[str, ...]]],
        stale: list[tuple[str, str, str]],
    ) -> PodPlan:
        """The claim to create should the pod land on a DRA node. A claim made for it by an
        attempt that never bound it is deleted first, as kube-scheduler does: its devices
        may not be the ones this decision picks."""
        if found is not None:
            if found.key in busy:
                raise ClaimWaitingError(f"ResourceClaim {found.key} is being allocated")
            if found.metadata.deletion_timestamp is None:
                stale.append((found.key, record.uid, found.metadata.resource_version))
            raise ClaimWaitingError(
                f"ResourceClaim {found.key} was made for this pod's {self.gpu_resource} by an "
                "attempt that never bound it; deleting it"
            )
        name = device_class.metadata.name
        claim = extended_claim(record.pod, record.uid, self.gpu_resource, name)
        if claim.count != request.gpus:
            raise ClaimError(
                f"the containers' {self.gpu_resource} requests come to {claim.count} devices "
                f"for a pod that needs {request.gpus}; gpusched does not guess which to allocate"
            )
        checks = tuple(sorted(set(class_checks(device_class))))
        key = extended_key(record.pod)
        demands = tuple(
            RequestDemand(key, request_name, count, checks, name)
            for request_name, count in claim.requests
        )
        return PodPlan(record.pod.key, record.uid, (ClaimPlan(key, demands),), claim)

    def _request(self, request: PodRequest, plan: PodPlan | None, dra_nodes: bool) -> PodRequest:
        if plan is None and not (dra_nodes and request.wants_gpu):
            return request
        inputs: tuple[object, ...] = (plan, dra_nodes)
        hit = self._requests.get(request.key)
        if hit is not None and hit[0] is request and hit[1] == inputs:
            return hit[2]
        if plan is None:
            changed = _avoid_dra_nodes(request)
        elif plan.extended is not None:
            changed = _dra_or_plugin(request, _match_label(plan.checks))
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
            if plan.node_terms is not None:
                own = request.required_terms
                joined = plan.node_terms if own is None else _and_terms(own, plan.node_terms)
                changed = dataclasses.replace(changed, required_terms=joined)
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


def _one_gang(key: str, first: PodRequest) -> ClaimError:
    """Pods of one gang on one claim not allocated yet: the gang is placed at once, and a pod
    joins a shared claim only once it is allocated."""
    return ClaimError(
        f"ResourceClaim {key} is shared with {first.key} of the same gang and is not "
        "allocated yet; gpusched places pods on a shared claim once it is allocated, so "
        "let one pod outside the gang (or one gang member alone) allocate it first"
    )


def _allocation_terms(claim: ResourceClaim) -> tuple[NodeSelectorTerm, ...] | None:
    """The nodes an allocated claim can be used on (None: any node)."""
    allocation = claim.status.allocation
    selector = allocation.node_selector if allocation is not None else None
    if selector is None:
        return None
    try:
        return tuple(
            NodeSelectorTerm.model_validate(term)
            for term in selector.get("nodeSelectorTerms") or []
        )
    except ValidationError as error:
        raise ClaimError(
            f"ResourceClaim {claim.key}: status.allocation.nodeSelector cannot be read: {error}"
        ) from None


def _and_terms(
    left: tuple[NodeSelectorTerm, ...] | None, right: tuple[NodeSelectorTerm, ...] | None
) -> tuple[NodeSelectorTerm, ...] | None:
    """Nodes both selectors allow: each term of one ANDed with each term of the other."""
    if left is None or right is None:
        return right if left is None else left
    return tuple(
        a.model_copy(
            update={
                "match_expressions": [*a.match_expressions, *b.match_expressions],
                "match_fields": [*a.match_fields, *b.match_fields],
            }
        )
        for a in left
        for b in right
    )


def _whole_gpus(request: PodRequest) -> bool:
    return request.gpus > 0 and request.gpu_milli == 0


def _controlling_pods(claim: ResourceClaim) -> list[str]:
    return [o.uid for o in claim.metadata.owner_references if o.kind == "Pod" and o.controller]


def _dra_or_plugin(request: PodRequest, match_label: str) -> PodRequest:
    """An extended-resource pod fits a device-plugin node as before, or a DRA node whose
    GPUs its DeviceClass selects (every term of its own, twice: once each way)."""
    plugin = NodeSelectorRequirement(key=DRA_NODE_LABEL, operator="DoesNotExist")
    dra = NodeSelectorRequirement(key=match_label, operator="In", values=["true"])
    terms = request.required_terms or (NodeSelectorTerm(),)
    combined = tuple(
        term.model_copy(update={"match_expressions": [*term.match_expressions, extra]})
        for term in terms
        for extra in (plugin, dra)
    )
    return dataclasses.replace(request, required_terms=combined)


def _avoid_dra_nodes(request: PodRequest) -> PodRequest:
    avoid = NodeSelectorRequirement(key=DRA_NODE_LABEL, operator="DoesNotExist")
    terms = request.required_terms or (NodeSelectorTerm(),)
    combined = tuple(
        term.model_copy(update={"match_expressions": [*term.match_expressions, avoid]})
        for term in terms
    )
    return dataclasses.replace(request, required_terms=combined)

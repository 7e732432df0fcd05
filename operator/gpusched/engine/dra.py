"""DRA as engine inputs: from the API models (Nodes, ResourceSlices, DeviceClasses,
ResourceClaims, pods), what `schedule` is given, the same way for the operator and for
``simulate``/``explain``:

- the device inventory (`DraInputs.devices`): per node that publishes some, its
  ``gpu.nvidia.com`` devices joined with its GPU topology by UUID (`node_devices`), passed
  to `build_snapshot`, which counts the node's GPUs from them;
- what the claims hold (`DraInputs.held`): allocated claims, claims being written, GPUs a
  node has but does not publish, as holdings on the snapshot;
- the pending pods with their devices (`DraInputs.ready`: `PodRequest.with_devices`).

`DraCache` keeps every derived object alive while its inputs are unchanged, so that the
snapshot cache, which tells unchanged nodes and pods by identity, keeps them too. One object
per caller: it is not shared between threads.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gpusched.api.dra import DeviceClass, ResourceClaim, ResourceSlice
from gpusched.api.errors import InvalidObjectError
from gpusched.api.k8s import Node, Pod
from gpusched.api.topology import TOPOLOGY_ANNOTATION, GpuTopology, parse_topology_annotation
from gpusched.engine.claims import (
    ClaimsSeen,
    PodDevices,
    Stale,
    extended_claims,
    pod_devices,
    serving_class,
    with_shared_memory,
)
from gpusched.engine.devices import NodeDevices, node_devices
from gpusched.engine.holdings import Busy, ClaimHoldings, share_used, stranded_holding
from gpusched.engine.request import PodRequest
from gpusched.engine.shares import SharedDevice, amounts, stranded
from gpusched.engine.snapshot import BoundPod


@dataclass(frozen=True, slots=True)
class DraObjects:
    """The DRA objects as read (the operator's watch, or the files ``simulate`` reads).
    ``version``: changes whenever ``slices`` do (None: unknown, nothing is reused)."""

    slices: Mapping[str, ResourceSlice] = field(default_factory=dict)
    classes: Mapping[str, DeviceClass] = field(default_factory=dict)
    claims: Mapping[str, ResourceClaim] = field(default_factory=dict)
    version: int | None = None
    compute_domains: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    """The NVIDIA driver's ComputeDomains (``resource.nvidia.com``), by uid: (namespace,
    name); a channel claim of one seen in another namespace is refused."""


class PodSource(Protocol):
    """A pending pod as parsed, with its uid (a claim's reservedFor names pods by uid)."""

    @property
    def pod(self) -> Pod: ...

    @property
    def uid(self) -> str: ...


@dataclass(frozen=True, slots=True)
class DraPod:
    """A `PodSource` for the offline tools."""

    pod: Pod
    uid: str


@dataclass(slots=True)
class DraInputs:
    devices: dict[str, NodeDevices]
    """Per node that publishes DRA GPUs: its devices (for `build_snapshot`)."""
    held: list[BoundPod]
    """What the claims hold, and GPUs DRA nodes do not publish (besides the bound pods)."""
    ready: list[PodRequest]
    """The pending pods, each with its devices where it asks for some."""
    stale: list[Stale] = field(default_factory=list)
    """Allocations written for pods that were never bound (to release)."""

    @property
    def refused(self) -> dict[str, str]:
        """Pods whose claims cannot be allocated now: why."""
        return {
            r.key: r.devices.refusal.message
            for r in self.ready
            if r.devices is not None and r.devices.refusal is not None
        }


class DraCache:
    """Builds `DraInputs`, reusing what did not change (see the module docstring)."""

    def __init__(self) -> None:
        self._devices: dict[str, tuple[Node, int | None, NodeDevices | None]] = {}
        self._by_node: tuple[int | None, dict[str, list[ResourceSlice]]] = (None, {})
        self._requests: dict[str, tuple[PodRequest, PodDevices, PodRequest]] = {}
        self.holdings = ClaimHoldings()

    def inventory(self, nodes: Mapping[str, Node], objects: DraObjects) -> dict[str, NodeDevices]:
        """The devices of each node that publishes some. A cluster without ResourceSlices
        (every device-plugin cluster) has none, and is not walked node by node: at 5,000
        nodes those walks were a tenth of the leader's time."""
        if not objects.slices:
            return {}
        return {
            name: found
            for name, node in nodes.items()
            if (found := self.node_devices(node, objects)) is not None
        }

    def node_devices(self, node: Node, objects: DraObjects) -> NodeDevices | None:
        version = objects.version
        hit = self._devices.get(node.name)
        if hit is not None and hit[0] is node and version is not None and hit[1] == version:
            return hit[2]
        slices = self._slices_of(node.name, objects)
        # No slice, no DRA GPU: the topology annotation is parsed only to join the devices
        # of a node that publishes some (a new leader's first view of 5,000 device-plugin
        # nodes parsed every one, 1.66 s).
        found = node_devices(node.name, slices, *_topology(node)) if slices else None
        self._devices[node.name] = (node, version, found)
        return found

    def _slices_of(self, node: str, objects: DraObjects) -> list[ResourceSlice]:
        version = objects.version
        if version is None or self._by_node[0] != version:
            index: dict[str, list[ResourceSlice]] = {}
            for item in objects.slices.values():
                index.setdefault(item.spec.node_name or "", []).append(item)
            self._by_node = (version, index)
        return self._by_node[1].get(node, [])

    def held(
        self,
        objects: DraObjects,
        inventory: Mapping[str, NodeDevices],
        busy: Mapping[str, Busy] | None = None,
    ) -> list[BoundPod]:
        """What the claims hold (and, ``busy``, claims being written: claim → pool,
        devices), and the GPUs each DRA node does not publish."""
        held = self.holdings.claims(objects.claims, inventory, busy or {})
        unusable = [self.holdings.unusable(d) for d in inventory.values() if d.unusable]
        return [*held, *unusable]

    def build(
        self,
        nodes: Mapping[str, Node],
        objects: DraObjects,
        ready: Sequence[PodRequest],
        pods: Mapping[str, PodSource],
        *,
        gpu_resource: str,
        busy: Mapping[str, Busy] | None = None,
        releasing: Collection[str] = (),
    ) -> DraInputs:
        """Everything DRA the engine is given for one decision on ``ready`` (``pods``: the
        parsed pod of each, by key; ``busy``: claims being written, claim → pool, devices;
        ``releasing``: claims being released)."""
        inventory = self.inventory(nodes, objects)
        serving = serving_class(objects.classes, gpu_resource) if inventory else None
        seen = ClaimsSeen(
            claims=objects.claims,
            classes=objects.classes,
            gpu_resource=gpu_resource,
            busy=busy or {},
            releasing=releasing,
            extended_class=serving,
            extended_claims=extended_claims(objects.claims) if serving is not None else None,
            compute_domains=objects.compute_domains,
        )
        allocating: dict[str, tuple[str, str | None]] = {}
        shares = [s for d in inventory.values() for s in d.shares]
        stale: list[Stale] = []
        requests: list[PodRequest] = []
        for request in ready:
            found = pods.get(request.key)
            devices = (
                pod_devices(
                    found.pod,
                    found.uid,
                    request.gpus,
                    request.gpu_milli,
                    request.group_key,
                    seen,
                    allocating,
                )
                if found is not None
                else None
            )
            if devices is None:
                requests.append(request)
                continue
            stale.extend(devices.stale)
            devices = with_shared_memory(devices, shares)
            requests.append(self._request(request, devices))
        held = self.held(objects, inventory, busy)
        if shares:
            held.extend(_stranded(objects, inventory, busy or {}, requests, shares))
        return DraInputs(inventory, held, requests, stale)

    def _request(self, request: PodRequest, devices: PodDevices) -> PodRequest:
        hit = self._requests.get(request.key)
        if hit is not None and hit[0] is request and hit[1] == devices:
            return hit[2]
        changed = request.with_devices(devices)
        self._requests[request.key] = (request, devices, changed)
        return changed


def dra_inputs(
    nodes: Iterable[Node],
    objects: DraObjects,
    ready: Sequence[PodRequest],
    pods: Mapping[str, PodSource],
    gpu_resource: str,
) -> DraInputs:
    """`DraCache.build` once, for the offline tools (nothing is being written)."""
    return DraCache().build(
        {n.name: n for n in nodes}, objects, ready, pods, gpu_resource=gpu_resource
    )


def _stranded(
    objects: DraObjects,
    inventory: Mapping[str, NodeDevices],
    busy: Mapping[str, Busy],
    requests: Iterable[PodRequest],
    shares: Sequence[SharedDevice],
) -> list[BoundPod]:
    """What of each node's shared devices no pending share request can use, as held."""
    sizes = {
        size
        for r in requests
        if r.devices is not None and r.devices.refusal is None
        for c in r.devices.claims
        for d in c.demands
        if d.share
        and len(found := amounts(shares, d.memory)) == 1
        and (size := found.pop()) is not None
    }
    if not sizes:
        return []
    used = share_used(objects.claims, inventory, busy)
    return [
        stranded_holding(node, lost)
        for node in inventory.values()
        if node.shares and (lost := stranded(node.shares, used, sizes))
    ]


def _topology(node: Node) -> tuple[GpuTopology | None, str | None]:
    raw = node.annotations.get(TOPOLOGY_ANNOTATION)
    if raw is None:
        return None, None
    try:
        return parse_topology_annotation(node.name, raw), None
    except InvalidObjectError as error:
        return None, str(error)

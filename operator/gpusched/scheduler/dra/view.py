"""The DRA inputs of one decision, gathered from the claim ledger (`DraView`), and what the
operator keeps of them to carry the decision out (`View`).

Everything that decides is the engine's (`gpusched.engine.dra`): the device inventory, the
pods' claims, what the claims hold. Here only the watched objects are handed over, with what
this replica is writing now, and the GPUs the kubelet actually gave bound pods."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from gpusched.api.config import GPU_RESOURCE
from gpusched.api.k8s import Node
from gpusched.engine.build import BoundChanges
from gpusched.engine.claims import PodDevices, Stale
from gpusched.engine.devices import NodeDevices
from gpusched.engine.dra import DraCache, DraInputs, DraObjects, PodSource
from gpusched.engine.holdings import Busy as BusyClaim
from gpusched.engine.request import PodRequest
from gpusched.engine.snapshot import BoundPod
from gpusched.scheduler.assignments import ActualAssignments, Mismatch
from gpusched.scheduler.dra.book import ClaimBook
from gpusched.scheduler.feed import BoundFeed

Busy = Mapping[str, BusyClaim]
"""Claims being written by a running transaction: claim → pool, devices."""


@dataclass(slots=True)
class View:
    """One decision's inputs (``nodes`` as watched, ``bound`` with what claims hold) and the
    pods' devices, for the allocator to write what the engine chose."""

    nodes: list[Node]
    bound: list[BoundPod] | BoundChanges
    inputs: DraInputs
    claimed: dict[str, tuple[str, PodDevices]] = field(default_factory=dict)
    """Pod → its uid and devices, for the pods whose devices can be allocated."""
    mismatches: list[Mismatch] = field(default_factory=list)
    """Bound pods the kubelet gave other GPUs than gpusched chose, new this cycle."""

    @property
    def ready(self) -> list[PodRequest]:
        return self.inputs.ready

    @property
    def devices(self) -> dict[str, NodeDevices]:
        return self.inputs.devices

    @property
    def stale(self) -> list[Stale]:
        return self.inputs.stale

    @property
    def refused(self) -> dict[str, str]:
        return self.inputs.refused

    def pod_devices(self, pod: str) -> tuple[str, PodDevices] | None:
        """The pod's uid and devices, if it asks for some and they can be allocated."""
        return self.claimed.get(pod)


class DraView:
    """Builds `View`s from the ledger (`ClaimBook`) through one `DraCache`."""

    def __init__(self, book: ClaimBook, gpu_resource: str = GPU_RESOURCE) -> None:
        self.book = book
        self.gpu_resource = gpu_resource
        self.cache = DraCache()
        self.actual = ActualAssignments()

    def objects(self) -> DraObjects:
        book = self.book
        return DraObjects(
            book.slices,
            book.classes,
            book.claims,
            book.slices_generation,
            compute_domains=book.compute_domains,
        )

    def node_devices(self, node: Node) -> NodeDevices | None:
        """The node's DRA devices now (None: it publishes none)."""
        return self.cache.node_devices(node, self.objects())

    def build(
        self,
        nodes: Mapping[str, Node],
        bound: Iterable[BoundPod] | BoundFeed,
        ready: Sequence[PodRequest],
        pods: Mapping[str, PodSource],
        busy: Busy,
    ) -> View:
        """``bound``: the bound pods, or the feed that keeps them (then only what changed
        since its last answer is read)."""
        if not isinstance(bound, BoundFeed):
            bound, mismatches = self.actual.apply(nodes, bound)
        inputs = self.cache.build(
            nodes,
            self.objects(),
            ready,
            pods,
            gpu_resource=self.gpu_resource,
            busy=busy,
            releasing=self.book.releasing,
        )
        claimed = {
            r.key: (record.uid, r.devices)
            for r in inputs.ready
            if r.devices is not None
            and r.devices.refusal is None
            and (record := pods.get(r.key)) is not None
        }
        if isinstance(bound, BoundFeed):
            held: list[BoundPod] | BoundChanges = bound.take(nodes, self.actual, inputs.held)
            mismatches = bound.take_mismatches()
        else:
            held = [*bound, *inputs.held]
        return View(list(nodes.values()), held, inputs, claimed, mismatches)

    def cluster(
        self, nodes: Mapping[str, Node], bound: Iterable[BoundPod] | BoundFeed, busy: Busy
    ) -> tuple[list[Node], list[BoundPod] | BoundChanges, dict[str, NodeDevices]]:
        """The cluster as `build` shows it to the engine, without pods to place (for the
        placement-quality gauges and the standby's warm snapshot); mismatches are left for
        `build` to report."""
        objects = self.objects()
        inventory = self.cache.inventory(nodes, objects)
        held = self.cache.held(objects, inventory, busy)
        if isinstance(bound, BoundFeed):
            return list(nodes.values()), bound.take(nodes, self.actual, held), inventory
        bound, _ = self.actual.apply(nodes, bound, report=False)
        return list(nodes.values()), [*bound, *held], inventory

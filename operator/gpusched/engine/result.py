"""What the engine decides: bindings, per-group decisions with reasons, pods left pending.

A group's decision carries its reasons as data — the domains tried (`Attempt`: how many of
its pods or child groups fit, how many it needs, which node checks blocked the rest) and what a
group short of pods waits for (`Waiting`) — and the sentences rendered once from that data
(`gpusched.engine.wording`) for status, Events, ``simulate`` and ``explain``. Readers that
need a number (``explain``'s hints) read the data, never the sentences."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

# The reasons are the API's vocabulary; re-exported for the rooms that read results.
from gpusched.api.crds import Reason as Reason
from gpusched.engine.channels import ChannelRule

ENGINE_REASONS = (
    Reason.SCHEDULED,
    Reason.UNSCHEDULABLE,
    Reason.INVALID,
    Reason.WAITING_FOR_PODS,
    Reason.SCHEDULING_GATED,
)
"""The reasons `schedule` decides; the scheduling service adds the others (its own errors,
timeouts, gangs partly bound)."""


class Counted(StrEnum):
    """What an attempt or a wait counts."""

    PODS = "pods"
    CHILD_GROUPS = "child groups"


@dataclass(frozen=True, slots=True)
class DeviceChoice:
    """One device given to one request of a claim, as ``status.allocation`` records it."""

    request: str
    driver: str
    pool: str
    device: str
    consumed: int = 0
    """Bytes of memory it consumes of a device shared by capacity (0: a whole device)."""


@dataclass(frozen=True, slots=True)
class ClaimAllocation:
    """A claim of a bound pod and the devices the engine chose for it; ``joins``: a shared
    claim allocated already, which the pod only joins (no devices chosen)."""

    claim: str
    devices: tuple[DeviceChoice, ...] = ()
    joins: bool = False

    def to_dict(self) -> dict[str, object]:
        found: dict[str, object] = {
            "claim": self.claim,
            "devices": [
                {"request": d.request, "driver": d.driver, "pool": d.pool, "device": d.device}
                | ({"consumedMemory": d.consumed} if d.consumed else {})
                for d in self.devices
            ],
        }
        if self.joins:
            found["joins"] = True
        return found


@dataclass(frozen=True, slots=True)
class Shortfall:
    """One resource of ``minResources`` the cluster lacks: wanted, and free now (in the
    resource's canonical unit: millicores, bytes, a count)."""

    resource: str
    wanted: int
    free: int


@dataclass(frozen=True, slots=True)
class Blocker:
    """Nodes that fail the same check for a pod (the first check each fails)."""

    check: str
    """The check, e.g. ``insufficient cpu``, ``node is cordoned``."""
    nodes: int
    examples: tuple[str, ...]
    """Up to two of those nodes, each with its figures: ``node-a (1000m free, needs 4000m)``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeCheck:
    """Why the nodes of a domain do not take a pod: how many do, then the checks the others
    fail, most nodes first (then by check)."""

    fitting: int
    fitting_examples: tuple[str, ...]
    """Up to three nodes that fit, with how many copies of the pod each takes when counted
    (``node-a ×2``)."""
    blockers: tuple[Blocker, ...]
    others: int = 0
    """Nodes failing checks beyond those listed."""
    device_problems: tuple[tuple[str, str], ...] = ()
    """For a pod asking for DRA devices: (node, why) of nodes among those that did not take
    it whose devices cannot all be used (a slice not matching the topology, a pool still
    being published), up to a few."""
    limits: tuple[ChannelRule, ...] = ()
    """Rules that let each node that fits take one pod only (an IMEX channel pod)."""


@dataclass(frozen=True, slots=True)
class ChildBound:
    """Identical child gangs of a CompositePodGroup, and how many a domain could hold."""

    children: int
    needed: int
    """Pods each needs."""
    topology_key: str | None
    room: int
    """How many of them the domain could hold at once (at most ``children``)."""


@dataclass(frozen=True, slots=True)
class PinnedApart:
    """Why a group's bound pods leave it no domain of its topology key: they already sit in
    several (``spans``), which its constraint forbids, or in none inside its parent's domain
    (``outside``)."""

    key: str | None
    spans: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Each domain the bound pods sit in, with the names of their nodes there."""
    outside: tuple[str, ...] = ()
    """The nodes of the bound pods, none in a domain of the key inside ``parent``."""
    parent: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class EmptyLabel:
    """Nodes that carry the group's topology key with an empty value, so are in no domain of
    it: NVIDIA's ``nvidia.com/gpu.clique`` is empty on a node whose NVLink fabric is not
    attached. They cannot host a pod of a group constrained on that key."""

    key: str
    nodes: int
    examples: tuple[str, ...]
    """Up to three of them, by name."""
    mixed: int = 0
    """Nodes (besides ``nodes``) whose GPUs publish different cliques, or another than their
    label (`NodeDevices.mixed`): in no domain of it either."""
    mixed_examples: tuple[str, ...] = ()
    cliques: tuple[str, ...] = ()
    """The cliques the first of them names."""


@dataclass(frozen=True, slots=True)
class SegmentCount:
    """A segmented gang's trial: how many of its segments landed whole, each inside one
    domain of ``key``."""

    fit: int
    needed: int
    size: int
    """Pods per segment."""
    key: str


@dataclass(frozen=True, slots=True)
class SegmentPlaced:
    """One segment of a placed gang: the domain of the segment key it landed in, its pods."""

    domain: str
    pods: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"domain": self.domain, "pods": list(self.pods)}


@dataclass(frozen=True, slots=True, kw_only=True)
class Attempt:
    """One domain tried for a group, or a reason that rules out every domain (``note``)."""

    domain: str | None
    """None for a reason not about one domain (bound pods pin the group elsewhere)."""
    fit: int = 0
    """Pods (or child groups, see ``counted``) that fit there."""
    needed: int = 0
    counted: Counted = Counted.PODS
    estimate: bool = False
    """``fit`` is an optimistic count made before any trial (the domain was refused on it)."""
    fits: bool = False
    """The group was placed here."""
    nodes: NodeCheck | None = None
    """Why the nodes did not take the group's largest pod (or its first that failed)."""
    no_pods: bool = False
    """A trial that placed too few, with no pod left that failed: there were too few pods."""
    bounds: tuple[ChildBound, ...] = ()
    """For a composite refused before a trial: its child gangs' bounds."""
    children: tuple[tuple[str, str], ...] = ()
    """For a composite trial: (child group, its message) of up to three that failed."""
    note: str = ""
    """A reason that is not a count: ``no node has label …``, ``bound pods already span …``."""
    empty_label: EmptyLabel | None = None
    """Nodes left out of every domain because their label for the key is empty."""
    segments: SegmentCount | None = None
    """For a segmented gang's trial: the segments that landed whole."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Waiting:
    """What a group short of pods (or of child groups) waits for."""

    counted: Counted
    present: int
    """Valid pods (bound ones included), or child groups that exist or have their pods."""
    minimum: int | None
    """``minCount`` or ``minGroupCount``; None when no minimum applies (a basic group)."""
    ready: bool = False
    """Child groups: ``present`` counts those that have their pods (else those that exist)."""
    gated: int = 0
    """Pods held back by scheduling gates (not counted in ``present``)."""
    tasks: tuple[tuple[str, int, int], ...] = ()
    """Volcano tasks short of their ``minTaskMember``: (task, pods that exist, minimum)."""
    short: tuple[Shortfall, ...] = ()
    """``minResources`` the cluster's free resources cannot hold yet (the group waits for
    room, not for pods)."""


class Phase(StrEnum):
    PENDING = "Pending"
    SCHEDULED = "Scheduled"
    UNSCHEDULABLE = "Unschedulable"


@dataclass(frozen=True, slots=True, kw_only=True)
class Binding:
    pod: str
    node: str
    gpus: tuple[int, ...]
    link_tier: str | None = None
    """Worst link among the pod's GPUs (``NVLINK`` … ``SYS``, ``UNKNOWN``); None for < 2 GPUs."""
    best_tier: str | None = None
    """The best worst-link any set of that size on this node could have had."""
    notes: tuple[str, ...] = ()
    """Telemetry facts the decision relied on (unknown or stale GPUs it used)."""
    devices: tuple[ClaimAllocation, ...] = ()
    """For a pod with ResourceClaims (or GPUs served by a DeviceClass) bound to a DRA node:
    per claim, the devices chosen for each of its requests (what the operator writes into
    ``status.allocation``), in the pod's claim order. Empty for every other pod."""

    def to_dict(self) -> dict[str, Any]:
        found: dict[str, Any] = {
            "pod": self.pod,
            "node": self.node,
            "gpus": list(self.gpus),
            "linkTier": self.link_tier,
            "bestLinkTier": self.best_tier,
            "notes": list(self.notes),
        }
        if self.devices:
            found["devices"] = [c.to_dict() for c in self.devices]
        return found


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupDecision:
    name: str
    kind: str
    phase: Phase
    reason: Reason
    message: str
    placement: dict[str, str] = field(default_factory=dict)
    attempts: tuple[str, ...] = ()
    """One line per domain tried, saying why it did not fit: ``tried``, rendered (and a last
    line counting the domains not shown, if any)."""
    tried: tuple[Attempt, ...] = ()
    """The domains tried, as data (up to ``maxDomainsReported``)."""
    waiting: Waiting | None = None
    """For ``WaitingForPods``: what the group (or the ancestor it waits with) lacks."""
    inherited_from: str | None = None
    """The ancestor group whose decision this is: the group was not placed because that
    ancestor was not (its message says so)."""
    explored: int = 0
    """How many (group, domain) pairs the search looked at, backtracking included: each
    trial, and each domain refused before a trial because the pods cannot fit there."""
    left_out: dict[str, str] = field(default_factory=dict)
    """Pods of a placed group left pending (a basic group's extras, a gang's pods beyond
    minCount) → why each did not fit beside the others."""
    segments: tuple[SegmentPlaced, ...] = ()
    """A segmented gang placed: its segments, each inside one domain of its topology key
    (``placement`` is then the domain that holds them all)."""

    def to_dict(self) -> dict[str, Any]:
        extra = {"segments": [s.to_dict() for s in self.segments]} if self.segments else {}
        return {
            "name": self.name,
            "kind": self.kind,
            "phase": self.phase.value,
            "placement": dict(self.placement),
            "reason": self.reason.value,
            "message": self.message,
            "attempts": list(self.attempts),
            "explored": self.explored,
            **extra,
        }


@dataclass(frozen=True, slots=True)
class PodFailure:
    pod: str
    reason: Reason
    message: str
    group_missing: bool = False
    """The pod names a group the engine was not given: it waits for the group (created by
    its user, or by a Workload being materialized) rather than for room."""

    def to_dict(self) -> dict[str, Any]:
        return {"pod": self.pod, "reason": self.reason.value, "message": self.message}


@dataclass(slots=True)
class ScheduleResult:
    bindings: list[Binding] = field(default_factory=list)
    groups: list[GroupDecision] = field(default_factory=list)
    unschedulable: list[PodFailure] = field(default_factory=list)
    order: list[str] = field(default_factory=list)
    """The queue: every unit's key (a root group's, or a group-less pod's) in the order the
    engine took them (priority, then age, then name)."""

    def to_dict(self) -> dict[str, Any]:
        """The engine's part of the ``simulate -o json`` document."""
        return {
            "bindings": [b.to_dict() for b in self.bindings],
            "podGroups": [g.to_dict() for g in self.groups],
            "unschedulable": [u.to_dict() for u in self.unschedulable],
        }

"""What would make a group or pod fit: hints for ``gpusched explain``, from a snapshot.

The counts are the planner's (`copies`: how many copies of a pod each node takes now), plus
the same count on an empty node (allocatable resources and usable GPUs only), so a hint never
asks to free capacity that a domain does not have even when empty. For a gang:

1. If no node passes the pods' static checks, say so: no amount of freeing helps.
2. Domains: the group's topology domains (only those of its bound pods, which pin it).
   A domain "could hold" the gang if its empty count reaches the pods needed.
3. Among those, the one that needs the fewest GPUs freed (whole-GPU pods: per node, the GPUs
   missing to the next multiple of the pod's size, then the pod's size per further pod),
   named with the nodes to free them on. If none could hold it, the largest one, and why.
4. Changes to the group: a lower ``minCount`` that fits now, a wider topology level (or
   none) that fits now; and capacity kept from the pods (excluded GPUs, cordoned, NotReady
   nodes) in the domains closest to fitting.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpusched.api.config import GPU_RESOURCE, NumaPolicy
from gpusched.api.grouprefs import how_to_join
from gpusched.engine.blockers import node_reason
from gpusched.engine.domains import Domain, copies, root_domain, subdomains
from gpusched.engine.fit import static_mask
from gpusched.engine.groups import GroupSpec
from gpusched.engine.nodes import BoolArray, IntArray
from gpusched.engine.policy import Policy, one_numa_node
from gpusched.engine.request import WHOLE_GPU_MILLI, PodRequest
from gpusched.engine.result import Attempt, Counted, Waiting
from gpusched.engine.snapshot import Snapshot

NO_NODE_PASSES = (
    "no node passes the {what}' node constraints (readiness, cordon, taints, nodeSelector, "
    "affinity): change the constraints or the nodes' labels"
)
SHOWN = 3
"""Nodes or facts named per hint before "…"."""


def plural(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _listed(items: Sequence[str]) -> str:
    more = f", … {len(items) - SHOWN} more" if len(items) > SHOWN else ""
    return ", ".join(items[:SHOWN]) + more


# ----- groups waiting, composites ------------------------------------------------------------


def waiting_hints(
    spec: GroupSpec, waiting: Waiting | None, invalid: Sequence[str] = ()
) -> list[str]:
    """For ``WaitingForPods``: ``waiting`` is what the decision says the group (or the
    ancestor it waits with) lacks; ``invalid`` are messages of the group's pods the engine
    refused (they do not count as present)."""
    hints = []
    if invalid:
        hints.append(f"fix {plural(len(invalid), 'invalid pod')}: {invalid[0]}")
    if waiting is not None and waiting.minimum is not None:
        present, minimum = waiting.present, waiting.minimum
        if waiting.counted is Counted.CHILD_GROUPS:
            hints.append(f"{minimum - present} more child group(s) must exist with all their pods")
            if present:
                hints.append(f"or lower minGroupCount to {present}")
            return hints
        name = spec.key.split("/", 1)[1]
        if len(invalid) >= minimum - present:
            return hints
        hints.append(
            f"create {minimum - present} more valid pod(s) {how_to_join(name)} "
            f"(minCount {minimum}, {present} valid)"
        )
        if present:
            hints.append(f"or lower minCount to {present}")
        return hints
    return [*hints, "create the group's pods"]


def composite_hints(spec: GroupSpec, tried: Sequence[Attempt]) -> list[str]:
    """From the domains a failed CompositePodGroup tried: the most child groups that fit in
    one."""
    notes = [a.note for a in tried if a.note]
    if notes:
        # A reason that is not a count (a child's topology key no node carries): the fix is
        # that, not the children's own decisions, which are this group's.
        return [f"fix: {notes[0]}"]
    best = max((a.fit for a in tried if a.counted is Counted.CHILD_GROUPS), default=0)
    hints = []
    if 0 < best < spec.minimum:
        fit = "1 child group fits" if best == 1 else f"{best} child groups fit"
        hints.append(f"lower minGroupCount to {best} ({fit} in one domain)")
    hints.append("see the child groups for what each one lacks")
    return hints


# ----- a gang --------------------------------------------------------------------------------


PerShape = Sequence[tuple[int, IntArray]]
"""Per pod shape of a group: (pods of that shape, per node how many copies fit)."""


@dataclass(frozen=True, slots=True)
class _Room:
    domain: Domain
    fit: int
    """How many of the group's pending pods fit now (the planner's optimistic estimate)."""
    empty: int
    """How many would fit if nothing else ran in the domain."""


def gang_hints(
    snapshot: Snapshot,
    spec: GroupSpec,
    pods: Sequence[PodRequest],
    policy: Policy,
    bound: Sequence[tuple[PodRequest, int]] = (),
) -> list[str]:
    """Hints for a PodGroup whose pending ``pods`` found no domain under ``policy``; ``bound``
    are its pods already bound, with their nodes: they count towards ``minCount``, pin the
    domain, and are never capacity to free."""
    numa = policy.numa
    bound_nodes = [node for _, node in bound]
    needed = max(0, spec.minimum - len(bound_nodes)) if spec.gang else 1
    biggest = max(pods, key=lambda p: (p.gpu_demand_milli, p.key))
    if not static_mask(snapshot, biggest).any():
        return [NO_NODE_PASSES.format(what="pods")]
    impossible = _numa_hint(snapshot, biggest, numa)
    if impossible is not None:
        return [impossible]
    shapes: dict[tuple[object, ...], list[PodRequest]] = defaultdict(list)
    for pod in pods:
        shapes[pod.shape_key].append(pod)
    kept = _Kept.of(snapshot, bound)
    now = [(len(m), copies_now(snapshot, m[0], numa)) for m in shapes.values()]
    empty = [(len(m), copies_empty(snapshot, m[0], numa, kept)) for m in shapes.values()]
    rooms = _rooms(snapshot, spec, now, empty, bound_nodes)
    if not rooms:
        return [f"no node has label {spec.topology_key}: label the nodes or drop the constraint"]
    hints = _capacity_hints(
        snapshot, spec, rooms, needed, biggest, numa, empty if len(shapes) == 1 else None
    )
    most = max(room.fit for room in rooms)
    if spec.gang and 1 <= len(bound_nodes) + most < spec.minimum:
        where = next(r.domain.name for r in rooms if r.fit == most)
        hints.append(f"lower minCount to {len(bound_nodes) + most} (fits in {where} now)")
    hints += _topology_hints(snapshot, spec, now, needed)
    hints += _blocked_hints(snapshot, rooms, biggest)
    return hints


def _capacity_hints(
    snapshot: Snapshot,
    spec: GroupSpec,
    rooms: Sequence[_Room],
    needed: int,
    pod: PodRequest,
    numa: NumaPolicy,
    empty: PerShape | None,
) -> list[str]:
    """What to free, and where; ``empty`` is given when the group has one pod shape."""
    holding = [r for r in rooms if r.empty >= needed]
    if not holding:
        largest = max(rooms, key=lambda r: (r.empty, _negated(r.domain.name)))
        what = f"{spec.topology_key} domain" if spec.topology_key else "set of nodes"
        return [
            f"no {what} can hold {needed} of these pods even when empty: the largest, "
            f"{largest.domain.name}, holds {largest.empty}"
        ]
    fitting = [r for r in holding if r.fit >= needed]
    if fitting:
        return [
            f"{fitting[0].domain.name} has room for {fitting[0].fit} pods by count, but they "
            "did not fit pod by pod (GPU sets, NUMA or mixed pod shapes): see the domain "
            "lines above"
        ]
    single = numa is NumaPolicy.SINGLE_NUMA_NODE
    if empty is not None and pod.gpus and not single:
        capacity = empty[0][1]
        costs = [(_freeing(snapshot, r, needed - r.fit, pod, capacity, numa), r) for r in holding]
        priced = [(c, r) for c, r in costs if c is not None]
        if priced:
            (total, on), room = min(priced, key=lambda p: (p[0][0], -p[1].fit, p[1].domain.name))
            missing = needed - room.fit
            return [
                f"free {plural(total, 'GPU')} in {room.domain.name} ({_listed(on)}): room for "
                f"{missing} more {pod.gpus}-GPU {'pod' if missing == 1 else 'pods'}; "
                f"{room.fit} fit there now"
            ]
    room = max(holding, key=lambda r: (r.fit, _negated(r.domain.name)))
    return [_free_room_hint(snapshot, room, needed - room.fit, pod, numa)]


def _freeing(
    snapshot: Snapshot,
    room: _Room,
    missing: int,
    pod: PodRequest,
    empty: IntArray,
    numa: NumaPolicy,
) -> tuple[int, list[str]] | None:
    """The fewest GPUs to free in ``room`` for ``missing`` more whole-GPU pods, and where:
    per node, the first extra pod needs the GPUs missing to the next multiple of its size,
    each further one its size, up to what the node holds when empty. Nodes whose other
    resources (cpu, memory) already limit the pod are left out."""
    size = pod.gpus
    now = copies_now(snapshot, pod, numa)
    offers: list[tuple[int, str, int]] = []
    for node in room.domain.nodes().tolist():
        free = int(snapshot.free_whole[node])
        extra = int(empty[node]) - int(now[node])
        if extra <= 0 or int(now[node]) < free // size:
            continue
        name = snapshot.nodes[node].name
        offers.append((size - free % size, name, 0))
        offers += [(size, name, i) for i in range(1, extra)]
    if len(offers) < missing:
        return None
    chosen = sorted(offers)[:missing]
    per_node: dict[str, int] = defaultdict(int)
    for cost, name, _ in chosen:
        per_node[name] += cost
    where = [f"{gpus} on {name}" for name, gpus in sorted(per_node.items())]
    return sum(cost for cost, _, _ in chosen), where


def _free_room_hint(
    snapshot: Snapshot, room: _Room, missing: int, pod: PodRequest, numa: NumaPolicy
) -> str:
    """Where room is short, node by node, in the engine's words ("insufficient cpu (…)")."""
    now = copies_now(snapshot, pod, numa)
    short = [
        f"{snapshot.nodes[n].name}: {node_reason(snapshot, pod, n, numa)}"
        for n in room.domain.nodes().tolist()
        if now[n] == 0 and node_reason(snapshot, pod, n, numa) is not None
    ]
    more = plural(missing, "more pod")
    where = f"; {_listed(short)}" if short else ""
    return f"free room for {more} in {room.domain.name} ({room.fit} fit there now){where}"


def _negated(name: str) -> tuple[int, ...]:
    """Sorts names in reverse, so that `max` breaks ties on the first name."""
    return tuple(-ord(c) for c in name)


def _fit(per_shape: PerShape, mask: BoolArray) -> int:
    return sum(min(n, int(c[mask].sum())) for n, c in per_shape)


def _rooms(
    snapshot: Snapshot,
    spec: GroupSpec,
    now: PerShape,
    empty: PerShape,
    bound_nodes: Sequence[int],
) -> list[_Room]:
    root = root_domain(snapshot)
    domains = [root] if spec.topology_key is None else subdomains(snapshot, root, spec.topology_key)
    if bound_nodes:
        domains = [d for d in domains if any(d.mask[n] for n in bound_nodes)]
    return [_Room(d, _fit(now, d.mask), _fit(empty, d.mask)) for d in domains]


def _broken(snapshot: Snapshot) -> BoolArray:
    return np.fromiter(
        (n.topology_error is not None for n in snapshot.nodes), np.bool_, len(snapshot.nodes)
    )


def copies_now(snapshot: Snapshot, pod: PodRequest, numa: NumaPolicy) -> IntArray:
    """`copies`, with nodes whose topology annotation is broken taking no multi-GPU pod (the
    filter the planner's estimate leaves to the trial)."""
    count = copies(snapshot, pod, numa)
    if pod.gpus > 1:
        count = np.where(_broken(snapshot), 0, count)
    return count


@dataclass(frozen=True, slots=True)
class _Kept:
    """What a group's own bound pods hold per node: never capacity to free for it."""

    gpus: IntArray
    resources: dict[str, IntArray]

    @staticmethod
    def of(snapshot: Snapshot, bound: Sequence[tuple[PodRequest, int]]) -> _Kept:
        count = len(snapshot.nodes)
        gpus = np.zeros(count, dtype=np.int64)
        resources: dict[str, IntArray] = defaultdict(lambda: np.zeros(count, dtype=np.int64))
        for pod, node in bound:
            gpus[node] += pod.gpus or (1 if pod.gpu_milli else 0)
            for name, amount in pod.resources.items():
                resources[name][node] += amount
        return _Kept(gpus, dict(resources))


def copies_empty(
    snapshot: Snapshot, pod: PodRequest, numa: NumaPolicy, kept: _Kept | None = None
) -> IntArray:
    """Per node, copies of ``pod`` that would fit with nothing else on it (but what ``kept``
    says stays): allocatable resources and usable GPUs, per NUMA node under
    ``single-numa-node``."""
    count = np.where(static_mask(snapshot, pod), np.iinfo(np.int64).max // 4, 0)
    for name, amount in pod.resources.items():
        column = snapshot.columns.get(name)
        if column is None:
            return np.zeros(len(snapshot.nodes), dtype=np.int64)
        left = snapshot.allocatable[:, column]
        if kept is not None and name in kept.resources:
            left = left - kept.resources[name]
        count = np.minimum(count, np.maximum(left, 0) // amount)
    if not pod.wants_gpu:
        return count
    per_gpu = 1 if pod.gpus else WHOLE_GPU_MILLI // pod.gpu_milli
    size = max(pod.gpus, 1)
    held = kept.gpus if kept is not None else np.zeros(len(snapshot.nodes), dtype=np.int64)
    fitting = np.array(
        [_gpu_sets(snapshot, n, size, numa, int(held[n])) for n in range(len(snapshot.nodes))],
        dtype=np.int64,
    )
    if pod.gpus > 1:
        fitting = np.where(_broken(snapshot), 0, fitting)
    result: IntArray = np.minimum(count, fitting * per_gpu)
    return result


def _gpu_sets(snapshot: Snapshot, node: int, size: int, numa: NumaPolicy, held: int = 0) -> int:
    """Sets of ``size`` usable GPUs the node has when empty but for ``held`` GPUs (under
    ``single-numa-node`` taken from its largest NUMA nodes first: a lower bound)."""
    gpus = snapshot.node_gpus(node)
    usable = snapshot.gpu_usable[gpus.start : gpus.stop]
    if not one_numa_node(numa, size):
        return max(int(usable.sum()) - held, 0) // size
    per_numa: dict[int, int] = defaultdict(int)
    for gpu, numa_node in enumerate(snapshot.nodes[node].shape.numa):
        if numa_node is not None and usable[gpu]:
            per_numa[numa_node] += 1
    sizes = sorted(per_numa.values(), reverse=True)
    for i in range(len(sizes)):
        taken = min(sizes[i], held)
        sizes[i] -= taken
        held -= taken
    return sum(n // size for n in sizes)


def _numa_hint(snapshot: Snapshot, pod: PodRequest, numa: NumaPolicy) -> str | None:
    """Under ``single-numa-node``, a pod larger than every NUMA node can never fit."""
    if not one_numa_node(numa, pod.gpus):
        return None
    passing = np.flatnonzero(static_mask(snapshot, pod)).tolist()
    largest = max(
        (max(_numa_sizes(snapshot, n), default=0) for n in passing),
        default=0,
    )
    if largest >= pod.gpus:
        return None
    return (
        f"numaPolicy single-numa-node puts a pod's {pod.gpus} GPUs in one NUMA node, and no "
        f"node has more than {largest} GPUs in one: ask for at most {largest} GPUs per pod, "
        "or use numaPolicy best-effort"
    )


def _numa_sizes(snapshot: Snapshot, node: int) -> list[int]:
    sizes: dict[int, int] = defaultdict(int)
    for numa in snapshot.nodes[node].shape.numa:
        if numa is not None:
            sizes[numa] += 1
    return list(sizes.values())


def _topology_hints(snapshot: Snapshot, spec: GroupSpec, now: PerShape, needed: int) -> list[str]:
    """Would a wider domain take the gang now: the next level out, or no constraint?"""
    key = spec.topology_key
    if key is None:
        return []
    levels = snapshot.levels
    outer = list(levels[: levels.index(key)]) if key in levels else []
    root = root_domain(snapshot)
    for wider in reversed(outer):
        fitting = [d for d in subdomains(snapshot, root, wider) if _fit(now, d.mask) >= needed]
        if fitting:
            return [f"use topology key {wider}: the pods fit in {fitting[0].name} now"]
    anywhere = _fit(now, root.mask)
    if anywhere >= needed:
        return [f"drop the topology constraint {key}: {anywhere} pods would fit across domains"]
    return []


def _blocked_hints(snapshot: Snapshot, rooms: Sequence[_Room], pod: PodRequest) -> list[str]:
    """Capacity that telemetry or the nodes' state keeps from the pods, in the (up to two)
    domains closest to fitting that have any."""
    hints = []
    for room in sorted(rooms, key=lambda r: (-r.fit, r.domain.name)):
        facts = _blocked(snapshot, room.domain, pod)
        if facts:
            hints.append(f"in {room.domain.name}: {_listed(facts)}")
        if len(hints) == 2:
            break
    return hints


def _blocked(snapshot: Snapshot, domain: Domain, pod: PodRequest) -> list[str]:
    facts = []
    for node in domain.nodes().tolist():
        info = snapshot.nodes[node]
        if not info.ready:
            facts.append(f"{info.name} is NotReady")
        elif info.unschedulable:
            facts.append(f"{info.name} is cordoned")
        elif pod.gpus > 1 and info.topology_error is not None:
            facts.append(f"{info.name}'s GPU topology annotation is invalid (single-GPU pods only)")
        elif pod.wants_gpu:
            base = int(snapshot.gpu_offset[node])
            for gid in snapshot.node_gpus(node):
                if not snapshot.gpu_usable[gid]:
                    note = snapshot.gpu_notes.get(gid, "a GPU of its node failed a check")
                    facts.append(f"GPU {gid - base} of {info.name} is excluded ({note})")
    return facts


# ----- a pod without a group -----------------------------------------------------------------


def pod_hints(snapshot: Snapshot, pod: PodRequest, policy: Policy) -> list[str]:
    """Hints for a group-less pod that fits no node under ``policy``."""
    passing = static_mask(snapshot, pod)
    if not passing.any():
        return [NO_NODE_PASSES.format(what="pod")]
    impossible = _numa_hint(snapshot, pod, policy.numa)
    if impossible is not None:
        return [impossible]
    room = passing.copy()
    for name, amount in pod.resources.items():
        column = snapshot.columns.get(name)
        if column is None:
            return [f"no node has {name}"]
        room &= snapshot.allocatable[:, column] - snapshot.used[:, column] >= amount
    if not room.any():
        return ["free cpu, memory or pod slots on a node that passes the pod's constraints"]
    if pod.gpus:
        empty = copies_empty(snapshot, pod, policy.numa)
        have = np.where(room & (empty > 0), snapshot.free_whole, -1)
        best = int(np.argmax(have))
        if have[best] < 0:
            return ["no node with room for the pod's cpu and memory has that many usable GPUs"]
        name = snapshot.nodes[best].name
        missing = pod.gpus - int(have[best])
        return [f"free {missing} more {GPU_RESOURCE} on {name} ({int(have[best])} free now)"]
    if pod.gpu_milli:
        share = np.where(room, snapshot.max_share, -1)
        best = int(np.argmax(share))
        return [
            f"free {pod.gpu_milli - int(share[best])} milli-GPU on one GPU of "
            f"{snapshot.nodes[best].name} (most free there: {int(share[best])})"
        ]
    return []

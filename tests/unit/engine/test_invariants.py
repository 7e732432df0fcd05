"""Properties of `gpusched.engine.schedule.schedule` that hold for every input.

Random small clusters (2-8 nodes of the builder's kinds, random zone/rack labels with rack names
reused across zones, some broken topology annotations, some cordoned nodes, random telemetry),
random pods already bound (whole GPUs and shares, with or without ``gpusched.io/gpus``), random
pending pods, and random forests of PodGroups and CompositePodGroups. For each, the result must:

(a) never give a GPU more than 1000 milli, bound pods included (whole GPUs are never shared);
(b) place gangs all or nothing: a PodGroup's minCount, a CompositePodGroup's minGroupCount;
(c) satisfy every filter: resources, GPU count, usable GPUs, static constraints, NUMA policy,
    and topology (a group's whole subtree, bound pods included, in one domain of its key);
(d) be the same for the same input, whatever the order of the pods and groups;
(e) leave the caller's snapshot as it was;
(f) and `Snapshot.rollback` must undo any sequence of assume/forget exactly.

The checks below are written from the contracts in the engine's docstrings (`schedule`,
`Snapshot`), not from the engine's code, so that a wrong engine cannot make them agree with it.
"""

from __future__ import annotations

import copy
import dataclasses
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from random import Random
from typing import Any

import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gpusched.api.config import NumaPolicy, SchedulerConfig
from gpusched.api.crds import Reason
from gpusched.api.k8s import Node
from gpusched.engine.build import build_snapshot
from gpusched.engine.groups import GroupKind, GroupSpec
from gpusched.engine.health import GpuSample
from gpusched.engine.policy import Policy
from gpusched.engine.request import WHOLE_GPU_MILLI, PodRequest
from gpusched.engine.result import Phase, ScheduleResult
from gpusched.engine.schedule import schedule
from gpusched.engine.snapshot import BoundPod, Snapshot
from testing.engine import KINDS, PRODUCT, RACK, ZONE, composite, gang, node, node_names, pod

SETTINGS = settings(
    max_examples=max(150, settings().max_examples),  # a hypothesis profile can ask for more
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

NODE_KINDS = ("a100x8", "hgxa100x8", "v100x8", "pcie4090x8", "h100x4", "gpu8", "cpu")
ZONES = ("zone-a", "zone-b", "zone-c")
RACKS = ("rack-1", "rack-2")
"""Rack names repeat across zones on purpose: a domain is the full path of labels
(zone, rack), so rack-1 of zone-a is not rack-1 of zone-b."""
TOPOLOGY_KEYS = (None, ZONE, RACK)
GIB = 2**30
MUTABLE_ARRAYS = (
    "used",
    "gpu_free",
    "gpu_pods",
    "free_mask",
    "free_whole",
    "max_numa_free",
    "max_share",
    "gpu_allocated",
)


# ----- scenarios ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class NodeSpec:
    kind: str
    zone: str | None
    rack: str | None
    broken_annotation: bool = False
    cordoned: bool = False


@dataclasses.dataclass
class Scenario:
    """Everything one example feeds the engine. Nodes are kept as specs so that hypothesis
    prints a readable falsifying example."""

    nodes: list[NodeSpec]
    config: dict[str, Any]
    telemetry: dict[tuple[str, int], str] | None
    """GPU → health state; ``None``: no telemetry source at all (simulate without --metrics)."""
    bound: list[tuple[PodRequest, str, tuple[int, ...] | None]]
    pending: list[PodRequest]
    groups: list[GroupSpec]

    @property
    def names(self) -> list[str]:
        return node_names(len(self.nodes))

    @property
    def policy(self) -> Policy:
        return Policy.of(SchedulerConfig.model_validate(self.config))

    def build(self) -> Snapshot:
        built = [_node(name, spec) for name, spec in zip(self.names, self.nodes, strict=True)]
        samples = None
        if self.telemetry is not None:
            samples = {key: _sample(*key, state, self) for key, state in self.telemetry.items()}
        bound = [BoundPod(request, where, gpus) for request, where, gpus in self.bound]
        config = SchedulerConfig.model_validate(self.config)
        return build_snapshot(built, bound, samples, config)


def _node(name: str, spec: NodeSpec) -> Node:
    labels = {}
    if spec.zone is not None:
        labels[ZONE] = spec.zone
    if spec.rack is not None:
        labels[RACK] = spec.rack
    annotations = {"gpusched.io/gpu-topology": "{not json"} if spec.broken_annotation else None
    return node(
        name, spec.kind, labels=labels, annotations=annotations, unschedulable=spec.cordoned
    )


def _sample(name: str, gpu: int, state: str, scenario: Scenario) -> GpuSample:
    spec = scenario.nodes[scenario.names.index(name)]
    total = float(KINDS[spec.kind][3] or 16384)
    healthy = GpuSample(
        temperature_c=55.0,
        fb_free_mib=0.9 * total,
        fb_used_mib=0.1 * total,
        utilization=20.0,
        xid_errors=0.0,
        age_seconds=5.0,
    )
    changes: dict[str, dict[str, float]] = {
        "healthy": {},
        "hot": {"temperature_c": 91.0},
        "low-memory": {"fb_free_mib": 0.05 * total, "fb_used_mib": 0.95 * total},
        "xid": {"xid_errors": 79.0},
        "stale": {"age_seconds": 3600.0},
    }
    return dataclasses.replace(healthy, **changes[state])


node_specs = st.builds(
    NodeSpec,
    kind=st.sampled_from(NODE_KINDS),
    zone=st.one_of(st.none(), st.sampled_from(ZONES), st.sampled_from(ZONES)),
    rack=st.one_of(st.none(), st.sampled_from(RACKS), st.sampled_from(RACKS)),
    broken_annotation=st.sampled_from([False] * 9 + [True]),
    cordoned=st.sampled_from([False] * 9 + [True]),
)

configs = st.fixed_dictionaries(
    {
        "numaPolicy": st.sampled_from([p.value for p in NumaPolicy]),
        "backtrackingBudget": st.sampled_from([0, 2, 64]),
        "telemetry": st.fixed_dictionaries(
            {
                "stale": st.sampled_from(["usable", "unusable"]),
                "excludeWholeNode": st.sampled_from([False, False, True]),
            }
        ),
        "scoring": st.fixed_dictionaries(
            {
                "fragmentationWeight": st.sampled_from([0.0, 0.0, 1.0]),
                "leastAllocatedWeight": st.sampled_from([0.0, 0.0, 1.0]),
                "topologyWeight": st.sampled_from([1.0, 1.0, 0.0]),
            }
        ),
    }
)

TELEMETRY_STATES = ("healthy",) * 6 + ("hot", "low-memory", "xid", "stale", "missing")


@st.composite
def group_forests(draw: st.DrawFn) -> list[GroupSpec]:
    """0-3 CompositePodGroups (parents always earlier, so no cycles) and 0-4 PodGroups under
    them or at the root; a composite's minGroupCount is mostly within its child count; now and
    then a PodGroup whose parent does not exist (an invalid group)."""
    composites: list[GroupSpec] = []
    for i in range(draw(st.sampled_from([0, 0, 1, 1, 2, 3]))):
        parent = draw(st.sampled_from([None, *(c.key.split("/")[1] for c in composites)]))
        topology = draw(st.sampled_from(TOPOLOGY_KEYS))
        composites.append(composite(f"c{i}", 1, topology=topology, parent=parent))
    pod_groups = []
    names = [c.key.split("/")[1] for c in composites]
    for i in range(draw(st.integers(0, 4))):
        parent = draw(st.sampled_from([None, *names, *names, *names, "ghost"] if names else [None]))
        basic = draw(st.sampled_from([False, False, False, True]))
        topology = draw(st.sampled_from(TOPOLOGY_KEYS))
        minimum = draw(st.integers(1, 4))
        pod_groups.append(gang(f"g{i}", minimum, topology=topology, parent=parent, basic=basic))
    everything = composites + pod_groups
    sized = []
    for group in composites:
        children = sum(1 for g in everything if g.parent == group.key)
        minimum = draw(st.sampled_from([*range(1, children + 1)] * 3 + [children + 1]))
        sized.append(dataclasses.replace(group, minimum=minimum))
    return sized + pod_groups


def _pod_groups(groups: Sequence[GroupSpec]) -> list[str]:
    return [g.key.split("/", 1)[1] for g in groups if g.kind is GroupKind.POD_GROUP]


@st.composite
def pod_shapes(draw: st.DrawFn) -> dict[str, Any]:
    gpu = draw(st.sampled_from(["none", "none", "1", "2", "4", "8", "any", "share"]))
    gpus = draw(st.integers(0, 8)) if gpu == "any" else int(gpu) if gpu.isdigit() else 0
    product = KINDS[draw(st.sampled_from(NODE_KINDS[:5]))][2]
    return {
        "gpus": gpus,
        "milli": draw(st.sampled_from([100, 250, 500, 999])) if gpu == "share" else 0,
        "cpu": draw(st.integers(1, 64)) * 500,
        "memory": draw(st.integers(1, 128)) * GIB,
        "selector": draw(st.sampled_from([None, None, None, {PRODUCT: product}])),
        "app": draw(st.sampled_from([None, "web", "train"])),
    }


@st.composite
def pending_pods(draw: st.DrawFn, groups: Sequence[GroupSpec]) -> list[PodRequest]:
    """Per PodGroup, about minCount pods of one shape (now and then one of another shape);
    then a few pods without a group, and now and then one naming a PodGroup that does not
    exist."""
    pods: list[PodRequest] = []
    owners: list[tuple[str | None, int]] = [
        (g.key.split("/", 1)[1], max(g.minimum, 1)) for g in groups if g.kind is GroupKind.POD_GROUP
    ]
    owners += [(None, 1)] * draw(st.integers(0, 5))
    owners += [("missing", 1)] * draw(st.sampled_from([0, 0, 0, 1]))
    for owner, typical in owners:
        shape = draw(pod_shapes())
        sizes = [typical] * 3 + [typical + 1, typical - 1]
        count = draw(st.sampled_from(sizes)) if owner else 1
        priority, created = draw(st.integers(0, 2)), float(draw(st.integers(0, 3)))
        for _ in range(count):
            odd = draw(st.sampled_from([None] * 7 + [pod_shapes()]))
            own = draw(odd) if odd is not None else shape
            name = f"p{len(pods)}"
            pods.append(pod(name, group=owner, priority=priority, created=created, **own))
    return pods


@st.composite
def bound_pods(
    draw: st.DrawFn, scenario_nodes: Sequence[tuple[str, NodeSpec]], groups: Sequence[GroupSpec]
) -> list[tuple[PodRequest, str, tuple[int, ...] | None]]:
    """Pods already on nodes, never more than the node has: the generator tracks cpu, memory and
    milli-GPU per GPU itself. Pods without ``gpusched.io/gpus`` are drawn after those with it
    on each node, and are given the highest free GPUs, as the snapshot documents it assumes.
    A group's bound pods all sit on one "home" node (labelled with zone and rack), so that
    they form a valid start for the group's topology constraint."""
    labelled = [name for name, spec in scenario_nodes if spec.zone and spec.rack]
    homes: dict[str, str | None] = {}
    for group in groups:
        root = _root_of(group, groups)
        if root not in homes:
            homes[root] = draw(st.sampled_from([None, *labelled])) if labelled else None
    result = []
    for name, spec in scenario_nodes:
        _, count, _, _, cpu, memory = KINDS[spec.kind]
        cpu_free = int(cpu) * 1000
        mem_free = int(memory.removesuffix("Gi")) * GIB
        free = [WHOLE_GPU_MILLI] * count
        here = [g for g in _pod_groups(groups) if homes.get(_root_of_name(g, groups)) == name]
        explicit_first = sorted(draw(st.lists(st.booleans(), max_size=3)), reverse=True)
        for i, explicit in enumerate(explicit_first):
            request, gpus = _draw_bound(draw, f"{name}-b{i}", free, explicit, here)
            cpu_ask, mem_ask = request.resources["cpu"], request.resources["memory"]
            if cpu_ask > cpu_free or mem_ask > mem_free:
                continue
            cpu_free -= cpu_ask
            mem_free -= mem_ask
            result.append((request, name, gpus))
    return result


def _draw_bound(
    draw: st.DrawFn, name: str, free: list[int], explicit: bool, groups_here: Sequence[str]
) -> tuple[PodRequest, tuple[int, ...] | None]:
    kind = draw(st.sampled_from(["none", "whole", "whole", "share"]))
    group = draw(st.sampled_from([None, *groups_here])) if groups_here else None
    cpu, memory = draw(st.integers(1, 16)) * 1000, draw(st.integers(1, 64)) * GIB
    app = draw(st.sampled_from([None, "web", "train"]))
    if kind == "whole":
        whole = [g for g, f in enumerate(free) if f == WHOLE_GPU_MILLI]
        if whole:
            count = draw(st.integers(1, min(4, len(whole))))
            chosen = draw(st.permutations(whole))[:count] if explicit else whole[-count:]
            for g in chosen:
                free[g] = 0
            request = pod(name, gpus=count, cpu=cpu, memory=memory, group=group, app=app)
            return request, (tuple(chosen) if explicit else None)
    if kind == "share":
        milli = draw(st.sampled_from([100, 250, 500]))
        fits = [g for g, f in enumerate(free) if f >= milli]
        if fits:
            gpu = draw(st.sampled_from(fits)) if explicit else fits[-1]
            free[gpu] -= milli
            request = pod(name, milli=milli, cpu=cpu, memory=memory, group=group, app=app)
            return request, ((gpu,) if explicit else None)
    request = pod(name, cpu=cpu, memory=memory, group=group, app=app)
    return request, (() if explicit else None)


def _root_of(group: GroupSpec, groups: Sequence[GroupSpec]) -> str:
    by_key = {g.key: g for g in groups}
    seen = {group.key}
    while group.parent is not None and group.parent in by_key and group.parent not in seen:
        group = by_key[group.parent]
        seen.add(group.key)
    return group.key


def _root_of_name(name: str, groups: Sequence[GroupSpec]) -> str:
    return _root_of(next(g for g in groups if g.key == f"default/{name}"), groups)


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    nodes = draw(st.lists(node_specs, min_size=2, max_size=8))
    names = node_names(len(nodes))
    samples: dict[tuple[str, int], str] = {}
    for name, spec in zip(names, nodes, strict=True):
        if draw(st.booleans()):
            continue  # no sample of any GPU of this node
        for gpu in range(KINDS[spec.kind][1]):
            state = draw(st.sampled_from(TELEMETRY_STATES))
            if state != "missing":
                samples[(name, gpu)] = state
    telemetry = None if draw(st.booleans()) else samples  # None: no telemetry source
    groups = draw(group_forests())
    bound = draw(bound_pods(list(zip(names, nodes, strict=True)), groups))
    pending = draw(pending_pods(groups))
    return Scenario(nodes, draw(configs), telemetry, bound, pending, groups)


# ----- facts the checks share ------------------------------------------------------------------


@dataclasses.dataclass
class Outcome:
    snapshot: Snapshot
    pending: list[PodRequest]
    groups: list[GroupSpec]
    result: ScheduleResult
    placed: dict[str, tuple[int, tuple[int, ...]]]
    """Pod key → (node index, GPUs) of the new bindings."""
    policy: Policy

    @property
    def by_key(self) -> dict[str, PodRequest]:
        return {p.key: p for p in self.pending}

    def valid_groups(self) -> list[GroupSpec]:
        by_key = {g.key: g for g in self.groups}
        valid = []
        for group in self.groups:
            current, seen, ok = group, {group.key}, True
            while current.parent is not None:
                parent = by_key.get(current.parent)
                if parent is None or parent.kind is not GroupKind.COMPOSITE or parent.key in seen:
                    ok = False
                    break
                seen.add(parent.key)
                current = parent
            if ok:
                valid.append(group)
        return valid

    def subtree(self, group: GroupSpec) -> list[GroupSpec]:
        found = [group]
        for child in self.groups:
            if child.parent == group.key:
                found.extend(self.subtree(child))
        return found

    def children(self, group: GroupSpec) -> list[GroupSpec]:
        return [g for g in self.groups if g.parent == group.key]

    def new_in(self, groups: Iterable[GroupSpec]) -> list[str]:
        keys = {g.key for g in groups}
        return [k for k in self.placed if _group_key(self.by_key[k]) in keys]

    def bound_in(self, groups: Iterable[GroupSpec]) -> list[int]:
        """Node indices of pods bound before scheduling that belong to ``groups``."""
        keys = {g.key for g in groups}
        return [h.node for h in self.snapshot.holdings.values() if _group_key(h.pod) in keys]

    def pending_in(self, groups: Iterable[GroupSpec]) -> list[PodRequest]:
        keys = {g.key for g in groups}
        return [p for p in self.pending if _group_key(p) in keys]


def _group_key(request: PodRequest) -> str | None:
    return f"{request.namespace}/{request.group}" if request.group else None


def _run(scenario: Scenario) -> Outcome:
    snapshot = scenario.build()
    result = schedule(snapshot, scenario.pending, scenario.groups, scenario.policy)
    placed = {b.pod: (snapshot.index[b.node], b.gpus) for b in result.bindings}
    return Outcome(snapshot, scenario.pending, scenario.groups, result, placed, scenario.policy)


def _fail_with(problems: list[str], outcome: Outcome) -> None:
    if problems:
        shown = "\n  ".join(problems)
        raise AssertionError(
            f"{len(problems)} violation(s):\n  {shown}\nresult: {outcome.result.to_dict()}"
        )


# ----- (a) GPUs --------------------------------------------------------------------------------


def gpu_problems(outcome: Outcome) -> list[str]:
    snapshot = outcome.snapshot
    load: Counter[tuple[int, int]] = Counter()
    holders: dict[tuple[int, int], list[str]] = defaultdict(list)
    for holding in snapshot.holdings.values():
        for gpu in holding.gpus:
            load[(holding.node, gpu)] += holding.milli_per_gpu
            holders[(holding.node, gpu)].append(f"{holding.pod.key} (bound)")
    for key, (node_index, gpus) in outcome.placed.items():
        request = outcome.by_key[key]
        for gpu in gpus:
            load[(node_index, gpu)] += request.gpu_milli or WHOLE_GPU_MILLI
            holders[(node_index, gpu)].append(key)
    return [
        f"GPU {gpu} of {snapshot.nodes[n].name} holds {milli} milli: {', '.join(holders[(n, gpu)])}"
        for (n, gpu), milli in sorted(load.items())
        if milli > WHOLE_GPU_MILLI
    ]


# ----- (b) all or nothing ------------------------------------------------------------------------


def gang_problems(outcome: Outcome) -> list[str]:
    problems = []
    valid = {g.key for g in outcome.valid_groups()}
    for group in outcome.groups:
        new = outcome.new_in(outcome.subtree(group))
        if group.key not in valid:
            if new:
                problems.append(f"{group.key} is invalid yet {new} were bound")
            continue
        if group.kind is GroupKind.POD_GROUP and group.gang and new:
            before = len(outcome.bound_in([group]))
            have = len(new) + before
            # A gang already bound below its minCount grows by whatever fits (the planner's
            # `needed`); one with nothing bound gets its minCount or nothing.
            if have < group.minimum and not before:
                problems.append(
                    f"gang {group.key} (minCount {group.minimum}) has {len(new)} new + "
                    f"{have - len(new)} bound pods"
                )
        if group.kind is GroupKind.COMPOSITE and new:
            placed = [c.key for c in outcome.children(group) if _child_placed(outcome, c)]
            if len(placed) < group.minimum:
                problems.append(
                    f"{group.key} (minGroupCount {group.minimum}) bound {new} with only "
                    f"{placed} of its children placed"
                )
    return problems


def _child_placed(outcome: Outcome, group: GroupSpec) -> bool:
    """Could the engine have counted ``group`` as placed? Yes if pods of it were bound now; a
    PodGroup with no new pods counts when it is not waiting for pods and either has none
    pending or is already running (pods bound: its pending ones wait beside them); a
    CompositePodGroup without new pods counts when enough of its own children do."""
    if outcome.new_in(outcome.subtree(group)):
        return True
    if group.kind is GroupKind.POD_GROUP:
        bound = len(outcome.bound_in([group]))
        waiting = group.gang and bound < group.minimum
        return not waiting and (bound > 0 or not outcome.pending_in([group]))
    placed = [c for c in outcome.children(group) if _child_placed(outcome, c)]
    return len(placed) >= group.minimum


# ----- (c) filters ---------------------------------------------------------------------------


def filter_problems(outcome: Outcome) -> list[str]:
    snapshot = outcome.snapshot
    problems = []
    used = snapshot.used.copy()
    for key, (n, gpus) in outcome.placed.items():
        request = outcome.by_key[key]
        info = snapshot.nodes[n]
        for resource, amount in request.resources.items():
            used[n, snapshot.columns[resource]] += amount
        problems += _gpu_request_problems(snapshot, request, n, gpus, outcome.policy)
        if not info.ready or info.unschedulable:
            problems.append(f"{key} bound to {info.name}, which is cordoned or not ready")
        for label, value in request.node_selector:
            if info.labels.get(label) != value:
                problems.append(f"{key} bound to {info.name} without {label}={value}")
    over = np.argwhere(used > snapshot.allocatable)
    for n, column in over:
        resource = next(r for r, c in snapshot.columns.items() if c == column)
        problems.append(
            f"{snapshot.nodes[n].name}: {resource} used {used[n, column]} > allocatable "
            f"{snapshot.allocatable[n, column]}"
        )
    return problems


def _gpu_request_problems(
    snapshot: Snapshot, request: PodRequest, n: int, gpus: Sequence[int], policy: Policy
) -> list[str]:
    info = snapshot.nodes[n]
    want = request.gpus or (1 if request.gpu_milli else 0)
    where = f"{request.key} on {info.name} GPUs {list(gpus)}"
    problems = []
    if len(set(gpus)) != want or len(gpus) != want:
        problems.append(f"{where}: wants {want} GPU(s)")
    base = int(snapshot.gpu_offset[n])
    for gpu in gpus:
        if not 0 <= gpu < info.gpu_count:
            problems.append(f"{where}: GPU {gpu} does not exist")
        elif not snapshot.gpu_usable[base + gpu]:
            problems.append(
                f"{where}: GPU {gpu} is not usable ({snapshot.gpu_notes.get(base + gpu)})"
            )
    if request.gpus > 1 and info.topology_error is not None:
        problems.append(f"{where}: multi-GPU pod on a node with a broken topology annotation")
    single = policy.numa is NumaPolicy.SINGLE_NUMA_NODE
    if single and request.gpus > 1 and len({info.shape.numa[g] for g in gpus}) > 1:
        problems.append(f"{where}: spans NUMA nodes under single-numa-node")
    return problems


def topology_problems(outcome: Outcome) -> list[str]:
    """Every pod of a group's subtree, new or bound before, in one domain of the group's key;
    the group reports that domain (or a smaller one inside it) as its placement."""
    snapshot = outcome.snapshot
    problems = []
    decisions = {d.name: d for d in outcome.result.groups}
    for group in outcome.valid_groups():
        key = group.topology_key
        members = outcome.subtree(group)
        new_nodes = [outcome.placed[k][0] for k in outcome.new_in(members)]
        if key is None or not new_nodes:
            continue
        paths = {n: _domain(snapshot, n, key) for n in new_nodes + outcome.bound_in(members)}
        # A bound pod on a node without the label cannot pin anything; a new one must not be.
        seen = {paths[n] for n in new_nodes} | {p for p in paths.values() if p is not None}
        if len(seen) != 1 or None in seen:
            problems.append(f"{group.key} ({key}) spans {sorted(map(str, seen))}")
            continue
        (path,) = seen
        decision = decisions.get(group.key)
        placement = decision.placement if decision is not None else {}
        outside = [
            snapshot.nodes[n].name
            for n in new_nodes
            if any(snapshot.nodes[n].labels.get(k) != v for k, v in placement.items())
        ]
        if not set(path or ()) <= placement.items() or outside:
            problems.append(
                f"{group.key} reports placement {placement}; its pods are in {path} "
                f"(on {outside or 'matching nodes'})"
            )
    return problems


def _domain(snapshot: Snapshot, node: int, key: str) -> tuple[tuple[str, str], ...] | None:
    """The node's domain of label ``key`` as a full path: the values of every outer
    ``topologyLevels`` key the node has, then its own: rack-1 of zone-a is not rack-1 of zone-b."""
    labels = snapshot.nodes[node].labels
    if key not in labels:
        return None
    levels = snapshot.levels
    outer = levels[: levels.index(key)] if key in levels else ()
    return (*((k, labels[k]) for k in outer if k in labels), (key, labels[key]))


# ----- the properties --------------------------------------------------------------------------
#
# Each property also runs on pinned examples: cases that once broke the engine (kept so they
# stay fixed) and cases found by these properties.


def _story(
    nodes: Sequence[tuple[str, str | None, str | None]],
    pending: Sequence[PodRequest] = (),
    groups: Sequence[GroupSpec] = (),
    bound: Sequence[tuple[PodRequest, str, tuple[int, ...] | None]] = (),
) -> Scenario:
    specs = [NodeSpec(kind, zone, rack) for kind, zone, rack in nodes]
    return Scenario(specs, {}, None, list(bound), list(pending), list(groups))


CPU_NODE_SORTS_LAST = _story(
    [("a100x8", "zone-a", "rack-1"), ("cpu", "zone-a", "rack-1")],
    [pod("p0", gpus=1, group="g0")],
    [composite("c0", 1), gang("g0", 1, parent="c0")],
)
"""A CompositePodGroup in a cluster whose last node (by name) has no GPU: the composite's
domain ranking summed free GPUs with ``np.add.reduceat`` over every node's offset and raised
IndexError (fixed in 7f943eb)."""

#    zone-a         zone-b
#    rack-1         rack-1
#    node-a (GPUs)  node-b (no GPUs) <- g-0 bound here
SAME_RACK_NAME_OTHER_ZONE = _story(
    [("a100x8", "zone-a", "rack-1"), ("cpu", "zone-b", "rack-1")],
    [pod("g-1", gpus=1, group="g")],
    [gang("g", 2, topology=RACK)],
    bound=[(pod("g-0", group="g"), "node-b", ())],
)
"""A gang with a pod bound in zone-b/rack-1 is pinned there, not to every rack named rack-1:
pinning compared label values, so g-1 went to zone-a/rack-1 (fixed in 7f943eb)."""

CHILD_FITS_COMPOSITE_FAILS = _story(
    [("a100x8", None, None)],
    [pod("a-0", gpus=1, group="a"), *(pod(f"b-{i}", gpus=8, group="b") for i in range(2))],
    [composite("c", 2), gang("a", 1, parent="c"), gang("b", 2, parent="c")],
)
"""Child a fits, child b (two 8-GPU pods on one 8-GPU node) does not, so composite c fails:
a was still reported Scheduled while its pod stayed pending (fixed in 7f943eb)."""

BASIC_GROUP_OF_AN_IMPOSSIBLE_POD = _story(
    [("h100x4", None, None)], [pod("p0", gpus=8, group="g")], [gang("g", 0, basic=True)]
)
"""A basic PodGroup whose only pod asks for more GPUs than any node has: the pod is Invalid;
the group said Scheduled ("0 of 0 pending pods placed") (found here, fixed in 5406699)."""

NESTED_COMPOSITES_WAITING = _story(
    [("a100x8", None, None)],
    groups=[
        composite("c0", 1),
        composite("c1", 1, parent="c0"),
        composite("c2", 1, parent="c1"),
        gang("g1", 1, parent="c1"),
    ],
)
"""c0's message lists its failed descendants; the list followed the input order of the groups
(found here, fixed in 5406699)."""


@SETTINGS
@given(scenarios())
def test_no_gpu_is_given_more_than_one_whole_gpu(scenario: Scenario) -> None:
    outcome = _run(scenario)
    _fail_with(gpu_problems(outcome), outcome)


@SETTINGS
@given(scenarios())
@example(CHILD_FITS_COMPOSITE_FAILS)
def test_gangs_and_composites_are_all_or_nothing(scenario: Scenario) -> None:
    outcome = _run(scenario)
    _fail_with(gang_problems(outcome), outcome)


@SETTINGS
@given(scenarios())
@example(CPU_NODE_SORTS_LAST)
@example(SAME_RACK_NAME_OTHER_ZONE)
def test_every_binding_passes_every_filter(scenario: Scenario) -> None:
    outcome = _run(scenario)
    _fail_with(filter_problems(outcome) + topology_problems(outcome), outcome)


@SETTINGS
@given(scenarios())
def test_every_pending_pod_is_bound_or_reported_once(scenario: Scenario) -> None:
    outcome = _run(scenario)
    result = outcome.result
    seen = Counter([b.pod for b in result.bindings] + [u.pod for u in result.unschedulable])
    problems = [f"{key} appears {seen[key]} times" for key in outcome.by_key if seen[key] != 1]
    problems += [f"{key} is not a pending pod" for key in seen if key not in outcome.by_key]
    valid = {g.key for g in outcome.valid_groups()}
    for failure in result.unschedulable:
        group = _group_key(outcome.by_key[failure.pod]) if failure.pod in outcome.by_key else None
        known = {g.key for g in outcome.groups}
        if group in known and group not in valid and failure.reason is not Reason.INVALID:
            problems.append(f"{failure.pod} of invalid {group} reported {failure.reason}")
    _fail_with(problems, outcome)


@SETTINGS
@given(scenarios())
@example(CHILD_FITS_COMPOSITE_FAILS)
@example(BASIC_GROUP_OF_AN_IMPOSSIBLE_POD)
def test_group_decisions_agree_with_the_bindings(scenario: Scenario) -> None:
    """What the status would say matches what was bound: a group reported Scheduled has
    Scheduled ancestors with placements that contain its own, and a gang reported Scheduled
    has its minCount; a group with new pods is reported Scheduled."""
    outcome = _run(scenario)
    decisions = {d.name: d for d in outcome.result.groups}
    problems = []
    for group in outcome.valid_groups():
        decision = decisions.get(group.key)
        new = outcome.new_in(outcome.subtree(group))
        if new and (decision is None or decision.phase is not Phase.SCHEDULED):
            phase = decision.phase.value if decision else "no decision"
            problems.append(f"{group.key} is {phase} but {new} were bound")
        if decision is None or decision.phase is not Phase.SCHEDULED:
            continue
        waiting = outcome.pending_in([group])
        satisfied = len(outcome.bound_in([group])) >= max(group.minimum, 1)
        if group.kind is GroupKind.POD_GROUP and waiting and not new and not satisfied:
            problems.append(
                f"{group.key} is Scheduled ({decision.message!r}) but none of its "
                f"{len(waiting)} pending pods was bound"
            )
        if group.kind is GroupKind.POD_GROUP and group.gang:
            before = len(outcome.bound_in([group]))
            have = len(outcome.new_in([group])) + before
            if have < group.minimum and not before:
                problems.append(
                    f"{group.key} is Scheduled ({decision.message!r}, placement "
                    f"{decision.placement}) with {have} of minCount {group.minimum} pods"
                )
        parent = decisions.get(group.parent) if group.parent else None
        if not outcome.pending_in(outcome.subtree(group)):
            continue  # nothing of it was to be placed: "Scheduled" describes its bound pods
        if group.parent is not None and (parent is None or parent.phase is not Phase.SCHEDULED):
            problems.append(
                f"{group.key} is Scheduled in {decision.placement} but its parent {group.parent}"
                f" is {parent.phase.value if parent else 'undecided'}"
            )
        elif parent is not None and not parent.placement.items() <= decision.placement.items():
            problems.append(
                f"{group.key} placed in {decision.placement}, outside its parent's "
                f"{parent.placement}"
            )
    _fail_with(problems, outcome)


@SETTINGS
@given(scenarios(), st.randoms(use_true_random=False))
@example(NESTED_COMPOSITES_WAITING, Random(0))
def test_same_input_same_output_in_any_order(scenario: Scenario, random: Random) -> None:
    """Twice on one snapshot, then on a rebuilt one with pods and groups reversed and shuffled
    (the API server lists objects in no promised order)."""
    snapshot = scenario.build()
    first = schedule(snapshot, scenario.pending, scenario.groups, scenario.policy)
    again = schedule(snapshot, scenario.pending, scenario.groups, scenario.policy)
    assert again == first, "a second run on the same snapshot decided differently"
    pods, groups = list(scenario.pending), list(scenario.groups)
    shuffled_pods, shuffled_groups = list(pods), list(groups)
    random.shuffle(shuffled_pods)
    random.shuffle(shuffled_groups)
    for order in ((pods[::-1], groups[::-1]), (shuffled_pods, shuffled_groups)):
        other = schedule(scenario.build(), *order, scenario.policy)
        assert _decided(other) == _decided(first), "the input order changed the placement"
        assert other.to_dict() == first.to_dict(), "the input order changed a message"


def _decided(result: ScheduleResult) -> dict[str, Any]:
    """The placement and the phases, without the words."""
    return {
        "bindings": [b.to_dict() for b in result.bindings],
        "groups": [(g.name, g.phase, g.reason, g.placement) for g in result.groups],
        "unschedulable": [(u.pod, u.reason) for u in result.unschedulable],
    }


def _state(snapshot: Snapshot) -> dict[str, Any]:
    state: dict[str, Any] = {name: getattr(snapshot, name).copy() for name in MUTABLE_ARRAYS}
    state["holdings"] = dict(snapshot.holdings)
    state["gpu_apps"] = copy.deepcopy(snapshot.gpu_apps)
    return state


def _state_differences(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    differences = []
    for name, value in before.items():
        same = (
            np.array_equal(value, after[name]) if name in MUTABLE_ARRAYS else value == after[name]
        )
        if not same:
            differences.append(f"{name}: {value!r} -> {after[name]!r}")
    return differences


@SETTINGS
@given(scenarios())
def test_schedule_leaves_the_callers_snapshot_alone(scenario: Scenario) -> None:
    snapshot = scenario.build()
    before = _state(snapshot)
    statics = (
        snapshot.allocatable.copy(),
        snapshot.gpu_usable.copy(),
        dict(snapshot.gpu_notes),
        copy.deepcopy(snapshot.node_notes),
    )
    checkpoint = snapshot.checkpoint()
    schedule(snapshot, scenario.pending, scenario.groups, scenario.policy)
    assert _state_differences(before, _state(snapshot)) == []
    assert snapshot.checkpoint() == checkpoint, "schedule journaled changes on the caller's copy"
    assert np.array_equal(statics[0], snapshot.allocatable)
    assert np.array_equal(statics[1], snapshot.gpu_usable)
    assert (statics[2], statics[3]) == (dict(snapshot.gpu_notes), snapshot.node_notes)


@SETTINGS
@given(scenarios(), st.data())
def test_rollback_restores_the_checkpoint_exactly(scenario: Scenario, data: st.DataObject) -> None:
    """Random assume/forget sequences (two nested checkpoints) are undone exactly, including
    the derived per-node counters and the per-GPU app counts."""
    snapshot = scenario.build()
    outer = snapshot.checkpoint()
    at_outer = _state(snapshot)
    _random_changes(snapshot, data, "first")
    inner = snapshot.checkpoint()
    at_inner = _state(snapshot)
    _random_changes(snapshot, data, "second")
    snapshot.rollback(inner)
    assert _state_differences(at_inner, _state(snapshot)) == []
    snapshot.rollback(outer)
    assert _state_differences(at_outer, _state(snapshot)) == []
    assert snapshot.journal_since(outer) == []


def _random_changes(snapshot: Snapshot, data: st.DataObject, label: str) -> None:
    nodes = len(snapshot.nodes)
    for step in range(data.draw(st.integers(0, 8), label=f"{label} steps")):
        held: list[str] = sorted(snapshot.holdings)
        forget: bool = bool(held) and data.draw(st.booleans(), label="forget?")
        if forget:
            snapshot.forget(data.draw(st.sampled_from(held), label="forget"))
            continue
        n = data.draw(st.integers(0, nodes - 1), label="node")
        count = snapshot.nodes[n].gpu_count
        share = count > 0 and data.draw(st.booleans(), label="share?")
        whole = data.draw(st.integers(0, count), label="gpus") if not share else 0
        gpus = data.draw(st.permutations(range(count)), label="order")[: whole or int(share)]
        request = pod(
            f"{label}-{step}",
            gpus=whole,
            milli=250 if share else 0,
            app=data.draw(st.sampled_from([None, "web", "train"]), label="app"),
        )
        snapshot.assume(request, n, gpus)

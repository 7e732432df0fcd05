"""The one engine run of the offline tools (``simulate``, ``explain``, their pictures): the
objects read by `gpusched.inputs.objects`, placed exactly as the operator's loop would place
them now.

Bound pods consume capacity; pending pods with our scheduler name are placed; invalid groups
are given to the engine, as the operator gives them, so that it reports them Invalid.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace

from gpusched.api.config import GPU_RESOURCE, SchedulerConfig
from gpusched.api.k8s import Pod
from gpusched.engine.budgets import disruption_budgets
from gpusched.engine.build import build_snapshot
from gpusched.engine.dra import dra_inputs
from gpusched.engine.groups import GroupSpec, GroupTree
from gpusched.engine.health import GpuSample
from gpusched.engine.pins import GpuPins
from gpusched.engine.policy import Policy
from gpusched.engine.preemption import PreemptionPlan, plan_cycle
from gpusched.engine.request import PodRequest
from gpusched.engine.result import Binding, GroupDecision, Phase, PodFailure, ScheduleResult
from gpusched.engine.schedule import schedule
from gpusched.engine.snapshot import BoundPod, Snapshot
from gpusched.inputs.objects import ClusterObjects
from gpusched.offline.claims import offline_dra

OTHER_SCHEDULER = "Pod (other scheduler, pending)"
"""How pending pods of another scheduler are counted among the ignored objects."""


@dataclass(slots=True, kw_only=True)
class Run:
    """The engine's decision on everything pending, with what it was decided on."""

    objects: ClusterObjects
    snapshot: Snapshot
    """Before the decision (bound pods only)."""
    pods: dict[str, Pod]
    pending: dict[str, PodRequest]
    bound: dict[str, BoundPod]
    groups: dict[str, GroupSpec]
    result: ScheduleResult
    """Each group's phase as after one attempt (`first_attempt`)."""
    policy: Policy
    """What the engine decided under."""
    turns: dict[str, Snapshot] = field(default_factory=dict)
    """Unit key → the cluster as the engine found it when that unit's turn came (for the
    units asked for)."""
    ignored: dict[str, int] = field(default_factory=dict)
    """Kinds read past, and pending pods of other schedulers, with counts."""
    preemptions: list[PreemptionPlan] = field(default_factory=list)
    """For each root group left unschedulable, highest priority first: the lower-priority
    pods whose eviction would make it fit, or why none would."""
    tree: GroupTree = field(init=False)
    decisions: dict[str, GroupDecision] = field(init=False)
    bindings: dict[str, Binding] = field(init=False)
    failures: dict[str, PodFailure] = field(init=False)

    def __post_init__(self) -> None:
        self.tree = GroupTree(self.groups.values())
        self.decisions = {d.name: d for d in self.result.groups}
        self.bindings = {b.pod: b for b in self.result.bindings}
        self.failures = {f.pod: f for f in self.result.unschedulable}


def simulate(
    objects: ClusterObjects,
    config: SchedulerConfig,
    telemetry: Mapping[tuple[str, int], GpuSample] | None = None,
    turns: Callable[[Mapping[str, GroupSpec]], Collection[str]] | None = None,
) -> Run:
    """Runs the engine once on ``objects``. ``telemetry`` goes to `build_snapshot` unchanged
    (``None``: no telemetry source); ``turns``: given the groups, the units (root group keys,
    keys of pods without a group) whose turn to keep a copy of the cluster at."""
    objects.group_by_owner(config)
    bound: dict[str, BoundPod] = {}
    foreign: set[str] = set()
    pending: dict[str, PodRequest] = {}
    pods: dict[str, Pod] = {}
    ignored = dict(objects.ignored)
    for read in objects.pods:
        pod = read.pod
        pods[pod.key] = pod
        if pod.is_terminal:
            continue
        if pod.spec.node_name:
            bound[pod.key] = BoundPod(read.request, pod.spec.node_name, read.gpus)
            if pod.spec.scheduler_name not in config.scheduler_names:
                foreign.add(pod.key)
        elif pod.spec.scheduler_name in config.scheduler_names:
            pending[pod.key] = read.request
        else:
            ignored[OTHER_SCHEDULER] = ignored.get(OTHER_SCHEDULER, 0) + 1
    bound = _pinned(objects, bound)
    # DRA as the operator gives it to the engine: devices, what claims hold, pods' claims.
    dra = offline_dra(objects.dra, (pods[key] for key in pending))
    found = dra_inputs(objects.nodes, dra.objects, list(pending.values()), dra.pods, GPU_RESOURCE)
    pending = {r.key: r for r in found.ready}
    held = [*bound.values(), *found.held]
    snapshot = build_snapshot(objects.nodes, held, telemetry, config, devices=found.devices)
    specs = objects.group_specs()
    wanted = turns(specs) if turns is not None else ()
    kept: dict[str, Snapshot] = {}

    def observe(unit: str, work: Snapshot) -> None:
        if unit in wanted:
            kept[unit] = work.copy()

    requests, groups = list(pending.values()), list(specs.values())
    policy = Policy.of(config)
    result = schedule(snapshot, requests, groups, policy, observe)
    budgets = disruption_budgets(objects.budgets, (p for p in pods.values() if not p.is_terminal))
    preemptions = plan_cycle(
        snapshot, result, requests, groups, policy, budgets, frozenset(foreign)
    )
    return Run(
        objects=objects,
        snapshot=snapshot,
        pods=pods,
        pending=pending,
        bound=bound,
        groups=specs,
        result=first_attempt(result),
        policy=policy,
        turns=kept,
        ignored=ignored,
        preemptions=preemptions,
    )


@dataclass(frozen=True, slots=True)
class _Held:
    key: str
    uid: str
    holding: BoundPod | None


def _pinned(objects: ClusterObjects, bound: dict[str, BoundPod]) -> dict[str, BoundPod]:
    """The bound pods, those holding whole GPUs without saying which (other schedulers'
    pods) with GPUs assumed as the operator assumes them (`GpuPins`)."""
    uids = {r.pod.key: r.pod.metadata.uid or r.pod.key for r in objects.pods}
    held = {key: _Held(key, uids[key], holding) for key, holding in bound.items()}
    unnamed = {
        key: h
        for key, h in held.items()
        if h.holding is not None
        and h.holding.gpus is None
        and h.holding.pod.gpus
        and not h.holding.pod.gpu_milli
    }
    if not unnamed:
        return bound
    counts = {n.name: n.allocatable_resources().get(GPU_RESOURCE, 0) for n in objects.nodes}
    explicit = [b for b in bound.values() if b.gpus is not None]
    pinned = GpuPins().pinned(unnamed, explicit, lambda node: counts.get(node, 0))
    return {key: pinned.get(held[key].uid, holding) for key, holding in bound.items()}


def first_attempt(result: ScheduleResult) -> ScheduleResult:
    """The result with each group's phase as the operator's status shows it after one
    attempt: a group that does not fit stays ``Pending`` (reason ``Unschedulable``) until its
    ``scheduleTimeoutSeconds`` pass, and an offline run never waits that long."""
    result.groups = [
        replace(g, phase=Phase.PENDING) if g.phase is Phase.UNSCHEDULABLE else g
        for g in result.groups
    ]
    return result

"""`gpusched explain`: why a pod, PodGroup, CompositePodGroup or Workload is (not) placed.

Phases:
1. Input: the cluster's objects, from YAML files (the loader of ``simulate``) or from a live
   cluster (`gpusched.k8s.reader`, read-only), as API documents.
2. Decision: the engine runs on every pending pod, exactly as the operator's loop would now,
   so the target competes with the work ahead of it in the queue.
3. Report: per group involved, the decision as the group's status ``lastAttempt`` would show
   it (reason, message, one line per domain tried: the engine's own text), then hints — what
   would make it fit — measured on the cluster as the engine found it when the target's turn
   came (bound pods plus what the engine placed before it).

Hints (`gpusched.hints`) come from the per-node counts the planner ranks domains by: for
the domain closest to fitting, what to free and where; whether the group would fit now with
a lower ``minCount`` or a wider topology level; what capacity telemetry or node state keeps
from it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpusched import hints
from gpusched.api.config import SchedulerConfig
from gpusched.api.crds import (
    CompositePodGroup,
    PodGroup,
    parse_composite_pod_group,
    parse_pod_group,
    parse_workload,
)
from gpusched.api.errors import InvalidObjectError
from gpusched.api.k8s import POD_GROUP_LABEL, Pod, parse_node, parse_pod
from gpusched.api.materialize import materialize
from gpusched.engine.groups import GroupKind, GroupSpec
from gpusched.engine.request import PodRequest
from gpusched.engine.result import Binding, GroupDecision, Phase, PodFailure, Reason
from gpusched.engine.schedule import schedule
from gpusched.engine.snapshot import (
    BoundPod,
    GpuSample,
    Snapshot,
    build_snapshot,
)
from gpusched.simulate import ClusterObjects, first_attempt

KINDS = {
    "pod": "Pod",
    "pods": "Pod",
    "po": "Pod",
    "pg": "PodGroup",
    "podgroup": "PodGroup",
    "podgroups": "PodGroup",
    "cpg": "CompositePodGroup",
    "compositepodgroup": "CompositePodGroup",
    "compositepodgroups": "CompositePodGroup",
    "wl": "Workload",
    "workload": "Workload",
    "workloads": "Workload",
}
"""Accepted spellings of the target's kind (``pg/NAME``, ``podgroup/NAME``, …)."""


class ExplainError(Exception):
    """The target cannot be explained (unknown kind, not found); the message says why."""


@dataclass(frozen=True, slots=True)
class Target:
    kind: str
    """``Pod``, ``PodGroup``, ``CompositePodGroup`` or ``Workload``."""
    namespace: str
    name: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @staticmethod
    def parse(text: str, namespace: str) -> Target:
        """``pg/NAME`` (or ``podgroup/NAME``, ``cpg/…``, ``wl/…``, ``pod/…``); a ``NS/`` in
        front of the name overrides ``namespace``."""
        kind, _, name = text.partition("/")
        if not name or kind.lower() not in KINDS:
            raise ExplainError(
                f"cannot read target {text!r}: want KIND/NAME with KIND one of pod, pg, cpg, wl"
            )
        if "/" in name:
            namespace, name = name.split("/", 1)
        return Target(KINDS[kind.lower()], namespace, name)


# ----- phase 1: objects from API documents ---------------------------------------------------


@dataclass(slots=True)
class Cluster:
    """The objects read, plus those that failed validation (kept: the target may be one)."""

    objects: ClusterObjects
    invalid_groups: dict[str, GroupSpec] = field(default_factory=dict)
    invalid_pods: dict[str, str] = field(default_factory=dict)
    workloads: dict[str, list[str]] = field(default_factory=dict)
    """Workload key → keys of the groups it materialises."""


def from_objects(objects: ClusterObjects) -> Cluster:
    """A cluster read by ``simulate``'s loader (invalid groups kept with their errors)."""
    cluster = Cluster(objects, invalid_groups={g.key: g for g in objects.invalid_groups})
    for group in objects.groups:
        ref = group.spec.workload_ref
        if ref is not None:
            key = f"{group.metadata.namespace}/{ref.workload_name}"
            cluster.workloads.setdefault(key, []).append(group.key)
    return cluster


def from_documents(documents: Iterable[Mapping[str, Any]]) -> Cluster:
    """A cluster from live API documents. Like the operator, an invalid group or pod does not
    stop the rest: it is kept with its error, and explained as Invalid if asked about."""
    objects = ClusterObjects()
    cluster = Cluster(objects)
    explicit: list[PodGroup | CompositePodGroup] = []
    materialised: list[PodGroup | CompositePodGroup] = []
    for document in documents:
        kind = document.get("kind")
        try:
            if kind == "Node":
                objects.nodes.append(parse_node(document))
            elif kind == "Pod":
                _add_pod(cluster, parse_pod(document))
            elif kind in ("PodGroup", "CompositePodGroup"):
                explicit.append(_parse_group(document))
            elif kind == "Workload":
                materialised.extend(materialize(parse_workload(document)))
        except InvalidObjectError as error:
            _invalid(cluster, document, str(error))
    names = {g.key for g in explicit}
    objects.groups = explicit + [g for g in materialised if g.key not in names]
    for group in objects.groups:
        ref = group.spec.workload_ref
        if ref is not None:
            key = f"{group.metadata.namespace}/{ref.workload_name}"
            cluster.workloads.setdefault(key, []).append(group.key)
    return cluster


def _parse_group(document: Mapping[str, Any]) -> PodGroup | CompositePodGroup:
    if document.get("kind") == "PodGroup":
        return parse_pod_group(document)
    return parse_composite_pod_group(document)


def _add_pod(cluster: Cluster, pod: Pod) -> None:
    try:
        PodRequest.from_pod(pod)
        pod.assigned_gpus()
    except InvalidObjectError as error:
        cluster.invalid_pods[pod.key] = str(error)
        return
    cluster.objects.pods.append(pod)


def _invalid(cluster: Cluster, document: Mapping[str, Any], error: str) -> None:
    metadata = document.get("metadata") or {}
    key = f"{metadata.get('namespace') or 'default'}/{metadata.get('name') or '<unnamed>'}"
    kind = document.get("kind")
    if kind == "PodGroup":
        cluster.invalid_groups[key] = GroupSpec(key, GroupKind.POD_GROUP, invalid=error)
    elif kind == "CompositePodGroup":
        cluster.invalid_groups[key] = GroupSpec(key, GroupKind.COMPOSITE, invalid=error)
    elif kind == "Pod":
        cluster.invalid_pods[key] = error
    elif kind == "Workload":
        cluster.objects.invalid_workloads[key] = error


# ----- phase 2: the decision -----------------------------------------------------------------


@dataclass(slots=True)
class Run:
    """The engine's decision on everything pending, with what it was decided on."""

    snapshot: Snapshot
    """Before the decision (bound pods only)."""
    pending: dict[str, PodRequest]
    bound: dict[str, BoundPod]
    groups: dict[str, GroupSpec]
    decisions: dict[str, GroupDecision]
    bindings: dict[str, Binding]
    failures: dict[str, PodFailure]
    pods: dict[str, Pod]


def decide(
    cluster: Cluster,
    config: SchedulerConfig,
    telemetry: Mapping[tuple[str, int], GpuSample] | None = None,
) -> Run:
    """Runs the engine as ``simulate`` does (bound pods consume capacity, pending pods with
    our scheduler name are placed), invalid groups included as the operator includes them."""
    bound: dict[str, BoundPod] = {}
    pending: dict[str, PodRequest] = {}
    pods: dict[str, Pod] = {}
    for pod in cluster.objects.pods:
        pods[pod.key] = pod
        if pod.is_terminal:
            continue
        request = PodRequest.from_pod(pod)
        if pod.spec.node_name:
            bound[pod.key] = BoundPod(request, pod.spec.node_name, pod.assigned_gpus())
        elif pod.spec.scheduler_name == config.scheduler_name:
            pending[pod.key] = request
    snapshot = build_snapshot(cluster.objects.nodes, bound.values(), telemetry, config)
    specs = {g.key: _spec(g) for g in cluster.objects.groups}
    specs.update({k: v for k, v in cluster.invalid_groups.items() if k not in specs})
    result = first_attempt(schedule(snapshot, list(pending.values()), list(specs.values())))
    return Run(
        snapshot=snapshot,
        pending=pending,
        bound=bound,
        groups=specs,
        decisions={d.name: d for d in result.groups},
        bindings={b.pod: b for b in result.bindings},
        failures={f.pod: f for f in result.unschedulable},
        pods=pods,
    )


def _spec(group: PodGroup | CompositePodGroup) -> GroupSpec:
    if isinstance(group, PodGroup):
        return GroupSpec.from_pod_group(group)
    return GroupSpec.from_composite(group)


def root_of(run: Run, key: str) -> str:
    seen = {key}
    group = run.groups.get(key)
    while group is not None and group.parent is not None and group.parent not in seen:
        seen.add(group.parent)
        key = group.parent
        group = run.groups.get(key)
    return key


def descendants(run: Run, key: str) -> list[str]:
    """``key`` and every group under it, parents first, children in name order."""
    children: dict[str, list[str]] = defaultdict(list)
    for spec in sorted(run.groups.values(), key=lambda g: g.key):
        if spec.parent is not None:
            children[spec.parent].append(spec.key)
    found, stack = [], [key]
    while stack:
        current = stack.pop(0)
        if current in found:
            continue
        found.append(current)
        stack[:0] = children.get(current, [])
    return found


def _pod_group_key(request: PodRequest) -> str | None:
    return f"{request.namespace}/{request.group}" if request.group else None


def before_turn(run: Run, root: str) -> Snapshot:
    """The cluster as the engine found it when ``root``'s turn came: bound pods plus the
    placements of the work it took earlier (higher priority, then older, then by name)."""
    rank = _unit_ranks(run)
    mine = rank.get(root)
    work = run.snapshot.copy()
    for key, binding in sorted(run.bindings.items()):
        request = run.pending.get(key)
        if request is None:
            continue
        group = _pod_group_key(request)
        unit = root_of(run, group) if group is not None else key
        if unit == root or mine is None or rank.get(unit, mine) >= mine:
            continue
        node = work.index.get(binding.node)
        if node is not None:
            work.assume(request, node, binding.gpus)
    return work


def _unit_ranks(run: Run) -> dict[str, tuple[int, float, str]]:
    """The engine's order key of every unit (root group or group-less pod)."""
    priority: dict[str, int] = defaultdict(int)
    created: dict[str, float] = {}
    for spec in run.groups.values():
        if spec.parent is None:
            created[spec.key] = spec.created
    for key, request in run.pending.items():
        group = _pod_group_key(request)
        unit = root_of(run, group) if group is not None else key
        priority[unit] = max(priority.get(unit, request.priority), request.priority)
        created[unit] = min(created.get(unit, request.created), request.created)
    return {unit: (-priority.get(unit, 0), when, unit) for unit, when in created.items()}


# ----- phase 3: the report -------------------------------------------------------------------


@dataclass(slots=True)
class GroupReport:
    key: str
    kind: str
    summary: str
    """Policy and pod counts, e.g. ``gang, minCount 4, topology rack; 4 pending, 0 bound``."""
    decision: GroupDecision | None
    placed: list[Binding] = field(default_factory=list)
    hints: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.key,
            "kind": self.kind,
            "summary": self.summary,
            "decision": self.decision.to_dict() if self.decision is not None else None,
            "bindings": [b.to_dict() for b in self.placed],
            "hints": list(self.hints),
        }


@dataclass(slots=True)
class Explanation:
    target: Target
    headline: str
    pod_lines: list[str] = field(default_factory=list)
    groups: list[GroupReport] = field(default_factory=list)
    hints: list[str] = field(default_factory=list)
    """Hints about the target pod itself (a group-less pod)."""
    highlight: set[str] = field(default_factory=set)
    """Group keys (and group-less pod keys) to highlight in a picture."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": {
                "kind": self.target.kind,
                "namespace": self.target.namespace,
                "name": self.target.name,
            },
            "headline": self.headline,
            "pod": self.pod_lines,
            "groups": [g.to_dict() for g in self.groups],
            "hints": list(self.hints),
        }

    def render(self) -> str:
        lines = [self.headline]
        lines += [f"  {line}" for line in self.pod_lines]
        if self.hints:
            lines.append("  what would make it fit:")
            lines += [f"  - {hint}" for hint in self.hints]
        for group in self.groups:
            lines.append("")
            lines += _render_group(group)
        return "\n".join(lines).rstrip() + "\n"


def _render_group(group: GroupReport) -> list[str]:
    decision = group.decision
    phase = decision.phase.value if decision is not None else "Pending"
    lines = [f"{group.kind} {group.key}: {phase}", f"  {group.summary}"]
    if decision is None:
        lines.append("  no decision: the engine did not reach this group")
    else:
        lines.append("  lastAttempt:")
        lines.append(f"    reason: {decision.reason.value}")
        lines.append(f"    message: {decision.message}")
        if decision.placement:
            where = ", ".join(f"{k}={v}" for k, v in decision.placement.items())
            lines.append(f"    placement: {where}")
        if decision.attempts:
            lines.append("    domains:")
            lines += [f"    - {attempt}" for attempt in decision.attempts]
    for binding in group.placed:
        gpus = ",".join(map(str, binding.gpus)) or "-"
        tier = f" {binding.link_tier} (best {binding.best_tier})" if binding.link_tier else ""
        lines.append(f"  {binding.pod} → {binding.node} GPUs {gpus}{tier}")
    if group.hints:
        lines.append("  what would make it fit:")
        lines += [f"  - {hint}" for hint in group.hints]
    return lines


def explain(run: Run, cluster: Cluster, target: Target) -> Explanation:
    """The report about ``target``; `ExplainError` when there is no such object."""
    if target.kind == "Pod":
        return _explain_pod(run, cluster, target)
    invalid = cluster.objects.invalid_workloads.get(target.key)
    if target.kind == "Workload" and invalid is not None:
        return Explanation(target, f"Workload {target.key}: Invalid", [invalid])
    keys = _target_groups(run, cluster, target)
    explanation = Explanation(target, _group_headline(run, target, keys))
    for key in keys:
        explanation.groups.append(_group_report(run, key))
        explanation.highlight.add(key)
    return explanation


def _target_groups(run: Run, cluster: Cluster, target: Target) -> list[str]:
    if target.kind == "Workload":
        groups = cluster.workloads.get(target.key)
        if not groups:
            raise ExplainError(f"Workload {target.key} not found (or it has no templates)")
        roots = sorted({k for k in groups if run.groups.get(k, None) is not None})
        ordered: list[str] = []
        for key in roots:
            parent = run.groups[key].parent
            if parent is None or parent not in groups:
                ordered += [k for k in descendants(run, key) if k not in ordered]
        return ordered
    spec = run.groups.get(target.key)
    if spec is None or spec.kind.value != target.kind:
        known = sorted(k for k, g in run.groups.items() if g.kind.value == target.kind)
        shown = ", ".join(known[:10]) + (", …" if len(known) > 10 else "")
        raise ExplainError(f"{target.kind} {target.key} not found (known: {shown or 'none'})")
    return descendants(run, target.key)


def _group_headline(run: Run, target: Target, keys: Sequence[str]) -> str:
    decisions = [run.decisions.get(k) for k in keys]
    placed = sum(1 for d in decisions if d is not None and d.phase is Phase.SCHEDULED)
    if target.kind == "Workload":
        return f"Workload {target.key}: {placed} of {len(keys)} groups placed"
    decision = decisions[0] if decisions else None
    if decision is None:
        verdict = "the engine did not reach it"
    elif decision.phase is Phase.SCHEDULED:
        verdict = "the engine would place it now"
    else:
        verdict = f"the engine would not place it now ({decision.reason.value})"
    return f"{target.kind} {target.key}: {verdict}"


def _failed_members(run: Run, spec: GroupSpec, reason: Reason) -> list[str]:
    """Keys of the group's pods the engine left out for ``reason``."""
    return [
        k
        for k, p in sorted(run.pods.items())
        if p.group
        and f"{p.namespace}/{p.group}" == spec.key
        and k in run.failures
        and run.failures[k].reason is reason
    ]


def _ungate_hint(run: Run, keys: Sequence[str]) -> str:
    """Gates are removed by whoever added them (a quota or provisioning controller)."""
    named = ", ".join(f"{k} ({', '.join(run.pods[k].scheduling_gates)})" for k in keys[:3])
    more = f", … {len(keys) - 3} more" if len(keys) > 3 else ""
    return (
        f"remove the scheduling gates of {hints.plural(len(keys), 'pod')}: {named}{more}; "
        "no scheduler places a pod while spec.schedulingGates has an entry"
    )


def _members(run: Run, key: str) -> tuple[list[str], list[str]]:
    """(pending, bound) pod keys of a PodGroup."""
    pending = sorted(k for k, r in run.pending.items() if _pod_group_key(r) == key)
    bound = sorted(k for k, b in run.bound.items() if _pod_group_key(b.pod) == key)
    return pending, bound


def _summary(run: Run, spec: GroupSpec) -> str:
    if spec.invalid is not None:
        return "invalid"
    if spec.kind is GroupKind.COMPOSITE:
        policy = f"minGroupCount {spec.minimum}"
        children = [g for g in run.groups.values() if g.parent == spec.key]
        counts = hints.plural(len(children), "child group")
    else:
        policy = f"gang, minCount {spec.minimum}" if spec.gang else "basic"
        pending, bound = _members(run, spec.key)
        counts = f"{hints.plural(len(pending), 'pod')} pending, {len(bound)} bound"
    topology = f", topology {spec.topology_key}" if spec.topology_key else ""
    return f"{policy}{topology}; {counts}"


def _group_report(run: Run, key: str) -> GroupReport:
    spec = run.groups[key]
    decision = run.decisions.get(key)
    report = GroupReport(key, spec.kind.value, _summary(run, spec), decision)
    pending, _ = _members(run, key)
    report.placed = [run.bindings[p] for p in pending if p in run.bindings]
    if decision is not None and decision.phase is not Phase.SCHEDULED:
        report.hints = group_hints(run, spec, decision)
    return report


# ----- a pod ---------------------------------------------------------------------------------


def _explain_pod(run: Run, cluster: Cluster, target: Target) -> Explanation:
    key = target.key
    if key in cluster.invalid_pods:
        return Explanation(target, f"Pod {key}: Invalid", [cluster.invalid_pods[key]])
    pod = run.pods.get(key)
    if pod is None:
        raise ExplainError(f"Pod {key} not found")
    group = pod.group
    group_key = f"{pod.namespace}/{group}" if group else None
    explanation = Explanation(target, f"Pod {key}: {_pod_state(run, pod)}")
    explanation.highlight.add(group_key or key)
    if group_key is not None:
        explanation.pod_lines.append(f"in PodGroup {group_key}")
    failure = run.failures.get(key)
    own = failure is not None and failure.reason is Reason.SCHEDULING_GATED
    if failure is not None and (own or not (group_key is not None and group_key in run.decisions)):
        explanation.pod_lines += [f"reason: {failure.reason.value}", f"message: {failure.message}"]
    if group_key is not None and group_key in run.groups:
        root = root_of(run, group_key)
        explanation.groups += [_group_report(run, k) for k in descendants(run, root)]
    elif failure is not None and key in run.pending:
        explanation.hints = _pod_failure_hints(run, key, failure, group_key)
    return explanation


def _pod_failure_hints(run: Run, key: str, failure: PodFailure, group_key: str | None) -> list[str]:
    if failure.reason is Reason.INVALID:
        return [f"fix the pod: {failure.message}"]
    if failure.reason is Reason.SCHEDULING_GATED:
        return [_ungate_hint(run, [key])]
    if group_key is not None:
        return [f"create PodGroup {group_key}, or change the pod's {POD_GROUP_LABEL} label"]
    return hints.pod_hints(before_turn(run, key), run.pending[key])


def _pod_state(run: Run, pod: Pod) -> str:
    key = pod.key
    if pod.is_terminal:
        return f"{pod.status.phase}; holds nothing"
    if key in run.bound:
        bound = run.bound[key]
        gpus = f" GPUs {','.join(map(str, bound.gpus))}" if bound.gpus else ""
        return f"bound to {bound.node}{gpus}"
    if key in run.bindings:
        binding = run.bindings[key]
        gpus = f" GPUs {','.join(map(str, binding.gpus))}" if binding.gpus else ""
        return f"would be placed on {binding.node}{gpus}"
    if key not in run.pending:
        return f"pending for another scheduler ({pod.spec.scheduler_name})"
    failure = run.failures.get(key)
    return failure.reason.value if failure is not None else "Pending"


# ----- hints ---------------------------------------------------------------------------------


def group_hints(run: Run, spec: GroupSpec, decision: GroupDecision) -> list[str]:
    """What would make the group fit, from its decision and the cluster at its turn."""
    if spec.invalid is not None or decision.reason is Reason.INVALID:
        return [f"fix the object: {spec.invalid or decision.message}"]
    pending, bound = _members(run, spec.key)
    if decision.reason is Reason.WAITING_FOR_PODS:
        refused = [run.failures[k].message for k in _failed_members(run, spec, Reason.INVALID)]
        gated = _failed_members(run, spec, Reason.SCHEDULING_GATED)
        waiting = hints.waiting_hints(spec, decision.message, refused)
        if not gated:
            return waiting
        # Ungating is the fix when the gated pods would complete the gang.
        counted = len(pending) + len(bound) - len(gated) - len(refused)
        enough = spec.kind is GroupKind.POD_GROUP and counted + len(gated) >= spec.minimum
        return [_ungate_hint(run, gated)] + ([] if enough else waiting)
    if decision.message.startswith(("PodGroup ", "CompositePodGroup ")) and spec.parent:
        return [f"see {spec.parent}: this group failed with its parent"]
    if spec.kind is GroupKind.COMPOSITE:
        return hints.composite_hints(spec, [decision.message, *decision.attempts])
    pods = [run.pending[k] for k in pending]
    if not pods:
        return []
    snapshot = before_turn(run, root_of(run, spec.key))
    held = [
        (run.bound[k].pod, snapshot.index[run.bound[k].node])
        for k in bound
        if run.bound[k].node in snapshot.index
    ]
    return hints.gang_hints(snapshot, spec, pods, held)

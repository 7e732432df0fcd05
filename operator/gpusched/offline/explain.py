"""`gpusched explain`: why a pod, PodGroup, CompositePodGroup or Workload is (not) placed.

Phases:
1. Input: the cluster's objects, from YAML files or from a live cluster (read-only), read by
   `gpusched.inputs.objects`.
2. Decision: the engine runs on every pending pod, exactly as the operator's loop would now,
   so the target competes with the work ahead of it in the queue.
3. Report: per group involved, the decision as the group's status ``lastAttempt`` would show
   it (reason, message, one line per domain tried: the engine's own text), then hints — what
   would make it fit — measured on the cluster as the engine found it when the target's turn
   came (bound pods plus what the engine placed before it).

Hints (`gpusched.offline.hints`) come from the per-node counts the planner ranks domains by: for
the domain closest to fitting, what to free and where; whether the group would fit now with
a lower ``minCount`` or a wider topology level; what capacity telemetry or node state keeps
from it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpusched.api.config import SchedulerConfig
from gpusched.api.crds import CONDITION_SCHEDULED, Reason
from gpusched.api.grouprefs import GroupSource, split_group_name
from gpusched.api.k8s import POD_GROUP_LABEL, Pod
from gpusched.engine.groups import GroupKey, GroupKind, GroupSpec, GroupTree
from gpusched.engine.health import GpuSample
from gpusched.engine.preemption import PreemptionPlan
from gpusched.engine.result import Binding, GroupDecision, Phase, PodFailure
from gpusched.inputs.objects import ClusterObjects
from gpusched.offline import hints
from gpusched.offline.simulate import Run, simulate

KINDS = {
    "pod": "Pod",
    "pods": "Pod",
    "po": "Pod",
    "gspg": "PodGroup",
    "pg": "PodGroup",
    "podgroup": "PodGroup",
    "podgroups": "PodGroup",
    "gscpg": "CompositePodGroup",
    "cpg": "CompositePodGroup",
    "compositepodgroup": "CompositePodGroup",
    "compositepodgroups": "CompositePodGroup",
    "gswl": "Workload",
    "wl": "Workload",
    "workload": "Workload",
    "workloads": "Workload",
}
"""Accepted spellings of the target's kind: the CRDs' short names (``gspg/NAME``, ``gscpg/``,
``gswl/``), the older ``pg/``, ``cpg/``, ``wl/`` (no clash here: explain reads only our kinds),
and the singular and plural names."""


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


# ----- phase 2: the decision -----------------------------------------------------------------


def explain_target(
    objects: ClusterObjects,
    config: SchedulerConfig,
    telemetry: Mapping[tuple[str, int], GpuSample] | None,
    target: Target,
) -> tuple[Run, Explanation]:
    """Runs the engine once, keeping the cluster as it was at the turn of every unit the
    report measures hints on, and explains ``target``; `ExplainError` when there is no such
    object."""

    def units(groups: Mapping[str, GroupSpec]) -> set[str]:
        return _units_of(objects, groups, target)

    run = simulate(objects, config, telemetry, turns=units)
    return run, explain(run, target)


def _units_of(objects: ClusterObjects, groups: Mapping[str, GroupSpec], target: Target) -> set[str]:
    """The units (root groups, group-less pods) whose turn the report about ``target`` may
    look at: the roots of its groups, or the pod itself."""
    if target.kind == "Workload":
        keys = objects.workload_groups().get(target.key, [])
    elif target.kind == "Pod":
        pod = next((r.pod for r in objects.pods if r.pod.key == target.key), None)
        if pod is None or not pod.group:
            return {target.key}
        keys = [_group_of(pod)]
    else:
        keys = [target.key]
    tree = GroupTree(groups.values())
    return {tree.root_of(key) for key in keys}


def _family(run: Run, key: str) -> list[str]:
    """The keys of the tree ``key`` is in, from its root down, parents first, children in key
    order. Where the root is a parent that does not exist, its children that do (``key``
    among them) stand for it."""
    root = run.tree.root_of(key)
    tops = [run.groups[root]] if root in run.groups else run.tree.children(root)
    return [g.key for top in tops for g in run.tree.descendants(top)]


def _descendants(run: Run, key: str) -> list[str]:
    """``key`` (a known group) and every group under it, parents first."""
    return [g.key for g in run.tree.descendants(run.groups[key])]


def _group_of(pod: Pod) -> str:
    """The key of a grouped pod's PodGroup."""
    return str(GroupKey(pod.namespace, pod.group or ""))


# ----- phase 3: the report -------------------------------------------------------------------


@dataclass(slots=True, kw_only=True)
class GroupReport:
    key: str
    kind: str
    summary: str
    """Policy and pod counts, e.g. ``gang, minCount 4, topology rack; 4 pending, 0 bound``."""
    decision: GroupDecision | None
    placed: list[Binding] = field(default_factory=list)
    hints: list[str] = field(default_factory=list)
    preemption: PreemptionPlan | None = None
    """For a root group left unschedulable: the pods evicting which would make it fit, or
    why it does not preempt."""
    preempting: str | None = None
    """What the operator's status says while room is nominated for the group (its
    ``PodGroupScheduled`` condition, reason ``Preempting``), as read from the cluster."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.key,
            "kind": self.kind,
            "summary": self.summary,
            "decision": self.decision.to_dict() if self.decision is not None else None,
            "bindings": [b.to_dict() for b in self.placed],
            "hints": list(self.hints),
            "preemption": self.preemption.to_dict() if self.preemption is not None else None,
            "preempting": self.preempting,
        }


@dataclass(slots=True, kw_only=True)
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
    if group.preemption is not None:
        lines += _render_preemption(group.preemption)
    if group.preempting is not None:
        lines.append(f"  the operator is preempting for it: {group.preempting}")
    return lines


VICTIMS_SHOWN = 8
"""Victims listed one per line; the rest are counted."""


def _render_preemption(plan: PreemptionPlan) -> list[str]:
    lines = [f"  preemption: {plan.outcome.value}: {plan.message}"]
    for victim in plan.victims[:VICTIMS_SHOWN]:
        gpus = ",".join(map(str, victim.gpus)) or "-"
        lines.append(
            f"  - evict {victim.pod} (priority {victim.priority}) on {victim.node} GPUs {gpus}"
        )
    if len(plan.victims) > VICTIMS_SHOWN:
        lines.append(f"  - … and {len(plan.victims) - VICTIMS_SHOWN} more")
    return lines


def explain(run: Run, target: Target) -> Explanation:
    """The report about ``target``; `ExplainError` when there is no such object."""
    if target.kind == "Pod":
        return _explain_pod(run, target)
    invalid = run.objects.invalid_workloads.get(target.key)
    if target.kind == "Workload" and invalid is not None:
        return Explanation(
            target=target, headline=f"Workload {target.key}: Invalid", pod_lines=[invalid]
        )
    keys = _target_groups(run, target)
    explanation = Explanation(target=target, headline=_group_headline(run, target, keys))
    for key in keys:
        explanation.groups.append(_group_report(run, key))
        explanation.highlight.add(key)
    return explanation


def _target_groups(run: Run, target: Target) -> list[str]:
    if target.kind == "Workload":
        groups = run.objects.workload_groups().get(target.key)
        if not groups:
            raise ExplainError(f"Workload {target.key} not found (or it has no templates)")
        roots = sorted({k for k in groups if run.groups.get(k, None) is not None})
        ordered: list[str] = []
        for key in roots:
            parent = run.groups[key].parent
            if parent is None or parent not in groups:
                ordered += [k for k in _descendants(run, key) if k not in ordered]
        return ordered
    spec = run.groups.get(target.key)
    if spec is None or spec.kind.value != target.kind:
        known = sorted(k for k, g in run.groups.items() if g.kind.value == target.kind)
        shown = ", ".join(known[:10]) + (", …" if len(known) > 10 else "")
        raise ExplainError(f"{target.kind} {target.key} not found (known: {shown or 'none'})")
    return _descendants(run, target.key)


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
        and _group_of(p) == spec.key
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
    pending = sorted(k for k, r in run.pending.items() if r.group_key == key)
    bound = sorted(k for k, b in run.bound.items() if b.pod.group_key == key)
    return pending, bound


def _summary(run: Run, spec: GroupSpec) -> str:
    if spec.invalid is not None:
        return "invalid"
    if spec.kind is GroupKind.COMPOSITE:
        policy = f"minGroupCount {spec.minimum}"
        children = run.tree.children(spec.key)
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
    report = GroupReport(
        key=key, kind=spec.kind.value, summary=_summary(run, spec), decision=decision
    )
    pending, _ = _members(run, key)
    report.placed = [run.bindings[p] for p in pending if p in run.bindings]
    if decision is not None and decision.phase is not Phase.SCHEDULED:
        report.hints = group_hints(run, spec, decision)
    report.preemption = next((p for p in run.preemptions if p.preemptor == key), None)
    report.preempting = _preempting(run, key)
    return report


def _preempting(run: Run, key: str) -> str | None:
    """The group's live status message while the operator holds room for it."""
    group = next((g for g in run.objects.groups if g.key == key), None)
    status = group.status if group is not None else None
    for condition in status.conditions if status is not None else ():
        if condition.type == CONDITION_SCHEDULED and condition.reason == Reason.PREEMPTING:
            return condition.message
    return None


# ----- a pod ---------------------------------------------------------------------------------


def _explain_pod(run: Run, target: Target) -> Explanation:
    key = target.key
    invalid = run.objects.invalid_pods.get(key)
    if invalid is not None:
        return Explanation(target=target, headline=f"Pod {key}: Invalid", pod_lines=[invalid])
    pod = run.pods.get(key)
    if pod is None:
        raise ExplainError(f"Pod {key} not found")
    group_key = _group_of(pod) if pod.group else None
    explanation = Explanation(target=target, headline=f"Pod {key}: {_pod_state(run, pod)}")
    explanation.highlight.add(group_key or key)
    if group_key is not None:
        explanation.pod_lines.append(f"in PodGroup {group_key}")
    failure = run.failures.get(key)
    decided = run.decisions.get(group_key) if group_key is not None else None
    # Its own reason when it is not its group's: gated, or left out beside a placed group.
    beside = decided is not None and decided.phase is Phase.SCHEDULED
    own = failure is not None and (failure.reason is Reason.SCHEDULING_GATED or beside)
    if failure is not None and (own or not (group_key is not None and group_key in run.decisions)):
        explanation.pod_lines += [f"reason: {failure.reason.value}", f"message: {failure.message}"]
    if group_key is not None and group_key in run.groups:
        explanation.groups += [_group_report(run, k) for k in _family(run, group_key)]
    elif failure is not None and key in run.pending:
        explanation.hints = _pod_failure_hints(run, key, failure, group_key)
    return explanation


def _pod_failure_hints(run: Run, key: str, failure: PodFailure, group_key: str | None) -> list[str]:
    if failure.reason is Reason.INVALID:
        return [f"fix the pod: {failure.message}"]
    if failure.reason is Reason.SCHEDULING_GATED:
        return [_ungate_hint(run, [key])]
    if group_key is not None:
        namespace, engine_name = group_key.split("/", 1)
        source, name = split_group_name(engine_name)
        if source is not GroupSource.GPUSCHED:
            return [
                f"create the {source.value} group {namespace}/{name}, or change the pod's group"
            ]
        return [f"create PodGroup {group_key}, or change the pod's {POD_GROUP_LABEL} label"]
    return hints.pod_hints(run.turns.get(key, run.snapshot), run.pending[key], run.policy)


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
        waiting = hints.waiting_hints(spec, decision.waiting, refused)
        if not gated:
            return waiting
        # Ungating is the fix when the gated pods would complete the gang.
        counted = len(pending) + len(bound) - len(gated) - len(refused)
        enough = spec.kind is GroupKind.POD_GROUP and counted + len(gated) >= spec.minimum
        return [_ungate_hint(run, gated)] + ([] if enough else waiting)
    if decision.inherited_from is not None and spec.parent:
        return [f"see {spec.parent}: this group failed with its parent"]
    if spec.kind is GroupKind.COMPOSITE:
        return hints.composite_hints(spec, decision.tried)
    pods = [run.pending[k] for k in pending]
    if not pods:
        return []
    snapshot = run.turns.get(run.tree.root_of(spec.key), run.snapshot)
    held = [
        (run.bound[k].pod, snapshot.index[run.bound[k].node])
        for k in bound
        if run.bound[k].node in snapshot.index
    ]
    return hints.gang_hints(snapshot, spec, pods, run.policy, held)

"""What the engine sees of DRA in one cycle (`View`), and the claims a pod asks for."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from gpusched.api.k8s import Node, Pod
from gpusched.api.selectors import NodeSelectorTerm
from gpusched.engine.devices import Check, ClaimError, RequestDemand
from gpusched.engine.request import PodRequest
from gpusched.engine.result import GroupDecision, Phase, PodFailure, Reason, ScheduleResult
from gpusched.engine.snapshot import BoundPod
from gpusched.scheduler.assignments import Mismatch
from gpusched.scheduler.dra.extended import ExtendedClaim


@dataclass(frozen=True, slots=True)
class ClaimPlan:
    """A claim to allocate for a pod (its requests in order), or, ``joins``, a shared claim
    allocated already that the pod is only added to (its devices are held already)."""

    key: str
    demands: tuple[RequestDemand, ...]
    joins: bool = False


@dataclass(frozen=True, slots=True)
class PodPlan:
    pod: str
    uid: str
    claims: tuple[ClaimPlan, ...]
    extended: ExtendedClaim | None = None
    """For a pod asking ``nvidia.com/gpu`` served by a DeviceClass: the claim to create when
    it lands on a DRA node (its one `ClaimPlan` is keyed by `extended_key`). On a
    device-plugin node nothing is written."""
    node_terms: tuple[NodeSelectorTerm, ...] | None = None
    """Where the shared claims it joins were allocated (None: anywhere)."""

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


def extended_key(pod: Pod) -> str:
    """Stands for the claim of ``pod``'s extended-resource requests until the API server has
    named it (not a valid claim name, so no real claim is ever mistaken for it)."""
    return f"{pod.metadata.namespace}/<extended-resources of {pod.metadata.name}>"


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

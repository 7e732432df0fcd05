"""Preempted pods of a ``batch/v1`` Job that does not survive preemption.

Kubernetes counts every failed pod of a Job against its ``backoffLimit`` (default 6) unless a
``podFailurePolicy`` rule says otherwise. Victims of preemption carry the pod condition
``DisruptionTarget`` before they go (eviction and kube-scheduler's preemption set it, and so do
we), so a Job survives preemption with one rule::

    podFailurePolicy:
      rules:
      - action: Ignore
        onPodConditions:
        - type: DisruptionTarget

Without it a training Job preempted a few times ends ``Failed`` (``BackoffLimitExceeded``).
gpusched still preempts such a Job's pods (refusing them as victims would let a low-priority
Job hold GPUs forever), and warns on the Job: a Warning Event ``PreemptedWithoutPolicy`` at
each preemption (aggregated), naming the rule to add. The Job is read once per preemption of
its pods (one GET), never watched.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from gpusched.api.meta import OwnerReference
from gpusched.scheduler.events import EventRecorder
from gpusched.scheduler.ports import ApiError, ClusterApi, ObjectRef

logger = logging.getLogger(__name__)

WARNING_REASON = "PreemptedWithoutPolicy"
RULE = "podFailurePolicy rule {action: Ignore, onPodConditions: [{type: DisruptionTarget}]}"


def job_owner(owners: list[OwnerReference]) -> OwnerReference | None:
    """The pod's controlling ``batch/v1`` Job, if any."""
    for owner in owners:
        if owner.kind == "Job" and owner.api_version == "batch/v1" and owner.controller:
            return owner
    return None


def survives_preemption(job: Mapping[str, Any]) -> bool:
    """Whether a failure with ``DisruptionTarget`` is ignored (or counted nowhere) by the
    Job's ``podFailurePolicy``: a rule with action ``Ignore`` on that condition."""
    spec = job.get("spec") if isinstance(job.get("spec"), Mapping) else {}
    policy = spec.get("podFailurePolicy") if isinstance(spec, Mapping) else None
    rules = policy.get("rules") if isinstance(policy, Mapping) else None
    for rule in rules if isinstance(rules, list) else []:
        if not isinstance(rule, Mapping) or rule.get("action") != "Ignore":
            continue
        for cond in rule.get("onPodConditions") or []:
            if not isinstance(cond, Mapping) or cond.get("type") != "DisruptionTarget":
                continue
            if cond.get("status", "True") == "True":
                return True
    return False


class JobWarnings:
    def __init__(self, *, api: ClusterApi, events: EventRecorder) -> None:
        self.api = api
        self.events = events

    async def preempted(self, namespace: str, pod: str, owners: list[OwnerReference]) -> None:
        """A pod was evicted: warns on its Job when the Job would count it as a failure."""
        owner = job_owner(owners)
        if owner is None:
            return
        try:
            job = await self.api.get_job(namespace, owner.name)
        except ApiError as error:
            logger.info(
                "cannot read Job %s/%s of a preempted pod: %s", namespace, owner.name, error
            )
            return
        if job is None or survives_preemption(job):
            return
        spec = job.get("spec") if isinstance(job.get("spec"), Mapping) else {}
        limit = spec.get("backoffLimit", 6) if isinstance(spec, Mapping) else 6
        message = (
            f"pod {pod} was preempted; without a {RULE} each preemption counts against "
            f"backoffLimit ({limit}) and can end this Job Failed"
        )
        ref = ObjectRef("batch/v1", "Job", namespace, owner.name, owner.uid or "")
        await self.events.record_now(ref, "Warning", WARNING_REASON, message)

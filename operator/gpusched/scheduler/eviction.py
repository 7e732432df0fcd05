"""The writes a preemption makes on pods: marks, evictions, deletions and records.

`Preemptor` (`gpusched.scheduler.preemptor`) decides what is nominated, released and bound;
`Evictions` carries out what touches the victims and the nominated pods in the cluster:
1. Record a plan (`record`): every victim marked with `PREEMPTION_ANNOTATION`, then every
   nominated pod's place (`gpusched.scheduler.nominations`), so that whoever leads next
   carries the plan on.
2. Evict one eviction unit (`evict_unit`) through the Eviction API (as a PDB allows), or,
   where an eviction is not possible, by deleting the pod with the condition
   ``DisruptionTarget`` (reason ``PreemptionByScheduler``), as kube-scheduler does. A
   ``disruptionMode: All`` unit goes whole or not at all: its first pod is evicted alone, and
   once it is gone the rest of the unit goes even if a PDB refuses (a broken gang left
   running is worse than a budget overrun the planner avoided wherever it could).
3. Settle the units left marked that no plan waits for (`settle_marked`): one part-evicted
   is finished, one never started is unmarked.
Every write is fenced to the term the plan was made in.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum

from gpusched.api.config import PreemptionConfig
from gpusched.engine.holdings import claim_of_holding
from gpusched.engine.preemption import PreemptionPlan, Victim
from gpusched.scheduler import metrics
from gpusched.scheduler.clock import Clock
from gpusched.scheduler.events import EventRecorder
from gpusched.scheduler.jobs import JobWarnings
from gpusched.scheduler.leadership import Leadership
from gpusched.scheduler.ledger import PREEMPTION_ANNOTATION, Ledger, Release
from gpusched.scheduler.nominations import NOMINATION_ANNOTATION, Mark, places
from gpusched.scheduler.ports import ApiError, ClusterApi, Fence, FencedError, ObjectRef
from gpusched.scheduler.records import Nomination, PodRecord
from gpusched.scheduler.refs import pod_ref
from gpusched.scheduler.tasks import Background
from gpusched.scheduler.views import VictimsView

logger = logging.getLogger(__name__)

GONE = (404, 409)
"""Answers that say the victim is gone already: not found, or its uid precondition failed (a
new pod of the same name is not the victim)."""


class Evicted(Enum):
    EVICTED = "evicted"
    GONE = "gone"
    REFUSED = "refused"
    FAILED = "failed"
    FENCED = "fenced"


@dataclass(kw_only=True, eq=False)
class Evictions:
    """Every write a preemption makes on pods (wired by `build_scheduler`)."""

    settings: PreemptionConfig
    state: VictimsView
    ledger: Ledger
    api: ClusterApi
    events: EventRecorder
    leadership: Leadership
    clock: Clock
    background: Background
    jobs: JobWarnings = field(init=False)
    _units: set[str] = field(init=False, default_factory=set)
    """Eviction units being marked, evicted or unmarked now."""
    _retry_at: dict[str, float] = field(init=False, default_factory=dict)
    """Marked units whose finishing failed, and when to try again (our clock)."""
    _sent: set[str] = field(init=False, default_factory=set)
    """Victims this replica evicted or deleted that the watch still shows (so a unit
    whose deletions the watch has not caught up with is not taken for untouched)."""

    def __post_init__(self) -> None:
        self.jobs = JobWarnings(api=self.api, events=self.events)

    def settling(self, unit: str) -> bool:
        """Whether eviction unit ``unit`` is being marked, evicted or unmarked now."""
        return unit in self._units

    # ----- a plan's writes ---------------------------------------------------------------------

    async def record(self, plan: PreemptionPlan, nomination: Nomination, term: int) -> str | None:
        """Writes the plan's record (`gpusched.scheduler.nominations`): every victim marked,
        then every nominated pod's place. None once written; else why not, and what was
        written is taken back."""
        units = units_of(v for v in plan.victims if self._present(nomination, v))
        refs = [[self._victim_ref(nomination, v) for v in unit] for unit in units]
        marks = [
            self._mark_of(unit_refs, plan.preemptor, nomination.plan, unit[0].unit)
            for unit, unit_refs in zip(units, refs, strict=True)
        ]
        victims = [
            (ref, mark) for unit_refs, mark in zip(refs, marks, strict=True) for ref in unit_refs
        ]
        if not await self._write(PREEMPTION_ANNOTATION, victims, term):
            return "its victims could not be marked for eviction"
        pods = [nominated_ref(nomination, b.pod) for b in plan.bindings]
        recorded = places(plan, nomination.plan, freed_claims(plan.victims))
        if not await self._write(
            NOMINATION_ANNOTATION,
            [(r, p.to_json()) for r, p in zip(pods, recorded, strict=True)],
            term,
        ):
            await self._write(PREEMPTION_ANNOTATION, [(ref, None) for ref, _ in victims], term)
            return "its pods' nominated places could not be recorded"
        return None

    async def evict_unit(
        self,
        plan: PreemptionPlan,
        nomination: Nomination,
        victims: list[Victim],
        term: int,
        finish: bool = False,
    ) -> tuple[Release, str] | None:
        """Evicts one unit whole (see `_evict_whole`); returns the (release, why) that ends
        the plan, or None. Victims terminating already are not evicted again."""
        present = [v for v in victims if self._present(nomination, v) and not self._going(v)]
        if not present:
            return None
        unit = victims[0].unit
        self._units.add(unit)
        try:
            return await self._evict_whole(plan, nomination, unit, present, term, finish)
        finally:
            self._units.discard(unit)

    async def _evict_whole(
        self,
        plan: PreemptionPlan,
        nomination: Nomination,
        unit: str,
        present: list[Victim],
        term: int,
        finish: bool,
    ) -> tuple[Release, str] | None:
        """Evicts the unit's first pod alone (a refusal there unmarks the unit, untouched),
        then the rest, deleting those an eviction cannot move; with ``finish`` (a unit begun
        by a previous leader), all of them at once in that way. A unit left part-evicted
        keeps its marks: the next cycle of whoever leads finishes it (`_settle_marked`, or
        this plan taken over)."""
        targets = [(v, self._victim_ref(nomination, v)) for v in present]
        if not finish:
            first = await self._evict(plan.preemptor, plan.priority, *targets[0], term)
            if first in (Evicted.REFUSED, Evicted.FENCED, Evicted.FAILED):
                if first is not Evicted.FENCED:
                    await self._unmark([ref for _, ref in targets], term)
                if first is Evicted.FAILED:
                    return Release.PLAN_FAILED, f"{present[0].pod} could not be evicted"
                if first is Evicted.FENCED:
                    return Release.PLAN_STALE, "this replica may no longer write"
                return Release.PLAN_STALE, f"the eviction of {present[0].pod} was refused"
            targets = targets[1:]
        rest = await asyncio.gather(
            *(
                self._evict(plan.preemptor, plan.priority, v, ref, term, may_delete=True)
                for v, ref in targets
            )
        )
        failed = [v.pod for (v, _), r in zip(targets, rest, strict=True) if r is Evicted.FAILED]
        if failed or Evicted.FENCED in rest:
            logger.error("%s: unit %s only partly evicted: %s", plan.preemptor, unit, failed)
            why = f"{', '.join(failed) or 'some victims'} could not be evicted"
            return Release.PLAN_FAILED, why
        return None

    def _present(self, nomination: Nomination, victim: Victim) -> bool:
        uid = nomination.victims.get(victim.pod)
        return uid is not None and self.state.victim_present(victim.pod, uid)

    def _going(self, victim: Victim) -> bool:
        record = self.state.pods.get(victim.pod)
        return record is not None and record.deleting

    @staticmethod
    def _victim_ref(nomination: Nomination, victim: Victim) -> ObjectRef:
        namespace, name = victim.pod.split("/", 1)
        return ObjectRef("v1", "Pod", namespace, name, nomination.victims.get(victim.pod, ""))

    def _mark_of(self, refs: list[ObjectRef], preemptor: str, plan: str, unit: str) -> str:
        """The unit's mark. A unit part-evicted before keeps the size it had when first
        marked (re-marked with fewer pods, it would look untouched)."""
        found = (Mark.parse(self.ledger.marked.get(ref.key, "")) for ref in refs)
        sizes = [m.size for m in found if m is not None and m.unit == unit]
        return Mark(preemptor, unit, max([len(refs), *sizes]), plan).to_json()

    async def _write(
        self, annotation: str, values: Sequence[tuple[ObjectRef, str | None]], term: int
    ) -> bool:
        """Writes ``annotation`` on each pod; on a failure, removes it from those written
        and says False."""
        fence = self.leadership.fence(term)
        answers = await asyncio.gather(
            *(self._annotate(ref, annotation, value, fence) for ref, value in values)
        )
        if all(answers):
            return True
        written = [ref for (ref, _), ok in zip(values, answers, strict=True) if ok]
        await asyncio.gather(*(self._annotate(ref, annotation, None, fence) for ref in written))
        return False

    async def _unmark(self, refs: list[ObjectRef], term: int) -> None:
        await self._write(PREEMPTION_ANNOTATION, [(ref, None) for ref in refs], term)

    async def clear_places(self, refs: list[ObjectRef], term: int) -> None:
        await self._write(NOMINATION_ANNOTATION, [(ref, None) for ref in refs], term)

    async def _annotate(
        self, ref: ObjectRef, annotation: str, value: str | None, fence: Fence
    ) -> bool:
        """Whether the annotation is written (or the pod is gone, which needs none)."""
        try:
            await self.api.annotate_pod(ref, {annotation: value}, fence)
        except ApiError as error:
            if error.status in GONE:
                return True
            logger.warning("could not annotate %s: %s", ref.key, error)
            return False
        return True

    async def _evict(
        self,
        preemptor: str,
        priority: int | None,
        victim: Victim,
        ref: ObjectRef,
        term: int,
        *,
        may_delete: bool = False,
    ) -> Evicted:
        fence = self.leadership.fence(term)
        try:
            await self.api.evict(ref, fence)
            outcome = Evicted.EVICTED
        except FencedError:
            return Evicted.FENCED
        except ApiError as error:
            if error.status in GONE:
                return Evicted.GONE
            if error.status == 429 and not may_delete:
                logger.info("eviction of %s refused: %s", victim.pod, error.message)
                return Evicted.REFUSED
            outcome = await self._delete(ref, fence, error)
        if outcome in (Evicted.EVICTED, Evicted.GONE):
            self._sent.add(victim.pod)
        if outcome is Evicted.EVICTED:
            await self._evicted(preemptor, priority, victim, ref)
        return outcome

    async def _delete(self, ref: ObjectRef, fence: Fence, why: ApiError) -> Evicted:
        """kube-scheduler's way: mark the pod a disruption target, then delete it."""
        logger.info("eviction of %s not possible (%s): deleting it", ref.key, why)
        condition = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "message": f"{self.state.scheduler_name}: preempting to make room for a "
            "higher-priority group",
        }
        try:
            await self.api.patch_pod_status(ref, {"conditions": [condition]}, fence)
            await self.api.delete_pod(ref, fence)
        except FencedError:
            return Evicted.FENCED
        except ApiError as error:
            if error.status in GONE:
                return Evicted.GONE
            logger.warning("could not delete %s: %s", ref.key, error)
            return Evicted.FAILED
        return Evicted.EVICTED

    async def _evicted(
        self, preemptor: str, priority: int | None, victim: Victim, ref: ObjectRef
    ) -> None:
        metrics.EVICTED_PODS.inc()
        metrics.EVICTED_GPUS.inc(len(victim.gpus))
        rank = f" (priority {priority})" if priority is not None else ""
        message = f"Preempted by {preemptor}{rank} on node {victim.node}"
        await self.events.record_now(ref, "Normal", "Preempted", message)
        record = self.state.pods.get(victim.pod)
        if record is not None:
            owners = record.pod.metadata.owner_references
            await self.jobs.preempted(ref.namespace, ref.name, owners)

    async def nominated_node(self, key: str, node: str | None) -> None:
        """Sets (or, with None, clears) the pod's ``status.nominatedNodeName``."""
        record = self.state.pods.get(key)
        if record is None or record.node is not None:
            return
        namespace, name = key.split("/", 1)
        ref = ObjectRef("v1", "Pod", namespace, name, record.uid)
        try:
            await self.api.patch_pod_status(ref, {"nominatedNodeName": node})
        except ApiError as error:
            # Informational only: the ledger holds the room whatever the pod says.
            logger.debug("nominatedNodeName of %s not written: %s", key, error)

    # ----- units left marked -------------------------------------------------------------------

    def settle_marked(self, term: int) -> None:
        """Units whose pods carry a mark, that no nomination waits for and that no eviction
        of this replica is working on (a plan released, or one whose leader went and whose
        record did not hold): one with a pod gone since it was marked is finished (evicted
        whole), one with every pod still there was never started and is unmarked."""
        self._sent.intersection_update(self.state.pods)
        waited = {key for n in self.ledger.nominations.values() for key in n.victims}
        units: dict[str, list[tuple[str, Mark]]] = {}
        for key, raw in self.ledger.marked.items():
            record = self.state.pods.get(key)
            mark = Mark.parse(raw)
            if record is None or record.deleting or key in self._sent or key in waited:
                continue
            if mark is not None:
                units.setdefault(mark.unit, []).append((key, mark))
        for unit in set(self._retry_at) - set(units):
            del self._retry_at[unit]  # settled meanwhile
        now = self.clock()
        for unit, marks in sorted(units.items()):
            if unit in self._units or self._retry_at.get(unit, 0.0) > now:
                continue
            self._units.add(unit)
            self.background.spawn(self._settle(unit, marks, term))

    async def _settle(self, unit: str, marks: list[tuple[str, Mark]], term: int) -> None:
        try:
            # A unit is a group's pods, or pods marked with it (one pod, or pods joined by
            # a ResourceClaim they share).
            grouped = self.state.descendants(unit) if unit in self.state.groups else []
            marked = [self.state.pods.get(key) for key, _ in marks]
            candidates = [*self.state.pods_of(grouped), *(r for r in marked if r is not None)]
            members = [
                r
                for r in {r.key: r for r in candidates}.values()
                if r.node is not None
                and not r.pod.is_terminal
                and not r.deleting
                and r.key not in self._sent
            ]
            size = max(mark.size for _, mark in marks)
            preemptor = marks[0][1].preemptor
            if len(members) >= size:
                logger.info("%s: marked for %s, never started: unmarked", unit, preemptor)
                await self._unmark([pod_ref(r) for r in marked if r is not None], term)
                return
            logger.warning("%s: left part-evicted for %s: evicting the rest", unit, preemptor)
            outcomes = await asyncio.gather(
                *(
                    self._evict(
                        preemptor, None, _victim_of(r, unit), pod_ref(r), term, may_delete=True
                    )
                    for r in members
                )
            )
            if Evicted.FAILED in outcomes:
                self._retry_at[unit] = self.clock() + self.settings.eviction_retry_seconds
            else:
                self._retry_at.pop(unit, None)
        finally:
            self._units.discard(unit)
            self.background.wake()


def nominated_ref(nomination: Nomination, key: str) -> ObjectRef:
    """The nominated pod ``key`` as it was when nominated (its uid a precondition)."""
    namespace, name = key.split("/", 1)
    return ObjectRef("v1", "Pod", namespace, name, nomination.pods.get(key, ""))


def units_of(victims: Iterable[Victim]) -> list[list[Victim]]:
    """Victims by eviction unit, in the plan's order."""
    units: dict[str, list[Victim]] = {}
    for victim in victims:
        units.setdefault(victim.unit, []).append(victim)
    return list(units.values())


def freed_claims(victims: Iterable[Victim]) -> list[tuple[str, str]]:
    """(node, ResourceClaim ``namespace/name``) of each claim the victims' eviction frees."""
    found = []
    for victim in victims:
        for holding in victim.claims:
            claim = claim_of_holding(holding)
            if claim is not None:
                found.append((victim.node, claim))
    return found


def _victim_of(record: PodRecord, unit: str) -> Victim:
    priority = record.request.priority if record.request is not None else 0
    return Victim(
        pod=record.key,
        node=record.node or "",
        gpus=record.assigned or (),
        priority=priority,
        unit=unit,
    )

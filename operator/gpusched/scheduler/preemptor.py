"""Carrying out preemption plans: nominate the room, evict the victims, bind once they are gone.

For each plan the engine made (`gpusched.engine.preemption.plan_cycle`, outcome Planned),
for a root group or for a pod without a group (keyed, as the engine's queue keys it, by the
pod's own key):
1. Nominate: the preemptor's pods get their planned places as a `Nomination` in the ledger
   (the snapshot counts those GPUs as theirs, and the victims' as no longer held, so no
   other unit is placed there), and ``status.nominatedNodeName``.
2. Record the plan in the cluster (`gpusched.scheduler.nominations`): every victim marked,
   then every nominated pod's place, so that whoever leads next carries the plan on.
3. Evict, one eviction unit after the other, through the Eviction API (as a PDB allows), or,
   where an eviction is not possible, by deleting the pod with the condition
   ``DisruptionTarget`` (reason ``PreemptionByScheduler``), as kube-scheduler does. A
   ``disruptionMode: All`` unit goes whole or not at all: its first pod is evicted alone, and
   once it is gone the rest of the unit goes even if a PDB refuses (a broken gang left
   running is worse than a budget overrun the planner avoided wherever it could).
4. Once every victim is gone (the watch shows it), the nominated places are reserved and
   bound by the `Binder`, exactly where the plan put them, the pods' ResourceClaims
   allocated first as in any bind.

A plan goes stale (a victim refused before its unit started, a node or a preemptor pod went,
the victims outlived ``preemption.nominationTimeoutSeconds``, a higher group's plan takes
its room, a preemptor's ResourceClaim cannot be allocated when the victims are gone):
its room is released, its record cleared, and the group is planned again by the next cycle.
Every write is fenced to the term the plan was made in. A replica taking over holds the room
of each plan recorded in flight again and carries it on (`gpusched.scheduler.nominations`).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import replace
from enum import Enum

from gpusched.api.config import PreemptionConfig
from gpusched.engine.holdings import claim_of_holding
from gpusched.engine.preemption import PreemptionPlan, Victim
from gpusched.engine.result import Binding
from gpusched.engine.snapshot import BoundPod
from gpusched.engine.wording import counted
from gpusched.scheduler import metrics
from gpusched.scheduler.backoff import Backoff
from gpusched.scheduler.binder import Binder
from gpusched.scheduler.clock import Clock
from gpusched.scheduler.dra.allocator import ClaimAllocator
from gpusched.scheduler.dra.view import View
from gpusched.scheduler.events import EventRecorder
from gpusched.scheduler.jobs import JobWarnings
from gpusched.scheduler.leadership import Leadership
from gpusched.scheduler.nominations import (
    NOMINATION_ANNOTATION,
    Mark,
    Recovered,
    nominated_holding,
    places,
    recover,
)
from gpusched.scheduler.ports import ApiError, ClusterApi, Fence, FencedError, ObjectRef
from gpusched.scheduler.records import PodRecord
from gpusched.scheduler.refs import group_ref, pod_ref
from gpusched.scheduler.state import PREEMPTION_ANNOTATION, ClusterState, Nomination
from gpusched.scheduler.tasks import Background

logger = logging.getLogger(__name__)

GONE = (404, 409)
"""Answers that say the victim is gone already: not found, or its uid precondition failed (a
new pod of the same name is not the victim)."""
NAMED_VICTIMS = 10
"""How many victims an Event on the preemptor names (then a count)."""


class Evicted(Enum):
    EVICTED = "evicted"
    GONE = "gone"
    REFUSED = "refused"
    FAILED = "failed"
    FENCED = "fenced"


class Preemptor:
    def __init__(
        self,
        settings: PreemptionConfig,
        state: ClusterState,
        api: ClusterApi,
        binder: Binder,
        claims: ClaimAllocator,
        events: EventRecorder,
        leadership: Leadership,
        backoff: Backoff,
        clock: Clock,
        background: Background,
    ) -> None:
        self.settings = settings
        self.state = state
        self.api = api
        self.binder = binder
        self.claims = claims
        self.events = events
        self.leadership = leadership
        self.backoff = backoff
        self.clock = clock
        self.background = background
        self.jobs = JobWarnings(api=api, events=events)
        self._evicting: set[str] = set()
        """Roots whose evictions are in flight."""
        self._units: set[str] = set()
        """Eviction units being marked, evicted or unmarked now."""
        self._retry_at: dict[str, float] = {}
        """Marked units whose finishing failed, and when to try again (our clock)."""
        self._sent: set[str] = set()
        """Victims this replica evicted or deleted that the watch still shows (so a unit
        whose deletions the watch has not caught up with is not taken for untouched)."""
        self._plans: dict[str, PreemptionPlan] = {}
        """The plan of each root holding a nomination (kept until it is released or bound)."""
        self._binding: dict[str, tuple[float, tuple[str, ...]]] = {}
        """Roots bound into their nominated room: when nominated, and the pods (the
        nomination-to-bound metric is observed once all show bound)."""
        self._recovered_in: int | None = None
        """The term whose plans in flight were taken over from the cluster."""

    # ----- from the loop -----------------------------------------------------------------------

    def preempt(self, plans: Iterable[PreemptionPlan], term: int) -> None:
        """Nominates each Planned plan's room and starts evicting its victims."""
        for planned in plans:
            if not planned.planned or planned.preemptor in self.state.nominations:
                continue
            if any(v.unit in self._units for v in planned.victims):
                continue  # a unit being settled now: its marks would race; planned next cycle
            plan = self._displace(planned, term)
            nomination = self._nominate(plan)
            if nomination is None:
                metrics.PREEMPTIONS.labels("stale").inc()
                continue
            metrics.PREEMPTIONS.labels("planned").inc()
            logger.info("%s: preempting: %s", plan.preemptor, plan.message)
            self._plans[plan.preemptor] = plan
            self._evicting.add(plan.preemptor)
            self.background.spawn(self._carry_out(plan, nomination, term))

    def _displace(self, plan: PreemptionPlan, term: int) -> PreemptionPlan:
        """A plan whose victims include pods nominated for a lower group (the room held for
        it counts as theirs) takes that room over: the lower nomination is released, its
        pods are pending again (never evicted: they are not bound), and the victims it was
        waiting for become this plan's, whole units as they were planned."""
        owners = {key: n for n in self.state.nominations.values() for key in n.pods}
        displaced = {owners[v.pod].root: owners[v.pod] for v in plan.victims if v.pod in owners}
        if not displaced:
            return plan
        victims = [v for v in plan.victims if v.pod not in owners]
        for root, lower in sorted(displaced.items()):
            earlier = self._plans.get(root)
            if earlier is not None:
                victims.extend(
                    v
                    for v in earlier.victims
                    if v.pod in lower.victims and v.pod in self.state.pods  # not gone yet
                )
            why = f"{plan.preemptor}, of higher priority, takes its room"
            self._release(lower, why, "stale", term)
        return replace(plan, victims=tuple(victims))

    def advance(self, term: int) -> None:
        """Takes over the plans in flight once a term, releases stale nominations, binds
        those whose victims are all gone, and settles the units left marked."""
        if self._recovered_in != term:
            self._recovered_in = term
            self._recover(term)
        self._settle_marked(term)
        for root, nomination in list(self.state.nominations.items()):
            why = self._stale(nomination)
            if why is not None:
                self._release(nomination, why, "stale", term)
            elif root not in self._evicting and not self._waiting_for(nomination):
                self._bind(nomination, term)
        self._watch_bound()

    def _recover(self, term: int) -> None:
        """The plans a previous leader (or this replica, before a restart) left in flight:
        their room is held again and their evictions carried on; records that no longer
        hold are cleared."""
        recovered, stale = recover(self.state, self.clock())
        for found in recovered:
            self._resume(found, term)
        if stale:
            refs = [pod_ref(record) for record in stale]
            self.background.spawn(self._clear_places(refs, term))

    def _resume(self, found: Recovered, term: int) -> None:
        nomination, plan = found.nomination, found.plan
        logger.info("%s: preemption taken over: %s", plan.preemptor, plan.message)
        metrics.PREEMPTIONS.labels("recovered").inc()
        self.state.nominate(nomination)
        self._plans[plan.preemptor] = plan
        self._evicting.add(plan.preemptor)
        self.background.spawn(self._carry_out(plan, nomination, term, found.started))

    # ----- nominating ----------------------------------------------------------------------------

    def _nominate(self, plan: PreemptionPlan) -> Nomination | None:
        """The room of ``plan`` held for its preemptor; None when the plan no longer holds
        (a preemptor pod changed, a node or a victim went) and the next cycle plans afresh."""
        pods: dict[str, str] = {}
        holdings: list[BoundPod] = []
        for binding in plan.bindings:
            record = self.state.pods.get(binding.pod)
            if (
                record is None
                or record.request is None
                or record.node is not None
                or record.deleting
                or binding.pod in self.state.reservations
                or binding.node not in self.state.nodes
            ):
                return None
            pods[binding.pod] = record.uid
            request = nominated_holding(record.request, binding.gpus)
            holdings.append(BoundPod(request, binding.node, binding.gpus))
        victims: dict[str, str] = {}
        for victim in plan.victims:
            record = self.state.pods.get(victim.pod)
            if record is None:
                # Gone since the plan was made (its room may be free now): plan afresh.
                logger.info("%s: victim %s is no pod we know", plan.preemptor, victim.pod)
                return None
            victims[victim.pod] = record.uid
        claims = sorted({c for _, c in _claims(plan.victims)})
        nomination = Nomination(
            plan.preemptor,
            pods,
            tuple(holdings),
            victims,
            self.clock(),
            plan=uuid.uuid4().hex[:12],
            claims=tuple(claims),
        )
        self.state.nominate(nomination)
        return nomination

    def _stale(self, nomination: Nomination) -> str | None:
        for key, uid in nomination.pods.items():
            record = self.state.pods.get(key)
            if record is None or record.uid != uid or record.deleting:
                return f"its pod {key} is gone"
            if record.node is not None:
                return f"its pod {key} was bound meanwhile"
        for holding in nomination.holdings:
            if holding.node not in self.state.nodes:
                return f"node {holding.node} is gone"
        timeout = self.settings.nomination_timeout_seconds
        if self.clock() - nomination.since > timeout:
            return f"its victims were not gone after {timeout:g} s"
        return None

    def _waiting_for(self, nomination: Nomination) -> bool:
        """Whether a victim still holds its room: the pod, or a ResourceClaim its eviction
        frees that kube-controller-manager has not deallocated (or deleted) yet."""
        if any(self.state.victim_present(k, u) for k, u in nomination.victims.items()):
            return True
        return any(self._allocated(key) for key in nomination.claims)

    def _allocated(self, key: str) -> bool:
        claim = self.claims.book.claims.get(key)
        return claim is not None and claim.status.allocation is not None

    def _release(self, nomination: Nomination, why: str, result: str, term: int) -> None:
        """Gives the room back and clears its record; the victims' marks are settled by
        `_settle_marked` (a started unit is finished, the others unmarked)."""
        if self.state.nominations.get(nomination.root) is not nomination:
            return  # released already (or by a lost leadership)
        logger.info("%s: preemption released, planned again: %s", nomination.root, why)
        metrics.PREEMPTIONS.labels(result).inc()
        self.state.release_nomination(nomination.root)
        self._plans.pop(nomination.root, None)
        self._forget(nomination, term)
        self.background.wake()

    def _forget(self, nomination: Nomination, term: int) -> None:
        """Clears the pods' ``nominatedNodeName`` and their recorded places."""
        for key in nomination.pods:
            self.background.spawn(self._nominated_node(key, None))
        refs = [self._pod_ref(nomination, key) for key in nomination.pods]
        self.background.spawn(self._clear_places(refs, term))

    # ----- evicting ----------------------------------------------------------------------------

    async def _carry_out(
        self,
        plan: PreemptionPlan,
        nomination: Nomination,
        term: int,
        started: frozenset[str] | None = None,
    ) -> None:
        """Announces and records a new plan, then evicts its units one after the other.
        ``started``: for a plan taken over from its record, which is not announced nor
        recorded again, the units its first leader had begun (they go whole at once)."""
        root = plan.preemptor
        try:
            if started is None:
                self._announce(plan)
                why = await self._record(plan, nomination, term)
                if why is not None:
                    self._release(nomination, why, "failed", term)
                    return
            for victims in _units(plan.victims):
                if self.state.nominations.get(root) is not nomination:
                    return  # released meanwhile: never start another unit
                finish = started is not None and victims[0].unit in started
                why_not = await self._evict_unit(plan, nomination, victims, term, finish)
                if why_not is not None:
                    self._release(nomination, why_not[1], why_not[0], term)
                    return
            metrics.PREEMPTIONS.labels("evicted").inc()
        finally:
            self._evicting.discard(root)
            self.background.wake()

    async def _record(self, plan: PreemptionPlan, nomination: Nomination, term: int) -> str | None:
        """Writes the plan's record (`gpusched.scheduler.nominations`): every victim marked,
        then every nominated pod's place. None once written; else why not, and what was
        written is taken back."""
        units = _units(v for v in plan.victims if self._present(nomination, v))
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
        pods = [self._pod_ref(nomination, b.pod) for b in plan.bindings]
        recorded = places(plan, nomination.plan, _claims(plan.victims))
        if not await self._write(
            NOMINATION_ANNOTATION,
            [(r, p.to_json()) for r, p in zip(pods, recorded, strict=True)],
            term,
        ):
            await self._write(PREEMPTION_ANNOTATION, [(ref, None) for ref, _ in victims], term)
            return "its pods' nominated places could not be recorded"
        return None

    async def _evict_unit(
        self,
        plan: PreemptionPlan,
        nomination: Nomination,
        victims: list[Victim],
        term: int,
        finish: bool = False,
    ) -> tuple[str, str] | None:
        """Evicts one unit whole (see `_evict_whole`); returns the (result, why) that ends
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
    ) -> tuple[str, str] | None:
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
                    return "failed", f"{present[0].pod} could not be evicted"
                if first is Evicted.FENCED:
                    return "stale", "this replica may no longer write"
                return "stale", f"the eviction of {present[0].pod} was refused"
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
            return "failed", f"{', '.join(failed) or 'some victims'} could not be evicted"
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

    @staticmethod
    def _pod_ref(nomination: Nomination, key: str) -> ObjectRef:
        namespace, name = key.split("/", 1)
        return ObjectRef("v1", "Pod", namespace, name, nomination.pods.get(key, ""))

    def _mark_of(self, refs: list[ObjectRef], preemptor: str, plan: str, unit: str) -> str:
        """The unit's mark. A unit part-evicted before keeps the size it had when first
        marked (re-marked with fewer pods, it would look untouched)."""
        found = (Mark.parse(self.state.marked.get(ref.key, "")) for ref in refs)
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

    async def _clear_places(self, refs: list[ObjectRef], term: int) -> None:
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

    # ----- units left marked -------------------------------------------------------------------

    def _settle_marked(self, term: int) -> None:
        """Units whose pods carry a mark, that no nomination waits for and that no eviction
        of this replica is working on (a plan released, or one whose leader went and whose
        record did not hold): one with a pod gone since it was marked is finished (evicted
        whole), one with every pod still there was never started and is unmarked."""
        self._sent.intersection_update(self.state.pods)
        waited = {key for n in self.state.nominations.values() for key in n.victims}
        units: dict[str, list[tuple[str, Mark]]] = {}
        for key, raw in self.state.marked.items():
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

    def _announce(self, plan: PreemptionPlan) -> None:
        """One Event on the preemptor's root group (or on the pod, for a pod without a
        group) naming its victims, and the pods' ``status.nominatedNodeName``."""
        named = ", ".join(v.pod for v in plan.victims[:NAMED_VICTIMS])
        more = len(plan.victims) - NAMED_VICTIMS
        if more > 0:
            named += f" and {more} more"
        message = f"Preempting {counted(len(plan.victims), 'pod')}: {named}. {plan.message}"
        group = self.state.groups.get(plan.preemptor)
        lone = self.state.pods.get(plan.preemptor) if group is None else None
        if group is not None:
            self.events.record(group_ref(group), "Normal", "Preempting", message)
        elif lone is not None:  # a pod without a group preempts for itself
            self.events.record(pod_ref(lone), "Normal", "Preempting", message)
        for binding in plan.bindings:
            self.background.spawn(self._nominated_node(binding.pod, binding.node))

    async def _nominated_node(self, key: str, node: str | None) -> None:
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

    # ----- binding -----------------------------------------------------------------------------

    def _bind(self, nomination: Nomination, term: int) -> None:
        """The victims are gone: the nominated places become reservations and are bound,
        with the ResourceClaims of the pods that ask for some."""
        self.state.release_nomination(nomination.root)
        self._plans.pop(nomination.root, None)
        view = self._claims_view(nomination)
        unready = sorted(view.refused.items())
        if unready:
            # A claim that cannot be allocated now (being deleted, allocated elsewhere, not
            # made yet): nothing is bound, and the group is planned again like any other.
            pod, why = unready[0]
            logger.info("%s: not bound into its room: %s: %s", nomination.root, pod, why)
            metrics.PREEMPTIONS.labels("stale").inc()
            self._forget(nomination, term)
            self.background.wake()
            return
        bindings = [Binding(h.pod.key, h.node, tuple(h.gpus or ())) for h in nomination.holdings]
        logger.info("%s: victims gone, binding into the nominated room", nomination.root)
        self.binder.place(bindings, view, term)
        self.backoff.clear(nomination.root)
        self._binding[nomination.root] = (nomination.since, tuple(nomination.pods))

    def _claims_view(self, nomination: Nomination) -> View:
        """The DRA view of the nominated pods alone: their claims' plans, for the `Binder`
        to allocate them as in a bind the engine decided. No bound pods are passed: where
        the pods go is decided already, and the loop's own view reports what bound pods show."""
        requests = [
            record.request
            for key in nomination.pods
            if (record := self.state.pods.get(key)) is not None and record.request is not None
        ]
        return self.claims.view.build(
            self.state.nodes, (), requests, self.state.pods, self.claims.busy
        )

    def _watch_bound(self) -> None:
        for root, (since, pods) in list(self._binding.items()):
            records = [self.state.pods.get(key) for key in pods]
            if any(
                r is None or (r.node is None and r.key not in self.state.reservations)
                for r in records
            ):
                del self._binding[root]  # gone, or its bind refused: placed afresh
            elif all(r is not None and r.node is not None for r in records):
                metrics.NOMINATION_SECONDS.observe(max(0.0, self.clock() - since))
                del self._binding[root]


def _units(victims: Iterable[Victim]) -> list[list[Victim]]:
    """Victims by eviction unit, in the plan's order."""
    units: dict[str, list[Victim]] = {}
    for victim in victims:
        units.setdefault(victim.unit, []).append(victim)
    return list(units.values())


def _claims(victims: Iterable[Victim]) -> list[tuple[str, str]]:
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
    return Victim(record.key, record.node or "", record.assigned or (), priority, unit)

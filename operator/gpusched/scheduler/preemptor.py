"""Carrying out preemption plans: nominate the room, evict the victims, bind once they are gone.

For each plan the engine made (`gpusched.engine.preemption.plan_cycle`, outcome Planned),
for a root group or for a pod without a group (keyed, as the engine's queue keys it, by the
pod's own key):
1. Nominate: the preemptor's pods get their planned places as a `Nomination` in the ledger
   (the snapshot counts those GPUs as theirs, and the victims' as no longer held, so no
   other unit is placed there), and ``status.nominatedNodeName``.
2. Record the plan in the cluster (`gpusched.scheduler.nominations`): every victim marked,
   then every nominated pod's place, so that whoever leads next carries the plan on.
3. Evict, one eviction unit after the other (`Evictions`, in `gpusched.scheduler.eviction`,
   makes every write on the victims and the nominated pods).
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

import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from gpusched.api.config import PreemptionConfig
from gpusched.engine.preemption import PreemptionPlan
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
from gpusched.scheduler.eviction import Evictions, freed_claims, nominated_ref, units_of
from gpusched.scheduler.ledger import Ledger, Release
from gpusched.scheduler.nominations import Recovered, nominated_holding, recover
from gpusched.scheduler.records import Nomination
from gpusched.scheduler.refs import group_ref, pod_ref
from gpusched.scheduler.tasks import Background
from gpusched.scheduler.views import PlansView

logger = logging.getLogger(__name__)

NAMED_VICTIMS = 10
"""How many victims an Event on the preemptor names (then a count)."""
RESULTS = {
    Release.PLAN_STALE: "stale",
    Release.PLAN_DISPLACED: "stale",
    Release.PLAN_FAILED: "failed",
}
"""The ``gpusched_preemptions`` result of each way a plan is released before its bind."""


@dataclass(kw_only=True, eq=False)
class Preemptor:
    """Plans carried out: their room nominated, released when stale, bound once free, and
    taken over by a new leader; `Evictions` makes the writes on the pods."""

    settings: PreemptionConfig
    state: PlansView
    ledger: Ledger
    evictions: Evictions
    binder: Binder
    claims: ClaimAllocator
    events: EventRecorder
    backoff: Backoff
    clock: Clock
    background: Background
    _evicting: set[str] = field(init=False, default_factory=set)
    """Roots whose evictions are in flight."""
    _plans: dict[str, PreemptionPlan] = field(init=False, default_factory=dict)
    """The plan of each root holding a nomination (kept until it is released or bound)."""
    _binding: dict[str, tuple[float, tuple[str, ...]]] = field(init=False, default_factory=dict)
    """Roots bound into their nominated room: when nominated, and the pods (the
    nomination-to-bound metric is observed once all show bound)."""
    _recovered_in: int | None = field(init=False, default=None)
    """The term whose plans in flight were taken over from the cluster."""

    # ----- from the loop -----------------------------------------------------------------------

    def preempt(self, plans: Iterable[PreemptionPlan], term: int) -> None:
        """Nominates each Planned plan's room and starts evicting its victims."""
        for planned in plans:
            if not planned.planned or planned.preemptor in self.ledger.nominations:
                continue
            if any(self.evictions.settling(v.unit) for v in planned.victims):
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
        owners = {key: n for n in self.ledger.nominations.values() for key in n.pods}
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
            self._release(lower, why, Release.PLAN_DISPLACED, term)
        return replace(plan, victims=tuple(victims))

    def advance(self, term: int) -> None:
        """Takes over the plans in flight once a term, releases stale nominations, binds
        those whose victims are all gone, and settles the units left marked."""
        if self._recovered_in != term:
            self._recovered_in = term
            self._recover(term)
        self.evictions.settle_marked(term)
        for root, nomination in list(self.ledger.nominations.items()):
            why = self._stale(nomination)
            if why is not None:
                self._release(nomination, why, Release.PLAN_STALE, term)
            elif root not in self._evicting and not self._waiting_for(nomination):
                self._bind(nomination, term)
        self._watch_bound()

    def _recover(self, term: int) -> None:
        """The plans a previous leader (or this replica, before a restart) left in flight:
        their room is held again and their evictions carried on; records that no longer
        hold are cleared."""
        recovered, stale = recover(self.state, self.ledger, self.clock())
        for found in recovered:
            self._resume(found, term)
        if stale:
            refs = [pod_ref(record) for record in stale]
            self.background.spawn(self.evictions.clear_places(refs, term))

    def _resume(self, found: Recovered, term: int) -> None:
        nomination, plan = found.nomination, found.plan
        logger.info("%s: preemption taken over: %s", plan.preemptor, plan.message)
        metrics.PREEMPTIONS.labels("recovered").inc()
        self.ledger.nominate(nomination)
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
                or binding.pod in self.ledger.reservations
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
        claims = sorted({c for _, c in freed_claims(plan.victims)})
        nomination = Nomination(
            root=plan.preemptor,
            pods=pods,
            holdings=tuple(holdings),
            victims=victims,
            since=self.clock(),
            plan=uuid.uuid4().hex[:12],
            claims=tuple(claims),
        )
        self.ledger.nominate(nomination)
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

    def _release(self, nomination: Nomination, why: str, release: Release, term: int) -> None:
        """Gives the room back and clears its record; the victims' marks are settled by
        `Evictions.settle_marked` (a started unit is finished, the others unmarked)."""
        if self.ledger.nominations.get(nomination.root) is not nomination:
            return  # released already (or by a lost leadership)
        logger.info("%s: preemption released, planned again: %s", nomination.root, why)
        metrics.PREEMPTIONS.labels(RESULTS[release]).inc()
        self.ledger.release(nomination.root, release)
        self._plans.pop(nomination.root, None)
        self._forget(nomination, term)
        self.background.wake()

    def _forget(self, nomination: Nomination, term: int) -> None:
        """Clears the pods' ``nominatedNodeName`` and their recorded places."""
        for key in nomination.pods:
            self.background.spawn(self.evictions.nominated_node(key, None))
        refs = [nominated_ref(nomination, key) for key in nomination.pods]
        self.background.spawn(self.evictions.clear_places(refs, term))

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
                why = await self.evictions.record(plan, nomination, term)
                if why is not None:
                    self._release(nomination, why, Release.PLAN_FAILED, term)
                    return
            for victims in units_of(plan.victims):
                if self.ledger.nominations.get(root) is not nomination:
                    return  # released meanwhile: never start another unit
                finish = started is not None and victims[0].unit in started
                why_not = await self.evictions.evict_unit(plan, nomination, victims, term, finish)
                if why_not is not None:
                    self._release(nomination, why_not[1], why_not[0], term)
                    return
            metrics.PREEMPTIONS.labels("evicted").inc()
        finally:
            self._evicting.discard(root)
            self.background.wake()

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
            self.background.spawn(self.evictions.nominated_node(binding.pod, binding.node))

    # ----- binding -----------------------------------------------------------------------------

    def _bind(self, nomination: Nomination, term: int) -> None:
        """The victims are gone: the nominated places become reservations and are bound,
        with the ResourceClaims of the pods that ask for some."""
        self.ledger.release(nomination.root, Release.VICTIMS_GONE)
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
        bindings = [
            Binding(pod=h.pod.key, node=h.node, gpus=tuple(h.gpus or ()))
            for h in nomination.holdings
        ]
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
                r is None or (r.node is None and r.key not in self.ledger.reservations)
                for r in records
            ):
                del self._binding[root]  # gone, or its bind refused: placed afresh
            elif all(r is not None and r.node is not None for r in records):
                metrics.NOMINATION_SECONDS.observe(max(0.0, self.clock() - since))
                del self._binding[root]

"""The durable record of a preemption in flight, and how whoever leads next takes it over.

A nomination lives in the ledger of the replica that made it; the cluster keeps what another
replica needs to carry it on. Before the first victim is evicted, fenced to the plan's term:
1. every victim is marked with `PREEMPTION_ANNOTATION` (`Mark`): the preemptor, the plan,
   its eviction unit and the unit's size;
2. then every nominated pod gets `NOMINATION_ANNOTATION` (`Place`): the plan, the preemptor,
   how many pods the plan nominates, the pod's own node and GPUs, and the ResourceClaims on
   that node whose deallocation the room waits for.
The marks go first, so a pod's Place says that all of its plan's victims are marked.

A replica that takes over (`recover`) holds the room again for every plan whose nominated
pods are all still pending with their Place: it waits for the victims still there (those
marked for the plan: terminating ones, and ones the previous leader had not evicted yet) and
binds exactly where the plan said. It never plans such a group afresh, so it never evicts
more than the first plan did. A record that no longer holds (a pod gone or bound, a node gone,
a nominated GPU held by a pod that is no victim of the plan) is cleared, and its victims'
marks are settled like those of any released plan (`Preemptor._settle_marked`).

A Place is left on a pod once it is bound: only pending pods are read back.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpusched.engine.preemption import Outcome, PreemptionPlan, Victim
from gpusched.engine.request import PodRequest
from gpusched.engine.result import Binding
from gpusched.engine.snapshot import BoundPod
from gpusched.scheduler.ledger import Ledger
from gpusched.scheduler.records import Nomination, PodRecord
from gpusched.scheduler.views import PlansView

logger = logging.getLogger(__name__)

NOMINATION_ANNOTATION = "gpusched.io/nomination"
"""On each pod nominated by a preemption in flight: its `Place`, as JSON."""


@dataclass(frozen=True, slots=True)
class Mark:
    """A `gpusched.scheduler.ledger.PREEMPTION_ANNOTATION`: this victim's unit is to be
    evicted whole for ``preemptor``'s plan ``plan``."""

    preemptor: str
    unit: str
    size: int
    """How many pods the unit had when it was first marked: fewer left means it was started."""
    plan: str = ""
    """Empty in a mark that names no plan (written before plans had identities)."""

    def to_json(self) -> str:
        return json.dumps(
            {"preemptor": self.preemptor, "plan": self.plan, "unit": self.unit, "size": self.size}
        )

    @staticmethod
    def parse(raw: str) -> Mark | None:
        """None for a value that is not one of ours (it is left alone)."""
        try:
            value = json.loads(raw)
            mark = Mark(
                str(value["preemptor"]),
                str(value["unit"]),
                int(value["size"]),
                str(value.get("plan") or ""),
            )
        except (ValueError, TypeError, KeyError, AttributeError):
            return None
        return mark if mark.size > 0 else None


@dataclass(frozen=True, slots=True, kw_only=True)
class Place:
    """A `NOMINATION_ANNOTATION`: where the plan ``plan`` of ``root`` puts this pod."""

    plan: str
    root: str
    pods: int
    """How many pods the plan nominates (each carries its own Place)."""
    node: str
    gpus: tuple[int, ...]
    claims: tuple[str, ...] = ()
    """ResourceClaims (``namespace/name``) of victims on this node the room waits for."""

    def to_json(self) -> str:
        return json.dumps(
            {
                "plan": self.plan,
                "root": self.root,
                "pods": self.pods,
                "node": self.node,
                "gpus": list(self.gpus),
                "claims": list(self.claims),
            }
        )

    @staticmethod
    def parse(raw: str) -> Place | None:
        """None for a value that cannot be read (its record is cleared)."""
        try:
            value = json.loads(raw)
            place = Place(
                plan=str(value["plan"]),
                root=str(value["root"]),
                pods=int(value["pods"]),
                node=str(value["node"]),
                gpus=tuple(int(g) for g in value["gpus"]),
                claims=tuple(str(c) for c in value.get("claims") or ()),
            )
        except (ValueError, TypeError, KeyError, AttributeError):
            return None
        return place if place.plan and place.pods > 0 else None


def places(plan: PreemptionPlan, plan_id: str, claims: Iterable[tuple[str, str]]) -> list[Place]:
    """The Place of each pod ``plan`` nominates; ``claims``: (node, claim) the room waits for."""
    by_node: dict[str, list[str]] = {}
    for node, claim in claims:
        by_node.setdefault(node, []).append(claim)
    count = len(plan.bindings)
    return [
        Place(
            plan=plan_id,
            root=plan.preemptor,
            pods=count,
            node=b.node,
            gpus=tuple(b.gpus),
            claims=tuple(sorted(set(by_node.get(b.node, ())))),
        )
        for b in plan.bindings
    ]


def nominated_holding(request: PodRequest, gpus: tuple[int, ...]) -> PodRequest:
    """The request a nominated place holds: a pod whose GPUs come through ResourceClaims
    asks for none itself, so it holds the GPUs the plan gives it."""
    if gpus and not request.gpus and not request.gpu_milli:
        return dataclasses.replace(request, gpus=len(gpus))
    return request


@dataclass(frozen=True, slots=True)
class Recovered:
    """A plan in flight taken over from its record: the room to hold, the plan to carry on
    (its victims: the pods still marked for it), and the units it had started evicting."""

    nomination: Nomination
    plan: PreemptionPlan
    started: frozenset[str]


def recover(
    state: PlansView, ledger: Ledger, now: float
) -> tuple[list[Recovered], list[PodRecord]]:
    """The plans in flight recorded in the cluster that still hold (their victims' marks and
    the room held already read from ``ledger``), and the pods whose record does not (to be
    cleared)."""
    found: dict[tuple[str, str], list[tuple[PodRecord, Place]]] = {}
    stale: list[PodRecord] = []
    for record in state.pending():
        raw = record.pod.metadata.annotations.get(NOMINATION_ANNOTATION)
        if raw is None:
            continue
        place = Place.parse(raw)
        if place is None:
            logger.warning(
                "pod %s: unreadable %s %r: cleared", record.key, NOMINATION_ANNOTATION, raw
            )
            stale.append(record)
            continue
        found.setdefault((place.root, place.plan), []).append((record, place))
    if not found:
        return [], stale
    marks = _marks(ledger)
    occupied = _occupied(state.bound())
    recovered = []
    for (root, plan_id), entries in sorted(found.items(), key=lambda item: item[0]):
        victims = marks.get((root, plan_id), {})
        why = _unusable(state, ledger, root, entries) or _taken(occupied, entries, victims)
        if why is not None:
            logger.info(
                "%s: the preemption a previous leader recorded no longer holds: %s", root, why
            )
            stale.extend(record for record, _ in entries)
            continue
        recovered.append(_rebuild(state, root, plan_id, entries, victims, now))
    return recovered, stale


def _marks(ledger: Ledger) -> dict[tuple[str, str], dict[str, Mark]]:
    """(preemptor, plan) → the victims marked for it that still hold their room."""
    found: dict[tuple[str, str], dict[str, Mark]] = {}
    for key, raw in ledger.marked.items():
        mark = Mark.parse(raw)
        if mark is not None and mark.plan:
            found.setdefault((mark.preemptor, mark.plan), {})[key] = mark
    return found


def _occupied(bound: Iterable[BoundPod]) -> dict[tuple[str, int], str]:
    """(node, GPU) → the key of what holds it."""
    return {(h.node, gpu): h.pod.key for h in bound for gpu in h.gpus or ()}


def _unusable(
    state: PlansView, ledger: Ledger, root: str, entries: list[tuple[PodRecord, Place]]
) -> str | None:
    if root in ledger.nominations:
        return "room is held for it already"
    wanted = entries[0][1].pods
    if len(entries) != wanted or any(place.pods != wanted for _, place in entries):
        return f"{len(entries)} of the {wanted} pods it nominated are pending with it"
    for record, place in entries:
        if record.request is None or state.root_of_request(record.request) != root:
            return f"its pod {record.key} is not one of {root} now"
        if place.node not in state.nodes:
            return f"node {place.node} is gone"
    return None


def _taken(
    occupied: Mapping[tuple[str, int], str],
    entries: list[tuple[PodRecord, Place]],
    victims: Mapping[str, Mark],
) -> str | None:
    ours = {record.key for record, _ in entries}
    for _, place in entries:
        for gpu in place.gpus:
            holder = occupied.get((place.node, gpu))
            if holder is not None and holder not in victims and holder not in ours:
                return f"GPU {gpu} of node {place.node} is held by {holder}, no victim of it"
    return None


def _rebuild(
    state: PlansView,
    root: str,
    plan_id: str,
    entries: list[tuple[PodRecord, Place]],
    marks: Mapping[str, Mark],
    now: float,
) -> Recovered:
    holdings = []
    for record, place in entries:
        assert record.request is not None  # `_unusable` checked it
        holding = nominated_holding(record.request, place.gpus)
        holdings.append(BoundPod(holding, place.node, place.gpus))
    claims = tuple(sorted({c for _, place in entries for c in place.claims}))
    victims = {key: state.pods[key].uid for key in marks}
    nomination = Nomination(
        root=root,
        pods={record.key: record.uid for record, _ in entries},
        holdings=tuple(holdings),
        victims=victims,
        since=now,
        plan=plan_id,
        claims=claims,
    )
    left: list[Victim] = []
    going: dict[str, int] = {}
    """Unit → its marked pods not terminating yet."""
    sizes: dict[str, int] = {}
    for key, mark in sorted(marks.items()):
        record = state.pods[key]
        going[mark.unit] = going.get(mark.unit, 0) + (not record.deleting)
        sizes[mark.unit] = max(sizes.get(mark.unit, 0), mark.size)
        priority = record.request.priority if record.request is not None else 0
        left.append(
            Victim(
                pod=key,
                node=record.node or "",
                gpus=record.assigned or (),
                priority=priority,
                unit=mark.unit,
            )
        )
    # A unit with fewer pods left untouched than it had when marked was started: it goes whole.
    started = frozenset(unit for unit, count in going.items() if count < sizes[unit])
    bindings = tuple(
        Binding(pod=h.pod.key, node=h.node, gpus=tuple(h.gpus or ())) for h in holdings
    )
    plan = PreemptionPlan(
        preemptor=root,
        outcome=Outcome.PLANNED,
        message=f"taken over from a previous leader: waiting for {len(victims)} victims",
        priority=_priority(state, root, entries),
        victims=tuple(left),
        bindings=bindings,
    )
    return Recovered(nomination, plan, started)


def _priority(state: PlansView, root: str, entries: list[tuple[PodRecord, Place]]) -> int:
    group = state.groups.get(root)
    if group is not None and group.spec.priority is not None:
        return group.spec.priority
    return max((r.request.priority for r, _ in entries if r.request is not None), default=0)

"""What this scheduler holds that the watch does not show yet: its own ledger.

- **Reservations** ("assume cache"): the pods this scheduler has decided to bind but the
  watch has not yet shown as bound. A decision never trusts a watch that lags behind our own
  binds (a prototype that did bound 3–4 pods onto a 2-GPU node).
- **Nominations**: the room held for a preemptor while its victims go.
- **Preemption marks**: the `PREEMPTION_ANNOTATION` of the bound pods that carry one.
- **Pins**: the GPUs assumed for bound pods that do not say which they hold (`GpuPins`).

Whatever the ledger holds is let go through one door, `Ledger.release`, which says why as
data (`Release`): it is logged and counted (``gpusched_ledger_releases{why}``), never parsed.

`ClusterState` (the watch cache) owns one ledger and builds the engine's snapshot from both.
Everything here runs on the operator's one event loop and never awaits, so each method is
atomic with respect to the others: the ledger needs no lock of its own.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import Protocol

from gpusched.api.k8s import Node
from gpusched.engine.pins import GpuPins
from gpusched.engine.snapshot import BoundPod
from gpusched.scheduler import metrics
from gpusched.scheduler.records import Nomination, PodRecord, Reservation

logger = logging.getLogger(__name__)

PREEMPTION_ANNOTATION = "gpusched.io/preemption"
"""Written on every pod of an eviction unit before its first eviction (JSON: ``preemptor``,
``unit``, ``size``), so that a unit left part-evicted by a crash or a failure is finished by
whoever leads next, and one never started is unmarked."""


class Held(enum.Enum):
    """What a ledger entry is: keyed by pod (a reservation) or by root group (a nomination;
    a pod without a group is its own root, so the kind tells the two apart)."""

    RESERVATION = "reservation"
    NOMINATION = "nomination"


class Release(enum.Enum):
    """Why the ledger lets go of an entry: what it held, and whether that makes room (a
    room given back moves the capacity generation, so groups backing off retry at once)."""

    def __init__(self, label: str, held: Held, frees: bool) -> None:
        self.label = label
        self.held = held
        self.frees = frees

    # ----- reservations --------------------------------------------------------------------
    BOUND = ("bound", Held.RESERVATION, False)
    """The bind succeeded: the pod's record now says where it is."""
    SEEN_BOUND = ("seen-bound", Held.RESERVATION, False)
    """The watch caught up with our bind (or showed the pod bound elsewhere)."""
    REPLACED = ("replaced", Held.RESERVATION, False)
    """The watch shows another pod of the name."""
    POD_DELETED = ("pod-deleted", Held.RESERVATION, True)
    BIND_FENCED = ("bind-fenced", Held.RESERVATION, True)
    """This replica may no longer write: nothing was sent; whoever leads next decides."""
    BIND_REFUSED = ("bind-refused", Held.RESERVATION, True)
    """The API server refused the bind for good (a 4xx)."""
    CLAIMS_REFUSED = ("claims-refused", Held.RESERVATION, True)
    """The gang's ResourceClaims could not be written: none of its pods is bound."""
    ROOM_TAKEN = ("room-taken", Held.RESERVATION, True)
    """Another scheduler's pod landed in the room before the bind went out."""
    NODE_GONE = ("node-gone", Held.RESERVATION, True)
    READ_BACK = ("read-back", Held.RESERVATION, True)
    """A bind of unknown outcome, read back: the pod is gone, replaced or bound."""
    EXPIRED = ("expired", Held.RESERVATION, True)
    """A reservation of an earlier term whose bind can no longer land."""
    # ----- nominations ---------------------------------------------------------------------
    PLAN_STALE = ("plan-stale", Held.NOMINATION, True)
    """A victim refused, a node or a preemptor pod went, the victims outlived the timeout."""
    PLAN_FAILED = ("plan-failed", Held.NOMINATION, True)
    """An eviction, a delete or the plan's record failed."""
    PLAN_DISPLACED = ("plan-displaced", Held.NOMINATION, True)
    """A higher group's plan takes the room over."""
    VICTIMS_GONE = ("victims-gone", Held.NOMINATION, True)
    """The room is free: the nominated places become reservations and are bound."""
    LEADERSHIP_LOST = ("leadership-lost", Held.NOMINATION, True)
    """Whoever leads next takes the plans in flight over from their record in the cluster."""


class PodsAndNodes(Protocol):
    """What the ledger reads of the watch cache (`ClusterState`)."""

    @property
    def pods(self) -> Mapping[str, PodRecord]: ...

    @property
    def nodes(self) -> Mapping[str, Node]: ...


class Ledger:
    """Reservations, nominations, preemption marks and pins. Read through its read-only
    mappings; written through `reserve`, `nominate`, `mark` and `release`."""

    def __init__(self, watched: PodsAndNodes, changed: Callable[[bool], None]) -> None:
        """``changed(capacity)``: told of every change that could alter a decision;
        ``capacity`` when it makes room."""
        self._watched = watched
        self._changed = changed
        self._reservations: dict[str, Reservation] = {}
        self._reserved_on: dict[str, dict[str, None]] = {}
        """Node → keys of the reservations there (the last check before each bind)."""
        self._nominations: dict[str, Nomination] = {}
        """Root group key → the room held for it while its preemption's victims go."""
        self._promised_holdings: dict[str, tuple[BoundPod, BoundPod]] = {}
        """Victim key → (its holding, the same without GPUs), for `gpus_promised`."""
        self._marked: dict[str, str] = {}
        self.pins = GpuPins()
        """GPUs assumed for bound pods that do not say which they hold (see `GpuPins`)."""

    # ----- reading -----------------------------------------------------------------------------

    @property
    def reservations(self) -> Mapping[str, Reservation]:
        return self._reservations

    @property
    def nominations(self) -> Mapping[str, Nomination]:
        return self._nominations

    @property
    def marked(self) -> Mapping[str, str]:
        """Pod key → its `PREEMPTION_ANNOTATION`, for the bound pods that carry one: victims
        whose eviction unit a preemption has started on (see `gpusched.scheduler.preemptor`)."""
        return self._marked

    def reserved_on(self, node: str) -> Iterator[Reservation]:
        for key in self._reserved_on.get(node, ()):
            yield self._reservations[key]

    def holdings(self) -> Iterator[BoundPod]:
        """What the reservations and nominations hold (the GPUs they name)."""
        for reservation in self._reservations.values():
            yield reservation.holding
        for nomination in self._nominations.values():
            yield from nomination.holdings

    def nominated_pods(self) -> set[str]:
        return {key for n in self._nominations.values() for key in n.pods}

    def promised(self) -> dict[str, str]:
        """Victim key → uid, for every victim whose GPUs a nomination holds already."""
        return {key: uid for n in self._nominations.values() for key, uid in n.victims.items()}

    def gpus_promised(self, key: str, holding: BoundPod) -> BoundPod:
        """A victim on its way out: its GPUs are promised to a nomination (which holds them),
        the rest it holds until it is gone (the kubelet counts it till then). One object per
        holding, so the snapshot cache keeps it."""
        kept = self._promised_holdings.get(key)
        if kept is None or kept[0] is not holding:
            request = replace(holding.pod, gpus=0, gpu_milli=0)
            kept = self._promised_holdings[key] = (holding, BoundPod(request, holding.node, None))
        return kept[1]

    def reserved_gpus(self) -> int:
        return sum(len(r.gpus) for r in self._reservations.values())

    # ----- writing -----------------------------------------------------------------------------

    def reserve(self, key: str, node: str, gpus: tuple[int, ...]) -> Reservation | None:
        """Records a decision before its bind is sent; None when the pod changed meanwhile
        (deleted, bound by someone else) and must not be bound."""
        record = self._watched.pods.get(key)
        if (
            record is None
            or record.request is None
            or record.node is not None
            or record.deleting
            or key in self._reservations
            or node not in self._watched.nodes
        ):
            return None
        holding = BoundPod(record.request, node, gpus)
        reservation = Reservation(record.request, record.uid, node, gpus, holding)
        self._reservations[key] = reservation
        self._reserved_on.setdefault(node, {})[key] = None
        self._changed(False)
        return reservation

    def nominate(self, nomination: Nomination) -> None:
        self._nominations[nomination.root] = nomination
        self._changed(False)

    def mark(self, key: str, mark: str | None) -> None:
        """The pod ``key``'s preemption mark as the watch shows it (None: it has none)."""
        if mark is not None:
            self._marked[key] = mark
        else:
            self._marked.pop(key, None)

    def release(
        self, key: str, why: Release, *, only: Reservation | Nomination | None = None
    ) -> Reservation | Nomination | None:
        """Lets go of what ``key`` holds of the kind ``why`` names (a pod's reservation, or a
        root's nomination), and only that very entry with ``only``; returns what was let go.
        A nomination's pods, or a reservation's pod, are pending again."""
        released: Reservation | Nomination | None
        if why.held is Held.RESERVATION:
            released = self._drop_reservation(key, only)
        else:
            released = self._drop_nomination(key, only)
        if released is None:
            return None
        metrics.LEDGER_RELEASES.labels(why.label).inc()
        logger.debug("%s: %s released (%s)", key, why.held.value, why.label)
        self._changed(why.frees)
        return released

    def release_nominations(self, why: Release) -> None:
        """Every nomination let go (`release` of each)."""
        for root in list(self._nominations):
            self.release(root, why)

    def _drop_reservation(self, key: str, only: object) -> Reservation | None:
        before = self._reservations.get(key)
        if before is None or (only is not None and before is not only):
            return None
        del self._reservations[key]
        keys = self._reserved_on[before.node]
        del keys[key]
        if not keys:
            del self._reserved_on[before.node]
        return before

    def _drop_nomination(self, root: str, only: object) -> Nomination | None:
        before = self._nominations.get(root)
        if before is None or (only is not None and before is not only):
            return None
        del self._nominations[root]
        for key in before.victims:
            self._promised_holdings.pop(key, None)
        return before

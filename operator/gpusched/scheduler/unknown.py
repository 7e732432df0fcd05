"""Binds whose outcome is unknown: kept with their room, read back, and sent again.

A bind without a final answer (no answer, a timeout, a 5xx; or a 404 or 409, which say the pod
may be gone, replaced or bound already) keeps its reservation. It is sent again when due, the
same pod to the same node and GPUs, or first read back when the answer needs checking: what
the pod is now decides. A new leader does the same with the reservations of the term before."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from gpusched.api.config import BIND_TIMEOUT_SECONDS
from gpusched.scheduler.backoff import Backoff
from gpusched.scheduler.clock import Clock
from gpusched.scheduler.ledger import Ledger, Release
from gpusched.scheduler.ports import ApiError, ClusterApi, ObjectRef
from gpusched.scheduler.records import Reservation
from gpusched.scheduler.refs import reserved_ref
from gpusched.scheduler.views import ReadBackView


@dataclass(slots=True, kw_only=True)
class Retry:
    """A bind to send again (or, with ``read_first``, a pod to read back first)."""

    ref: ObjectRef
    reservation: Reservation
    root: str
    attempts: int
    next_try: float
    read_first: bool = False


class Verdict(enum.Enum):
    """What reading a pod back says about its bind."""

    SEND = "send"
    """Still pending, its room free: the same bind goes out again."""
    SETTLED = "settled"
    """Gone, replaced or bound: the pod itself says where, from now on."""
    ROOM_TAKEN = "room-taken"
    """Another scheduler's pod landed in its room meanwhile."""
    UNREAD = "unread"
    """The read failed: it is read again later."""


class UnknownBinds:
    def __init__(
        self, state: ReadBackView, ledger: Ledger, api: ClusterApi, backoff: Backoff, clock: Clock
    ) -> None:
        self.state = state
        self.ledger = ledger
        self.api = api
        self.backoff = backoff
        self.clock = clock
        self._retries: dict[str, Retry] = {}
        """Reserved pods whose bind failed without a final answer: sent again when due."""
        self._sent_at: dict[str, float] = {}
        """When the latest bind of each reserved pod went out (our clock)."""

    def sent(self, key: str, at: float) -> None:
        """The bind of ``key`` goes out at ``at``."""
        self._sent_at[key] = at

    def may_still_land(self, key: str, now: float) -> bool:
        """Whether a bind of ``key`` sent earlier could still be committed by the server (it
        went out less than the bind timeout ago): until then its room is not given away,
        whatever else landed there."""
        return now - self._sent_at.get(key, float("-inf")) <= BIND_TIMEOUT_SECONDS

    def over(self, key: str) -> None:
        """The bind of ``key`` has its final answer."""
        self._sent_at.pop(key, None)

    def keep(
        self,
        key: str,
        ref: ObjectRef,
        reservation: Reservation,
        root: str,
        attempt: int,
        *,
        read_first: bool,
        at_once: bool = False,
    ) -> bool:
        """Keeps the bind to send again after the backoff of ``attempt`` (at once with
        ``at_once``); False when the watch showed the pod bound, replaced or gone meanwhile
        (nothing to keep)."""
        if self.ledger.reservations.get(key) is not reservation:
            return False
        delay = self.backoff.delay(attempt)
        if at_once:
            delay = 0.0  # a GET costs little, and its answer decides what comes next
        self._retries[key] = Retry(
            ref=ref,
            reservation=reservation,
            root=root,
            attempts=attempt + 1,
            next_try=self.clock() + delay,
            read_first=read_first,
        )
        return True

    def take(self, now: float) -> tuple[list[tuple[str, str]], list[tuple[str, Retry]]]:
        """Takes the kept binds that are settled or due: (key, root) of those the watch has
        settled, or whose node is gone (their room is released: the pod is placed afresh),
        and the retries due by ``now``."""
        ended: list[tuple[str, str]] = []
        due: list[tuple[str, Retry]] = []
        for key, retry in list(self._retries.items()):
            reservation = retry.reservation
            if self.ledger.reservations.get(key) is not reservation:
                del self._retries[key]
                ended.append((key, retry.root))
            elif reservation.node not in self.state.nodes:
                del self._retries[key]
                self.ledger.release(key, Release.NODE_GONE, only=reservation)
                ended.append((key, retry.root))
            elif retry.next_try <= now:
                del self._retries[key]
                due.append((key, retry))
        return ended, due

    async def read_back(self, key: str, retry: Retry) -> Verdict:
        """After a 404 or 409, a leadership change, or when another pod took the room: what
        the pod is now decides. Gone or replaced: the room is released. Bound: the pod itself
        says where, from now on. Still pending: the same bind is sent again, unless its GPUs
        are held by another pod now."""
        reservation = retry.reservation
        try:
            body = await self.api.get_pod(retry.ref)
        except ApiError:
            return Verdict.UNREAD
        if body is None:
            self.state.delete_pod(key, reservation.uid)
        elif (body.get("metadata") or {}).get("uid") != reservation.uid:
            self.ledger.release(key, Release.READ_BACK, only=reservation)
        elif (body.get("spec") or {}).get("nodeName"):
            self.state.upsert_pod(body)
        elif self.state.taken_by_others(key, reservation):
            if self.may_still_land(key, self.clock()):
                return Verdict.UNREAD  # the earlier send may yet land: read again later
            return Verdict.ROOM_TAKEN
        else:
            return Verdict.SEND
        return Verdict.SETTLED

    def adopt(self) -> None:
        """Reservations left from an earlier term are binds whose outcome was unknown. The
        fresh list shows most of them bound (dropped by `ClusterState.upsert_pod`) or gone.
        One still pending whose last bind went out more than the bind timeout ago can no
        longer land (the server commits a write within that, or never), so its room is
        released: another leader may have promised it since. One sent more recently keeps
        its room (it may still land) and is read back: sent again, or, once it can no longer
        land, released if another pod holds its GPUs now."""
        now = self.clock()
        for key, reservation in list(self.ledger.reservations.items()):
            if not self.may_still_land(key, now):
                self._retries.pop(key, None)
                self.ledger.release(key, Release.EXPIRED, only=reservation)
            elif key not in self._retries:
                root = self.state.root_of_request(reservation.request)
                ref = reserved_ref(key, reservation)
                self._retries[key] = Retry(
                    ref=ref,
                    reservation=reservation,
                    root=root,
                    attempts=1,
                    next_try=now,
                    read_first=True,
                )

    def next_tries(self) -> list[float]:
        """When each bind waiting to be sent again is due."""
        return [retry.next_try for retry in self._retries.values()]

    def retrying(self, key: str) -> bool:
        """Whether the bind of pod ``key`` waits to be sent again."""
        return key in self._retries

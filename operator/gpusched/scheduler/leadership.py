"""Leadership gating: only the Lease holder decides, binds and writes, and only once it has
read the cluster afresh since it took the Lease (see `gpusched.scheduler.leader`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gpusched.scheduler.ports import Fence


class Leadership:
    """Whether this replica may act, and in which term.

    ``lease`` says whether this replica holds the Lease now (within its renew deadline):
    the elector's ``leading``, or None when this replica schedules alone. ``on_lost`` runs
    whenever leadership is lost: what a replica remembers of the objects it wrote says
    nothing once another one writes them."""

    def __init__(
        self,
        lease: Callable[[], bool] | None = None,
        on_lost: Sequence[Callable[[], None]] = (),
    ) -> None:
        self._lease: Callable[[], bool] = lease or (lambda: True)
        self._on_lost = tuple(on_lost)
        self._synced = lease is None
        """A new leader acts only once its state was read afresh from the API."""
        self.term = 0
        """Bumped whenever this replica stops leading: a decision belongs to the term it was
        made in, and its binds are fenced to that term."""

    def leading(self) -> bool:
        """Whether this replica holds the Lease now (read afresh or not)."""
        return self._lease()

    def may_write(self) -> bool:
        """Whether this replica may write to the cluster now: it leads, within its renew
        deadline, and has read the cluster afresh since it took the Lease. The API client
        asks this at the moment each write goes out (`gpusched.k8s.client`)."""
        return self._synced and self._lease()

    def fence(self, term: int) -> Fence:
        """`may_write`, and only in ``term``: a decision made in an earlier term (before a
        stop, say) is never bound in a later one, whose fresh list it did not see."""
        return lambda: self.term == term and self.may_write()

    def lost(self) -> None:
        """This replica stops leading (or has not read the cluster yet): a new term begins."""
        self._synced = False
        self.term += 1
        for forget in self._on_lost:
            forget()

    def synced(self) -> None:
        """The cluster was read afresh in this term: this replica may act."""
        self._synced = True

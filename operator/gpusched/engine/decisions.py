"""What a planner decided about each group it touched, and the domains tried on the way:
the record it keeps while it searches (`Record`), and a domain tried (`Tried`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from gpusched.api.crds import Reason
from gpusched.engine import wording
from gpusched.engine.domains import Domain
from gpusched.engine.groups import GroupSpec
from gpusched.engine.result import (
    Attempt,
    GroupDecision,
    NodeCheck,
    Phase,
    SegmentPlaced,
    Waiting,
)


@dataclass(frozen=True, slots=True)
class Tried:
    """A domain tried, with why the nodes refused worked out only if the group fails:
    checking a refused domain's nodes walks them, which a successful placement should not
    pay for."""

    attempt: Attempt
    nodes: Callable[[], NodeCheck] | None = None

    def done(self) -> Attempt:
        if self.nodes is None:
            return self.attempt
        return replace(self.attempt, nodes=self.nodes())


@dataclass(slots=True)
class Candidates:
    """A group's candidate domains, best first, and the domains refused before a trial."""

    domains: list[Domain]
    lines: list[Tried] = field(default_factory=list)


class Record:
    """The decisions of one search, with how much of it each one had cost: ``explored``
    counts the (group, domain) pairs looked at so far, backtracking included."""

    def __init__(
        self, descendants: Callable[[GroupSpec], list[GroupSpec]], max_domains_reported: int
    ) -> None:
        """``descendants``: a group and every group under it, parents first."""
        self.descendants = descendants
        self.max_domains_reported = max_domains_reported
        self.decisions: dict[str, GroupDecision] = {}
        self.explored = 0

    def fail(
        self, group: GroupSpec, parent: Domain, lines: list[Tried], final: bool = False
    ) -> None:
        """The group was placed nowhere in ``parent``: its message names every domain tried
        with why in short (up to ``maxDomainsReported``), or the one domain tried in full; its
        attempts say each in full.
        ``final``: the root's last word, which every group under it that did not fit takes
        too (their own reasons were about one of the root's domains only; the root's name
        them all)."""
        limit = self.max_domains_reported
        tried = tuple(line.done() for line in lines[:limit])
        more = max(0, len(lines) - limit)
        # A line about the parent itself (a child without a key of its own) names it once.
        message = wording.no_placement(parent.name if parent.labels else None, tried, more)
        self.decide(
            group,
            Phase.UNSCHEDULABLE,
            Reason.UNSCHEDULABLE,
            message,
            tried=tried,
            attempts=wording.attempt_lines(tried, more),
        )
        self.inherit(group, Phase.UNSCHEDULABLE, Reason.UNSCHEDULABLE, overriding=final)

    def inherit(
        self, group: GroupSpec, phase: Phase, reason: Reason, overriding: bool = False
    ) -> None:
        """Descendants of a group that was not placed are not placed either: each one that
        has no failure of its own gets its ancestor's, so its pods say why. ``overriding``: an
        own Unschedulable is replaced too (a wait for pods never is: that is what to fix)."""
        decision = self.decisions[group.key]
        for member in self.descendants(group)[1:]:
            own = self.decisions.get(member.key)
            replaceable = overriding and own is not None and own.phase is Phase.UNSCHEDULABLE
            if own is None or own.phase is Phase.SCHEDULED or replaceable:
                message = wording.inherited(group.kind.value, group.key, decision.message)
                self.decide(
                    member, phase, reason, message, wait=decision.waiting, inherited=group.key
                )

    def decide(
        self,
        group: GroupSpec,
        phase: Phase,
        reason: Reason,
        message: str,
        domain: Domain | None = None,
        left_out: dict[str, str] | None = None,
        tried: tuple[Attempt, ...] = (),
        attempts: tuple[str, ...] = (),
        wait: Waiting | None = None,
        inherited: str | None = None,
        segments: tuple[SegmentPlaced, ...] = (),
    ) -> None:
        self.decisions[group.key] = GroupDecision(
            name=group.key,
            kind=group.kind.value,
            phase=phase,
            reason=reason,
            message=message,
            placement=domain.placement if domain is not None else {},
            attempts=attempts,
            explored=self.explored,
            left_out=left_out or {},
            tried=tried,
            waiting=wait,
            inherited_from=inherited,
            segments=segments,
        )

"""Who may be evicted, in which pieces, at what cost.

A piece (`EvictionUnit`) is what goes together: every bound pod of a group tree whose highest
``disruptionMode: All`` group is the same (the tree under that group, evicted whole or not at
all), or one pod on its own (no group, or only ``Single`` groups above it). A piece may be
evicted for a preemptor only when every pod in it has a strictly lower priority, no group
above any of them has an unresolved priority, and, when so configured, no pod of it was bound
by another scheduler.

GPUs a pod holds through ResourceClaims reserved for it are held by no pod in the snapshot
(`PodRequest.reserved_for`): they go with the piece of the pods they are reserved for, since
kube-controller-manager frees a claim once every pod reserving it is gone. What no pod's
eviction frees (a claim of no live pod, GPUs a node does not publish) is never a victim.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpusched.api.crds import DisruptionMode
from gpusched.engine import wording
from gpusched.engine.groups import GroupSpec, GroupTree
from gpusched.engine.snapshot import Holding, Snapshot


@dataclass(frozen=True, slots=True)
class DisruptionBudget:
    """A PodDisruptionBudget as the planner needs it: the caller matches its selector."""

    name: str
    """``namespace/name``."""
    allowed: int
    """``status.disruptionsAllowed``: how many of its pods may go now."""
    pods: frozenset[str]
    """Keys of the pods it selects."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EvictionUnit:
    """Pods that are evicted together (see the module's docstring)."""

    key: str
    """The ``All`` group's key, or the pod's key for a pod that goes alone."""
    holdings: tuple[Holding, ...]
    """Its pods', then those of what is no pod that goes with them (a ResourceClaim's
    devices, `PodRequest.reserved_for`)."""
    priority: int
    """The highest priority of its pods (each pod's own, or its groups', whichever is more)."""
    groups: frozenset[str]
    """Root groups it belongs to (a pod without a group counts as its own)."""
    created: float
    """Its oldest pod's creation time."""
    protected: str | None = None
    """Why it is never a victim, whatever the preemptor's priority; None when it may be."""

    @property
    def gpu_milli(self) -> int:
        return sum(h.milli_per_gpu * len(h.gpus) for h in self.holdings)

    @property
    def pods(self) -> tuple[str, ...]:
        return tuple(h.pod.key for h in self.holdings if h.pod.reserved_for is None)

    def credited(self) -> list[tuple[Holding, tuple[Holding, ...]]]:
        """Each pod's holding with the holdings that are no pod credited to it: each to the
        first of the pods it is reserved for."""
        pods = [h for h in self.holdings if h.pod.reserved_for is None]
        keys = {h.pod.key for h in pods}
        credit: dict[str, list[Holding]] = {}
        for other in self.holdings:
            owners = other.pod.reserved_for
            if owners is not None:
                owner = next(o for o in owners if o in keys)
                credit.setdefault(owner, []).append(other)
        return [(h, tuple(credit.get(h.pod.key, ()))) for h in pods]

    def nodes(self) -> set[int]:
        return {h.node for h in self.holdings}


@dataclass(frozen=True, slots=True)
class _GroupFacts:
    """What every pod of one group shares, worked out once per group."""

    whole: str | None
    """The key of its highest ``All`` group (itself or an ancestor), if any."""
    root: str
    roots: frozenset[str]
    """``root`` alone: shared by every piece of the group rather than made for each."""
    priority: int | None
    """The highest priority set on it or an ancestor."""
    protected: str | None


def eviction_units(
    snapshot: Snapshot,
    groups: Sequence[GroupSpec],
    exclude: Iterable[str],
    foreign: frozenset[str],
    evict_foreign: bool,
) -> list[EvictionUnit]:
    """Every held pod, cut into the pieces that go together, in key order. ``exclude``: root
    groups never cut (the preemptor's own); ``foreign``: keys of pods another scheduler bound,
    protected unless ``evict_foreign``. A holding that is no pod (`PodRequest.reserved_for`)
    goes with the piece of the pods it is reserved for, all of them in one piece; it is no
    victim at all when one of them is not held, or the preemptor's own."""
    tree = GroupTree(groups)
    facts: dict[str | None, _GroupFacts | None] = {None: None}
    skip = set(exclude)
    # Pieces by key, in the order of their first pod (the holdings' key order): most are one
    # pod, kept as its holding alone (a cluster holds thousands: no list each); an All
    # group's pods are gathered in a list under the group's key.
    pieces: dict[str, Holding | list[Holding]] = {}
    piece_of: dict[str, str] = {}
    others: list[Holding] = []
    holdings = snapshot.holdings
    for key in sorted(holdings):
        holding = holdings[key]
        if holding.pod.reserved_for is not None:
            others.append(holding)
            continue
        group = holding.pod.group_key
        if group not in facts:
            facts[group] = _facts(tuple(tree.chain(group))) if group is not None else None
        fact = facts[group]
        if fact is not None and fact.root in skip:
            continue
        piece = fact.whole if fact is not None and fact.whole is not None else key
        members = pieces.get(piece)
        if members is None:
            pieces[piece] = holding
        elif isinstance(members, list):
            members.append(holding)
        else:
            pieces[piece] = [members, holding]
        piece_of[key] = piece
    joined, extra = _attach(others, piece_of)
    for piece, into in joined.items():
        pieces[into] = [*_listed(pieces[into]), *_listed(pieces.pop(piece))]
    units = []
    for key, members in pieces.items():
        if isinstance(members, list) or key in extra:
            listed = [(h, facts[h.pod.group_key]) for h in _listed(members)]
            units.append(_unit(key, listed, extra.get(key, ()), foreign, evict_foreign))
        else:
            units.append(
                _single(key, members, facts[members.pod.group_key], foreign, evict_foreign)
            )
    return units


def _listed(members: Holding | list[Holding]) -> list[Holding]:
    return members if isinstance(members, list) else [members]


def _attach(
    others: list[Holding], piece_of: dict[str, str]
) -> tuple[dict[str, str], dict[str, list[Holding]]]:
    """Which piece each holding that is no pod goes with: a claim shared by pods of several
    pieces joins those pieces into one (its devices are free only when all of them are gone).
    Returns the pieces that join another (key → the key they join, the lowest) and, per
    remaining piece, the holdings it frees."""
    joins: dict[str, str] = {}

    def final(piece: str) -> str:
        while piece in joins:
            piece = joins[piece]
        return piece

    freed: list[tuple[Holding, str]] = []
    for holding in others:
        owners = holding.pod.reserved_for or ()
        if not owners or any(o not in piece_of for o in owners):
            continue  # no pod's eviction frees it (gone, not bound, or the preemptor's own)
        keys = sorted({final(piece_of[o]) for o in owners})
        for other in keys[1:]:
            joins[other] = keys[0]
        freed.append((holding, owners[0]))
    extra: dict[str, list[Holding]] = {}
    for holding, owner in freed:
        extra.setdefault(final(piece_of[owner]), []).append(holding)
    return {piece: final(piece) for piece in joins}, extra


def _facts(chain: tuple[GroupSpec, ...]) -> _GroupFacts | None:
    if not chain:
        return None
    whole = [g.key for g in chain if g.disruption_mode is DisruptionMode.ALL]
    priorities = [g.priority for g in chain if g.priority is not None]
    protected = None
    for group in chain:
        if group.invalid is not None:
            protected = wording.protected_invalid(group.invalid)
            break
        if group.priority_problem is not None:
            protected = wording.protected_priority(group.priority_problem)
            break
    return _GroupFacts(
        whole[-1] if whole else None,
        chain[-1].key,
        frozenset((chain[-1].key,)),
        max(priorities) if priorities else None,
        protected,
    )


def _single(
    key: str,
    holding: Holding,
    fact: _GroupFacts | None,
    foreign: frozenset[str],
    evict_foreign: bool,
) -> EvictionUnit:
    """The piece of one pod that frees nothing else: most pieces."""
    pod = holding.pod
    if fact is None:
        priority, roots, protected = pod.priority, frozenset((pod.key,)), None
    else:
        group = fact.priority
        priority = pod.priority if group is None else max(pod.priority, group)
        roots, protected = fact.roots, fact.protected
    if protected is None and not evict_foreign and pod.key in foreign:
        protected = _foreign_reason(pod.key)
    return EvictionUnit(
        key=key,
        holdings=(holding,),
        priority=priority,
        groups=roots,
        created=pod.created,
        protected=protected,
    )


def _unit(
    key: str,
    members: list[tuple[Holding, _GroupFacts | None]],
    extra: Sequence[Holding],
    foreign: frozenset[str],
    evict_foreign: bool,
) -> EvictionUnit:
    """The piece of the pods ``members``, freeing ``extra`` (holdings that are no pod) too."""
    priorities: list[int] = []
    root_keys: set[str] = set()
    protected = None
    for holding, fact in members:
        pod = holding.pod
        group = fact.priority if fact is not None else None
        priorities.append(pod.priority if group is None else max(pod.priority, group))
        root_keys.add(fact.root if fact is not None else pod.key)
        if protected is None and fact is not None and fact.protected:
            protected = fact.protected
    protected = protected or _foreign(members, foreign, evict_foreign)
    pods = tuple(h for h, _ in members)
    created = min(h.pod.created for h in pods)
    return EvictionUnit(
        key=key,
        holdings=(*pods, *extra),
        priority=max(priorities),
        groups=frozenset(root_keys),
        created=created,
        protected=protected,
    )


def _foreign(
    members: list[tuple[Holding, _GroupFacts | None]],
    foreign: frozenset[str],
    evict_foreign: bool,
) -> str | None:
    """Why the piece is protected as another scheduler's, if it is."""
    if evict_foreign:
        return None
    other = next((h.pod.key for h, _ in members if h.pod.key in foreign), None)
    return _foreign_reason(other) if other is not None else None


def _foreign_reason(pod: str) -> str:
    return wording.other_schedulers_pod(pod)


def budget_overrun(budgets: Sequence[DisruptionBudget], evicted: Iterable[str]) -> int:
    """Pods evicted beyond what their PodDisruptionBudgets allow, summed over the budgets."""
    gone = set(evicted)
    return sum(max(0, len(b.pods & gone) - max(b.allowed, 0)) for b in budgets)

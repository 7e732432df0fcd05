"""Who may be evicted, in which pieces, at what cost.

A piece (`EvictionUnit`) is what goes together: every bound pod of a group tree whose highest
``disruptionMode: All`` group is the same (the tree under that group, evicted whole or not at
all), or one pod on its own (no group, or only ``Single`` groups above it). A piece may be
evicted for a preemptor only when every pod in it has a strictly lower priority, no group
above any of them has an unresolved priority, and, when so configured, no pod of it was bound
by another scheduler.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpusched.api.crds import DisruptionMode
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


@dataclass(frozen=True, slots=True)
class EvictionUnit:
    """Pods that are evicted together (see the module's docstring)."""

    key: str
    """The ``All`` group's key, or the pod's key for a pod that goes alone."""
    holdings: tuple[Holding, ...]
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
        return tuple(h.pod.key for h in self.holdings)

    def nodes(self) -> set[int]:
        return {h.node for h in self.holdings}


@dataclass(frozen=True, slots=True)
class _GroupFacts:
    """What every pod of one group shares, worked out once per group."""

    whole: str | None
    """The key of its highest ``All`` group (itself or an ancestor), if any."""
    root: str
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
    protected unless ``evict_foreign``."""
    tree = GroupTree(groups)
    facts: dict[str | None, _GroupFacts | None] = {None: None}
    skip = set(exclude)
    # Most pieces are one pod: built at once. An All group's pods are gathered first; its
    # piece takes the place of its first pod, so the list stays in key order.
    units: list[EvictionUnit | str] = []
    wholes: dict[str, list[tuple[Holding, _GroupFacts | None]]] = {}
    for key in sorted(snapshot.holdings):
        holding = snapshot.holdings[key]
        group = holding.pod.group_key
        if group not in facts:
            facts[group] = _facts(tuple(tree.chain(group))) if group is not None else None
        fact = facts[group]
        if fact is not None and fact.root in skip:
            continue
        whole = fact.whole if fact is not None else None
        if whole is None:
            units.append(_unit(key, [(holding, fact)], foreign, evict_foreign))
        elif whole in wholes:
            wholes[whole].append((holding, fact))
        else:
            wholes[whole] = [(holding, fact)]
            units.append(whole)
    return [_unit(u, wholes[u], foreign, evict_foreign) if isinstance(u, str) else u for u in units]


def _facts(chain: tuple[GroupSpec, ...]) -> _GroupFacts | None:
    if not chain:
        return None
    whole = [g.key for g in chain if g.disruption_mode is DisruptionMode.ALL]
    priorities = [g.priority for g in chain if g.priority is not None]
    protected = None
    for group in chain:
        if group.invalid is not None:
            protected = f"its group is invalid: {group.invalid}"
            break
        if group.priority_problem is not None:
            protected = f"its priority is unresolved: {group.priority_problem}"
            break
    return _GroupFacts(
        whole[-1] if whole else None,
        chain[-1].key,
        max(priorities) if priorities else None,
        protected,
    )


def _unit(
    key: str,
    members: list[tuple[Holding, _GroupFacts | None]],
    foreign: frozenset[str],
    evict_foreign: bool,
) -> EvictionUnit:
    if len(members) == 1:  # most pieces: no loops
        holding, fact = members[0]
        pod = holding.pod
        group = fact.priority if fact is not None else None
        priority = pod.priority if group is None else max(pod.priority, group)
        roots = frozenset((fact.root if fact is not None else pod.key,))
        protected = fact.protected if fact is not None and fact.protected else None
        protected = protected or _foreign(members, foreign, evict_foreign)
        return EvictionUnit(key, (holding,), priority, roots, pod.created, protected)
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
    holdings = tuple(h for h, _ in members)
    created = min(h.pod.created for h in holdings)
    return EvictionUnit(key, holdings, max(priorities), frozenset(root_keys), created, protected)


def _foreign(
    members: list[tuple[Holding, _GroupFacts | None]],
    foreign: frozenset[str],
    evict_foreign: bool,
) -> str | None:
    """Why the piece is protected as another scheduler's, if it is."""
    if evict_foreign:
        return None
    other = next((h.pod.key for h, _ in members if h.pod.key in foreign), None)
    if other is None:
        return None
    return f"{other} was bound by another scheduler (evictOtherSchedulersPods off)"


def budget_overrun(budgets: Sequence[DisruptionBudget], evicted: Iterable[str]) -> int:
    """Pods evicted beyond what their PodDisruptionBudgets allow, summed over the budgets."""
    gone = set(evicted)
    return sum(max(0, len(b.pods & gone) - max(b.allowed, 0)) for b in budgets)

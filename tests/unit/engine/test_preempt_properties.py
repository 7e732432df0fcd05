"""Properties of `plan_preemption` that hold for every input.

Random small clusters (one zone, 1-3 racks of 1-3 nodes), filled with random bound pods of
random priorities, some in groups (``All`` or ``Single``, some under a CompositePodGroup, some
with a group priority of their own), some bound by another scheduler, some under a
PodDisruptionBudget; a random preemptor (a PodGroup, or a CompositePodGroup of two, with or
without a rack constraint). For each plan:

(a) no victim has a priority equal to or above the preemptor's (its own, or any group's
    above it);
(b) once its victims are gone the unit fits: the plan's nominated placement fits exactly
    (no GPU beyond 1000 milli, no resource beyond allocatable), and `schedule` places it;
(c) no ``All`` group tree is partly in a plan;
(d) the same input gives the same plan, and the caller's snapshot is left as it was;
(e) the plans of one cycle (`plan_cycle`, two preemptors) never count on the same room.

The checks are written from the issue's rules, not from the planner's code.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Sequence

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpusched.api.crds import DisruptionMode
from gpusched.engine.groups import GroupSpec
from gpusched.engine.policy import Policy
from gpusched.engine.preemption import (
    DisruptionBudget,
    PreemptionPlan,
    plan_cycle,
    plan_preemption,
)
from gpusched.engine.request import WHOLE_GPU_MILLI, PodRequest
from gpusched.engine.result import Phase
from gpusched.engine.schedule import schedule
from gpusched.engine.snapshot import BoundPod, Snapshot
from testing.engine import RACK, bound, cluster, composite, gang, pod

SETTINGS = settings(
    max_examples=max(120, settings().max_examples),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

VICTIM_GROUPS = ("g0", "g1", "g2")


@dataclasses.dataclass
class Scenario:
    snapshot: Snapshot
    bound: list[BoundPod]
    groups: list[GroupSpec]
    pods: list[PodRequest]
    budgets: list[DisruptionBudget]
    foreign: frozenset[str]
    priority: int


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    racks = {f"r{r}": ["gpu8"] * draw(st.integers(1, 3)) for r in range(draw(st.integers(1, 3)))}
    nodes = [n for r in racks.values() for n in r]
    names = [f"node-{chr(ord('a') + i)}" for i in range(len(nodes))]
    groups = _victim_groups(draw)
    held: list[BoundPod] = []
    for name in names:
        free = list(range(8))
        while free and draw(st.integers(0, 3)):
            size = draw(st.sampled_from([s for s in (1, 2, 4, 8) if s <= len(free)]))
            gpus, free = free[:size], free[size:]
            group = draw(st.sampled_from((None, *VICTIM_GROUPS)))
            request = pod(
                f"v{len(held)}",
                gpus=size,
                priority=draw(st.integers(0, 5)),
                group=group,
                created=float(draw(st.integers(0, 9))),
            )
            held.append(bound(request, name, gpus))
    keys = [b.pod.key for b in held]
    foreign = frozenset(k for k in keys if draw(st.integers(0, 4)) == 0)
    budgets = []
    if keys and draw(st.booleans()):
        covered = frozenset(draw(st.lists(st.sampled_from(keys), max_size=4)))
        budgets.append(DisruptionBudget("default/pdb", draw(st.integers(0, 1)), covered))
    priority = draw(st.integers(2, 6))
    pods, tree = _preemptor(draw, priority)
    return Scenario(
        cluster({"z1": racks}, bound=held), held, [*tree, *groups], pods, budgets, foreign, priority
    )


def _victim_groups(draw: st.DrawFn) -> list[GroupSpec]:
    """g0 and g1 under the CompositePodGroup ``pair`` (All or Single), g2 alone."""

    def own(group: GroupSpec) -> GroupSpec:
        return dataclasses.replace(
            group,
            priority=draw(st.sampled_from((None, None, 0, 2, 7))),
            disruption_mode=draw(st.sampled_from(DisruptionMode)),
        )

    return [
        own(composite("pair", 2)),
        own(gang("g0", 1, parent="pair")),
        own(gang("g1", 1, parent="pair")),
        own(gang("g2", 1)),
    ]


def _preemptor(draw: st.DrawFn, priority: int) -> tuple[list[PodRequest], list[GroupSpec]]:
    topology = draw(st.sampled_from((None, RACK)))
    sizes = draw(st.lists(st.sampled_from((1, 2, 4, 8)), min_size=1, max_size=4))
    if draw(st.booleans()):
        root = dataclasses.replace(gang("hi", len(sizes), topology=topology), priority=priority)
        pods = [pod(f"hi-{i}", gpus=s, group="hi", priority=priority) for i, s in enumerate(sizes)]
        return pods, [root]
    root = dataclasses.replace(composite("hi", 2, topology=topology), priority=priority)
    children = [gang("hi-a", 1, parent="hi"), gang("hi-b", 1, parent="hi")]
    pods = [
        pod(f"hi-{i}", gpus=s, group=("hi-a", "hi-b")[i % 2], priority=priority)
        for i, s in enumerate([*sizes, 1][: max(2, len(sizes))])
    ]
    return pods, [root, *children]


def _chain(groups: Sequence[GroupSpec], key: str) -> list[GroupSpec]:
    by_key = {g.key: g for g in groups}
    chain, current = [], by_key.get(key)
    while current is not None:
        chain.append(current)
        current = by_key.get(current.parent) if current.parent else None
    return chain


def _plan(s: Scenario) -> PreemptionPlan:
    return plan_preemption(
        s.snapshot, "default/hi", s.pods, s.groups, Policy(), s.budgets, s.foreign
    )


@SETTINGS
@given(scenarios())
def test_no_victim_has_an_equal_or_higher_priority(s: Scenario) -> None:
    plan = _plan(s)
    by_key = {b.pod.key: b.pod for b in s.bound}
    for victim in plan.victims:
        request = by_key[victim.pod]
        chain = _chain(s.groups, f"default/{request.group}") if request.group else []
        priorities = [request.priority, *(g.priority for g in chain if g.priority is not None)]
        assert max(priorities) < s.priority, (victim, priorities, plan.message)


@SETTINGS
@given(scenarios())
def test_after_the_evictions_the_unit_fits(s: Scenario) -> None:
    plan = _plan(s)
    if not plan.victims:
        return
    after = s.snapshot.copy()
    for victim in plan.victims:
        assert after.forget(victim.pod) is not None, victim
    _nominated_fits(after, s.pods, plan)
    tree = [g for g in s.groups if g.key == "default/hi" or g.parent == "default/hi"]
    result = schedule(after, s.pods, tree, Policy())
    root = next(d for d in result.groups if d.name == "default/hi")
    assert root.phase is Phase.SCHEDULED, (plan.message, root.message)


def _nominated_fits(after: Snapshot, pods: Sequence[PodRequest], plan: PreemptionPlan) -> None:
    by_key = {p.key: p for p in pods}
    for binding in plan.bindings:
        after.assume(by_key[binding.pod], after.index[binding.node], binding.gpus)
    assert (after.gpu_free >= 0).all(), "a GPU is given beyond 1000 milli"
    assert (after.gpu_free <= WHOLE_GPU_MILLI).all()
    assert (after.used <= after.allocatable).all(), "a resource is given beyond allocatable"
    assert np.array_equal(after.used >= 0, np.ones_like(after.used, dtype=bool))


@SETTINGS
@given(scenarios())
def test_no_all_group_is_partly_in_a_plan(s: Scenario) -> None:
    plan = _plan(s)
    victims = {v.pod for v in plan.victims}
    whole: dict[str, set[str]] = defaultdict(set)
    for held in s.bound:
        if held.pod.group is None:
            continue
        chain = _chain(s.groups, f"default/{held.pod.group}")
        alls = [g.key for g in chain if g.disruption_mode is DisruptionMode.ALL]
        if alls:
            whole[alls[-1]].add(held.pod.key)
    for key, members in whole.items():
        gone = members & victims
        assert gone in (set(), members), (key, sorted(gone), sorted(members))


@SETTINGS
@given(scenarios())
def test_the_same_input_gives_the_same_plan_and_the_snapshot_is_untouched(s: Scenario) -> None:
    before = (s.snapshot.used.copy(), s.snapshot.gpu_free.copy(), dict(s.snapshot.holdings))
    first, second = _plan(s), _plan(s)
    assert first == second
    assert np.array_equal(s.snapshot.used, before[0])
    assert np.array_equal(s.snapshot.gpu_free, before[1])
    assert s.snapshot.holdings == before[2]


def _second(s: Scenario) -> tuple[list[PodRequest], list[GroupSpec]]:
    """A copy of the preemptor, one priority lower, named ``hi2``."""
    rename = {g.key: g.key.replace("default/hi", "default/hi2", 1) for g in s.groups}
    groups = [
        dataclasses.replace(
            g,
            key=rename[g.key],
            parent=rename.get(g.parent) if g.parent else None,
            priority=s.priority - 1 if g.priority is not None else None,
        )
        for g in s.groups
        if g.key.startswith("default/hi")
    ]
    pods = [
        dataclasses.replace(
            p,
            key=p.key.replace("default/hi", "default/hi2", 1),
            group=p.group.replace("hi", "hi2", 1) if p.group else None,
            priority=s.priority - 1,
        )
        for p in s.pods
    ]
    return pods, groups


@SETTINGS
@given(scenarios())
def test_plans_of_one_cycle_never_share_room(s: Scenario) -> None:
    """Carried out one after the other, the plans of one cycle evict each pod at most once and
    never over-commit a GPU or a resource: no two of them counted on the same freed room."""
    pods2, groups2 = _second(s)
    pods, groups = [*s.pods, *pods2], [*s.groups, *groups2]
    result = schedule(s.snapshot, pods, groups, Policy())
    plans = plan_cycle(s.snapshot, result, pods, groups, Policy(), s.budgets, s.foreign)
    after = s.snapshot.copy()
    by_key = {p.key: p for p in pods}
    for binding in result.bindings:
        after.assume(by_key[binding.pod], after.index[binding.node], binding.gpus)
    for plan in plans:
        for victim in plan.victims:
            assert after.forget(victim.pod) is not None, f"{victim.pod} evicted twice or unheld"
        _nominated_fits(after, pods, plan)

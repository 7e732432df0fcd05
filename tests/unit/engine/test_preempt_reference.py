"""The preemption planner's plans stay what they were when it was made faster.

`reference_plans.json` (beside this file) holds the whole plan (`PreemptionPlan.to_dict`: victims,
nominated placement, cost, every domain's verdict and detail, trials used) of each seeded scenario
below, as the planner before its speed-up (commit b9ca3ba: a rollback per domain, a Python loop
per piece and domain) computed it. The planner now works differently (a scratch copy per trial,
pieces indexed by domain once); this test says it decides the same, scenario by scenario.

Scenarios: 1-3 zones of 1-4 racks of 1-5 nodes (8-GPU nodes with and without NVLink topology,
some 4-GPU ones), random bound pods of priorities 0-5 (some in ``All`` or ``Single`` groups,
some under a CompositePodGroup, some bound by another scheduler, some under a
PodDisruptionBudget), a random preemptor (a PodGroup or a CompositePodGroup of rack groups, with
or without a zone or rack constraint), a trial budget of 16 or a small one; some scenarios plan
a whole cycle of two preemptors (`plan_cycle`).

When a change to the planner means to change plans, regenerate the file with
``python -m tests.unit.engine.test_preempt_reference`` and say why in the commit.

Plans may change only for the better: `reference_costs.json` holds the cost of every plan as
that first planner computed it (before the refit trial, which spares single pods where a
trial left an evicted gang's room unused, and before a domain that can at best tie the plan
found was no longer tried), and every plan now must cost no more by the issue's order (PDB
violations, highest victim priority, GPUs, victim groups, youngest) and still fit once its
victims are gone. That file is never regenerated.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpusched.api.config import PreemptionConfig, SchedulerConfig
from gpusched.api.crds import DisruptionMode
from gpusched.engine.groups import GroupSpec
from gpusched.engine.policy import Policy
from gpusched.engine.preemption import (
    DisruptionBudget,
    PreemptionPlan,
    plan_cycle,
    plan_preemption,
)
from gpusched.engine.request import PodRequest
from gpusched.engine.schedule import schedule
from gpusched.engine.snapshot import BoundPod, Snapshot
from testing.engine import RACK, ZONE, bound, cluster, composite, gang, pod

REFERENCE = Path(__file__).with_name("reference_plans.json")
FIRST_COSTS = Path(__file__).with_name("reference_costs.json")
SEEDS = range(200)
KINDS = ("gpu8", "gpu8", "a100x8", "h100x4")


def _victim_groups(rng: np.random.Generator) -> list[GroupSpec]:
    """Six victim gangs: v0-v1 under the CompositePodGroup ``pair``, v2-v5 alone; each with a
    random disruption mode and, sometimes, a priority of its own."""

    def own(group: GroupSpec) -> GroupSpec:
        priority = [None, None, 0, 1, 3, 7][int(rng.integers(6))]
        mode = (DisruptionMode.ALL, DisruptionMode.SINGLE)[int(rng.integers(2))]
        return dataclasses.replace(
            group, priority=priority, disruption_mode=mode, created=float(rng.integers(0, 50))
        )

    return [
        own(composite("pair", 2)),
        own(gang("v0", 1, parent="pair")),
        own(gang("v1", 1, parent="pair")),
        *(own(gang(f"v{i}", 1)) for i in range(2, 6)),
    ]


def _racks(rng: np.random.Generator) -> dict[str, dict[str, list[str]]]:
    zones: dict[str, dict[str, list[str]]] = {}
    for z in range(int(rng.integers(1, 4))):
        racks = {}
        for r in range(int(rng.integers(1, 5))):
            racks[f"z{z}r{r}"] = [KINDS[int(rng.integers(len(KINDS)))]] * int(rng.integers(1, 6))
        zones[f"z{z}"] = racks
    return zones


def _held(
    rng: np.random.Generator, zones: dict[str, dict[str, list[str]]], groups: list[GroupSpec]
) -> list[BoundPod]:
    kinds = [k for racks in zones.values() for ks in racks.values() for k in ks]
    names = [f"node-{chr(ord('a') + i)}" if i < 26 else f"node-{i}" for i in range(len(kinds))]
    gangs = [None, *(g.key.split("/", 1)[1] for g in groups if g.kind.value == "PodGroup")]
    held: list[BoundPod] = []
    for name, kind in zip(names, kinds, strict=True):
        free = list(range(4 if kind == "h100x4" else 8))
        while free and rng.random() < 0.93:
            size = int(rng.choice([s for s in (1, 2, 4, 8) if s <= len(free)]))
            start = int(rng.integers(0, len(free) - size + 1))
            gpus, free = free[start : start + size], free[:start] + free[start + size :]
            request = pod(
                f"h{len(held)}",
                gpus=size,
                priority=int(rng.integers(0, 6)),
                group=gangs[int(rng.integers(len(gangs)))],
                created=float(rng.integers(0, 30)),
            )
            held.append(bound(request, name, gpus))
    return held


def _preemptor(
    rng: np.random.Generator, name: str, priority: int
) -> tuple[list[PodRequest], list[GroupSpec]]:
    sizes = [int(s) for s in rng.choice([1, 2, 4, 8], size=int(rng.integers(2, 9)))]
    if rng.random() < 0.5:
        topology = (None, RACK, ZONE)[int(rng.integers(3))]
        root = dataclasses.replace(gang(name, len(sizes), topology=topology), priority=priority)
        pods = [
            pod(f"{name}-{i}", gpus=s, group=name, priority=priority) for i, s in enumerate(sizes)
        ]
        return pods, [root]
    topology = (None, ZONE)[int(rng.integers(2))]
    children = int(rng.integers(2, 4))
    root = dataclasses.replace(composite(name, children, topology=topology), priority=priority)
    kids = [gang(f"{name}-c{c}", 1, topology=RACK, parent=name) for c in range(children)]
    pods = [
        pod(f"{name}-{i}", gpus=s, group=f"{name}-c{i % children}", priority=priority)
        for i, s in enumerate([*sizes, 1, 1][: max(children, len(sizes))])
    ]
    return pods, [root, *kids]


@dataclasses.dataclass(frozen=True)
class _Planned:
    snapshot: Snapshot
    """The cluster the first plan was made on (with what the cycle placed)."""
    pods: list[PodRequest]
    plans: list[PreemptionPlan]


def _scenario(seed: int) -> dict[str, Any]:
    """The plans of one seeded scenario, as dicts."""
    planned = _planned(seed)
    return {"seed": seed, "plans": [_jsonable(p.to_dict()) for p in planned.plans]}


def _planned(seed: int) -> _Planned:
    rng = np.random.default_rng(seed)
    zones = _racks(rng)
    victims = _victim_groups(rng)
    held = _held(rng, zones, victims)
    keys = [b.pod.key for b in held]
    foreign = frozenset(k for k in keys if rng.random() < 0.1)
    budgets = []
    if keys and rng.random() < 0.5:
        covered = frozenset(str(k) for k in rng.choice(keys, size=min(4, len(keys)), replace=False))
        budgets.append(DisruptionBudget("default/pdb", int(rng.integers(0, 2)), covered))
    preemption = PreemptionConfig(
        budget=int(rng.choice([16, 16, 16, 2, 1])),
        evictOtherSchedulersPods=bool(rng.random() < 0.8),
    )
    config = SchedulerConfig(preemption=preemption)
    snapshot = cluster(zones, bound=held, config=config)
    pods, tree = _preemptor(rng, "hi", int(rng.integers(2, 7)))
    groups = [*tree, *victims]
    if rng.random() < 0.3:
        pods2, tree2 = _preemptor(rng, "hi2", int(rng.integers(2, 7)))
        pods, groups = [*pods, *pods2], [*groups, *tree2]
        result = schedule(snapshot, pods, groups, Policy.of(config))
        plans = plan_cycle(snapshot, result, pods, groups, Policy.of(config), budgets, foreign)
        snapshot = snapshot.copy()
        by_key = {p.key: p for p in pods}
        for binding in result.bindings:  # as plan_cycle sees the cluster
            snapshot.assume(by_key[binding.pod], snapshot.index[binding.node], binding.gpus)
    else:
        plans = [
            plan_preemption(
                snapshot, "default/hi", pods, groups, Policy.of(config), budgets, foreign
            )
        ]
    return _Planned(snapshot, pods, plans)


def _jsonable(value: Any) -> Any:
    """As the JSON file holds it (tuples as lists)."""
    return json.loads(json.dumps(value))


def _reference() -> dict[int, dict[str, Any]]:
    return {int(s["seed"]): s for s in json.loads(REFERENCE.read_text())}


@pytest.mark.parametrize("seed", SEEDS)
def test_plans_are_those_of_the_reference(seed: int) -> None:
    want = _reference()[seed]
    got = _scenario(seed)
    assert got == want


@pytest.mark.parametrize("seed", SEEDS)
def test_plans_cost_no_more_than_the_first_planners_and_fit(seed: int) -> None:
    planned = _planned(seed)
    first = _first_costs()[seed]
    assert len(planned.plans) == len(first)
    after = planned.snapshot.copy()
    by_key = {p.key: p for p in planned.pods}
    for plan, was in zip(planned.plans, first, strict=True):
        if was is not None:
            assert plan.cost is not None, (plan.preemptor, plan.message)
            assert _cost_key(plan.cost.to_dict()) <= _cost_key(was), plan.message
        # In a cycle each plan is carried out before the next one is made (`plan_cycle`).
        for victim in plan.victims:
            assert after.forget(victim.pod) is not None, victim
        for binding in plan.bindings:
            after.assume(by_key[binding.pod], after.index[binding.node], binding.gpus)
    assert (after.gpu_free >= 0).all(), "a GPU is given beyond 1000 milli"
    assert (after.used <= after.allocatable).all(), "a resource is given beyond allocatable"


def _cost_key(cost: dict[str, Any]) -> tuple[float, ...]:
    """`Cost.key` of a cost as `Cost.to_dict` writes it."""
    return (
        cost["pdbViolations"],
        cost["highestVictimPriority"],
        cost["gpusEvicted"],
        cost["victimGroups"],
        -cost["oldestVictimCreated"],
    )


def _first_costs() -> dict[int, list[dict[str, Any] | None]]:
    return {int(s["seed"]): s["costs"] for s in json.loads(FIRST_COSTS.read_text())}


def test_the_reference_covers_what_matters() -> None:
    """The scenarios reach every path worth comparing: plans in several domains, plans that
    fit without evicting, no room, a budget spent, domains not tried."""
    plans = [p for s in _reference().values() for p in s["plans"]]
    outcomes = {p["outcome"] for p in plans}
    verdicts = {d["verdict"] for p in plans for d in p["domains"]}
    assert {"Planned", "NoRoom", "BudgetSpent"} <= outcomes, outcomes
    assert {"Chosen", "Costlier", "NoRoom", "NotTried"} <= verdicts, verdicts
    assert sum(1 for p in plans if p["outcome"] == "Planned") >= len(plans) // 4


if __name__ == "__main__":
    REFERENCE.write_text(json.dumps([_scenario(s) for s in SEEDS], indent=None) + "\n")

"""Preemption where GPUs are held through ResourceClaims: the snapshot holds a claim's devices
as a holding that is no pod (`PodRequest.reserved_for`, as `gpusched.engine.holdings`
builds it), freed only once every pod it is reserved for is evicted.

Every case is one rack of 8-GPU nodes ``node-a``, ``node-b`` …; a DRA pod holds no GPU itself,
its claim holds all 8 of its node's."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from gpusched.api.crds import DisruptionMode
from gpusched.engine.groups import GroupSpec
from gpusched.engine.policy import Policy
from gpusched.engine.preemption import Outcome, plan_preemption
from gpusched.engine.request import PodRequest
from gpusched.engine.snapshot import BoundPod
from testing.engine import RACK, bound, cluster, gang, members, pod

ALL8 = tuple(range(8))


def claim(name: str, node: str, *owners: str) -> BoundPod:
    """The claim ``default/name`` holding every GPU of ``node``, reserved for ``owners``."""
    request = PodRequest(
        key=f"ResourceClaim default/{name}",
        resources={},
        gpus=8,
        reserved_for=tuple(f"default/{o}" for o in owners),
    )
    return bound(request, node, ALL8)


def dra_pod(name: str, node: str, priority: int, group: str | None = None) -> BoundPod:
    return bound(pod(name, priority=priority, group=group), node, ())


def prioritized(group: GroupSpec, priority: int, mode: DisruptionMode) -> GroupSpec:
    return dataclasses.replace(group, priority=priority, disruption_mode=mode)


HIGH = prioritized(gang("high", 2, topology=RACK), 10, DisruptionMode.ALL)
LOW = prioritized(gang("low", 2), 1, DisruptionMode.ALL)


@dataclass(frozen=True)
class Case:
    id: str
    nodes: int
    held: Sequence[BoundPod]
    want_outcome: Outcome
    want_victims: dict[str, tuple[tuple[int, ...], tuple[str, ...]]]
    """Pod → (GPUs credited to it, the claims freed with it)."""
    want_gpus: int = 0
    want_top: int = 0
    gpus: int = 8
    groups: Sequence[GroupSpec] = (HIGH, LOW)


CASES = [
    Case(
        "a DRA gang evicts a lower DRA gang: the plan names its pods, freeing their claims",
        nodes=2,
        held=[
            dra_pod("low-0", "node-a", 1, "low"),
            dra_pod("low-1", "node-b", 1, "low"),
            claim("low-0-gpus", "node-a", "low-0"),
            claim("low-1-gpus", "node-b", "low-1"),
        ],
        want_outcome=Outcome.PLANNED,
        want_victims={
            "default/low-0": (ALL8, ("ResourceClaim default/low-0-gpus",)),
            "default/low-1": (ALL8, ("ResourceClaim default/low-1-gpus",)),
        },
        want_gpus=16,
        want_top=1,
    ),
    Case(
        "a claim whose pod is gone is no victim: only the other node's pod is evicted",
        nodes=3,
        held=[
            claim("orphan-gpus", "node-a", "gone"),
            dra_pod("p1", "node-b", 1),
            claim("p1-gpus", "node-b", "p1"),
            dra_pod("p2", "node-c", 2),
            claim("p2-gpus", "node-c", "p2"),
        ],
        want_outcome=Outcome.PLANNED,
        want_victims={
            "default/p1": (ALL8, ("ResourceClaim default/p1-gpus",)),
            "default/p2": (ALL8, ("ResourceClaim default/p2-gpus",)),
        },
        want_gpus=16,
        want_top=2,
    ),
    Case(
        "GPUs held by no pod's claim cannot be freed: no room",
        nodes=2,
        held=[
            claim("orphan-gpus", "node-a", "gone"),
            claim("unowned-gpus", "node-b"),
            dra_pod("p1", "node-b", 1),
        ],
        want_outcome=Outcome.NO_ROOM,
        want_victims={},
    ),
    Case(
        "a shared claim frees its GPUs only with every pod reserving it: both go",
        nodes=1,
        held=[
            dra_pod("s1", "node-a", 1),
            dra_pod("s2", "node-a", 3),
            claim("shared", "node-a", "s1", "s2"),
        ],
        want_outcome=Outcome.PLANNED,
        want_victims={
            "default/s1": (ALL8, ("ResourceClaim default/shared",)),
            "default/s2": ((), ()),
        },
        want_gpus=8,
        want_top=3,
        groups=(prioritized(gang("high", 1, topology=RACK), 10, DisruptionMode.ALL),),
    ),
    Case(
        "a shared claim one of whose pods may not be evicted is never freed",
        nodes=1,
        held=[
            dra_pod("s1", "node-a", 1),
            dra_pod("s2", "node-a", 10),
            claim("shared", "node-a", "s1", "s2"),
        ],
        want_outcome=Outcome.NO_LOWER_PRIORITY,  # s1 goes only with s2, which may not
        want_victims={},
        groups=(prioritized(gang("high", 1, topology=RACK), 10, DisruptionMode.ALL),),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_claim_victims(case: Case) -> None:
    snapshot = cluster({"z1": {"r1": ["a100x8"] * case.nodes}}, bound=case.held)
    size = case.groups[0].minimum
    pods = members("high", size, gpus=case.gpus, group="high", priority=10)
    plan = plan_preemption(snapshot, "default/high", pods, case.groups, Policy())
    assert plan.outcome is case.want_outcome, plan.message
    got = {v.pod: (v.gpus, v.claims) for v in plan.victims}
    assert got == case.want_victims
    if case.want_victims:
        assert plan.cost is not None
        assert (plan.cost.gpu_milli, plan.cost.top_priority) == (
            case.want_gpus * 1000,
            case.want_top,
        )
        assert {b.node for b in plan.bindings} <= {v.node for v in plan.victims}

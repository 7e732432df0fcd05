"""One pinned-domains rule (`gpusched.engine.domains.pinned_domains`): the placement planner and
the preemption planner narrow a group with bound pods to the same domains, and say the same
thing when its bound pods leave it none.

    #            z1
    #      /            \\
    #   rack-1         rack-2
    #   a   b          c   d       (a100x8 each; e: no rack label)
"""

from __future__ import annotations

import dataclasses

import pytest

from gpusched.engine.domains import pinned_domains, root_domain, subdomains
from gpusched.engine.groups import GroupKind, GroupSpec
from gpusched.engine.policy import Policy
from gpusched.engine.preemption import plan_preemption
from gpusched.engine.result import PinnedApart
from gpusched.engine.schedule import schedule
from gpusched.engine.snapshot import BoundPod, Snapshot
from testing.engine import RACK, ZONE, bound, cluster, decision, gang, members, node, pod


def racks(*held: BoundPod) -> Snapshot:
    return cluster(
        nodes=[
            *(node(n, labels={ZONE: "z1", RACK: "rack-1"}) for n in ("node-a", "node-b")),
            *(node(n, labels={ZONE: "z1", RACK: "rack-2"}) for n in ("node-c", "node-d")),
            node("node-e", labels={ZONE: "z1"}),
        ],
        bound=list(held),
    )


def member(name: str, where: str) -> BoundPod:
    return bound(pod(name, gpus=8, group="train", priority=10), where)


@pytest.mark.parametrize(
    ("held", "want"),
    [
        pytest.param(
            ("node-a", "node-c"),
            "bound pods already span 2 topology.example.com/rack domains, which its "
            "constraint forbids: z1/rack-1 (node-a); z1/rack-2 (node-c)",
            id="bound pods in two racks break the constraint",
        ),
        pytest.param(
            ("node-e",),
            "pinned by bound pods on node-e, outside cluster",
            id="a bound pod on a node in no rack leaves the gang nowhere",
        ),
    ],
)
def test_both_planners_refuse_a_gang_its_bound_pods_leave_no_rack(
    held: tuple[str, ...], want: str
) -> None:
    low = bound(pod("low", gpus=8), "node-d")  # something to evict: the search gets going
    snapshot = racks(low, *(member(f"train-{i}", n) for i, n in enumerate(held)))
    pods = members("train", 4, gpus=8, group="train", priority=10)[len(held) :]
    groups = [gang("train", 4, topology=RACK)]

    result = schedule(snapshot, pods, groups, Policy())
    plan = plan_preemption(snapshot, "default/train", pods, groups, Policy())

    assert [a.note for a in decision(result, "train").tried] == [want]
    assert (plan.outcome.value, plan.message) == ("NoRoom", want)


def test_both_planners_keep_a_gang_in_the_rack_its_bound_pods_are_in() -> None:
    # rack-2 is emptier, but train-0 is on node-a: the gang may only use rack-1.
    snapshot = racks(member("train-0", "node-a"))
    pods = members("train", 2, gpus=8, group="train", priority=10)[1:]
    groups = [gang("train", 2, topology=RACK)]
    root = root_domain(snapshot)

    kept = pinned_domains(snapshot, groups[0], root, subdomains(snapshot, root, RACK), [0])
    result = schedule(snapshot, pods, groups, Policy())

    assert [d.name for d in kept] == ["z1/rack-1"]  # type: ignore[union-attr]
    assert [b.node for b in result.bindings] == ["node-b"]


def test_a_segmented_gang_is_not_pinned_to_one_domain_of_its_key() -> None:
    # Its segments span racks by design: bound pods in two racks are its segments, not a
    # broken constraint, for the placement planner and the preemption planner alike.
    snapshot = racks()
    root = root_domain(snapshot)
    racks_found = subdomains(snapshot, root, RACK)
    whole = GroupSpec(key="default/train", kind=GroupKind.POD_GROUP, minimum=4, topology_key=RACK)
    segmented = dataclasses.replace(whole, segment_size=2)

    kept = pinned_domains(snapshot, segmented, root, racks_found, [0, 2])
    refused = pinned_domains(snapshot, whole, root, racks_found, [0, 2])

    assert [d.name for d in kept] == ["z1/rack-1", "z1/rack-2"]  # type: ignore[union-attr]
    assert isinstance(refused, PinnedApart)
    assert [name for name, _ in refused.spans] == ["z1/rack-1", "z1/rack-2"]

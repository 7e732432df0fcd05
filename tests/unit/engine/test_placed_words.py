"""A group whose pods are all bound says so, not "0 of 0 pending pods placed"."""

from __future__ import annotations

from gpusched.engine.policy import Policy
from gpusched.engine.result import Phase
from gpusched.engine.schedule import schedule
from testing.engine import RACK, bound, cluster, decision, gang, pod


def test_a_group_with_every_pod_bound_says_its_pods_are_bound_where() -> None:
    snapshot = cluster(
        {"z1": {"r1": ["a100x8"]}},
        bound=[
            bound(pod("w-0", gpus=4, group="g"), "node-a"),
            bound(pod("w-1", gpus=4, group="g"), "node-a"),
        ],
    )
    result = schedule(snapshot, [], [gang("g", 2, topology=RACK)], Policy())
    found = decision(result, "g")
    assert found.phase is Phase.SCHEDULED
    assert found.message == "no pod pending; its pods are bound in z1/r1", found.message

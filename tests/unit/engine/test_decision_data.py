"""Decisions carry data: the domains a group tried (how many pods or child groups fit, how many
it needs, the node checks that blocked the rest), what a group short of pods waits for, the
queue order, and the cluster each unit found at its turn. The sentences of status, Events and
``explain`` are rendered from that data (`gpusched.engine.wording`); hints read the numbers.
"""

from __future__ import annotations

import dataclasses

from gpusched.engine import wording
from gpusched.engine.policy import Policy
from gpusched.engine.result import Attempt, Blocker, Counted, NodeCheck, Waiting
from gpusched.engine.schedule import schedule
from gpusched.engine.snapshot import Snapshot
from testing.engine import RACK, bound, cluster, composite, decision, gang, members, pod

#        z1
#      /    \
#    r1      r2
#    a      b  c        b runs an 8-GPU pod
TWO_RACKS = {"z1": {"r1": ["a100x8"], "r2": ["a100x8", "a100x8"]}}


def test_a_rack_too_small_says_how_many_fit_and_which_nodes_block() -> None:
    snapshot = cluster(TWO_RACKS, bound=[bound(pod("busy", gpus=8), "node-b")])
    result = schedule(
        snapshot,
        members("w", 2, gpus=8, group="train"),
        [gang("train", 2, topology=RACK)],
        Policy(),
    )
    train = decision(result, "train")
    assert train.tried == (
        Attempt(
            domain="z1/r1",
            fit=1,
            needed=2,
            estimate=True,
            nodes=NodeCheck(fitting=1, fitting_examples=("node-a ×1",), blockers=()),
        ),
        Attempt(
            domain="z1/r2",
            fit=1,
            needed=2,
            estimate=True,
            nodes=NodeCheck(
                fitting=1,
                fitting_examples=("node-c ×1",),
                blockers=(
                    Blocker(
                        "Insufficient nvidia.com/gpu",
                        1,
                        ("node-b (0 free usable GPUs, needs 8)",),
                    ),
                ),
            ),
        ),
    )
    # The status text is the data, rendered.
    assert train.attempts == wording.attempt_lines(train.tried, 0)
    assert train.message == wording.no_placement(None, train.tried, 0)


def test_a_gang_short_of_pods_says_what_it_waits_for_gated_pods_apart() -> None:
    snapshot = cluster(TWO_RACKS)
    gated = dataclasses.replace(pod("g-0", gpus=1, group="train"), gates=("quota",))
    pods = [*members("w", 2, gpus=1, group="train"), gated]
    result = schedule(snapshot, pods, [gang("train", 4)], Policy())
    want = Waiting(counted=Counted.PODS, present=2, minimum=4, gated=1)
    assert decision(result, "train").waiting == want


def test_children_waiting_with_their_parent_carry_its_wait_and_name_it() -> None:
    snapshot = cluster(TWO_RACKS)
    groups = [composite("job", 2), gang("leader", 1, parent="job")]
    result = schedule(snapshot, [pod("l-0", group="leader")], groups, Policy())
    job, leader = decision(result, "job"), decision(result, "leader")
    want = Waiting(counted=Counted.CHILD_GROUPS, present=1, minimum=2)
    assert (job.waiting, job.inherited_from) == (want, None)
    assert (leader.waiting, leader.inherited_from) == (want, "default/job")


def test_the_queue_order_and_each_turn_come_from_the_engine() -> None:
    snapshot = cluster(TWO_RACKS)
    urgent = members("u", 1, gpus=8, group="urgent", priority=10)
    later = members("l", 1, gpus=8, group="later", created=1.0)
    alone = pod("alone", gpus=8, created=2.0)
    seen: dict[str, list[str]] = {}

    def observe(unit: str, work: Snapshot) -> None:
        seen[unit] = sorted(work.holdings)

    groups = [gang("later", 1), gang("urgent", 1)]
    result = schedule(snapshot, [*later, alone, *urgent], groups, Policy(), observe)
    assert result.order == ["default/urgent", "default/later", "default/alone"]
    assert seen == {
        "default/urgent": [],
        "default/later": ["default/u-0"],
        "default/alone": ["default/l-0", "default/u-0"],
    }
    assert snapshot.holdings == {}, "the caller's snapshot is left as it was"

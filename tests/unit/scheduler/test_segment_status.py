"""A segmented gang's status ``placement``: the levels above its key that its pods share,
written only once minCount are bound (a status patch merges keys, so a narrower path read
while the first segment binds would stay)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from gpusched.api.config import SchedulerConfig
from gpusched.offline.nvlink import BLOCK, CLIQUE_LABEL, RACK, ZONE, nvl72_nodes
from gpusched.scheduler.status import placement

LEVELS = SchedulerConfig().topology_levels
NODES = {n.name: n for n in nvl72_nodes(4, domains_per_block=2, trays=2)}


def on(*nodes: str) -> list[Any]:
    return [SimpleNamespace(node=n) for n in nodes]


def test_segments_in_two_domains_of_one_block_report_the_block() -> None:
    pods = on("nvl-00-00", "nvl-00-01", "nvl-01-00", "nvl-01-01")
    want = {ZONE: "zone-a", BLOCK: "block-00"}
    assert placement(CLIQUE_LABEL, LEVELS, pods, NODES, segmented=4) == want


def test_segments_across_blocks_report_the_zone() -> None:
    pods = on("nvl-00-00", "nvl-00-01", "nvl-02-00", "nvl-02-01")
    assert placement(CLIQUE_LABEL, LEVELS, pods, NODES, segmented=4) == {ZONE: "zone-a"}


def test_nothing_is_reported_before_min_count_is_bound() -> None:
    pods = [*on("nvl-00-00", "nvl-00-01"), *on(None, None)]
    assert placement(CLIQUE_LABEL, LEVELS, pods, NODES, segmented=4) == {}
    # Unsegmented, the same pods share one domain of the key: that one, with its path.
    assert placement(CLIQUE_LABEL, LEVELS, pods, NODES)[CLIQUE_LABEL].endswith(".0")
    assert RACK not in placement(CLIQUE_LABEL, LEVELS, pods, NODES)

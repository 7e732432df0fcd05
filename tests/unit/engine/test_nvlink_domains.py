"""NVLink domains (``nvidia.com/gpu.clique``) as a topology key like any other: a gang
constrained on it lands inside one domain; a node whose clique label is empty (fabric not
attached) is in no domain, cannot host such a gang's pods, and the report says so as data.

Nodes are simulated GB200 compute trays (`gpusched.offline.nvlink`): 4 GPUs, NV18."""

from __future__ import annotations

import numpy as np
import pytest

from gpusched.api.config import SchedulerConfig
from gpusched.api.k8s import Node
from gpusched.engine import wording
from gpusched.engine.build import build_snapshot
from gpusched.engine.policy import Policy
from gpusched.engine.result import EmptyLabel
from gpusched.engine.schedule import schedule
from gpusched.engine.scores import domain_fill
from gpusched.offline.nvlink import CLIQUE_LABEL, clique, gb200_node, nvl72_nodes
from testing.engine import bound, decision, gang, members, outcomes, placements, pod

CONFIG = SchedulerConfig()


def trays(domain: int, count: int, *, prefix: str = "t") -> list[Node]:
    return [
        gb200_node(f"{prefix}{domain}-{i}", {CLIQUE_LABEL: clique(domain)}) for i in range(count)
    ]


def test_a_gang_on_the_clique_key_lands_inside_one_domain() -> None:
    # domain 0: 3 trays with one busy; domain 1: 4 trays. A 4-pod gang of whole trays fits
    # only in domain 1, although the cluster has 6 free trays.
    snapshot = build_snapshot(trays(0, 3) + trays(1, 4), (), None, CONFIG)
    pods = members("w", 4, gpus=4, group="g")
    result = schedule(snapshot, pods, [gang("g", 4, topology=CLIQUE_LABEL)], Policy())
    assert outcomes(result) == {"g": ("Scheduled", clique(1), "Scheduled")}
    assert {node for node, _ in placements(result).values()} == {f"t1-{i}" for i in range(4)}


def test_a_node_with_an_empty_clique_is_in_no_domain_and_the_report_names_it() -> None:
    # Two trays of domain 0 and two whose fabric is not attached (clique ""): the 3-pod gang
    # would fit on the four trays together, but only two of them are in a domain.
    loose = [gb200_node(f"spare-{i}", {CLIQUE_LABEL: ""}) for i in range(2)]
    snapshot = build_snapshot(trays(0, 2) + loose, (), None, CONFIG)
    pods = members("w", 3, gpus=4, group="g")
    result = schedule(snapshot, pods, [gang("g", 3, topology=CLIQUE_LABEL)], Policy())
    found = decision(result, "g")
    assert (found.phase.value, found.reason.value) == ("Unschedulable", "Unschedulable")
    assert found.tried[0].empty_label == EmptyLabel(
        key=CLIQUE_LABEL, nodes=2, examples=("spare-0", "spare-1")
    )
    assert (found.tried[1].domain, found.tried[1].fit, found.tried[1].needed) == (clique(0), 2, 3)
    assert found.attempts[0] == wording.empty_label(found.tried[0].empty_label)
    assert "in no nvidia.com/gpu.clique domain: 2 nodes have it empty (spare-0, spare-1)" in (
        found.message
    )
    assert placements(result) == {}


def test_only_nodes_with_an_empty_clique_say_so_rather_than_that_no_node_has_the_label() -> None:
    snapshot = build_snapshot([gb200_node("spare-0", {CLIQUE_LABEL: ""})], (), None, CONFIG)
    result = schedule(
        snapshot,
        members("w", 1, gpus=4, group="g"),
        [gang("g", 1, topology=CLIQUE_LABEL)],
        Policy(),
    )
    found = decision(result, "g")
    assert [a.empty_label for a in found.tried] == [
        EmptyLabel(key=CLIQUE_LABEL, nodes=1, examples=("spare-0",))
    ]
    assert "no node has label" not in found.message


def test_a_group_without_the_clique_key_uses_trays_with_an_empty_clique() -> None:
    snapshot = build_snapshot([gb200_node("spare-0", {CLIQUE_LABEL: ""})], (), None, CONFIG)
    result = schedule(snapshot, members("w", 1, gpus=4, group="g"), [gang("g", 1)], Policy())
    assert placements(result) == {"w-0": ("spare-0", (0, 1, 2, 3))}


def test_the_clique_key_in_topology_levels_nests_the_domain_under_its_rack() -> None:
    levels = ("topology.kubernetes.io/zone", "topology.example.com/rack", CLIQUE_LABEL)
    config = SchedulerConfig.model_validate({"topologyLevels": list(levels)})
    snapshot = build_snapshot(nvl72_nodes(2, trays=2), (), None, config)
    pods = members("w", 2, gpus=4, group="g")
    result = schedule(snapshot, pods, [gang("g", 2, topology=CLIQUE_LABEL)], Policy())
    assert decision(result, "g").placement == {
        "topology.kubernetes.io/zone": "zone-a",
        "topology.example.com/rack": "rack-00",
        CLIQUE_LABEL: clique(0),
    }


# ----- the domain-fill score: small jobs fill partly used domains ------------------------------


def fill_weight(weight: float) -> SchedulerConfig:
    return SchedulerConfig.model_validate({"scoring": {"domainFillWeight": weight}})


@pytest.mark.parametrize(
    ("weight", "want"),
    [
        pytest.param(5.0, "nvl-01-01", id="by default the partly used domain 1 is filled"),
        pytest.param(0.0, "nvl-00-00", id="without the score the name order breaks domain 0"),
    ],
)
def test_a_small_job_fills_a_partly_used_domain_and_leaves_a_whole_one(
    weight: float, want: str
) -> None:
    # Two domains of 3 trays; a tray of domain 1 is busy. A one-tray job should not break
    # domain 0, the only whole one left.
    held = [bound(pod("busy", gpus=4), "nvl-01-00", (0, 1, 2, 3))]
    snapshot = build_snapshot(nvl72_nodes(2, trays=3), held, None, fill_weight(weight))
    result = schedule(snapshot, [pod("small", gpus=4)], (), Policy.of(fill_weight(weight)))
    assert placements(result) == {"small": (want, (0, 1, 2, 3))}


def test_the_domain_fill_score_is_the_share_of_gpus_in_use_in_the_domain() -> None:
    held = [bound(pod("busy", gpus=2), "nvl-01-00", (0, 1))]
    loose = gb200_node("spare", {CLIQUE_LABEL: ""})
    snapshot = build_snapshot([*nvl72_nodes(2, trays=2), loose], held, None, CONFIG)
    nodes = np.arange(len(snapshot.nodes))
    filled = domain_fill(snapshot, nodes, CLIQUE_LABEL)
    # domain 1 holds 2 of its 8 GPUs: 25 points for both its trays; domain 0 and the spare 0.
    assert filled.tolist() == pytest.approx([0.0, 0.0, 25.0, 25.0, 0.0])
    assert domain_fill(snapshot, nodes, "no.such/label").tolist() == [0.0] * 5

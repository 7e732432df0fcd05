"""Link tier before NUMA: a multi-GPU pod gets the best link tier its node offers.

``numaPolicy: best-effort`` prefers GPUs on fewer NUMA nodes, but never at the price of a
slower link: the link is what the job's collectives run over. ``single-numa-node`` stays a hard
filter. First stories on a node whose NVLink pairs cross sockets (where the two rules pull
apart), then a table over every real ``nvidia-smi topo -m`` capture in tests/data: every
multi-GPU request size the node can hold, on the empty node and on every set of free GPUs.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from gpusched.api.config import NumaPolicy, SchedulerConfig
from gpusched.api.k8s import Node
from gpusched.api.nvsmi import parse_topo_matrix
from gpusched.api.topology import TOPOLOGY_ANNOTATION, GpuTopology, LinkTier
from gpusched.engine.gpuset import choose_gpus
from gpusched.engine.gpushape import NodeShape, worst_tier
from gpusched.engine.policy import Policy
from gpusched.engine.schedule import schedule
from testing.engine import DATA, bound, cluster, node, pod

CAPTURES = DATA / "gpu-topology"
TRUNCATED = {
    # cut inside row GPU6: the parser refuses it (tests/unit/api/test_nvsmi.py), no node has it
    "hgx-h100class-8gpu-9nic-4numa-uneven.topo.partial.txt",
}

# Quadro RTX 8000 × 4 with NVLink bridges across the sockets: 0-2 and 1-3 are bridged, 0-1
# and 2-3 share a socket but not a bridge. Drawn by hand after such a machine (no capture of
# it is in tests/data): the case where fewer NUMA nodes and a better link disagree.
#
#     socket 0        socket 1
#     GPU0 ==NV2== GPU2
#     GPU1 ==NV2== GPU3
RTX8000_CROSS_SOCKET = """\
\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity
GPU0\t X \tNODE\tNV2\tSYS\t0-23\t0
GPU1\tNODE\t X \tSYS\tNV2\t0-23\t0
GPU2\tNV2\tSYS\t X \tNODE\t24-47\t1
GPU3\tSYS\tNV2\tNODE\t X \t24-47\t1
"""


def topology_node(name: str, topo_text: str) -> Node:
    topology = parse_topo_matrix(topo_text).topology
    return node(
        name,
        "gpu8",
        annotations={TOPOLOGY_ANNOTATION: topology.to_annotation()},
        allocatable={"nvidia.com/gpu": str(len(topology.gpus))},
    )


def config(policy: NumaPolicy) -> SchedulerConfig:
    return SchedulerConfig.model_validate({"numaPolicy": policy.value})


# ----- stories: the node whose NVLink crosses sockets -------------------------------------------


@dataclass(frozen=True)
class TierStory:
    id: str
    policy: NumaPolicy
    gpus: int
    busy: tuple[int, ...]
    """GPUs already held by another pod."""
    want: tuple[tuple[int, ...], str | None, str | None]
    """(GPUs, linkTier, bestLinkTier) of the pod's binding."""


TIER_STORIES = [
    TierStory(
        "best-effort takes the bridged pair across sockets, not the same-socket pair without one",
        NumaPolicy.BEST_EFFORT,
        2,
        (),
        ((0, 2), "NVLINK", "NVLINK"),
    ),
    TierStory(
        "best-effort with GPU 2 taken still finds the other bridge, 1-3",
        NumaPolicy.BEST_EFFORT,
        2,
        (2,),
        ((1, 3), "NVLINK", "NVLINK"),
    ),
    TierStory(
        "single-numa-node stays a hard filter: the same-socket pair, over PCIe",
        NumaPolicy.SINGLE_NUMA_NODE,
        2,
        (),
        ((0, 1), "NODE", "NVLINK"),
    ),
    TierStory(
        "policy none looks at links only",
        NumaPolicy.NONE,
        2,
        (),
        ((0, 2), "NVLINK", "NVLINK"),
    ),
    TierStory(
        "three GPUs cross a socket without a bridge whatever is chosen: then fewer NUMA nodes "
        "decide nothing, all sets span both, and the fewest slow pairs win",
        NumaPolicy.BEST_EFFORT,
        3,
        (),
        ((0, 1, 2), "SYS", "SYS"),
    ),
]


@pytest.mark.parametrize("story", TIER_STORIES, ids=lambda s: s.id)
def test_link_tier_story(story: TierStory) -> None:
    held = [bound(pod(f"held-{g}", gpus=1), "node-a", [g]) for g in story.busy]
    snapshot = cluster(
        nodes=[topology_node("node-a", RTX8000_CROSS_SOCKET)],
        bound=held,
        config=config(story.policy),
    )
    result = schedule(snapshot, [pod("job", gpus=story.gpus)], (), Policy.of(config(story.policy)))
    got = {b.pod: (b.gpus, b.link_tier, b.best_tier) for b in result.bindings}
    assert got == {"default/job": story.want}, result.unschedulable


# ----- every real capture: 100 % on the best link tier offered ----------------------------------


def capture_files() -> list[str]:
    return sorted(p.name for p in CAPTURES.glob("*.topo*.txt") if p.name not in TRUNCATED)


@cache
def capture_topology(name: str) -> GpuTopology:
    return parse_topo_matrix((CAPTURES / name).read_text(errors="surrogateescape")).topology


def test_the_table_covers_every_capture_but_the_truncated_one() -> None:
    on_disk = {p.name for p in Path(CAPTURES).glob("*.topo*.txt")}
    assert set(capture_files()) == on_disk - TRUNCATED
    assert on_disk >= TRUNCATED, "a capture named as truncated is gone: update TRUNCATED"


POLICIES = (NumaPolicy.BEST_EFFORT, NumaPolicy.NONE)
"""The policies that may choose any set; single-numa-node may refuse the best tier by design."""


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.value)
@pytest.mark.parametrize("capture", capture_files())
def test_every_request_size_on_an_empty_captured_node_gets_the_best_tier(
    capture: str, policy: NumaPolicy
) -> None:
    gpu_count = len(capture_topology(capture).gpus)
    text = (CAPTURES / capture).read_text(errors="surrogateescape")
    snapshot = cluster(nodes=[topology_node("node-a", text)], config=config(policy))
    got, want = {}, {}
    for size in range(2, gpu_count + 1):
        result = schedule(snapshot, [pod("job", gpus=size)], (), Policy.of(config(policy)))
        (binding,) = result.bindings
        got[size] = binding.link_tier
        want[size] = binding.best_tier
    assert got == want, f"{capture}: size → linkTier differs from size → bestLinkTier"


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.value)
@pytest.mark.parametrize("capture", capture_files())
def test_every_free_set_of_a_captured_node_gives_its_best_tier(
    capture: str, policy: NumaPolicy
) -> None:
    """However the node is used already, the set chosen has the best worst link that the
    free GPUs allow: the share of choices on the best tier offered is 100 %."""
    shape = NodeShape.from_topology(capture_topology(capture))
    misses, choices = [], 0
    for free in range(1 << shape.gpu_count):
        indices = [i for i in range(shape.gpu_count) if free >> i & 1]
        for size in range(2, len(indices) + 1):
            offered = min(worst_tier(shape, s) for s in itertools.combinations(indices, size))
            chosen = choose_gpus(shape, free, size, policy)
            assert chosen is not None, f"{capture}: no set of {size} among {indices}"
            choices += 1
            if chosen.worst_tier != offered:
                misses.append((indices, size, chosen.gpus, chosen.worst_tier.name, offered.name))
    assert choices > 0
    assert misses == [], f"{capture}: {len(misses)} of {choices} choices below the best tier"


def test_before_numa_the_tier_order_is_nvlink_then_the_pcie_tiers() -> None:
    # The order the ranking relies on: NVLink beats every PCIe tier, SYS is the slowest known.
    assert sorted(LinkTier, key=int)[:6] == [
        LinkTier.NVLINK,
        LinkTier.PIX,
        LinkTier.PXB,
        LinkTier.PHB,
        LinkTier.NODE,
        LinkTier.SYS,
    ]

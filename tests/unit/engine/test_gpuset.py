"""Choosing the GPUs of one pod inside one node (`gpusched.engine.gpuset`).

Stories on real machines first (matrices copied by hand from the captures in
``tests/data/gpu-topology``, named beside each), then properties against a brute-force reference
that ranks every combination with the documented rules, written here independently.

Coverage (topology × request × telemetry):

| topology              | 1 GPU       | 2-4 GPUs               | NUMA policies | free memory |
|-----------------------|-------------|------------------------|---------------|-------------|
| DGX-1 cube-mesh       | keeps quad  | NV2 > NV1, quads       | best-effort   | tie / loses |
| DGX A100 (NV12)       | keeps NUMA  | spans, refusals        | all three     | tie, NaN    |
| HGX A100 (NV12)       | broken pair |                        | best-effort   |             |
| partial NV mesh       |             | SYS unavoidable        | best-effort   |             |
| PCIe (PIX/PHB/NODE)   |             | tiers ordered          | none          |             |
| PCIe all-SYS          |             | lowest indices         | best-effort   |             |
| NVLink-bridged pairs  | broken pair |                        | best-effort   |             |
| unknown               | placed      | UNKNOWN / refused      | all three     |             |
| 32 GPUs (greedy)      | exact       | one board              | all three     |             |
| random k <= 8         | reference   | reference              | all three     | ints / None |
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusched.api.config import NumaPolicy
from gpusched.api.topology import GpuInfo, GpuTopology, LinkTier, parse_link
from gpusched.engine.gpuset import GpuChoice, choose_gpus, clear_caches
from gpusched.engine.gpushape import NVLINK_CAP, NodeShape, link_cost, worst_tier

BEST_EFFORT = NumaPolicy.BEST_EFFORT
SINGLE = NumaPolicy.SINGLE_NUMA_NODE
NONE = NumaPolicy.NONE
NV, PIX, PHB, NODE, SYS, UNKNOWN = (
    LinkTier.NVLINK,
    LinkTier.PIX,
    LinkTier.PHB,
    LinkTier.NODE,
    LinkTier.SYS,
    LinkTier.UNKNOWN,
)


# --- Builders -----------------------------------------------------------------------------------


def shape(matrix: str, numa: Sequence[int | None] | None = None) -> NodeShape:
    """A shape from ``nvidia-smi topo -m`` codes, one row per line; ``?`` is an unknown link."""
    rows = [line.split() for line in matrix.strip().splitlines()]
    links = [[_link(code) for code in row] for row in rows]
    tiers = tuple(tuple(int(tier) for tier, _ in row) for row in links)
    nvlinks = tuple(tuple(n for _, n in row) for row in links)
    return NodeShape(len(rows), tiers, nvlinks, tuple(numa or (None,) * len(rows)))


def _link(code: str) -> tuple[LinkTier, int]:
    if code == "X":
        return NV, 0
    if code == "?":
        return UNKNOWN, 0
    return parse_link(code)


def boards(
    count: int, size: int, inside: str, between: str, numa: Sequence[int] | None = None
) -> NodeShape:
    """`count` boards of `size` GPUs, `inside` links within a board, `between` across; by
    default one NUMA node per board."""
    k = count * size

    def code(i: int, j: int) -> str:
        return "X" if i == j else inside if i // size == j // size else between

    matrix = "\n".join(" ".join(code(i, j) for j in range(k)) for i in range(k))
    return shape(matrix, numa or [i // size for i in range(k)])


def gpus(*indices: int) -> int:
    return sum(1 << i for i in indices)


def all_but(node: NodeShape, *busy: int) -> int:
    return ((1 << node.gpu_count) - 1) & ~gpus(*busy)


# dgx1-v100-8gpu-hybridcubemesh-1nic.topo.txt; NUMA from its CPU affinity (0-11 vs 12-23).
DGX1 = shape(
    """
    X   NV1 NV1 NV2 NV2 SYS SYS SYS
    NV1 X   NV2 NV1 SYS NV2 SYS SYS
    NV1 NV2 X   NV2 SYS SYS NV1 SYS
    NV2 NV1 NV2 X   SYS SYS SYS NV1
    NV2 SYS SYS SYS X   NV1 NV1 NV2
    SYS NV2 SYS SYS NV1 X   NV2 NV1
    SYS SYS NV1 SYS NV1 NV2 X   NV2
    SYS SYS SYS NV1 NV2 NV1 NV2 X
    """,
    numa=[0, 0, 0, 0, 1, 1, 1, 1],
)
# The same capture as the topology-matrix tests see it: it has no NUMA column.
DGX1_NO_NUMA = NodeShape(8, DGX1.tiers, DGX1.nvlinks, (None,) * 8)
# dgx-a100-8gpu-10nic.topo.txt: all NV12, two GPUs per NUMA node.
DGX_A100 = boards(1, 8, "NV12", "SYS", numa=[3, 3, 1, 1, 7, 7, 5, 5])
# hgx-a100-8gpu-3nic-4numa.topo.txt: all NV12 (NVSwitch), NUMA pairs 0-1, 2-3, 4-5, 6-7.
HGX_A100 = boards(1, 8, "NV12", "SYS", numa=[0, 0, 1, 1, 2, 2, 3, 3])
# delos-4gpu-partialmesh-nv2-nv1-sys.topo.txt
PARTIAL_MESH = shape(
    """
    X   NV2 NV2 SYS
    NV2 X   SYS NV1
    NV2 SYS X   NV2
    SYS NV1 NV2 X
    """,
    numa=[0, 0, 1, 1],
)
# pcie-rtx4090-8gpu-8numa-allsys.topo.txt: every pair SYS, one NUMA node per GPU.
ALL_SYS = shape(
    "\n".join(" ".join("X" if i == j else "SYS" for j in range(8)) for i in range(8)),
    numa=[3, 2, 1, 0, 7, 6, 5, 4],
)
# Hand-made: a PCIe box where GPUs 0,2 and 1,3 share a switch.
PCIE_SWITCHES = shape(
    """
    X   PHB PIX PHB
    PHB X   PHB PIX
    PIX PHB X   PHB
    PHB PIX PHB X
    """
)
# Hand-made: 0,1,2 are two PIX pairs and a SYS pair; 3,4,5 all NODE; every other pair SYS.
ONE_SYS_VS_NODES = shape(
    """
    X   PIX PIX SYS SYS SYS
    PIX X   SYS SYS SYS SYS
    PIX SYS X   SYS SYS SYS
    SYS SYS SYS X   NODE NODE
    SYS SYS SYS NODE X  NODE
    SYS SYS SYS NODE NODE X
    """
)
# Hand-made, like two workstation NVLink bridges (workstation-2xrtx3090-nvlink-bridge-nv4).
BRIDGED_PAIRS = shape(
    """
    X   NV4 SYS SYS
    NV4 X   SYS SYS
    SYS SYS X   NV4
    SYS SYS NV4 X
    """,
    numa=[0, 0, 0, 0],
)
UNKNOWN4 = NodeShape.unknown(4)
# Hand-made, past the exact limit: four NV12 boards of 8, SYS between them.
BOARDS32 = boards(4, 8, "NV12", "SYS")


# --- Stories ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    node: NodeShape
    count: int
    want: tuple[int, ...] | None
    want_worst: LinkTier = NV
    want_numa: int = 1
    want_best: LinkTier | None = None
    """Defaults to `want_worst`."""
    free: int | None = None
    """Defaults to every GPU."""
    policy: NumaPolicy = BEST_EFFORT
    memory: tuple[float, ...] | None = None


def _a100_memory(by_gpu: dict[int, float] | None = None) -> tuple[float, ...]:
    """Free memory of a DGX A100's GPUs: 10 each unless `by_gpu` says otherwise."""
    return tuple((by_gpu or {}).get(i, 10.0) for i in range(8))


CASES = [
    pytest.param(Case(DGX1, 2, (0, 3)), id="2 GPUs on a cube-mesh take an NV2 pair, not NV1"),
    pytest.param(
        Case(DGX1, 2, (0, 3), free=gpus(0, 1, 3)),
        id="2 GPUs on a cube-mesh prefer the NV2 pair among three free GPUs",
    ),
    pytest.param(
        Case(DGX1, 4, (0, 1, 2, 3)), id="4 GPUs on an empty cube-mesh take the first quad"
    ),
    pytest.param(
        Case(DGX1, 4, (4, 5, 6, 7), free=all_but(DGX1, 1)),
        id="4 GPUs on a cube-mesh take the intact quad when the other has a busy GPU",
    ),
    # Every single GPU leaves the other 6 NVLink-connected, but only 4, 6 and 7 (quad 4-7, broken
    # by GPU 5) leave quad 0-3 whole, the last all-NVLink set of 4; 4 is the lowest of them.
    pytest.param(
        Case(DGX1_NO_NUMA, 1, (4,), want_numa=0, free=all_but(DGX1, 5)),
        id="a single GPU on a cube-mesh comes from the broken quad, keeping the other whole",
    ),
    pytest.param(
        Case(DGX1, 5, (0, 1, 2, 3, 4), want_worst=SYS, want_numa=2),
        id="5 GPUs on a cube-mesh cannot avoid SYS and take a quad plus its cross link",
    ),
    pytest.param(
        Case(DGX_A100, 4, (0, 1, 2, 3), want_numa=2),
        id="best-effort on DGX A100: 4 GPUs span 2 NUMA nodes",
    ),
    pytest.param(
        Case(DGX_A100, 2, (4, 5), free=all_but(DGX_A100, 1, 3)),
        id="best-effort on DGX A100 keeps a pair in one NUMA node over lower indices",
    ),
    pytest.param(
        Case(DGX_A100, 2, (0, 2), want_numa=2, free=all_but(DGX_A100, 1, 3), policy=NONE),
        id="none on DGX A100 ignores NUMA and takes the lowest indices",
    ),
    pytest.param(
        Case(DGX_A100, 4, None, policy=SINGLE),
        id="single-numa-node refuses 4 GPUs on a DGX A100 (2 per NUMA node)",
    ),
    pytest.param(
        Case(DGX_A100, 2, None, free=gpus(0, 2, 4, 6), policy=SINGLE),
        id="single-numa-node refuses when no NUMA node has enough free",
    ),
    pytest.param(
        Case(DGX_A100, 2, (4, 5), free=gpus(0, 2, 4, 5), policy=SINGLE),
        id="single-numa-node finds the one NUMA node with 2 free",
    ),
    pytest.param(
        Case(DGX_A100, 1, (2,), free=gpus(0, 1, 2)),
        id="a single GPU on DGX A100 leaves a NUMA node's pair whole",
    ),
    # Free: 0 1 | 3 | 5 | 6 7. Taking 3 or 5 (alone in their NUMA node) leaves pairs 0-1 and
    # 6-7 whole (2² + 1 + 2² = 9); taking 0, 1, 6 or 7 breaks one (1 + 1 + 1 + 2² = 7).
    pytest.param(
        Case(HGX_A100, 1, (3,), free=all_but(HGX_A100, 2, 4)),
        id="a single GPU on HGX A100 comes from a broken NUMA pair, keeping whole pairs whole",
    ),
    pytest.param(
        Case(PARTIAL_MESH, 3, (0, 1, 2), want_worst=SYS, want_numa=2),
        id="3 GPUs on a partial mesh: one SYS pair is unavoidable, then most NVLinks",
    ),
    pytest.param(
        Case(PCIE_SWITCHES, 2, (0, 2), want_worst=PIX, want_numa=0),
        id="PCIe: 2 GPUs under one switch (PIX) beat a pair across the host bridge",
    ),
    pytest.param(
        Case(ONE_SYS_VS_NODES, 3, (3, 4, 5), want_worst=NODE, want_numa=0),
        id="three NODE pairs beat a set with one SYS pair, however close the rest",
    ),
    pytest.param(
        Case(ALL_SYS, 2, (0, 1), want_worst=SYS, want_numa=2),
        id="PCIe-only all-SYS node: lowest indices",
    ),
    pytest.param(
        Case(BRIDGED_PAIRS, 1, (0,), free=gpus(0, 2, 3)),
        id="a single GPU is taken from a broken pair rather than splitting an intact NVLink pair",
    ),
    pytest.param(
        Case(UNKNOWN4, 1, (0,), want_numa=0), id="unknown topology: a single GPU is placed"
    ),
    pytest.param(
        Case(UNKNOWN4, 2, (0, 1), want_worst=UNKNOWN, want_numa=0),
        id="unknown topology: 2 GPUs are placed with worst tier UNKNOWN",
    ),
    pytest.param(
        Case(UNKNOWN4, 2, None, policy=SINGLE),
        id="unknown topology: single-numa-node cannot verify 2 GPUs",
    ),
    pytest.param(
        Case(UNKNOWN4, 1, (0,), want_numa=0, policy=SINGLE),
        id="unknown topology: single-numa-node still places 1 GPU",
    ),
    pytest.param(Case(DGX1, 3, None, free=gpus(0, 5)), id="fewer free GPUs than requested"),
    pytest.param(Case(DGX1, 0, (), want_numa=0), id="zero GPUs is an empty choice"),
    pytest.param(
        Case(DGX_A100, 1, (3,), memory=_a100_memory({3: 50})),
        id="free memory breaks a tie between equal GPUs",
    ),
    pytest.param(
        Case(DGX1, 2, (0, 3), free=gpus(0, 1, 3), memory=(0, 99, 0, 0, 0, 0, 0, 0)),
        id="free memory never beats a better link",
    ),
    pytest.param(
        Case(DGX_A100, 2, (0, 1), memory=_a100_memory()),
        id="equal free memory falls back to the lowest indices",
    ),
    pytest.param(
        Case(DGX_A100, 1, (1,), memory=_a100_memory({0: math.nan, 1: 11})),
        id="unknown (NaN) free memory counts as none",
    ),
    pytest.param(
        Case(BOARDS32, 8, tuple(range(8, 16)), free=all_but(BOARDS32, 0)),
        id="32-GPU node (greedy): 8 GPUs take an intact board",
    ),
    pytest.param(
        Case(BOARDS32, 4, (0, 1, 2, 3), policy=NONE), id="32-GPU node: 4 GPUs stay on one board"
    ),
    pytest.param(
        Case(BOARDS32, 9, None, policy=SINGLE), id="32-GPU node: single-numa-node refuses 9 GPUs"
    ),
    pytest.param(
        Case(BOARDS32, 1, (0,), free=gpus(0, *range(8, 16))),
        id="32-GPU node: a single GPU comes from the broken board",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_choose_gpus(case: Case) -> None:
    free = all_but(case.node) if case.free is None else case.free
    got = choose_gpus(case.node, free, case.count, case.policy, case.memory)
    if case.want is None:
        assert got is None
        return
    assert got is not None
    best = case.want_worst if case.want_best is None else case.want_best
    want = GpuChoice(
        case.want, case.want_numa, case.want_worst, best, link_cost(case.node, case.want)
    )
    assert got == want


# --- The shape ----------------------------------------------------------------------------------


def _topology(links: list[list[str]], numa: list[int | None]) -> GpuTopology:
    infos = tuple(GpuInfo(index=i, numa=n) for i, n in enumerate(numa))
    return GpuTopology(gpus=infos, links=tuple(tuple(row) for row in links))


def test_from_topology_reads_links_and_interns_equal_shapes() -> None:
    links = [["X", "NV4", "SYS"], ["NV4", "X", "PHB"], ["SYS", "PHB", "X"]]
    first = NodeShape.from_topology(_topology(links, [0, 0, None]))
    again = NodeShape.from_topology(_topology(links, [0, 0, None]))
    assert first is again
    assert first.tiers[0][1:] == (NV, SYS)
    assert first.tiers[1][2] == PHB
    assert first.nvlinks[0][1] == 4
    assert first.numa == (0, 0, None)


def test_unknown_shapes_are_interned_and_all_unknown() -> None:
    node = NodeShape.unknown(3)
    assert node is NodeShape.unknown(3)
    assert node.tiers[0][2] == UNKNOWN
    assert node.numa == (None, None, None)


@pytest.mark.parametrize(
    ("tiers", "nvlinks", "numa", "message"),
    [
        pytest.param(((0, 5), (4, 0)), ((0, 0), (0, 0)), (0, 0), "symmetric", id="asymmetric"),
        pytest.param(((0, 0), (0, 0)), ((0, 0), (0, 0)), (0, 0), "NVLinks", id="NV with 0 links"),
        pytest.param(((0, 5), (5, 0)), ((0, 2), (2, 0)), (0, 0), "NVLinks", id="SYS with links"),
        pytest.param(((0, 9), (9, 0)), ((0, 0), (0, 0)), (0, 0), "tier", id="unknown tier"),
        pytest.param(((0, 5),), ((0, 0),), (0, 0), "matrix", id="not square"),
        pytest.param(((0, 5), (5, 0)), ((0, 0), (0, 0)), (0,), "NUMA", id="NUMA too short"),
    ],
)
def test_invalid_shapes_are_refused(
    tiers: tuple[tuple[int, ...], ...],
    nvlinks: tuple[tuple[int, ...], ...],
    numa: tuple[int | None, ...],
    message: str,
) -> None:
    with pytest.raises(ValueError, match=message):
        NodeShape(2, tiers, nvlinks, numa)


@pytest.mark.parametrize(
    ("free", "count", "memory", "message"),
    [
        pytest.param(1 << 8, 1, None, "free_mask", id="mask past the last GPU"),
        pytest.param(-1, 1, None, "free_mask", id="negative mask"),
        pytest.param(0xFF, -1, None, "count", id="negative count"),
        pytest.param(0xFF, 1, (1.0,), "free_memory", id="memory of the wrong length"),
    ],
)
def test_bad_requests_are_refused(
    free: int, count: int, memory: tuple[float, ...] | None, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        choose_gpus(DGX1, free, count, BEST_EFFORT, memory)


def test_link_cost_counts_worse_tiers_first_then_nvlinks() -> None:
    assert link_cost(DGX_A100, [0]) == 0
    assert link_cost(DGX_A100, [0, 1]) == NVLINK_CAP - 12
    assert link_cost(DGX1, [0, 3]) < link_cost(DGX1, [0, 1])  # NV2 beats NV1
    assert link_cost(ONE_SYS_VS_NODES, [3, 4, 5]) < link_cost(ONE_SYS_VS_NODES, [0, 1, 2])
    assert worst_tier(ONE_SYS_VS_NODES, [0, 1, 2]) == SYS


# --- Properties against a brute-force reference -------------------------------------------------


def reference(
    node: NodeShape,
    free: int,
    count: int,
    policy: NumaPolicy,
    memory: Sequence[float] | None,
) -> tuple[int, ...] | None:
    """The best set by the documented ranking, trying every combination."""
    candidates = [c for c in _combinations(node, free, count) if _allowed(node, c, policy)]
    if not candidates:
        return None
    return min(candidates, key=lambda c: _rank_key(node, free, c, policy, memory))


def _combinations(node: NodeShape, free: int, count: int) -> list[tuple[int, ...]]:
    return list(itertools.combinations([i for i in range(node.gpu_count) if free >> i & 1], count))


def _allowed(node: NodeShape, chosen: tuple[int, ...], policy: NumaPolicy) -> bool:
    if policy != SINGLE or len(chosen) <= 1:
        return True
    numa = {node.numa[i] for i in chosen}
    return len(numa) == 1 and None not in numa


def _rank_key(
    node: NodeShape,
    free: int,
    chosen: tuple[int, ...],
    policy: NumaPolicy,
    memory: Sequence[float] | None,
) -> tuple[object, ...]:
    left = [i for i in range(node.gpu_count) if free >> i & 1 and i not in chosen]
    return (
        # best-effort: a slower worst link is never traded for fewer NUMA nodes
        _worst(node, chosen) if policy == BEST_EFFORT else 0,
        _span(node, chosen) if policy == BEST_EFFORT else 0,
        _slow_pairs(node, chosen),
        -_largest_nvlink_clique(node, left),
        -_largest_nvlink_block(node, left),
        -_numa_concentration(node, left) if policy != NONE else 0,
        -sum(memory[i] for i in chosen) if memory is not None else 0,
        chosen,
    )


def _worst(node: NodeShape, chosen: Sequence[int]) -> int:
    """The slowest link between two chosen GPUs (NVLink < PIX < … < SYS < unknown)."""
    return max((node.tiers[a][b] for a, b in itertools.combinations(chosen, 2)), default=0)


def _span(node: NodeShape, chosen: Sequence[int]) -> int:
    """NUMA nodes spanned, each GPU of unknown NUMA node counted as one of its own."""
    return len({node.numa[i] if node.numa[i] is not None else ("?", i) for i in chosen})


def _slow_pairs(node: NodeShape, chosen: Sequence[int]) -> tuple[int, ...]:
    """Pairs per tier, worst tier first, then fewer-is-better negated NVLinks."""
    worst_first = [UNKNOWN, SYS, NODE, PHB, LinkTier.PXB, PIX]
    pairs = [(node.tiers[a][b], node.nvlinks[a][b]) for a, b in itertools.combinations(chosen, 2)]
    counts = [sum(1 for tier, _ in pairs if tier == wanted) for wanted in worst_first]
    return (*counts, -sum(min(n, NVLINK_CAP) for _, n in pairs))


def _largest_nvlink_clique(node: NodeShape, left: Sequence[int]) -> int:
    """Size of the largest subset of `left` whose every pair is NVLink: the largest size for
    which some combination qualifies (every set of at most one GPU does)."""
    for size in range(len(left), 1, -1):
        for subset in itertools.combinations(left, size):
            if all(node.tiers[a][b] == NV for a, b in itertools.combinations(subset, 2)):
                return size
    return min(len(left), 1)


def _largest_nvlink_block(node: NodeShape, left: Sequence[int]) -> int:
    unseen, best = set(left), 0
    while unseen:
        stack, size = [unseen.pop()], 1
        while stack:
            gpu = stack.pop()
            linked = {j for j in unseen if node.tiers[gpu][j] == NV}
            unseen -= linked
            stack.extend(linked)
            size += len(linked)
        best = max(best, size)
    return best


def _numa_concentration(node: NodeShape, left: Sequence[int]) -> int:
    """Σ over NUMA nodes of (GPUs left in it)², each GPU of unknown NUMA node on its own."""
    groups = [node.numa[i] if node.numa[i] is not None else ("?", i) for i in left]
    return sum(groups.count(g) ** 2 for g in set(groups))


def _numa_nodes(node: NodeShape, chosen: Sequence[int]) -> int:
    if any(node.numa[i] is None for i in chosen):
        return 0
    return len({node.numa[i] for i in chosen})


def _best_possible(node: NodeShape, count: int) -> LinkTier:
    every = itertools.combinations(range(node.gpu_count), count)
    return min(worst_tier(node, c) for c in every)


_CODES = ["NV1", "NV2", "NV4", "NV12", "NV99", "PIX", "PXB", "PHB", "NODE", "SYS", "?"]


@st.composite
def random_shapes(draw: st.DrawFn, min_gpus: int = 1, max_gpus: int = 8) -> NodeShape:
    k = draw(st.integers(min_gpus, max_gpus))
    codes = draw(st.lists(st.sampled_from(_CODES), min_size=3, max_size=3, unique=True))
    matrix = [["X"] * k for _ in range(k)]
    for i, j in itertools.combinations(range(k), 2):
        matrix[i][j] = matrix[j][i] = draw(st.sampled_from(codes))
    numa_choices = st.one_of(st.none(), st.integers(0, 2))
    numa = draw(st.lists(numa_choices, min_size=k, max_size=k))
    return shape("\n".join(" ".join(row) for row in matrix), numa)


@st.composite
def requests(
    draw: st.DrawFn, min_gpus: int = 1, max_gpus: int = 8
) -> tuple[NodeShape, int, int, NumaPolicy, list[float] | None]:
    node = draw(random_shapes(min_gpus, max_gpus))
    free = draw(st.integers(0, (1 << node.gpu_count) - 1))
    count = draw(st.integers(0, node.gpu_count))
    policy = draw(st.sampled_from(list(NumaPolicy)))
    memory = draw(
        st.none()
        | st.lists(st.integers(0, 3).map(float), min_size=node.gpu_count, max_size=node.gpu_count)
    )
    return node, free, count, policy, memory


@settings(max_examples=300, deadline=None)
@given(requests())
def test_matches_brute_force_reference(
    request: tuple[NodeShape, int, int, NumaPolicy, list[float] | None],
) -> None:
    node, free, count, policy, memory = request
    got = choose_gpus(node, free, count, policy, memory)
    want = reference(node, free, count, policy, memory)
    if want is None:
        assert got is None
        return
    assert got is not None
    assert got.gpus == want
    assert (got.numa_nodes, got.worst_tier, got.link_cost) == (
        _numa_nodes(node, want),
        worst_tier(node, want),
        link_cost(node, want),
    )
    assert got.best_possible_tier == (_best_possible(node, count) if count else NV)


@settings(max_examples=200, deadline=None)
@given(random_shapes(min_gpus=2), st.data())
def test_link_cost_orders_sets_like_the_tier_counts(node: NodeShape, data: st.DataObject) -> None:
    count = data.draw(st.integers(2, node.gpu_count))
    subsets = st.lists(
        st.integers(0, node.gpu_count - 1), min_size=count, max_size=count, unique=True
    ).map(sorted)
    a, b = data.draw(subsets), data.draw(subsets)
    by_cost = (link_cost(node, a) > link_cost(node, b)) - (link_cost(node, a) < link_cost(node, b))
    by_pairs = (_slow_pairs(node, a) > _slow_pairs(node, b)) - (
        _slow_pairs(node, a) < _slow_pairs(node, b)
    )
    assert by_cost == by_pairs


@settings(max_examples=50, deadline=None)
@given(requests(min_gpus=17, max_gpus=20))
def test_greedy_on_large_nodes_gives_valid_sets(
    request: tuple[NodeShape, int, int, NumaPolicy, list[float] | None],
) -> None:
    node, free, count, policy, memory = request
    got = choose_gpus(node, free, count, policy, memory)
    feasible = any(_allowed(node, c, policy) for c in _feasible_probe(node, free, count, policy))
    assert (got is not None) == feasible
    if got is None:
        return
    assert len(got.gpus) == count
    assert list(got.gpus) == sorted(got.gpus)
    assert gpus(*got.gpus) & ~free == 0
    assert _allowed(node, got.gpus, policy)
    assert got.link_cost == link_cost(node, got.gpus)
    if count == 1:  # exact on every node
        assert got.gpus == reference(node, free, count, policy, memory)


def _feasible_probe(
    node: NodeShape, free: int, count: int, policy: NumaPolicy
) -> list[tuple[int, ...]]:
    """One representative set per way a set could be allowed (avoids C(20, 10) combinations)."""
    free_gpus = [i for i in range(node.gpu_count) if free >> i & 1]
    if len(free_gpus) < count:
        return []
    if policy != SINGLE or count <= 1:
        return [tuple(free_gpus[:count])]
    by_numa: dict[int | None, list[int]] = {}
    for i in free_gpus:
        by_numa.setdefault(node.numa[i], []).append(i)
    return [tuple(members[:count]) for members in by_numa.values() if len(members) >= count]


@settings(max_examples=100, deadline=None)
@given(requests())
def test_same_input_same_answer_cold_or_warm(
    request: tuple[NodeShape, int, int, NumaPolicy, list[float] | None],
) -> None:
    node, free, count, policy, memory = request
    warm = choose_gpus(node, free, count, policy, memory)
    assert choose_gpus(node, free, count, policy, memory) == warm
    clear_caches()
    assert choose_gpus(node, free, count, policy, memory) == warm


def test_sixteen_gpus_are_exact() -> None:
    # Two NV12 boards of 8 joined by SYS, one GPU per board made PCIe-only (PIX to its board).
    node = boards(2, 8, "NV12", "SYS")
    tiers = [list(row) for row in node.tiers]
    nvlinks = [list(row) for row in node.nvlinks]
    for i in (3, 12):
        for j in range(16):
            if i != j and tiers[i][j] == NV:
                tiers[i][j] = tiers[j][i] = PIX
                nvlinks[i][j] = nvlinks[j][i] = 0
    node = NodeShape(16, tuple(map(tuple, tiers)), tuple(map(tuple, nvlinks)), node.numa)
    for free, count, policy in [
        (all_but(node, 0, 9), 8, NONE),
        (all_but(node, 5), 6, BEST_EFFORT),
        (all_but(node, 1, 2, 14), 3, SINGLE),
    ]:
        got = choose_gpus(node, free, count, policy)
        assert got is not None
        assert got.gpus == reference(node, free, count, policy, None)

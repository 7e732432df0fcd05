"""A node's GPU layout (`NodeShape`) and the cost of a set of its GPUs' links: what every GPU
choice on nodes of one shape shares. The ranking that uses them is in `gpuset`."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpusched.api.topology import GpuTopology, LinkTier

NVLINK_CAP = 63
"""Bonded NVLinks above this count as this many in `link_cost` (today's maximum is 18)."""
CAP_BITS = NVLINK_CAP.bit_length()

SLOW_TIERS = (
    LinkTier.PIX,
    LinkTier.PXB,
    LinkTier.PHB,
    LinkTier.NODE,
    LinkTier.SYS,
    LinkTier.UNKNOWN,
)
"""The digits of `link_cost`, least significant first."""

TIER_DIGIT = {tier: rank for rank, tier in enumerate(SLOW_TIERS)}


@dataclass(frozen=True, slots=True)
class NodeShape:
    """Static GPU layout of a node, shared by all nodes with the same topology (interned by
    `from_topology` and `unknown`). Tiers and NVLink counts are symmetric; the diagonal is
    ignored. The hash is computed once, as shapes key every cache of the GPU choice."""

    gpu_count: int
    tiers: tuple[tuple[int, ...], ...]
    """`LinkTier` of each pair of GPUs."""
    nvlinks: tuple[tuple[int, ...], ...]
    """Bonded NVLinks of each pair: at least 1 on ``NVLINK`` pairs, 0 on all others."""
    numa: tuple[int | None, ...]
    """NUMA node of each GPU, ``None`` when unknown."""
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_shape(self)
        key = (self.gpu_count, self.tiers, self.nvlinks, self.numa)
        object.__setattr__(self, "_hash", hash(key))

    def __hash__(self) -> int:
        return self._hash

    @staticmethod
    def from_topology(topology: GpuTopology) -> NodeShape:
        count = len(topology.gpus)
        links = [
            [topology.link(i, j) if i != j else None for j in range(count)] for i in range(count)
        ]
        tiers = tuple(tuple(0 if link is None else int(link.tier) for link in row) for row in links)
        nvlinks = tuple(tuple(0 if link is None else link.nvlinks for link in row) for row in links)
        return interned(NodeShape(count, tiers, nvlinks, tuple(gpu.numa for gpu in topology.gpus)))

    @staticmethod
    def unknown(gpu_count: int) -> NodeShape:
        """A node without (a usable) topology annotation: every pair ``UNKNOWN``, NUMA unknown."""
        tiers = tuple(
            tuple(0 if i == j else int(LinkTier.UNKNOWN) for j in range(gpu_count))
            for i in range(gpu_count)
        )
        nvlinks = tuple((0,) * gpu_count for _ in range(gpu_count))
        return interned(NodeShape(gpu_count, tiers, nvlinks, (None,) * gpu_count))


def link_cost(shape: NodeShape, gpus: Sequence[int]) -> int:
    """The slow-link cost of a set of GPUs; lower is better.

    With c GPUs, P = c(c-1)/2 pairs, n_t pairs at tier t and N the NVLinks of all pairs summed
    (each capped at `NVLINK_CAP`)::

        slow      = n_UNKNOWN·B^5 + n_SYS·B^4 + n_NODE·B^3 + n_PHB·B^2 + n_PXB·B + n_PIX,  B = P+1
        link_cost = slow·(P·NVLINK_CAP + 1) + (P·NVLINK_CAP − N)

    Every digit is below its base, so comparing costs of equal-size sets compares (n_UNKNOWN,
    n_SYS, ..., n_PIX) lexicographically, then prefers more NVLinks. An all-NV12 pair costs 51;
    fewer than two GPUs cost 0. Up to 16 GPUs the value fits in an int64.
    """
    slow_counts = [0] * len(SLOW_TIERS)
    nvlinks = 0
    for a, b in itertools.combinations(gpus, 2):
        tier = shape.tiers[a][b]
        if tier == LinkTier.NVLINK:
            nvlinks += min(shape.nvlinks[a][b], NVLINK_CAP)
        else:
            slow_counts[TIER_DIGIT[LinkTier(tier)]] += 1
    pairs = len(gpus) * (len(gpus) - 1) // 2
    slow = 0
    for n in reversed(slow_counts):
        slow = slow * (pairs + 1) + n
    return slow * (pairs * NVLINK_CAP + 1) + pairs * NVLINK_CAP - nvlinks


def worst_tier(shape: NodeShape, gpus: Sequence[int]) -> LinkTier:
    """The worst link inside a set of GPUs; ``NVLINK`` for fewer than two."""
    tiers = (shape.tiers[a][b] for a, b in itertools.combinations(gpus, 2))
    return LinkTier(max(tiers, default=LinkTier.NVLINK))


# --- Validation ---------------------------------------------------------------------------------


def _check_shape(shape: NodeShape) -> None:
    k = shape.gpu_count
    if k < 0 or len(shape.numa) != k:
        raise ValueError(f"NodeShape: {k} GPUs but {len(shape.numa)} NUMA entries")
    for name, matrix in (("tiers", shape.tiers), ("nvlinks", shape.nvlinks)):
        if len(matrix) != k or any(len(row) != k for row in matrix):
            raise ValueError(f"NodeShape: {name} must be a {k}x{k} matrix")
    for i, j in itertools.combinations(range(k), 2):
        _check_pair(shape, i, j)
    if any(n is not None and n < 0 for n in shape.numa):
        raise ValueError("NodeShape: NUMA nodes must be >= 0 or None")


def _check_pair(shape: NodeShape, i: int, j: int) -> None:
    tier, links = shape.tiers[i][j], shape.nvlinks[i][j]
    if (tier, links) != (shape.tiers[j][i], shape.nvlinks[j][i]):
        raise ValueError(f"NodeShape: pair ({i}, {j}) is not symmetric")
    if not LinkTier.NVLINK <= tier <= LinkTier.UNKNOWN:
        raise ValueError(f"NodeShape: pair ({i}, {j}) has unknown tier {tier}")
    if (links >= 1) != (tier == LinkTier.NVLINK) or links < 0:
        raise ValueError(f"NodeShape: pair ({i}, {j}) has {links} NVLinks at tier {tier}")


@functools.lru_cache(maxsize=1024)
def interned(shape: NodeShape) -> NodeShape:
    # Equal shapes become one object, so cache lookups stop at the identity check.
    return shape


def numa_groups(shape: NodeShape) -> tuple[int, ...]:
    """A small id per GPU: one per known NUMA node, and a fresh one for each unknown GPU."""
    ids: dict[int | tuple[str, int], int] = {}
    keys = (n if n is not None else ("unknown", i) for i, n in enumerate(shape.numa))
    return tuple(ids.setdefault(key, len(ids)) for key in keys)


def nvlink_neighbours(shape: NodeShape) -> list[int]:
    """Per GPU, the mask of the GPUs it has an NVLink to."""
    k = shape.gpu_count
    return [
        sum(1 << j for j in range(k) if j != i and shape.tiers[i][j] == LinkTier.NVLINK)
        for i in range(k)
    ]


def mask_bits(mask: int) -> list[int]:
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out

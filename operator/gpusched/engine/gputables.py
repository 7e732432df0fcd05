"""Facts of every subset of a node shape's GPUs, computed once per shape: the tables of the
exact choice (up to `EXACT_MAX_GPUS`), and the graph the greedy choice walks on larger
nodes. See `gpuset` for how the choice uses them."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpusched.api.topology import LinkTier
from gpusched.engine.gpushape import (
    CAP_BITS,
    NVLINK_CAP,
    SLOW_TIERS,
    TIER_DIGIT,
    NodeShape,
    numa_groups,
    nvlink_neighbours,
)

IntArray = npt.NDArray[np.int64]
SmallArray = npt.NDArray[np.int8]
MidArray = npt.NDArray[np.int16]

EXACT_MAX_GPUS = 16
"""Nodes with at most this many GPUs get the exact answer; 2^16 subsets are about 1.3 MB."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SubsetTables:
    """Per-subset facts, indexed by the subset's bit mask."""

    link_cost: IntArray
    worst_tier: SmallArray
    span: SmallArray
    """NUMA nodes spanned, each GPU of unknown NUMA node counted as one more."""
    numa_nodes: SmallArray
    """``span``, or 0 when a member's NUMA node is unknown (what `GpuChoice` reports)."""
    clique: SmallArray
    """GPUs in the largest all-NVLink subset (every pair NVLink); 1 for one GPU, 0 for none."""
    nv_block: SmallArray
    """GPUs in the largest NVLink-connected block."""
    concentration: MidArray
    """Σ over NUMA groups (`numa_groups`) of (members in it)²."""
    by_count: tuple[IntArray, ...]
    """Masks of each size, in lexicographic order of their index tuples."""
    best_possible: tuple[LinkTier, ...]
    """Per size: the best worst-tier of any subset."""


@functools.lru_cache(maxsize=64)
def subset_tables(shape: NodeShape) -> SubsetTables:
    k = shape.gpu_count
    subsets = np.arange(1 << k, dtype=np.int64)
    size = np.bitwise_count(subsets).astype(np.int64)
    sums = _pair_sums(k, _channel_planes(shape))
    numa_bits = _numa_bits(shape)
    span = np.bitwise_count(_or_table(k, numa_bits))
    unknown = sum(1 << i for i, n in enumerate(shape.numa) if n is None)
    worst = _worst_tier_table(sums)
    by_count = _lexicographic_by_size(k, subsets, size)
    return SubsetTables(
        link_cost=_link_cost_table(size, sums),
        worst_tier=worst,
        span=span.astype(np.int8),
        numa_nodes=np.where(subsets & unknown, 0, span).astype(np.int8),
        clique=_largest_clique_table(k, size, worst),
        nv_block=_largest_block_table(k, subsets, nvlink_neighbours(shape)),
        concentration=_concentration_table(subsets, numa_bits),
        by_count=by_count,
        best_possible=tuple(LinkTier(int(worst[sets].min())) for sets in by_count),
    )


Planes = list[list[tuple[int, int]]]
"""Per GPU i: (mask, weight) pairs such that a channel's sum over the pairs {i, j}, j in S, is
Σ weight · |S ∩ mask|."""


def _channel_planes(shape: NodeShape) -> list[Planes]:
    """One `Planes` per channel: each slow tier (weight 1), then the NVLink counts, split into
    their binary digits so that every plane is a plain mask."""
    k = shape.gpu_count
    channels = [[_tier_plane(shape, i, tier) for i in range(k)] for tier in SLOW_TIERS]
    nvlinks = [_nvlink_planes(shape, i) for i in range(k)]
    return [*channels, nvlinks]


def _tier_plane(shape: NodeShape, i: int, tier: LinkTier) -> list[tuple[int, int]]:
    mask = sum(1 << j for j in range(shape.gpu_count) if j != i and shape.tiers[i][j] == tier)
    return [(mask, 1)] if mask else []


def _nvlink_planes(shape: NodeShape, i: int) -> list[tuple[int, int]]:
    capped = [
        min(shape.nvlinks[i][j], NVLINK_CAP)
        if j != i and shape.tiers[i][j] == LinkTier.NVLINK
        else 0
        for j in range(shape.gpu_count)
    ]
    digits = (
        (sum(1 << j for j, n in enumerate(capped) if n >> b & 1), 1 << b) for b in range(CAP_BITS)
    )
    return [(mask, weight) for mask, weight in digits if mask]


def _pair_sums(k: int, channels: list[Planes]) -> IntArray:
    """(2^k, channels): each channel summed over the pairs inside each subset. Adding GPU i to
    a subset S of GPUs 0..i-1 adds its links towards the members of S: popcounts of masks."""
    out = np.zeros((1 << k, len(channels)), dtype=np.int64)
    below = np.arange(1 << max(k - 1, 0), dtype=np.int64)
    for i in range(k):
        low = 1 << i
        out[low : 2 * low] = out[:low]
        for c, planes in enumerate(channels):
            for mask, weight in planes[i]:
                out[low : 2 * low, c] += weight * np.bitwise_count(below[:low] & mask)
    return out


def _or_table(k: int, bits: Sequence[int]) -> IntArray:
    """For each subset, the OR of `bits` over its members."""
    out = np.zeros(1 << k, dtype=np.int64)
    for i, bit in enumerate(bits):
        low = 1 << i
        out[low : 2 * low] = out[:low] | bit
    return out


def _link_cost_table(size: IntArray, sums: IntArray) -> IntArray:
    """`link_cost` for every subset at once (same formula, vectorised)."""
    pairs = size * (size - 1) // 2
    slow = np.zeros_like(size)
    for digit in reversed(range(len(SLOW_TIERS))):
        slow = slow * (pairs + 1) + sums[:, digit]
    nvlinks = sums[:, len(SLOW_TIERS)]
    cost: IntArray = slow * (pairs * NVLINK_CAP + 1) + pairs * NVLINK_CAP - nvlinks
    return cost


def _worst_tier_table(sums: IntArray) -> SmallArray:
    worst = np.full(len(sums), int(LinkTier.NVLINK), dtype=np.int8)
    for digit, tier in enumerate(SLOW_TIERS):  # worse tiers come later and overwrite
        worst[sums[:, digit] > 0] = int(tier)
    return worst


def _numa_bits(shape: NodeShape) -> list[int]:
    return [1 << group for group in numa_groups(shape)]


def _largest_block_table(k: int, subsets: IntArray, neighbours: list[int]) -> SmallArray:
    """Size of the largest NVLink-connected block of every subset. First the block of each
    subset's lowest GPU, grown to a fixed point through the OR of its members' neighbours; then
    the rest of the subset (a smaller mask) lends its own answer, again to a fixed point."""
    reach = _or_table(k, neighbours)
    block = subsets & -subsets
    while True:
        grown = subsets & (block | reach[block])
        if np.array_equal(grown, block):
            break
        block = grown
    size: SmallArray = np.bitwise_count(block).astype(np.int8)
    rest = subsets & ~block
    best = size
    while True:
        wider: SmallArray = np.maximum(size, best[rest])
        if np.array_equal(wider, best):
            return best
        best = wider


def _largest_clique_table(k: int, size: IntArray, worst: SmallArray) -> SmallArray:
    """Size of the largest all-NVLink subset of every subset. A subset whose worst tier is
    NVLink is its own answer (so are the empty set and single GPUs); then a maximum over
    submasks, one GPU at a time: after pass i, every mask holds the best over the submasks that
    differ from it in GPUs 0..i only. Pass i pairs each mask holding GPU i with the same mask
    without it, which a reshape to (-1, 2, 2^i) lines up as [:, 1] against [:, 0]."""
    clique = np.where(worst == int(LinkTier.NVLINK), size, 0).astype(np.int8)
    for i in range(k):
        pairs = clique.reshape(-1, 2, 1 << i)  # a view: writes land in `clique`
        np.maximum(pairs[:, 1], pairs[:, 0], out=pairs[:, 1])
    return clique


def _concentration_table(subsets: IntArray, numa_bits: list[int]) -> MidArray:
    """Σ over NUMA groups of (members in it)²; at most 16² = 256 up to 16 GPUs."""
    total = np.zeros(len(subsets), dtype=np.int16)
    for group in sorted(set(numa_bits)):
        gpus = sum(1 << i for i, bit in enumerate(numa_bits) if bit == group)
        members = np.bitwise_count(subsets & gpus).astype(np.int16)
        total += members * members
    return total


def _lexicographic_by_size(k: int, subsets: IntArray, size: IntArray) -> tuple[IntArray, ...]:
    # For sets of equal size, the smaller index tuple is the one holding the lowest GPU where
    # they differ: with GPU i as bit k-1-i, that is the larger mirrored mask.
    mirrored = _or_table(k, [1 << (k - 1 - i) for i in range(k)])
    ordered = subsets[np.argsort((size << k) | (subsets[-1] ^ mirrored))]
    edges = np.concatenate(([0], np.cumsum(np.bincount(size, minlength=k + 1))))
    return tuple(ordered[edges[c] : edges[c + 1]] for c in range(k + 1))


@dataclass(frozen=True, slots=True, kw_only=True)
class ShapeGraph:
    """What the greedy needs of a large shape."""

    neighbours: tuple[int, ...]
    """Per GPU, mask of its NVLink neighbours."""
    groups: tuple[int, ...]
    """Per GPU, its NUMA group (`numa_groups`)."""
    group_array: IntArray
    group_count: int
    known_groups: tuple[int, ...]
    """Per known NUMA node, the mask of its GPUs."""
    pair_cost: IntArray
    """(k, k): what one pair adds to a set, as base-64 digits per slow tier above 12 bits of
    missing NVLinks; sums over up to 63 pairs keep every digit in place (beyond, digits carry
    and the greedy only gets worse, never wrong: candidates are ranked by `link_cost`)."""


_PAIR_DEFICIT_BITS = 12
_PAIR_DIGIT = 64


@functools.lru_cache(maxsize=64)
def shape_graph(shape: NodeShape) -> ShapeGraph:
    groups = numa_groups(shape)
    known = sorted({g for g, n in zip(groups, shape.numa, strict=True) if n is not None})
    masks = tuple(sum(1 << i for i, g in enumerate(groups) if g == group) for group in known)
    return ShapeGraph(
        neighbours=tuple(nvlink_neighbours(shape)),
        groups=groups,
        group_array=np.array(groups, dtype=np.int64),
        group_count=len(set(groups)),
        known_groups=masks,
        pair_cost=_pair_cost_matrix(shape),
    )


def _pair_cost_matrix(shape: NodeShape) -> IntArray:
    k = shape.gpu_count
    cost = np.zeros((k, k), dtype=np.int64)
    for i, j in itertools.permutations(range(k), 2):
        tier = shape.tiers[i][j]
        if tier == LinkTier.NVLINK:
            cost[i, j] = NVLINK_CAP - min(shape.nvlinks[i][j], NVLINK_CAP)
        else:
            digit = _PAIR_DIGIT ** TIER_DIGIT[LinkTier(tier)]
            cost[i, j] = (digit << _PAIR_DEFICIT_BITS) + NVLINK_CAP
    return cost

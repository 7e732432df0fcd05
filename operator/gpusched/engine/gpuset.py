"""Which GPUs of one node a pod gets: the exact best set of ``count`` among the free ones.

Ranking of candidate sets, lexicographic (first difference decides):

1. NUMA and link tier. ``single-numa-node``: only sets inside one NUMA node. ``best-effort``:
   the best worst link first (all-NVLink beats any PCIe tier), then the fewest NUMA nodes
   spanned: a set one NUMA node closer is never worth a slower link, since the link is what a
   multi-GPU job's collectives run over, while NUMA distance only costs host-to-device copies.
   ``none``: NUMA is not looked at.
2. Fewest slow links, as one integer, `link_cost` (encoding below): fewer pairs at the worst
   tier beats anything, then the next tier, ..., then more bonded NVLinks.
3. What is left for later pods, among the GPUs still free:

   a. the largest all-NVLink set (every pair of it NVLink: what a later multi-GPU pod would get
      without a slow link; on a DGX-1 cube-mesh, a quad; on NVSwitch, everything);
   b. then the largest NVLink-connected block (members linked through other members);
   c. then, unless the policy is ``none``, NUMA concentration: Σ over NUMA nodes of (GPUs still
      free in it)². Taking a GPU from a node with n free lowers the sum by 2n − 1, so this
      prefers taking from a NUMA node that is already broken and keeps whole ones whole.

   All three are combined into one integer, `_leftover_key` (encoding there).
4. Most free memory summed over the set, when telemetry gives it.
5. Lowest indices (lexicographically smallest sorted tuple).

A GPU whose NUMA node is unknown counts as a NUMA node of its own: best-effort prefers GPUs it
knows to be together, and single-numa-node can verify no multi-GPU set that includes it.

How it runs, per node shape (every node with the same topology shares one, interned):

- Tables (once per shape, up to 16 GPUs): for all 2^k subsets, built with numpy by doubling
  (the subsets that contain GPU i are those without it, plus GPU i): link cost, worst tier, NUMA
  span, largest NVLink block and NUMA concentration; the largest all-NVLink set from the worst
  tier, by a maximum over submasks (k vectorised passes). Subsets are kept grouped by size, each
  group in lexicographic order of its index tuple, so "first" always means "lowest indices".
- Ties (once per shape, free mask, count and policy; memoised): keep the subsets of the free GPUs
  with the right size, then filter by steps 1-3. What remains is a handful of equally good sets.
- Choice (every call): step 4 over the tied sets, step 5 by taking the first.

Nodes with more than 16 GPUs get a greedy instead of tables (see `_grown_sets`); exactness is
promised up to 16 GPUs only. Single-GPU requests are exact on every node, up to the largest
all-NVLink set left, which there comes from a bounded search (`_largest_clique`): exact unless
its step budget runs out, a lower bound then (never on the nodes built today: NVSwitch boards
and cube-meshes take a few steps).
"""

from __future__ import annotations

import functools
import itertools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from gpusched.api.config import NumaPolicy
from gpusched.api.topology import GpuTopology, LinkTier

IntArray = npt.NDArray[np.int64]
SmallArray = npt.NDArray[np.int8]
MidArray = npt.NDArray[np.int16]

EXACT_MAX_GPUS = 16
"""Nodes with at most this many GPUs get the exact answer; 2^16 subsets are about 1.3 MB."""

NVLINK_CAP = 63
"""Bonded NVLinks above this count as this many in `link_cost` (today's maximum is 18)."""
_CAP_BITS = NVLINK_CAP.bit_length()

SLOW_TIERS = (
    LinkTier.PIX,
    LinkTier.PXB,
    LinkTier.PHB,
    LinkTier.NODE,
    LinkTier.SYS,
    LinkTier.UNKNOWN,
)
"""The digits of `link_cost`, least significant first."""

_DIGIT = {tier: rank for rank, tier in enumerate(SLOW_TIERS)}
_CLIQUE_BUDGET = 1 << 14
"""Search steps `_largest_clique` may take per leftover on nodes past `EXACT_MAX_GPUS`."""
_MEMORY_TOLERANCE = 1e-9  # relative; float rounding of a sum must never pick the winner


@dataclass(frozen=True, slots=True)
class NodeShape:
    """Static GPU layout of a node, shared by all nodes with the same topology (interned by
    `from_topology` and `unknown`). Tiers and NVLink counts are symmetric; the diagonal is
    ignored. The hash is computed once, as shapes key every cache of this module."""

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
        return _intern(NodeShape(count, tiers, nvlinks, tuple(gpu.numa for gpu in topology.gpus)))

    @staticmethod
    def unknown(gpu_count: int) -> NodeShape:
        """A node without (a usable) topology annotation: every pair ``UNKNOWN``, NUMA unknown."""
        tiers = tuple(
            tuple(0 if i == j else int(LinkTier.UNKNOWN) for j in range(gpu_count))
            for i in range(gpu_count)
        )
        nvlinks = tuple((0,) * gpu_count for _ in range(gpu_count))
        return _intern(NodeShape(gpu_count, tiers, nvlinks, (None,) * gpu_count))


@dataclass(frozen=True, slots=True)
class GpuChoice:
    """The GPUs chosen for one pod on one node, and how good their links are."""

    gpus: tuple[int, ...]
    """Sorted GPU indices."""
    numa_nodes: int
    """NUMA nodes the set spans; 0 when a GPU's NUMA node is unknown (or the set is empty)."""
    worst_tier: LinkTier
    """Worst link inside the set; ``NVLINK`` for fewer than two GPUs."""
    best_possible_tier: LinkTier
    """Best worst-tier any set of this size could have on this node when empty, NUMA aside.
    Exact up to 16 GPUs; above, the greedy's best, which may be worse than the true best."""
    link_cost: int
    """Lower is better; see `link_cost`. Comparable between nodes for the same GPU count."""


_NO_GPUS = GpuChoice((), 0, LinkTier.NVLINK, LinkTier.NVLINK, 0)


def choose_gpus(
    shape: NodeShape,
    free_mask: int,
    count: int,
    policy: NumaPolicy,
    free_memory: Sequence[float] | None = None,
) -> GpuChoice | None:
    """The best `count` GPUs among those set in `free_mask` (bit i: GPU i is free and usable),
    by the ranking in this module's docstring; ``None`` when no set is allowed: fewer than
    `count` free, or single-numa-node and no NUMA node has `count` free. A multi-GPU set under
    single-numa-node must have every GPU's NUMA node known, so on a node of unknown NUMA layout
    it is unsatisfiable for `count` > 1. `free_memory` is per GPU of the node (any unit, NaN for
    unknown, which counts as none free).

    Same input, same answer. Raises ``ValueError`` on a mask with bits past the node's GPUs, a
    negative count, or a `free_memory` of the wrong length.
    """
    _check_request(shape, free_mask, count, free_memory)
    if count == 0:
        return _NO_GPUS
    if free_mask.bit_count() < count:
        return None
    ties = _ties(shape, free_mask, count, NumaPolicy(policy))
    if ties is None:
        return None
    if free_memory is None or len(ties.members) == 1:
        return ties.first
    return _choice(ties, _most_free_memory(ties.members, free_memory))


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
            slow_counts[_DIGIT[LinkTier(tier)]] += 1
    pairs = len(gpus) * (len(gpus) - 1) // 2
    slow = 0
    for n in reversed(slow_counts):
        slow = slow * (pairs + 1) + n
    return slow * (pairs * NVLINK_CAP + 1) + pairs * NVLINK_CAP - nvlinks


def worst_tier(shape: NodeShape, gpus: Sequence[int]) -> LinkTier:
    """The worst link inside a set of GPUs; ``NVLINK`` for fewer than two."""
    tiers = (shape.tiers[a][b] for a, b in itertools.combinations(gpus, 2))
    return LinkTier(max(tiers, default=LinkTier.NVLINK))


def clear_caches() -> None:
    """Forgets every table and memoised answer (tests and benchmarks measure cold calls)."""
    for cached in (_intern, _tables, _graph, _ties, _greedy_best_tier):
        cached.cache_clear()


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


def _check_request(
    shape: NodeShape, free_mask: int, count: int, free_memory: Sequence[float] | None
) -> None:
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    if free_mask < 0 or free_mask >> shape.gpu_count:
        raise ValueError(f"free_mask {free_mask:#x} names GPUs the node lacks ({shape.gpu_count})")
    if free_memory is not None and len(free_memory) != shape.gpu_count:
        raise ValueError(f"free_memory has {len(free_memory)} values for {shape.gpu_count} GPUs")


@functools.lru_cache(maxsize=1024)
def _intern(shape: NodeShape) -> NodeShape:
    # Equal shapes become one object, so cache lookups stop at the identity check.
    return shape


# --- Ties: steps 1-3, memoised ------------------------------------------------------------------


class _Ties(NamedTuple):
    """Equally good sets after steps 1-3, in lexicographic order of their index tuples."""

    members: IntArray
    """(sets, count) GPU indices."""
    numa_nodes: IntArray
    link_cost: int
    worst_tier: LinkTier
    best_possible_tier: LinkTier
    first: GpuChoice


@functools.lru_cache(maxsize=16384)
def _ties(shape: NodeShape, free_mask: int, count: int, policy: NumaPolicy) -> _Ties | None:
    if shape.gpu_count <= EXACT_MAX_GPUS:
        return _exact_ties(shape, free_mask, count, policy)
    return _greedy_ties(shape, free_mask, count, policy)


def _rank(
    policy: NumaPolicy,
    span: IntArray,
    worst: IntArray,
    cost: npt.NDArray[Any],
    leftover: IntArray,
) -> npt.NDArray[np.intp] | None:
    """Positions of the candidates that are best by steps 1-3; ``None`` if none is allowed.
    ``worst`` is each candidate's worst link tier (as an integer, lower is better)."""
    keep = np.arange(len(cost))
    if policy == NumaPolicy.SINGLE_NUMA_NODE:
        keep = keep[span == 1]
        if keep.size == 0:
            return None
    elif policy == NumaPolicy.BEST_EFFORT:
        keep = _minima(span, _minima(worst, keep))
    keep = _minima(cost, keep)
    return _minima(-leftover, keep)


def _minima(values: npt.NDArray[Any], keep: npt.NDArray[np.intp]) -> npt.NDArray[np.intp]:
    kept = values[keep]
    best: npt.NDArray[np.bool_] = kept == kept.min()
    return keep[best]


def _leftover_key(
    policy: NumaPolicy, gpu_count: int, clique: IntArray, block: IntArray, concentration: IntArray
) -> IntArray:
    """Step 3 as one integer per candidate, larger is better. With k GPUs on the node::

        key = (clique·(k+1) + block)·(k²+1) + concentration      (policy none: clique·(k+1) + block)

    Every measure is below its base: clique ≤ block ≤ k, and concentration = Σ n² ≤ (Σ n)² ≤ k².
    So comparing keys compares (clique, block, concentration) lexicographically. The largest
    key is below (k+1)²·(k²+1): 74 273 for 16 GPUs, about 2^24 for 64; int64 holds it for any
    k below 2^15."""
    key = clique * (gpu_count + 1) + block
    if policy == NumaPolicy.NONE:
        return key
    return key * (gpu_count * gpu_count + 1) + concentration


def _make_ties(
    members: IntArray, numa_nodes: IntArray, cost: int, worst: LinkTier, best: LinkTier
) -> _Ties:
    first = GpuChoice(tuple(members[0].tolist()), int(numa_nodes[0]), worst, best, cost)
    return _Ties(members, numa_nodes, cost, worst, best, first)


def _choice(ties: _Ties, i: int) -> GpuChoice:
    gpus = tuple(ties.members[i].tolist())
    numa = int(ties.numa_nodes[i])
    return GpuChoice(gpus, numa, ties.worst_tier, ties.best_possible_tier, ties.link_cost)


def _most_free_memory(members: IntArray, free_memory: Sequence[float]) -> int:
    """Position of the first set with the most free memory; sums within one part in 10^9 of
    the best count as equal, so that rounding never overrides the lower indices."""
    memory = np.asarray(free_memory, dtype=np.float64)
    memory = np.where(np.isfinite(memory), memory, 0.0)
    totals = memory[members].sum(axis=1)
    best = float(totals.max())
    return int(np.argmax(totals >= best - _MEMORY_TOLERANCE * max(1.0, abs(best))))


# --- Exact: tables over all subsets (up to 16 GPUs) ---------------------------------------------


class _Tables(NamedTuple):
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
    """Σ over NUMA groups (`_numa_groups`) of (members in it)²."""
    by_count: tuple[IntArray, ...]
    """Masks of each size, in lexicographic order of their index tuples."""
    best_possible: tuple[LinkTier, ...]
    """Per size: the best worst-tier of any subset."""


def _exact_ties(shape: NodeShape, free_mask: int, count: int, policy: NumaPolicy) -> _Ties | None:
    tables = _tables(shape)
    sets = tables.by_count[count]
    sets = sets[(sets & ~free_mask) == 0]
    left = free_mask & ~sets
    leftover = _leftover_key(
        policy,
        shape.gpu_count,
        tables.clique[left].astype(np.int64),
        tables.nv_block[left].astype(np.int64),
        tables.concentration[left].astype(np.int64),
    )
    keep = _rank(
        policy,
        tables.span[sets].astype(np.int64),
        tables.worst_tier[sets].astype(np.int64),
        tables.link_cost[sets],
        leftover,
    )
    if keep is None:
        return None
    sets = sets[keep]
    first = int(sets[0])
    return _make_ties(
        _members(sets, shape.gpu_count, count),
        tables.numa_nodes[sets].astype(np.int64),
        int(tables.link_cost[first]),
        LinkTier(int(tables.worst_tier[first])),
        tables.best_possible[count],
    )


def _members(sets: IntArray, k: int, count: int) -> IntArray:
    bits = (sets[:, None] >> np.arange(k, dtype=np.int64)) & 1
    return np.nonzero(bits)[1].reshape(len(sets), count).astype(np.int64)


@functools.lru_cache(maxsize=64)
def _tables(shape: NodeShape) -> _Tables:
    k = shape.gpu_count
    subsets = np.arange(1 << k, dtype=np.int64)
    size = np.bitwise_count(subsets).astype(np.int64)
    sums = _pair_sums(k, _channel_planes(shape))
    numa_bits = _numa_bits(shape)
    span = np.bitwise_count(_or_table(k, numa_bits))
    unknown = sum(1 << i for i, n in enumerate(shape.numa) if n is None)
    worst = _worst_tier_table(sums)
    by_count = _lexicographic_by_size(k, subsets, size)
    return _Tables(
        link_cost=_link_cost_table(size, sums),
        worst_tier=worst,
        span=span.astype(np.int8),
        numa_nodes=np.where(subsets & unknown, 0, span).astype(np.int8),
        clique=_largest_clique_table(k, size, worst),
        nv_block=_largest_block_table(k, subsets, _nvlink_neighbours(shape)),
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
        (sum(1 << j for j, n in enumerate(capped) if n >> b & 1), 1 << b) for b in range(_CAP_BITS)
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


def _numa_groups(shape: NodeShape) -> tuple[int, ...]:
    """A small id per GPU: one per known NUMA node, and a fresh one for each unknown GPU."""
    ids: dict[int | tuple[str, int], int] = {}
    keys = (n if n is not None else ("unknown", i) for i, n in enumerate(shape.numa))
    return tuple(ids.setdefault(key, len(ids)) for key in keys)


def _numa_bits(shape: NodeShape) -> list[int]:
    return [1 << group for group in _numa_groups(shape)]


def _nvlink_neighbours(shape: NodeShape) -> list[int]:
    """Per GPU, the mask of the GPUs it has an NVLink to."""
    k = shape.gpu_count
    return [
        sum(1 << j for j in range(k) if j != i and shape.tiers[i][j] == LinkTier.NVLINK)
        for i in range(k)
    ]


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


# --- Greedy: nodes with more than 16 GPUs -------------------------------------------------------


class _Graph(NamedTuple):
    """What the greedy needs of a large shape."""

    neighbours: tuple[int, ...]
    """Per GPU, mask of its NVLink neighbours."""
    groups: tuple[int, ...]
    """Per GPU, its NUMA group (`_numa_groups`)."""
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
_NEW_NUMA_PENALTY = 1 << 50  # above any sum of pair costs
_TAKEN = 1 << 60


@functools.lru_cache(maxsize=64)
def _graph(shape: NodeShape) -> _Graph:
    groups = _numa_groups(shape)
    known = sorted({g for g, n in zip(groups, shape.numa, strict=True) if n is not None})
    masks = tuple(sum(1 << i for i, g in enumerate(groups) if g == group) for group in known)
    return _Graph(
        neighbours=tuple(_nvlink_neighbours(shape)),
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
            digit = _PAIR_DIGIT ** _DIGIT[LinkTier(tier)]
            cost[i, j] = (digit << _PAIR_DEFICIT_BITS) + NVLINK_CAP
    return cost


def _greedy_ties(shape: NodeShape, free_mask: int, count: int, policy: NumaPolicy) -> _Ties | None:
    graph = _graph(shape)
    if count == 1:  # exact: every single GPU is a candidate
        sets = [1 << i for i in _bits(free_mask)]
    else:
        sets = sorted(_grown_sets(graph, free_mask, count, policy), key=_bits)
    if not sets:
        return None
    gpu_lists = [_bits(s) for s in sets]
    span = np.array([len({graph.groups[i] for i in gpus}) for gpus in gpu_lists], dtype=np.int64)
    worst_tiers = np.array([worst_tier(shape, gpus) for gpus in gpu_lists], dtype=np.int64)
    costs = np.array([link_cost(shape, gpus) for gpus in gpu_lists], dtype=object)
    measures = np.array(
        [_leftover_measures(graph, free_mask & ~s, policy) for s in sets], dtype=np.int64
    ).reshape(len(sets), 3)
    leftover = _leftover_key(
        policy, shape.gpu_count, measures[:, 0], measures[:, 1], measures[:, 2]
    )
    keep = _rank(policy, span, worst_tiers, costs, leftover)
    if keep is None:
        return None
    unknown = [any(shape.numa[i] is None for i in gpu_lists[p]) for p in keep]
    numa_nodes = np.where(unknown, 0, span[keep]).astype(np.int64)
    members = np.array([gpu_lists[p] for p in keep], dtype=np.int64)
    worst = worst_tier(shape, gpu_lists[keep[0]])
    best = _greedy_best_tier(shape, count)
    return _make_ties(members, numa_nodes, int(costs[keep[0]]), worst, best)


def _grown_sets(graph: _Graph, free_mask: int, count: int, policy: NumaPolicy) -> set[int]:
    """One set grown from every free GPU: repeatedly add the free GPU that adds the least
    (new NUMA node first under best-effort, then pair cost, then lowest index); under
    best-effort one more set per GPU, grown by pair cost alone. The candidates are then
    ranked exactly like the exact path's. O(k² · count) numpy steps."""
    found: set[int] = set()
    for pool in _pools(graph, free_mask, count, policy):
        members = np.array(_bits(pool), dtype=np.int64)
        for seed in members.tolist():
            found.add(_grow(graph, members, seed, count, policy))
            if policy == NumaPolicy.BEST_EFFORT:
                # Grown NUMA-first only, a set could never cross sockets for an NVLink.
                found.add(_grow(graph, members, seed, count, NumaPolicy.NONE))
    return found


def _pools(graph: _Graph, free_mask: int, count: int, policy: NumaPolicy) -> list[int]:
    """The free GPUs a set may be drawn from: one NUMA node at a time under single-numa-node."""
    if policy != NumaPolicy.SINGLE_NUMA_NODE:
        return [free_mask]
    pools = (mask & free_mask for mask in graph.known_groups)
    return [pool for pool in pools if pool.bit_count() >= count]


def _grow(graph: _Graph, pool: IntArray, seed: int, count: int, policy: NumaPolicy) -> int:
    chosen = 1 << seed
    added = graph.pair_cost[seed, pool].copy()  # what each pool GPU would add to the set
    added[pool == seed] = _TAKEN
    numa_seen = np.zeros(graph.group_count, dtype=bool)
    numa_seen[graph.groups[seed]] = True
    for _ in range(count - 1):
        keys = added
        if policy == NumaPolicy.BEST_EFFORT:
            keys = added + np.where(numa_seen[graph.group_array[pool]], 0, _NEW_NUMA_PENALTY)
        at = int(np.argmin(keys))
        pick = int(pool[at])
        chosen |= 1 << pick
        added += graph.pair_cost[pick, pool]
        added[at] = _TAKEN
        numa_seen[graph.groups[pick]] = True
    return chosen


def _leftover_measures(graph: _Graph, left: int, policy: NumaPolicy) -> tuple[int, int, int]:
    """Step 3's (clique, block, concentration) of the GPUs left free, as in `_Tables`."""
    clique = _largest_clique(graph.neighbours, left)
    block = _largest_block(graph.neighbours, left)
    if policy == NumaPolicy.NONE:
        return clique, block, 0
    per_numa = Counter(graph.groups[i] for i in _bits(left))
    return clique, block, sum(n * n for n in per_numa.values())


def _largest_clique(neighbours: Sequence[int], mask: int) -> int:
    """Size of the largest all-NVLink subset of `mask`. A greedy clique from every GPU first
    (`_greedy_clique`), then a branch-and-bound search that can only improve on it: each branch
    adds a GPU and keeps the candidates linked to all members so far (higher indices only, so
    each set is met once), and is cut when members plus candidates cannot beat the best. Exact
    unless `_CLIQUE_BUDGET` branches run out; then the best found so far, a lower bound (and at
    least the greedy's). Deterministic either way: the budget counts steps, not time."""
    best = _greedy_clique(neighbours, mask)
    stack = [(0, mask)]
    for _ in range(_CLIQUE_BUDGET):
        if not stack:
            break
        size, candidates = stack.pop()
        if size + candidates.bit_count() <= best:
            continue
        if not candidates:
            best = size
            continue
        for i in _bits(candidates):
            later = candidates & ~((2 << i) - 1)
            stack.append((size + 1, later & neighbours[i]))
    return best


def _greedy_clique(neighbours: Sequence[int], mask: int) -> int:
    """Largest of the cliques grown from each GPU of `mask`: repeatedly add the candidate with
    the most neighbours among the other candidates (lowest index on ties). A GPU whose
    neighbours cannot beat the best so far is skipped."""
    best = 0
    for seed in _bits(mask):
        candidates = neighbours[seed] & mask
        if candidates.bit_count() + 1 <= best:
            continue
        size = 1
        while candidates:
            pick = max(_bits(candidates), key=lambda j: (neighbours[j] & candidates).bit_count())
            candidates &= neighbours[pick]
            size += 1
        best = max(best, size)
    return best


def _largest_block(neighbours: Sequence[int], mask: int) -> int:
    best = 0
    while mask:
        block = frontier = mask & -mask
        while frontier:
            reached = 0
            for i in _bits(frontier):
                reached |= neighbours[i]
            frontier = reached & mask & ~block
            block |= frontier
        best = max(best, block.bit_count())
        mask &= ~block
    return best


@functools.lru_cache(maxsize=1024)
def _greedy_best_tier(shape: NodeShape, count: int) -> LinkTier:
    everything = (1 << shape.gpu_count) - 1
    if count <= 1:
        return LinkTier.NVLINK
    sets = _grown_sets(_graph(shape), everything, count, NumaPolicy.NONE)
    return min(worst_tier(shape, _bits(s)) for s in sets)


def _bits(mask: int) -> list[int]:
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out

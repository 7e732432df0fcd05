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

- Tables (once per shape, up to 16 GPUs; `gputables`): for all 2^k subsets, built with numpy
  by doubling (the subsets that contain GPU i are those without it, plus GPU i): link cost,
  worst tier, NUMA span, largest NVLink block and NUMA concentration; the largest all-NVLink
  set from the worst tier, by a maximum over submasks (k vectorised passes). Subsets are kept
  grouped by size, each group in lexicographic order of its index tuple, so "first" always
  means "lowest indices".
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
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from gpusched.api.config import NumaPolicy
from gpusched.api.topology import LinkTier
from gpusched.engine.gpushape import (
    NodeShape,
    interned,
    link_cost,
    mask_bits,
    worst_tier,
)
from gpusched.engine.gputables import (
    EXACT_MAX_GPUS,
    IntArray,
    ShapeGraph,
    shape_graph,
    subset_tables,
)

_CLIQUE_BUDGET = 1 << 14
"""Search steps `_largest_clique` may take per leftover on nodes past `EXACT_MAX_GPUS`."""
_MEMORY_TOLERANCE = 1e-9  # relative; float rounding of a sum must never pick the winner


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


def clear_caches() -> None:
    """Forgets every table and memoised answer (tests and benchmarks measure cold calls)."""
    for cached in (interned, subset_tables, shape_graph, _ties, _greedy_best_tier):
        cached.cache_clear()


def _check_request(
    shape: NodeShape, free_mask: int, count: int, free_memory: Sequence[float] | None
) -> None:
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    if free_mask < 0 or free_mask >> shape.gpu_count:
        raise ValueError(f"free_mask {free_mask:#x} names GPUs the node lacks ({shape.gpu_count})")
    if free_memory is not None and len(free_memory) != shape.gpu_count:
        raise ValueError(f"free_memory has {len(free_memory)} values for {shape.gpu_count} GPUs")


# --- Ties: steps 1-3, memoised ------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class _Ties:
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
    return _Ties(
        members=members,
        numa_nodes=numa_nodes,
        link_cost=cost,
        worst_tier=worst,
        best_possible_tier=best,
        first=first,
    )


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


def _exact_ties(shape: NodeShape, free_mask: int, count: int, policy: NumaPolicy) -> _Ties | None:
    tables = subset_tables(shape)
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


# --- Greedy: nodes with more than 16 GPUs -------------------------------------------------------


_NEW_NUMA_PENALTY = 1 << 50  # above any sum of pair costs
_TAKEN = 1 << 60


def _greedy_ties(shape: NodeShape, free_mask: int, count: int, policy: NumaPolicy) -> _Ties | None:
    graph = shape_graph(shape)
    if count == 1:  # exact: every single GPU is a candidate
        sets = [1 << i for i in mask_bits(free_mask)]
    else:
        sets = sorted(_grown_sets(graph, free_mask, count, policy), key=mask_bits)
    if not sets:
        return None
    gpu_lists = [mask_bits(s) for s in sets]
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


def _grown_sets(graph: ShapeGraph, free_mask: int, count: int, policy: NumaPolicy) -> set[int]:
    """One set grown from every free GPU: repeatedly add the free GPU that adds the least
    (new NUMA node first under best-effort, then pair cost, then lowest index); under
    best-effort one more set per GPU, grown by pair cost alone. The candidates are then
    ranked exactly like the exact path's. O(k² · count) numpy steps."""
    found: set[int] = set()
    for pool in _pools(graph, free_mask, count, policy):
        members = np.array(mask_bits(pool), dtype=np.int64)
        for seed in members.tolist():
            found.add(_grow(graph, members, seed, count, policy))
            if policy == NumaPolicy.BEST_EFFORT:
                # Grown NUMA-first only, a set could never cross sockets for an NVLink.
                found.add(_grow(graph, members, seed, count, NumaPolicy.NONE))
    return found


def _pools(graph: ShapeGraph, free_mask: int, count: int, policy: NumaPolicy) -> list[int]:
    """The free GPUs a set may be drawn from: one NUMA node at a time under single-numa-node."""
    if policy != NumaPolicy.SINGLE_NUMA_NODE:
        return [free_mask]
    pools = (mask & free_mask for mask in graph.known_groups)
    return [pool for pool in pools if pool.bit_count() >= count]


def _grow(graph: ShapeGraph, pool: IntArray, seed: int, count: int, policy: NumaPolicy) -> int:
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


def _leftover_measures(graph: ShapeGraph, left: int, policy: NumaPolicy) -> tuple[int, int, int]:
    """Step 3's (clique, block, concentration) of the GPUs left free, as in `SubsetTables`."""
    clique = _largest_clique(graph.neighbours, left)
    block = _largest_block(graph.neighbours, left)
    if policy == NumaPolicy.NONE:
        return clique, block, 0
    per_numa = Counter(graph.groups[i] for i in mask_bits(left))
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
        for i in mask_bits(candidates):
            later = candidates & ~((2 << i) - 1)
            stack.append((size + 1, later & neighbours[i]))
    return best


def _greedy_clique(neighbours: Sequence[int], mask: int) -> int:
    """Largest of the cliques grown from each GPU of `mask`: repeatedly add the candidate with
    the most neighbours among the other candidates (lowest index on ties). A GPU whose
    neighbours cannot beat the best so far is skipped."""
    best = 0
    for seed in mask_bits(mask):
        candidates = neighbours[seed] & mask
        if candidates.bit_count() + 1 <= best:
            continue
        size = 1
        while candidates:
            pick = max(
                mask_bits(candidates), key=lambda j: (neighbours[j] & candidates).bit_count()
            )
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
            for i in mask_bits(frontier):
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
    sets = _grown_sets(shape_graph(shape), everything, count, NumaPolicy.NONE)
    return min(worst_tier(shape, mask_bits(s)) for s in sets)

"""Preemption on the openb trace: high-priority gangs arriving into a full cluster.

    python bench/preempt_openb.py              # the high class asks for 10 % of the GPUs
    python bench/preempt_openb.py --quick      # 3 %
    python bench/preempt_openb.py --high 20 --seed 43

Cluster: the 1,213 nodes of Alibaba's openb trace (bench/data/openb, synthetic intra-node
topology as in bench/openb.py), 6,212 GPUs. Two priority classes:

- low (priority 1): the default trace's published arrival sequence for the seed, placed pod by
  pod (`pick_node`, the replay's protocol) until the arrived GPU request reaches 100 % of
  capacity: a full cluster. The placed pods are then cut into groups in arrival order: one in
  five alone, the rest in gangs of 2-8 (drawn), half of them ``disruptionMode: All``, half
  ``Single``.
- high (priority 100): pods of a second arrival sequence (seed + 1), GPU pods only, in PodGroups
  of 1-4 (drawn, ``minCount`` = size), until their GPU request reaches ``--high`` % of capacity.

Each high gang, in arrival order, is placed by `schedule` when it fits; otherwise it preempts,
under one of two policies, each on its own copy of the same cluster with the same arrivals:

- gpusched: `plan_preemption` (gang-aware: an ``All`` victim gang goes whole or not at all,
  the fewest GPUs, one domain), carried out: victims gone, the nominated placement held;
- baseline: kube-scheduler's pod-by-pod preemption without gang awareness: for each pod of the
  gang that does not fit, on every node the lowest-priority pods (then the youngest) are
  evicted until it fits there, and the node evicting the fewest GPUs (then pods, then the
  lowest highest priority, then the name) is chosen; the preemptor's own gang is placed whole
  or not at all (nothing is evicted for a gang that does not fit in the end), but its victims'
  gangs are ignored: it may evict part of an ``All`` gang.

Figures per policy: the share of the high class's GPU request placed, GPUs evicted per high
GPU placed (and with the stranded GPUs counted as lost too), low ``All`` gangs left
part-evicted (and the GPUs their remaining pods still hold, stranded: a gang missing a member does
no work), time to decide each preemption. Nothing asserts; results go to
bench/results/preempt_openb.json.
"""

from __future__ import annotations

import os

os.environ["OMP_NUM_THREADS"] = "1"
os.environ["OPENBLAS_NUM_THREADS"] = "1"
os.environ["MKL_NUM_THREADS"] = "1"

import argparse
import dataclasses
import json
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from engine import _pin_one_core, machine_facts
from gpusched.api.crds import DisruptionMode
from gpusched.engine.fit import static_mask
from gpusched.engine.groups import GroupKind, GroupSpec
from gpusched.engine.pick import NodeChoice, pick_node
from gpusched.engine.policy import Policy
from gpusched.engine.preemption import plan_preemption
from gpusched.engine.request import WHOLE_GPU_MILLI, PodRequest
from gpusched.engine.result import Phase
from gpusched.engine.schedule import schedule
from gpusched.engine.scoring import Scoring
from gpusched.engine.snapshot import BoundPod, Holding, Snapshot
from gpusched.offline.openb import Trace, load_trace
from gpusched.offline.replay import arrivals

DATA = Path(__file__).resolve().parent / "data" / "openb"
RESULTS = Path(__file__).resolve().parent / "results" / "preempt_openb.json"
LOW, HIGH = 1, 100
NAMESPACE_LOW, NAMESPACE_HIGH = "batch", "prod"


# ----- the cluster and the two classes ---------------------------------------------------------


@dataclasses.dataclass
class Setup:
    full: Snapshot
    """The cluster full of the low class."""
    low_groups: list[GroupSpec]
    gangs: list[tuple[GroupSpec, list[PodRequest]]]
    """The high class, in arrival order."""
    high_milli: int


def setup(trace: Trace, seed: int, high_pct: float) -> Setup:
    rng = np.random.default_rng(seed)
    placed = _fill(trace, seed)
    low, low_groups = _low_gangs(placed, rng)
    full = trace.snapshot.copy()
    full.load(low)
    full.settle()
    gangs, high_milli = _high_gangs(trace, seed + 1, high_pct, rng)
    return Setup(full, low_groups, gangs, high_milli)


def _fill(trace: Trace, seed: int) -> list[tuple[PodRequest, str, tuple[int, ...]]]:
    """The low class placed as the replay places it, up to 100 % arrived load."""
    work = trace.snapshot.copy()
    scoring = Scoring(Policy(), trace.workload)
    arrived, placed = 0, []
    for pod in arrivals(trace.pods, trace.capacity, seed):
        arrived += pod.gpu_demand_milli
        if arrived > trace.capacity:
            break
        choice = pick_node(work, pod, scoring)
        if choice is not None:
            work.assume(pod, choice.node, choice.gpus)
            placed.append((pod, work.nodes[choice.node].name, choice.gpus))
    return placed


def _low_gangs(
    placed: list[tuple[PodRequest, str, tuple[int, ...]]], rng: np.random.Generator
) -> tuple[list[BoundPod], list[GroupSpec]]:
    bound, groups, index = [], [], 0
    while index < len(placed):
        size = 1 if rng.random() < 0.2 else int(rng.integers(2, 9))
        members = placed[index : index + size]
        group: str | None = None
        if size > 1:
            group = f"low-{len(groups)}"
            mode = (DisruptionMode.ALL, DisruptionMode.SINGLE)[int(rng.integers(2))]
            groups.append(
                GroupSpec(
                    key=f"{NAMESPACE_LOW}/{group}",
                    kind=GroupKind.POD_GROUP,
                    minimum=len(members),
                    priority=LOW,
                    disruption_mode=mode,
                    created=float(index),
                )
            )
        for offset, (pod, node, gpus) in enumerate(members):
            request = _renamed(pod, NAMESPACE_LOW, index + offset, LOW, group)
            bound.append(BoundPod(request, node, gpus))
        index += size
    return bound, groups


def _high_gangs(
    trace: Trace, seed: int, high_pct: float, rng: np.random.Generator
) -> tuple[list[tuple[GroupSpec, list[PodRequest]]], int]:
    limit = high_pct / 100 * trace.capacity
    sequence = [p for p in arrivals(trace.pods, trace.capacity, seed) if p.gpu_demand_milli]
    gangs: list[tuple[GroupSpec, list[PodRequest]]] = []
    total, index = 0, 0
    while index < len(sequence) and total < limit:
        size = int(rng.integers(1, 5))
        name = f"high-{len(gangs)}"
        pods = [
            _renamed(p, NAMESPACE_HIGH, index + i, HIGH, name)
            for i, p in enumerate(sequence[index : index + size])
        ]
        spec = GroupSpec(
            key=f"{NAMESPACE_HIGH}/{name}",
            kind=GroupKind.POD_GROUP,
            minimum=len(pods),
            priority=HIGH,
            created=float(100_000 + index),
        )
        gangs.append((spec, pods))
        total += sum(p.gpu_demand_milli for p in pods)
        index += size
    return gangs, total


def _renamed(
    pod: PodRequest, namespace: str, index: int, priority: int, group: str | None
) -> PodRequest:
    return dataclasses.replace(
        pod,
        key=f"{namespace}/{pod.key.split('/', 1)[1]}-{index}",
        priority=priority,
        group=group,
        created=float(index),
    )


# ----- the two policies --------------------------------------------------------------------------


@dataclasses.dataclass
class Tally:
    placed_milli: int = 0
    placed_gangs: int = 0
    preempted_gangs: int = 0
    evicted_milli: int = 0
    evicted_pods: int = 0
    seconds: list[float] = dataclasses.field(default_factory=list)
    """Per high gang that did not fit as it came: the time to decide its preemption."""
    evicted: set[str] = dataclasses.field(default_factory=set)


def run(policy: str, s: Setup) -> Tally:
    work = s.full.copy()
    tally = Tally()
    groups = list(s.low_groups)
    for spec, pods in s.gangs:
        groups.append(spec)
        result = schedule(work, pods, [spec], Policy())
        decision = next(d for d in result.groups if d.name == spec.key)
        if decision.phase is Phase.SCHEDULED:
            _hold(work, pods, [(b.pod, b.node, b.gpus) for b in result.bindings])
            tally.placed_milli += sum(p.gpu_demand_milli for p in pods)
            tally.placed_gangs += 1
            continue
        start = time.perf_counter()
        if policy == "gpusched":
            victims, bindings = _gang_aware(work, spec, pods, groups)
        else:
            victims, bindings = _pod_by_pod(work, pods)
        tally.seconds.append(time.perf_counter() - start)
        if bindings is None:
            continue
        for key in victims:
            holding = work.forget(key)
            if holding is not None:
                tally.evicted_milli += holding.milli_per_gpu * len(holding.gpus)
                tally.evicted_pods += 1
                tally.evicted.add(key)
        _hold(work, pods, bindings)
        tally.placed_milli += sum(p.gpu_demand_milli for p in pods)
        tally.placed_gangs += 1
        tally.preempted_gangs += 1
    return tally


Placement = list[tuple[str, str, tuple[int, ...]]]
"""(pod key, node name, GPUs) per pod."""


def _hold(work: Snapshot, pods: Sequence[PodRequest], placement: Placement) -> None:
    by_key = {p.key: p for p in pods}
    for key, node, gpus in placement:
        work.assume(by_key[key], work.index[node], gpus)


def _gang_aware(
    work: Snapshot, spec: GroupSpec, pods: list[PodRequest], groups: list[GroupSpec]
) -> tuple[list[str], Placement | None]:
    plan = plan_preemption(work, spec.key, pods, groups, Policy())
    if not plan.bindings:
        return [], None
    return [v.pod for v in plan.victims], [(b.pod, b.node, b.gpus) for b in plan.bindings]


def _pod_by_pod(work: Snapshot, pods: list[PodRequest]) -> tuple[list[str], Placement | None]:
    """The baseline (see the module's docstring), on a scratch copy: the gang whole or
    nothing, victims chosen node by node, pod by pod, blind to their gangs."""
    scratch = work.copy()
    scoring = Scoring.for_cycle(Policy(), scratch, pods)
    victims: list[str] = []
    placement: Placement = []
    for pod in sorted(pods, key=lambda p: (-p.gpu_demand_milli, p.key)):
        choice = pick_node(scratch, pod, scoring) or _evict_for(scratch, pod, scoring, victims)
        if choice is None:
            return [], None
        scratch.assume(pod, choice.node, choice.gpus)
        placement.append((pod.key, scratch.nodes[choice.node].name, choice.gpus))
    return victims, placement


def _evict_for(
    scratch: Snapshot, pod: PodRequest, scoring: Scoring, victims: list[str]
) -> NodeChoice | None:
    """Evicts, on ``scratch``, the pods of the node whose lowest-priority pods free room for
    ``pod`` at the least cost; the node and GPUs it then takes (``victims`` grows)."""
    on_node: dict[int, list[Holding]] = defaultdict(list)
    for holding in scratch.holdings.values():
        if holding.pod.priority < pod.priority:
            on_node[holding.node].append(holding)
    allowed = static_mask(scratch, pod)
    options = []
    for node, held in on_node.items():
        if not allowed[node]:
            continue
        held.sort(key=lambda h: (h.pod.priority, -h.pod.created, h.pod.key))
        count = _prefix_that_fits(scratch, pod, node, held)
        if count is not None:
            chosen = held[:count]
            milli = sum(h.milli_per_gpu * len(h.gpus) for h in chosen)
            top = max(h.pod.priority for h in chosen)
            options.append(((milli, count, top, scratch.nodes[node].name), node, chosen))
    for _, node, chosen in sorted(options, key=lambda o: o[0]):
        mark = scratch.checkpoint()
        for holding in chosen:
            scratch.forget(holding.pod.key)
        mask = np.zeros(len(scratch.nodes), dtype=np.bool_)
        mask[node] = True
        choice = pick_node(scratch, pod, scoring, mask)
        if choice is not None:
            victims.extend(h.pod.key for h in chosen)
            return choice
        scratch.rollback(mark)  # the estimate was optimistic (GPU links, NUMA): next node
    return None


def _prefix_that_fits(
    scratch: Snapshot, pod: PodRequest, node: int, held: list[Holding]
) -> int | None:
    """How many of ``held`` (in order) must go before ``pod`` fits on ``node``, counting
    resources and GPUs (whole ones or a share); None if all of them are not enough. 0 is never
    an answer: the pod did not fit anywhere as things are."""
    free = (scratch.allocatable[node] - scratch.used[node]).tolist()
    start, stop = int(scratch.gpu_offset[node]), int(scratch.gpu_offset[node + 1])
    gpus = scratch.gpu_free[start:stop].tolist()
    usable = scratch.gpu_usable[start:stop].tolist()
    need = [(scratch.columns[n], a) for n, a in pod.resources.items() if n in scratch.columns and a]
    for count, holding in enumerate(held, start=1):
        for column, amount in holding.vector:
            free[column] += amount
        for g in holding.gpus:
            gpus[g] += holding.milli_per_gpu
        if any(free[c] < a for c, a in need):
            continue
        room = [m for m, u in zip(gpus, usable, strict=True) if u]
        if pod.gpus and sum(1 for m in room if m >= WHOLE_GPU_MILLI) >= pod.gpus:
            return count
        if pod.gpu_milli and any(m >= pod.gpu_milli for m in room):
            return count
    return None


# ----- figures -----------------------------------------------------------------------------------


def broken_gangs(s: Setup, evicted: set[str]) -> tuple[int, int, int]:
    """(``All`` gangs part-evicted, GPUs their remaining pods hold, ``All`` gangs evicted)."""
    members: dict[str, list[Holding]] = defaultdict(list)
    for holding in s.full.holdings.values():
        if holding.pod.group_key is not None:
            members[holding.pod.group_key].append(holding)
    broken = stranded = whole = 0
    for group in s.low_groups:
        if group.disruption_mode is not DisruptionMode.ALL:
            continue
        held = members[group.key]
        gone = [h for h in held if h.pod.key in evicted]
        if gone and len(gone) < len(held):
            broken += 1
            stranded += sum(h.milli_per_gpu * len(h.gpus) for h in held if h not in gone)
        elif gone:
            whole += 1
    return broken, stranded, whole


def summary(name: str, s: Setup, tally: Tally) -> dict[str, object]:
    broken, stranded, whole = broken_gangs(s, tally.evicted)
    times = np.asarray(tally.seconds) * 1000 if tally.seconds else np.zeros(1)
    placed = max(tally.placed_milli, 1)
    return {
        "policy": name,
        "highPlacedShare": tally.placed_milli / s.high_milli,
        "highGangsPlaced": tally.placed_gangs,
        "highGangsPreempting": tally.preempted_gangs,
        "gpusEvicted": tally.evicted_milli / WHOLE_GPU_MILLI,
        "podsEvicted": tally.evicted_pods,
        "evictedPerPlaced": tally.evicted_milli / placed,
        "lostPerPlaced": (tally.evicted_milli + stranded) / placed,
        "allGangsBroken": broken,
        "gpusStrandedInBrokenGangs": stranded / WHOLE_GPU_MILLI,
        "allGangsEvictedWhole": whole,
        "decideP50Ms": float(np.percentile(times, 50)),
        "decideP99Ms": float(np.percentile(times, 99)),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the high class asks for 3 %%")
    parser.add_argument(
        "--high", type=float, default=10.0, help="high class GPU request, %% of capacity"
    )
    parser.add_argument("--seed", type=int, default=42, help="arrival seed (default 42)")
    args = parser.parse_args(argv)
    high = 3.0 if args.quick else args.high
    pinning = _pin_one_core()
    trace = load_trace(DATA, "default")
    s = setup(trace, args.seed, high)
    low = list(s.full.holdings.values())
    used = sum(h.milli_per_gpu * len(h.gpus) for h in low) / trace.capacity
    rows = [summary(p, s, run(p, s)) for p in ("gpusched", "baseline")]
    print("## Preemption on openb: high-priority gangs into a full cluster")
    print(f"   {pinning}")
    print(
        f"   cluster: {len(trace.snapshot.nodes):,} openb nodes, {trace.capacity // 1000:,} GPUs, "
        f"{used:.1%} allocated to {len(low):,} low pods ({len(s.low_groups)} gangs), seed "
        f"{args.seed}"
    )
    print(
        f"   high class: {len(s.gangs)} gangs of 1-4 pods, {s.high_milli / 1000:,.1f} GPUs "
        f"({high:g} % of capacity)"
    )
    header = (
        f"   {'policy':<9} {'placed':>7} {'evicted/placed':>14} {'lost/placed':>11} "
        f"{'GPUs evicted':>12} {'All broken':>10} {'stranded':>8} {'p50 ms':>7} {'p99 ms':>7}"
    )
    print(header)
    for r in rows:
        print(
            f"   {r['policy']:<9} {r['highPlacedShare']:>7.1%} {r['evictedPerPlaced']:>14.2f} "
            f"{r['lostPerPlaced']:>11.2f} {r['gpusEvicted']:>12,.1f} {r['allGangsBroken']:>10} "
            f"{r['gpusStrandedInBrokenGangs']:>8,.1f} {r['decideP50Ms']:>7.1f} "
            f"{r['decideP99Ms']:>7.1f}"
        )
    print(
        "   placed: share of the high class's GPU request placed; evicted/placed: GPUs evicted "
        "per high GPU placed; lost/placed: the same with the stranded GPUs; All broken: low All "
        "gangs left part-evicted, stranded: GPUs their remaining pods hold (a gang missing a "
        "member does no work); p50/p99: deciding one preemption (wall, one core)"
    )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "machine": machine_facts(pinning),
                "seed": args.seed,
                "highPct": high,
                "lowPods": len(low),
                "lowGangs": len(s.low_groups),
                "highGangs": len(s.gangs),
                "highGpus": s.high_milli / WHOLE_GPU_MILLI,
                "policies": rows,
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The Alibaba openb GPU-cluster trace (cluster-trace-gpu-v2023, the FGD paper's data): reading
it into the engine's inputs, and replaying it with the published protocol.

File I/O, so it lives outside the engine; the benchmark, ``gpusched bench openb`` and the tests
share it. The protocol (FGD, ATC'23), in four phases:

1. arrivals: pods sorted by name, shuffled with the seed, then inflated with pods drawn
   uniformly with replacement until the GPU request would pass 130 % of capacity (or, for a
   trace already above, thinned at random to it) — `arrivals`;
2. each pod is placed once, by the operator's engine (`pick_node` + `Snapshot.assume`), or
   fails: no queue, retry, preemption or departure — `replay`;
3. after each pod: arrived load %, GPU allocation rate %, FGD's fragmentation amount % — a
   `Replay` record;
4. the headline: unallocated GPU % when the arrived load reaches 100 % — `Replay.unallocated`.
"""

from __future__ import annotations

import csv
import itertools
import json
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from gpusched.api.config import SchedulerConfig
from gpusched.api.k8s import Node, parse_node
from gpusched.api.selectors import NodeSelectorRequirement, NodeSelectorTerm
from gpusched.api.topology import TOPOLOGY_ANNOTATION, LinkTier
from gpusched.engine import fragmentation
from gpusched.engine.gpuset import worst_tier
from gpusched.engine.pick import pick_node
from gpusched.engine.request import WHOLE_GPU_MILLI, PodRequest
from gpusched.engine.snapshot import Snapshot, build_snapshot

PRODUCT_LABEL = "nvidia.com/gpu.product"
NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
"""Required columns; ``gpu_spec`` is optional (the multigpu variants have only these five)."""
INFLATION = 1.30
"""Arrivals stop before the GPU request passes this share of capacity (the published 130 %)."""
HEADLINE_LOAD = 100.0
"""Arrived load (% of GPU capacity) at which the headline figure is read."""


class TraceError(ValueError):
    """A trace file that cannot be used; the message names the file, the line and the column."""


# ----- reading ---------------------------------------------------------------------------------


def _rows(path: Path, required: Sequence[str]) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, row) of a CSV file whose header has every ``required`` column."""
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as error:
        raise TraceError(f"{path}: cannot read: {error.strerror or error}") from None
    with handle:
        reader = csv.DictReader(handle)
        header = reader.fieldnames or []
        missing = [c for c in required if c not in header]
        if missing:
            raise TraceError(
                f"{path}:1: missing column(s) {', '.join(missing)} (header: {','.join(header)})"
            )
        yield from enumerate(reader, start=2)


def _int(path: Path, line: int, row: Mapping[str, str | None], column: str) -> int:
    raw = (row.get(column) or "").strip()
    try:
        value = int(raw)
    except ValueError:
        raise TraceError(f"{path}:{line}: {column}: not an integer: {raw!r}") from None
    if value < 0:
        raise TraceError(f"{path}:{line}: {column}: must be >= 0, got {value}")
    return value


@dataclass(frozen=True, slots=True)
class NodeRow:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str


def read_node_rows(path: Path) -> tuple[list[NodeRow], list[str]]:
    """The node list's GPU nodes, and one note per row left out: the published experiments
    use GPU nodes only, so a node with 0 GPUs is skipped (and named), never an error."""
    nodes: list[NodeRow] = []
    skipped: list[str] = []
    for line, row in _rows(path, NODE_COLUMNS):
        name = (row["sn"] or "").strip()
        if not name:
            raise TraceError(f"{path}:{line}: sn: empty node name")
        values = [_int(path, line, row, c) for c in ("cpu_milli", "memory_mib", "gpu")]
        model = (row["model"] or "").strip()
        if values[2] == 0:
            skipped.append(f"{path.name}:{line}: node {name} has 0 GPUs: left out (GPU nodes only)")
            continue
        if not model:
            raise TraceError(f"{path}:{line}: model: node {name} has GPUs but no GPU model")
        nodes.append(NodeRow(name, values[0], values[1], values[2], model))
    return nodes, skipped


def load_nodes(path: Path, topology: bool = False) -> list[Node]:
    """The GPU nodes of a node list (``sn, cpu_milli, memory_mib, gpu, model``), Ready, with
    the GPU model as the product label. The trace has no intra-node topology; with
    ``topology`` each node gets the synthetic one of `synthetic_topology`, else none (so
    multi-GPU pods get the engine's "topology unknown" GPU choice)."""
    rows, _ = read_node_rows(path)
    return [parse_node(_node(row, topology)) for row in rows]


def _node(row: NodeRow, topology: bool) -> dict[str, object]:
    metadata: dict[str, object] = {"name": row.name, "labels": {PRODUCT_LABEL: row.model}}
    if topology:
        metadata["annotations"] = {TOPOLOGY_ANNOTATION: synthetic_topology(row.gpus, row.model)}
    return {
        "kind": "Node",
        "metadata": metadata,
        "status": {
            "allocatable": {
                "cpu": f"{row.cpu_milli}m",
                "memory": f"{row.memory_mib}Mi",
                "pods": "1000",
                "nvidia.com/gpu": str(row.gpus),
            },
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def load_pods(path: Path, models: frozenset[str] | None = None) -> list[PodRequest]:
    """Pods of a pod list in file order (= name order), keyed ``openb/<name>``. A pod with one
    GPU and ``gpu_milli`` < 1000 asks for a share of a GPU; any other GPU pod asks for
    ``num_gpu`` whole GPUs. ``gpu_spec`` (allowed models, ``|``-separated, empty = any) becomes
    a required node affinity on the product label. With ``models`` (the cluster's GPU models),
    a pod none of whose allowed models exists is an error naming its row: no node could ever
    take it, which is a broken trace, not a scheduling result."""
    return [_pod(path, line, row, models) for line, row in _rows(path, POD_COLUMNS)]


def _pod(
    path: Path, line: int, row: Mapping[str, str | None], models: frozenset[str] | None
) -> PodRequest:
    name = (row.get("name") or "").strip()
    if not name:
        raise TraceError(f"{path}:{line}: name: empty pod name")
    cpu, memory = _int(path, line, row, "cpu_milli"), _int(path, line, row, "memory_mib")
    count, milli = _int(path, line, row, "num_gpu"), _int(path, line, row, "gpu_milli")
    if milli > WHOLE_GPU_MILLI:
        raise TraceError(f"{path}:{line}: gpu_milli: {milli} is more than one GPU (1000)")
    if count > 1 and milli < WHOLE_GPU_MILLI:
        raise TraceError(
            f"{path}:{line}: gpu_milli: {milli} < 1000 with num_gpu {count}: "
            "only single-GPU pods share a GPU"
        )
    if (count == 0) != (milli == 0):
        raise TraceError(f"{path}:{line}: num_gpu {count} and gpu_milli {milli} disagree")
    spec = tuple(m.strip() for m in (row.get("gpu_spec") or "").split("|") if m.strip())
    if spec and models is not None and not set(spec) & models:
        raise TraceError(
            f"{path}:{line}: gpu_spec: pod {name} asks for GPU model(s) {'|'.join(spec)}; "
            f"the cluster has only {', '.join(sorted(models))}"
        )
    share = count == 1 and milli < WHOLE_GPU_MILLI
    resources = {"cpu": cpu, "memory": memory * 2**20, "pods": 1}
    return PodRequest(
        key=f"openb/{name}",
        resources={k: v for k, v in resources.items() if v},
        gpus=0 if share else count,
        gpu_milli=milli if share else 0,
        required_terms=_model_terms(spec) if spec else None,
        created=float(row.get("creation_time") or 0),
    )


def _model_terms(models: tuple[str, ...]) -> tuple[NodeSelectorTerm, ...]:
    requirement = NodeSelectorRequirement(key=PRODUCT_LABEL, operator="In", values=list(models))
    return (NodeSelectorTerm(matchExpressions=[requirement]),)


# ----- synthetic intra-node topology -----------------------------------------------------------

CUBE_MESH_NVLINKS = {(0, 1): 1, (0, 2): 1, (0, 3): 2, (1, 2): 2, (1, 3): 1, (2, 3): 2}
"""DGX-1 (V100) hybrid cube-mesh, one quad: bonded NVLinks between GPUs i < j < 4 (the same
pattern in GPUs 4..7); GPU i and i + 4 are joined by one NVLink (two for 0–4 and 2–6 on the
real machine; one here), every other pair is SYS."""


def synthetic_topology(gpus: int, model: str) -> str:
    """A ``gpusched.io/gpu-topology`` annotation for an openb node, which has none: 8-GPU V100
    nodes as the DGX-1 hybrid cube-mesh (NUMA 0,0,0,0,1,1,1,1), other 8-GPU nodes as the DGX
    A100 (all pairs NV12 through NVSwitch, NUMA 0,0,1,1,2,2,3,3), 4-GPU nodes as two NVLink
    pairs (NV2 inside a pair, SYS across, one NUMA node a pair), 2-GPU nodes as one pair (NV2,
    PHB for T4, which has no NVLink), 1-GPU nodes trivially."""
    links = [["X" if i == j else "SYS" for j in range(gpus)] for i in range(gpus)]
    if gpus == 8 and model.startswith("V100"):
        numa = [0, 0, 0, 0, 1, 1, 1, 1]
        for (i, j), n in CUBE_MESH_NVLINKS.items():
            for base in (0, 4):
                links[base + i][base + j] = links[base + j][base + i] = f"NV{n}"
        for i in range(4):
            links[i][i + 4] = links[i + 4][i] = "NV1"
    elif gpus == 8:
        numa = [g // 2 for g in range(8)]
        links = [["X" if i == j else "NV12" for j in range(8)] for i in range(8)]
    else:
        numa = [g // 2 for g in range(gpus)]
        pair = "PHB" if model == "T4" else "NV2"
        for g in range(0, gpus - 1, 2):
            links[g][g + 1] = links[g + 1][g] = pair
    devices = [
        {"index": g, "uuid": f"GPU-synthetic-{g}", "model": model, "numa": numa[g]}
        for g in range(gpus)
    ]
    return json.dumps({"gpus": devices, "links": links})


# ----- the protocol ----------------------------------------------------------------------------


def gpu_request(pod: PodRequest) -> int:
    """The pod's GPU request in milli-GPU (num_gpu × gpu_milli)."""
    return pod.gpu_demand_milli


def arrivals(pods: Sequence[PodRequest], capacity: int, seed: int) -> list[PodRequest]:
    """The published arrival sequence for ``seed``: ``pods`` sorted by name, shuffled, then
    inflated with pods drawn uniformly with replacement from the original list until the next
    one would take the total GPU request past 130 % of ``capacity`` (milli-GPU). A trace whose
    GPU request already passes 130 % is thinned instead: pods removed at random until it no
    longer does. Drawn copies get keys ``<key>#<n>`` so that every arrival is its own pod."""
    rng = np.random.default_rng(seed)
    ordered = sorted(pods, key=lambda p: p.key)
    sequence = [ordered[i] for i in rng.permutation(len(ordered))]
    limit = INFLATION * capacity
    total = sum(gpu_request(p) for p in sequence)
    if total > limit:
        return _thinned(sequence, total, limit, rng)
    if not any(gpu_request(p) for p in ordered):
        return sequence
    for copy in itertools.count(1):
        drawn = ordered[int(rng.integers(len(ordered)))]
        if total + gpu_request(drawn) > limit:
            break
        total += gpu_request(drawn)
        sequence.append(_renamed(drawn, f"{drawn.key}#{copy}"))
    return sequence


def _thinned(
    sequence: list[PodRequest], total: int, limit: float, rng: np.random.Generator
) -> list[PodRequest]:
    keep = np.ones(len(sequence), dtype=np.bool_)
    for index in rng.permutation(len(sequence)):
        if total <= limit:
            break
        keep[index] = False
        total -= gpu_request(sequence[int(index)])
    return [p for p, k in zip(sequence, keep, strict=True) if k]


def _renamed(pod: PodRequest, key: str) -> PodRequest:
    return PodRequest(
        key=key,
        resources=pod.resources,
        gpus=pod.gpus,
        gpu_milli=pod.gpu_milli,
        required_terms=pod.required_terms,
        created=pod.created,
    )


@dataclass(slots=True)
class Replay:
    """One run's per-pod record, in arrival order."""

    arrived_pct: npt.NDArray[np.float64]
    """GPU request of every pod submitted so far, failed ones included, % of capacity."""
    allocated_pct: npt.NDArray[np.float64]
    """Allocated milli-GPU, % of capacity."""
    fragmented_pct: npt.NDArray[np.float64]
    """FGD's fragmentation amount, % of capacity."""
    placed: npt.NDArray[np.bool_]
    seconds: float
    """Wall time of the placement loop (decisions, assumes and the records)."""
    multi_gpu: int = 0
    """Multi-GPU pods placed on nodes with a known topology."""
    best_tier: int = 0
    """Of those, the ones whose GPUs have the best worst-link tier the node's free GPUs offered."""
    tier_misses: list[str] = field(default_factory=list)

    def at_load(self, load: float, series: npt.NDArray[np.float64]) -> float:
        """``series`` after the last pod that keeps the arrived load at or below ``load`` %."""
        last = int(np.searchsorted(self.arrived_pct, load, side="right")) - 1
        return float(series[last]) if last >= 0 else 0.0

    @property
    def unallocated(self) -> float:
        """The headline: 100 − allocation rate % when the arrived load reaches 100 %."""
        return 100.0 - self.at_load(HEADLINE_LOAD, self.allocated_pct)

    @property
    def pods_per_second(self) -> float:
        return self.placed.size / self.seconds if self.seconds > 0 else 0.0


def replay(
    base: Snapshot,
    sequence: Sequence[PodRequest],
    config: SchedulerConfig,
    workload: tuple[fragmentation.TaskType, ...],
) -> Replay:
    """Submits ``sequence`` one pod at a time to a copy of ``base`` under ``config``: each pod
    is placed once by `pick_node` (the operator's per-pod decision) or fails."""
    snapshot = base.copy()
    snapshot.config = config
    snapshot.workload = workload
    capacity = float(WHOLE_GPU_MILLI * int(snapshot.gpu_offset[-1]))
    count = len(sequence)
    arrived, allocated, fragmented = np.zeros(count), np.zeros(count), np.zeros(count)
    placed = np.zeros(count, dtype=np.bool_)
    request = allocation = 0
    tiers = _TierCount()
    start = time.perf_counter()
    for i, pod in enumerate(sequence):
        request += gpu_request(pod)
        choice = pick_node(snapshot, pod)
        if choice is not None:
            if pod.gpus > 1:
                tiers.add(snapshot, pod, choice.node, choice.gpus)
            snapshot.assume(pod, choice.node, choice.gpus)
            allocation += gpu_request(pod)
            placed[i] = True
        arrived[i], allocated[i] = request, allocation
        fragmented[i] = float(fragmentation.node_fragmentation(snapshot, workload).sum())
    seconds = time.perf_counter() - start
    scale = 100.0 / capacity
    return Replay(
        arrived * scale,
        allocated * scale,
        fragmented * scale,
        placed,
        seconds,
        tiers.multi_gpu,
        tiers.best,
        tiers.misses,
    )


@dataclass(slots=True)
class _TierCount:
    """Counts multi-GPU placements on the best link tier the node's free GPUs offered (all
    subsets of the free GPUs of the pod's size, tried before the pod is assumed)."""

    multi_gpu: int = 0
    best: int = 0
    misses: list[str] = field(default_factory=list)

    def add(self, snapshot: Snapshot, pod: PodRequest, node: int, gpus: tuple[int, ...]) -> None:
        info = snapshot.nodes[node]
        if not info.topology_known:
            return
        free = [g for g in range(info.gpu_count) if snapshot.free_mask[node] >> g & 1]
        offered = min(
            (worst_tier(info.shape, subset) for subset in itertools.combinations(free, pod.gpus)),
            default=LinkTier.UNKNOWN,
        )
        got = worst_tier(info.shape, gpus)
        self.multi_gpu += 1
        if got <= offered:
            self.best += 1
        elif len(self.misses) < 5:
            self.misses.append(f"{pod.key} on {info.name}: {got.name}, {offered.name} offered")


# ----- policies --------------------------------------------------------------------------------

_OFF: dict[str, Any] = {
    "binpack": {"weight": 0},
    "gpuWeight": 0,
    "topologyWeight": 0,
    "leastAllocatedWeight": 0,
    "fragmentationWeight": 0,
}


def _baseline(scoring: Mapping[str, Any]) -> dict[str, Any]:
    return {**_OFF, **scoring, "tieBreak": {"order": "shuffled"}}


POLICIES: dict[str, dict[str, Any]] = {
    "random": {**_OFF, "tieBreak": {"order": "random"}},
    "dot-product": _baseline({"dotProductWeight": 1}),
    "packing": _baseline({"packingWeight": 1}),
    "best-fit": _baseline({"bestFitWeight": 1}),
    "fgd": _baseline(
        {
            "fragmentationWeight": 1,
            "fragmentationStep": 1,
            "fragmentationShareGpu": "leastFragmentation",
        }
    ),
    "volcano-binpack": _baseline({"binpack": {"weight": 1}}),
    "least-allocated": _baseline({"leastAllocatedWeight": 1}),
    "seed-gpu": _baseline({"gpuWeight": 1}),
    "gpusched": {},
}
"""Scoring sections of the benchmarked policies (`SchedulerConfig` ``scoring``, the config
file's words). ``gpusched`` is the default configuration, untouched. The baselines switch every
default score off and turn theirs on. They break ties as the protocol does, by a seeded random
node order, one per run (seeded with the run's seed), except ``random``, which scores every
node alike and draws a fresh order for each pod."""
PUBLISHED_NAMES = {
    "random": "01-Random",
    "dot-product": "02-DotProd",
    "packing": "04-GpuPacking",
    "best-fit": "05-BestFit",
    "fgd": "06-FGD",
}
"""Our policy → the FGD artifact's policy name, where the artifact has one."""


def policy_config(name: str, seed: int) -> SchedulerConfig:
    """The `SchedulerConfig` of a benchmarked policy for the run with ``seed``."""
    scoring = dict(POLICIES[name])
    if "tieBreak" in scoring:
        scoring["tieBreak"] = {**scoring["tieBreak"], "seed": seed}
    return SchedulerConfig.model_validate({"scoring": scoring} if scoring else {})


@dataclass(frozen=True, slots=True)
class Trace:
    """A trace ready to replay: the cluster (with synthetic topology), its pods, and FGD's
    target workload from the original (not inflated) pods."""

    name: str
    snapshot: Snapshot
    pods: tuple[PodRequest, ...]
    workload: tuple[fragmentation.TaskType, ...]
    notes: tuple[str, ...]

    @property
    def capacity(self) -> int:
        return WHOLE_GPU_MILLI * int(self.snapshot.gpu_offset[-1])


def load_trace(directory: Path, name: str) -> Trace:
    """``openb_node_list_gpu_node.csv`` and ``openb_pod_list_<name>.csv`` of ``directory``."""
    rows, notes = read_node_rows(directory / "openb_node_list_gpu_node.csv")
    nodes = [parse_node(_node(row, topology=True)) for row in rows]
    models = frozenset(row.model for row in rows)
    pods = load_pods(directory / f"openb_pod_list_{name}.csv", models)
    snapshot = build_snapshot(nodes)
    return Trace(name, snapshot, tuple(pods), fragmentation.target_workload(pods), tuple(notes))


def run(trace: Trace, policy: str, seed: int) -> Replay:
    """One run of the published protocol: ``policy`` on ``trace`` with ``seed``."""
    sequence = arrivals(trace.pods, trace.capacity, seed)
    return replay(trace.snapshot, sequence, policy_config(policy, seed), trace.workload)

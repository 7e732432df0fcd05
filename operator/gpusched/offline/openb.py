"""The Alibaba openb GPU-cluster trace (cluster-trace-gpu-v2023, the FGD paper's data), read into
the engine's inputs: its nodes (with a synthetic intra-node topology, as the trace has none) and
its pods. `gpusched.offline.replay` replays it with the published protocol.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpusched.api.k8s import Node, parse_node
from gpusched.api.selectors import NodeSelectorRequirement, NodeSelectorTerm
from gpusched.api.topology import TOPOLOGY_ANNOTATION
from gpusched.engine.build import build_snapshot
from gpusched.engine.request import WHOLE_GPU_MILLI, PodRequest
from gpusched.engine.snapshot import Snapshot
from gpusched.engine.workload import TaskType, target_workload

PRODUCT_LABEL = "nvidia.com/gpu.product"
NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
"""Required columns; ``gpu_spec`` is optional (the multigpu variants have only these five)."""


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


@dataclass(frozen=True, slots=True)
class Trace:
    """A trace ready to replay: the cluster (with synthetic topology), its pods, and FGD's
    target workload from the original (not inflated) pods."""

    name: str
    snapshot: Snapshot
    pods: tuple[PodRequest, ...]
    workload: tuple[TaskType, ...]
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
    return Trace(name, snapshot, tuple(pods), target_workload(pods), tuple(notes))

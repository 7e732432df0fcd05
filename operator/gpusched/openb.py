"""Reading the Alibaba openb GPU-cluster trace (cluster-trace-gpu-v2023, the FGD paper's data)
into the engine's inputs. File I/O, so it lives outside the engine; benchmarks and tests share it.
"""

from __future__ import annotations

import csv
from pathlib import Path

from gpusched.api.k8s import Node, parse_node
from gpusched.engine.request import WHOLE_GPU_MILLI, PodRequest

PRODUCT_LABEL = "nvidia.com/gpu.product"


def load_nodes(path: Path) -> list[Node]:
    """Nodes of a node list (``sn, cpu_milli, memory_mib, gpu, model``), Ready, with the GPU
    model as the product label. No topology annotation: the trace has none, so multi-GPU pods
    get the engine's "topology unknown" GPU choice."""
    with path.open(newline="") as handle:
        return [parse_node(_node(row)) for row in csv.DictReader(handle)]


def _node(row: dict[str, str]) -> dict[str, object]:
    return {
        "kind": "Node",
        "metadata": {"name": row["sn"], "labels": {PRODUCT_LABEL: row["model"]}},
        "status": {
            "allocatable": {
                "cpu": f"{row['cpu_milli']}m",
                "memory": f"{row['memory_mib']}Mi",
                "pods": "110",
                "nvidia.com/gpu": row["gpu"],
            },
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def load_pods(path: Path) -> list[PodRequest]:
    """Pods of a pod list in file order (= name order), keyed ``openb/<name>``. A pod with one
    GPU and ``gpu_milli`` < 1000 asks for a share of a GPU; any other asks for ``num_gpu`` whole
    GPUs. ``gpu_spec`` is not read (it is empty in the default trace)."""
    with path.open(newline="") as handle:
        return [_pod(row) for row in csv.DictReader(handle)]


def _pod(row: dict[str, str]) -> PodRequest:
    count, milli = int(row["num_gpu"]), int(row["gpu_milli"])
    share = count == 1 and 0 < milli < WHOLE_GPU_MILLI
    resources = {"cpu": int(row["cpu_milli"]), "memory": int(row["memory_mib"]) * 2**20, "pods": 1}
    return PodRequest(
        key=f"openb/{row['name']}",
        resources={k: v for k, v in resources.items() if v},
        gpus=0 if share else count,
        gpu_milli=milli if share else 0,
        created=float(row.get("creation_time") or 0),
    )

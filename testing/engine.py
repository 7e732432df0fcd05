"""A compact cluster builder for engine tests: a case states only what matters.

    cluster(zones={"z1": {"r1": ["a100x8"] * 2}, "z2": {"r2": ["pcie4090x8"]}})

builds nodes named node-a, node-b, … in the order given, labelled with zone and rack, each
shaped like a real machine whose `nvidia-smi topo -m` capture is in tests/data/gpu-topology.
"""

from __future__ import annotations

import string
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from gpusched.api.config import SchedulerConfig
from gpusched.api.k8s import Node, parse_node
from gpusched.api.nvsmi import parse_topo_matrix
from gpusched.api.selectors import NodeSelectorTerm, Toleration
from gpusched.api.topology import GpuInfo, GpuTopology
from gpusched.engine.build import build_snapshot
from gpusched.engine.groups import GroupKind, GroupSpec
from gpusched.engine.health import GpuSample
from gpusched.engine.request import PodRequest
from gpusched.engine.result import GroupDecision, ScheduleResult
from gpusched.engine.snapshot import BoundPod, Snapshot

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
ZONE = "topology.kubernetes.io/zone"
RACK = "topology.example.com/rack"
PRODUCT = "nvidia.com/gpu.product"

# kind -> (capture file or None, GPU count, product, memory MiB per GPU, cpu, memory)
KINDS: dict[str, tuple[str | None, int, str, int, str, str]] = {
    "a100x8": ("dgx-a100-8gpu-10nic.topo.txt", 8, "NVIDIA-A100-SXM4-80GB", 81920, "252", "1000Gi"),
    "hgxa100x8": (
        "hgx-a100-8gpu-3nic-4numa.topo.txt",
        8,
        "NVIDIA-A100-SXM4-80GB",
        81920,
        "252",
        "1000Gi",
    ),
    "v100x8": (
        "dgx1-v100-8gpu-hybridcubemesh-1nic.topo.txt",
        8,
        "Tesla-V100-SXM2-32GB",
        32768,
        "78",
        "500Gi",
    ),
    "pcie4090x8": (
        "pcie-rtx4090-8gpu-8numa-allsys.topo.txt",
        8,
        "NVIDIA-GeForce-RTX-4090",
        24564,
        "62",
        "250Gi",
    ),
    "h100x4": (
        "h100-sxm-4gpu-vm-8nic-phb.topo.txt",
        4,
        "NVIDIA-H100-80GB-HBM3",
        81920,
        "96",
        "500Gi",
    ),
    "gpu8": (None, 8, "NVIDIA-A100-SXM4-80GB", 81920, "252", "1000Gi"),
    "cpu": (None, 0, "", 0, "64", "256Gi"),
}


@cache
def topology_annotation(kind: str) -> str | None:
    capture, _, product, memory, _, _ = KINDS[kind]
    if capture is None:
        return None
    parsed = parse_topo_matrix((DATA / "gpu-topology" / capture).read_text()).topology
    gpus = tuple(
        GpuInfo(index=g.index, numa=g.numa, model=product, memory_mib=memory) for g in parsed.gpus
    )
    return GpuTopology(gpus=gpus, links=parsed.links).to_annotation()


def node(
    name: str,
    kind: str = "a100x8",
    *,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
    unschedulable: bool = False,
    ready: bool = True,
    annotations: Mapping[str, str] | None = None,
    allocatable: Mapping[str, str] | None = None,
) -> Node:
    _, gpus, product, _, cpu, memory = KINDS[kind]
    resources: dict[str, str] = {"cpu": cpu, "memory": memory, "pods": "110"}
    if gpus:
        resources["nvidia.com/gpu"] = str(gpus)
    resources.update(allocatable or {})
    all_annotations = {}
    annotation = topology_annotation(kind)
    if annotation is not None:
        all_annotations["gpusched.io/gpu-topology"] = annotation
    all_annotations.update(annotations or {})
    all_labels = {PRODUCT: product} if product else {}
    all_labels.update(labels or {})
    raw: dict[str, Any] = {
        "kind": "Node",
        "metadata": {"name": name, "labels": all_labels, "annotations": all_annotations},
        "spec": {"unschedulable": unschedulable, "taints": list(taints)},
        "status": {
            "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }
    return parse_node(raw)


def node_names(count: int) -> list[str]:
    letters = string.ascii_lowercase
    return [f"node-{letters[i]}" if i < 26 else f"node-{i}" for i in range(count)]


def cluster(
    zones: Mapping[str, Mapping[str, Sequence[str]]] | None = None,
    *,
    nodes: Iterable[Node] = (),
    bound: Iterable[BoundPod] = (),
    telemetry: Mapping[tuple[str, int], GpuSample] | None = None,
    config: SchedulerConfig | None = None,
) -> Snapshot:
    built = list(nodes)
    kinds = [(z, r, k) for z, racks in (zones or {}).items() for r, ks in racks.items() for k in ks]
    for name, (zone, rack, kind) in zip(node_names(len(kinds)), kinds, strict=True):
        built.append(node(name, kind, labels={ZONE: zone, RACK: rack}))
    return build_snapshot(built, bound, telemetry, config or SchedulerConfig())


def pod(
    name: str,
    *,
    gpus: int = 0,
    cpu: int = 1000,
    memory: int = 2**30,
    milli: int = 0,
    group: str | None = None,
    namespace: str = "default",
    priority: int = 0,
    app: str | None = None,
    selector: Mapping[str, str] | None = None,
    terms: Sequence[NodeSelectorTerm] | None = None,
    tolerations: Sequence[Toleration] = (),
    created: float = 0.0,
    extra: Mapping[str, int] | None = None,
) -> PodRequest:
    resources = {"cpu": cpu, "memory": memory, "pods": 1, **(extra or {})}
    return PodRequest(
        key=f"{namespace}/{name}",
        resources={k: v for k, v in resources.items() if v},
        gpus=gpus,
        gpu_milli=milli,
        node_selector=tuple(sorted((selector or {}).items())),
        required_terms=tuple(terms) if terms is not None else None,
        tolerations=tuple(tolerations),
        priority=priority,
        group=group,
        app=app,
        created=created,
    )


def bound(request: PodRequest, node_name: str, gpus: Sequence[int] | None = None) -> BoundPod:
    return BoundPod(request, node_name, tuple(gpus) if gpus is not None else None)


def gang(
    name: str,
    min_count: int,
    *,
    topology: str | None = None,
    parent: str | None = None,
    namespace: str = "default",
    basic: bool = False,
    created: float = 0.0,
) -> GroupSpec:
    return GroupSpec(
        key=f"{namespace}/{name}",
        kind=GroupKind.POD_GROUP,
        gang=not basic,
        minimum=0 if basic else min_count,
        topology_key=topology,
        parent=f"{namespace}/{parent}" if parent else None,
        created=created,
    )


def composite(
    name: str,
    min_groups: int,
    *,
    topology: str | None = None,
    parent: str | None = None,
    namespace: str = "default",
    created: float = 0.0,
) -> GroupSpec:
    return GroupSpec(
        key=f"{namespace}/{name}",
        kind=GroupKind.COMPOSITE,
        minimum=min_groups,
        topology_key=topology,
        parent=f"{namespace}/{parent}" if parent else None,
        created=created,
    )


def members(prefix: str, count: int, **kwargs: Any) -> list[PodRequest]:
    """``count`` identical pods named prefix-0, prefix-1, …"""
    return [pod(f"{prefix}-{i}", **kwargs) for i in range(count)]


# ----- reading a result back, for whole-result comparisons --------------------------------------


def _short(key: str) -> str:
    """``default/name`` → ``name``: tables in tests read better without the default namespace."""
    return key.removeprefix("default/")


def placements(result: ScheduleResult) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Every binding of ``result``: pod → (node, GPU indices)."""
    return {_short(b.pod): (b.node, b.gpus) for b in result.bindings}


def outcomes(result: ScheduleResult) -> dict[str, tuple[str, str, str]]:
    """Every group decision of ``result``: group → (phase, domain path or "", reason)."""
    return {
        _short(g.name): (g.phase.value, "/".join(g.placement.values()), g.reason.value)
        for g in result.groups
    }


def pending(result: ScheduleResult) -> dict[str, str]:
    """Every pod ``result`` left pending: pod → reason."""
    return {_short(u.pod): u.reason.value for u in result.unschedulable}


def messages(result: ScheduleResult) -> dict[str, str]:
    """Every pod ``result`` left pending: pod → message."""
    return {_short(u.pod): u.message for u in result.unschedulable}


def decision(result: ScheduleResult, group: str, namespace: str = "default") -> GroupDecision:
    """The decision about ``group``; fails the test, listing the groups there are, if none."""
    found = {g.name: g for g in result.groups}
    key = f"{namespace}/{group}"
    assert key in found, f"no decision about {key}; decisions: {sorted(found)}"
    return found[key]

"""Why nodes do not take a pod, as data (`NodeCheck`): the slow path beside the filters of
`gpusched.engine.fit`, run only for reports, in the same order of checks. Categories are found
for all nodes at once with numpy; figures are written only for the example nodes shown per
check, so checking 5,000 nodes stays cheap."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from gpusched.api.config import GPU_RESOURCE, NumaPolicy
from gpusched.engine import wording
from gpusched.engine.fit import broken_topology, partition_free, static_reason
from gpusched.engine.nodes import BoolArray, IntArray
from gpusched.engine.request import PodRequest
from gpusched.engine.result import Blocker, NodeCheck
from gpusched.engine.snapshot import Snapshot

CHECKS_SHOWN = 4
"""Checks listed per report; the nodes failing others are counted."""
FITTING_SHOWN = 3
EXAMPLES_SHOWN = 2
DEVICE_PROBLEMS_SHOWN = 3


def node_check(
    snapshot: Snapshot,
    pod: PodRequest,
    nodes: Iterable[int] | IntArray,
    capacity: IntArray | None = None,
) -> NodeCheck:
    """How many of ``nodes`` take ``pod`` now, and the first check each other one fails;
    ``capacity`` (per node): how many copies of the pod each takes, named beside the nodes
    that fit."""
    chosen = np.fromiter(nodes, dtype=np.int64) if not isinstance(nodes, np.ndarray) else nodes
    codes, labels = _category_codes(snapshot, pod, chosen)
    fitting = chosen[codes < 0]
    fitting_names = tuple(_fit_name(snapshot, int(n), capacity) for n in fitting[:FITTING_SHOWN])
    present, counts = np.unique(codes[codes >= 0], return_counts=True)
    ranked = sorted(zip(present, counts, strict=True), key=lambda c: (-c[1], labels[c[0]]))
    blockers = tuple(
        Blocker(
            labels[code],
            int(count),
            tuple(
                _failed_name(snapshot, pod, int(n)) for n in chosen[codes == code][:EXAMPLES_SHOWN]
            ),
        )
        for code, count in ranked[:CHECKS_SHOWN]
    )
    others = sum(int(c) for _, c in ranked[CHECKS_SHOWN:])
    problems = _device_problems(snapshot, pod, chosen[codes >= 0]) if pod.devices else ()
    return NodeCheck(int(fitting.size), fitting_names, blockers, others, problems)


def _device_problems(
    snapshot: Snapshot, pod: PodRequest, failed: IntArray
) -> tuple[tuple[str, str], ...]:
    """(node, why) of the DRA nodes among ``failed`` whose devices cannot all be used."""
    found: list[tuple[str, str]] = []
    for node in failed:
        devices = snapshot.nodes[int(node)].devices
        if devices is not None and devices.explained:
            found.append((devices.node, devices.explained))
            if len(found) == DEVICE_PROBLEMS_SHOWN:
                break
    return tuple(found)


def _fit_name(snapshot: Snapshot, node: int, capacity: IntArray | None) -> str:
    name = snapshot.nodes[node].name
    return f"{name} ×{capacity[node]}" if capacity is not None else name


def _failed_name(snapshot: Snapshot, pod: PodRequest, node: int) -> str:
    found = _failure(snapshot, pod, node)
    detail = found[1] if found is not None else ""
    name = snapshot.nodes[node].name
    return f"{name} ({detail})" if detail else name


# ----- the checks, node by node and all at once -----------------------------------------------


def node_reason(snapshot: Snapshot, pod: PodRequest, node: int) -> str | None:
    """The first check ``node`` fails for ``pod``, in words; ``None`` if it fits."""
    found = _failure(snapshot, pod, node)
    if found is None:
        return None
    category, detail = found
    return f"{category} ({detail})" if detail else category


def _failure(snapshot: Snapshot, pod: PodRequest, node: int) -> tuple[str, str] | None:
    """(category, detail) of the first failing check: nodes are grouped by category."""
    reason = static_reason(snapshot.nodes[node], pod)
    if reason is not None:
        return reason, ""
    for name, amount in pod.resources.items():
        column = snapshot.columns.get(name)
        if column is None:
            return f"no node has {name}", ""
        free = int(snapshot.allocatable[node, column] - snapshot.used[node, column])
        if free < amount:
            return f"insufficient {name}", f"{_fmt(name, free)} free, needs {_fmt(name, amount)}"
    return _gpu_failure(snapshot, pod, node)


def _gpu_failure(snapshot: Snapshot, pod: PodRequest, node: int) -> tuple[str, str] | None:
    info = snapshot.nodes[node]
    if pod.gpus > 1 and info.topology_error is not None:
        return "invalid GPU topology annotation: single-GPU pods only", info.topology_error
    if pod.gpus:
        single = pod.gpus > 1 and snapshot.config.numa_policy is NumaPolicy.SINGLE_NUMA_NODE
        have = int(snapshot.max_numa_free[node] if single else snapshot.free_whole[node])
        if have < pod.gpus:
            where = " in one NUMA node" if single else ""
            detail = f"{have} free usable GPUs{where}, needs {pod.gpus}"
            return _gpu_label(pod), detail + _excluded_suffix(snapshot, node)
        if pod.devices is not None and not partition_free(snapshot, pod, np.array([node]))[0]:
            return wording.no_free_partition(pod.gpus), ""
    elif pod.gpu_milli and snapshot.max_share[node] < pod.gpu_milli:
        most = int(snapshot.max_share[node])
        detail = f"most free on one GPU: {most}, needs {pod.gpu_milli}"
        return "no GPU with enough milli-GPU free", detail + _excluded_suffix(snapshot, node)
    return None


def _gpu_label(pod: PodRequest) -> str:
    """What a pod short of whole GPUs lacks: ``nvidia.com/gpu``, or the devices its
    ResourceClaims ask for."""
    if pod.devices is not None and pod.devices.extended is None:
        return wording.FREE_DRA_DEVICES
    return f"insufficient {GPU_RESOURCE}"


def _excluded_suffix(snapshot: Snapshot, node: int) -> str:
    notes = [
        f"GPU {gid - int(snapshot.gpu_offset[node])} {snapshot.gpu_notes[gid]}"
        for gid in snapshot.node_gpus(node)
        if gid in snapshot.gpu_notes and not snapshot.gpu_usable[gid]
    ]
    return f"; excluded: {', '.join(notes)}" if notes else ""


def _fmt(resource: str, amount: int) -> str:
    if resource == "cpu":
        return f"{amount}m"
    if resource == "memory" or resource.startswith("hugepages-"):
        return f"{amount / 2**30:.1f}Gi"
    return str(amount)


def _category_codes(
    snapshot: Snapshot, pod: PodRequest, nodes: IntArray
) -> tuple[IntArray, list[str]]:
    """Per node of ``nodes``, the index in the returned labels of the first check it fails
    (-1: it fits). The same order of checks as `_failure`, vectorised."""
    static_codes, static_labels = _static_categories(snapshot, pod)
    codes = static_codes[nodes].copy()
    labels = list(static_labels)

    def check(label: str, ok: BoolArray) -> None:
        failing = (codes < 0) & ~ok
        if failing.any():
            labels.append(label)
            codes[failing] = len(labels) - 1

    for name, amount in pod.resources.items():
        column = snapshot.columns.get(name)
        if column is None:
            check(f"no node has {name}", np.zeros(nodes.size, dtype=np.bool_))
            continue
        free = snapshot.allocatable[nodes, column] - snapshot.used[nodes, column]
        check(f"insufficient {name}", free >= amount)
    if pod.gpus > 1:
        broken = broken_topology(snapshot)[nodes]
        check("invalid GPU topology annotation: single-GPU pods only", ~broken)
    if pod.gpus:
        single = pod.gpus > 1 and snapshot.config.numa_policy is NumaPolicy.SINGLE_NUMA_NODE
        have = snapshot.max_numa_free[nodes] if single else snapshot.free_whole[nodes]
        check(_gpu_label(pod), have >= pod.gpus)
        if pod.devices is not None:
            check(wording.no_free_partition(pod.gpus), partition_free(snapshot, pod, nodes))
    elif pod.gpu_milli:
        check("no GPU with enough milli-GPU free", snapshot.max_share[nodes] >= pod.gpu_milli)
    return codes, labels


def _static_categories(snapshot: Snapshot, pod: PodRequest) -> tuple[IntArray, list[str]]:
    """Per node (all nodes), the static check it fails as an index into the labels (-1:
    passes); cached per constraint set like `static_mask`."""
    key = pod.constraint_key
    cached = snapshot.static_reasons.get(key)
    if cached is None:
        labels: list[str] = []
        index: dict[str, int] = {}
        codes = np.full(len(snapshot.nodes), -1, dtype=np.int64)
        for node, info in enumerate(snapshot.nodes):
            reason = static_reason(info, pod)
            if reason is not None:
                codes[node] = index.setdefault(reason, len(labels))
                if len(labels) < len(index):
                    labels.append(reason)
        cached = (codes, labels)
        snapshot.static_reasons[key] = cached
    return cached

"""Filters: which nodes can take a pod, and — when none can — why, in words.

`feasible` is the hot path: one boolean mask over all nodes from cached static checks
(readiness, cordon, taints, selector, affinity) and vectorised dynamic checks (resources,
GPUs). `explain` is the slow path, run only for reports: the first failing check per node,
aggregated the way kube-scheduler does ("3 nodes: …; 2 nodes: …").
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from gpusched.api.config import GPU_RESOURCE, NumaPolicy
from gpusched.api.k8s import first_untolerated_taint, required_terms_match
from gpusched.engine.nodes import BoolArray, IntArray, NodeInfo
from gpusched.engine.request import PodRequest
from gpusched.engine.snapshot import Snapshot


def static_mask(snapshot: Snapshot, pod: PodRequest) -> BoolArray:
    """Nodes that pass every check that does not depend on usage; cached per constraint set."""
    key = pod.constraint_key
    mask = snapshot.static_masks.get(key)
    if mask is None:
        mask = np.array([_static_reason(node, pod) is None for node in snapshot.nodes], bool)
        snapshot.static_masks[key] = mask
    return mask


def _static_reason(node: NodeInfo, pod: PodRequest) -> str | None:
    if not node.ready:
        return "node is NotReady"
    if node.unschedulable:
        return "node is cordoned"
    taint = first_untolerated_taint(node.taints, pod.tolerations)
    if taint is not None:
        value = f"={taint.value}" if taint.value else ""
        return f"untolerated taint {taint.key}{value}:{taint.effect}"
    for key, value in pod.node_selector:
        if node.labels.get(key) != value:
            return f"nodeSelector {key}={value} does not match"
    if pod.required_terms is not None and not required_terms_match(
        pod.required_terms, node.labels, node.name
    ):
        return "required node affinity does not match"
    return None


def feasible(snapshot: Snapshot, pod: PodRequest, allowed: BoolArray | None = None) -> BoolArray:
    """Mask of nodes that can take ``pod`` now (within ``allowed`` when given)."""
    mask = static_mask(snapshot, pod).copy()
    if allowed is not None:
        mask &= allowed
    for name, amount in pod.resources.items():
        column = snapshot.columns.get(name)
        if column is None:
            return np.zeros_like(mask)
        mask &= snapshot.used[:, column] + amount <= snapshot.allocatable[:, column]
    if pod.gpus:
        mask &= _gpu_count_ok(snapshot, pod)
    elif pod.gpu_milli:
        mask &= snapshot.max_share >= pod.gpu_milli
    return mask


def feasible_nodes(
    snapshot: Snapshot, pod: PodRequest, allowed: BoolArray | None = None
) -> IntArray:
    """`feasible` as node indices, ascending. Inside a small ``allowed`` domain (a rack of a
    gang) it checks usage only for the nodes that pass the static checks there, instead of
    all nodes of the cluster."""
    mask = static_mask(snapshot, pod)
    if allowed is None:
        return np.flatnonzero(feasible(snapshot, pod))
    nodes = np.flatnonzero(mask & allowed)
    for name, amount in pod.resources.items():
        column = snapshot.columns.get(name)
        if column is None:
            return nodes[:0]
        fits = snapshot.used[nodes, column] + amount <= snapshot.allocatable[nodes, column]
        nodes = nodes[fits]
    if pod.gpus:
        nodes = nodes[_gpu_count_ok(snapshot, pod, nodes)]
    elif pod.gpu_milli:
        nodes = nodes[snapshot.max_share[nodes] >= pod.gpu_milli]
    return nodes


def _gpu_count_ok(
    snapshot: Snapshot, pod: PodRequest, nodes: IntArray | slice = slice(None)
) -> BoolArray:
    """Whether ``nodes`` (all by default) have the pod's whole GPUs free."""
    if pod.gpus > 1 and snapshot.config.numa_policy is NumaPolicy.SINGLE_NUMA_NODE:
        ok = snapshot.max_numa_free[nodes] >= pod.gpus
    else:
        ok = snapshot.free_whole[nodes] >= pod.gpus
    if pod.gpus > 1:
        ok &= ~_broken_topology(snapshot)[nodes]
    return ok


def _broken_topology(snapshot: Snapshot) -> BoolArray:
    cached = snapshot.static_masks.get("\0broken-topology")
    if cached is None:
        cached = np.array([n.topology_error is not None for n in snapshot.nodes], bool)
        snapshot.static_masks["\0broken-topology"] = cached
    return cached


# ----- explanations --------------------------------------------------------------------------


def node_reason(snapshot: Snapshot, pod: PodRequest, node: int) -> str | None:
    """The first check ``node`` fails for ``pod``, in words; ``None`` if it fits."""
    found = _failure(snapshot, pod, node)
    if found is None:
        return None
    category, detail = found
    return f"{category} ({detail})" if detail else category


def _failure(snapshot: Snapshot, pod: PodRequest, node: int) -> tuple[str, str] | None:
    """(category, detail) of the first failing check: nodes are grouped by category."""
    reason = _static_reason(snapshot.nodes[node], pod)
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
            return f"insufficient {GPU_RESOURCE}", detail + _excluded_suffix(snapshot, node)
    elif pod.gpu_milli and snapshot.max_share[node] < pod.gpu_milli:
        most = int(snapshot.max_share[node])
        detail = f"most free on one GPU: {most}, needs {pod.gpu_milli}"
        return "no GPU with enough milli-GPU free", detail + _excluded_suffix(snapshot, node)
    return None


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


def explain(
    snapshot: Snapshot,
    pod: PodRequest,
    nodes: Iterable[int] | IntArray,
    limit: int = 4,
    capacity: IntArray | None = None,
) -> str:
    """Aggregated reasons why ``nodes`` do not fit ``pod``: "2 × insufficient cpu: node-a
    (1000m free, needs 4000m), node-b (…); …". Nodes that do fit are counted too, so a gang's
    report reads "3 nodes fit (node-a ×2, …); 5 × …", with how many copies of the pod each
    takes when ``capacity`` (per node) is given.

    Categories are found for all nodes at once with numpy; details are written only for the
    two example nodes shown per category, so explaining 5,000 nodes stays cheap."""
    chosen = np.fromiter(nodes, dtype=np.int64) if not isinstance(nodes, np.ndarray) else nodes
    codes, labels = _category_codes(snapshot, pod, chosen)
    parts = []
    fitting = chosen[codes < 0]
    if fitting.size:
        names = [_fit_name(snapshot, int(n), capacity) for n in fitting[:3]]
        more = ", …" if fitting.size > 3 else ""
        verb = "node fits" if fitting.size == 1 else "nodes fit"
        parts.append(f"{fitting.size} {verb} ({', '.join(names)}{more})")
    present, counts = np.unique(codes[codes >= 0], return_counts=True)
    ranked = sorted(zip(present, counts, strict=True), key=lambda c: (-c[1], labels[c[0]]))
    for code, count in ranked[:limit]:
        examples = chosen[codes == code][:2]
        shown = ", ".join(_failed_name(snapshot, pod, int(n)) for n in examples)
        parts.append(f"{count} × {labels[code]}: {shown}{', …' if count > 2 else ''}")
    if len(ranked) > limit:
        parts.append(f"{sum(int(c) for _, c in ranked[limit:])} more nodes for other reasons")
    return "; ".join(parts) if parts else "no nodes"


def _fit_name(snapshot: Snapshot, node: int, capacity: IntArray | None) -> str:
    name = snapshot.nodes[node].name
    return f"{name} ×{capacity[node]}" if capacity is not None else name


def _failed_name(snapshot: Snapshot, pod: PodRequest, node: int) -> str:
    found = _failure(snapshot, pod, node)
    detail = found[1] if found is not None else ""
    name = snapshot.nodes[node].name
    return f"{name} ({detail})" if detail else name


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
        broken = _broken_topology(snapshot)[nodes]
        check("invalid GPU topology annotation: single-GPU pods only", ~broken)
    if pod.gpus:
        single = pod.gpus > 1 and snapshot.config.numa_policy is NumaPolicy.SINGLE_NUMA_NODE
        have = snapshot.max_numa_free[nodes] if single else snapshot.free_whole[nodes]
        check(f"insufficient {GPU_RESOURCE}", have >= pod.gpus)
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
            reason = _static_reason(info, pod)
            if reason is not None:
                codes[node] = index.setdefault(reason, len(labels))
                if len(labels) < len(index):
                    labels.append(reason)
        cached = (codes, labels)
        snapshot.static_reasons[key] = cached
    return cached

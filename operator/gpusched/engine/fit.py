"""Filters: which nodes can take a pod, the hot path of every placement.

`feasible` is one boolean mask over all nodes from cached static checks (readiness, cordon,
taints, selector, affinity) and vectorised dynamic checks (resources, GPUs). Why a node
fails them, for reports, is `gpusched.engine.blockers`.
"""

from __future__ import annotations

import numpy as np

from gpusched.api.config import NumaPolicy
from gpusched.api.selectors import first_untolerated_taint, required_terms_match
from gpusched.engine import partitions, wording
from gpusched.engine.devices import COMPUTE_DOMAIN_LABEL
from gpusched.engine.nodes import BoolArray, IntArray, NodeInfo
from gpusched.engine.policy import offered_gpus
from gpusched.engine.request import PodRequest
from gpusched.engine.snapshot import Snapshot


def static_mask(snapshot: Snapshot, pod: PodRequest) -> BoolArray:
    """Nodes that pass every check that does not depend on usage; cached per constraint set."""
    key = pod.constraint_key
    mask = snapshot.static_masks.get(key)
    if mask is None:
        mask = np.array([static_reason(node, pod) is None for node in snapshot.nodes], bool)
        snapshot.static_masks[key] = mask
    return mask


def static_reason(node: NodeInfo, pod: PodRequest) -> str | None:
    """The first check that does not depend on usage ``node`` fails for ``pod``, in words."""
    if not node.ready:
        return wording.NOT_READY
    if node.unschedulable:
        return wording.CORDONED
    taint = first_untolerated_taint(node.taints, pod.tolerations)
    if taint is not None:
        return wording.untolerated_taint(taint.key, taint.value, taint.effect)
    for key, value in pod.node_selector:
        if node.labels.get(key) != value:
            return wording.selector_mismatch(key, value)
    if pod.required_terms is not None and not required_terms_match(
        pod.required_terms, node.labels, node.name
    ):
        return wording.AFFINITY_MISMATCH
    return device_reason(node, pod)


def device_reason(node: NodeInfo, pod: PodRequest) -> str | None:
    """Why ``node``'s DRA devices (or its lack of them) do not suit ``pod``, in words. A pod's
    claims are placed only where every device passes their checks: GPUs are picked by
    topology, and any of them may be the one picked."""
    devices, wanted = node.devices, pod.devices
    if wanted is None:
        if devices is not None and pod.wants_gpu:
            return wording.DRA_NODE_FOR_PLUGIN_POD
        return None
    if wanted.refusal is not None:
        return wanted.refusal.message
    serving = node.labels.get(COMPUTE_DOMAIN_LABEL)
    if serving and any(d != serving for d in wanted.compute_domains):
        return wording.serves_other_domain(serving)
    terms = wanted.node_terms
    if terms is not None and not required_terms_match(terms, node.labels, node.name):
        return wording.joined_elsewhere(wanted.joined)
    if devices is None:
        return None if wanted.extended is not None else wording.NO_DRA_DEVICES
    if not devices.devices and not (devices.shares and wanted.shares and not wanted.gpus):
        return wording.DRA_DEVICES_UNUSABLE
    failing = devices.failing(wanted.checks)
    if failing is not None:
        return wording.dra_selector_fails(str(failing))
    refused = partitions.refusal(devices.partitions, wanted.gpus, wanted.gpu_claims)
    if refused is not None:
        return wording.fm_partition(refused)
    return None


def feasible(
    snapshot: Snapshot, pod: PodRequest, numa: NumaPolicy, allowed: BoolArray | None = None
) -> BoolArray:
    """Mask of nodes that can take ``pod`` now under the NUMA rule ``numa`` (within
    ``allowed`` when given)."""
    mask = static_mask(snapshot, pod).copy()
    if allowed is not None:
        mask &= allowed
    for name, amount in pod.resources.items():
        column = snapshot.columns.get(name)
        if column is None:
            return np.zeros_like(mask)
        mask &= snapshot.used[:, column] + amount <= snapshot.allocatable[:, column]
    if pod.gpus:
        mask &= _gpu_count_ok(snapshot, pod, numa)
    elif pod.gpu_milli:
        mask &= snapshot.max_share >= pod.gpu_milli
    return mask


def feasible_nodes(
    snapshot: Snapshot, pod: PodRequest, numa: NumaPolicy, allowed: BoolArray | None = None
) -> IntArray:
    """`feasible` as node indices, ascending. Inside a small ``allowed`` domain (a rack of a
    gang) it checks usage only for the nodes that pass the static checks there, instead of
    all nodes of the cluster."""
    mask = static_mask(snapshot, pod)
    if allowed is None:
        return np.flatnonzero(feasible(snapshot, pod, numa))
    nodes = np.flatnonzero(mask & allowed)
    for name, amount in pod.resources.items():
        column = snapshot.columns.get(name)
        if column is None:
            return nodes[:0]
        fits = snapshot.used[nodes, column] + amount <= snapshot.allocatable[nodes, column]
        nodes = nodes[fits]
    if pod.gpus:
        nodes = nodes[_gpu_count_ok(snapshot, pod, numa, nodes)]
    elif pod.gpu_milli:
        nodes = nodes[snapshot.max_share[nodes] >= pod.gpu_milli]
    return nodes


def _gpu_count_ok(
    snapshot: Snapshot, pod: PodRequest, numa: NumaPolicy, nodes: IntArray | slice = slice(None)
) -> BoolArray:
    """Whether ``nodes`` (all by default) have the pod's whole GPUs free (the NUMA rule's
    count: `gpusched.engine.policy.offered_gpus`)."""
    ok = offered_gpus(snapshot, numa, pod.gpus, nodes) >= pod.gpus
    if pod.gpus > 1:
        ok &= ~broken_topology(snapshot)[nodes]
    if pod.devices is not None:
        ok &= partition_free(snapshot, pod, nodes)
    return ok


def partition_free(
    snapshot: Snapshot, pod: PodRequest, nodes: IntArray | slice = slice(None)
) -> BoolArray:
    """Whether ``nodes`` (all by default) have a whole Fabric Manager partition of the pod's
    GPU count free; True on nodes that are not partitioned."""
    partitioned = _partitioned(snapshot)[nodes]
    ok = np.ones(partitioned.shape, bool)
    if not pod.gpus or not partitioned.any():
        return ok
    indices = np.arange(len(snapshot.nodes))[nodes]
    for position in np.flatnonzero(partitioned):
        node = int(indices[position])
        found = snapshot.nodes[node].devices
        held = found.partitions if found is not None else None
        free = partitions.free_partitions(held, pod.gpus, snapshot.free_mask[node])
        ok[position] = bool(free)
    return ok


def _partitioned(snapshot: Snapshot) -> BoolArray:
    """Nodes whose DRA GPUs are in Fabric Manager partitions."""
    cached = snapshot.static_masks.get("\0fm-partitioned")
    if cached is None:
        cached = np.array(
            [n.devices is not None and n.devices.partitions is not None for n in snapshot.nodes],
            bool,
        )
        snapshot.static_masks["\0fm-partitioned"] = cached
    return cached


def broken_topology(snapshot: Snapshot) -> BoolArray:
    """Nodes whose GPU topology annotation is invalid (they take single-GPU pods only)."""
    cached = snapshot.static_masks.get("\0broken-topology")
    if cached is None:
        cached = np.array([n.topology_error is not None for n in snapshot.nodes], bool)
        snapshot.static_masks["\0broken-topology"] = cached
    return cached

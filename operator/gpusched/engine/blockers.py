"""Why nodes do not take a pod, as data (`NodeCheck`): the slow path beside the filters of
`gpusched.engine.fit`, run only for reports, in the same order of checks. Categories are found
for all nodes at once with numpy; figures are written only for the example nodes shown per
check, so checking 5,000 nodes stays cheap."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from gpusched.api.config import GPU_RESOURCE, NumaPolicy
from gpusched.engine import wording
from gpusched.engine.channels import ChannelRule
from gpusched.engine.devices import CHANNEL_RESOURCE
from gpusched.engine.fit import broken_topology, partition_free, static_reason
from gpusched.engine.nodes import BoolArray, IntArray
from gpusched.engine.policy import offered_gpus, one_numa_node
from gpusched.engine.request import PodRequest
from gpusched.engine.result import Blocker, NodeCheck
from gpusched.engine.shares import SHARE_RESOURCE
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
    numa: NumaPolicy,
    capacity: IntArray | None = None,
) -> NodeCheck:
    """How many of ``nodes`` take ``pod`` now, and every check the others fail, each with its
    count of nodes, as kube-scheduler lists its filters: a node short of both GPUs and memory
    counts under both. The checks that do not depend on usage (readiness, taints, selectors)
    come first and a node failing one is counted there only, as kube-scheduler stops at the
    first failing plugin. GPU checks are listed first when they block, then the others by
    nodes, most first. ``capacity`` (per node): how many copies of the pod each takes, named
    beside the nodes that fit."""
    chosen = np.fromiter(nodes, dtype=np.int64) if not isinstance(nodes, np.ndarray) else nodes
    failing, labels, gpu = _failing_checks(snapshot, pod, chosen, numa)
    fits = ~failing.any(axis=0) if labels else np.ones(chosen.size, dtype=np.bool_)
    fitting = chosen[fits]
    fitting_names = tuple(_fit_name(snapshot, int(n), capacity) for n in fitting[:FITTING_SHOWN])
    counts = failing.sum(axis=1) if labels else np.zeros(0, dtype=np.int64)
    ranked = sorted(
        (c for c in range(len(labels)) if counts[c]),
        key=lambda c: (not gpu[c], -int(counts[c]), labels[c]),
    )
    shown, rest = ranked[:CHECKS_SHOWN], ranked[CHECKS_SHOWN:]
    blockers = tuple(
        Blocker(
            labels[c],
            int(counts[c]),
            tuple(
                _failed_name(snapshot, pod, int(n), labels[c], numa)
                for n in chosen[failing[c]][:EXAMPLES_SHOWN]
            ),
        )
        for c in shown
    )
    listed = failing[shown].any(axis=0) if shown else np.zeros(chosen.size, dtype=np.bool_)
    others = int((failing[rest].any(axis=0) & ~listed).sum()) if rest else 0
    problems = _device_problems(snapshot, pod, chosen[~fits]) if pod.devices else ()
    limits = _limits(pod) if capacity is not None and fitting.size else ()
    return NodeCheck(
        fitting=int(fitting.size),
        fitting_examples=fitting_names,
        blockers=blockers,
        others=others,
        device_problems=problems,
        limits=limits,
    )


def _limits(pod: PodRequest) -> tuple[ChannelRule, ...]:
    """The rules that let a node take one copy of ``pod`` only: a channel pod's."""
    claims_channel = pod.resources.get(CHANNEL_RESOURCE, 0) > 0
    return (ChannelRule.ONE_POD_PER_NODE,) if claims_channel else ()


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
    return wording.with_capacity(name, int(capacity[node])) if capacity is not None else name


def _failed_name(
    snapshot: Snapshot, pod: PodRequest, node: int, check: str, numa: NumaPolicy
) -> str:
    detail = next((d for c, d in _failures(snapshot, pod, node, numa) if c == check), "")
    name = snapshot.nodes[node].name
    return wording.with_detail(name, detail)


# ----- the checks, node by node and all at once -----------------------------------------------


def node_reason(snapshot: Snapshot, pod: PodRequest, node: int, numa: NumaPolicy) -> str | None:
    """The first check ``node`` fails for ``pod``, in words; ``None`` if it fits."""
    found = _failure(snapshot, pod, node, numa)
    if found is None:
        return None
    category, detail = found
    return wording.with_detail(category, detail)


def _failure(
    snapshot: Snapshot, pod: PodRequest, node: int, numa: NumaPolicy
) -> tuple[str, str] | None:
    """(category, detail) of the first failing check: nodes are grouped by category."""
    return next(iter(_failures(snapshot, pod, node, numa)), None)


def _failures(
    snapshot: Snapshot, pod: PodRequest, node: int, numa: NumaPolicy
) -> list[tuple[str, str]]:
    """(category, detail) of every failing check, in `_failing_checks`' order: the static
    check alone when one fails, else every resource short and the GPU check."""
    reason = static_reason(snapshot.nodes[node], pod)
    if reason is not None:
        return [(reason, "")]
    found = []
    for name, amount in pod.resources.items():
        column = snapshot.columns.get(name)
        if column is None:
            found.append((wording.no_node_has(name), ""))
            continue
        free = int(snapshot.allocatable[node, column] - snapshot.used[node, column])
        if free < amount and name == CHANNEL_RESOURCE:
            found.append((wording.CHANNEL_TAKEN, wording.channel_taken("")))
        elif free < amount and name == SHARE_RESOURCE:
            found.append((wording.SHARE_SHORT, wording.share_left(free, amount)))
        elif free < amount:
            found.append((wording.insufficient(name), wording.short_of(name, free, amount)))
    gpu = _gpu_failure(snapshot, pod, node, numa)
    if gpu is not None:
        found.append(gpu)
    return found


def _gpu_failure(
    snapshot: Snapshot, pod: PodRequest, node: int, numa: NumaPolicy
) -> tuple[str, str] | None:
    info = snapshot.nodes[node]
    if pod.gpus > 1 and info.topology_error is not None:
        return wording.BROKEN_TOPOLOGY, info.topology_error
    if pod.gpus:
        single = one_numa_node(numa, pod.gpus)
        have = int(offered_gpus(snapshot, numa, pod.gpus, slice(node, node + 1))[0])
        if have < pod.gpus:
            detail = wording.gpus_short(have, single, pod.gpus)
            return _gpu_label(pod), detail + _excluded_suffix(snapshot, node)
        if pod.devices is not None and not partition_free(snapshot, pod, np.array([node]))[0]:
            return wording.no_free_partition(pod.gpus), ""
    elif pod.gpu_milli and snapshot.max_share[node] < pod.gpu_milli:
        most = int(snapshot.max_share[node])
        detail = wording.share_short(most, pod.gpu_milli)
        return wording.NO_GPU_SHARE, detail + _excluded_suffix(snapshot, node)
    return None


def _gpu_label(pod: PodRequest) -> str:
    """What a pod short of whole GPUs lacks: ``nvidia.com/gpu``, or the devices its
    ResourceClaims ask for."""
    if pod.devices is not None and pod.devices.extended is None:
        return wording.FREE_DRA_DEVICES
    return wording.insufficient(GPU_RESOURCE)


def _excluded_suffix(snapshot: Snapshot, node: int) -> str:
    notes = [
        (gid - int(snapshot.gpu_offset[node]), snapshot.gpu_notes[gid])
        for gid in snapshot.node_gpus(node)
        if gid in snapshot.gpu_notes and not snapshot.gpu_usable[gid]
    ]
    return wording.excluded_gpus(notes)


def _failing_checks(
    snapshot: Snapshot, pod: PodRequest, nodes: IntArray, numa: NumaPolicy
) -> tuple[BoolArray, list[str], list[bool]]:
    """A matrix (check × node of ``nodes``) of the checks each node fails, their labels, and
    which are GPU checks. Static checks are exclusive (a node fails its first one only);
    the others are all checked on the nodes that pass the static ones (`_failures`,
    vectorised)."""
    static_codes, static_labels = _static_categories(snapshot, pod)
    codes = static_codes[nodes]
    rows: list[BoolArray] = [codes == i for i in range(len(static_labels))]
    labels = list(static_labels)
    gpu = [False] * len(labels)
    passed = codes < 0

    def check(label: str, ok: BoolArray, is_gpu: bool = False) -> None:
        failing = passed & ~ok
        if failing.any():
            rows.append(failing)
            labels.append(label)
            gpu.append(is_gpu)

    for name, amount in pod.resources.items():
        column = snapshot.columns.get(name)
        if column is None:
            check(wording.no_node_has(name), np.zeros(nodes.size, dtype=np.bool_))
            continue
        free = snapshot.allocatable[nodes, column] - snapshot.used[nodes, column]
        label = (
            wording.CHANNEL_TAKEN
            if name == CHANNEL_RESOURCE
            else wording.SHARE_SHORT
            if name == SHARE_RESOURCE
            else wording.insufficient(name)
        )
        check(label, free >= amount)
    if pod.gpus > 1:
        broken = broken_topology(snapshot)[nodes]
        check(wording.BROKEN_TOPOLOGY, ~broken, is_gpu=True)
    if pod.gpus:
        gpu_ok = offered_gpus(snapshot, numa, pod.gpus, nodes) >= pod.gpus
        if pod.gpus > 1:
            gpu_ok |= broken  # a broken annotation is its own check (and the pod's first)
        check(_gpu_label(pod), gpu_ok, is_gpu=True)
        if pod.devices is not None:
            check(
                wording.no_free_partition(pod.gpus),
                partition_free(snapshot, pod, nodes),
                is_gpu=True,
            )
    elif pod.gpu_milli:
        check(wording.NO_GPU_SHARE, snapshot.max_share[nodes] >= pod.gpu_milli, is_gpu=True)
    matrix = np.array(rows, dtype=np.bool_) if rows else np.zeros((0, nodes.size), np.bool_)
    return matrix.reshape(len(rows), nodes.size), labels, gpu


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

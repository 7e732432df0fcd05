"""Why nodes do not take a pod, as data (`NodeCheck`): the slow path of `gpusched.engine.fit`,
run only for reports. Categories are found for all nodes at once with numpy; figures are
written only for the example nodes shown per check, so checking 5,000 nodes stays cheap."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from gpusched.engine.fit import _category_codes, _failure
from gpusched.engine.nodes import IntArray
from gpusched.engine.request import PodRequest
from gpusched.engine.result import Blocker, NodeCheck
from gpusched.engine.snapshot import Snapshot

CHECKS_SHOWN = 4
"""Checks listed per report; the nodes failing others are counted."""
FITTING_SHOWN = 3
EXAMPLES_SHOWN = 2


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
    return NodeCheck(int(fitting.size), fitting_names, blockers, others)


def _fit_name(snapshot: Snapshot, node: int, capacity: IntArray | None) -> str:
    name = snapshot.nodes[node].name
    return f"{name} ×{capacity[node]}" if capacity is not None else name


def _failed_name(snapshot: Snapshot, pod: PodRequest, node: int) -> str:
    found = _failure(snapshot, pod, node)
    detail = found[1] if found is not None else ""
    name = snapshot.nodes[node].name
    return f"{name} ({detail})" if detail else name

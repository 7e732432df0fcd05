"""The ledger takes what the kubelet gave over what gpusched chose.

On device-plugin nodes gpusched's ``gpusched.io/gpus`` is advisory: the kubelet picks the GPUs.
The node agent publishes the kubelet's record (``gpusched.io/gpus-actual``, see
`gpusched.api.assignments`); a bound pod listed there holds those GPUs in the engine's view.
Where they differ from the choice, the difference is counted once and reported once per pod.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from prometheus_client import Counter

from gpusched.api.assignments import ACTUAL_GPUS_ANNOTATION, parse_actual_gpus
from gpusched.api.errors import InvalidObjectError
from gpusched.api.k8s import Node
from gpusched.engine.snapshot import BoundPod

logger = logging.getLogger(__name__)

MISMATCHES = Counter(
    "gpusched_gpu_assignment_mismatch",
    "Pods whose GPUs, as the kubelet recorded them, differ from the ones gpusched chose.",
)


@dataclass(frozen=True, slots=True)
class Mismatch:
    pod: str
    node: str
    chosen: tuple[int, ...]
    actual: tuple[int, ...]

    @property
    def message(self) -> str:
        def show(gpus: tuple[int, ...]) -> str:
            return ",".join(map(str, gpus)) or "none"

        return (
            f"{self.pod} on {self.node}: gpusched chose GPUs {show(self.chosen)}, the kubelet "
            f"gave {show(self.actual)}; the ledger counts {show(self.actual)}"
        )


class ActualAssignments:
    """Per cycle: bound pods with the kubelet's GPUs, and the mismatches not reported yet."""

    def __init__(self) -> None:
        self._parsed: dict[str, tuple[str, dict[str, tuple[int, ...]]]] = {}
        self._replaced: dict[str, tuple[BoundPod, tuple[int, ...], BoundPod]] = {}
        self._reported: dict[str, Mismatch] = {}

    def _actual(self, node: Node) -> dict[str, tuple[int, ...]]:
        raw = node.annotations.get(ACTUAL_GPUS_ANNOTATION)
        if raw is None:
            return {}
        hit = self._parsed.get(node.name)
        if hit is not None and hit[0] == raw:
            return hit[1]
        try:
            parsed = parse_actual_gpus(node.name, raw)
        except InvalidObjectError as error:
            logger.warning("ignored: %s", error)
            parsed = {}
        self._parsed[node.name] = (raw, parsed)
        return parsed

    def apply(
        self, nodes: Mapping[str, Node], bound: Iterable[BoundPod], *, report: bool = True
    ) -> tuple[list[BoundPod], list[Mismatch]]:
        """``bound`` with the GPUs the kubelet actually gave, and the mismatches not reported
        yet (``report``: counted and remembered as reported; else left for the next call)."""
        # Nodes whose agent publishes the kubelet's record: pods elsewhere pass as they are,
        # without a lookup each (a cycle at 50,000 bound pods walks them all).
        published = self.published(nodes)
        if not published:
            return list(bound), []
        found: list[Mismatch] = []
        out = [self.adjust(nodes, published, h, found if report else None) for h in bound]
        return out, found

    @staticmethod
    def published(nodes: Mapping[str, Node]) -> dict[str, str]:
        """Node → its kubelet's record, for the nodes that publish one."""
        return {
            name: raw
            for name, n in nodes.items()
            if (raw := n.annotations.get(ACTUAL_GPUS_ANNOTATION)) is not None
        }

    def adjust(
        self,
        nodes: Mapping[str, Node],
        published: Mapping[str, str],
        holding: BoundPod,
        found: list[Mismatch] | None,
    ) -> BoundPod:
        """``holding`` with the GPUs the kubelet gave; a mismatch not reported yet is counted
        and added to ``found`` (None: left for a later call to report)."""
        if holding.node not in published:
            return holding
        actual = self._actual(nodes[holding.node]).get(holding.pod.key)
        if actual is None or actual == holding.gpus:
            return holding
        if found is not None and holding.gpus is not None and tuple(sorted(holding.gpus)) != actual:
            mismatch = Mismatch(holding.pod.key, holding.node, holding.gpus, actual)
            if self._reported.get(holding.pod.key) != mismatch:
                self._reported[holding.pod.key] = mismatch
                MISMATCHES.inc()
                found.append(mismatch)
        return self._replace(holding, actual)

    def _replace(self, holding: BoundPod, actual: tuple[int, ...]) -> BoundPod:
        hit = self._replaced.get(holding.pod.key)
        if hit is not None and hit[0] is holding and hit[1] == actual:
            return hit[2]
        request = holding.pod
        if len(actual) != request.gpus and not request.gpu_milli:
            request = dataclasses.replace(request, gpus=len(actual))
        replaced = BoundPod(request, holding.node, actual)
        self._replaced[holding.pod.key] = (holding, actual, replaced)
        return replaced

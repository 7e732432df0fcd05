"""GPUs assumed for bound pods that hold whole GPUs without saying which.

Other schedulers' pods carry no ``gpusched.io/gpus``. Left to the engine, the assumption (the
highest free GPUs) would be remade at every snapshot rebuild, in whatever order the pods come,
and could land on GPUs one of our pods holds: both would then count as one, and the node would
take more GPUs than it has. Here each such pod gets GPUs once, kept while it is bound: GPUs no
pod says it holds and no other assumption took, highest first; when too few are left (another
scheduler over-committed the node) the rest overlap, so the node shows none free.

An input of the engine's snapshot like any bound pod, made the same way by the operator (kept
across cycles) and by ``simulate`` (once)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from gpusched.engine.snapshot import BoundPod


class HeldPod(Protocol):
    """A bound pod as its reader keeps it (the operator's watch cache, ``simulate``'s
    input): its key, its uid, and what it holds (None: nothing, or not bound)."""

    @property
    def key(self) -> str: ...

    @property
    def uid(self) -> str: ...

    @property
    def holding(self) -> BoundPod | None: ...


class GpuPins:
    """The assumptions made so far, by pod uid: (the pod's holding, the same with GPUs
    assumed). An assumption is kept, so that it never moves onto GPUs one of our pods was
    given meanwhile."""

    def __init__(self) -> None:
        self._pins: dict[str, tuple[BoundPod, BoundPod]] = {}

    def pinned(
        self,
        pods: Mapping[str, HeldPod],
        explicit: Iterable[BoundPod],
        gpu_count: Callable[[str], int],
    ) -> dict[str, BoundPod]:
        """Holdings with GPUs assumed, by uid, for the bound ``pods`` that do not say which
        GPUs they hold; ``explicit``: the holdings that name their GPUs."""
        unknown = [
            r
            for r in pods.values()
            if r.holding is not None
            and r.holding.gpus is None
            and r.holding.pod.gpus
            and not r.holding.pod.gpu_milli
        ]
        if not unknown and not self._pins:
            return {}
        nodes = {r.holding.node for r in unknown if r.holding is not None}
        taken: dict[str, set[int]] = {n: set() for n in nodes}
        for named in explicit:
            if named.node in taken and named.gpus is not None:
                taken[named.node].update(named.gpus)
        pins: dict[str, tuple[BoundPod, BoundPod]] = {}
        fresh = []
        for record in unknown:
            holding = record.holding
            assert holding is not None
            kept = self._pins.get(record.uid)
            gpus = kept[1].gpus if kept is not None and kept[1].node == holding.node else None
            if gpus is None or len(gpus) != holding.pod.gpus or taken[holding.node] & set(gpus):
                fresh.append(record)  # new, resized, or one of ours says it holds them
                continue
            taken[holding.node].update(gpus)
            same = kept is not None and kept[0] is holding
            pins[record.uid] = kept if same and kept else (holding, _assume(holding, gpus))
        for record in sorted(fresh, key=lambda r: r.key):
            holding = record.holding
            assert holding is not None
            gpus = _assumed_gpus(gpu_count(holding.node), taken[holding.node], holding)
            taken[holding.node].update(gpus)
            pins[record.uid] = (holding, _assume(holding, gpus))
        self._pins = pins
        return {uid: pinned for uid, (_, pinned) in pins.items()}


def _assume(holding: BoundPod, gpus: tuple[int, ...]) -> BoundPod:
    return BoundPod(holding.pod, holding.node, gpus)


def _assumed_gpus(count: int, taken: set[int], holding: BoundPod) -> tuple[int, ...]:
    """``holding.pod.gpus`` GPUs of a node of ``count``: free ones first, highest first (the
    far end from where the engine allocates), then taken ones if it must."""
    wanted = min(holding.pod.gpus, count)
    order = [g for g in reversed(range(count)) if g not in taken]
    order += [g for g in reversed(range(count)) if g in taken]
    return tuple(sorted(order[:wanted]))

"""The agent's loop: read the topology, publish it when it changed, wait, again.

A read that fails (NVML and ``nvidia-smi`` both unusable, a partial matrix) publishes nothing:
the annotation keeps its last value, and the failure is logged with a running count. A failed
API call is retried at the next interval.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum

from gpusched.agent.node import NodeAnnotator
from gpusched.agent.smi import AgentError, read_nvidia_smi
from gpusched.api.topology import GpuTopology

__all__ = ["Source", "TopologyReader", "publish_loop", "read_topology"]

logger = logging.getLogger(__name__)


class Source(StrEnum):
    AUTO = "auto"
    """NVML, or ``nvidia-smi`` when NVML cannot be loaded or fails."""
    NVML = "nvml"
    NVIDIA_SMI = "nvidia-smi"


@dataclass(frozen=True)
class TopologyReader:
    source: Source = Source.AUTO
    nvidia_smi: str = "nvidia-smi"

    def __call__(self) -> GpuTopology:
        return read_topology(self.source, self.nvidia_smi)


def read_topology(source: Source, nvidia_smi: str = "nvidia-smi") -> GpuTopology:
    """The node's GPU topology from ``source``; `AgentError` when it cannot be read."""
    if source is not Source.NVIDIA_SMI:
        try:
            from gpusched.agent.nvml import read_nvml

            return read_nvml()
        except Exception as err:  # pynvml missing, libnvidia-ml missing, any NVMLError
            if source is Source.NVML:
                raise AgentError(f"NVML: {type(err).__name__}: {err}") from None
            logger.info("NVML unusable (%s: %s); running %s", type(err).__name__, err, nvidia_smi)
    return read_nvidia_smi(nvidia_smi)


async def publish_loop(
    read: Callable[[], GpuTopology],
    annotator: NodeAnnotator,
    interval_seconds: float,
    *,
    once: bool = False,
    actual: Callable[[GpuTopology], Awaitable[bool]] | None = None,
) -> int:
    """Runs until cancelled (or once); returns an exit status: 0, or 1 when ``once`` failed."""
    failures = 0
    while True:
        try:
            topology = await asyncio.to_thread(read)
            changed = await annotator.publish(topology.to_annotation())
            if actual is not None:  # the GPUs the kubelet gave each pod (PodResources)
                await actual(topology)
        except AgentError as err:
            failures += 1
            logger.error("cannot read the GPU topology (%d in a row): %s", failures, err)
        except Exception as err:  # the API server, the network: try again next time
            failures += 1
            name = annotator.node_name
            logger.error("cannot publish on node %s (%d in a row): %s", name, failures, err)
        else:
            failures = 0
            what = "published" if changed else "unchanged"
            count = len(topology.gpus)
            logger.info("node %s: %d GPUs, annotation %s", annotator.node_name, count, what)
        if once:
            return 1 if failures else 0
        await asyncio.sleep(interval_seconds)

"""GPU topology by running ``nvidia-smi``, for nodes where NVML cannot be loaded.

``nvidia-smi topo -m`` gives the links and NUMA nodes (parsed by `gpusched.api.nvsmi`);
``nvidia-smi --query-gpu=index,uuid,name,memory.total`` adds what the matrix lacks. A matrix that
does not parse (a partial capture, a driver error printed instead) is an `AgentError`: nothing
is published rather than a topology that was never seen. The query is optional: without it the
annotation carries links and NUMA nodes only.
"""

from __future__ import annotations

import logging
import subprocess

from gpusched.api.nvsmi import parse_topo_matrix
from gpusched.api.topology import GpuInfo, GpuTopology

__all__ = ["AgentError", "read_nvidia_smi"]

logger = logging.getLogger(__name__)

QUERY = ("--query-gpu=index,uuid,name,memory.total", "--format=csv,noheader,nounits")


class AgentError(Exception):
    """The GPU topology could not be read; the message says how far it got."""


def read_nvidia_smi(binary: str = "nvidia-smi", timeout: float = 60.0) -> GpuTopology:
    topo = _run([binary, "topo", "-m"], timeout)
    try:
        matrix = parse_topo_matrix(topo).topology
    except ValueError as err:
        raise AgentError(f"{binary} topo -m: {err}") from None
    try:
        details = parse_query(_run([binary, *QUERY], timeout))
    except AgentError as err:
        logger.warning("%s; publishing links and NUMA nodes only", err)
        details = {}
    gpus = tuple(
        details.get(g.index, GpuInfo(index=g.index)).model_copy(update={"numa": g.numa})
        for g in matrix.gpus
    )
    return GpuTopology(gpus=gpus, links=matrix.links)


def parse_query(text: str) -> dict[int, GpuInfo]:
    """``0, GPU-…, NVIDIA A100-SXM4-80GB, 81920`` per line; unreadable lines are skipped."""
    gpus: dict[int, GpuInfo] = {}
    for line in text.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) < 4 or not fields[0].isdigit():
            if line.strip():
                logger.warning("nvidia-smi --query-gpu: skipped line %r", line)
            continue
        memory = fields[-1]
        gpus[int(fields[0])] = GpuInfo(
            index=int(fields[0]),
            uuid=fields[1] or None,
            model=", ".join(fields[2:-1]) or None,
            memory_mib=int(memory) if memory.isdigit() else None,
        )
    return gpus


def _run(command: list[str], timeout: float) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise AgentError(f"{' '.join(command)}: {err}") from None
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip()[-300:]
        raise AgentError(f"{' '.join(command)}: exit {done.returncode}: {tail}")
    return done.stdout

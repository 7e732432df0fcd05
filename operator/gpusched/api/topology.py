"""The node annotation ``gpusched.io/gpu-topology`` and the link codes of ``nvidia-smi topo -m``.

A link code is exactly what ``nvidia-smi topo -m`` prints between two GPUs. Closeness, best
first: ``NV<n>`` (more bonded NVLinks is better), ``PIX``, ``PXB``, ``PHB``, ``NODE``, ``SYS``.
``SOC`` is the name older drivers printed for ``SYS``.
"""

from __future__ import annotations

import json
from enum import IntEnum
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gpusched.api.errors import InvalidObjectError, from_validation_error

TOPOLOGY_ANNOTATION = "gpusched.io/gpu-topology"
MAX_ANNOTATION_BYTES = 64 * 1024
"""Annotations larger than this are rejected unread (a 16-GPU topology is about 3 KiB)."""
MAX_GPUS_PER_NODE = 64


class LinkTier(IntEnum):
    """How far apart two GPUs are; lower is closer. ``UNKNOWN`` is worse than every real tier."""

    NVLINK = 0
    PIX = 1
    PXB = 2
    PHB = 3
    NODE = 4
    SYS = 5
    UNKNOWN = 6


class Link(NamedTuple):
    tier: LinkTier
    nvlinks: int
    """Number of bonded NVLinks (``NV12`` → 12); 0 for every other tier."""


_TIER_BY_CODE = {
    "PIX": LinkTier.PIX,
    "PXB": LinkTier.PXB,
    "PHB": LinkTier.PHB,
    "NODE": LinkTier.NODE,
    "SYS": LinkTier.SYS,
    "SOC": LinkTier.SYS,
}


def parse_link(code: str) -> Link:
    """Parses one link code between two different GPUs; raises ``ValueError`` on anything else."""
    code = code.strip()
    tier = _TIER_BY_CODE.get(code)
    if tier is not None:
        return Link(tier, 0)
    if code.startswith("NV") and code[2:].isdigit() and int(code[2:]) > 0:
        return Link(LinkTier.NVLINK, int(code[2:]))
    raise ValueError(f"unknown link code {code!r} (want NV<n>, PIX, PXB, PHB, NODE or SYS)")


class GpuInfo(BaseModel):
    """One GPU of a node as the node agent (or an administrator) describes it."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    index: int = Field(ge=0, lt=MAX_GPUS_PER_NODE)
    uuid: str | None = Field(default=None, max_length=128)
    model: str | None = Field(default=None, max_length=128)
    memory_mib: int | None = Field(default=None, alias="memoryMiB", ge=0)
    numa: int | None = Field(default=None, ge=0, le=4096)
    """NUMA node of the GPU's PCI device; ``None`` when unknown."""
    clique: str | None = Field(default=None, max_length=128)
    """The GPU's NVLink clique, ``<ClusterUUID>.<CliqueID>`` as NVML's GPU fabric info gives it
    (the form of the node label ``nvidia.com/gpu.clique``); ``None`` when the GPU is on no
    NVLink fabric, its fabric registration is not complete, or it is unknown. The NVIDIA DRA
    driver publishes no per-device clique, so this annotation is where a node's GPUs are seen
    to disagree."""


class GpuTopology(BaseModel):
    """Value of the ``gpusched.io/gpu-topology`` annotation.

    ``links[i][j]`` is the ``nvidia-smi topo -m`` code between GPU i and GPU j (``X`` on the
    diagonal). GPUs are listed by index 0..n-1 with no gaps.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpus: tuple[GpuInfo, ...] = Field(max_length=MAX_GPUS_PER_NODE)
    links: tuple[tuple[str, ...], ...]

    @model_validator(mode="after")
    def _check_matrix(self) -> GpuTopology:
        count = len(self.gpus)
        if [gpu.index for gpu in self.gpus] != list(range(count)):
            raise ValueError("gpus must be listed by index 0..n-1 without gaps")
        if len(self.links) != count or any(len(row) != count for row in self.links):
            raise ValueError(f"links must be a {count}x{count} matrix")
        for i, row in enumerate(self.links):
            for j, code in enumerate(row):
                if i == j:
                    if code != "X":
                        raise ValueError(f"links[{i}][{i}] must be 'X', got {code!r}")
                    continue
                try:
                    parse_link(code)
                except ValueError as err:
                    raise ValueError(f"links[{i}][{j}]: {err}") from None
                if self.links[j][i] != code:
                    raise ValueError(f"links is not symmetric at [{i}][{j}]")
        return self

    def link(self, i: int, j: int) -> Link:
        return parse_link(self.links[i][j])

    def to_annotation(self) -> str:
        """Compact JSON, stable key order, for the node annotation."""
        return json.dumps(self.model_dump(by_alias=True, exclude_none=True), separators=(",", ":"))


def parse_topology_annotation(node: str, value: str) -> GpuTopology:
    """Parses the annotation of node ``node``; raises `InvalidObjectError` naming the field."""
    obj = f"Node {node}"
    field = f"metadata.annotations[{TOPOLOGY_ANNOTATION}]"
    if len(value.encode()) > MAX_ANNOTATION_BYTES:
        raise InvalidObjectError(obj, field, f"larger than {MAX_ANNOTATION_BYTES} bytes")
    try:
        raw = json.loads(value)
    except json.JSONDecodeError as err:
        raise InvalidObjectError(obj, field, f"not JSON: {err.msg} at char {err.pos}") from None
    try:
        return GpuTopology.model_validate(raw)
    except ValidationError as err:
        raise from_validation_error(
            obj, err, prefix=("metadata", "annotations", TOPOLOGY_ANNOTATION)
        ) from None

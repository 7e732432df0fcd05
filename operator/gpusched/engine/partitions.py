"""Fabric Manager partitions, as the NVIDIA DRA driver publishes them under its alpha
``FabricManagerPartitioning`` gate (HGX systems whose NVSwitches Fabric Manager partitions).

Each GPU device then carries ``gpuModuleID`` and, per partition size N the machine offers, an
int attribute ``partitionN``: the id of the N-GPU partition the GPU belongs to. At Prepare the
driver activates the partition formed by the GPUs of each claim and fails unless that set is
exactly one partition; so a claim's GPUs on such a node must be all the GPUs whose
``partitionN`` (N: the claim's GPU count) has one value, or the pod binds and never starts.
gpusched gives a pod one GPU set per node, so on a partitioned node a pod's GPUs must be one
partition, from one claim.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpusched.api.dra import Device

PARTITION_ATTRIBUTE = re.compile(r"partition([1-9][0-9]*)")
"""``partition<size>``: the id of the GPU's partition of that many GPUs."""


@dataclass(frozen=True, slots=True)
class Partitions:
    """A node's Fabric Manager partitions by size: bit masks over GPU indices (bit i: GPU i)."""

    by_size: Mapping[int, tuple[int, ...]]

    def of_size(self, size: int) -> tuple[int, ...]:
        return self.by_size.get(size, ())

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(sorted(self.by_size))


@dataclass(frozen=True, slots=True)
class PartitionRefusal:
    """Why a partitioned node cannot take a pod's GPUs at all (a decision, as data; words:
    `gpusched.engine.wording.fm_partition`)."""

    gpus: int
    sizes: tuple[int, ...]
    """The partition sizes the node offers."""
    claims: int = 1
    """The pod's claims asking for GPUs (more than one cannot be one partition each here)."""


def node_partitions(devices: Iterable[tuple[int, Device]], driver: str) -> Partitions | None:
    """The partitions that ``devices`` (index, device) publish; None for a node whose devices
    publish none (not partitioned: any set goes). A partition is counted only when as many
    devices name it as its size says (one with a device missing cannot be prepared)."""
    members: dict[tuple[int, int], int] = {}
    for index, device in devices:
        for name, attribute in device.attributes.items():
            match = PARTITION_ATTRIBUTE.fullmatch(name.removeprefix(f"{driver}/"))
            value = attribute.int_value
            if match is None or value is None:
                continue
            key = (int(match.group(1)), value)
            members[key] = members.get(key, 0) | (1 << index)
    if not members:
        return None
    by_size: dict[int, list[int]] = {}
    for (size, _), mask in sorted(members.items()):
        if mask.bit_count() == size:
            by_size.setdefault(size, []).append(mask)
    return Partitions({size: tuple(masks) for size, masks in by_size.items()})


def refusal(partitions: Partitions | None, gpus: int, claims: int) -> PartitionRefusal | None:
    """Why no GPU set of a pod asking ``gpus`` GPUs through ``claims`` claims can be one
    partition of the node; None when some can (or the node is not partitioned)."""
    if partitions is None or gpus == 0:
        return None
    if claims > 1 or not partitions.of_size(gpus):
        return PartitionRefusal(gpus, partitions.sizes, claims)
    return None


def free_partitions(partitions: Partitions | None, gpus: int, free_mask: int) -> tuple[int, ...]:
    """The partitions of ``gpus`` GPUs all free in ``free_mask``."""
    if partitions is None:
        return ()
    return tuple(m for m in partitions.of_size(gpus) if m & free_mask == m)

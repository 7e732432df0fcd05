"""Devices several claims share by capacity (DRA consumable capacity, the NVIDIA driver's
ConsumableShares gate): a device with ``allowMultipleAllocations`` publishes its ``memory``
capacity with a ``requestPolicy``; each claim allocated on it consumes some of that memory
(its request, or the policy's default when it names none, rounded up to the policy's step),
recorded in the allocation's ``consumedCapacity``, until the device is full.

The engine counts a node's shared memory as one resource (`SHARE_RESOURCE`, bytes): its
shared devices' capacity, less what allocated claims, claims being written and pods placed in
the same decision consume. A claim takes its memory from one device: the device is chosen
first-fit when the claim is written (`pick`), against the same ledger; should no single device
have room although the node's total does (memory spread over several devices), the write is
refused with the reason and the pod is decided afresh.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpusched.api.dra import Device, DeviceCapacity
from gpusched.api.quantity import parse_bytes
from gpusched.engine import wording

SHARE_RESOURCE = "gpu.nvidia.com/shared-memory"
"""The engine's count of a node's memory on shared devices, in bytes."""
MEMORY = "memory"
"""The capacity claims consume of a shared NVIDIA device."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SharedDevice:
    """One device with ``allowMultipleAllocations`` and its ``memory`` capacity policy."""

    pool: str
    device: str
    spec: Device
    capacity: int
    """Its ``memory`` capacity, bytes."""
    default: int
    """What a request naming no memory consumes (the policy's default, else all of it)."""
    low: int = 0
    high: int | None = None
    step: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareProblem:
    """Why a shared device cannot give a claim its memory (engine data; `wording` says it)."""

    device: str
    wanted: int
    free: int
    outside: bool = False
    """The request is outside the device's ``requestPolicy`` range."""


def shared_device(pool: str, device: Device) -> SharedDevice | str:
    """The device as shared by capacity, or what is wrong with its ``memory`` capacity."""
    found: DeviceCapacity | None = device.capacity.get(MEMORY)
    if found is None:
        return wording.shared_without_memory(device.name)
    try:
        capacity = parse_bytes(found.value)
        policy = found.request_policy or {}
        if "validValues" in policy:
            return wording.valid_values_unsupported(device.name)
        default = parse_bytes(policy["default"]) if "default" in policy else capacity
        valid = policy.get("validRange") or {}
        low = parse_bytes(valid["min"]) if "min" in valid else 0
        high = parse_bytes(valid["max"]) if "max" in valid else None
        step = parse_bytes(valid["step"]) if "step" in valid else 0
    except (ValueError, TypeError, KeyError) as error:
        return wording.shared_memory_unreadable(device.name, error)
    return SharedDevice(
        pool=pool,
        device=device.name,
        spec=device,
        capacity=capacity,
        default=default,
        low=low,
        high=high,
        step=step,
    )


def consumed(device: SharedDevice, wanted: int | None) -> int | None:
    """What a request of ``wanted`` bytes (None: it names none) consumes of ``device``: the
    default, or the request raised to the range's minimum and rounded up to its step; None
    when the policy does not allow it or the device has not that much."""
    if wanted is None:
        return device.default
    amount = max(wanted, device.low)
    if device.step > 0:
        over = (amount - device.low) % device.step
        amount += (device.step - over) if over else 0
    if amount > device.capacity or (device.high is not None and amount > device.high):
        return None
    return amount


def amounts(devices: Iterable[SharedDevice], wanted: int | None) -> set[int | None]:
    """What the request consumes on each of ``devices`` (None where one does not allow it):
    the engine counts one amount per request, before it knows the node."""
    return {consumed(d, wanted) for d in devices}


def stranded(
    devices: Iterable[SharedDevice], used: Mapping[tuple[str, str], int], sizes: set[int]
) -> int:
    """The memory of ``devices`` no pending request can use, given what ``used`` consumes of
    each and the ``sizes`` (bytes) pending requests consume: where they are all one size, what
    is left of each device beyond a whole number of them; else what is left of a device too
    small for the smallest. Counted as held, it keeps the node's total from promising memory
    spread over several devices that no one device has (exact when the sizes are one)."""
    if not sizes or 0 in sizes:
        return 0
    smallest = min(sizes)
    lost = 0
    for device in devices:
        left = max(0, device.capacity - used.get((device.pool, device.device), 0))
        if len(sizes) == 1:
            lost += left % smallest
        elif left < smallest:
            lost += left
    return lost


def pick(
    devices: Iterable[SharedDevice], wanted: int | None, used: Mapping[tuple[str, str], int]
) -> tuple[SharedDevice, int] | ShareProblem:
    """The first device (by name) with room for the request, given what ``used`` (pool,
    device → bytes) consumes of each; else the problem of the device closest to fitting."""
    best: ShareProblem | None = None
    for device in sorted(devices, key=lambda d: d.device):
        amount = consumed(device, wanted)
        free = device.capacity - used.get((device.pool, device.device), 0)
        if amount is not None and amount <= free:
            return device, amount
        problem = ShareProblem(
            device=device.device,
            wanted=amount if amount is not None else wanted or 0,
            free=free,
            outside=amount is None,
        )
        if best is None or problem.free > best.free:
            best = problem
    return best or ShareProblem(device="", wanted=wanted or 0, free=0)

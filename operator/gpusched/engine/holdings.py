"""What DRA claims hold, as the engine's bound pods: allocated claims, claims being written,
and GPUs a node has but does not publish as devices.

None of these is a pod: each carries `PodRequest.reserved_for`, the pods whose eviction frees
it (a claim's reservedFor pods: kube-controller-manager deallocates the claim, or deletes one
made from a template, once they are all gone), so that preemption evicts those pods for its
devices and never counts on evicting the holding itself."""

from __future__ import annotations

from collections.abc import Mapping

from gpusched.api.dra import ResourceClaim
from gpusched.api.quantity import parse_bytes
from gpusched.engine import wording
from gpusched.engine.devices import (
    CHANNEL_RESOURCE,
    COMPUTE_DOMAIN_DRIVER,
    NVIDIA_DRIVER,
    NodeDevices,
)
from gpusched.engine.request import PodRequest
from gpusched.engine.shares import MEMORY, SHARE_RESOURCE, SharedDevice
from gpusched.engine.snapshot import BoundPod

Busy = tuple[str, tuple[str, ...]] | tuple[str, tuple[str, ...], int]
"""A claim being written: its pool and devices, and (shared devices) the bytes of memory it
consumes."""


class ClaimHoldings:
    """Turns holdings into `BoundPod`s, keeping each alive while its claim is unchanged (the
    snapshot cache tells unchanged pods by identity)."""

    def __init__(self) -> None:
        self._holdings: dict[str, tuple[object, BoundPod]] = {}

    def claims(
        self,
        claims: Mapping[str, ResourceClaim],
        inventory: Mapping[str, NodeDevices],
        busy: Mapping[str, Busy],
    ) -> list[BoundPod]:
        """Every claim holding NVIDIA devices: allocated ones, whether their pods still run
        or not (kube-controller-manager frees them, not we), and those being written now."""
        held: list[BoundPod] = []
        seen: set[str] = set()
        for key, claim in claims.items():
            allocation = claim.status.allocation
            if allocation is None:
                continue
            devices = tuple(
                sorted(r.device for r in allocation.devices.results if r.driver == NVIDIA_DRIVER)
            )
            pools = {r.pool for r in allocation.devices.results if r.driver == NVIDIA_DRIVER}
            channel = _channel_holding(key, claim, inventory)
            if channel is not None:
                held.append(channel)
                seen.add(key)
                continue
            share = _share_holding(key, claim, inventory)
            if share is not None:
                held.append(share)
                seen.add(key)
                continue
            if devices and len(pools) == 1:
                owners = tuple(
                    f"{claim.metadata.namespace}/{r.name}"
                    for r in claim.status.reserved_for
                    if r.resource == "pods" and not r.api_group
                )
                holding = self._holding(key, pools.pop(), devices, inventory, claim, owners)
                if holding is not None:
                    held.append(holding)
                    seen.add(key)
        for key, entry in busy.items():
            node, devices = entry[0], entry[1]
            consumed = entry[2] if len(entry) > 2 else 0
            if consumed and key not in seen:  # memory of a shared device, being written
                held.append(_busy_share(key, node, consumed, inventory))
                continue
            channel = _busy_channel(key, node, devices, inventory)
            if channel is not None and key not in seen:
                held.append(channel)  # a channel claim being written: its node's channel
                continue
            if key not in seen:
                # Being written for a pod not bound yet: no eviction frees it.
                marker = ("busy", node, devices)
                holding = self._holding(key, node, devices, inventory, marker, ())
                if holding is not None:
                    held.append(holding)
        return held

    def _holding(
        self,
        key: str,
        pool: str,
        devices: tuple[str, ...],
        inventory: Mapping[str, NodeDevices],
        version: object,
        owners: tuple[str, ...],
    ) -> BoundPod | None:
        """``owners``: the pods whose eviction frees it (`PodRequest.reserved_for`)."""
        node = _pool_node(pool, inventory)
        if node is None:
            return None
        indices = tuple(
            sorted(g.index for d in devices if (g := node.by_name(pool, d)) is not None)
        )
        if not indices:
            return None
        marker = (version, indices)
        hit = self._holdings.get(key)
        if hit is not None and hit[0] == marker:
            return hit[1]
        request = PodRequest(
            key=claim_holding(key), resources={}, gpus=len(indices), reserved_for=owners
        )
        holding = BoundPod(request, node.node, indices)
        self._holdings[key] = (marker, holding)
        return holding

    def unusable(self, devices: NodeDevices) -> BoundPod:
        key = f"unusable/{devices.node}"
        marker = (devices.unusable,)
        hit = self._holdings.get(key)
        if hit is not None and hit[0] == marker:
            return hit[1]
        request = PodRequest(
            key=wording.unpublished_gpus(NVIDIA_DRIVER, devices.node),
            resources={},
            gpus=len(devices.unusable),
            reserved_for=(),
        )
        holding = BoundPod(request, devices.node, devices.unusable)
        self._holdings[key] = (marker, holding)
        return holding


def _channel_holding(
    key: str, claim: ResourceClaim, inventory: Mapping[str, NodeDevices]
) -> BoundPod | None:
    """What an allocated IMEX channel claim holds: its node's channel (`CHANNEL_RESOURCE`),
    until kube-controller-manager deallocates it."""
    allocation = claim.status.allocation
    results = allocation.devices.results if allocation is not None else ()
    pools = {r.pool for r in results if r.driver == COMPUTE_DOMAIN_DRIVER}
    if len(pools) != 1:
        return None
    pool = pools.pop()
    node = next((d for d in inventory.values() if any(p == pool for p, _ in d.channels)), None)
    if node is None:
        return None
    owners = tuple(
        f"{claim.metadata.namespace}/{r.name}"
        for r in claim.status.reserved_for
        if r.resource == "pods" and not r.api_group
    )
    request = PodRequest(
        key=claim_holding(key), resources={CHANNEL_RESOURCE: 1}, reserved_for=owners
    )
    return BoundPod(request, node.node, ())


def share_used(
    claims: Mapping[str, ResourceClaim],
    inventory: Mapping[str, NodeDevices],
    busy: Mapping[str, Busy],
) -> dict[tuple[str, str], int]:
    """Bytes consumed of each shared (pool, device): by allocated claims (their
    ``consumedCapacity``, else the device's default) and by claims being written."""
    used: dict[tuple[str, str], int] = {}
    for claim in claims.values():
        allocation = claim.status.allocation
        for result in allocation.devices.results if allocation is not None else ():
            found = _share_node(result.pool, result.device, inventory)
            if result.driver != NVIDIA_DRIVER or found is None:
                continue
            memory = (result.consumed_capacity or {}).get(MEMORY)
            try:
                amount = parse_bytes(memory) if memory is not None else found[1].default
            except ValueError:
                amount = found[1].default
            key = (result.pool, result.device)
            used[key] = used.get(key, 0) + amount
    for entry in busy.values():
        if len(entry) > 2 and len(entry[1]) == 1:  # one shared device being written
            key = (entry[0], entry[1][0])
            used[key] = used.get(key, 0) + entry[2]
    return used


def stranded_holding(node: NodeDevices, lost: int) -> BoundPod:
    """Memory of ``node``'s shared devices no pending request can use (`shares.stranded`)."""
    request = PodRequest(
        key=wording.stranded_memory(node.node),
        resources={SHARE_RESOURCE: lost},
        reserved_for=(),
    )
    return BoundPod(request, node.node, ())


def _share_holding(
    key: str, claim: ResourceClaim, inventory: Mapping[str, NodeDevices]
) -> BoundPod | None:
    """What an allocated claim holds of devices shared by capacity (only such devices): the
    memory its ``consumedCapacity`` records (the device's default where it records none)."""
    allocation = claim.status.allocation
    results = (
        [r for r in allocation.devices.results if r.driver == NVIDIA_DRIVER] if allocation else []
    )
    if not results:
        return None
    total, node = 0, None
    for result in results:
        found = _share_node(result.pool, result.device, inventory)
        if found is None:
            return None
        node, share = found
        memory = (result.consumed_capacity or {}).get(MEMORY)
        try:
            total += parse_bytes(memory) if memory is not None else share.default
        except ValueError:
            total += share.default
    assert node is not None
    owners = tuple(
        f"{claim.metadata.namespace}/{r.name}"
        for r in claim.status.reserved_for
        if r.resource == "pods" and not r.api_group
    )
    request = PodRequest(
        key=claim_holding(key), resources={SHARE_RESOURCE: total}, reserved_for=owners
    )
    return BoundPod(request, node.node, ())


def _busy_share(
    key: str, pool: str, consumed: int, inventory: Mapping[str, NodeDevices]
) -> BoundPod:
    """The memory a claim being written takes of a shared device (no eviction frees it)."""
    node = next((d.node for d in inventory.values() if any(s.pool == pool for s in d.shares)), "")
    request = PodRequest(
        key=claim_holding(key), resources={SHARE_RESOURCE: consumed}, reserved_for=()
    )
    return BoundPod(request, node, ())


def _share_node(
    pool: str, device: str, inventory: Mapping[str, NodeDevices]
) -> tuple[NodeDevices, SharedDevice] | None:
    for devices in inventory.values():
        for share in devices.shares:
            if share.pool == pool and share.device == device:
                return devices, share
    return None


def _busy_channel(
    key: str, pool: str, devices: tuple[str, ...], inventory: Mapping[str, NodeDevices]
) -> BoundPod | None:
    """The channel a claim being written takes (no eviction frees it)."""
    for node in inventory.values():
        if any(p == pool and d.name in devices for p, d in node.channels):
            request = PodRequest(
                key=claim_holding(key), resources={CHANNEL_RESOURCE: 1}, reserved_for=()
            )
            return BoundPod(request, node.node, ())
    return None


def _pool_node(pool: str, inventory: Mapping[str, NodeDevices]) -> NodeDevices | None:
    for devices in inventory.values():
        if any(g.pool == pool for g in devices.devices.values()):
            return devices
    return None


CLAIM_HOLDING_PREFIX = "ResourceClaim "


def claim_holding(key: str) -> str:
    """The snapshot key of what claim ``key`` (``namespace/name``) holds."""
    return CLAIM_HOLDING_PREFIX + key


def claim_of_holding(holding: str) -> str | None:
    """The claim (``namespace/name``) a snapshot key names, None for a pod's key."""
    return (
        holding.removeprefix(CLAIM_HOLDING_PREFIX)
        if holding.startswith(CLAIM_HOLDING_PREFIX)
        else None
    )

"""GPUs published through Dynamic Resource Allocation, and what a claim asks of them.

Pure translations, so that the engine keeps placing GPUs by node-local index:

- `node_pools`: a node's ResourceSlices as pools of any driver, read as kube-scheduler reads
  them (the newest generation only, and only once all its slices are published);
- `node_devices`: a node's ResourceSlices of the NVIDIA DRA driver joined with its
  ``gpusched.io/gpu-topology`` annotation by GPU UUID. The driver publishes no NVLink data,
  the annotation does; the UUID is what both name the same GPU by. A device that cannot be
  joined is reported and never allocated: guessing which GPU it is would put the pod on
  other GPUs than the ones we scored.
- `claim_demand`: a ResourceClaim's requests as a GPU count plus the checks every device
  must pass. Only the selectors we can evaluate exactly are accepted; anything else makes the
  claim unschedulable with a reason, never silently ignored.

Devices of other drivers are left to whoever allocates them: gpusched does not guess what
they are, and a claim asking for them gets a reason saying so.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpusched.api.dra import (
    Device,
    DeviceClass,
    DeviceSelector,
    ExactDeviceRequest,
    ResourceClaim,
    ResourceSlice,
)
from gpusched.api.quantity import parse_bytes
from gpusched.api.topology import GpuTopology
from gpusched.engine import wording
from gpusched.engine.partitions import Partitions, node_partitions
from gpusched.engine.shares import MEMORY, SharedDevice, shared_device

NVIDIA_DRIVER = "gpu.nvidia.com"
"""The NVIDIA DRA driver: one ResourceSlice pool per node, devices ``gpu-<minor>``."""
COMPUTE_DOMAIN_DRIVER = "compute-domain.nvidia.com"
"""The NVIDIA DRA driver's ComputeDomain half: per node a pool of IMEX channel devices
(``type: channel``, ``id``); a ComputeDomain's workload pods claim ``channel-0`` through the
DeviceClass ``compute-domain-default-channel.nvidia.com``."""
CHANNEL_RESOURCE = f"{COMPUTE_DOMAIN_DRIVER}/channel"
"""The engine's count of a node's default IMEX channel (1 where the node publishes it): the
driver prepares it for one pod, of one ComputeDomain, at a time, so a second channel pod on
a node would bind and never start."""
CLIQUE_LABEL = "nvidia.com/gpu.clique"
"""The node label of its NVLink clique, ``<ClusterUUID>.<CliqueID>`` (all of a node's GPUs are
in one clique; the ComputeDomain plugin refuses to start when they are not)."""
GPU_DEVICE_NAME = re.compile(r"gpu-[0-9]+")
"""Whole-GPU devices; MIG devices (``gpu-0-mig-…``) are not whole GPUs and are left alone."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuDevice:
    """One GPU as both sides name it: our index, the driver's pool and device name."""

    index: int
    pool: str
    device: str
    uuid: str
    spec: Device
    driver: str = NVIDIA_DRIVER


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeDevices:
    """A node's DRA GPUs, by topology index. ``gpu_count`` is the annotation's GPU count:
    indices without a device here exist but cannot be allocated (see ``problems``)."""

    node: str
    gpu_count: int
    devices: Mapping[int, GpuDevice]
    problems: tuple[str, ...] = ()
    channels: tuple[tuple[str, Device], ...] = ()
    """The node's IMEX channel devices (`COMPUTE_DOMAIN_DRIVER`), with their pool."""
    partitions: Partitions | None = None
    """Its Fabric Manager partitions (`gpusched.engine.partitions`); None: not partitioned."""
    cliques: tuple[str, ...] = ()
    """The distinct NVLink cliques of its GPUs, sorted, as the node agent reads them from NVML
    (``clique`` of each GPU in the ``gpusched.io/gpu-topology`` annotation): the NVIDIA DRA
    driver publishes no per-device clique, only GPU Feature Discovery's node label. A node
    whose GPUs name different cliques, or one other than its label, is in no clique domain
    (`mixed`); the driver's ComputeDomain plugin refuses to start on such a node."""
    shared: tuple[str, ...] = ()
    """Its GPU devices with ``allowMultipleAllocations`` (the driver's ConsumableShares):
    claims share them by capacity (`shares`), so they are never counted as free whole GPUs
    (nor twice for their claims). Not a `problem`: nothing is wrong with the node's topology."""
    shares: tuple[SharedDevice, ...] = ()
    """Those shared devices by capacity (`gpusched.engine.shares`), for claims that ask for
    some of a device's memory."""
    updating: bool = False
    """Its pool is half-way through an update (not all slices of its newest generation
    published): nothing is allocated there meanwhile, and nothing is wrong either."""

    @property
    def explained(self) -> str:
        """Why some of its GPUs are not placed by gpusched as whole GPUs: its problems and
        its shared devices (placed by capacity, `gpusched.engine.shares`)."""
        return wording.device_notes(self.problems, self.shared)

    def mixed(self, label: str | None) -> tuple[str, ...]:
        """The cliques its GPUs and its ``nvidia.com/gpu.clique`` label (``label``) name,
        when they are not one (else ()): such a node is in no clique domain."""
        named = set(self.cliques) | ({label} if label and self.cliques else set())
        return tuple(sorted(named)) if len(named) > 1 else ()

    def channel(self, checks: Iterable[Check]) -> tuple[str, str] | None:
        """The (pool, device) of the channel passing every check, if the node has one."""
        for pool, device in self.channels:
            if all(c.passes(COMPUTE_DOMAIN_DRIVER, device) for c in checks):
                return pool, device.name
        return None

    def by_name(self, pool: str, device: str) -> GpuDevice | None:
        for gpu in self.devices.values():
            if gpu.pool == pool and gpu.device == device:
                return gpu
        return None

    @property
    def unusable(self) -> tuple[int, ...]:
        return tuple(i for i in range(self.gpu_count) if i not in self.devices)

    def failing(self, checks: Iterable[Check]) -> Check | None:
        """The first of ``checks`` some device of the node fails (a pod's claims are placed
        only where every device passes: the engine picks GPUs by topology, not by device);
        None when every device passes them all."""
        for check in sorted(set(checks)):
            for gpu in self.devices.values():
                if not check.passes(gpu.driver, gpu.spec):
                    return check
            for share in self.shares:
                if not check.passes(NVIDIA_DRIVER, share.spec):
                    return check
        return None

    @property
    def problem(self) -> str:
        """Why the node's devices cannot all be used ('' when they can)."""
        return wording.device_notes(self.problems)


@dataclass(frozen=True, slots=True)
class Pool:
    """One driver's pool of devices on a node, as kube-scheduler reads it: only the slices of
    the newest generation count, and the pool is used only once all ``resourceSliceCount``
    of them are published (a pool half-way through an update is neither old nor new)."""

    driver: str
    name: str
    devices: tuple[Device, ...]
    """Every device of the pool's current slices, slices by name."""
    missing: int = 0
    """Slices of the newest generation not published yet (0: the pool is complete)."""
    expected: int = 1

    @property
    def complete(self) -> bool:
        return self.missing == 0


def node_pools(slices: Iterable[ResourceSlice], node: str) -> tuple[Pool, ...]:
    """The pools of every driver that ``node``'s ResourceSlices publish, by driver and name."""
    by_pool: dict[tuple[str, str], list[ResourceSlice]] = {}
    for item in slices:
        if item.spec.node_name == node:
            by_pool.setdefault((item.spec.driver, item.spec.pool.name), []).append(item)
    pools: list[Pool] = []
    for (driver, name), found in sorted(by_pool.items()):
        newest = max(s.spec.pool.generation for s in found)
        current = sorted(
            (s for s in found if s.spec.pool.generation == newest), key=lambda s: s.metadata.name
        )
        expected = max(s.spec.pool.resource_slice_count for s in current)
        devices = tuple(d for s in current for d in s.spec.devices)
        pools.append(Pool(driver, name, devices, max(0, expected - len(current)), expected))
    return tuple(pools)


def current_devices(slices: Iterable[ResourceSlice], node: str) -> tuple[list[Device], str, str]:
    """The NVIDIA devices the node's pool publishes now (only the newest pool generation
    counts, as kube-scheduler reads it), its pool name, and a problem ('' when none)."""
    pools = [p for p in node_pools(slices, node) if p.driver == NVIDIA_DRIVER]
    if not pools:
        return [], "", ""
    pool = pools[0]
    if len(pools) > 1:
        names = [p.name for p in pools]
        return [], pool.name, wording.many_pools(NVIDIA_DRIVER, names)
    if not pool.complete:
        published = pool.expected - pool.missing
        problem = wording.pool_updating(NVIDIA_DRIVER, pool.name, published, pool.expected)
        return [], pool.name, problem
    return list(pool.devices), pool.name, ""


def node_devices(
    node: str,
    slices: Iterable[ResourceSlice],
    topology: GpuTopology | None,
    topology_error: str | None = None,
) -> NodeDevices | None:
    """The node's DRA GPUs joined with its topology; None when the node publishes none."""
    slices = list(slices)
    devices, pool, incomplete = current_devices(slices, node)
    if not devices and not incomplete:
        return None
    channels = tuple(
        (p.name, d)
        for p in node_pools(slices, node)
        if p.driver == COMPUTE_DOMAIN_DRIVER and p.complete
        for d in p.devices
    )
    if incomplete:
        count = len(topology.gpus) if topology else 0
        return NodeDevices(
            node=node,
            gpu_count=count,
            devices={},
            problems=(incomplete,),
            channels=channels,
            updating=True,
        )
    if topology is None:
        why = topology_error or wording.NO_TOPOLOGY
        message = wording.devices_unmatched(NVIDIA_DRIVER, why)
        return NodeDevices(
            node=node, gpu_count=0, devices={}, problems=(message,), channels=channels
        )
    joined = _join(node, pool, devices, topology)
    partitions = node_partitions(
        ((g.index, g.spec) for g in joined.devices.values()), NVIDIA_DRIVER
    )
    cliques = gpu_cliques(topology, joined.devices)
    return dataclasses.replace(joined, channels=channels, partitions=partitions, cliques=cliques)


def gpu_cliques(topology: GpuTopology, devices: Iterable[int]) -> tuple[str, ...]:
    """The distinct NVLink cliques the node agent read for the GPUs ``devices`` (indices)."""
    clique_of = {g.index: g.clique for g in topology.gpus if g.clique}
    return tuple(sorted({clique_of[i] for i in devices if i in clique_of}))


def _join(node: str, pool: str, devices: list[Device], topology: GpuTopology) -> NodeDevices:
    index_of = {g.uuid: g.index for g in topology.gpus if g.uuid}
    joined: dict[int, GpuDevice] = {}
    problems: list[str] = []
    shared: set[int | None] = set()
    shared_names: list[str] = []
    shares: list[SharedDevice] = []
    for device in sorted(devices, key=lambda d: d.name):
        if not GPU_DEVICE_NAME.fullmatch(device.name):
            continue
        uuid = device.attribute(NVIDIA_DRIVER, "uuid")
        index = index_of.get(uuid) if isinstance(uuid, str) else None
        if device.allow_multiple_allocations:
            # Shared by the claims that consume its capacity: never a whole free GPU here,
            # so never counted as one, nor twice by the several claims that share it.
            shared.add(index)
            shared_names.append(device.name)
            found = shared_device(pool, device)
            if isinstance(found, str):
                problems.append(found)
            else:
                shares.append(found)
        elif index is None:
            problems.append(wording.device_without_gpu(device.name, uuid))
        elif index in joined:
            problems.append(wording.shared_uuid(joined[index].device, device.name, uuid))
        else:
            joined[index] = GpuDevice(
                index=index, pool=pool, device=device.name, uuid=str(uuid), spec=device
            )
    for gpu in topology.gpus:
        if gpu.index not in joined and gpu.index not in shared:
            problems.append(wording.gpu_without_device(gpu.index, gpu.uuid, NVIDIA_DRIVER))
    return NodeDevices(
        node=node,
        gpu_count=len(topology.gpus),
        devices=joined,
        problems=tuple(problems),
        shared=tuple(shared_names),
        shares=tuple(shares),
    )


# ----- what a claim asks for -------------------------------------------------------------------


@dataclass(frozen=True, slots=True, order=True)
class Check:
    """One condition on a device: ``attribute`` of ``domain`` equals ``value``; the empty
    attribute name means the device's driver must be ``value``."""

    domain: str
    attribute: str
    value: str | int | bool

    def passes(self, driver: str, device: Device) -> bool:
        if not self.attribute:
            return driver == self.value
        if self.domain == driver:
            found = device.attribute(driver, self.attribute)
        else:
            attribute = device.attributes.get(f"{self.domain}/{self.attribute}")
            found = attribute.value if attribute is not None else None
        return found == self.value

    def __str__(self) -> str:
        return wording.cel_equality(self.domain, self.attribute, self.value)


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestDemand:
    """One request of one claim: ``count`` GPUs, each passing every check."""

    claim: str
    request: str
    count: int
    checks: tuple[Check, ...]
    device_class: str
    channel: bool = False
    """An IMEX channel (`COMPUTE_DOMAIN_DRIVER`), not GPUs: ``count`` is 0, ``checks`` pick
    the channel device on the node."""
    domain: str = ""
    """For a channel: the uid of its ComputeDomain (the ``domainID`` of the claim's
    ``ComputeDomainChannelConfig``), '' when the claim names none."""
    share: bool = False
    """Some memory of one shared device (`gpusched.engine.shares`), not whole GPUs: ``count``
    is 0 and ``memory`` the bytes it names (None: the device's default)."""
    memory: int | None = None


class ClaimError(Exception):
    """A claim gpusched cannot allocate exactly; the message says why, for people."""


_STRING = r"""(?:"([^"\\]*)"|'([^'\\]*)')"""
_DRIVER = re.compile(rf"device\.driver\s*==\s*{_STRING}")
_ATTRIBUTE = re.compile(
    rf"""device\.attributes\[{_STRING}\](?:\.([A-Za-z_][A-Za-z0-9_]*)|\[{_STRING}\])"""
    rf"""\s*==\s*(?:{_STRING}|(-?[0-9]+)|(true|false))"""
)


def parse_selector(expression: str) -> tuple[Check, ...]:
    """The checks of a CEL selector made of ``&&``-joined equalities on ``device.driver`` or
    ``device.attributes[domain].name``; raises `ClaimError` for any other CEL (evaluating
    a subset of CEL wrongly would allocate devices the claim did not ask for)."""
    checks: list[Check] = []
    for clause in _clauses(expression):
        checks.append(_clause(clause, expression))
    return tuple(checks)


def _clauses(expression: str) -> list[str]:
    text = expression.strip()
    while text.startswith("(") and text.endswith(")") and "(" not in text[1:-1]:
        text = text[1:-1].strip()
    return [part.strip() for part in text.split("&&")]


def _clause(clause: str, expression: str) -> Check:
    driver = _DRIVER.fullmatch(clause)
    if driver is not None:
        return Check(NVIDIA_DRIVER, "", driver.group(1) or driver.group(2) or "")
    match = _ATTRIBUTE.fullmatch(clause)
    if match is None:
        raise ClaimError(wording.cel_beyond(expression, clause))
    domain_a, domain_b, dotted, quoted_a, quoted_b, str_a, str_b, number, boolean = match.groups()
    value: str | int | bool
    if number is not None:
        value = int(number)
    elif boolean is not None:
        value = boolean == "true"
    else:
        value = str_a if str_a is not None else (str_b or "")
    name = dotted or quoted_a or quoted_b or ""
    return Check(domain_a if domain_a is not None else domain_b or "", name, value)


def _selector_checks(selectors: Iterable[DeviceSelector], where: str) -> list[Check]:
    checks: list[Check] = []
    for selector in selectors:
        if selector.cel is None:
            raise ClaimError(wording.selector_not_cel(where))
        checks.extend(parse_selector(selector.cel.expression))
    return checks


def class_checks(device_class: DeviceClass) -> tuple[Check, ...]:
    """The class's checks; raises `ClaimError` unless they pin the NVIDIA driver (another
    driver's devices are allocated by their own claims' scheduler, not guessed at here)."""
    where = wording.device_class_label(device_class.metadata.name)
    checks = _selector_checks(device_class.spec.selectors, where)
    drivers = {c.value for c in checks if not c.attribute} | {
        c.domain for c in checks if c.attribute and c.domain != "resource.kubernetes.io"
    }
    if drivers != {NVIDIA_DRIVER}:
        named = sorted(map(str, drivers))
        raise ClaimError(wording.other_drivers(where, named, NVIDIA_DRIVER))
    return tuple(checks)


COMPUTE_DOMAIN_LABEL = "resource.nvidia.com/computeDomain"
"""The node label the ComputeDomain kubelet plugin sets to the uid of the ComputeDomain it
serves when it prepares a channel; it refuses to prepare one of another ComputeDomain while
the label is there (a node serves one ComputeDomain at a time)."""


def claim_demand(
    claim: ResourceClaim,
    classes: Mapping[str, DeviceClass],
    domains: Mapping[str, tuple[str, str]] | None = None,
) -> tuple[RequestDemand, ...]:
    """Every request of ``claim`` as GPUs to find; raises `ClaimError` naming the field.
    ``domains``: the ComputeDomains seen, by uid: (namespace, name)."""
    where = wording.claim_label(claim.key)
    devices = claim.spec.devices
    if devices.constraints:
        raise ClaimError(wording.constraints_unsupported(where))
    demands: list[RequestDemand] = []
    for request in devices.requests:
        exact = request.exactly
        field = wording.request_label(where, request.name)
        if exact is None:
            raise ClaimError(wording.first_available_unsupported(field))
        if exact.allocation_mode != "ExactCount":
            raise ClaimError(wording.allocation_mode_unsupported(field, exact.allocation_mode))
        if exact.admin_access:
            raise ClaimError(wording.admin_access_unsupported(field))
        device_class = classes.get(exact.device_class_name)
        if device_class is None:
            raise ClaimError(wording.device_class_missing(field, exact.device_class_name))
        channel = _channel_checks(device_class, exact.selectors, field, exact.count)
        if channel is not None:
            domain = _channel_domain(claim, request.name, domains or {})
            demand = RequestDemand(
                claim=claim.key,
                request=request.name,
                count=0,
                checks=channel,
                device_class=exact.device_class_name,
                channel=True,
                domain=domain,
            )
            demands.append(demand)
            continue
        checks = (
            *class_checks(device_class),
            *_selector_checks(exact.selectors, field),
        )
        _whole_gpus_only(checks, field, exact.device_class_name)
        if exact.capacity is not None:
            demands.append(_share_demand(claim.key, request.name, exact, checks, field))
            continue
        demands.append(
            RequestDemand(
                claim=claim.key,
                request=request.name,
                count=exact.count,
                checks=tuple(sorted(set(checks))),
                device_class=exact.device_class_name,
            )
        )
    return tuple(demands)


def _share_demand(
    claim: str, request: str, exact: ExactDeviceRequest, checks: Iterable[Check], field: str
) -> RequestDemand:
    """A request naming ``capacity``: some memory of one shared device."""
    requests = exact.capacity.get("requests") if isinstance(exact.capacity, Mapping) else None
    requests = requests or {}
    if exact.count != 1 or not isinstance(requests, Mapping) or set(requests) - {MEMORY}:
        raise ClaimError(wording.share_unsupported(field, exact.count, sorted(map(str, requests))))
    memory: int | None = None
    if MEMORY in requests:
        try:
            memory = parse_bytes(requests[MEMORY])
        except (ValueError, TypeError) as error:
            raise ClaimError(wording.capacity_unreadable(field, error)) from None
    return RequestDemand(
        claim=claim,
        request=request,
        count=0,
        checks=tuple(sorted(set(checks))),
        device_class=exact.device_class_name,
        share=True,
        memory=memory,
    )


def _channel_domain(
    claim: ResourceClaim, request: str, domains: Mapping[str, tuple[str, str]]
) -> str:
    """The ComputeDomain uid of the claim's channel config for ``request``; raises
    `ClaimError` when that ComputeDomain is in another namespace than the claim (the driver's
    Prepare refuses such a claim: the pod would bind and never start)."""
    for position, config in enumerate(claim.spec.devices.config):
        opaque = config.opaque
        if opaque is None or opaque.driver != COMPUTE_DOMAIN_DRIVER:
            continue
        if config.requests and request not in config.requests:
            continue
        parameters = opaque.parameters if isinstance(opaque.parameters, Mapping) else {}
        domain = str(parameters.get("domainID") or "")
        seen = domains.get(domain)
        if seen is not None and seen[0] != claim.metadata.namespace:
            raise ClaimError(wording.channel_namespace(claim.key, position, *seen))
        return domain
    return ""


def _channel_checks(
    device_class: DeviceClass, selectors: Iterable[DeviceSelector], field: str, count: int
) -> tuple[Check, ...] | None:
    """The checks of a request for an IMEX channel (a class selecting
    `COMPUTE_DOMAIN_DRIVER` devices of type ``channel``); None for any other request."""
    where = wording.device_class_label(device_class.metadata.name)
    checks = [*_selector_checks(device_class.spec.selectors, where)]
    drivers = {c.value for c in checks if not c.attribute} | {
        c.domain for c in checks if c.attribute and c.domain != "resource.kubernetes.io"
    }
    kinds = {c.value for c in checks if c.domain == COMPUTE_DOMAIN_DRIVER and c.attribute == "type"}
    if drivers != {COMPUTE_DOMAIN_DRIVER} or kinds != {"channel"}:
        return None
    if count != 1:
        raise ClaimError(wording.channels_counted(field, count))
    checks.extend(_selector_checks(selectors, field))
    if Check(COMPUTE_DOMAIN_DRIVER, "id", 0) not in checks:
        raise ClaimError(wording.default_channel_only(field))
    return tuple(sorted(set(checks)))


def default_channel(devices: NodeDevices | None) -> int:
    """1 where the node publishes its default IMEX channel (type channel, id 0), else 0."""
    if devices is None:
        return 0
    wanted = (
        Check(COMPUTE_DOMAIN_DRIVER, "type", "channel"),
        Check(COMPUTE_DOMAIN_DRIVER, "id", 0),
    )
    return 1 if devices.channel(wanted) is not None else 0


WHOLE_GPU_TYPE = "gpu"
"""The driver's ``type`` attribute of a whole GPU; MIG slices are ``mig`` (DeviceClass
``mig.nvidia.com``), passthrough ``vfio``, vGPU ``vgpu``."""


def _whole_gpus_only(checks: Iterable[Check], field: str, class_name: str) -> None:
    """Refuses a request for devices of another ``type`` than whole GPUs (MIG slices above
    all) with a reason, rather than let it count as whole GPUs no node would ever pass."""
    kinds = {c.value for c in checks if c.domain == NVIDIA_DRIVER and c.attribute == "type"}
    other = sorted(str(k) for k in kinds if k != WHOLE_GPU_TYPE)
    if other:
        raise ClaimError(
            wording.not_whole_gpus(field, class_name, NVIDIA_DRIVER, other, WHOLE_GPU_TYPE)
        )


def device_passes(checks: Iterable[Check], device: GpuDevice) -> bool:
    return all(check.passes(NVIDIA_DRIVER, device.spec) for check in checks)

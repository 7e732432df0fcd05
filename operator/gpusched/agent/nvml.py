"""GPU topology through NVML (``nvidia-ml-py``), as ``nvidia-smi topo -m`` would print it.

For every pair of GPUs the link code is, in order:

1. ``NV<n>`` when the two GPUs have n NVLinks to each other (an enabled link whose remote PCI
   device is the other GPU);
2. ``NV<n>`` when both reach an NVSwitch (an enabled link whose remote end is a switch) and
   NVML reports NVLink peer-to-peer between them, n being the smaller number of switch links
   (DGX/HGX A100: NV12; H100/H200: NV18);
3. otherwise the PCIe tier of their closest common ancestor: ``PIX`` (same board or one
   bridge), ``PXB``, ``PHB``, ``NODE`` or ``SYS``.

Links to an IBM NPU (POWER9's CPU side of NVLink) are not GPU links. The NUMA node of a GPU is
its PCI device's ``numa_node`` in sysfs (``-1`` there means unknown).
"""

from __future__ import annotations

import importlib
import logging
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpusched.api.topology import GpuInfo, GpuTopology

__all__ = ["SYSFS_PCI_DEVICES", "read_nvml"]

logger = logging.getLogger(__name__)

SYSFS_PCI_DEVICES = Path("/sys/bus/pci/devices")
_MIB = 1024 * 1024
_ANCESTOR_CODES = {
    "NVML_TOPOLOGY_INTERNAL": "PIX",
    "NVML_TOPOLOGY_SINGLE": "PIX",
    "NVML_TOPOLOGY_MULTIPLE": "PXB",
    "NVML_TOPOLOGY_HOSTBRIDGE": "PHB",
    "NVML_TOPOLOGY_NODE": "NODE",
    "NVML_TOPOLOGY_SYSTEM": "SYS",
}


@dataclass(frozen=True)
class _NvLinks:
    peers: Counter[int]
    """GPU index → NVLinks straight to it."""
    switch_links: int
    """NVLinks to an NVSwitch."""


def read_nvml(nvml: Any = None, sysfs: Path = SYSFS_PCI_DEVICES) -> GpuTopology:
    """Reads every GPU and link through NVML; NVML errors propagate (``pynvml.NVMLError``)."""
    nvml = nvml if nvml is not None else importlib.import_module("pynvml")
    nvml.nvmlInit()
    try:
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        buses = [pci_address(nvml.nvmlDeviceGetPciInfo(h).busId) for h in handles]
        gpus = tuple(_gpu(nvml, i, h, buses[i], sysfs) for i, h in enumerate(handles))
        by_bus = {bus: i for i, bus in enumerate(buses)}
        links = [_nvlinks(nvml, h, by_bus) for h in handles]
        matrix = tuple(
            tuple("X" if i == j else _pair(nvml, handles, links, i, j) for j in range(len(handles)))
            for i in range(len(handles))
        )
    finally:
        nvml.nvmlShutdown()
    return GpuTopology(gpus=gpus, links=matrix)


def pci_address(bus_id: str | bytes) -> str:
    """NVML's ``00000000:07:00.0`` as sysfs names it: ``0000:07:00.0``."""
    text = _text(bus_id).strip().lower()
    domain, _, rest = text.partition(":")
    try:
        return f"{int(domain, 16):04x}:{rest}"
    except ValueError:
        return text


def _text(value: str | bytes) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _gpu(nvml: Any, index: int, handle: Any, bus: str, sysfs: Path) -> GpuInfo:
    memory = nvml.nvmlDeviceGetMemoryInfo(handle).total
    return GpuInfo(
        index=index,
        uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
        model=_text(nvml.nvmlDeviceGetName(handle)),
        memory_mib=int(memory) // _MIB,
        numa=numa_node(sysfs, bus),
        clique=fabric_clique(nvml, handle),
    )


def fabric_clique(nvml: Any, handle: Any) -> str | None:
    """``<ClusterUUID>.<CliqueID>`` from the GPU's fabric info, once its registration with the
    NVLink fabric is complete and succeeded; ``None`` on a GPU without a fabric (a driver or
    pynvml too old for the call, NVML_ERROR_NOT_SUPPORTED) or while it registers."""
    errors = (AttributeError, getattr(nvml, "NVMLError", AttributeError))
    try:
        info = nvml.c_nvmlGpuFabricInfo_t()
        nvml.nvmlDeviceGetGpuFabricInfo(handle, info)
    except errors:
        return None
    if info.state != nvml.NVML_GPU_FABRIC_STATE_COMPLETED or info.status != nvml.NVML_SUCCESS:
        return None
    return f"{uuid.UUID(bytes=bytes(info.clusterUuid))}.{int(info.cliqueId)}"


def numa_node(sysfs: Path, bus: str) -> int | None:
    """The PCI device's NUMA node; ``None`` when sysfs says -1 or cannot be read."""
    try:
        node = int((sysfs / bus / "numa_node").read_text().strip())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None


def _nvlinks(nvml: Any, handle: Any, by_bus: dict[str, int]) -> _NvLinks:
    peers: Counter[int] = Counter()
    switch_links = 0
    for link in range(nvml.NVML_NVLINK_MAX_LINKS):
        try:
            if nvml.nvmlDeviceGetNvLinkState(handle, link) != nvml.NVML_FEATURE_ENABLED:
                continue
            remote = pci_address(nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId)
        except nvml.NVMLError:
            continue  # no such link on this GPU (NOT_SUPPORTED, INVALID_ARGUMENT)
        peer = by_bus.get(remote)
        if peer is not None:
            peers[peer] += 1
        elif _remote_type(nvml, handle, link) == nvml.NVML_NVLINK_DEVICE_TYPE_SWITCH:
            switch_links += 1
    return _NvLinks(peers, switch_links)


def _remote_type(nvml: Any, handle: Any, link: int) -> int | None:
    try:
        kind: int = nvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link)
    except (AttributeError, nvml.NVMLError):
        return None
    return kind


def _pair(nvml: Any, handles: list[Any], links: list[_NvLinks], i: int, j: int) -> str:
    direct = max(links[i].peers[j], links[j].peers[i])
    if direct:
        return f"NV{direct}"
    switched = min(links[i].switch_links, links[j].switch_links)
    if switched and _nvlink_p2p(nvml, handles[i], handles[j]):
        return f"NV{switched}"
    return _pcie_code(nvml, handles[i], handles[j], i, j)


def _nvlink_p2p(nvml: Any, a: Any, b: Any) -> bool:
    """NVML's own word on NVLink peer-to-peer; both on switches counts when it cannot say."""
    try:
        status = nvml.nvmlDeviceGetP2PStatus(a, b, nvml.NVML_P2P_CAPS_INDEX_NVLINK)
    except (AttributeError, nvml.NVMLError):
        return True
    return bool(status == nvml.NVML_P2P_STATUS_OK)


def _pcie_code(nvml: Any, a: Any, b: Any, i: int, j: int) -> str:
    try:
        ancestor = nvml.nvmlDeviceGetTopologyCommonAncestor(a, b)
    except nvml.NVMLError as err:
        logger.warning("GPU%d-GPU%d: no common PCIe ancestor (%s): reported as SYS", i, j, err)
        return "SYS"
    for name, code in _ANCESTOR_CODES.items():
        if ancestor == getattr(nvml, name):
            return code
    logger.warning("GPU%d-GPU%d: unknown NVML topology level %r: reported as SYS", i, j, ancestor)
    return "SYS"

"""The node agent reading NVML, against a fake ``pynvml``.

The fake NVML is built from a real ``nvidia-smi topo -m`` capture: NVLink pairs become links
whose remote PCI device is the peer (or an NVSwitch, for switch systems), PCIe codes become
common-ancestor levels. Reading the fake back through `read_nvml` must give the capture's
matrix exactly. The agent running ``nvidia-smi`` and patching its Node are in
tests/integration/test_agent.py (they start a process and a server).
"""

# ruff: noqa: N802, N815  (the fake keeps pynvml's names)
from __future__ import annotations

import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gpusched.agent.nvml import pci_address, read_nvml
from gpusched.agent.service import Source, read_topology
from gpusched.agent.smi import AgentError
from gpusched.api.nvsmi import parse_topo_matrix
from gpusched.api.topology import (
    GpuInfo,
    GpuTopology,
)
from gpusched.cli import main

TOPO = Path(__file__).resolve().parents[2] / "data" / "gpu-topology"

# Values of the real pynvml constants (nvml.h), written out so the fake stands alone.
SINGLE, MULTIPLE, HOSTBRIDGE, NODE, SYSTEM = 10, 20, 30, 40, 50
ANCESTOR = {"PIX": SINGLE, "PXB": MULTIPLE, "PHB": HOSTBRIDGE, "NODE": NODE, "SYS": SYSTEM}
TYPE_GPU, TYPE_NPU, TYPE_SWITCH = 0, 1, 2
MAX_LINKS = 18


class NVMLError(Exception):
    pass


def bus(gpu: int) -> bytes:
    return f"00000000:{0x10 + 0x10 * gpu:02X}:00.0".encode()


@dataclass
class FakeNvml:
    """The subset of pynvml the agent calls, answering from a topology."""

    topology: GpuTopology
    switch: bool = False
    npu_links: int = 0
    has_remote_type: bool = True
    calls: list[str] = field(default_factory=list)

    NVMLError = NVMLError
    NVML_NVLINK_MAX_LINKS = MAX_LINKS
    NVML_FEATURE_ENABLED = 1
    NVML_NVLINK_DEVICE_TYPE_SWITCH = TYPE_SWITCH
    NVML_P2P_CAPS_INDEX_NVLINK = 2
    NVML_P2P_STATUS_OK = 0
    NVML_TOPOLOGY_INTERNAL = 0
    NVML_TOPOLOGY_SINGLE = SINGLE
    NVML_TOPOLOGY_MULTIPLE = MULTIPLE
    NVML_TOPOLOGY_HOSTBRIDGE = HOSTBRIDGE
    NVML_TOPOLOGY_NODE = NODE
    NVML_TOPOLOGY_SYSTEM = SYSTEM

    def __post_init__(self) -> None:
        self.links: list[list[tuple[bytes, int]]] = []
        for i, row in enumerate(self.topology.links):
            mine: list[tuple[bytes, int]] = []
            for j, code in enumerate(row):
                if code.startswith("NV") and not self.switch:
                    mine += [(bus(j), TYPE_GPU)] * int(code[2:])
            if self.switch:
                mine += [(b"00000000:C4:00.0", TYPE_SWITCH)] * int(row[1 - (i > 0)][2:])
            mine += [(b"00000007:00:00.0", TYPE_NPU)] * self.npu_links
            self.links.append(mine)

    def nvmlInit(self) -> None:
        self.calls.append("init")

    def nvmlShutdown(self) -> None:
        self.calls.append("shutdown")

    def nvmlDeviceGetCount(self) -> int:
        return len(self.topology.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetPciInfo(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(busId=bus(handle))

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(total=81920 * 1024 * 1024 + 12345)

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return f"GPU-{handle:08d}"

    def nvmlDeviceGetName(self, handle: int) -> bytes:
        return b"NVIDIA A100-SXM4-80GB"

    def _link(self, handle: int, link: int) -> tuple[bytes, int]:
        if link >= len(self.links[handle]):
            raise NVMLError("Not Supported")
        return self.links[handle][link]

    def nvmlDeviceGetNvLinkState(self, handle: int, link: int) -> int:
        self._link(handle, link)
        return 1

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: int, link: int) -> SimpleNamespace:
        return SimpleNamespace(busId=self._link(handle, link)[0])

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: int, link: int) -> int:
        if not self.has_remote_type:
            raise AttributeError("nvmlDeviceGetNvLinkRemoteDeviceType")  # an old pynvml
        return self._link(handle, link)[1]

    def nvmlDeviceGetP2PStatus(self, a: int, b: int, index: int) -> int:
        return 0 if self.topology.links[a][b].startswith("NV") else 1

    def nvmlDeviceGetTopologyCommonAncestor(self, a: int, b: int) -> int:
        code = self.topology.links[a][b]
        return ANCESTOR.get(code, NODE)


def capture(name: str) -> GpuTopology:
    return parse_topo_matrix((TOPO / name).read_bytes().decode()).topology


def sysfs_with_numa(tmp_path: Path, topology: GpuTopology) -> Path:
    for gpu in topology.gpus:
        device = tmp_path / pci_address(bus(gpu.index))
        device.mkdir(parents=True)
        (device / "numa_node").write_text(f"{-1 if gpu.numa is None else gpu.numa}\n")
    return tmp_path


NVML_CASES = [
    pytest.param("dgx-a100-8gpu-10nic.topo.txt", {"switch": True}, id="DGX A100: NVSwitch, NV12"),
    pytest.param("dgx-h200-8gpu-12nic.topo.txt", {"switch": True}, id="DGX H200: NVSwitch, NV18"),
    pytest.param(
        "dgx1-v100-8gpu-hybridcubemesh-1nic.topo.txt", {}, id="DGX-1: cube-mesh NV1/NV2, SYS"
    ),
    pytest.param("delos-4gpu-partialmesh-nv2-nv1-sys.topo.txt", {}, id="partial NVLink mesh"),
    pytest.param(
        "ibm-ac922-power9-4gpu-nv3-6nic.topo.txt",
        {"npu_links": 3},
        id="AC922: NV3 pairs; links to the CPU's NPU are not GPU links",
    ),
    pytest.param("pcie-rtx4090-8gpu-8numa-allsys.topo.txt", {}, id="8x4090 PCIe: all SYS"),
    pytest.param("workstation-2xrtx3090-nvlink-bridge-nv4.topo.txt", {}, id="2x3090 NVLink bridge"),
    pytest.param("h100-sxm-4gpu-vm-8nic-phb.topo.txt", {"switch": True}, id="H100 VM, NV18"),
]


@pytest.mark.parametrize(("file", "options"), NVML_CASES)
def test_nvml_reads_back_the_capture(tmp_path: Path, file: str, options: dict[str, Any]) -> None:
    want = capture(file)
    fake = FakeNvml(want, **options)
    got = read_nvml(fake, sysfs_with_numa(tmp_path, want))
    assert got.links == want.links
    assert [g.numa for g in got.gpus] == [g.numa for g in want.gpus]
    assert got.gpus[0] == GpuInfo(
        index=0,
        uuid="GPU-00000000",
        model="NVIDIA A100-SXM4-80GB",
        memory_mib=81920,
        numa=want.gpus[0].numa,
    )
    assert fake.calls == ["init", "shutdown"]


def test_pcie_tiers_from_common_ancestors(tmp_path: Path) -> None:
    links = (
        ("X", "PIX", "PXB", "PHB"),
        ("PIX", "X", "NODE", "SYS"),
        ("PXB", "NODE", "X", "SYS"),
        ("PHB", "SYS", "SYS", "X"),
    )
    want = GpuTopology(gpus=tuple(GpuInfo(index=i) for i in range(4)), links=links)
    assert read_nvml(FakeNvml(want), tmp_path).links == links


def test_without_remote_device_type_switch_links_are_not_guessed(tmp_path: Path) -> None:
    """An old driver that cannot say what is at the end of a link: no NVLink is invented."""
    want = capture("dgx-a100-8gpu-10nic.topo.txt")
    got = read_nvml(FakeNvml(want, switch=True, has_remote_type=False), tmp_path)
    assert {code for row in got.links for code in row} == {"X", "NODE"}


def test_numa_minus_one_or_unreadable_is_unknown(tmp_path: Path) -> None:
    want = capture("workstation-2xrtx3090-nvlink-bridge-nv4.topo.txt")
    (tmp_path / pci_address(bus(0))).mkdir()
    (tmp_path / pci_address(bus(0)) / "numa_node").write_text("-1\n")
    got = read_nvml(FakeNvml(want), tmp_path)
    assert [g.numa for g in got.gpus] == [None, None]


def test_auto_source_uses_a_monkeypatched_pynvml(monkeypatch: pytest.MonkeyPatch) -> None:
    want = capture("workstation-2xrtx3090-nvlink-bridge-nv4.topo.txt")
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(want))
    assert read_topology(Source.AUTO).links == want.links


def test_nvml_source_fails_without_falling_back(monkeypatch: pytest.MonkeyPatch) -> None:
    broken = FakeNvml(capture("workstation-2xrtx3090-nvlink-bridge-nv4.topo.txt"))
    broken.nvmlInit = lambda: (_ for _ in ()).throw(NVMLError("Driver Not Loaded"))  # type: ignore[method-assign]
    monkeypatch.setitem(sys.modules, "pynvml", broken)
    with pytest.raises(AgentError, match="NVML: NVMLError: Driver Not Loaded"):
        read_topology(Source.NVML, nvidia_smi="/nonexistent/nvidia-smi")


def test_agent_needs_a_node_name(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    assert main(["agent", "--once"]) == 2
    assert "NODE_NAME" in capsys.readouterr().err


@dataclass
class FabricInfo:
    """pynvml's ``c_nvmlGpuFabricInfo_t``: filled in by ``nvmlDeviceGetGpuFabricInfo``."""

    clusterUuid: bytes = b""
    status: int = 0
    cliqueId: int = 0
    state: int = 0


CLUSTER = "0b5f0ad2-6a8e-4a51-9a9c-1f2b3c4d5e6f"
FABRIC_COMPLETED = 3


@dataclass
class FabricNvml(FakeNvml):
    """The fake with an NVLink fabric: per GPU its (clique, fabric state)."""

    fabric: dict[int, tuple[int, int]] = field(default_factory=dict)

    c_nvmlGpuFabricInfo_t = FabricInfo
    NVML_GPU_FABRIC_STATE_COMPLETED = FABRIC_COMPLETED
    NVML_SUCCESS = 0

    def nvmlDeviceGetGpuFabricInfo(self, handle: int, info: FabricInfo) -> int:
        if handle not in self.fabric:
            raise NVMLError("NVML_ERROR_NOT_SUPPORTED")
        info.clusterUuid = uuid.UUID(CLUSTER).bytes
        info.cliqueId, info.state = self.fabric[handle]
        return 0


def test_each_gpu_gets_its_nvlink_clique_once_its_fabric_registration_is_complete(
    tmp_path: Path,
) -> None:
    want = capture("h100-sxm-4gpu-vm-8nic-phb.topo.txt")
    # GPU 0 and 1 in clique 7; GPU 2 in clique 8; GPU 3 still registering; no fabric beyond.
    fabric = {0: (7, FABRIC_COMPLETED), 1: (7, FABRIC_COMPLETED), 2: (8, FABRIC_COMPLETED)}
    fabric[3] = (7, 1)
    fake = FabricNvml(want, switch=True, fabric=fabric)
    got = read_nvml(fake, sysfs_with_numa(tmp_path, want))
    assert [g.clique for g in got.gpus] == [f"{CLUSTER}.7", f"{CLUSTER}.7", f"{CLUSTER}.8", None]

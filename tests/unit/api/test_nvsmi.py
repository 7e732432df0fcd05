"""Tests of the ``nvidia-smi topo -m`` parser against real captures, and of the topology API.

The captures in ``tests/data/gpu-topology`` are byte-exact copies of real output (see
``tests/data/README.md``); each has a row in ``TOPO_CASES`` saying what a reader of the capture
sees in it, so that a parser change that misreads any machine fails with the file named.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path

import pytest

from gpusched.api.errors import InvalidObjectError
from gpusched.api.nvsmi import TopoMatrix, parse_topo_matrix
from gpusched.api.topology import (
    MAX_ANNOTATION_BYTES,
    TOPOLOGY_ANNOTATION,
    GpuInfo,
    GpuTopology,
    Link,
    LinkTier,
    parse_link,
    parse_topology_annotation,
)

TOPO_DIR = Path(__file__).resolve().parents[2] / "data" / "gpu-topology"


def read_capture(name: str) -> str:
    """Raw bytes decoded as they are: no newline translation, ANSI escapes kept."""
    return (TOPO_DIR / name).read_bytes().decode("utf-8")


@dataclass(frozen=True)
class TopoCase:
    file: str
    gpus: int
    links: dict[tuple[int, int], str]
    """A few exact GPU-pair codes, as read off the capture."""
    numa: tuple[int | None, ...]
    nics: int
    cpu_affinity: dict[int, str] = field(default_factory=dict)
    all_links: str | None = None
    """When set, every off-diagonal GPU pair has this code."""
    nic_devices: tuple[str | None, ...] | None = None


NONE8: tuple[None, ...] = (None,) * 8

TOPO_CASES = [
    pytest.param(
        TopoCase(
            "dgx-a100-8gpu-10nic.topo.txt",
            gpus=8,
            links={(0, 1): "NV12", (3, 6): "NV12", (7, 0): "NV12"},
            numa=(3, 3, 1, 1, 7, 7, 5, 5),
            nics=10,
            cpu_affinity={0: "48-63,176-191", 4: "112-127,240-255"},
            all_links="NV12",
            nic_devices=tuple(f"mlx5_{i}" for i in range(10)),
        ),
        id="dgx-a100: NV12 NVSwitch, NUMA 3/1/7/5, spaces, 10 NICs with legend",
    ),
    pytest.param(
        TopoCase(
            "hgx-a100-oci-bm-8gpu-18nic.topo.txt",
            gpus=8,
            links={(0, 1): "NV12", (2, 5): "NV12"},
            numa=(3, 3, 1, 1, 7, 7, 5, 5),
            nics=18,
            cpu_affinity={0: "48-63", 7: "80-95"},
            all_links="NV12",
        ),
        id="oci-bm-a100: 18 NICs (NIC10..NIC17 two-digit), CPU lists without SMT half",
    ),
    pytest.param(
        TopoCase(
            "hgx-a100-8gpu-3nic-4numa.topo.txt",
            gpus=8,
            links={(0, 7): "NV12"},
            numa=(0, 0, 1, 1, 2, 2, 3, 3),
            nics=3,
            cpu_affinity={0: "0-19,80-99", 7: "60-79,140-159"},
            all_links="NV12",
        ),
        id="hgx-a100: no GPU NUMA ID column, 4 NUMA nodes, 3 NICs",
    ),
    pytest.param(
        TopoCase(
            "dgx-h200-8gpu-12nic.topo.txt",
            gpus=8,
            links={(0, 1): "NV18", (4, 7): "NV18"},
            numa=(0, 0, 0, 0, 1, 1, 1, 1),
            nics=12,
            cpu_affinity={0: "0-55,112-167", 5: "56-111,168-223"},
            all_links="NV18",
        ),
        id="dgx-h200: tabs, empty cell before GPU NUMA ID, 12 NICs",
    ),
    pytest.param(
        TopoCase(
            "hgx-h200-8gpu-10nic.topo.txt",
            gpus=8,
            links={(0, 1): "NV18", (3, 4): "NV18"},
            numa=(0, 0, 0, 0, 1, 1, 1, 1),
            nics=10,
            cpu_affinity={0: "0-63,128-191", 4: "64-127,192-255"},
            all_links="NV18",
            nic_devices=tuple(f"mlx5_{i}" for i in range(10)),
        ),
        id="hgx-h200: raw bytes with ANSI underline around the header, NIC rows end in empty cells",
    ),
    pytest.param(
        TopoCase(
            "h100-sxm-4gpu-vm-8nic-phb.topo.txt",
            gpus=4,
            links={(0, 3): "NV18"},
            numa=(0, 0, 0, 0),
            nics=8,
            cpu_affinity={2: "0-79"},
            all_links="NV18",
        ),
        id="h100-vm: 4 GPUs on one NUMA node, NICs all PHB",
    ),
    pytest.param(
        TopoCase(
            "dgx1-v100-8gpu-hybridcubemesh-1nic.topo.txt",
            gpus=8,
            links={
                (0, 1): "NV1",
                (0, 3): "NV2",
                (0, 4): "NV2",
                (0, 5): "SYS",
                (1, 5): "NV2",
                (2, 6): "NV1",
                (3, 7): "NV1",
                (4, 7): "NV2",
                (3, 4): "SYS",
            },
            numa=NONE8,
            nics=1,
            cpu_affinity={0: "0-11,24-35", 7: "12-23,36-47"},
            nic_devices=("mlx5_0",),
        ),
        id="dgx1-v100: hybrid cube-mesh NV1/NV2/SYS, no NUMA column, NIC named mlx5_0",
    ),
    pytest.param(
        TopoCase(
            "delos-4gpu-partialmesh-nv2-nv1-sys.topo.txt",
            gpus=4,
            links={(0, 1): "NV2", (0, 2): "NV2", (0, 3): "SYS", (1, 2): "SYS", (1, 3): "NV1"},
            numa=(0, 0, 1, 1),
            nics=0,
            cpu_affinity={0: "0-19,40-59", 3: "20-39,60-79"},
            nic_devices=(),
        ),
        id="delos: partial NVLink mesh NV2/NV1/SYS, no NICs",
    ),
    pytest.param(
        TopoCase(
            "ibm-ac922-power9-4gpu-nv3-6nic.topo.txt",
            gpus=4,
            links={(0, 1): "NV3", (2, 3): "NV3", (0, 2): "SYS", (1, 3): "SYS"},
            numa=(0, 0, 8, 8),
            nics=6,
            cpu_affinity={0: "0-63", 2: "64-127"},
            nic_devices=tuple(f"mlx5_{i}" for i in range(6)),
        ),
        id="ac922-power9: NV3 pairs, NUMA ids 0 and 8, six mlx5 columns",
    ),
    pytest.param(
        TopoCase(
            "polaris-hpe-4xa100-nv4-4numa.topo.txt",
            gpus=4,
            links={(0, 1): "NV4", (2, 3): "NV4"},
            numa=(3, 2, 1, 0),
            nics=2,
            cpu_affinity={0: "24-31,56-63", 3: "0-7,32-39"},
            all_links="NV4",
        ),
        id="polaris: doc-edited header (no leading tab, single spaces), GPU0 on NUMA 3",
    ),
    pytest.param(
        TopoCase(
            "workstation-2xrtx3090-nvlink-bridge-nv4.topo.txt",
            gpus=2,
            links={(0, 1): "NV4"},
            numa=(0, 0),
            nics=0,
            cpu_affinity={0: "0-23", 1: "0-23"},
        ),
        id="2x3090: NVLink bridge NV4, two GPUs",
    ),
    pytest.param(
        TopoCase(
            "pcie-rtx4090-8gpu-8numa-allsys.topo.txt",
            gpus=8,
            links={(0, 7): "SYS"},
            numa=(3, 2, 1, 0, 7, 6, 5, 4),
            nics=0,
            cpu_affinity={3: "0-15,128-143", 4: "112-127,240-254"},
            all_links="SYS",
        ),
        id="8x4090: PCIe only, all SYS, one GPU per NUMA node in reverse order",
    ),
    pytest.param(
        TopoCase(
            "pcie-rtx4090-8gpu-2nic-2numa.topo.partial.txt",
            gpus=8,
            links={(6, 7): "SYS"},
            numa=(0, 0, 0, 0, 1, 1, 1, 1),
            nics=2,
            cpu_affinity={0: "0-55,112-167", 7: "56-111,168-223"},
            all_links="SYS",
            nic_devices=(None, None),
        ),
        id="8x4090 with NICs: matrix complete, legend absent, so NIC device names unknown",
    ),
]

TRUNCATED_CAPTURES = [
    pytest.param(
        "hgx-h100class-8gpu-9nic-4numa-uneven.topo.partial.txt",
        "row GPU6",
        id="hgx-h100class: cut inside row GPU6, GPU7 and NIC rows missing",
    ),
]


def _case_of(param: object) -> TopoCase:
    case = getattr(param, "values", (None,))[0]
    assert isinstance(case, TopoCase), f"not a TopoCase param: {param!r}"
    return case


def test_every_capture_has_a_case() -> None:
    """A capture added to tests/data without a row here would go untested."""
    on_disk = {p.name for p in TOPO_DIR.glob("*.topo*.txt")}
    covered = {_case_of(p).file for p in TOPO_CASES}
    covered |= {getattr(p, "values", ("",))[0] for p in TRUNCATED_CAPTURES}
    assert on_disk, f"no captures found in {TOPO_DIR}"
    assert on_disk == covered, (
        f"captures without a test case: {sorted(on_disk - covered)}; "
        f"cases without a capture: {sorted(covered - on_disk)}"
    )


@pytest.fixture(scope="module")
def parsed() -> dict[str, TopoMatrix]:
    return {_case_of(p).file: parse_topo_matrix(read_capture(_case_of(p).file)) for p in TOPO_CASES}


@pytest.mark.parametrize("case", TOPO_CASES)
def test_capture_gpu_count_and_links(case: TopoCase, parsed: dict[str, TopoMatrix]) -> None:
    topo = parsed[case.file].topology
    assert len(topo.gpus) == case.gpus, f"{case.file}: {len(topo.gpus)} GPUs, want {case.gpus}"
    assert [g.index for g in topo.gpus] == list(range(case.gpus)), f"{case.file}: indexes"
    for (i, j), code in case.links.items():
        assert topo.links[i][j] == code, (
            f"{case.file}: GPU{i}-GPU{j} is {topo.links[i][j]!r}, the capture says {code!r}"
        )
        assert topo.links[j][i] == code, f"{case.file}: GPU{j}-GPU{i} differs from GPU{i}-GPU{j}"
    if case.all_links is not None:
        odd = {
            (i, j): topo.links[i][j]
            for i, j in combinations(range(case.gpus), 2)
            if topo.links[i][j] != case.all_links
        }
        assert not odd, f"{case.file}: want every pair {case.all_links}, these differ: {odd}"


@pytest.mark.parametrize("case", TOPO_CASES)
def test_capture_numa_nics_and_cpu_affinity(case: TopoCase, parsed: dict[str, TopoMatrix]) -> None:
    result = parsed[case.file]
    numa = tuple(g.numa for g in result.topology.gpus)
    assert numa == case.numa, f"{case.file}: NUMA per GPU {numa}, want {case.numa}"
    assert len(result.nics) == case.nics, f"{case.file}: NICs {result.nics}, want {case.nics}"
    assert len(result.nic_devices) == len(result.nics), f"{case.file}: nic_devices misaligned"
    if case.nic_devices is not None:
        assert result.nic_devices == case.nic_devices, f"{case.file}: {result.nic_devices}"
    for per_gpu in (result.cpu_affinity, result.numa_affinity, result.gpu_numa_id):
        assert len(per_gpu) == case.gpus, f"{case.file}: per-GPU tuple of {len(per_gpu)}"
    for gpu, cpus in case.cpu_affinity.items():
        got = result.cpu_affinity[gpu]
        assert got == cpus, f"{case.file}: GPU{gpu} CPU affinity {got!r}, want {cpus!r}"
    assert all(v is None for v in result.gpu_numa_id), (
        f"{case.file}: every capture prints GPU NUMA ID as N/A or not at all: {result.gpu_numa_id}"
    )


@pytest.mark.parametrize("case", TOPO_CASES)
def test_capture_round_trips_through_the_annotation(
    case: TopoCase, parsed: dict[str, TopoMatrix]
) -> None:
    topo = parsed[case.file].topology
    value = topo.to_annotation()
    back = parse_topology_annotation("node-a", value)
    assert back == topo, f"{case.file}: annotation {value} parsed back to {back}"


@pytest.mark.parametrize(("file", "where"), TRUNCATED_CAPTURES)
def test_truncated_capture_is_rejected(file: str, where: str) -> None:
    """A partial matrix is refused, not returned in part: placement must never trust it."""
    with pytest.raises(ValueError, match="truncated") as info:
        parse_topo_matrix(read_capture(file))
    assert where in str(info.value), f"{file}: error should name {where!r}: {info.value}"


def test_missing_rows_are_named() -> None:
    text = read_capture("workstation-2xrtx3090-nvlink-bridge-nv4.topo.txt")
    without_gpu1 = "\n".join(line for line in text.splitlines() if not line.startswith("GPU1"))
    with pytest.raises(ValueError, match=r"no row for GPU1.*truncated"):
        parse_topo_matrix(without_gpu1)


# --- synthetic inputs: variants the captures do not show -------------------------------------

TWO_GPUS = (
    "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tNV4\t0-23\t0\nGPU1\tNV4\t X \t0-23\t0\n"
)


def _matrix(rows: list[str], header: str = "GPU0 GPU1 GPU2") -> str:
    return "\n".join(["  " + header, *rows, "", "Legend:", "  X = Self"])


@pytest.mark.parametrize(
    ("text", "numa", "cpu"),
    [
        pytest.param(
            "$ nvidia-smi topo -m\r\n" + TWO_GPUS.replace("\n", "\r\n"),
            (0, 0),
            ("0-23", "0-23"),
            id="prompt line before the header and CRLF line ends",
        ),
        pytest.param(
            TWO_GPUS.replace("\t0\n", "\t0-1\n"),
            (None, None),
            ("0-23", "0-23"),
            id="NUMA affinity a range: kept as text, numa unknown",
        ),
        pytest.param(
            TWO_GPUS.replace("0-23\t0\n", "N/A\tN/A\n"),
            (None, None),
            (None, None),
            id="CPU and NUMA affinity N/A",
        ),
        pytest.param(
            TWO_GPUS.replace("\t0\n", "\n"),
            (None, None),
            ("0-23", "0-23"),
            id="NUMA cells missing: trailing columns left unknown",
        ),
        pytest.param(
            "\x1b[1m\x1b[4m" + TWO_GPUS.replace("NUMA Affinity", "NUMA\x1b[0m Affinity", 1),
            (0, 0),
            ("0-23", "0-23"),
            id="ANSI bold and reset in the middle of a header name",
        ),
        pytest.param(
            "GPU0 GPU1 CPU Affinity NUMA Affinity\nGPU0 X SOC 0,3-9 12\nGPU1 SOC X 0,3-9 12\n",
            (12, 12),
            ("0,3-9", "0,3-9"),
            id="single spaces everywhere, old driver's SOC code, CPU list 0,3-9",
        ),
    ],
)
def test_accepted_variants(
    text: str, numa: tuple[int | None, ...], cpu: tuple[str | None, ...]
) -> None:
    result = parse_topo_matrix(text)
    got_numa = tuple(g.numa for g in result.topology.gpus)
    assert got_numa == numa, f"NUMA {got_numa}, want {numa}; parsed {result}"
    assert result.cpu_affinity == cpu, f"CPU affinity {result.cpu_affinity}, want {cpu}"
    assert len(result.topology.gpus) == 2, f"want 2 GPUs: {result.topology}"


def test_single_gpu_header_and_row_both_start_with_gpu0() -> None:
    result = parse_topo_matrix("\tGPU0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \t0-7\t0\n")
    assert result.topology.links == (("X",),), f"single GPU matrix: {result.topology.links}"
    assert result.topology.gpus[0].numa == 0, f"single GPU NUMA: {result.topology.gpus}"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("", "no header line", id="empty text"),
        pytest.param("   \n\n\t\n", "no header line", id="only whitespace"),
        pytest.param(
            "Legend:\n  X = Self\n  SYS = Connection ...\n", "no header line", id="legend only"
        ),
        pytest.param(
            _matrix(["GPU0 X NV1 NV1", "GPU1 NV1 X", "GPU2 NV1 NV1 X"]),
            r"row GPU1: 2 cells, expected 3",
            id="non-square: row GPU1 one cell short",
        ),
        pytest.param(
            _matrix(["GPU0 X NV1 NV1 NV1", "GPU1 NV1 X NV1", "GPU2 NV1 NV1 X"]),
            r"row GPU0: 4 cells, more than the 3 device and 0 affinity columns",
            id="non-square: row GPU0 one cell too many",
        ),
        pytest.param(
            _matrix(["GPU0 X NV1 QPI", "GPU1 NV1 X NV1", "GPU2 QPI NV1 X"]),
            r"row GPU0 column GPU2: unknown link code 'QPI'",
            id="unknown code QPI",
        ),
        pytest.param(
            _matrix(["GPU0 X NV0 SYS", "GPU1 NV0 X SYS", "GPU2 SYS SYS X"]),
            r"row GPU0 column GPU1: unknown link code 'NV0'",
            id="NV0 is not a link",
        ),
        pytest.param(
            _matrix(["GPU0 X NV1 SYS", "GPU1 NV2 X SYS", "GPU2 SYS SYS X"]),
            r"not symmetric: row GPU0 column GPU1 is 'NV1' but row GPU1 column GPU0 is 'NV2'",
            id="asymmetric NV1 vs NV2",
        ),
        pytest.param(
            _matrix(["GPU0 SYS NV1 SYS", "GPU1 NV1 X SYS", "GPU2 SYS SYS X"]),
            r"row GPU0 column GPU0: diagonal cell is 'SYS'",
            id="diagonal not X",
        ),
        pytest.param(
            _matrix(["GPU0 X X SYS", "GPU1 X X SYS", "GPU2 SYS SYS X"]),
            r"row GPU0 column GPU1: unknown link code 'X'",
            id="X off the diagonal",
        ),
        pytest.param(_matrix([]), r"no row for GPU0, GPU1, GPU2", id="header but no GPU rows"),
        pytest.param(
            "GPU0 X NV1\nGPU1 NV1 X\n",
            r"column 'X' is a link code, so the header line is missing",
            id="rows without a header",
        ),
        pytest.param(
            _matrix(["GPU0 X NV1 SYS", "GPU1 NV1 X SYS", "GPU3 SYS SYS X"]),
            r"row GPU3: not a column of the header",
            id="row label not in the header",
        ),
        pytest.param(
            _matrix(["GPU0 X NV1 SYS", "GPU1 NV1 X SYS", "GPU1 NV1 X SYS", "GPU2 SYS SYS X"]),
            r"row GPU1: duplicate row",
            id="row repeated",
        ),
        pytest.param(
            _matrix(["GPU0 X NV1", "GPU2 NV1 X"], header="GPU0 GPU2"),
            r"GPU columns are \['GPU0', 'GPU2'\], expected \['GPU0', 'GPU1'\]",
            id="gap in GPU numbering",
        ),
        pytest.param(
            "GPU0 GPU1 CPU Affinity Power Draw\nGPU0 X NV1 0-3\nGPU1 NV1 X 0-3\n",
            r"unknown column text 'Power Draw'",
            id="unknown trailing header column",
        ),
        pytest.param(
            "GPU0 GPU1 NIC0\nGPU0 X NV1 PIX\nGPU1 NV1 X SYS\nNIC0 PIX PIX X\n",
            r"row GPU1 column NIC0 is 'SYS' but row NIC0 column GPU1 is 'PIX'",
            id="asymmetric GPU-NIC cell",
        ),
        pytest.param(
            "GPU0 GPU1 NUMA Affinity\nGPU0 X NV1 5000\nGPU1 NV1 X 0\n",
            r"row GPU0 column NUMA Affinity: 5000 is above 4096",
            id="NUMA node out of range",
        ),
    ],
)
def test_malformed_input_raises_naming_the_place(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_topo_matrix(text)


# --- gpusched.api.topology ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "link"),
    [
        pytest.param("NV1", Link(LinkTier.NVLINK, 1), id="NV1"),
        pytest.param("NV12", Link(LinkTier.NVLINK, 12), id="NV12 two digits"),
        pytest.param("NV18", Link(LinkTier.NVLINK, 18), id="NV18"),
        pytest.param("PIX", Link(LinkTier.PIX, 0), id="PIX"),
        pytest.param("PXB", Link(LinkTier.PXB, 0), id="PXB"),
        pytest.param("PHB", Link(LinkTier.PHB, 0), id="PHB"),
        pytest.param("NODE", Link(LinkTier.NODE, 0), id="NODE"),
        pytest.param("SYS", Link(LinkTier.SYS, 0), id="SYS"),
        pytest.param("SOC", Link(LinkTier.SYS, 0), id="SOC is old drivers' SYS"),
        pytest.param(" NV4\t", Link(LinkTier.NVLINK, 4), id="surrounding whitespace stripped"),
    ],
)
def test_parse_link_codes(code: str, link: Link) -> None:
    assert parse_link(code) == link, f"parse_link({code!r}) = {parse_link(code)}, want {link}"


@pytest.mark.parametrize(
    "code",
    [
        pytest.param("", id="empty"),
        pytest.param("X", id="self marker is not a link"),
        pytest.param("N/A", id="N/A"),
        pytest.param("NV", id="NV without count"),
        pytest.param("NV0", id="NV0"),
        pytest.param("NV-2", id="negative count"),
        pytest.param("nv4", id="lower case"),
        pytest.param("QPI", id="unknown word"),
    ],
)
def test_parse_link_rejects(code: str) -> None:
    with pytest.raises(ValueError, match="unknown link code") as info:
        parse_link(code)
    assert repr(code.strip()) in str(info.value), f"message should quote the code: {info.value}"


def test_link_tiers_order_from_closest_to_farthest() -> None:
    codes = ["SYS", "NODE", "PHB", "PXB", "PIX", "NV2"]
    tiers = [parse_link(c).tier for c in codes]
    assert sorted(tiers) == [parse_link(c).tier for c in reversed(codes)], f"tiers {tiers}"
    expected = ["NVLINK", "PIX", "PXB", "PHB", "NODE", "SYS", "UNKNOWN"]
    assert [t.name for t in sorted(LinkTier)] == expected, f"LinkTier order {list(LinkTier)}"
    assert max(LinkTier) is LinkTier.UNKNOWN, "UNKNOWN must be worse than every real tier"
    assert parse_link("SOC").tier == parse_link("SYS").tier, "SOC and SYS must be one tier"


def test_more_nvlinks_is_the_same_tier_with_a_larger_count() -> None:
    """Closeness within NVLink is the count: a sort key must use -nvlinks, not the raw tuple."""
    nv12, nv18 = parse_link("NV12"), parse_link("NV18")
    assert nv12.tier == nv18.tier == LinkTier.NVLINK, f"{nv12} {nv18}"
    assert (nv18.tier, -nv18.nvlinks) < (nv12.tier, -nv12.nvlinks), "NV18 must rank before NV12"


def _two_gpu_annotation(**overrides: object) -> str:
    raw: dict[str, object] = {
        "gpus": [{"index": 0, "numa": 0}, {"index": 1, "numa": 1}],
        "links": [["X", "NV4"], ["NV4", "X"]],
    }
    raw.update(overrides)
    return json.dumps(raw)


FIELD = f"metadata.annotations[{TOPOLOGY_ANNOTATION}]"


@pytest.mark.parametrize(
    ("value", "field", "message"),
    [
        pytest.param("{not json", FIELD, "not JSON", id="not JSON"),
        pytest.param("[1, 2]", FIELD, "valid dictionary", id="JSON array"),
        pytest.param(
            _two_gpu_annotation(gpus=[{"index": 0, "colour": "red"}, {"index": 1}]),
            f"{FIELD}.gpus[0].colour",
            "unknown field",
            id="unknown GPU field named with its path",
        ),
        pytest.param(
            _two_gpu_annotation(gpus=[{"index": 0}, {"index": 1, "memoryMiB": -1}]),
            f"{FIELD}.gpus[1].memoryMiB",
            "greater than or equal to 0",
            id="negative memory named by its alias",
        ),
        pytest.param(
            _two_gpu_annotation(gpus=[{"index": 0}, {"index": 2}]),
            FIELD,
            "0..n-1 without gaps",
            id="gap in indexes",
        ),
        pytest.param(
            _two_gpu_annotation(links=[["X", "NV4"]]),
            FIELD,
            "2x2 matrix",
            id="links not square",
        ),
        pytest.param(
            _two_gpu_annotation(links=[["X", "NV4"], ["NV2", "X"]]),
            FIELD,
            r"not symmetric at \[0\]\[1\]",
            id="links asymmetric",
        ),
        pytest.param(
            _two_gpu_annotation(links=[["X", "QPI"], ["QPI", "X"]]),
            FIELD,
            r"links\[0\]\[1\]: unknown link code 'QPI'",
            id="unknown code with its cell",
        ),
        pytest.param(
            _two_gpu_annotation(links=[["NV4", "NV4"], ["NV4", "X"]]),
            FIELD,
            r"links\[0\]\[0\] must be 'X'",
            id="diagonal not X",
        ),
    ],
)
def test_annotation_errors_name_node_and_field(value: str, field: str, message: str) -> None:
    with pytest.raises(InvalidObjectError, match=message) as info:
        parse_topology_annotation("gpu-node-7", value)
    err = info.value
    assert err.obj == "Node gpu-node-7", f"error should name the node: {err.obj!r}"
    assert err.field == field, f"error field {err.field!r}, want {field!r} ({err})"


def test_annotation_size_limit_counts_bytes() -> None:
    valid = _two_gpu_annotation()
    at_limit = valid + " " * (MAX_ANNOTATION_BYTES - len(valid.encode()))
    assert len(at_limit.encode()) == MAX_ANNOTATION_BYTES, "test input must sit at the limit"
    assert len(parse_topology_annotation("n", at_limit).gpus) == 2, "exactly at the limit parses"

    with pytest.raises(InvalidObjectError, match=f"larger than {MAX_ANNOTATION_BYTES} bytes"):
        parse_topology_annotation("n", at_limit + " ")
    # Under the limit in characters, over it in UTF-8 bytes: still refused unread.
    note = "é" * (MAX_ANNOTATION_BYTES // 2)
    wide = json.dumps({"gpus": [], "links": [], "note": note}, ensure_ascii=False)
    assert len(wide) < MAX_ANNOTATION_BYTES < len(wide.encode()), "test input must be wide"
    with pytest.raises(InvalidObjectError, match="larger than") as info:
        parse_topology_annotation("n", wide)
    assert info.value.field == FIELD, f"size error field {info.value.field!r}"


def test_to_annotation_is_compact_uses_aliases_and_drops_unknowns() -> None:
    topo = GpuTopology(
        gpus=(GpuInfo(index=0, memory_mib=81920), GpuInfo(index=1, numa=1)),
        links=(("X", "NV18"), ("NV18", "X")),
    )
    value = topo.to_annotation()
    assert " " not in value, f"annotation should be compact: {value}"
    assert '"memoryMiB":81920' in value, f"memory under its alias: {value}"
    assert "null" not in value, f"unknown fields left out, not null: {value}"
    assert parse_topology_annotation("n", value) == topo, f"round trip of {value}"


# --- whole matrices, written out as read off the captures ----------------------------------

NV12_ALL = """
     X NV12 NV12 NV12 NV12 NV12 NV12 NV12
  NV12    X NV12 NV12 NV12 NV12 NV12 NV12
  NV12 NV12    X NV12 NV12 NV12 NV12 NV12
  NV12 NV12 NV12    X NV12 NV12 NV12 NV12
  NV12 NV12 NV12 NV12    X NV12 NV12 NV12
  NV12 NV12 NV12 NV12 NV12    X NV12 NV12
  NV12 NV12 NV12 NV12 NV12 NV12    X NV12
  NV12 NV12 NV12 NV12 NV12 NV12 NV12    X
"""
CUBE_MESH = """
     X  NV1  NV1  NV2  NV2  SYS  SYS  SYS
   NV1    X  NV2  NV1  SYS  NV2  SYS  SYS
   NV1  NV2    X  NV2  SYS  SYS  NV1  SYS
   NV2  NV1  NV2    X  SYS  SYS  SYS  NV1
   NV2  SYS  SYS  SYS    X  NV1  NV1  NV2
   SYS  NV2  SYS  SYS  NV1    X  NV2  NV1
   SYS  SYS  NV1  SYS  NV1  NV2    X  NV2
   SYS  SYS  SYS  NV1  NV2  NV1  NV2    X
"""
SYS_ALL = """
     X  SYS  SYS  SYS  SYS  SYS  SYS  SYS
   SYS    X  SYS  SYS  SYS  SYS  SYS  SYS
   SYS  SYS    X  SYS  SYS  SYS  SYS  SYS
   SYS  SYS  SYS    X  SYS  SYS  SYS  SYS
   SYS  SYS  SYS  SYS    X  SYS  SYS  SYS
   SYS  SYS  SYS  SYS  SYS    X  SYS  SYS
   SYS  SYS  SYS  SYS  SYS  SYS    X  SYS
   SYS  SYS  SYS  SYS  SYS  SYS  SYS    X
"""
BRIDGE = """
     X  NV4
   NV4    X
"""


def _rows(table: str) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple(line.split()) for line in table.strip().splitlines())


@pytest.mark.parametrize(
    ("file", "links", "numa"),
    [
        pytest.param(
            "dgx-a100-8gpu-10nic.topo.txt",
            NV12_ALL,
            (3, 3, 1, 1, 7, 7, 5, 5),
            id="DGX A100: NV12 everywhere, two GPUs per NUMA node 3/1/7/5",
        ),
        pytest.param(
            "dgx1-v100-8gpu-hybridcubemesh-1nic.topo.txt",
            CUBE_MESH,
            (None,) * 8,
            id="DGX-1 V100: hybrid cube-mesh, no NUMA column so NUMA unknown",
        ),
        pytest.param(
            "pcie-rtx4090-8gpu-8numa-allsys.topo.txt",
            SYS_ALL,
            (3, 2, 1, 0, 7, 6, 5, 4),
            id="8x RTX 4090 PCIe: SYS everywhere, one GPU per NUMA node",
        ),
        pytest.param(
            "workstation-2xrtx3090-nvlink-bridge-nv4.topo.txt",
            BRIDGE,
            (0, 0),
            id="2x RTX 3090: NVLink bridge, both on NUMA node 0",
        ),
    ],
)
def test_whole_link_matrix_and_numa(file: str, links: str, numa: tuple[int | None, ...]) -> None:
    topology = parse_topo_matrix(read_capture(file)).topology
    want = _rows(links)
    for i, (got_row, want_row) in enumerate(zip(topology.links, want, strict=True)):
        assert got_row == want_row, f"{file}: row GPU{i} is {got_row}, want {want_row}"
    assert tuple(g.numa for g in topology.gpus) == numa, f"{file}: NUMA {topology.gpus}"

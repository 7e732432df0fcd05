"""Parser for the text ``nvidia-smi topo -m`` prints, turned into a `GpuTopology`.

The node agent runs ``nvidia-smi topo -m`` and publishes the result as the node annotation; this
module is the pure half of that (it takes a ``str``, does no I/O) so that it can be tested against
captures from real machines. Those captures differ in many ways that must all be accepted:

* cells separated by tabs or by runs of spaces (and sometimes a single space);
* ANSI escapes (``ESC[4m`` underline) around the header when the output went to a terminal;
* NIC rows and columns named ``NIC<n>`` (with a ``NIC Legend``) or directly ``mlx5_<n>``;
* trailing columns ``CPU Affinity``, ``NUMA Affinity`` and ``GPU NUMA ID``, each optional,
  with ``N/A`` or empty cells, and NIC rows that leave them out;
* legends present or absent, text before the header (a prompt, a command line).

Because spacing is unreliable (some drivers print ``0<TAB><TAB>N/A`` under two headers, others
align with one space), cells are split on any whitespace: the first cells of a row are the link
codes, one per device column, and whatever follows fills the affinity columns in header order.

A capture whose matrix is incomplete (a row cut short, a device column without its row) is
rejected with a `ValueError` rather than returned in part: a scheduler that believed a partial
topology would place gangs on links it never saw. Every other malformation (an unknown link code,
an asymmetric matrix, ``X`` off the diagonal, no GPU at all) is a `ValueError` naming the row and
the column.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from gpusched.api.topology import GpuInfo, GpuTopology, parse_link

__all__ = ["TopoMatrix", "parse_topo_matrix"]

_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_GPU_LABEL = re.compile(r"GPU(\d+)")
_NIC_LEGEND_LINE = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")
_NOT_AVAILABLE = frozenset({"", "N/A"})

CPU_AFFINITY = "CPU Affinity"
NUMA_AFFINITY = "NUMA Affinity"
GPU_NUMA_ID = "GPU NUMA ID"
_AFFINITY_COLUMNS = (CPU_AFFINITY, NUMA_AFFINITY, GPU_NUMA_ID)
_AFFINITY_PATTERN = re.compile(
    "|".join(r"\s+".join(map(re.escape, name.split())) for name in _AFFINITY_COLUMNS)
)
_MAX_NUMA = 4096
"""Same bound as `GpuInfo.numa`; checked here so the error names the row."""


@dataclass(frozen=True, kw_only=True)
class TopoMatrix:
    """What one ``nvidia-smi topo -m`` capture says.

    ``topology`` keeps only the GPU-to-GPU links (NICs are not scheduled). The per-GPU tuples are
    indexed like ``topology.gpus`` and hold the cell as printed, with ``N/A`` and missing cells
    as ``None``; they are kept raw because a CPU list such as ``0-63,128-191`` or a NUMA range is
    meaningful to the node agent but not to the placement engine.
    """

    topology: GpuTopology
    cpu_affinity: tuple[str | None, ...]
    """``CPU Affinity`` of each GPU, e.g. ``"0-19,80-99"``."""
    numa_affinity: tuple[str | None, ...]
    """``NUMA Affinity`` of each GPU as printed; `GpuInfo.numa` holds it when it is one integer."""
    gpu_numa_id: tuple[str | None, ...]
    """``GPU NUMA ID`` of each GPU (the GPU's own memory node on coherent systems)."""
    nics: tuple[str, ...]
    """NIC columns as labelled in the matrix (``NIC0`` or ``mlx5_0``), in column order."""
    nic_devices: tuple[str | None, ...]
    """Device name of each NIC (``mlx5_0``): from the ``NIC Legend``, or the label itself when
    the matrix already uses device names; ``None`` for a ``NIC<n>`` label with no legend."""


@dataclass(frozen=True)
class _Header:
    devices: tuple[str, ...]
    affinity: tuple[str, ...]
    line_no: int


@dataclass(frozen=True)
class _Row:
    label: str
    links: tuple[str, ...]
    extra: tuple[str, ...]
    line_no: int


def parse_topo_matrix(text: str) -> TopoMatrix:
    """Parses the full output of ``nvidia-smi topo -m``; raises `ValueError` if it is malformed."""
    lines = _ANSI_ESCAPE.sub("", text).splitlines()
    header = _parse_header(lines)
    rows = _parse_rows(lines, header)
    _check_matrix(header, rows)
    gpu_rows = [rows[label] for label in _gpu_labels(header.devices)]
    affinities = [_affinity_cells(row, header.affinity) for row in gpu_rows]
    nic_labels = tuple(d for d in header.devices if not _GPU_LABEL.fullmatch(d))
    legend = _nic_legend(lines[header.line_no + 1 :])
    return TopoMatrix(
        topology=_gpu_topology(header, gpu_rows, affinities),
        cpu_affinity=tuple(cells.get(CPU_AFFINITY) for cells in affinities),
        numa_affinity=tuple(cells.get(NUMA_AFFINITY) for cells in affinities),
        gpu_numa_id=tuple(cells.get(GPU_NUMA_ID) for cells in affinities),
        nics=nic_labels,
        nic_devices=tuple(_nic_device(label, legend) for label in nic_labels),
    )


def _gpu_topology(
    header: _Header, gpu_rows: Sequence[_Row], affinities: Sequence[dict[str, str | None]]
) -> GpuTopology:
    """Keeps the GPU-by-GPU block of the matrix and each GPU's NUMA node."""
    columns = [header.devices.index(row.label) for row in gpu_rows]
    gpus = tuple(
        GpuInfo(index=i, numa=_numa_node(row.label, cells.get(NUMA_AFFINITY)))
        for i, (row, cells) in enumerate(zip(gpu_rows, affinities, strict=True))
    )
    return GpuTopology(
        gpus=gpus, links=tuple(tuple(row.links[c] for c in columns) for row in gpu_rows)
    )


def _parse_header(lines: Sequence[str]) -> _Header:
    """Finds the header: the first line whose first cell is ``GPU0``.

    Text before it (a shell prompt, the command) is skipped. The affinity column names contain
    spaces, so they are cut out by name first; what precedes them is one device per word.
    """
    for line_no, line in enumerate(lines):
        words = line.split()
        if words and words[0] == "GPU0":
            return _split_header(line, line_no)
    raise ValueError("no header line starting with GPU0: not an 'nvidia-smi topo -m' capture")


def _split_header(line: str, line_no: int) -> _Header:
    matches = list(_AFFINITY_PATTERN.finditer(line))
    device_part = line[: matches[0].start()] if matches else line
    leftover = _AFFINITY_PATTERN.sub(" ", line[len(device_part) :]).split()
    if leftover:
        raise ValueError(f"header line {line_no + 1}: unknown column text {' '.join(leftover)!r}")
    devices = tuple(device_part.split())
    for name in devices:
        if name == "X" or _is_link_code(name):
            raise ValueError(
                f"header line {line_no + 1}: column {name!r} is a link code, "
                "so the header line is missing"
            )
    if len(set(devices)) != len(devices):
        raise ValueError(f"header line {line_no + 1}: duplicate device columns in {devices}")
    affinity = tuple(" ".join(m.group(0).split()) for m in matches)
    if len(set(affinity)) != len(affinity):
        raise ValueError(f"header line {line_no + 1}: duplicate affinity columns in {affinity}")
    return _Header(devices=devices, affinity=affinity, line_no=line_no)


def _parse_rows(lines: Sequence[str], header: _Header) -> dict[str, _Row]:
    """Reads rows from the line after the header up to a blank line, ``Legend:`` or the end."""
    width = len(header.devices)
    rows: dict[str, _Row] = {}
    for line_no in range(header.line_no + 1, len(lines)):
        cells = lines[line_no].split()
        if not cells or cells[0].rstrip(":") == "Legend":
            break
        label = cells[0]
        where = f"line {line_no + 1}, row {label}"
        if label not in header.devices:
            raise ValueError(f"{where}: not a column of the header {header.devices}")
        if label in rows:
            raise ValueError(f"{where}: duplicate row")
        if len(cells) - 1 < width:
            raise ValueError(
                f"{where}: {len(cells) - 1} cells, expected {width} link codes "
                f"(one per device column); the capture may be truncated"
            )
        extra = tuple(cells[1 + width :])
        if len(extra) > len(header.affinity):
            raise ValueError(
                f"{where}: {len(cells) - 1} cells, more than the {width} device and "
                f"{len(header.affinity)} affinity columns of the header (matrix not square?)"
            )
        rows[label] = _Row(label, tuple(cells[1 : 1 + width]), extra, line_no)
    return rows


def _check_matrix(header: _Header, rows: dict[str, _Row]) -> None:
    """Every device has a row, ``X`` sits exactly on the diagonal, codes are known, and the
    matrix is symmetric (over NICs too: an asymmetric cell means the capture was mangled)."""
    missing = [d for d in header.devices if d not in rows]
    if missing:
        raise ValueError(f"no row for {', '.join(missing)}; the capture may be truncated")
    for i, row_label in enumerate(header.devices):
        row = rows[row_label]
        for j, col_label in enumerate(header.devices):
            _check_cell(row, col_label, row.links[j], diagonal=i == j)
            mirror = rows[col_label].links[i]
            if row.links[j] != mirror:
                raise ValueError(
                    f"matrix not symmetric: row {row_label} column {col_label} is "
                    f"{row.links[j]!r} but row {col_label} column {row_label} is {mirror!r}"
                )


def _check_cell(row: _Row, column: str, code: str, *, diagonal: bool) -> None:
    where = f"line {row.line_no + 1}, row {row.label} column {column}"
    if diagonal:
        if code != "X":
            raise ValueError(f"{where}: diagonal cell is {code!r}, expected 'X'")
        return
    try:
        parse_link(code)
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None


def _is_link_code(cell: str) -> bool:
    try:
        parse_link(cell)
    except ValueError:
        return False
    return True


def _gpu_labels(devices: Sequence[str]) -> list[str]:
    """GPU columns must be GPU0..GPUn-1 in order, as `GpuTopology` indexes them."""
    labels = [d for d in devices if _GPU_LABEL.fullmatch(d)]
    if not labels:
        raise ValueError("no GPU columns in the header")
    expected = [f"GPU{i}" for i in range(len(labels))]
    if labels != expected:
        raise ValueError(f"GPU columns are {labels}, expected {expected}")
    return labels


def _affinity_cells(row: _Row, columns: Sequence[str]) -> dict[str, str | None]:
    """Maps a GPU row's trailing cells to the header's affinity columns, in order.

    Empty cells cannot be told apart once split on whitespace, so missing trailing cells are
    taken to be the last columns; ``N/A`` becomes ``None``.
    """
    cells: dict[str, str | None] = dict.fromkeys(columns)
    for name, value in zip(columns, row.extra, strict=False):
        cells[name] = None if value in _NOT_AVAILABLE else value
    return cells


def _numa_node(label: str, value: str | None) -> int | None:
    """One integer is a NUMA node; a list or range (a GPU spanning nodes) tells nothing usable."""
    if value is None or not value.isdigit():
        return None
    node = int(value)
    if node > _MAX_NUMA:
        raise ValueError(f"row {label} column {NUMA_AFFINITY}: {node} is above {_MAX_NUMA}")
    return node


def _nic_legend(lines: Sequence[str]) -> dict[str, str]:
    """``NIC0: mlx5_0`` lines of the ``NIC Legend`` (absent on older drivers and in excerpts)."""
    legend: dict[str, str] = {}
    for line in lines:
        match = _NIC_LEGEND_LINE.match(line)
        if match:
            legend[match.group(1)] = match.group(2)
    return legend


def _nic_device(label: str, legend: dict[str, str]) -> str | None:
    if label in legend:
        return legend[label]
    return None if re.fullmatch(r"NIC\d+", label) else label

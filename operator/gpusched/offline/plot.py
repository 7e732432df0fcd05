"""Pictures of the cluster: zones → racks → nodes → GPUs, each GPU coloured by its holder.

Two layouts, chosen by node count:

- **Detailed** (up to ``DETAILED_MAX_NODES`` nodes): one box per zone, racks side by side
  inside it (wrapping after ``RACKS_PER_ROW``), one row per node with a square per GPU. A GPU
  is coloured by the PodGroup holding it; pods without a group are grey. A shared GPU
  is split into bands by milli-GPU. GPUs excluded by telemetry are dark with a white cross;
  hot ones (over the temperature limit) get a red frame. A green bar under the GPUs marks each
  NVLink block (GPUs every pair of which is NVLink: all eight on NVSwitch boards, two quads on
  a DGX-1 cube-mesh, none on PCIe-only nodes). Highlighted groups get a thick black frame.
- **Aggregated** (more nodes): one row per rack, one cell per node coloured by the share of its
  GPUs in use, nodes with excluded GPUs marked with a red dot, and per rack its free GPUs.

Levels: the outermost ``topologyLevels`` key the nodes carry is the "zone", the innermost the
"rack" (one level: zones only). matplotlib is an optional dependency (extra ``plot``) and is
imported only here, with the Agg backend and no pyplot state.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from gpusched.api.topology import LinkTier
from gpusched.engine.gpushape import NodeShape
from gpusched.engine.policy import Policy
from gpusched.engine.request import WHOLE_GPU_MILLI, PodRequest
from gpusched.engine.result import Binding
from gpusched.engine.snapshot import Snapshot

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from gpusched.offline.simulate import Run

DETAILED_MAX_NODES = 100
LEGEND_INCHES = 2.6
"""Room right of the drawing for the legend."""
RACKS_PER_ROW = 6
LOOSE = "pods without a group"
FREE_COLOUR = "#ffffff"
LOOSE_COLOUR = "#9e9e9e"
EXCLUDED_COLOUR = "#37474f"
HOT_COLOUR = "#d50000"
NVLINK_COLOUR = "#2e7d32"
DOMAIN_COLOUR = "#6a1b9a"
"""Frames of NVLink domains (multi-node, ``nvidia.com/gpu.clique``)."""
PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#9467bd",
    "#17becf",
    "#e377c2",
    "#bcbd22",
    "#8c564b",
    "#2ca02c",
    "#aec7e8",
    "#ffbb78",
    "#c5b0d5",
    "#9edae5",
    "#f7b6d2",
    "#dbdb8d",
    "#c49c94",
    "#98df8a",
)
"""Group colours in order of first appearance; red and dark grey are kept for GPU health."""


class PlotError(Exception):
    """The picture could not be made (matplotlib missing, file not writable)."""


@dataclass(frozen=True, slots=True)
class PlotSummary:
    path: Path
    nodes: int
    aggregated: bool
    colours: Mapping[str, str]
    """Holder (group key, or ``LOOSE``) → colour, as in the legend."""


# ----- inputs: a snapshot with the decision applied ------------------------------------------


def plot_run(
    run: Run, path: Path, highlight: Iterable[str] = (), title: str | None = None
) -> PlotSummary:
    """The cluster of an offline run with the engine's placements applied."""
    after = with_bindings(run.snapshot, run.result.bindings, run.pending)
    key = run.policy.scoring.domain_key
    return plot_snapshot(after, path, highlight=highlight, title=title, domain_key=key)


def with_bindings(
    snapshot: Snapshot, bindings: Iterable[Binding], requests: Mapping[str, PodRequest]
) -> Snapshot:
    """A copy of ``snapshot`` holding the pods of ``bindings`` too."""
    after = snapshot.copy()
    for binding in bindings:
        request = requests.get(binding.pod)
        node = after.index.get(binding.node)
        if request is not None and node is not None and request.key not in after.holdings:
            after.assume(request, node, binding.gpus)
    return after


# ----- what to draw --------------------------------------------------------------------------


@dataclass(slots=True)
class _Layout:
    """Nodes by zone and rack, in path order; holders' colours."""

    zones: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    colours: dict[str, str] = field(default_factory=dict)
    domains: bool = False
    """Some node is in an NVLink domain (``scoring.domainKey``): the legend names the frame."""
    domain_key: str = ""
    """The label of those domains."""


def _holder(pod: PodRequest) -> str:
    return pod.group_key or LOOSE


def _layout(snapshot: Snapshot, domain_key: str) -> _Layout:
    present = [key for key in snapshot.levels if any(key in n.labels for n in snapshot.nodes)]
    zone_key = present[0] if present else None
    rack_key = present[-1] if len(present) > 1 else None
    layout = _Layout()
    for index, info in enumerate(snapshot.nodes):
        zone = info.labels.get(zone_key, "(no zone)") if zone_key else "cluster"
        rack = info.labels.get(rack_key, "(no rack)") if rack_key else ""
        layout.zones.setdefault(zone, {}).setdefault(rack, []).append(index)
    layout.zones = {z: dict(sorted(r.items())) for z, r in sorted(layout.zones.items())}
    layout.domain_key = domain_key
    layout.domains = any(n.labels.get(domain_key) for n in snapshot.nodes)
    holders = sorted({_holder(h.pod) for h in snapshot.holdings.values() if h.gpus})
    groups = [h for h in holders if h != LOOSE]
    for i, holder in enumerate(groups):
        layout.colours[holder] = PALETTE[i % len(PALETTE)]
    if LOOSE in holders:
        layout.colours[LOOSE] = LOOSE_COLOUR
    return layout


class _Owner(NamedTuple):
    holder: str
    """The pod's group key, or `LOOSE`."""
    pod: str
    milli: int


def _gpu_owners(snapshot: Snapshot) -> dict[int, list[_Owner]]:
    """Global GPU id → every pod on it."""
    owners: dict[int, list[_Owner]] = defaultdict(list)
    for holding in sorted(snapshot.holdings.values(), key=lambda h: h.pod.key):
        base = int(snapshot.gpu_offset[holding.node])
        owner = _Owner(_holder(holding.pod), holding.pod.key, holding.milli_per_gpu)
        for gpu in holding.gpus:
            owners[base + gpu].append(owner)
    return owners


@functools.lru_cache(maxsize=256)
def nvlink_blocks(shape: NodeShape) -> tuple[tuple[int, ...], ...]:
    """The node's GPUs split into all-NVLink blocks, greedily in index order; only blocks of
    two or more GPUs are returned."""
    left = list(range(shape.gpu_count))
    blocks = []
    while left:
        block = [left.pop(0)]
        for gpu in list(left):
            if all(shape.tiers[gpu][member] == LinkTier.NVLINK for member in block):
                block.append(gpu)
                left.remove(gpu)
        if len(block) > 1:
            blocks.append(tuple(block))
    return tuple(blocks)


def _is_hot(note: str | None) -> bool:
    return note is not None and "°C" in note


# ----- drawing -------------------------------------------------------------------------------


def plot_snapshot(
    snapshot: Snapshot,
    path: Path,
    *,
    highlight: Iterable[str] = (),
    title: str | None = None,
    max_detailed_nodes: int = DETAILED_MAX_NODES,
    domain_key: str = Policy().scoring.domain_key,
) -> PlotSummary:
    """Draws ``snapshot`` into the PNG ``path``; detailed up to ``max_detailed_nodes``.
    ``highlight``: group keys and pod keys whose GPUs get a thick frame; ``domain_key``: the
    label of the NVLink domains framed (``scoring.domainKey``)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:  # pragma: no cover - matplotlib is part of the dev install
        raise PlotError("--plot needs matplotlib: pip install 'gpusched[plot]'") from None
    layout = _layout(snapshot, domain_key)
    aggregated = len(snapshot.nodes) > max_detailed_nodes
    figure = Figure()
    FigureCanvasAgg(figure)
    axes = figure.add_axes((0.01, 0.01, 0.98, 0.9))
    if aggregated:
        width, height = _draw_aggregated(axes, snapshot, layout)
    else:
        width, height = _draw_detailed(axes, snapshot, layout, set(highlight))
    scale = 0.28 if not aggregated else 0.18
    drawing = max(6.0, width * scale)
    inches = (drawing + LEGEND_INCHES, max(4.0, height * scale + 1.2))
    figure.set_size_inches(*inches)
    axes.set_position((0.01, 0.01, drawing / inches[0] - 0.01, 1.0 - 0.9 / inches[1]))
    axes.set_xlim(-0.5, width + 0.5)
    axes.set_ylim(height + 0.5, -0.5)
    axes.set_aspect("equal")
    axes.axis("off")
    gpus = int(snapshot.gpu_offset[-1])
    heading = title or "gpusched"
    free = int(snapshot.free_whole.sum())
    axes.set_title(f"{heading}\n{len(snapshot.nodes)} nodes, {gpus} GPUs, {free} free", fontsize=10)
    _legend(axes, layout, aggregated)
    try:
        figure.savefig(path, dpi=100, bbox_inches="tight", pad_inches=0.2)
    except OSError as error:
        raise PlotError(f"{path}: cannot write: {error}") from None
    return PlotSummary(Path(path), len(snapshot.nodes), aggregated, dict(layout.colours))


_NAME_WIDTH = 4.5
"""Data units left of a node's GPUs for its name."""


def _draw_detailed(
    axes: Axes, snapshot: Snapshot, layout: _Layout, highlight: set[str]
) -> tuple[float, float]:
    owners = _gpu_owners(snapshot)
    width = max((n.gpu_count for n in snapshot.nodes), default=1)
    rack_width = _NAME_WIDTH + max(width, 1) + 1.0
    top, right = 0.0, 0.0
    for zone, racks in layout.zones.items():
        rows = [
            list(racks.items())[i : i + RACKS_PER_ROW] for i in range(0, len(racks), RACKS_PER_ROW)
        ]
        zone_top = top
        top += 1.6
        for row in rows:
            tallest = max(len(nodes) for _, nodes in row)
            for column, (rack, nodes) in enumerate(row):
                left = 0.5 + column * (rack_width + 0.8)
                _rack_box(axes, rack, left, top, rack_width, len(nodes))
                for offset, node in enumerate(nodes):
                    y = top + 1.2 + offset
                    _node_row(axes, snapshot, node, left, y, owners, layout, highlight)
                for first, count, domain in _domain_runs(snapshot, nodes, layout.domain_key):
                    y = top + 1.2 + first
                    _domain_box(axes, domain, left + 0.15, y - 0.08, rack_width - 0.3, count)
                right = max(right, left + rack_width)
            top += tallest + 2.0
        _zone_box(axes, zone, zone_top, top - zone_top, right)
        top += 0.6
    return right + 0.5, top


def _rack_box(axes: Axes, rack: str, left: float, top: float, width: float, nodes: int) -> None:
    from matplotlib.patches import Rectangle

    axes.add_patch(
        Rectangle((left, top), width, nodes + 1.5, facecolor="#f5f5f5", edgecolor="#757575", lw=0.8)
    )
    if rack:
        axes.text(left + 0.3, top + 0.6, rack, fontsize=7, va="center", weight="bold")


def _domain_runs(snapshot: Snapshot, nodes: Sequence[int], key: str) -> list[tuple[int, int, str]]:
    """Runs of consecutive ``nodes`` in one NVLink domain (label ``key``, ``scoring.domainKey``,
    e.g. ``nvidia.com/gpu.clique``): (first position, node count, domain value); nodes with
    the label missing or empty are in none."""
    runs: list[tuple[int, int, str]] = []
    for position, node in enumerate(nodes):
        value = snapshot.nodes[node].labels.get(key, "")
        if value and runs and runs[-1][2] == value and sum(runs[-1][:2]) == position:
            first, count, _ = runs[-1]
            runs[-1] = (first, count + 1, value)
        elif value:
            runs.append((position, 1, value))
    return runs


def _domain_box(axes: Axes, domain: str, left: float, top: float, width: float, rows: int) -> None:
    """A dashed box around the rows of one NVLink domain, labelled with its clique id."""
    from matplotlib.patches import Rectangle

    axes.add_patch(
        Rectangle(
            (left, top), width, rows + 0.1, fill=False, edgecolor=DOMAIN_COLOUR, lw=1.2, ls="--"
        )
    )
    label = "NVLink " + _short(domain.rsplit(".", 1)[-1] if "." in domain else domain, 10)
    axes.text(left + width - 0.1, top - 0.15, label, fontsize=5, ha="right", color=DOMAIN_COLOUR)


def _zone_box(axes: Axes, zone: str, top: float, height: float, right: float) -> None:
    from matplotlib.patches import Rectangle

    axes.add_patch(
        Rectangle((0.0, top), right + 0.5, height, fill=False, edgecolor="#263238", lw=1.4)
    )
    axes.text(0.3, top + 0.7, zone, fontsize=9, va="center", weight="bold")


def _node_row(
    axes: Axes,
    snapshot: Snapshot,
    node: int,
    left: float,
    y: float,
    owners: Mapping[int, list[_Owner]],
    layout: _Layout,
    highlight: set[str],
) -> None:
    from matplotlib.patches import Rectangle

    info = snapshot.nodes[node]
    state = "" if info.ready and not info.unschedulable else (" ⊘" if info.ready else " ✕")
    axes.text(left + 0.3, y + 0.45, _short(info.name) + state, fontsize=7, va="center")
    x0 = left + _NAME_WIDTH
    for block in nvlink_blocks(info.shape):
        start, stop = min(block), max(block)
        axes.add_patch(
            Rectangle((x0 + start, y + 0.9), stop - start + 0.9, 0.12, color=NVLINK_COLOUR, lw=0)
        )
    for gpu, gid in enumerate(snapshot.node_gpus(node)):
        _gpu_square(axes, snapshot, gid, x0 + gpu, y, owners.get(gid, []), layout, highlight)


def _short(name: str, limit: int = 16) -> str:
    return name if len(name) <= limit else name[: limit - 1] + "…"


def _gpu_square(
    axes: Axes,
    snapshot: Snapshot,
    gid: int,
    x: float,
    y: float,
    owners: Sequence[_Owner],
    layout: _Layout,
    highlight: set[str],
) -> None:
    from matplotlib.patches import Rectangle

    size = 0.85
    note = snapshot.gpu_notes.get(gid)
    usable = bool(snapshot.gpu_usable[gid])
    axes.add_patch(Rectangle((x, y), size, size, facecolor=FREE_COLOUR, lw=0))
    filled = 0.0
    for owner in owners:
        share = size * min(owner.milli, WHOLE_GPU_MILLI) / WHOLE_GPU_MILLI
        colour = layout.colours.get(owner.holder, LOOSE_COLOUR)
        axes.add_patch(Rectangle((x, y + size - filled - share), size, share, color=colour, lw=0))
        filled += share
    if not usable:
        axes.add_patch(Rectangle((x, y), size, size, facecolor=EXCLUDED_COLOUR, lw=0))
        axes.plot([x + 0.15, x + size - 0.15], [y + 0.15, y + size - 0.15], color="white", lw=1)
        axes.plot([x + 0.15, x + size - 0.15], [y + size - 0.15, y + 0.15], color="white", lw=1)
    edge, width = "#9e9e9e", 0.5
    if any(o.holder in highlight or o.pod in highlight for o in owners):
        edge, width = "#000000", 1.8
    if _is_hot(note):
        edge, width = HOT_COLOUR, 1.8
    axes.add_patch(Rectangle((x, y), size, size, fill=False, edgecolor=edge, lw=width))


def _draw_aggregated(axes: Axes, snapshot: Snapshot, layout: _Layout) -> tuple[float, float]:
    """One row per rack, one cell per node: the share of its GPUs in use."""
    from matplotlib import colormaps

    counts = np.diff(snapshot.gpu_offset)
    used = np.where(counts > 0, 1.0 - snapshot.free_whole / np.maximum(counts, 1), np.nan)
    excluded = _per_node_any(snapshot, ~snapshot.gpu_usable)
    rows: list[tuple[str, list[int]]] = []
    for zone, racks in layout.zones.items():
        for rack, nodes in racks.items():
            rows.append((f"{zone}/{rack}" if rack else zone, nodes))
    width = max((len(nodes) for _, nodes in rows), default=1)
    grid = np.full((len(rows), width), np.nan)
    for r, (_, nodes) in enumerate(rows):
        grid[r, : len(nodes)] = used[nodes]
    label_width = 14.0
    axes.imshow(
        grid,
        cmap=colormaps["Blues"],
        vmin=0.0,
        vmax=1.0,
        extent=(label_width, label_width + width, len(rows), 0),
        interpolation="nearest",
    )
    for r, (_, nodes) in enumerate(rows):
        runs = _domain_runs(snapshot, nodes, layout.domain_key)
        for first, count, _ in runs:
            _aggregated_domain(axes, label_width + first, r, count)
    for r, (name, nodes) in enumerate(rows):
        free = int(snapshot.free_whole[nodes].sum())
        total = int(counts[nodes].sum())
        axes.text(0.2, r + 0.5, f"{_short(name, 24)}  {free}/{total} free", fontsize=6, va="center")
        marked = [c for c, n in enumerate(nodes) if excluded[n]]
        if marked:
            axes.scatter(
                [label_width + c + 0.5 for c in marked],
                [r + 0.5] * len(marked),
                s=6,
                color=HOT_COLOUR,
            )
    return label_width + width, float(len(rows))


def _aggregated_domain(axes: Axes, left: float, row: int, count: int) -> None:
    from matplotlib.patches import Rectangle

    axes.add_patch(
        Rectangle(
            (left, row + 0.04), count, 0.92, fill=False, edgecolor=DOMAIN_COLOUR, lw=0.8, ls="--"
        )
    )


def _per_node_any(snapshot: Snapshot, per_gpu: np.ndarray[Any, np.dtype[np.bool_]]) -> list[bool]:
    return [
        bool(per_gpu[g.start : g.stop].any())
        for g in map(snapshot.node_gpus, range(len(snapshot.nodes)))
    ]


def _legend(axes: Axes, layout: _Layout, aggregated: bool) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles: list[Any] = []
    if aggregated:
        handles.append(Patch(facecolor="#08306b", label="node's GPUs in use (darker: more)"))
        handles.append(
            Line2D([], [], marker="o", color="w", markerfacecolor=HOT_COLOUR, label="GPUs excluded")
        )
    else:
        shown = list(layout.colours.items())[:20]
        handles += [Patch(facecolor=c, label=h) for h, c in shown]
        if len(layout.colours) > 20:
            handles.append(Patch(facecolor="white", label=f"… {len(layout.colours) - 20} more"))
        handles.append(Patch(facecolor=FREE_COLOUR, edgecolor="#9e9e9e", label="free"))
        handles.append(Patch(facecolor=EXCLUDED_COLOUR, label="excluded by telemetry"))
        handles.append(Patch(facecolor="white", edgecolor=HOT_COLOUR, lw=1.8, label="hot"))
        handles.append(Patch(facecolor=NVLINK_COLOUR, label="NVLink block"))
    if layout.domains:
        handles.append(
            Patch(facecolor="white", edgecolor=DOMAIN_COLOUR, ls="--", label="NVLink domain")
        )
    axes.legend(
        handles=handles,
        loc="upper left",
        bbox_to_anchor=(1.0, 1.0),
        fontsize=7,
        frameon=False,
    )

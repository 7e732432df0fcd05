"""Pictures (`gpusched.offline.plot`): the PNG exists, is large enough, and shows what it claims.

The checks read the PNG back and look for the colours the legend promises: each group's
colour, the excluded-GPU colour, the hot frame, the NVLink bar. (The pictures were also looked
at by a person when this was written; the colours are what a test can hold on to.)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from matplotlib import colors as mcolors
from matplotlib import image

from gpusched.api.config import SchedulerConfig
from gpusched.cli import main
from gpusched.commands import EXIT_OK
from gpusched.engine.build import _node_info, build_snapshot
from gpusched.engine.health import GpuSample
from gpusched.engine.policy import Policy
from gpusched.engine.schedule import schedule
from gpusched.inputs.objects import SAMPLE_DIR, load
from gpusched.offline.nvlink import CLIQUE_LABEL, clique, gb200_node, nvl72_nodes
from gpusched.offline.plot import (
    DOMAIN_COLOUR,
    EXCLUDED_COLOUR,
    HOT_COLOUR,
    LOOSE_COLOUR,
    NVLINK_COLOUR,
    PlotSummary,
    _domain_runs,
    nvlink_blocks,
    plot_run,
    plot_snapshot,
    with_bindings,
)
from gpusched.offline.simulate import simulate
from testing.engine import RACK, bound, cluster, gang, members, node, pod


def pixels(path: Path) -> np.ndarray:
    picture = image.imread(path)
    rgb: np.ndarray = (picture[:, :, :3] * 255).round().astype(np.int64)
    return rgb


def colour_count(rgb: np.ndarray, colour: str, tolerance: int = 2) -> int:
    """How many pixels are ``colour`` (within ``tolerance`` per channel)."""
    want = np.array([round(c * 255) for c in mcolors.to_rgb(colour)])
    return int((np.abs(rgb - want).max(axis=2) <= tolerance).sum())


def distinct_colours(rgb: np.ndarray) -> int:
    return len(np.unique(rgb.reshape(-1, 3), axis=0))


#        zone-a                 zone-b
#      /        \                 |
#   rack-1     rack-2           rack-3
#  a b c        d e             f (4090, no NVLink)  g (4 × H100)
ZONES = {
    "zone-a": {"rack-1": ["a100x8"] * 3, "rack-2": ["v100x8"] * 2},
    "zone-b": {"rack-3": ["pcie4090x8", "h100x4"]},
}


@pytest.fixture
def detailed(tmp_path: Path) -> tuple[PlotSummary, np.ndarray]:
    telemetry = {
        (f"node-{n}", g): GpuSample(temperature_c=45.0) for n in "abcdefg" for g in range(8)
    }
    telemetry[("node-b", 3)] = GpuSample(temperature_c=88.0)
    telemetry[("node-d", 5)] = GpuSample(xid_errors=79.0)
    snapshot = cluster(
        ZONES,
        bound=[bound(pod("old", gpus=2, group="old"), "node-a", [0, 1])],
        telemetry=telemetry,
    )
    pending = [*members("w", 4, gpus=4, group="train"), pod("solo", gpus=1)]
    result = schedule(snapshot, pending, [gang("train", 4, topology=RACK)], Policy())
    after = with_bindings(snapshot, result.bindings, {p.key: p for p in pending})
    path = tmp_path / "detailed.png"
    summary = plot_snapshot(after, path, highlight={"default/train"}, title="a test cluster")
    return summary, pixels(path)


def test_a_detailed_picture_is_written_and_non_trivial(
    detailed: tuple[PlotSummary, np.ndarray],
) -> None:
    summary, rgb = detailed
    assert not summary.aggregated
    assert summary.nodes == 7
    assert summary.path.stat().st_size > 20_000
    height, width, _ = rgb.shape
    assert (width > 600, height > 300) == (True, True)
    assert distinct_colours(rgb) > 50


def test_each_holder_has_its_colour_in_the_picture(
    detailed: tuple[PlotSummary, np.ndarray],
) -> None:
    summary, rgb = detailed
    assert set(summary.colours) == {"default/old", "default/train", "pods without a group"}
    assert summary.colours["pods without a group"] == LOOSE_COLOUR
    # 16 GPUs of train, 2 of old, 1 of solo: a GPU square is about 20 × 20 pixels.
    areas = {holder: colour_count(rgb, colour) for holder, colour in summary.colours.items()}
    assert areas["default/train"] > 10 * areas["default/old"] / 2 > 0
    assert areas["pods without a group"] > 100


def test_excluded_hot_and_nvlink_marks_are_drawn(
    detailed: tuple[PlotSummary, np.ndarray],
) -> None:
    _, rgb = detailed
    assert colour_count(rgb, EXCLUDED_COLOUR) > 200  # two excluded GPUs (hot b3, XID d5)
    assert colour_count(rgb, HOT_COLOUR) > 30  # one red frame
    assert colour_count(rgb, NVLINK_COLOUR) > 500  # bars under the NVLink blocks


@pytest.mark.parametrize(
    ("kind", "want"),
    [
        pytest.param("a100x8", [(0, 1, 2, 3, 4, 5, 6, 7)], id="NVSwitch: one block"),
        pytest.param("v100x8", [(0, 1, 2, 3), (4, 5, 6, 7)], id="cube-mesh: two quads"),
        pytest.param("pcie4090x8", [], id="PCIe only: none"),
    ],
)
def test_nvlink_blocks_follow_the_node_topology(kind: str, want: list[tuple[int, ...]]) -> None:
    shape = _node_info(node("n", kind)).shape
    assert list(nvlink_blocks(shape)) == want


def test_more_than_a_hundred_nodes_are_aggregated(tmp_path: Path) -> None:
    zones = {f"zone-{z}": {f"rack-{z}{r}": ["a100x8"] * 15 for r in range(4)} for z in range(2)}
    snapshot = cluster(zones)
    summary = plot_snapshot(snapshot, tmp_path / "big.png")
    rgb = pixels(tmp_path / "big.png")
    assert summary.aggregated
    assert summary.nodes == 120
    assert distinct_colours(rgb) > 20


def test_the_sample_simulation_is_drawn_with_its_groups(tmp_path: Path) -> None:
    run = simulate(load([SAMPLE_DIR]), SchedulerConfig())
    summary = plot_run(run, tmp_path / "sample.png")
    assert "ml/train-workers" in summary.colours
    assert colour_count(pixels(tmp_path / "sample.png"), summary.colours["ml/train-workers"]) > 1000


def test_explain_plot_writes_a_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "explain",
            "pg/train-workers",
            "-n",
            "ml",
            "-f",
            str(SAMPLE_DIR),
            "--plot",
            str(tmp_path / "explain.png"),
        ]
    )
    capsys.readouterr()
    assert code == EXIT_OK
    assert (tmp_path / "explain.png").stat().st_size > 10_000


def test_simulate_plot_writes_a_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["simulate", "--plot", str(tmp_path / "simulate.png")])
    out = capsys.readouterr().out
    assert code == EXIT_OK
    assert out.startswith("Cluster:")
    rgb = pixels(tmp_path / "simulate.png")
    assert colour_count(rgb, NVLINK_COLOUR) > 500


def test_nvlink_domains_are_framed_in_both_layouts(tmp_path: Path) -> None:
    """Trays of one NVLink domain (``nvidia.com/gpu.clique``) get a dashed frame: around their
    rows in the detailed picture, around their cells in the aggregated one; a tray with an
    empty clique is in no frame."""
    loose = gb200_node("spare", {CLIQUE_LABEL: ""})
    config = SchedulerConfig()
    small = build_snapshot([*nvl72_nodes(2, trays=3), loose], (), None, config)
    runs = _domain_runs(small, list(range(7)), CLIQUE_LABEL)
    assert runs == [(0, 3, clique(0)), (3, 3, clique(1))]
    plot_snapshot(small, tmp_path / "small.png")
    assert colour_count(pixels(tmp_path / "small.png"), DOMAIN_COLOUR) > 20
    plot_snapshot(build_snapshot(nvl72_nodes(8), (), None, config), tmp_path / "big.png")
    assert colour_count(pixels(tmp_path / "big.png"), DOMAIN_COLOUR) > 20
    plain = cluster({"z1": {"r1": ["a100x8"] * 2}})
    plot_snapshot(plain, tmp_path / "plain.png")
    assert colour_count(pixels(tmp_path / "plain.png"), DOMAIN_COLOUR) == 0

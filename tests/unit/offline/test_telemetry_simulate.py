"""``gpusched simulate --metrics FILE``: a saved scrape judges GPUs as Prometheus would."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpusched.cli import main
from gpusched.commands import EXIT_BAD_INPUT, EXIT_OK
from gpusched.inputs.objects import SAMPLE_DIR, load

HOT_NODE = "dgx-a1-1"


def scrape(hot: dict[tuple[str, int], float], skip: tuple[str, ...] = ()) -> str:
    """A dcgm-exporter scrape of every GPU of the embedded sample, healthy unless ``hot``."""
    lines = [
        "# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).",
        "# TYPE DCGM_FI_DEV_GPU_TEMP gauge",
    ]
    for node in load([SAMPLE_DIR]).nodes:
        if node.name in skip:
            continue
        for gpu in range(node.allocatable_resources().get("nvidia.com/gpu", 0)):
            labels = f'gpu="{gpu}",UUID="GPU-{node.name}-{gpu}",Hostname="{node.name}"'
            temp = hot.get((node.name, gpu), 40.0)
            lines += [
                f"DCGM_FI_DEV_GPU_TEMP{{{labels}}} {temp}",
                f"DCGM_FI_DEV_FB_FREE{{{labels}}} 80000",
                f"DCGM_FI_DEV_FB_USED{{{labels}}} 0",
                f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} 0",
                f'DCGM_FI_DEV_XID_ERRORS{{{labels},err_code="0"}} 0',
            ]
    lines.append('DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="not-in-the-cluster"} 40')
    return "\n".join(lines) + "\n"


def simulate_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    code = main(["simulate", *args, "-o", "json"])
    out, err = capsys.readouterr()
    assert (code, err) == (EXIT_OK, ""), err
    document: dict[str, Any] = json.loads(out)
    return document


def used_gpus(document: dict[str, Any], node: str) -> set[int]:
    return {g for b in document["bindings"] if b["node"] == node for g in b["gpus"]}


def test_a_hot_gpu_in_the_scrape_is_not_placed_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    without = simulate_json(capsys)
    assert 0 in used_gpus(without, HOT_NODE), "the story needs GPU 0 used without telemetry"
    assert "telemetry" not in without

    metrics = tmp_path / "metrics.txt"
    metrics.write_text(scrape({(HOT_NODE, 0): 91.0}))
    document = simulate_json(capsys, "--metrics", str(metrics))
    assert 0 not in used_gpus(document, HOT_NODE), document["bindings"]
    telemetry = document["telemetry"]
    assert (telemetry["source"], telemetry["up"]) == (f"file {metrics}", True)
    assert telemetry["skipped"] == {"unknown_node": 1}, telemetry


def test_a_node_missing_from_the_scrape_is_unknown_and_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    metrics = tmp_path / "metrics.txt"
    metrics.write_text(scrape({}, skip=(HOT_NODE,)))
    document = simulate_json(capsys, "--metrics", str(metrics))
    notes = [n for b in document["bindings"] if b["node"] == HOT_NODE for n in b["notes"]]
    assert notes, document["bindings"]
    assert all(n.endswith("no telemetry") for n in notes), notes


def test_table_output_names_the_telemetry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    metrics = tmp_path / "metrics.txt"
    metrics.write_text(scrape({}))
    assert main(["simulate", "--metrics", str(metrics)]) == EXIT_OK
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"Telemetry: file {metrics} up: 140 GPUs, data 0-0 s old"), first


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(None, "cannot read", id="missing file"),
        pytest.param(b"\xff\xfe\x00garbage", "cannot read", id="not UTF-8"),
    ],
)
def test_unreadable_metrics_exit_2_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes | None, message: str
) -> None:
    metrics = tmp_path / "metrics.txt"
    if content is not None:
        metrics.write_bytes(content)
    assert main(["simulate", "--metrics", str(metrics)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert str(metrics) in err, err
    assert message in err, err

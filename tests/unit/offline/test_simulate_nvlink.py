"""``gpusched simulate`` on NVLink domains: the sample's NVL72 story, and where each segment
of a segmented gang landed (table and ``-o json``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpusched.cli import main
from gpusched.commands import EXIT_OK
from gpusched.inputs.objects import SAMPLE_DIR
from gpusched.offline.nvlink import CLIQUE_LABEL, clique

CLUSTER = SAMPLE_DIR / "clusters" / "sample"
STORY = SAMPLE_DIR / "workloads" / "04-nvl72-domain"


def run(capsys: pytest.CaptureFixture[str], *args: str | Path) -> str:
    code = main(["simulate", *map(str, args)])
    out, err = capsys.readouterr()
    assert (code, err) == (EXIT_OK, ""), err
    return out


def test_the_nvl72_story_fills_the_domain_and_names_the_spare_tray(
    capsys: pytest.CaptureFixture[str],
) -> None:
    document = json.loads(run(capsys, CLUSTER, STORY, "-o", "json"))
    groups = {g["name"]: g for g in document["podGroups"]}
    assert groups["ml/llm-pretrain"]["placement"] == {CLIQUE_LABEL: clique(1)}
    nodes = {b["node"] for b in document["bindings"] if b["pod"].startswith("ml/llm-pretrain-")}
    assert nodes == {f"gb200-c1-{i:02d}" for i in range(1, 19)}
    sweep = groups["ml/llm-sweep"]
    assert sweep["phase"] == "Pending"
    assert sweep["attempts"][0] == (
        "in no nvidia.com/gpu.clique domain: 1 node has it empty (gb200-c1-spare)"
    )


def segmented_story(tmp_path: Path) -> Path:
    group = {
        "apiVersion": "scheduling.gpusched.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "seg", "namespace": "ml"},
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": 8}},
            "schedulingConstraints": {"topology": [{"key": CLIQUE_LABEL, "segmentSize": 4}]},
        },
    }
    pods: list[dict[str, Any]] = []
    for i in range(8):
        body = yaml.safe_load((STORY / "pods.yaml").read_text().split("---")[1])
        body["metadata"].update(name=f"seg-{i}", labels={"scheduling.gpusched.io/pod-group": "seg"})
        pods.append(body)
    path = tmp_path / "seg.yaml"
    path.write_text(yaml.safe_dump_all([group, *pods]))
    return path


def test_a_segmented_gang_says_where_each_segment_landed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    story = segmented_story(tmp_path)
    document = json.loads(run(capsys, CLUSTER, story, "-o", "json"))
    (seg,) = [g for g in document["podGroups"] if g["name"] == "ml/seg"]
    assert seg["phase"] == "Scheduled"
    assert [len(s["pods"]) for s in seg["segments"]] == [4, 4]
    assert {s["domain"].rsplit("/", 1)[-1] for s in seg["segments"]} == {clique(1)}
    table = run(capsys, CLUSTER, story)
    assert "  ml/seg: 8 of 8 pending pods placed in" in table
    assert "as 2 segments: " in table

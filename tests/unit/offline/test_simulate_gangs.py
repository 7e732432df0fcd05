"""`gpusched simulate` on snapshots of clusters whose gangs other projects wrote: the same
objects the operator reads (upstream Workload API, Volcano, coscheduling, Kueue), placed as the
operator places them (tests/unit/scheduler/test_group_sources.py tells the same stories)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpusched.cli import main
from gpusched.commands import EXIT_OK
from testing.gangs import (
    coscheduling_member,
    coscheduling_pod_group,
    kueue_member,
    upstream_member,
    upstream_pod_group,
    volcano_member,
    volcano_pod_group,
)
from testing.manifests import node, pod

RACKS = {"a": "rack-1", "b": "rack-2", "c": "rack-2"}


def run(tmp_path: Path, capsys: pytest.CaptureFixture[str], *objects: Any) -> dict[str, Any]:
    nodes = [node(name, rack=rack) for name, rack in RACKS.items()]
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all([*nodes, *objects]))
    code = main(["simulate", str(path), "-o", "json"])
    out, err = capsys.readouterr()
    assert (code, err) == (EXIT_OK, "")
    document: dict[str, Any] = json.loads(out)
    return document


def racks_of(document: dict[str, Any]) -> dict[str, str]:
    return {b["pod"].split("/")[1]: RACKS[b["node"]] for b in document["bindings"]}


@pytest.mark.parametrize(
    ("story", "group", "member"),
    [
        ("upstream PodGroup", upstream_pod_group("train", 4), upstream_member),
        ("Volcano PodGroup", volcano_pod_group("train", 4), volcano_member),
        ("coscheduling PodGroup", coscheduling_pod_group("train", 4), coscheduling_member),
    ],
)
def test_a_gang_of_four_lands_whole_in_the_one_rack_it_fits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], story: str, group: Any, member: Any
) -> None:
    pods = [member(f"train-{i}", 4, "train") for i in range(4)]
    document = run(tmp_path, capsys, group, *pods)
    assert racks_of(document) == {f"train-{i}": "rack-2" for i in range(4)}, story


def test_pods_of_an_upstream_group_missing_from_the_snapshot_wait(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pods = [upstream_member(f"train-{i}", 1, "train") for i in range(2)]
    document = run(tmp_path, capsys, *pods, pod("loose", 1))
    assert racks_of(document) == {"loose": "rack-1"}
    waiting = {u["pod"]: u["message"] for u in document["unschedulable"]}
    assert "k8s:train not found" in waiting["default/train-0"]


def test_an_invalid_volcano_group_is_reported_naming_its_field_and_the_rest_placed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = run(
        tmp_path,
        capsys,
        volcano_pod_group("bad", 0, key=None),
        volcano_member("bad-0", 1, "bad"),
        pod("loose", 1),
    )
    assert racks_of(document) == {"loose": "rack-1"}
    [bad] = [g for g in document["podGroups"] if g["name"] == "default/volcano:bad"]
    assert bad["reason"] == "Invalid"
    assert "PodGroup.scheduling.volcano.sh default/bad: spec.minMember" in bad["message"]


def test_a_kueue_group_is_placed_whole_where_its_node_selector_says(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rack_2 = {"topology.example.com/rack": "rack-2"}
    pods = [kueue_member(f"k-{i}", 4, "batch", 4, selector=rack_2) for i in range(4)]
    document = run(tmp_path, capsys, *pods)
    assert racks_of(document) == {f"k-{i}": "rack-2" for i in range(4)}
    short = [kueue_member(f"s-{i}", 1, "short", 3) for i in range(2)]
    document = run(tmp_path, capsys, *short)
    assert document["bindings"] == []


def test_explain_tells_how_to_complete_or_create_a_foreign_group(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = [node(name, rack=rack) for name, rack in RACKS.items()]
    path = tmp_path / "cluster.yaml"
    members = [volcano_member(f"t-{i}", 4, "train") for i in range(4)]
    orphan = upstream_member("orphan", 1, "missing")
    path.write_text(yaml.safe_dump_all([*nodes, volcano_pod_group("train", 5), *members, orphan]))
    assert main(["explain", "pod/t-0", "-n", "default", "-f", str(path)]) == EXIT_OK
    out = capsys.readouterr().out
    assert "create 1 more valid pod(s) annotated scheduling.k8s.io/group-name=train" in out
    assert main(["explain", "pod/orphan", "-n", "default", "-f", str(path)]) == EXIT_OK
    out = capsys.readouterr().out
    assert "create the scheduling.k8s.io group default/missing" in out

"""Owner grouping in `gpusched simulate`: pods of ours that name no group, in a namespace where
it is on (``ownerGroups.namespaces``), join one gang per top owner, sized from the owner as its
controller sizes the pods it makes (`gpusched.api.owners`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpusched.cli import main
from gpusched.commands import EXIT_OK
from testing.manifests import RACK, node, pod

RACKS = {"a": "rack-1", "b": "rack-2", "c": "rack-2"}
ON = {"ownerGroups": {"namespaces": ["default"]}}


def owned(name: str, gpus: int, kind: str, owner: str, api: str = "batch/v1", **kw: Any) -> Any:
    body = pod(name, gpus, **kw)
    reference = {"apiVersion": api, "kind": kind, "name": owner, "uid": f"uid-{owner}"}
    body["metadata"]["ownerReferences"] = [{**reference, "controller": True}]
    return body


def obj(api: str, kind: str, name: str, spec: Any, owner: Any = None, **annotations: str) -> Any:
    metadata: dict[str, Any] = {"name": name, "namespace": "default"}
    if owner is not None:
        metadata["ownerReferences"] = [{**owner, "controller": True}]
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": api, "kind": kind, "metadata": metadata, "spec": spec}


def run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], config: Any, *objects: Any
) -> dict[str, Any]:
    nodes = [node(name, rack=rack) for name, rack in RACKS.items()]
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all([*nodes, *objects]))
    settings = tmp_path / "config.yaml"
    settings.write_text(yaml.safe_dump(config))
    code = main(["simulate", str(path), "--config", str(settings), "-o", "json"])
    out, err = capsys.readouterr()
    assert (code, err) == (EXIT_OK, "")
    document: dict[str, Any] = json.loads(out)
    return document


def racks_of(document: dict[str, Any]) -> dict[str, str]:
    return {b["pod"].split("/")[1]: RACKS[b["node"]] for b in document["bindings"]}


def job(name: str, parallelism: int, **annotations: str) -> Any:
    return obj("batch/v1", "Job", name, {"parallelism": parallelism}, **annotations)


def test_a_jobs_pods_are_one_gang_sized_from_its_parallelism(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pods = [owned(f"j-{i}", 4, "Job", "train") for i in range(4)]
    topology = {"scheduling.gpusched.io/topology-key": RACK}
    document = run(tmp_path, capsys, ON, job("train", 4, **topology), *pods)
    assert racks_of(document) == {f"j-{i}": "rack-2" for i in range(4)}
    short = run(tmp_path, capsys, ON, job("train", 5), *pods)
    assert short["bindings"] == []


def test_without_owner_grouping_the_same_pods_are_placed_one_by_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pods = [owned(f"j-{i}", 4, "Job", "train") for i in range(4)]
    document = run(tmp_path, capsys, {}, job("train", 5), *pods)
    assert len(document["bindings"]) == 4


def test_a_jobsets_pods_walk_through_their_jobs_to_one_gang(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    jobset_ref = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "js"}
    replicated = [{"name": "w", "replicas": 2, "template": {"spec": {"parallelism": 2}}}]
    jobset = obj(
        "jobset.x-k8s.io/v1alpha2",
        "JobSet",
        "js",
        {"replicatedJobs": replicated},
        **{"scheduling.gpusched.io/topology-key": RACK},
    )
    jobs = [obj("batch/v1", "Job", f"js-w-{j}", {"parallelism": 2}, jobset_ref) for j in range(2)]
    pods = [owned(f"js-w-{j}-{i}", 4, "Job", f"js-w-{j}") for j in range(2) for i in range(2)]
    document = run(tmp_path, capsys, ON, jobset, *jobs, *pods)
    assert set(racks_of(document).values()) == {"rack-2"}
    assert len(document["bindings"]) == 4
    groups = {g["name"] for g in document["podGroups"]}
    assert "default/owner:JobSet.js" in groups


def test_an_owner_chain_that_loops_is_named_and_the_rest_is_placed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a_ref = {"apiVersion": "example.com/v1", "kind": "Thing", "name": "a"}
    b_ref = {"apiVersion": "example.com/v1", "kind": "Thing", "name": "b"}
    a = obj("example.com/v1", "Thing", "a", {}, b_ref)
    b = obj("example.com/v1", "Thing", "b", {}, a_ref)
    looped = owned("looped", 1, "Thing", "a", api="example.com/v1")
    document = run(tmp_path, capsys, ON, a, b, looped, pod("loose", 1))
    assert racks_of(document) == {"loose": "rack-1"}
    waiting = {u["pod"]: u["message"] for u in document["unschedulable"]}
    assert "metadata.ownerReferences" in waiting["default/looped"]
    assert "loops" in waiting["default/looped"]


def test_an_owner_of_an_unknown_kind_makes_a_gang_of_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    deployment_ref = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}
    replica_set = obj("apps/v1", "ReplicaSet", "web-1", {}, deployment_ref)
    pods = [owned(f"web-{i}", 1, "ReplicaSet", "web-1", api="apps/v1") for i in range(2)]
    document = run(tmp_path, capsys, ON, replica_set, *pods)
    assert len(document["bindings"]) == 2
    [group] = [g for g in document["podGroups"] if g["name"] == "default/owner:Deployment.web"]
    assert group["phase"] == "Scheduled"

"""`gpusched simulate` end to end: YAML in, decisions out (DESIGN §5).

The embedded sample's stories are checked against the sample's own YAML (node labels, GPU
links), so a changed sample fails here with a message saying which story broke. Bad input is a
table of files written into ``tmp_path``: each must exit 2 naming the file, the object and the
field. Everything runs in-process through `gpusched.cli.main`, except one real run of the
installed ``gpusched`` console script.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpusched.api.config import SchedulerConfig
from gpusched.cli import main
from gpusched.commands import EXIT_BAD_INPUT, EXIT_OK
from gpusched.simulate import SAMPLE_DIR, load, run

RACK = "topology.example.com/rack"
ZONE = "topology.kubernetes.io/zone"
TOPOLOGY = "gpusched.io/gpu-topology"
PHASES = {"Pending", "Scheduled", "Running", "Succeeded", "Failed", "Unschedulable"}
POD_KEY = re.compile(r"^[a-z0-9-]+/[a-z0-9.-]+$")


def simulate(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    code = main(["simulate", *map(str, args)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def simulate_json(capsys: pytest.CaptureFixture[str], *args: str | Path) -> dict[str, Any]:
    code, out, err = simulate(capsys, *args, "-o", "json")
    assert (code, err) == (EXIT_OK, ""), err
    document: dict[str, Any] = json.loads(out)
    return document


def sample_objects(kind: str) -> list[dict[str, Any]]:
    """Objects of ``kind`` in the embedded sample, read with plain YAML (not our parser)."""
    found = []
    for path in sorted(SAMPLE_DIR.rglob("*.yaml")):
        found += [d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == kind]
    return found


def by_pod(document: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {b["pod"]: b for b in document["bindings"]}


def group(document: Mapping[str, Any], name: str) -> dict[str, Any]:
    matches: list[dict[str, Any]] = [g for g in document["podGroups"] if g["name"] == name]
    assert len(matches) == 1, f"{name} in {[g['name'] for g in document['podGroups']]}"
    return matches[0]


# ----- the embedded sample -------------------------------------------------------------------


@pytest.fixture(scope="module")
def sample() -> dict[str, Any]:
    """The sample's JSON document, computed once the way ``-o json`` computes it."""
    result = run(load([SAMPLE_DIR]), SchedulerConfig()).result.to_dict()
    document: dict[str, Any] = json.loads(json.dumps(result))
    return document


def test_the_embedded_sample_runs_and_prints_json_of_the_documented_shape(
    capsys: pytest.CaptureFixture[str],
) -> None:
    document = simulate_json(capsys)
    assert set(document) == {"bindings", "podGroups", "unschedulable"}
    for binding in document["bindings"]:
        assert {"pod", "node", "gpus"} <= set(binding), binding
        assert POD_KEY.match(binding["pod"]), binding
        assert isinstance(binding["node"], str), binding
        assert binding["node"], binding
        gpus = binding["gpus"]
        assert all(type(g) is int and g >= 0 for g in gpus), binding
        assert len(set(gpus)) == len(gpus), binding
    for decision in document["podGroups"]:
        assert {"name", "phase", "placement", "reason", "message"} <= set(decision), decision
        assert POD_KEY.match(decision["name"]), decision
        assert decision["phase"] in PHASES, decision
        assert all(
            isinstance(k, str) and isinstance(v, str) for k, v in decision["placement"].items()
        )
        for key in ("reason", "message"):
            assert isinstance(decision[key], str), decision
            assert decision[key], decision
    for failure in document["unschedulable"]:
        assert {"pod", "reason", "message"} <= set(failure), failure
        assert POD_KEY.match(failure["pod"]), failure
        assert failure["reason"], failure
        assert failure["message"], failure


def test_the_sample_places_every_pending_pod_or_says_why(sample: dict[str, Any]) -> None:
    pending = {
        f"{p['metadata']['namespace']}/{p['metadata']['name']}"
        for p in sample_objects("Pod")
        if not p["spec"].get("nodeName")
    }
    bound = [b["pod"] for b in sample["bindings"]]
    failed = [u["pod"] for u in sample["unschedulable"]]
    assert sorted(bound + failed) == sorted(pending)


def test_sample_story_workers_share_one_rack_and_the_driver_their_zone(
    sample: dict[str, Any],
) -> None:
    labels = {n["metadata"]["name"]: n["metadata"]["labels"] for n in sample_objects("Node")}
    bindings = by_pod(sample)
    workers = [bindings[f"ml/train-worker-{i}"] for i in range(8)]
    racks = {(labels[w["node"]][ZONE], labels[w["node"]][RACK]) for w in workers}
    assert len(racks) == 1, f"workers spread over {racks}"
    ((zone, rack),) = racks
    driver = bindings["ml/train-driver-0"]
    assert labels[driver["node"]][ZONE] == zone
    assert group(sample, "ml/train-workers")["placement"] == {ZONE: zone, RACK: rack}
    assert group(sample, "ml/train-zone")["placement"] == {ZONE: zone}
    assert group(sample, "ml/train-driver")["placement"][ZONE] == zone
    assert all(len(w["gpus"]) == 2 for w in workers)
    assert driver["gpus"] == []


def test_sample_story_finetune_gets_four_nvlink_gpus_beside_the_bound_pods(
    sample: dict[str, Any],
) -> None:
    nodes = {n["metadata"]["name"]: n for n in sample_objects("Node")}
    finetune = by_pod(sample)["research/finetune-0"]
    gpus = finetune["gpus"]
    assert len(gpus) == 4
    links = json.loads(nodes[finetune["node"]]["metadata"]["annotations"][TOPOLOGY])["links"]
    assert all(links[i][j].startswith("NV") for i in gpus for j in gpus if i != j), gpus
    assert (finetune["linkTier"], finetune["bestLinkTier"]) == ("NVLINK", "NVLINK"), finetune
    running = {
        p["spec"]["nodeName"]: p["metadata"].get("annotations", {}).get("gpusched.io/gpus")
        for p in sample_objects("Pod")
        if p["spec"].get("nodeName")
    }
    held = running.get(finetune["node"])
    if held:
        assert not set(gpus) & {int(g) for g in held.split(",")}, "GPUs of a running pod reused"
    assert len(by_pod(sample)["serving/embeddings-0"]["gpus"]) == 1


def test_sample_story_pretrain_is_unschedulable_with_one_line_per_rack(
    sample: dict[str, Any],
) -> None:
    racks = sorted(
        {
            f"{n['metadata']['labels'][ZONE]}/{n['metadata']['labels'][RACK]}"
            for n in sample_objects("Node")
        }
    )
    pretrain = group(sample, "ml/pretrain")
    assert (pretrain["phase"], pretrain["reason"]) == ("Unschedulable", "Unschedulable")
    assert pretrain["placement"] == {}
    tried = [line.split(":", 1)[0] for line in pretrain["attempts"]]
    assert tried == racks, pretrain["attempts"]
    failed = {u["pod"]: u for u in sample["unschedulable"]}
    for i in range(4):
        assert failed[f"ml/pretrain-{i}"]["reason"] == "Unschedulable"
        assert f"ml/pretrain-{i}" not in by_pod(sample)


def test_yaml_output_is_the_json_document(
    capsys: pytest.CaptureFixture[str], sample: dict[str, Any]
) -> None:
    code, out, _ = simulate(capsys, "-o", "yaml")
    assert code == EXIT_OK
    assert yaml.safe_load(out) == sample


def test_table_output_states_the_key_facts(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = simulate(capsys)
    assert (code, err) == (EXIT_OK, "")
    for fact in (
        "8 nodes, 64 GPUs",
        "BINDINGS",
        "ml/train-worker-7",
        "research/finetune-0",
        "NVLINK",
        "POD GROUPS",
        "ml/train-zone",
        "zone-a/rack-1",
        "ml/pretrain",
        "Unschedulable",
        "zone-b/rack-2",
        "UNSCHEDULABLE",
        "ml/pretrain-3",
        "see ml/pretrain above",
    ):
        assert fact in out, f"{fact!r} missing from:\n{out}"


def test_the_installed_console_script_runs_the_sample() -> None:
    script = Path(sys.executable).parent / "gpusched"
    command = str(script) if script.exists() else shutil.which("gpusched")
    assert command, "the gpusched console script is not installed (pip install -e .)"
    done = subprocess.run(
        [command, "simulate", "-o", "json"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == EXIT_OK, done.stderr
    assert set(json.loads(done.stdout)) == {"bindings", "podGroups", "unschedulable"}


# ----- bad input: exit 2, naming file, object and field ---------------------------------------


def pod_yaml(
    name: str = "p",
    *,
    namespace: str = "ml",
    requests: Mapping[str, object] | None = None,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    node: str | None = None,
    scheduler: str = "gpusched",
    phase: str | None = None,
) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(labels or {}),
            "annotations": dict(annotations or {}),
        },
        "spec": {
            "schedulerName": scheduler,
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"requests": requests or {}}}
            ],
        },
    }
    if node is not None:
        pod["spec"]["nodeName"] = node
    if phase is not None:
        pod["status"] = {"phase": phase}
    return pod


def node_yaml(name: str = "n1", *, gpus: int = 8, cpu: str = "32") -> dict[str, Any]:
    allocatable = {"cpu": cpu, "memory": "256Gi", "pods": "110"}
    if gpus:
        allocatable["nvidia.com/gpu"] = str(gpus)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {ZONE: "z1", RACK: "r1"}},
        "status": {"allocatable": allocatable},
    }


def group_yaml(kind: str, name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.gpusched.io/v1alpha1",
        "kind": kind,
        "metadata": {"name": name, "namespace": "ml"},
        "spec": dict(spec),
    }


def documents(*objects: Mapping[str, Any]) -> str:
    return yaml.safe_dump_all(list(objects), sort_keys=False)


@dataclass(frozen=True)
class BadInput:
    id: str
    files: Mapping[str, str]
    args: Sequence[str] = ("{tmp}/cluster.yaml",)
    want_in_message: Sequence[str] = ()


GANG = {"gang": {"minCount": 2}}
BAD_INPUTS = [
    BadInput(
        "broken YAML syntax names the file and the line",
        {"cluster.yaml": "kind: Pod\nmetadata: {name: p\n"},
        want_in_message=("cluster.yaml", "not valid YAML", "line 2"),
    ),
    BadInput(
        "a Pod asking for cpu 'lots' names the pod and the request",
        {"cluster.yaml": documents(node_yaml(), pod_yaml(requests={"cpu": "lots"}))},
        want_in_message=(
            "cluster.yaml",
            "document 2",
            "Pod ml/p",
            "spec.containers[0].resources.requests.cpu",
            "'lots'",
        ),
    ),
    BadInput(
        "a PodGroup with both gang and basic names the policy",
        {
            "cluster.yaml": documents(
                group_yaml("PodGroup", "g", {"schedulingPolicy": {**GANG, "basic": {}}})
            )
        },
        want_in_message=("cluster.yaml", "PodGroup ml/g", "spec.schedulingPolicy", "gang", "basic"),
    ),
    BadInput(
        "a PodGroup with two topology keys names the constraint",
        {
            "cluster.yaml": documents(
                group_yaml(
                    "PodGroup",
                    "g",
                    {
                        "schedulingPolicy": GANG,
                        "schedulingConstraints": {"topology": [{"key": ZONE}, {"key": RACK}]},
                    },
                )
            )
        },
        want_in_message=("cluster.yaml", "PodGroup ml/g", "spec.schedulingConstraints.topology"),
    ),
    BadInput(
        "an unknown field in a CompositePodGroup spec is named",
        {
            "cluster.yaml": documents(
                group_yaml(
                    "CompositePodGroup",
                    "c",
                    {"schedulingPolicy": {"gang": {"minGroupCount": 2}}, "colour": "blue"},
                )
            )
        },
        want_in_message=("cluster.yaml", "CompositePodGroup ml/c", "spec.colour"),
    ),
    BadInput(
        "a Workload template with minCount 0 names the template field",
        {
            "cluster.yaml": documents(
                group_yaml(
                    "Workload",
                    "w",
                    {
                        "podGroupTemplates": [
                            {"name": "a", "schedulingPolicy": {"gang": {"minCount": 0}}}
                        ]
                    },
                )
            )
        },
        want_in_message=(
            "cluster.yaml",
            "Workload ml/w",
            "spec.podGroupTemplates[0].schedulingPolicy.gang.minCount",
        ),
    ),
    BadInput(
        "a Node whose allocatable memory is not a quantity names the node",
        {"cluster.yaml": documents({**node_yaml(), "status": {"allocatable": {"memory": "x"}}})},
        want_in_message=("cluster.yaml", "Node n1", "status.allocatable.memory"),
    ),
    BadInput(
        "a document without kind says so",
        {"cluster.yaml": documents(node_yaml(), {"apiVersion": "v1", "metadata": {"name": "x"}})},
        want_in_message=("cluster.yaml", "document 2", "kind"),
    ),
    BadInput(
        "a pending Pod with a GPU share of 1500 milli names file, pod and annotation",
        {
            "cluster.yaml": documents(
                node_yaml(), pod_yaml(annotations={"gpusched.io/gpu-milli": "1500"})
            )
        },
        want_in_message=("cluster.yaml", "Pod ml/p", "gpusched.io/gpu-milli", "1500"),
    ),
    BadInput(
        "a bound Pod with GPUs 'zero' names file, pod and annotation",
        {
            "cluster.yaml": documents(
                node_yaml(),
                pod_yaml(
                    node="n1",
                    requests={"nvidia.com/gpu": 1},
                    annotations={"gpusched.io/gpus": "zero"},
                ),
            )
        },
        want_in_message=("cluster.yaml", "Pod ml/p", "gpusched.io/gpus", "zero"),
    ),
    BadInput(
        "a path that does not exist is named",
        {},
        args=("{tmp}/does-not-exist.yaml",),
        want_in_message=("does-not-exist.yaml", "no such file"),
    ),
    BadInput(
        "a config with an unknown key names the key",
        {"config.yaml": "numaPolicy: best-effort\nbogusKey: 1\n"},
        args=("--config", "{tmp}/config.yaml"),
        want_in_message=("config.yaml", "bogusKey"),
    ),
    BadInput(
        "a config value out of range names the field",
        {"config.yaml": "telemetry:\n  minFreeMemoryRatio: 1.5\n"},
        args=("--config", "{tmp}/config.yaml"),
        want_in_message=("config.yaml", "telemetry.minFreeMemoryRatio", "1"),
    ),
    BadInput(
        "a config that is not a mapping says so",
        {"config.yaml": "- best-effort\n"},
        args=("--config", "{tmp}/config.yaml"),
        want_in_message=("config.yaml", "mapping"),
    ),
    BadInput(
        "a config file that does not exist is named",
        {},
        args=("--config", "{tmp}/missing-config.yaml"),
        want_in_message=("missing-config.yaml",),
    ),
]


@pytest.mark.parametrize("case", BAD_INPUTS, ids=[c.id for c in BAD_INPUTS])
def test_bad_input_exits_2_naming_file_object_and_field(
    case: BadInput, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, text in case.files.items():
        (tmp_path / name).write_text(text)
    args = [arg.replace("{tmp}", str(tmp_path)) for arg in case.args]
    code, out, err = simulate(capsys, *args)
    assert code == EXIT_BAD_INPUT, out
    assert out == ""
    missing = [part for part in case.want_in_message if part not in err]
    assert not missing, f"{missing} not in {err!r}"
    assert err.startswith("gpusched simulate: "), err


# ----- what counts and what is ignored -------------------------------------------------------


@dataclass(frozen=True)
class ClusterCase:
    id: str
    objects: Sequence[Mapping[str, Any]]
    want_bindings: Mapping[str, str] = field(default_factory=dict)
    """pod → node."""
    want_unschedulable: Mapping[str, str] = field(default_factory=dict)
    """pod → a phrase of its message."""
    want_in_table: Sequence[str] = ()


GPU1 = {"nvidia.com/gpu": 1}
ALL_GPUS = {"nvidia.com/gpu": 8}
CLUSTER_CASES = [
    ClusterCase(
        "an empty node takes the pod",
        [node_yaml(), pod_yaml("new", requests=GPU1)],
        want_bindings={"ml/new": "n1"},
    ),
    ClusterCase(
        "a bound pod holding every GPU leaves none for the pending pod",
        [
            node_yaml(),
            pod_yaml("old", requests=ALL_GPUS, node="n1"),
            pod_yaml("new", requests=GPU1),
        ],
        want_unschedulable={"ml/new": "insufficient nvidia.com/gpu"},
    ),
    ClusterCase(
        "a bound pod holding every cpu leaves none for the pending pod",
        [
            node_yaml(gpus=0),
            pod_yaml("old", requests={"cpu": "32"}, node="n1"),
            pod_yaml("new", requests={"cpu": "1"}),
        ],
        want_unschedulable={"ml/new": "insufficient cpu"},
    ),
    ClusterCase(
        "a finished pod holds nothing",
        [
            node_yaml(),
            pod_yaml("done", requests=ALL_GPUS, node="n1", phase="Succeeded"),
            pod_yaml("crashed", requests=ALL_GPUS, node="n1", phase="Failed"),
            pod_yaml("new", requests=ALL_GPUS),
        ],
        want_bindings={"ml/new": "n1"},
    ),
    ClusterCase(
        "a finished pending pod is not placed",
        [node_yaml(), pod_yaml("never", requests=GPU1, phase="Failed")],
    ),
    ClusterCase(
        "a pending pod of another scheduler is neither placed nor reported",
        [node_yaml(), pod_yaml("theirs", requests=GPU1, scheduler="default-scheduler")],
        want_in_table=("ignored 1 × Pod (other scheduler, pending)",),
    ),
    ClusterCase(
        "a bound pod of another scheduler still uses its GPUs",
        [
            node_yaml(),
            pod_yaml("theirs", requests=ALL_GPUS, node="n1", scheduler="default-scheduler"),
            pod_yaml("new", requests=GPU1),
        ],
        want_unschedulable={"ml/new": "insufficient nvidia.com/gpu"},
    ),
    ClusterCase(
        "a kind: List is read item by item",
        [{"apiVersion": "v1", "kind": "List", "items": [node_yaml(), pod_yaml(requests=GPU1)]}],
        want_bindings={"ml/p": "n1"},
    ),
    ClusterCase(
        "kinds gpusched does not use are counted and skipped",
        [
            node_yaml(),
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}},
            pod_yaml(requests=GPU1),
        ],
        want_bindings={"ml/p": "n1"},
        want_in_table=("ignored 1 × Namespace",),
    ),
]


@pytest.mark.parametrize("case", CLUSTER_CASES, ids=[c.id for c in CLUSTER_CASES])
def test_what_simulate_counts_and_ignores(
    case: ClusterCase, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "cluster.yaml").write_text(documents(*case.objects))
    document = simulate_json(capsys, tmp_path / "cluster.yaml")
    assert {b["pod"]: b["node"] for b in document["bindings"]} == case.want_bindings
    failed = {u["pod"]: u["message"] for u in document["unschedulable"]}
    assert set(failed) == set(case.want_unschedulable), failed
    for pod, phrase in case.want_unschedulable.items():
        assert phrase in failed[pod], failed[pod]
    code, table, _ = simulate(capsys, tmp_path / "cluster.yaml")
    assert code == EXIT_OK
    for fact in case.want_in_table:
        assert fact in table, table


def test_folders_are_read_recursively_and_other_files_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "snapshot"
    (root / "nodes" / "rack-1").mkdir(parents=True)
    (root / "workloads" / "team" / "deep").mkdir(parents=True)
    (root / "nodes" / "rack-1" / "n1.yaml").write_text(documents(node_yaml("n1")))
    (root / "nodes" / "n2.yml").write_text(documents(node_yaml("n2", gpus=0)))
    (root / "workloads" / "team" / "deep" / "pods.yaml").write_text(
        documents(pod_yaml("a", requests=GPU1), pod_yaml("b", requests={"cpu": "1"}))
    )
    (root / "README.md").write_text("kind: [this is not read\n")
    document = simulate_json(capsys, root)
    assert {b["pod"] for b in document["bindings"]} == {"ml/a", "ml/b"}
    assert by_pod(document)["ml/a"]["node"] == "n1"
    assert document["unschedulable"] == []


def test_several_paths_make_one_cluster(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "nodes.yaml").write_text(documents(node_yaml()))
    (tmp_path / "pods.yaml").write_text(documents(pod_yaml(requests=GPU1)))
    document = simulate_json(capsys, tmp_path / "nodes.yaml", tmp_path / "pods.yaml")
    assert by_pod(document) == {
        "ml/p": {
            "pod": "ml/p",
            "node": "n1",
            "gpus": [0],
            "linkTier": None,
            "bestLinkTier": None,
            "notes": [],
        }
    }


def test_a_config_file_changes_the_scheduler_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "config.yaml").write_text("schedulerName: other\n")
    (tmp_path / "cluster.yaml").write_text(
        documents(node_yaml(), pod_yaml("ours"), pod_yaml("theirs", scheduler="other"))
    )
    document = simulate_json(
        capsys, "--config", tmp_path / "config.yaml", tmp_path / "cluster.yaml"
    )
    assert [b["pod"] for b in document["bindings"]] == ["ml/theirs"]

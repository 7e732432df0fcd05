"""`gpusched simulate` end to end: YAML in, decisions out.

The embedded sample's stories are checked against the sample's own YAML (node labels, GPU
links), so a changed sample fails here with a message saying which story broke. Bad input is a
table of files written into ``tmp_path``: each must exit 2 naming the file, the object and the
field. Everything runs in-process through `gpusched.cli.main`, except one real run of the
installed ``gpusched`` console script.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpusched.api.config import SchedulerConfig
from gpusched.cli import main
from gpusched.commands import EXIT_BAD_INPUT, EXIT_OK
from gpusched.inputs.objects import SAMPLE_DIR, load
from gpusched.offline.report import document as json_document
from gpusched.offline.simulate import simulate as run_engine

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
    result = json_document(run_engine(load([SAMPLE_DIR]), SchedulerConfig()))
    document: dict[str, Any] = json.loads(json.dumps(result))
    return document


def test_the_embedded_sample_runs_and_prints_json_of_the_documented_shape(
    capsys: pytest.CaptureFixture[str],
) -> None:
    document = simulate_json(capsys)
    assert set(document) == {"bindings", "podGroups", "unschedulable", "preemptions"}
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
    # Every root group left unschedulable says whether evicting lower-priority pods would
    # help it (the sample's pods all have priority 0: none would).
    left = {d["name"] for d in document["podGroups"] if d["reason"] == "Unschedulable"}
    roots = {p["preemptor"] for p in document["preemptions"]}
    assert roots, left
    assert roots <= left, (roots, left)
    for plan in document["preemptions"]:
        assert {"preemptor", "outcome", "message", "victims", "budget"} <= set(plan), plan
        assert plan["outcome"] == "NoLowerPriority", plan
        assert plan["victims"] == [], plan


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
    # The operator's vocabulary: Pending (reason Unschedulable) until scheduleTimeoutSeconds.
    assert (pretrain["phase"], pretrain["reason"]) == ("Pending", "Unschedulable")
    assert pretrain["placement"] == {}
    tried = [line.split(":", 1)[0] for line in pretrain["attempts"]]
    assert tried == racks, pretrain["attempts"]
    failed = {u["pod"]: u for u in sample["unschedulable"]}
    for i in range(4):
        assert failed[f"ml/pretrain-{i}"]["reason"] == "Unschedulable"
        assert f"ml/pretrain-{i}" not in by_pod(sample)


SAMPLE_METRICS = SAMPLE_DIR / "clusters" / "sample" / "dcgm-exporter.metrics.txt"
TEMPERATURE = re.compile(r'^DCGM_FI_DEV_GPU_TEMP\{gpu="(\d+)".*Hostname="([^"]+)"\} (\S+)$')


def test_the_shipped_scrape_moves_pods_off_its_hot_gpu(
    capsys: pytest.CaptureFixture[str], sample: dict[str, Any]
) -> None:
    """The README's --metrics example: the scrape makes one GPU too hot, read here with a
    plain regex; the pod the sample put there goes elsewhere."""
    hot = [
        (m[2], int(m[1]))
        for line in SAMPLE_METRICS.read_text().splitlines()
        if (m := TEMPERATURE.match(line))
        and float(m[3]) > SchedulerConfig().telemetry.temperature_limit_c
    ]
    assert len(hot) == 1, hot
    (node, gpu) = hot[0]

    def on_hot(document: Mapping[str, Any]) -> list[str]:
        return [b["pod"] for b in document["bindings"] if b["node"] == node and gpu in b["gpus"]]

    assert on_hot(sample), f"no pod of the sample uses {node} GPU {gpu}: the scrape shows nothing"
    document = simulate_json(capsys, "--metrics", SAMPLE_METRICS)
    assert document["telemetry"]["gpus"] == 64, document["telemetry"]
    assert on_hot(document) == []
    moved = on_hot(sample)[0]
    assert moved in by_pod(document), f"{moved} is no longer placed at all"


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
        "27 nodes, 140 GPUs",
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
GPU1 = {"nvidia.com/gpu": 1}
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
        "the same Pod in two files with different GPU requests names both files and the field",
        {
            "a.yaml": documents(node_yaml(), pod_yaml(requests=GPU1)),
            "b.yaml": documents(pod_yaml(requests={"nvidia.com/gpu": 2})),
        },
        args=("{tmp}/a.yaml", "{tmp}/b.yaml"),
        want_in_message=(
            "Pod ml/p",
            "given twice",
            "a.yaml: document 2",
            "b.yaml: document 1",
            "spec.containers[0].resources.requests[nvidia.com/gpu]",
        ),
    ),
    BadInput(
        "the same Node twice with different labels names the label",
        {
            "cluster.yaml": documents(
                node_yaml(),
                {**node_yaml(), "metadata": {"name": "n1", "labels": {ZONE: "z2", RACK: "r1"}}},
            )
        },
        want_in_message=("Node n1", "document 1", "document 2", f"metadata.labels[{ZONE}]"),
    ),
    BadInput(
        "a typo in a Pod's resources (requets) is an unknown field, not a pod without GPUs",
        {
            "cluster.yaml": documents(
                node_yaml(),
                {
                    **pod_yaml(),
                    "spec": {
                        "schedulerName": "gpusched",
                        "containers": [
                            {"name": "main", "resources": {"requets": {"nvidia.com/gpu": 8}}}
                        ],
                    },
                },
            )
        },
        want_in_message=(
            "cluster.yaml",
            "document 2",
            "Pod ml/p",
            "spec.containers[0].resources.requets",
            "unknown field",
            "did you mean requests?",
        ),
    ),
    BadInput(
        "a typo in a toleration (efect) is an unknown field",
        {
            "cluster.yaml": documents(
                node_yaml(),
                {
                    **pod_yaml(),
                    "spec": {
                        **pod_yaml()["spec"],
                        "tolerations": [
                            {"key": "gpu", "operator": "Exists", "efect": "NoSchedule"}
                        ],
                    },
                },
            )
        },
        want_in_message=("Pod ml/p", "spec.tolerations[0].efect", "unknown field"),
    ),
    BadInput(
        "a typo in a node affinity term (matchExpression) is an unknown field",
        {
            "cluster.yaml": documents(
                node_yaml(),
                {
                    **pod_yaml(),
                    "spec": {
                        **pod_yaml()["spec"],
                        "affinity": {
                            "nodeAffinity": {
                                "requiredDuringSchedulingIgnoredDuringExecution": {
                                    "nodeSelectorTerms": [{"matchExpression": []}]
                                }
                            }
                        },
                    },
                },
            )
        },
        want_in_message=(
            "Pod ml/p",
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
            ".nodeSelectorTerms[0].matchExpression",
            "unknown field",
        ),
    ),
    BadInput(
        "a misspelt schedulerName is an unknown field, not a pod of another scheduler",
        {
            "cluster.yaml": documents(
                node_yaml(),
                {**pod_yaml(), "spec": {"schedulerNme": "gpusched", "containers": [{"name": "m"}]}},
            )
        },
        want_in_message=("Pod ml/p", "spec.schedulerNme", "did you mean schedulerName?"),
    ),
    BadInput(
        "an input with no Node names the paths",
        {"pods.yaml": documents(pod_yaml(requests=GPU1))},
        args=("{tmp}/pods.yaml",),
        want_in_message=("pods.yaml", "no Node", "1 documents"),
    ),
    BadInput(
        "a folder with no Kubernetes objects names the folder",
        {"notes.txt": "nothing here\n"},
        args=("{tmp}",),
        want_in_message=("no Node", "0 documents"),
    ),
    BadInput(
        "--metrics given a YAML file is not a scrape",
        {"cluster.yaml": documents(node_yaml()), "metrics.yaml": documents(node_yaml())},
        args=("{tmp}/cluster.yaml", "--metrics", "{tmp}/metrics.yaml"),
        want_in_message=("metrics.yaml", "Prometheus text format", "line 1"),
    ),
    BadInput(
        "--metrics given another exporter's scrape names what is missing",
        {
            "cluster.yaml": documents(node_yaml()),
            "node.metrics": "# HELP node_load1 x\n# TYPE node_load1 gauge\nnode_load1 0.5\n",
        },
        args=("{tmp}/cluster.yaml", "--metrics", "{tmp}/node.metrics"),
        want_in_message=("node.metrics", "DCGM_FI_DEV_"),
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
        want_unschedulable={"ml/new": "Insufficient nvidia.com/gpu"},
    ),
    ClusterCase(
        "a bound pod holding every cpu leaves none for the pending pod",
        [
            node_yaml(gpus=0),
            pod_yaml("old", requests={"cpu": "32"}, node="n1"),
            pod_yaml("new", requests={"cpu": "1"}),
        ],
        want_unschedulable={"ml/new": "Insufficient cpu"},
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
        want_unschedulable={"ml/new": "Insufficient nvidia.com/gpu"},
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


# ----- invalid groups: reported Invalid, the rest placed (as the operator does) ---------------


@dataclass(frozen=True)
class InvalidGroup:
    id: str
    group: Mapping[str, Any]
    want_kind: str
    want_field: str


INVALID_GROUPS = [
    InvalidGroup(
        "a PodGroup with both gang and basic",
        group_yaml("PodGroup", "g", {"schedulingPolicy": {**GANG, "basic": {}}}),
        "PodGroup",
        "spec.schedulingPolicy",
    ),
    InvalidGroup(
        "a PodGroup with two topology keys",
        group_yaml(
            "PodGroup",
            "g",
            {
                "schedulingPolicy": GANG,
                "schedulingConstraints": {"topology": [{"key": ZONE}, {"key": RACK}]},
            },
        ),
        "PodGroup",
        "spec.schedulingConstraints.topology",
    ),
    InvalidGroup(
        "a CompositePodGroup with an unknown spec field",
        group_yaml(
            "CompositePodGroup", "g", {"schedulingPolicy": {"gang": {"minGroupCount": 2}}, "x": 1}
        ),
        "CompositePodGroup",
        "spec.x",
    ),
]


@pytest.mark.parametrize("case", INVALID_GROUPS, ids=[c.id for c in INVALID_GROUPS])
def test_an_invalid_group_is_reported_invalid_and_the_rest_is_placed(
    case: InvalidGroup, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    member = pod_yaml("member", requests=GPU1, labels={"scheduling.gpusched.io/pod-group": "g"})
    (tmp_path / "cluster.yaml").write_text(
        documents(node_yaml(), pod_yaml("ok", requests=GPU1), case.group, member)
    )
    document = simulate_json(capsys, tmp_path / "cluster.yaml")
    assert {b["pod"]: b["node"] for b in document["bindings"]} == {"ml/ok": "n1"}
    invalid = group(document, "ml/g")
    assert (invalid["kind"], invalid["phase"], invalid["reason"]) == (
        case.want_kind,
        "Pending",
        "Invalid",
    )
    assert case.want_field in invalid["message"], invalid["message"]
    failed = {u["pod"]: u for u in document["unschedulable"]}
    assert failed["ml/member"]["reason"] == "Invalid", failed
    code, table, _ = simulate(capsys, tmp_path / "cluster.yaml")
    assert code == EXIT_OK
    assert "Invalid" in table, table
    assert case.want_field in table, table


def test_an_invalid_workload_is_reported_and_the_rest_is_placed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workload = group_yaml(
        "Workload",
        "w",
        {"podGroupTemplates": [{"name": "a", "schedulingPolicy": {"gang": {"minCount": 0}}}]},
    )
    (tmp_path / "cluster.yaml").write_text(
        documents(node_yaml(), workload, pod_yaml("ok", requests=GPU1))
    )
    document = simulate_json(capsys, tmp_path / "cluster.yaml")
    assert {b["pod"]: b["node"] for b in document["bindings"]} == {"ml/ok": "n1"}
    [entry] = document["invalid"]
    assert (entry["kind"], entry["name"], entry["reason"]) == ("Workload", "ml/w", "Invalid")
    assert "spec.podGroupTemplates[0].schedulingPolicy.gang.minCount" in entry["message"]
    code, table, _ = simulate(capsys, tmp_path / "cluster.yaml")
    assert code == EXIT_OK
    assert "INVALID WORKLOADS" in table, table
    assert "ml/w" in table, table


# ----- the same objects twice -----------------------------------------------------------------


def test_a_folder_and_a_file_inside_it_are_read_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two copies of every object: one node, not two; each pod placed once, never two pods
    on the same GPUs."""
    (tmp_path / "cluster.yaml").write_text(
        documents(node_yaml(gpus=2), pod_yaml("a", requests=GPU1), pod_yaml("b", requests=GPU1))
    )
    once = simulate_json(capsys, tmp_path)
    twice = simulate_json(capsys, tmp_path, tmp_path / "cluster.yaml")
    assert twice == once
    assert sorted(g for b in twice["bindings"] for g in b["gpus"]) == [0, 1]
    code, table, _ = simulate(capsys, tmp_path, tmp_path / "cluster.yaml")
    assert code == EXIT_OK
    assert "1 nodes, 2 GPUs; 2 pending pods" in table, table


def test_a_bound_pod_given_twice_does_not_crash_and_counts_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "cluster.yaml").write_text(
        documents(
            node_yaml(gpus=2),
            pod_yaml("old", requests=GPU1, node="n1", annotations={"gpusched.io/gpus": "0"}),
            pod_yaml("new", requests=GPU1),
        )
    )
    document = simulate_json(capsys, tmp_path, tmp_path / "cluster.yaml")
    assert by_pod(document)["ml/new"]["gpus"] == [1]


def test_explain_reads_a_folder_and_a_file_inside_it_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "cluster.yaml").write_text(
        documents(
            node_yaml(gpus=2),
            pod_yaml("old", requests=GPU1, node="n1", annotations={"gpusched.io/gpus": "0"}),
            pod_yaml("a", requests=GPU1),
        )
    )
    code = main(
        ["explain", "pod/a", "-n", "ml", "-f", str(tmp_path), str(tmp_path / "cluster.yaml")]
    )
    captured = capsys.readouterr()
    assert (code, captured.err) == (EXIT_OK, ""), captured.err
    assert "would be placed on n1 GPUs 1" in captured.out, captured.out


def test_explain_from_files_reports_invalid_groups_and_workloads_as_the_operator_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workload = group_yaml(
        "Workload",
        "w",
        {"podGroupTemplates": [{"name": "a", "schedulingPolicy": {"gang": {"minCount": 0}}}]},
    )
    invalid = group_yaml("PodGroup", "g", {"schedulingPolicy": {**GANG, "basic": {}}})
    (tmp_path / "cluster.yaml").write_text(documents(node_yaml(), invalid, workload))
    for target, want in (
        ("pg/g", "spec.schedulingPolicy"),
        ("wl/w", "spec.podGroupTemplates[0].schedulingPolicy.gang.minCount"),
    ):
        code = main(["explain", target, "-n", "ml", "-f", str(tmp_path / "cluster.yaml")])
        captured = capsys.readouterr()
        assert (code, captured.err) == (EXIT_OK, ""), captured.err
        assert "Invalid" in captured.out, captured.out
        assert want in captured.out, captured.out


# ----- preemption, as simulate shows it -------------------------------------------------------


def _preemption_cluster(class_name: str) -> str:
    # n1, n2 (one rack): each full with a low-priority 8-GPU pod; "urgent" asks for 8 GPUs at
    # the priority of the class named.
    low = []
    for i, node in enumerate(("n1", "n2")):
        body = pod_yaml(f"low-{i}", requests={"nvidia.com/gpu": 8}, node=node)
        body["spec"]["priority"] = 10
        low.append(body)
    urgent = pod_yaml(
        "urgent-0",
        requests={"nvidia.com/gpu": 8},
        labels={"scheduling.gpusched.io/pod-group": "urgent"},
    )
    high = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "train-high"},
        "value": 1000,
    }
    gang = {"schedulingPolicy": {"gang": {"minCount": 1}}, "priorityClassName": class_name}
    return documents(
        node_yaml("n1"), node_yaml("n2"), high, *low, urgent, group_yaml("PodGroup", "urgent", gang)
    )


def test_simulate_lists_the_victims_that_would_make_room_for_a_higher_priority_gang(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "cluster.yaml").write_text(_preemption_cluster("train-high"))
    document = simulate_json(capsys, tmp_path / "cluster.yaml")
    (plan,) = document["preemptions"]
    assert (plan["preemptor"], plan["outcome"], plan["priority"]) == ("ml/urgent", "Planned", 1000)
    (victim,) = plan["victims"]
    assert victim["pod"] in ("ml/low-0", "ml/low-1")
    assert victim["priority"] == 10
    assert [b["node"] for b in plan["nominated"]] == [victim["node"]]
    assert document["bindings"] == []  # offline nothing is evicted, so nothing is placed
    code, table, _ = simulate(capsys, tmp_path / "cluster.yaml")
    assert code == EXIT_OK
    assert "PREEMPTIONS" in table
    assert "ml/urgent" in table.split("PREEMPTIONS", 1)[1]


def test_a_priority_class_that_does_not_exist_plans_no_eviction(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "cluster.yaml").write_text(_preemption_cluster("no-such-class"))
    document = simulate_json(capsys, tmp_path / "cluster.yaml")
    (plan,) = document["preemptions"]
    assert (plan["outcome"], plan["victims"]) == ("PriorityUnresolved", [])
    assert "no-such-class" in plan["message"], plan["message"]
    assert "priorityClassName" in plan["message"], plan["message"]


def test_explain_names_the_victims_a_pending_gang_would_evict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "cluster.yaml").write_text(_preemption_cluster("train-high"))
    code = main(["explain", "pg/urgent", "-n", "ml", "-f", str(tmp_path / "cluster.yaml")])
    out = capsys.readouterr().out
    assert code == EXIT_OK, out
    (line,) = [x for x in out.splitlines() if x.strip().startswith("preemption:")]
    assert line.strip().startswith("preemption: Planned:"), line
    evictions = [x.strip() for x in out.splitlines() if x.strip().startswith("- evict ")]
    assert len(evictions) == 1, out
    assert "(priority 10)" in evictions[0], evictions

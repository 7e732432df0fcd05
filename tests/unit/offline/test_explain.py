"""`gpusched explain`: one story per reason the engine gives, compared with expected text.

Each story writes a small cluster as YAML into ``tmp_path``, runs ``gpusched explain TARGET -f
…`` in-process and compares the whole output with ``tests/data/explain/<story>.txt``. After a
deliberate change of wording, regenerate with ``GPUSCHED_REGENERATE=1 pytest
tests/unit/offline/test_explain.py`` and read the diff: every file is meant to be read by a person.

Most stories use this cluster (DGX A100 nodes: 8 GPUs, NVSwitch, 4 NUMA nodes of 2 GPUs):

    #           zone-a                 zone-b
    #          /      \\                  |
    #      rack-1    rack-2            rack-3
    #     a1-1 a1-2   a2-1            b3-1 b3-2
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpusched.cli import main
from gpusched.commands import EXIT_BAD_INPUT, EXIT_OK
from gpusched.commands.explain import kubectl_main
from gpusched.offline.explain import Target
from testing import manifests
from testing.manifests import RACK, ZONE, composite, node

EXPECTED = Path(__file__).parents[2] / "data" / "explain"
REGENERATE = os.environ.get("GPUSCHED_REGENERATE") == "1"
BROKEN = {manifests.TOPOLOGY: '{"gpus": []}'}
"""A topology annotation that parses but names no GPU."""
MAINTENANCE = {"key": "maintenance", "effect": "NoSchedule"}
Doc = dict[str, Any]


# ----- the stories' objects: namespace ml, created on New Year's Day --------------------------

NAMESPACE = "ml"


def pod(name: str, *, on: str | None = None, **kwargs: Any) -> Doc:
    """A pod of the stories' namespace; ``on`` binds it, and a bound pod is Running."""
    kwargs.setdefault("namespace", NAMESPACE)
    phase = "Running" if on else "Pending"
    return manifests.pod(name, node=on, created="2026-01-01T00:00:00Z", phase=phase, **kwargs)


def gang_pods(group: str, count: int, gpus: int, **kwargs: Any) -> list[Doc]:
    return [pod(f"{group}-{i}", gpus=gpus, group=group, **kwargs) for i in range(count)]


def pod_group(name: str, min_count: int, **kwargs: Any) -> Doc:
    return manifests.pod_group(name, min_count, namespace=NAMESPACE, **kwargs)


def workload(name: str, templates: list[Doc]) -> Doc:
    return {
        "apiVersion": "scheduling.gpusched.io/v1alpha1",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"podGroupTemplates": templates},
    }


def racks(**changes: Doc) -> list[Doc]:
    """The cluster drawn above; ``changes`` replace nodes by name (a1_1 → a1-1)."""
    nodes = {
        "a1-1": node("a1-1", "zone-a", "rack-1"),
        "a1-2": node("a1-2", "zone-a", "rack-1"),
        "a2-1": node("a2-1", "zone-a", "rack-2"),
        "b3-1": node("b3-1", "zone-b", "rack-3"),
        "b3-2": node("b3-2", "zone-b", "rack-3"),
    }
    nodes.update({k.replace("_", "-"): v for k, v in changes.items()})
    return list(nodes.values())


def busy(node_name: str, gpus: Sequence[int], *, cpu: str = "4") -> Doc:
    """A bound group-less pod holding ``gpus`` of ``node_name``."""
    at = list(gpus)
    return pod(f"busy-{node_name}", gpus=len(at), on=node_name, at=at, cpu=cpu, namespace="other")


# ----- the stories ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Story:
    name: str
    """Also the expected file's name."""
    documents: Callable[[], list[Doc]]
    target: str
    args: tuple[str, ...] = ()
    metrics: str | None = None
    config: Doc = field(default_factory=dict)


STORIES = [
    Story(
        "scheduled-gang-in-one-rack",
        lambda: [*racks(), pod_group("train", 2), *gang_pods("train", 2, 8)],
        "pg/train",
    ),
    Story(
        "rack-too-small-for-the-gang",
        # Three 8-GPU pods in one rack: no rack has three nodes.
        lambda: [*racks(), pod_group("big", 3), *gang_pods("big", 3, 8)],
        "pg/big",
    ),
    Story(
        "rack-full-but-would-fit-if-freed",
        # Two 8-GPU pods per rack: rack-1 and rack-3 could hold them, but both are half used.
        lambda: [
            *racks(),
            busy("a1-1", [0, 1, 2, 3]),
            busy("b3-1", [0]),
            busy("a2-1", range(8)),
            pod_group("pair", 2),
            *gang_pods("pair", 2, 8),
        ],
        "pg/pair",
    ),
    Story(
        "waiting-for-pods",
        lambda: [*racks(), pod_group("half", 4), *gang_pods("half", 2, 1)],
        "pg/half",
    ),
    Story(
        "gated-pod-of-a-gang",
        lambda: [
            *racks(),
            pod_group("tuned", 2),
            pod("tuned-0", gpus=4, group="tuned"),
            pod("tuned-1", gpus=4, group="tuned", gates=["example.com/quota"]),
        ],
        "pod/tuned-1",
    ),
    Story(
        "invalid-parent",
        lambda: [*racks(), pod_group("orphan", 1, parent="missing"), *gang_pods("orphan", 1, 1)],
        "pg/orphan",
    ),
    Story(
        "pod-of-a-missing-group",
        lambda: [*racks(), pod("stray-0", gpus=1, group="nowhere")],
        "pod/stray-0",
    ),
    Story(
        "pod-larger-than-any-node",
        lambda: [*racks(), pod("huge", gpus=16)],
        "pod/huge",
    ),
    Story(
        "loose-pod-short-of-gpus",
        lambda: [
            *racks(),
            *(busy(n, range(5)) for n in ("a1-1", "a1-2", "a2-1", "b3-1")),
            busy("b3-2", range(6)),
            pod("solo", gpus=4),
        ],
        "pod/solo",
    ),
    Story(
        "cordoned-and-not-ready-nodes",
        lambda: [
            *racks(
                a1_1=node("a1-1", "zone-a", "rack-1", cordoned=True),
                b3_2=node("b3-2", "zone-b", "rack-3", ready=False),
                a2_1=node("a2-1", "zone-a", "rack-2", taints=[MAINTENANCE]),
            ),
            pod_group("duo", 2),
            *gang_pods("duo", 2, 8),
        ],
        "pg/duo",
    ),
    Story(
        "node-selector-matches-nothing",
        lambda: [
            *racks(),
            pod_group("picky", 1),
            *gang_pods("picky", 1, 1, selector={"gpu": "h200"}),
        ],
        "pg/picky",
    ),
    Story(
        "no-node-has-the-topology-label",
        lambda: [
            *racks(),
            pod_group("blocky", 1, key="topology.example.com/block"),
            *gang_pods("blocky", 1, 1),
        ],
        "pg/blocky",
    ),
    Story(
        "insufficient-cpu",
        # Pods of 40 cores; bound pods hold 30 of the 64 on a1-1, a1-2 and b3-1.
        lambda: [
            *racks(),
            *(busy(n, [0], cpu="30") for n in ("a1-1", "a1-2", "b3-1")),
            pod_group("hungry", 2),
            *gang_pods("hungry", 2, 1, cpu="40"),
        ],
        "pg/hungry",
    ),
    Story(
        "gang-of-pods-larger-than-any-node",
        # 100 cores a pod, 64 a node: the engine refuses the pods, the gang waits for them.
        lambda: [*racks(), pod_group("giant", 2), *gang_pods("giant", 2, 1, cpu="100")],
        "pg/giant",
    ),
    Story(
        "broken-topology-annotation",
        lambda: [
            node("odd-1", "zone-a", "rack-9", kind="gpu8", annotations=BROKEN),
            node("odd-2", "zone-a", "rack-9", kind="gpu8", annotations=BROKEN),
            pod_group("linked", 2),
            *gang_pods("linked", 2, 2),
        ],
        "pg/linked",
    ),
    Story(
        "single-numa-node-policy",
        # 4 GPUs per pod in one NUMA node: a DGX A100 has 2 GPUs per NUMA node.
        lambda: [*racks(), pod_group("numa", 2), *gang_pods("numa", 2, 4)],
        "pg/numa",
        config={"numaPolicy": "single-numa-node"},
    ),
    Story(
        "hot-gpu-excluded-by-telemetry",
        # rack-3 would be the only rack with two free nodes, but b3-2's GPU 3 runs at 86 °C.
        lambda: [
            *racks(),
            busy("a1-1", range(8)),
            busy("a2-1", range(8)),
            pod_group("warm", 2),
            *gang_pods("warm", 2, 8),
        ],
        "pg/warm",
        metrics="hot",
    ),
    Story(
        "bound-pods-pin-the-gang",
        # Two of four pods run on a1-1; the rest must join them in rack-1, which is full.
        lambda: [
            *racks(),
            pod_group("pinned", 4),
            pod("pinned-0", gpus=4, group="pinned", on="a1-1", at=[0, 1, 2, 3]),
            pod("pinned-1", gpus=4, group="pinned", on="a1-1", at=[4, 5, 6, 7]),
            busy("a1-2", range(6)),
            *(pod(f"pinned-{i}", gpus=4, group="pinned") for i in (2, 3)),
        ],
        "pg/pinned",
    ),
    Story(
        "composite-whose-children-do-not-fit-one-zone",
        lambda: [
            *racks(),
            composite("job", 2, key=ZONE, namespace=NAMESPACE),
            pod_group("job-a", 2, parent="job"),
            pod_group("job-b", 2, parent="job"),
            *gang_pods("job-a", 2, 8),
            *gang_pods("job-b", 2, 8),
        ],
        "cpg/job",
    ),
    Story(
        "workload-with-one-group-placed",
        lambda: [
            *racks(),
            workload(
                "serve",
                [
                    {"name": "small", "schedulingPolicy": {"gang": {"minCount": 1}}},
                    {
                        "name": "large",
                        "schedulingPolicy": {"gang": {"minCount": 3}},
                        "schedulingConstraints": {"topology": [{"key": RACK}]},
                    },
                ],
            ),
            *gang_pods("serve-small", 1, 1),
            *gang_pods("serve-large", 3, 8),
        ],
        "wl/serve",
    ),
    Story(
        "pod-that-would-be-placed",
        lambda: [*racks(), pod("quick", gpus=2)],
        "pod/quick",
    ),
]

HOT_METRICS = "\n".join(
    f'DCGM_FI_DEV_GPU_TEMP{{gpu="{g}",Hostname="{n}"}} {86 if (n, g) == ("b3-2", 3) else 40}'
    for n in ("a1-1", "a1-2", "a2-1", "b3-1", "b3-2")
    for g in range(8)
)


def run_story(
    story: Story, folder: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str]:
    (folder / "cluster.yaml").write_text(yaml.safe_dump_all(story.documents(), sort_keys=False))
    args = ["explain", story.target, "-n", "ml", "-f", str(folder / "cluster.yaml"), *story.args]
    if story.metrics == "hot":
        (folder / "metrics.txt").write_text(HOT_METRICS + "\n")
        args += ["--metrics", str(folder / "metrics.txt")]
    if story.config:
        (folder / "config.yaml").write_text(yaml.safe_dump(story.config))
        args += ["--config", str(folder / "config.yaml")]
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("story", STORIES, ids=[s.name for s in STORIES])
def test_explain_prints_the_expected_text(
    story: Story, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_story(story, tmp_path, capsys)
    assert (code, err) == (EXIT_OK, "")
    expected = EXPECTED / f"{story.name}.txt"
    if REGENERATE:
        expected.parent.mkdir(parents=True, exist_ok=True)
        expected.write_text(out)
    assert out == expected.read_text(), f"explain output differs from {expected}"


def test_every_reason_code_of_the_engine_has_a_story() -> None:
    from gpusched.engine.result import ENGINE_REASONS

    texts = "\n".join(p.read_text() for p in EXPECTED.glob("*.txt"))
    missing = [r.value for r in ENGINE_REASONS if f"reason: {r.value}" not in texts]
    assert not missing, f"no explain story shows reason(s) {missing}"


def test_the_group_text_is_the_status_last_attempt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The message and per-domain lines are the engine's decision, as the operator writes
    them into ``status.lastAttempt``."""
    story = next(s for s in STORIES if s.name == "rack-too-small-for-the-gang")
    (tmp_path / "c.yaml").write_text(yaml.safe_dump_all(story.documents(), sort_keys=False))
    code = main(["explain", "pg/big", "-n", "ml", "-f", str(tmp_path / "c.yaml"), "-o", "json"])
    document = json.loads(capsys.readouterr().out)
    assert code == EXIT_OK
    from gpusched.api.config import SchedulerConfig
    from gpusched.inputs.objects import load
    from gpusched.offline.simulate import simulate

    result = simulate(load([tmp_path / "c.yaml"]), SchedulerConfig()).result
    decision = next(g for g in result.groups if g.name == "ml/big")
    group = document["groups"][0]
    assert group["decision"]["message"] == decision.message
    assert group["decision"]["attempts"] == list(decision.attempts)


def test_explain_and_simulate_speak_one_output_vocabulary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    story = next(s for s in STORIES if s.name == "rack-too-small-for-the-gang")
    (tmp_path / "c.yaml").write_text(yaml.safe_dump_all(story.documents(), sort_keys=False))
    base = ["explain", "pg/big", "-n", "ml", "-f", str(tmp_path / "c.yaml")]
    printed = {}
    for output in ("table", "json", "yaml", "text"):
        assert main([*base, "-o", output]) == EXIT_OK
        printed[output] = capsys.readouterr().out
    assert main(base) == EXIT_OK
    assert capsys.readouterr().out == printed["table"] == printed["text"]
    assert yaml.safe_load(printed["yaml"]) == json.loads(printed["json"])
    assert main(["simulate", str(tmp_path / "c.yaml"), "-o", "table"]) == EXIT_OK
    capsys.readouterr()
    for command in ("explain", "simulate"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        assert "-o {table,json,yaml}" in capsys.readouterr().out, command


@pytest.mark.parametrize(
    ("target", "want"),
    [
        pytest.param("pg/nope", "PodGroup ml/nope not found", id="unknown group"),
        pytest.param("wl/nope", "Workload ml/nope not found", id="unknown workload"),
        pytest.param("pod/nope", "Pod ml/nope not found", id="unknown pod"),
        pytest.param("deploy/x", "want KIND/NAME", id="unknown kind"),
        pytest.param("cpg/train", "CompositePodGroup ml/train not found", id="wrong kind"),
    ],
)
def test_unknown_targets_exit_2_saying_what_is_missing(
    target: str, want: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "c.yaml").write_text(yaml.safe_dump_all([*racks(), pod_group("train", 1)]))
    code = main(["explain", target, "-n", "ml", "-f", str(tmp_path / "c.yaml")])
    captured = capsys.readouterr()
    assert code == EXIT_BAD_INPUT
    assert want in captured.err


def test_the_kubectl_plugin_runs_the_same_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    story = STORIES[1]
    code, out, _ = run_story(story, tmp_path, capsys)
    plugin = kubectl_main(
        ["explain", story.target, "-n", "ml", "-f", str(tmp_path / "cluster.yaml")]
    )
    assert (plugin, capsys.readouterr().out) == (code, out)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("pg/train", Target("PodGroup", "ml", "train")),
        ("podgroup/train", Target("PodGroup", "ml", "train")),
        ("cpg/job", Target("CompositePodGroup", "ml", "job")),
        ("wl/serve", Target("Workload", "ml", "serve")),
        ("pod/other/x", Target("Pod", "other", "x")),
    ],
)
def test_targets_are_read_like_kubectl_arguments(text: str, want: Target) -> None:
    assert Target.parse(text, "ml") == want

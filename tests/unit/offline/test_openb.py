"""The openb replay (`gpusched.offline.openb`, `gpusched.offline.replay`, `gpusched bench
openb`): the published protocol's pieces on small synthetic traces — arrivals (seeded shuffle,
inflation to 130 %, thinning), the per-pod record, bad input named by row — and the command end
to end on a tiny cluster.

Coverage:

| piece            | stories                                                             |
|------------------|---------------------------------------------------------------------|
| arrivals         | name order then seeded shuffle; inflation stops below 130 %;        |
|                  | thinning above it; copies are distinct pods; CPU-only traces        |
| replay record    | arrived counts failures, allocation does not; fragmentation matches |
|                  | the measure; the headline is read at 100 % arrived                  |
| bad input        | missing column, non-integer, share on 2 GPUs, unknown GPU model,    |
|                  | GPU node without model, 0-GPU node left out with a note             |
| gpu_spec         | a constrained pod lands only on its model                           |
| topology         | synthetic annotations parse; multi-GPU pods get the best tier       |
| command          | table, published column, JSON, exit codes                           |
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from gpusched.api.topology import parse_topology_annotation
from gpusched.commands.bench import main
from gpusched.engine import fragmentation
from gpusched.offline.openb import (
    TraceError,
    load_nodes,
    load_trace,
    read_node_rows,
    synthetic_topology,
)
from gpusched.offline.replay import arrivals, replay, run
from testing.engine import pod

NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model"
POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec"


def write(folder: Path, name: str, header: str, rows: Sequence[str]) -> Path:
    path = folder / name
    path.write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
    return path


def tiny_trace(folder: Path, pods: Sequence[str]) -> Path:
    """Two nodes: a 2-GPU T4 node and a 1-GPU P100 node (3 GPUs, capacity 3000 milli)."""
    write(
        folder,
        "openb_node_list_gpu_node.csv",
        NODE_HEADER,
        ["n-a,8000,32768,2,T4", "n-b,4000,16384,1,P100"],
    )
    write(folder, "openb_pod_list_default.csv", POD_HEADER, pods)
    return folder


# ----- arrivals ----------------------------------------------------------------------------------


def test_arrivals_shuffle_the_name_sorted_pods_with_the_seed() -> None:
    pods = [pod(f"p{i:02d}", gpus=1) for i in range(20)]
    shuffled = list(reversed(pods))  # the input order must not matter: pods are sorted first
    first, again = arrivals(shuffled, 1_000_000, 42), arrivals(pods, 1_000_000, 42)
    assert [p.key for p in first] == [p.key for p in again]
    assert [p.key for p in first[:20]] != sorted(p.key for p in pods), "not shuffled"
    assert [p.key for p in arrivals(pods, 1_000_000, 43)] != [p.key for p in first]


def test_inflation_stops_before_the_request_passes_130_percent() -> None:
    pods = [pod(f"p{i}", gpus=1) for i in range(4)] + [pod("share", milli=500)]
    capacity = 10_000  # 10 GPUs: 13,000 milli is the limit; the trace asks 4,500
    sequence = arrivals(pods, capacity, 7)
    total = sum(p.gpu_demand_milli for p in sequence)
    assert 13_000 - 1000 < total <= 13_000, total
    assert len({p.key for p in sequence}) == len(sequence), "every copy must be its own pod"
    copies = list(sequence[5:])
    assert all("#" in p.key for p in copies), [p.key for p in copies]


def test_a_trace_above_130_percent_is_thinned_at_random() -> None:
    pods = [pod(f"p{i}", gpus=2) for i in range(10)]  # 20,000 milli on a 10-GPU cluster
    sequence = arrivals(pods, 10_000, 42)
    assert sum(p.gpu_demand_milli for p in sequence) == 12_000
    assert len(sequence) == 6
    assert all("#" not in p.key for p in sequence)


def test_a_cpu_only_trace_is_shuffled_and_not_inflated() -> None:
    pods = [pod(f"c{i}") for i in range(5)]
    assert sorted(p.key for p in arrivals(pods, 10_000, 42)) == sorted(p.key for p in pods)


# ----- the per-pod record ----------------------------------------------------------------------


def test_replay_records_arrived_allocated_and_fragmented_per_pod(tmp_path: Path) -> None:
    folder = tiny_trace(
        tmp_path,
        [
            "big,1000,1024,2,1000,",  # 2 GPUs: only n-a can take it
            "share,1000,1024,1,500,",  # a share: lands on n-b (the only free GPU)
            "again,1000,1024,2,1000,",  # fails: no node has 2 free GPUs left
        ],
    )
    trace = load_trace(folder, "default")
    record = replay(trace.snapshot, trace.pods, _config("fgd"), trace.workload)
    assert record.placed.tolist() == [True, True, False]
    assert record.arrived_pct == pytest.approx([200 / 3, 250 / 3, 450 / 3])
    assert record.allocated_pct == pytest.approx([200 / 3, 250 / 3, 250 / 3])
    snapshot = trace.snapshot.copy()
    nodes = np.arange(2)
    cpu = snapshot.allocatable[:, snapshot.columns["cpu"]]
    empty = fragmentation.fragmentation(
        fragmentation.free_matrix(snapshot, nodes), cpu, trace.workload
    )
    # After the first pod n-a is full; n-b's GPU is whole and idle: a fragment for 2-GPU tasks.
    want = empty[1] / 3000 * 100
    assert record.fragmented_pct[0] == pytest.approx(want)
    # At 100 % arrived (between pod 2 at 83 % and pod 3 at 150 %) 83.3 % is allocated.
    assert record.unallocated == pytest.approx(100 - 250 / 3)


def _config(policy: str) -> object:
    from gpusched.offline.replay import policy_config

    return policy_config(policy, 42)


def test_run_is_deterministic_for_a_seed(tmp_path: Path) -> None:
    rows = [f"p{i},1000,1024,1,{300 + 100 * (i % 5)}," for i in range(12)]
    trace = load_trace(tiny_trace(tmp_path, rows), "default")
    first, second = run(trace, "gpusched", 42), run(trace, "gpusched", 42)
    assert first.allocated_pct.tolist() == second.allocated_pct.tolist()


# ----- bad input -------------------------------------------------------------------------------


@dataclass(frozen=True)
class BadCase:
    id: str
    nodes: list[str]
    pods: list[str]
    want: str


BAD = [
    BadCase(
        "a pod list without gpu_milli names the missing column on line 1",
        ["n-a,8000,32768,2,T4"],
        [],
        "openb_pod_list_default.csv:1: missing column(s) gpu_milli",
    ),
    BadCase(
        "a non-integer cpu names the line and the column",
        ["n-a,8000,32768,2,T4"],
        ["ok,1000,1024,1,1000,", "bad,lots,1024,1,1000,"],
        "openb_pod_list_default.csv:3: cpu_milli: not an integer: 'lots'",
    ),
    BadCase(
        "a share of a GPU on two GPUs is refused with its line",
        ["n-a,8000,32768,2,T4"],
        ["odd,1000,1024,2,500,"],
        "openb_pod_list_default.csv:2: gpu_milli: 500 < 1000 with num_gpu 2",
    ),
    BadCase(
        "a pod asking for a GPU model no node has is refused with its line",
        ["n-a,8000,32768,2,T4"],
        ["ok,1000,1024,1,1000,T4", "a100,1000,1024,1,1000,A100|H100"],
        "openb_pod_list_default.csv:3: gpu_spec: pod a100 asks for GPU model(s) A100|H100; "
        "the cluster has only T4",
    ),
    BadCase(
        "a GPU node without a model is refused with its line",
        ["n-a,8000,32768,2,T4", "n-b,8000,32768,2,"],
        [],
        "openb_node_list_gpu_node.csv:3: model: node n-b has GPUs but no GPU model",
    ),
]


@pytest.mark.parametrize("case", BAD, ids=lambda c: c.id)
def test_bad_input_is_refused_naming_the_row(tmp_path: Path, case: BadCase) -> None:
    write(tmp_path, "openb_node_list_gpu_node.csv", NODE_HEADER, case.nodes)
    header = POD_HEADER if "missing" not in case.id else "name,cpu_milli,memory_mib,num_gpu"
    write(tmp_path, "openb_pod_list_default.csv", header, case.pods)
    with pytest.raises(TraceError) as raised:
        load_trace(tmp_path, "default")
    assert case.want in str(raised.value), str(raised.value)


def test_a_node_with_no_gpu_is_left_out_with_a_note_naming_its_row(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "nodes.csv",
        NODE_HEADER,
        ["n-a,8000,32768,2,T4", "cpu-1,32000,262144,0,", "n-b,8000,32768,1,P100"],
    )
    rows, notes = read_node_rows(path)
    assert [r.name for r in rows] == ["n-a", "n-b"]
    assert notes == ["nodes.csv:3: node cpu-1 has 0 GPUs: left out (GPU nodes only)"]
    assert [n.name for n in load_nodes(path)] == ["n-a", "n-b"]


def test_the_command_exits_2_on_bad_input_naming_the_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tiny_trace(tmp_path, ["bad,1000,1024,1,1000,V100"])
    code = main(
        ["--data", str(tmp_path), "--traces", "default", "--policies", "fgd", "--seeds", "42"]
    )
    assert code == 2
    assert "openb_pod_list_default.csv:2: gpu_spec: pod bad asks for" in capsys.readouterr().err


# ----- gpu_spec and topology ---------------------------------------------------------------------


def test_a_pod_constrained_to_a_model_lands_only_on_it(tmp_path: Path) -> None:
    trace = load_trace(
        tiny_trace(tmp_path, ["t4,1000,1024,1,1000,T4", "p100,1000,1024,1,1000,P100"]), "default"
    )
    record = replay(trace.snapshot, trace.pods, _config("best-fit"), trace.workload)
    assert record.placed.tolist() == [True, True]
    models = {
        h.pod.key: trace.snapshot.nodes[h.node].labels["nvidia.com/gpu.product"]
        for h in _holdings(trace)
    }
    assert models == {"openb/t4": "T4", "openb/p100": "P100"}


def _holdings(trace: object) -> list[object]:
    from gpusched.engine.pick import pick_node
    from gpusched.engine.policy import Policy
    from gpusched.engine.scoring import Scoring

    snapshot = trace.snapshot.copy()  # type: ignore[attr-defined]
    held = []
    for request in trace.pods:  # type: ignore[attr-defined]
        choice = pick_node(snapshot, request, Scoring(Policy()))
        assert choice is not None, request.key
        held.append(snapshot.assume(request, choice.node, choice.gpus))
    return held


@pytest.mark.parametrize(
    ("gpus", "model", "pair_01", "pair_02"),
    [
        (8, "V100M32", "NV1", "NV1"),
        (8, "G2", "NV12", "NV12"),
        (4, "V100M16", "NV2", "SYS"),
        (2, "T4", "PHB", None),
        (2, "P100", "NV2", None),
    ],
)
def test_synthetic_topologies_parse(
    gpus: int, model: str, pair_01: str, pair_02: str | None
) -> None:
    raw = synthetic_topology(gpus, model)
    topology = parse_topology_annotation("n", raw)
    links = json.loads(raw)["links"]
    assert len(topology.gpus) == gpus
    assert links[0][1] == pair_01
    if pair_02 is not None:
        assert links[0][2] == pair_02


def test_two_gpu_pods_take_an_nvlink_pair_on_a_four_gpu_node(tmp_path: Path) -> None:
    write(tmp_path, "openb_node_list_gpu_node.csv", NODE_HEADER, ["n-a,32000,131072,4,V100M16"])
    write(
        tmp_path,
        "openb_pod_list_default.csv",
        POD_HEADER,
        ["one,1000,1024,1,1000,", "two,1000,1024,2,1000,"],
    )
    trace = load_trace(tmp_path, "default")
    record = replay(trace.snapshot, trace.pods, _config("gpusched"), trace.workload)
    assert (record.multi_gpu, record.best_tier) == (1, 1), record.tier_misses


# ----- the command -------------------------------------------------------------------------------


def test_the_command_prints_the_table_and_writes_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [f"p{i},1000,1024,1,{200 * (1 + i % 5)}," for i in range(10)]
    tiny_trace(tmp_path, rows)
    out = tmp_path / "runs.json"
    code = main(
        [
            "--data",
            str(tmp_path),
            "--traces",
            "default",
            "--policies",
            "fgd,gpusched",
            "--seeds",
            "42,43",
            "--json",
            str(out),
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "gpusched's default policy vs FGD" in printed
    assert "empty-cluster fragmentation" in printed
    runs = json.loads(out.read_text())
    assert [(r["policy"], r["seed"]) for r in runs] == [
        ("fgd", 42),
        ("fgd", 43),
        ("gpusched", 42),
        ("gpusched", 43),
    ]
    assert len(runs[0]["allocated_at"]) == 131


def test_quick_mode_fails_when_a_sanity_figure_is_off(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A tiny synthetic "default" trace cannot match the published 13.94 %: exit 1.
    tiny_trace(tmp_path, ["p0,1000,1024,1,1000,"])
    code = main(["--data", str(tmp_path), "--quick", "--policies", "fgd", "--seeds", "42"])
    assert code == 1
    assert "sanity figure is off" in capsys.readouterr().err


def test_published_values_sit_beside_ours(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tiny_trace(tmp_path, ["p0,1000,1024,1,1000,"])
    write(
        tmp_path,
        "fgd-results-summary.csv",
        "workload,policy,n_seeds,unalloc_pct_at_arrived100_mean,unalloc_pct_at_arrived100_sd",
        ["openb_pod_list_default,06-FGD,10,4.773,0.106"],
    )
    main(["--data", str(tmp_path), "--traces", "default", "--policies", "fgd", "--seeds", "42"])
    assert "(4.77, Δ" in capsys.readouterr().out

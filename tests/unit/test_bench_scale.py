"""The pure parts of bench/scale.py: the cluster's shape, the gangs, the figures read from
Prometheus histograms and py-spy's stacks."""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "scale.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_scale", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_scale"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


scale = _load()
RACK, ZONE = scale.RACK, scale.ZONE


def test_5000_nodes_make_16_zones_of_25_racks_of_12_or_13_nodes() -> None:
    layout = scale.rack_layout(5000)
    racks = Counter(rack for _, _, rack in layout)
    zones = {zone: {r for _, z, r in layout if z == zone} for _, zone, _ in layout}
    assert len(layout) == len({name for name, _, _ in layout}) == 5000
    assert Counter(racks.values()) == {13: 200, 12: 200}
    assert sorted(len(r) for r in zones.values()) == [25] * 16
    # A rack's name says its zone: no rack spans two.
    assert all(rack.startswith(f"rack-{zone.removeprefix('zone-')}-") for _, zone, rack in layout)


@pytest.mark.parametrize(
    ("nodes", "want_zones", "want_racks"),
    [(1, 1, 1), (13, 1, 1), (200, 1, 16), (320, 2, 26), (1000, 4, 80)],
)
def test_a_small_cluster_keeps_racks_of_about_12_nodes_and_fewer_zones(
    nodes: int, want_zones: int, want_racks: int
) -> None:
    layout = scale.rack_layout(nodes)
    racks = Counter(rack for _, _, rack in layout)
    assert len(layout) == nodes
    assert len({zone for _, zone, _ in layout}) == want_zones
    assert len(racks) == want_racks
    assert max(racks.values()) - min(racks.values()) <= 1


def test_no_nodes_is_refused_naming_the_flag() -> None:
    with pytest.raises(ValueError, match="--nodes"):
        scale.rack_layout(0)


def test_gangs_are_8_to_128_pods_and_each_fits_the_domain_it_asks_for() -> None:
    rack_gpus, zone_gpus = 12 * 8, 312 * 8
    plan = scale.gang_plan(200, seed=42, rack_gpus=rack_gpus, zone_gpus=zone_gpus)
    assert len(plan) == 200
    assert all(8 <= g.size <= 128 for g in plan)
    assert {g.gpus for g in plan} == {1, 2, 4, 8}
    for g in plan:
        gpus = g.size * g.gpus
        assert gpus <= zone_gpus // 4, g
        assert g.key == (RACK if gpus <= rack_gpus // 2 else ZONE), g
    assert {g.key for g in plan} == {RACK, ZONE}
    assert plan == scale.gang_plan(200, seed=42, rack_gpus=rack_gpus, zone_gpus=zone_gpus)


def test_on_a_one_zone_cluster_a_large_gang_asks_for_fewer_gpus_a_pod() -> None:
    plan = scale.gang_plan(50, seed=1, rack_gpus=96, zone_gpus=160)
    assert all(g.size * g.gpus <= 40 for g in plan)
    assert all(g.gpus >= 1 and g.size >= 1 for g in plan)


def test_gangs_are_spread_between_the_singles_never_first() -> None:
    assert scale.spread(100, 4) == [20, 40, 60, 80]
    assert scale.spread(10, 0) == []
    assert scale.spread(3, 5) == [0, 1, 1, 2, 2]


def test_gangs_are_the_workload_apis_objects_and_complete_by_kwok_after_their_lifetime() -> None:
    args = argparse.Namespace(gangs=2, seed=42, pods=400, backlog=100, gang_lifetime=12.5)
    work = scale.workload(args, scale.rack_layout(200))
    spec = work.gangs[0]
    first = work.gang_first[spec.name]
    workload, group = (body for _, _, body in work.stream[first : first + 2])
    assert [(workload["kind"], workload["apiVersion"]), (group["kind"], group["apiVersion"])] == [
        ("Workload", "scheduling.k8s.io/v1beta1"),
        ("PodGroup", "scheduling.k8s.io/v1beta1"),
    ]
    assert work.stream[first][1] == "/apis/scheduling.k8s.io/v1beta1/namespaces/scale/workloads"
    assert work.stream[first + 1][1].endswith("/namespaces/scale/podgroups")
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": spec.size}}
    assert group["spec"]["schedulingConstraints"] == {"topology": [{"key": spec.key}]}
    members = [body for _, _, body in work.stream[first + 2 : first + 2 + spec.size]]
    assert [m["metadata"]["name"] for m in members] == work.members(spec)
    for member in members:
        assert member["spec"]["schedulerName"] == "gpusched"
        assert member["spec"]["schedulingGroup"] == {"podGroupName": group["metadata"]["name"]}
        assert member["metadata"]["annotations"][scale.COMPLETE_AFTER] == "12.5s"
        assert member["metadata"]["labels"] == {}  # no gpusched CRD PodGroup named anywhere
    assert not any("scheduling.gpusched.io" in path for _, path, _ in work.stream)
    singles = [
        b for _, p, b in work.stream if p.endswith("/pods") and "schedulingGroup" not in b["spec"]
    ]
    assert not any(scale.COMPLETE_AFTER in b["metadata"]["annotations"] for b in singles)


def test_nodes_are_kwoks_dgx_a100s_whose_conditions_kwok_reports() -> None:
    node = scale.node_body("z00-r00-n00", "zone-0", "rack-0-0")
    assert node["metadata"]["annotations"]["kwok.gpusched.test/managed"] == "true"
    assert "gpusched.io/gpu-topology" in node["metadata"]["annotations"]
    assert node["status"]["allocatable"] == {
        "cpu": "252",
        "memory": "1000Gi",
        "pods": "110",
        "nvidia.com/gpu": "8",
    }
    assert "conditions" not in node["status"]


def test_a_share_asks_for_one_gpu_and_names_its_thousandths() -> None:
    share = scale.single_pod("p", scale.Share(6000, 2**30, 0, 460), "ns")
    container = share["spec"]["containers"][0]["resources"]
    assert share["metadata"]["annotations"] == {"gpusched.io/gpu-milli": "460"}
    assert container["limits"] == {"nvidia.com/gpu": "1"}
    assert container["requests"] == {"cpu": "6000m", "memory": str(2**30), "nvidia.com/gpu": "1"}
    whole = scale.single_pod("q", scale.Share(0, 0, 4, 0), "ns")
    assert whole["metadata"]["annotations"] == {}
    assert whole["spec"]["containers"][0]["resources"]["requests"] == {"nvidia.com/gpu": "4"}
    cpu_only = scale.single_pod("r", scale.Share(500, 0, 0, 0), "ns")
    assert cpu_only["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "500m"},
        "limits": {},
    }


BUCKETS = [(0.01, 50.0), (0.1, 90.0), (1.0, 100.0), (math.inf, 100.0)]


@pytest.mark.parametrize(
    ("q", "want"),
    [
        (0.5, 0.01),  # the 50th of 100 is the last of the first bucket
        (0.25, 0.005),  # halfway into [0, 0.01]
        (0.7, 0.055),  # halfway into (0.01, 0.1]
        (0.99, 0.91),  # nine tenths into (0.1, 1]
    ],
)
def test_histogram_quantiles_are_linear_inside_their_bucket(q: float, want: float) -> None:
    assert scale.histogram_quantile(q, BUCKETS) == pytest.approx(want)


def test_a_quantile_past_the_last_finite_bound_is_that_bound() -> None:
    buckets = [(0.01, 1.0), (math.inf, 10.0)]
    assert scale.histogram_quantile(0.99, buckets) == 0.01


def test_an_empty_histogram_has_no_quantile() -> None:
    assert scale.histogram_quantile(0.5, [(0.01, 0.0), (math.inf, 0.0)]) is None
    assert scale.histogram_quantile(0.5, []) is None


def test_two_replicas_histograms_add_up_bucket_by_bucket() -> None:
    a = [(0.01, 1.0), (math.inf, 2.0)]
    b = [(0.01, 3.0), (math.inf, 3.0)]
    assert scale.merged([a, b]) == [(0.01, 4.0), (math.inf, 5.0)]


def test_metrics_text_gives_leadership_binds_and_the_cycle_histogram() -> None:
    text = "\n".join(
        [
            "# TYPE gpusched_leader gauge",
            "gpusched_leader 1.0",
            "# TYPE gpusched_binds counter",
            'gpusched_binds_total{result="ok"} 7.0',
            'gpusched_binds_total{result="error"} 2.0',
            "# TYPE gpusched_decision_duration_seconds histogram",
            'gpusched_decision_duration_seconds_bucket{le="0.001"} 1.0',
            'gpusched_decision_duration_seconds_bucket{le="+Inf"} 3.0',
            "gpusched_decision_duration_seconds_count 3.0",
            "gpusched_decision_duration_seconds_sum 0.5",
            "",
        ]
    )
    scrape = scale.parse_metrics(text, at=1.0)
    assert (scrape.leader, scrape.binds_ok, scrape.cycle_sum) == (True, 7.0, 0.5)
    assert scrape.cycles == [(0.001, 1.0), (math.inf, 3.0)]


def test_percentiles_rates_and_the_busiest_window() -> None:
    assert scale.percentile([], 0.5) is None
    assert scale.percentile([3.0, 1.0, 2.0, 4.0], 0.5) == 2.0
    assert scale.percentile([float(i) for i in range(1, 101)], 0.99) == 99.0
    assert scale.rate([0.0, 1.0, 2.0]) == 1.0
    assert scale.rate([5.0]) == 0.0
    # 30 events in the first second, then one a second: the busiest 10 s hold 39.
    times = [i / 30 for i in range(30)] + [float(s) for s in range(1, 21)]
    assert scale.peak_rate(times, window=10.0) == pytest.approx(3.9)


STACKS = [
    "thread (1);<module> (gpusched/cli.py:1);main (gpusched/cli.py:14);"
    "Scheduler.cycle (gpusched/scheduler/service.py:338);schedule (gpusched/engine/schedule.py:45);"
    "deepcopy (copy.py:128) 30",
    "thread (1);<module> (gpusched/cli.py:1);main (gpusched/cli.py:14);"
    "Scheduler.cycle (gpusched/scheduler/service.py:338) 10",
    "thread (2);select (selectors.py:451) 60",
    "not a stack line",
]


def test_py_spy_stacks_rank_our_functions_by_inclusive_time_without_the_entry_points() -> None:
    total, ranked = scale.hottest(STACKS)
    assert total == 100
    assert ranked == [
        ("Scheduler.cycle (gpusched/scheduler/service.py:338)", 40, 10),
        ("schedule (gpusched/engine/schedule.py:45)", 30, 0),
    ]


def test_py_spy_self_time_names_our_caller_beside_a_librarys_frame() -> None:
    assert scale.self_hottest(STACKS) == [
        ("select (selectors.py:451)", 60),
        ("deepcopy (copy.py:128) <- schedule (gpusched/engine/schedule.py:45)", 30),
        ("Scheduler.cycle (gpusched/scheduler/service.py:338)", 10),
    ]


@pytest.mark.parametrize(
    ("target", "figure", "want"),
    [
        (scale.Target(True, 600), 599.0, True),
        (scale.Target(True, 600), 600.0, False),
        (scale.Target(False, 300), 300.0, True),
        (scale.Target(False, 300), 299.9, False),
        (scale.Target(True, 20), None, False),
    ],
)
def test_a_figure_meets_its_target_or_says_not_met(
    target: object, figure: float | None, want: bool
) -> None:
    assert target.met(figure) is want  # type: ignore[attr-defined]
    line = scale.row("figure", figure, None, target)  # type: ignore[arg-type]
    assert line.endswith("NOT MET") is not want, line

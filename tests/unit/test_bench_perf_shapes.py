"""The pure parts of bench/perf_shapes.py: scheduler_perf's shapes as the objects each
scheduler is given, the requests of the minimal binding client, and the figures read from
watches and /metrics."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "perf_shapes.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_perf_shapes", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_perf_shapes"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


shapes = _load()
FULL = {s.name: s for s in shapes.FULL}


def _without_scheduler(body: dict[str, Any]) -> str:
    copy = json.loads(json.dumps(body))
    copy["spec"].pop("schedulerName")
    copy["metadata"]["namespace"] = "-"
    return json.dumps(copy, sort_keys=True)


# -- upstream's counts ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "want_nodes", "want_pods", "want_init", "want_gangs", "want_size"),
    [
        ("basic-10k", 5000, 10000, 1000, 0, 0),
        ("basic-50k", 5000, 50000, 5000, 0, 0),
        ("gang-1000", 5000, 3000, 0, 1000, 3),
        ("gang-2000", 5000, 6000, 0, 2000, 3),
        ("gang-3000", 5000, 9000, 0, 3000, 3),
        ("tas-750", 5000, 3000, 0, 750, 4),
        ("tas-1500", 5000, 6000, 0, 1500, 4),
        ("tas-2250", 5000, 9000, 0, 2250, 4),
        ("gpu-64", 5120, 4096, 0, 64, 64),
    ],
)
def test_the_full_shapes_carry_upstreams_performance_counts(
    name: str, want_nodes: int, want_pods: int, want_init: int, want_gangs: int, want_size: int
) -> None:
    shape = FULL[name]
    assert (shape.nodes, shape.pods, shape.init_pods) == (want_nodes, want_pods, want_init)
    assert (shape.gangs, shape.gang_size) == (want_gangs, want_size)


def test_an_unknown_shape_is_refused_naming_it_and_the_known_ones() -> None:
    args = shapes.argparse.Namespace(quick=True, shape=["gang", "huge"], nodes=0)
    with pytest.raises(SystemExit, match="--shape huge: not one of basic, gang, tas, gpu"):
        shapes.chosen(args)


def test_nodes_given_on_the_command_line_replace_every_shapes() -> None:
    args = shapes.argparse.Namespace(quick=True, shape=["gang"], nodes=60)
    assert [(s.name, s.nodes, s.pods) for s in shapes.chosen(args)] == [("gang", 60, 180)]


# -- the Nodes -----------------------------------------------------------------------------------


def test_upstreams_nodes_have_4_cpus_32_gi_and_110_pods_and_no_topology_labels() -> None:
    nodes = shapes.node_bodies(FULL["gang-1000"])
    assert len(nodes) == len({n["metadata"]["name"] for n in nodes}) == 5000
    first = nodes[0]
    assert first["status"]["allocatable"] == {"cpu": "4", "memory": "32Gi", "pods": "110"}
    assert first["status"]["capacity"] == first["status"]["allocatable"]
    assert first["status"]["conditions"] == [{"type": "Ready", "status": "True"}]
    assert first["metadata"]["labels"] == {shapes.HOSTNAME: first["metadata"]["name"]}


def test_the_tas_nodes_make_50_racks_of_100_at_5000_nodes() -> None:
    nodes = shapes.node_bodies(FULL["tas-750"])
    racks = Counter(n["metadata"]["labels"][shapes.TAS_RACK] for n in nodes)
    zones = Counter(n["metadata"]["labels"][shapes.ZONE] for n in nodes)
    assert len(racks) == 50
    assert set(racks.values()) == {100}
    assert len(zones) == 50


def test_the_gpu_nodes_are_racks_of_20_in_zones_of_8_racks_with_their_topology() -> None:
    nodes = shapes.node_bodies(FULL["gpu-64"])
    labels = [n["metadata"]["labels"] for n in nodes]
    racks = Counter(label[shapes.RACK] for label in labels)
    zone_racks = {
        z: {x[shapes.RACK] for x in labels if x[shapes.ZONE] == z}
        for z in {x[shapes.ZONE] for x in labels}
    }
    assert set(racks.values()) == {20}
    assert len(zone_racks) == 32
    assert {len(r) for r in zone_racks.values()} == {8}
    assert all(n["status"]["allocatable"]["nvidia.com/gpu"] == "8" for n in nodes)
    assert all("gpusched.io/gpu-topology" in n["metadata"]["annotations"] for n in nodes)


# -- what each scheduler is given ----------------------------------------------------------------


def test_a_basic_pod_is_upstreams_default_pod() -> None:
    work = shapes.shape_work(FULL["basic-10k"], "gpusched", "ns")
    assert (len(work.init), len(work.pods), work.groups, work.gangs) == (1000, 10000, [], {})
    container = work.pods[0]["spec"]["containers"][0]
    assert container["resources"]["requests"] == {"cpu": "100m", "memory": "500Mi"}
    assert container["resources"]["limits"] == {"cpu": "100m", "memory": "500Mi"}
    assert container["ports"] == [{"containerPort": 80}]
    assert len({p["metadata"]["name"] for p in work.init + work.pods}) == 11000


@pytest.mark.parametrize("name", ["basic-10k", "gang-1000", "tas-750", "gpu-64"])
def test_every_scheduler_gets_the_same_objects_but_for_the_pods_scheduler_name(name: str) -> None:
    shape = FULL[name]
    # A few gangs (or pods) of the shape say the same as all of them, faster.
    small = shapes.replace(
        shape, pods=2 * (shape.gang_size or 10), init_pods=min(shape.init_pods, 5)
    )
    ours = shapes.shape_work(small, "gpusched", "a")
    theirs = shapes.shape_work(small, "default-scheduler", "b")
    assert {p["spec"]["schedulerName"] for p in ours.pods + ours.init} == {"gpusched"}
    assert {p["spec"]["schedulerName"] for p in theirs.pods} == {"default-scheduler"}
    assert [_without_scheduler(p) for p in ours.pods] == [
        _without_scheduler(p) for p in theirs.pods
    ]
    assert [g["spec"] for g in ours.groups] == [g["spec"] for g in theirs.groups]
    assert ours.gangs == theirs.gangs


@pytest.mark.parametrize(
    ("name", "want_constraints"),
    [("gang-1000", None), ("tas-750", [{"key": "topology.kubernetes.io/rack"}])],
)
def test_a_gang_is_a_podgroup_of_its_size_its_pods_naming_it(
    name: str, want_constraints: Any
) -> None:
    shape = FULL[name]
    work = shapes.shape_work(shape, "gpusched", "ns")
    assert len(work.groups) == len(work.gangs) == shape.gangs
    group = work.groups[0]
    assert (group["apiVersion"], group["kind"]) == ("scheduling.k8s.io/v1beta1", "PodGroup")
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": shape.gang_size}}
    assert group["spec"].get("schedulingConstraints", {}).get("topology") == want_constraints
    by_name = {p["metadata"]["name"]: p for p in work.pods}
    for gang, members in work.gangs.items():
        assert len(members) == shape.gang_size
        assert {by_name[m]["spec"]["schedulingGroup"]["podGroupName"] for m in members} == {gang}
    assert work.pods[0]["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "100m", "memory": "100Mi"}
    }


def test_the_gpu_gang_is_a_zone_composite_of_4_rack_groups_of_16_pods_of_8_gpus() -> None:
    work = shapes.shape_work(FULL["gpu-64"], "gpusched", "ns")
    kinds = Counter(g["kind"] for g in work.groups)
    assert kinds == {"Workload": 64, "CompositePodGroup": 64, "PodGroup": 256}
    composite = next(g for g in work.groups if g["kind"] == "CompositePodGroup")
    assert composite["metadata"]["name"] == "train-0-zone"
    assert composite["spec"]["schedulingPolicy"] == {"gang": {"minGroupCount": 4}}
    assert composite["spec"]["schedulingConstraints"] == {"topology": [{"key": shapes.ZONE}]}
    parts = [
        g
        for g in work.groups
        if g["kind"] == "PodGroup" and g["metadata"]["name"].startswith("train-0-")
    ]
    assert [p["spec"]["parentCompositePodGroupName"] for p in parts] == ["train-0-zone"] * 4
    assert {json.dumps(p["spec"]["schedulingConstraints"]) for p in parts} == {
        json.dumps({"topology": [{"key": shapes.RACK}]})
    }
    assert all(p["spec"]["schedulingPolicy"] == {"gang": {"minCount": 16}} for p in parts)
    members = work.gangs["train-0"]
    by_name = {p["metadata"]["name"]: p for p in work.pods}
    assert len(members) == 64
    assert Counter(by_name[m]["spec"]["schedulingGroup"]["podGroupName"] for m in members) == {
        f"train-0-part-{i}": 16 for i in range(4)
    }
    assert {
        by_name[m]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
        for m in members
    } == {"8"}


# -- the requests --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "want_path"),
    [
        (
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}},
            "/api/v1/namespaces/ns/pods",
        ),
        (
            {
                "apiVersion": "scheduling.k8s.io/v1beta1",
                "kind": "PodGroup",
                "metadata": {"name": "g", "namespace": "ns"},
            },
            "/apis/scheduling.k8s.io/v1beta1/namespaces/ns/podgroups",
        ),
        (
            {
                "apiVersion": "scheduling.k8s.io/v1alpha3",
                "kind": "CompositePodGroup",
                "metadata": {"name": "c", "namespace": "ns"},
            },
            "/apis/scheduling.k8s.io/v1alpha3/namespaces/ns/compositepodgroups",
        ),
        (
            {
                "apiVersion": "scheduling.k8s.io/v1beta1",
                "kind": "Workload",
                "metadata": {"name": "w", "namespace": "ns"},
            },
            "/apis/scheduling.k8s.io/v1beta1/namespaces/ns/workloads",
        ),
        (
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": "n"},
                "status": {"phase": "Running"},
            },
            "/api/v1/nodes",
        ),
    ],
)
def test_each_object_is_posted_to_its_collection(body: dict[str, Any], want_path: str) -> None:
    method, path, sent = shapes.create_item(body)
    assert (method, path) == ("POST", want_path)
    assert "status" not in sent  # a Node's status is written by its own call


def test_the_limits_client_binds_each_pod_once_taking_the_nodes_in_turn() -> None:
    pods = shapes.shape_work(FULL["gang-1000"], shapes.NOBODY, "lim").pods[:5]
    items = shapes.binding_items(pods, ["n0", "n1"])
    assert [path for _, path, _ in items][:2] == [
        "/api/v1/namespaces/lim/pods/gang-0-0/binding",
        "/api/v1/namespaces/lim/pods/gang-0-1/binding",
    ]
    assert [body["target"]["name"] for _, _, body in items] == ["n0", "n1", "n0", "n1", "n0"]
    assert all(
        body["kind"] == "Binding" and body["metadata"]["name"] in path for _, path, body in items
    )


# -- the figures ---------------------------------------------------------------------------------

ATTEMPT = "scheduler_podgroup_scheduling_attempt_duration_seconds"


def _series(result: str, buckets: dict[str, int], total: float) -> list[str]:
    """One labelled series of kube-scheduler's gang attempt histogram, as /metrics writes it."""
    labels = f'profile="default-scheduler",result="{result}"'
    lines = [f'{ATTEMPT}_bucket{{{labels},le="{le}"}} {n}' for le, n in buckets.items()]
    count = list(buckets.values())[-1]
    return [*lines, f"{ATTEMPT}_sum{{{labels}}} {total}", f"{ATTEMPT}_count{{{labels}}} {count}"]


KUBE_SCHEDULER_SCRAPE = "\n".join(
    [
        f"# HELP {ATTEMPT} [ALPHA] Pod group scheduling attempt latency in seconds",
        f"# TYPE {ATTEMPT} histogram",
        *_series("scheduled", {"0.001": 0, "0.002": 40, "0.004": 90, "+Inf": 100}, 0.3),
        *_series("unschedulable", {"0.001": 0, "0.002": 0, "0.004": 0, "+Inf": 7}, 0.7),
        "# HELP gpusched_schedule_attempts_total Placement attempts.",
        "# TYPE gpusched_schedule_attempts_total counter",
        'gpusched_schedule_attempts_total{result="scheduled"} 30.0',
        'gpusched_schedule_attempts_total{result="waiting"} 12.0',
        "",
    ]
)


def test_the_attempt_histogram_of_scheduled_groups_only() -> None:
    scheduled = shapes.histogram(
        KUBE_SCHEDULER_SCRAPE,
        "scheduler_podgroup_scheduling_attempt_duration_seconds",
        result="scheduled",
    )
    assert scheduled.count == 100
    assert scheduled.mean == pytest.approx(0.003)
    # 50th of 100: 10 into the (0.002, 0.004] bucket's 50 → 0.002 + 0.002 * 10 / 50.
    assert scheduled.quantile(0.5) == pytest.approx(0.0024)
    every = shapes.histogram(
        KUBE_SCHEDULER_SCRAPE, "scheduler_podgroup_scheduling_attempt_duration_seconds"
    )
    assert (every.count, every.buckets[-1]) == (107, (float("inf"), 107))


def test_a_histogram_since_an_earlier_scrape_keeps_only_what_came_after() -> None:
    before = shapes.Histogram(((0.01, 5), (0.1, 10), (float("inf"), 10)), 0.2, 10)
    after = shapes.Histogram(((0.01, 5), (0.1, 30), (float("inf"), 31)), 2.2, 31)
    since = after.minus(before)
    assert since.buckets == ((0.01, 0), (0.1, 20), (float("inf"), 21))
    assert (since.count, since.total) == (21, pytest.approx(2.0))
    assert 0.01 < (since.quantile(0.5) or 0) < 0.1
    assert shapes.Histogram().quantile(0.5) is None
    assert shapes.Histogram().mean is None


def test_a_counter_is_read_by_its_total_sample_and_labels() -> None:
    assert shapes.counter(KUBE_SCHEDULER_SCRAPE, "gpusched_schedule_attempts") == 42
    assert (
        shapes.counter(KUBE_SCHEDULER_SCRAPE, "gpusched_schedule_attempts", result="waiting") == 12
    )
    assert shapes.counter(KUBE_SCHEDULER_SCRAPE, "no_such_metric") == 0


def test_a_gang_takes_its_first_pod_created_to_its_last_bound_an_unbound_one_left_out() -> None:
    gangs = {"a": ["a0", "a1"], "b": ["b0", "b1"], "c": ["c0"]}
    created = {"a0": 10.0, "a1": 10.5, "b0": 11.0, "b1": 11.0, "c0": 12.0}
    bound = {"a0": 13.0, "a1": 12.0, "b0": 11.5}
    assert shapes.gang_seconds(created, bound, gangs) == [3.0]


def test_rates_from_the_first_created_and_the_ratio_of_nothing() -> None:
    assert shapes.created_to_bound_rate(4, 100.0, [101.0, 102.0, 104.0, 102.5]) == 1.0
    assert shapes.created_to_bound_rate(0, 100.0, []) == 0.0
    assert shapes.ratio(3.0, 2.0) == 1.5
    assert shapes.ratio(None, 2.0) is None
    assert shapes.ratio(3.0, 0.0) is None


def _run(drain: float, live: float, p99: float | None) -> dict[str, Any]:
    return {
        "drain": {"pods_per_second": drain},
        "live": {"created_to_bound_pods_per_second": live, "gang_p99_s": p99},
    }


@pytest.mark.parametrize(
    ("case", "ours", "theirs", "limit", "gang", "want"),
    [
        (
            "faster everywhere, at 80 % of the limit exactly",
            _run(400, 300, 1.0),
            _run(200, 300, 1.0),
            500,
            3,
            [True, True, True, True],
        ),
        (
            "slower drain, a slower gang, below 80 % of the limit",
            _run(199, 301, 2.0),
            _run(200, 300, 1.5),
            250,
            3,
            [False, True, False, False],
        ),
        (
            "no gangs: no gang target; no limit measured",
            _run(10, 10, None),
            _run(5, 5, None),
            None,
            0,
            [True, True, None],
        ),
    ],
)
def test_the_targets(
    case: str,
    ours: dict[str, Any],
    theirs: dict[str, Any],
    limit: float | None,
    gang: int,
    want: list[bool | None],
) -> None:
    shape = {
        "shape": {"gang_size": gang},
        "gpusched": ours,
        "kube-scheduler-unthrottled": theirs,
        "limit": {"pods_per_second": limit},
    }
    assert list(shapes.verdicts(shape).values()) == want, case

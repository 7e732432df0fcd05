"""Gangs as other projects write them, through the scheduling service (fake API, real state,
engine, status): the upstream Workload API, Volcano, coscheduling and Kueue plain pods.

The cluster of every story (8 GPUs a node):

    #   zone-a
    #  /      \\
    # rack-1  rack-2
    #   a     b   c

A gang of 4 pods × 4 GPUs fits only in rack-2; split 2 + 2 over both racks is what a
scheduler that ignores the group does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from gpusched.api.config import load_config
from gpusched.api.errors import InvalidObjectError
from gpusched.scheduler.factory import build_scheduler
from gpusched.scheduler.nominations import Mark
from gpusched.scheduler.ports import Listing
from gpusched.scheduler.service import Scheduler
from gpusched.scheduler.state import ClusterState
from testing.clock import Clock
from testing.fakes import FakeApi
from testing.gangs import (
    coscheduling_member,
    coscheduling_pod_group,
    kueue_member,
    upstream_composite,
    upstream_member,
    upstream_pod_group,
    volcano_member,
    volcano_pod_group,
)
from testing.manifests import RACK, node, pod


def service(api: FakeApi, clock: Clock) -> Scheduler:
    config = load_config(
        {"operator": {"batchWindowSeconds": 0, "initialBackoffSeconds": 1, "maxBackoffSeconds": 8}}
    )
    scheduler = build_scheduler(config, ClusterState(), api, clock=clock)
    for name, rack in (("a", "rack-1"), ("b", "rack-2"), ("c", "rack-2")):
        scheduler.state.upsert_node(node(name, rack=rack))
    return scheduler


async def run_cycle(scheduler: Scheduler) -> None:
    await scheduler.cycle()
    await scheduler.settle()
    await scheduler.reporter.flush()


def bound_to(api: FakeApi) -> dict[str, str]:
    return {key.split("/", 1)[1]: node for key, node, _ in api.binds}


def events_about(api: FakeApi, name: str) -> list[dict[str, Any]]:
    return [e for e in api.events if e["involvedObject"]["name"] == name]


@pytest.fixture
def api() -> FakeApi:
    return FakeApi()


@pytest.fixture
def scheduler(api: FakeApi) -> Scheduler:
    return service(api, Clock())


# ----- the upstream Workload API ----------------------------------------------------------------


@pytest.mark.asyncio
async def test_an_upstream_gang_with_a_rack_constraint_lands_whole_in_the_one_rack_it_fits(
    api: FakeApi, scheduler: Scheduler
) -> None:
    scheduler.foreign_group_changed(upstream_pod_group("train", 4))
    for i in range(4):
        scheduler.pod_changed(upstream_member(f"train-{i}", 4, "train"))
    await run_cycle(scheduler)
    assert set(bound_to(api).values()) == {"b", "c"}
    assert len(api.binds) == 4
    await run_cycle(scheduler)
    condition = api.last_status("default/train")["conditions"][0]
    assert (condition["type"], condition["status"], condition["reason"]) == (
        "PodGroupInitiallyScheduled",
        "True",
        "Scheduled",
    )
    assert "rack-2" in condition["message"]
    assert "lastTransitionTime" in condition


@pytest.mark.asyncio
async def test_a_1_36_v1alpha2_pod_group_is_read_alike_and_told_in_its_own_condition(
    api: FakeApi, scheduler: Scheduler
) -> None:
    # 1.36 serves PodGroup as v1alpha2: the same policy and topology fields, a template
    # reference instead of workloadRef, and the condition called PodGroupScheduled.
    group = upstream_pod_group("train", 4)
    group["apiVersion"] = "scheduling.k8s.io/v1alpha2"
    group["spec"]["podGroupTemplateRef"] = {
        "workload": {"workloadName": "train", "podGroupTemplateName": "workers"}
    }
    scheduler.foreign_group_changed(group)
    for i in range(4):
        scheduler.pod_changed(upstream_member(f"train-{i}", 4, "train"))
    await run_cycle(scheduler)
    assert set(bound_to(api).values()) == {"b", "c"}
    await run_cycle(scheduler)
    condition = api.last_status("default/train")["conditions"][0]
    assert (condition["type"], condition["status"], condition["reason"]) == (
        "PodGroupScheduled",
        "True",
        "Scheduled",
    )


@pytest.mark.asyncio
async def test_pods_naming_an_upstream_group_not_yet_created_wait_and_are_never_placed_alone(
    api: FakeApi, scheduler: Scheduler
) -> None:
    for i in range(3):
        scheduler.pod_changed(upstream_member(f"train-{i}", 4, "train"))
    await run_cycle(scheduler)
    assert api.binds == []
    waiting = events_about(api, "train-0")
    assert waiting
    assert "k8s:train" in waiting[0]["message"]
    assert "not found" in waiting[0]["message"]
    scheduler.foreign_group_changed(upstream_pod_group("train", 3))
    await run_cycle(scheduler)
    assert sorted(bound_to(api)) == ["train-0", "train-1", "train-2"]


@pytest.mark.asyncio
async def test_an_upstream_gang_short_of_its_min_count_binds_nothing(
    api: FakeApi, scheduler: Scheduler
) -> None:
    scheduler.foreign_group_changed(upstream_pod_group("train", 4, key=None))
    for i in range(3):
        scheduler.pod_changed(upstream_member(f"train-{i}", 1, "train"))
    await run_cycle(scheduler)
    assert api.binds == []
    condition = api.last_status("default/train")["conditions"][0]
    assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
    assert condition["message"].startswith("WaitingForPods")


@pytest.mark.asyncio
async def test_an_upstream_composite_places_its_rack_gangs_in_one_zone(
    api: FakeApi, scheduler: Scheduler
) -> None:
    zone = "topology.kubernetes.io/zone"
    scheduler.foreign_group_changed(upstream_composite("job", 2, key=zone))
    for part in ("p0", "p1"):
        scheduler.foreign_group_changed(upstream_pod_group(f"job-{part}", 2, parent="job"))
        for i in range(2):
            scheduler.pod_changed(upstream_member(f"job-{part}-{i}", 4, f"job-{part}"))
    await run_cycle(scheduler)
    placed = bound_to(api)
    assert len(placed) == 4
    for part in ("p0", "p1"):
        racks = {"a": "rack-1", "b": "rack-2", "c": "rack-2"}
        assert len({racks[placed[f"job-{part}-{i}"]] for i in range(2)}) == 1
    await run_cycle(scheduler)
    composite = api.last_status("default/job")["conditions"][0]
    assert composite["type"] == "CompositePodGroupInitiallyScheduled"
    assert composite["status"] == "True"


@pytest.mark.parametrize(
    ("policy", "want_bound", "want_status"),
    [
        pytest.param({"basic": {}}, 2, "True", id="basic: the child that fits goes, one waits"),
        pytest.param(
            {"gang": {"minGroupCount": 2}}, 0, "False", id="gang of 2: neither goes alone"
        ),
    ],
)
@pytest.mark.asyncio
async def test_a_basic_upstream_composite_schedules_its_children_independently(
    api: FakeApi,
    scheduler: Scheduler,
    policy: dict[str, Any],
    want_bound: int,
    want_status: str,
) -> None:
    # Two children of 2 pods × 8 GPUs; the cluster's 3 nodes hold one of them, not both.
    zone = "topology.kubernetes.io/zone"
    composite = upstream_composite("job", 2, key=zone)
    composite["spec"]["schedulingPolicy"] = policy
    scheduler.foreign_group_changed(composite)
    for part in ("p0", "p1"):
        scheduler.foreign_group_changed(upstream_pod_group(f"job-{part}", 2, parent="job"))
        for i in range(2):
            scheduler.pod_changed(upstream_member(f"job-{part}-{i}", 8, f"job-{part}"))
    await run_cycle(scheduler)
    placed = bound_to(api)
    assert len(placed) == want_bound, placed
    assert len({name.rsplit("-", 1)[0] for name in placed}) == min(want_bound, 1)
    await run_cycle(scheduler)
    condition = api.last_status("default/job")["conditions"][0]
    assert (condition["type"], condition["status"]) == (
        "CompositePodGroupInitiallyScheduled",
        want_status,
    )
    left = "job-p1" if "job-p0-0" in placed else "job-p0"
    waiting = api.last_status(f"default/{left}")["conditions"][0]
    assert (waiting["status"], waiting["reason"]) == ("False", "Unschedulable")


@pytest.mark.asyncio
async def test_the_scheduled_condition_is_terminal_as_upstreams(
    api: FakeApi, scheduler: Scheduler
) -> None:
    scheduler.foreign_group_changed(upstream_pod_group("train", 2, key=None))
    for i in range(2):
        scheduler.pod_changed(upstream_member(f"train-{i}", 1, "train"))
    await run_cycle(scheduler)
    await run_cycle(scheduler)
    first = api.last_status("default/train")["conditions"][0]
    assert first["status"] == "True"
    body = upstream_pod_group("train", 2, key=None)
    body["status"] = {"conditions": [first]}
    scheduler.foreign_group_changed(body)
    scheduler.pod_deleted("default/train-1", "uid-train-1")
    await run_cycle(scheduler)
    assert api.last_status("default/train")["conditions"][0] == first


# ----- a pod naming two groups --------------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_pod_naming_two_groups_is_refused_naming_both_and_the_rest_is_scheduled(
    api: FakeApi, scheduler: Scheduler
) -> None:
    torn = upstream_member("torn", 1, "train")
    torn["metadata"]["labels"]["scheduling.gpusched.io/pod-group"] = "other"
    scheduler.pod_changed(torn)
    scheduler.pod_changed(pod("loose", 1))
    await run_cycle(scheduler)
    assert bound_to(api) == {"loose": "a"}
    [event] = events_about(api, "torn")
    assert event["type"] == "Warning"
    assert "spec.schedulingGroup.podGroupName" in event["message"]
    assert "metadata.labels[scheduling.gpusched.io/pod-group]" in event["message"]


# ----- Volcano and coscheduling ---------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_volcano_gang_lands_whole_in_one_rack_and_its_status_reads_as_volcanos(
    api: FakeApi, scheduler: Scheduler
) -> None:
    scheduler.foreign_group_changed(volcano_pod_group("train", 4, queue="research"))
    for i in range(4):
        scheduler.pod_changed(volcano_member(f"train-{i}", 4, "train"))
    await run_cycle(scheduler)
    assert set(bound_to(api).values()) == {"b", "c"}
    await run_cycle(scheduler)
    status = api.last_status("default/train")
    assert status["phase"] == "Inqueue"
    assert status["conditions"][0]["type"] == "Scheduled"
    assert status["conditions"][0]["status"] == "True"


@pytest.mark.asyncio
async def test_a_volcano_min_member_above_its_pods_holds_nothing_and_says_so(
    api: FakeApi, scheduler: Scheduler
) -> None:
    scheduler.foreign_group_changed(volcano_pod_group("train", 5, key=None))
    for i in range(4):
        scheduler.pod_changed(volcano_member(f"train-{i}", 1, "train"))
    scheduler.pod_changed(pod("loose", 1))
    await run_cycle(scheduler)
    assert bound_to(api) == {"loose": "a"}
    status = api.last_status("default/train")
    assert status["phase"] == "Pending"
    condition = status["conditions"][0]
    assert (condition["type"], condition["reason"]) == ("Unschedulable", "NotEnoughResources")
    assert "4" in condition["message"]
    assert "5" in condition["message"]


@pytest.mark.parametrize(
    ("group", "member", "want_message"),
    [
        pytest.param(
            volcano_pod_group("train", 1, key=None, minResources={"nvidia.com/gpu": "30"}),
            volcano_member,
            "minResources: 24 of the 30 nvidia.com/gpu wanted are free in the cluster",
            id="Volcano: 30 GPUs wanted, 24 free",
        ),
        pytest.param(
            coscheduling_pod_group(
                "train", 1, key=None, minResources={"cpu": "200", "memory": "64Gi"}
            ),
            coscheduling_member,
            "minResources: 192 of the 200 cpu wanted are free in the cluster",
            id="coscheduling: 200 cores wanted, 192 free",
        ),
    ],
)
@pytest.mark.asyncio
async def test_a_group_whose_min_resources_the_cluster_cannot_hold_waits_until_it_can(
    api: FakeApi, group: dict[str, Any], member: Any, want_message: str
) -> None:
    clock = Clock()
    scheduler = service(api, clock)
    # minMember 1, each pod 1 GPU: any pod alone would fit; minResources holds them back, as
    # Volcano's enqueue and coscheduling's PreFilter do, while a pod of no group goes on.
    scheduler.foreign_group_changed(group)
    for i in range(2):
        scheduler.pod_changed(member(f"train-{i}", 1, "train"))
    scheduler.pod_changed(pod("loose", 1))
    await run_cycle(scheduler)
    assert sorted(bound_to(api)) == ["loose"]
    waiting = [e["message"] for e in events_about(api, "train-0")]
    assert any(want_message in m for m in waiting), waiting
    scheduler.node_changed(node("d", rack="rack-3"))  # 8 GPUs, 64 cores more
    clock.now += 10  # past the group's backoff
    await run_cycle(scheduler)
    assert sorted(bound_to(api)) == ["loose", "train-0", "train-1"]


def task_member(name: str, task: str, gpus: int, **kw: Any) -> Any:
    return volcano_member(name, gpus, "train", annotations={"volcano.sh/task-spec": task}, **kw)


@pytest.mark.parametrize(
    ("ps_pods", "ps_cpu", "want_bound", "want_message"),
    [
        pytest.param(
            0, "4", 0, "task ps: 0 of 1 valid pods exist (minTaskMember)",
            id="no ps pod yet: the 3 workers (minMember 3) wait for it",
        ),
        pytest.param(
            1, "100", 0, "",
            id="the ps pod fits no node: the 3 workers that fit are not bound without it",
        ),
        pytest.param(1, "4", 4, "", id="ps and workers fit: all 4 bound together"),
    ],
)  # fmt: skip
@pytest.mark.asyncio
async def test_a_volcano_task_minimum_holds_the_gang_until_each_task_has_its_pods_placed(
    api: FakeApi,
    scheduler: Scheduler,
    ps_pods: int,
    ps_cpu: str,
    want_bound: int,
    want_message: str,
) -> None:
    # minMember 3 alone would let 3 workers go; minTaskMember {ps: 1, worker: 2} asks for the
    # ps pod too, as Volcano's gang plugin does.
    group = volcano_pod_group("train", 3, key=None, minTaskMember={"ps": 1, "worker": 2})
    scheduler.foreign_group_changed(group)
    for i in range(3):
        scheduler.pod_changed(task_member(f"worker-{i}", "worker", 4))
    for i in range(ps_pods):
        scheduler.pod_changed(task_member(f"ps-{i}", "ps", 0, cpu=ps_cpu))
    await run_cycle(scheduler)
    assert len(api.binds) == want_bound, bound_to(api)
    if want_message:
        said = [e["message"] for e in events_about(api, "worker-0")]
        assert any(want_message in m for m in said), said


@pytest.mark.asyncio
async def test_a_task_minimum_is_placed_before_extra_pods_of_another_task(
    api: FakeApi, scheduler: Scheduler
) -> None:
    # 24 GPUs; 3 workers and a ps of 8 GPUs each: greedy by size could spend all 24 on the
    # workers and leave the ps out. Each task's minimum goes first: ps + 2 workers.
    group = volcano_pod_group("train", 3, key=None, minTaskMember={"ps": 1, "worker": 2})
    scheduler.foreign_group_changed(group)
    for i in range(3):
        scheduler.pod_changed(task_member(f"train-{i}", "worker", 8))
    scheduler.pod_changed(task_member("train-ps", "ps", 8))  # last by name
    await run_cycle(scheduler)
    placed = sorted(bound_to(api))
    assert len(placed) == 3, placed
    assert "train-ps" in placed


@pytest.mark.asyncio
async def test_an_invalid_volcano_min_member_is_named_and_others_are_scheduled(
    api: FakeApi, scheduler: Scheduler
) -> None:
    scheduler.foreign_group_changed(volcano_pod_group("bad", "four", key=None))
    scheduler.pod_changed(volcano_member("bad-0", 1, "bad"))
    scheduler.pod_changed(pod("loose", 1))
    await run_cycle(scheduler)
    assert bound_to(api) == {"loose": "a"}
    message = api.last_status("default/bad")["conditions"][0]["message"]
    assert "PodGroup.scheduling.volcano.sh default/bad: spec.minMember" in message
    assert any(e["reason"] == "Invalid" for e in events_about(api, "bad"))


@pytest.mark.asyncio
async def test_a_coscheduling_gang_is_placed_whole_and_counted_in_its_own_fields(
    api: FakeApi, scheduler: Scheduler
) -> None:
    scheduler.foreign_group_changed(coscheduling_pod_group("ray", 3))
    for i in range(3):
        scheduler.pod_changed(coscheduling_member(f"ray-{i}", 4, "ray"))
    await run_cycle(scheduler)
    assert set(bound_to(api).values()) == {"b", "c"}
    await run_cycle(scheduler)
    status = api.last_status("default/ray")
    assert (status["phase"], status["running"]) == ("Scheduled", 0)


# ----- Kueue plain pods ------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_kueue_group_waits_for_its_gated_pods_then_lands_whole_where_kueue_said(
    api: FakeApi, scheduler: Scheduler
) -> None:
    rack_1 = {RACK: "rack-1"}
    for i in range(3):
        gates = ("kueue.x-k8s.io/admission",) if i == 2 else ()
        scheduler.pod_changed(kueue_member(f"k-{i}", 2, "batch", 3, selector=rack_1, gates=gates))
    await run_cycle(scheduler)
    assert api.binds == []
    scheduler.pod_changed(kueue_member("k-2", 2, "batch", 3, selector=rack_1))
    await run_cycle(scheduler)
    assert bound_to(api) == {"k-0": "a", "k-1": "a", "k-2": "a"}


@pytest.mark.asyncio
async def test_kueue_pods_that_disagree_on_their_groups_size_wait_naming_the_annotation(
    api: FakeApi, scheduler: Scheduler
) -> None:
    scheduler.pod_changed(kueue_member("k-0", 1, "batch", 2))
    scheduler.pod_changed(kueue_member("k-1", 1, "batch", 3))
    scheduler.pod_changed(pod("loose", 1))
    await run_cycle(scheduler)
    assert bound_to(api) == {"loose": "a"}
    messages = [e["message"] for e in events_about(api, "k-0")]
    assert any("kueue.x-k8s.io/pod-group-total-count" in m for m in messages)


@pytest.mark.asyncio
async def test_a_kueue_pod_without_its_groups_size_waits_naming_the_annotation(
    api: FakeApi, scheduler: Scheduler
) -> None:
    lonely = pod("k-0", 1)
    lonely["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] = "batch"
    scheduler.pod_changed(lonely)
    await run_cycle(scheduler)
    assert api.binds == []
    [event] = events_about(api, "k-0")
    assert "metadata.annotations[kueue.x-k8s.io/pod-group-total-count]" in event["message"]


# ----- scheduler-name aliases ------------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_gang_under_a_forced_scheduler_name_is_placed_when_the_name_is_an_alias() -> None:
    api = FakeApi()
    config = load_config(
        {
            "schedulerNameAliases": ["scheduler-plugins-scheduler"],
            "operator": {"batchWindowSeconds": 0},
        }
    )
    scheduler = build_scheduler(config, ClusterState(), api, clock=Clock())
    for name, rack in (("a", "rack-1"), ("b", "rack-2"), ("c", "rack-2")):
        scheduler.state.upsert_node(node(name, rack=rack))
    scheduler.foreign_group_changed(coscheduling_pod_group("ray", 3))
    for i in range(3):
        forced = coscheduling_member(f"ray-{i}", 4, "ray", scheduler="scheduler-plugins-scheduler")
        scheduler.pod_changed(forced)
    scheduler.pod_changed(pod("kube", 1, scheduler="default-scheduler"))
    await run_cycle(scheduler)
    assert sorted(bound_to(api)) == ["ray-0", "ray-1", "ray-2"]
    assert set(bound_to(api).values()) == {"b", "c"}


@pytest.mark.parametrize(
    ("story", "raw", "field"),
    [
        (
            "an alias naming kube-scheduler",
            {"schedulerNameAliases": ["default-scheduler"]},
            "schedulerNameAliases",
        ),
        ("our own name kube-scheduler's", {"schedulerName": "default-scheduler"}, "schedulerName"),
        ("an empty alias", {"schedulerNameAliases": [""]}, "schedulerNameAliases"),
    ],
)
def test_a_config_taking_kube_schedulers_pods_unasked_is_refused_at_load(
    story: str, raw: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidObjectError) as caught:
        load_config(raw)
    assert caught.value.field == field, story


def test_kube_schedulers_name_is_an_alias_when_explicitly_allowed() -> None:
    config = load_config(
        {"schedulerNameAliases": ["default-scheduler"], "allowDefaultSchedulerAlias": True}
    )
    assert config.scheduler_names == {"gpusched", "default-scheduler"}


@pytest.mark.parametrize(
    "body",
    [
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "v"},
        },
        {**volcano_pod_group("v", 2), "spec": ["not", "a", "mapping"]},
        volcano_pod_group("v", [4]),
        {**upstream_pod_group("u", 2), "spec": {"schedulingPolicy": {"gang": {}}}},
        {**upstream_pod_group("u", 2), "spec": {"disruptionMode": {"all": {}, "single": {}}}},
        {**upstream_pod_group("u", 2), "kind": "Workload"},
        {**coscheduling_pod_group("c", 2), "kind": "ElasticQuota"},
    ],
)
def test_a_malformed_foreign_group_never_stops_the_operator(body: dict[str, Any]) -> None:
    state = ClusterState()
    state.upsert_foreign(body)
    for spec in state.group_specs():
        assert spec.invalid is not None


@pytest.mark.asyncio
async def test_an_upstream_group_whose_pods_a_preemption_evicts_is_a_disruption_target(
    api: FakeApi, scheduler: Scheduler
) -> None:
    scheduler.foreign_group_changed(upstream_pod_group("low", 2, key=None))
    for i in range(2):
        scheduler.pod_changed(upstream_member(f"low-{i}", 1, "low", node="a", at=[i]))
    await run_cycle(scheduler)
    assert [c["type"] for c in api.last_status("default/low")["conditions"]] == [
        "PodGroupInitiallyScheduled"
    ]
    mark = Mark("default/urgent", "default/k8s:low", 2, "plan-1").to_json()
    marked = upstream_member("low-0", 1, "low", node="a", at=[0])
    marked["metadata"]["annotations"]["gpusched.io/preemption"] = mark
    scheduler.pod_changed(marked)
    await run_cycle(scheduler)
    conditions = {c["type"]: c for c in api.last_status("default/low")["conditions"]}
    target = conditions["DisruptionTarget"]
    assert (target["status"], target["reason"]) == ("True", "PreemptionByScheduler")
    assert "default/urgent" in target["message"]


@pytest.mark.asyncio
async def test_an_upstream_group_of_kube_schedulers_pods_is_left_to_kube_scheduler(
    api: FakeApi, scheduler: Scheduler
) -> None:
    scheduler.foreign_group_changed(upstream_pod_group("theirs", 2, key=None))
    for i in range(2):
        scheduler.pod_changed(
            upstream_member(f"theirs-{i}", 1, "theirs", scheduler="default-scheduler")
        )
    scheduler.foreign_group_changed(upstream_pod_group("empty", 2, key=None))
    await run_cycle(scheduler)
    assert api.binds == []
    assert api.statuses == []
    assert api.events == []


@pytest.mark.asyncio
async def test_a_new_leader_lists_foreign_groups_before_its_first_decision() -> None:
    api, clock = FakeApi(), Clock()
    config = load_config({"operator": {"batchWindowSeconds": 0}})
    leading = [False]
    scheduler = build_scheduler(
        config, ClusterState(), api, clock=clock, leading=lambda: leading[0]
    )
    nodes = [
        node(name, rack=rack) for name, rack in (("a", "rack-1"), ("b", "rack-2"), ("c", "rack-2"))
    ]
    members = [volcano_member(f"train-{i}", 4, "train") for i in range(4)]

    async def list_nodes() -> list[dict[str, Any]]:
        return nodes

    async def fresh_list() -> AsyncIterator[Listing]:
        yield Listing(members)

    async def list_groups() -> list[dict[str, Any]]:  # as the client lists them: kind added
        return [volcano_pod_group("train", 4)]

    api.list_groups = list_groups  # type: ignore[method-assign]
    api.list_nodes = list_nodes  # type: ignore[method-assign]
    leading[0] = True
    await scheduler.take_leadership(fresh_list())
    await run_cycle(scheduler)
    assert set(bound_to(api).values()) == {"b", "c"}


# ----- owner groups in the operator -------------------------------------------------------------


def owned_pod(name: str, gpus: int, kind: str, owner: str, api: str = "batch/v1") -> Any:
    body = pod(name, gpus)
    reference = {"apiVersion": api, "kind": kind, "name": owner, "controller": True}
    body["metadata"]["ownerReferences"] = [reference]
    return body


def job(name: str, parallelism: int, owner: Any = None) -> Any:
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": "default",
        "annotations": {"scheduling.gpusched.io/topology-key": RACK},
    }
    if owner is not None:
        metadata["ownerReferences"] = [{**owner, "controller": True}]
    return {"metadata": metadata, "spec": {"parallelism": parallelism}}


def owner_service(api: FakeApi) -> Scheduler:
    config = load_config(
        {"ownerGroups": {"namespaces": ["default"]}, "operator": {"batchWindowSeconds": 0}}
    )
    scheduler = build_scheduler(config, ClusterState(), api, clock=Clock())
    for name, rack in (("a", "rack-1"), ("b", "rack-2"), ("c", "rack-2")):
        scheduler.state.upsert_node(node(name, rack=rack))
    return scheduler


@pytest.mark.asyncio
async def test_pods_listed_before_their_job_wait_for_it_then_land_whole_as_its_gang() -> None:
    api = FakeApi()
    scheduler = owner_service(api)
    for i in range(4):
        scheduler.pod_changed(owned_pod(f"j-{i}", 4, "Job", "train"))
    await run_cycle(scheduler)
    assert api.binds == []  # the Job not seen yet: never placed alone
    assert any("owner:Job.train" in e["message"] for e in events_about(api, "j-0"))
    scheduler.owner_changed("batch/v1", "Job", job("train", 4))
    await run_cycle(scheduler)
    assert set(bound_to(api).values()) == {"b", "c"}
    assert len(api.binds) == 4


@pytest.mark.asyncio
async def test_a_jobsets_gang_spans_its_jobs_and_waits_for_all_of_them() -> None:
    api = FakeApi()
    scheduler = owner_service(api)
    jobset_ref = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "js"}
    jobset = {
        "metadata": {"name": "js", "namespace": "default"},
        "spec": {"replicatedJobs": [{"replicas": 2, "template": {"spec": {"parallelism": 2}}}]},
    }
    scheduler.owner_changed("jobset.x-k8s.io/v1alpha2", "JobSet", jobset)
    for j in range(2):
        scheduler.owner_changed("batch/v1", "Job", job(f"js-{j}", 2, jobset_ref))
    for i in range(3):
        scheduler.pod_changed(owned_pod(f"js-{i // 2}-{i % 2}", 1, "Job", f"js-{i // 2}"))
    await run_cycle(scheduler)
    assert api.binds == []  # 3 of the JobSet's 4
    scheduler.pod_changed(owned_pod("js-1-1", 1, "Job", "js-1"))
    await run_cycle(scheduler)
    assert len(api.binds) == 4


@pytest.mark.asyncio
async def test_without_owner_groups_a_jobs_pods_are_placed_one_by_one(api: FakeApi) -> None:
    scheduler = service(api, Clock())
    scheduler.owner_changed("batch/v1", "Job", job("train", 8))
    for i in range(2):
        scheduler.pod_changed(owned_pod(f"j-{i}", 1, "Job", "train"))
    await run_cycle(scheduler)
    assert len(api.binds) == 2


@pytest.mark.asyncio
async def test_a_pod_whose_owner_cannot_be_sized_is_a_gang_of_one_and_is_told_so() -> None:
    api = FakeApi()
    scheduler = owner_service(api)
    for i in range(2):
        scheduler.pod_changed(owned_pod(f"web-{i}", 1, "ReplicaSet", "web-1", api="apps/v1"))
    await run_cycle(scheduler)
    assert len(api.binds) == 2
    told = [e for e in events_about(api, "web-0") if e["reason"] == "OwnerKindUnknown"]
    assert len(told) == 1
    assert "ReplicaSet default/web-1" in told[0]["message"]
    await run_cycle(scheduler)
    assert len([e for e in api.events if e["reason"] == "OwnerKindUnknown"]) == 2


def owned_by(body: Any, api: str, kind: str, owner: str) -> Any:
    reference = {"apiVersion": api, "kind": kind, "name": owner, "controller": True}
    body["metadata"]["ownerReferences"] = [reference]
    return body


@pytest.mark.asyncio
async def test_a_leader_worker_sets_workers_reach_it_through_their_leaders_statefulset() -> None:
    # As LWS's controller makes them: LWS lws → StatefulSet lws → leader Pod lws-0 →
    # StatefulSet lws-0 → worker Pods lws-0-1 … lws-0-3; all labelled with the group index.
    api = FakeApi()
    scheduler = owner_service(api)
    lws_api, apps = "leaderworkerset.x-k8s.io/v1", "apps/v1"
    lws = {
        "metadata": {
            "name": "lws",
            "namespace": "default",
            "annotations": {"scheduling.gpusched.io/topology-key": RACK},
        },
        "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 4}},
    }
    index = {"leaderworkerset.sigs.k8s.io/group-index": "0"}
    scheduler.owner_changed(lws_api, "LeaderWorkerSet", lws)
    leader_set = owned_by(
        {"metadata": {"name": "lws", "namespace": "default"}}, lws_api, "LeaderWorkerSet", "lws"
    )
    worker_set = owned_by(
        {"metadata": {"name": "lws-0", "namespace": "default"}}, "v1", "Pod", "lws-0"
    )
    scheduler.owner_changed(apps, "StatefulSet", leader_set)
    scheduler.owner_changed(apps, "StatefulSet", worker_set)
    for i in range(1, 4):
        worker = owned_by(pod(f"lws-0-{i}", 4), apps, "StatefulSet", "lws-0")
        worker["metadata"]["labels"] = dict(index)
        scheduler.pod_changed(worker)
    await run_cycle(scheduler)
    assert api.binds == []  # their leader not seen yet: never placed alone
    leader = owned_by(pod("lws-0", 4), apps, "StatefulSet", "lws")
    leader["metadata"]["labels"] = dict(index)
    scheduler.pod_changed(leader)
    await run_cycle(scheduler)
    assert len(api.binds) == 4, bound_to(api)
    assert set(bound_to(api).values()) == {"b", "c"}


def label_service(api: FakeApi, namespaces: list[str]) -> Scheduler:
    config = load_config(
        {"ownerGroups": {"namespaces": namespaces}, "operator": {"batchWindowSeconds": 0}}
    )
    scheduler = build_scheduler(config, ClusterState(), api, clock=Clock())
    for name, rack in (("a", "rack-1"), ("b", "rack-2"), ("c", "rack-2")):
        scheduler.state.upsert_node(node(name, rack=rack))
    return scheduler


@pytest.mark.parametrize(
    ("namespaces", "label", "want_bound"),
    [
        pytest.param([], "enabled", 0, id="labelled enabled, not in the config: one gang of 4"),
        pytest.param(["default"], "disabled", 3, id="labelled disabled, in the config: one by one"),
        pytest.param([], None, 3, id="no label, not in the config: one by one"),
    ],
)
@pytest.mark.asyncio
async def test_a_namespace_label_turns_owner_groups_on_or_off_beside_the_config(
    namespaces: list[str], label: str | None, want_bound: int
) -> None:
    # A Job of parallelism 4 with 3 pods so far: as its gang, none goes.
    api = FakeApi()
    scheduler = label_service(api, namespaces)
    labels = {} if label is None else {"scheduling.gpusched.io/owner-groups": label}
    scheduler.namespace_changed("default", labels)
    scheduler.owner_changed("batch/v1", "Job", job("train", 4))
    for i in range(3):
        scheduler.pod_changed(owned_pod(f"j-{i}", 1, "Job", "train"))
    await run_cycle(scheduler)
    assert len(api.binds) == want_bound


@pytest.mark.asyncio
async def test_a_namespace_labelled_after_its_pods_came_groups_them_from_then_on() -> None:
    api = FakeApi()
    scheduler = label_service(api, [])
    scheduler.owner_changed("batch/v1", "Job", job("train", 4))  # kept though no one groups yet
    for i in range(3):
        scheduler.pod_changed(owned_pod(f"j-{i}", 8, "Job", "train"))
    scheduler.namespace_changed("default", {"scheduling.gpusched.io/owner-groups": "enabled"})
    await run_cycle(scheduler)
    assert api.binds == []  # 3 of the Job's 4: waits whole
    scheduler.namespace_changed("default", {})
    await run_cycle(scheduler)
    assert len(api.binds) == 3


@pytest.mark.parametrize(
    ("spec", "annotations", "want_leader_alone"),
    [
        pytest.param({"startupPolicy": "LeaderReady"}, {}, 1, id="LeaderReady: leader first"),
        pytest.param(
            {},
            {"leaderworkerset.sigs.k8s.io/exclusive-topology": RACK},
            1,
            id="exclusive placement: leader first",
        ),
        pytest.param({}, {}, 0, id="LeaderCreated: the leader waits for its workers"),
    ],
)
@pytest.mark.asyncio
async def test_a_leader_worker_set_whose_workers_wait_for_their_leader_places_the_leader_first(
    spec: dict[str, Any], annotations: dict[str, str], want_leader_alone: int
) -> None:
    # LWS's controller makes the workers' StatefulSet only once the leader is scheduled
    # (exclusive placement) or Ready (LeaderReady): a gang of 4 would wait for ever.
    api = FakeApi()
    scheduler = owner_service(api)
    lws_api, apps = "leaderworkerset.x-k8s.io/v1", "apps/v1"
    lws = {
        "metadata": {"name": "lws", "namespace": "default", "annotations": annotations},
        "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 4}, **spec},
    }
    scheduler.owner_changed(lws_api, "LeaderWorkerSet", lws)
    leader_set = owned_by(
        {"metadata": {"name": "lws", "namespace": "default"}}, lws_api, "LeaderWorkerSet", "lws"
    )
    scheduler.owner_changed(apps, "StatefulSet", leader_set)
    labels = {"leaderworkerset.sigs.k8s.io/group-index": "0"}
    leader = owned_by(pod("lws-0", 4), apps, "StatefulSet", "lws")
    leader["metadata"]["labels"] = {**labels, "leaderworkerset.sigs.k8s.io/worker-index": "0"}
    scheduler.pod_changed(leader)
    await run_cycle(scheduler)
    assert len(api.binds) == want_leader_alone
    if not want_leader_alone:
        return
    worker_set = owned_by(
        {"metadata": {"name": "lws-0", "namespace": "default"}}, "v1", "Pod", "lws-0"
    )
    scheduler.owner_changed(apps, "StatefulSet", worker_set)
    for i in range(1, 3):  # 2 of the 3 workers: their gang waits for the third
        worker = owned_by(pod(f"lws-0-{i}", 4), apps, "StatefulSet", "lws-0")
        worker["metadata"]["labels"] = {
            **labels,
            "leaderworkerset.sigs.k8s.io/worker-index": str(i),
        }
        scheduler.pod_changed(worker)
    await run_cycle(scheduler)
    assert len(api.binds) == 1
    worker = owned_by(pod("lws-0-3", 4), apps, "StatefulSet", "lws-0")
    worker["metadata"]["labels"] = {**labels, "leaderworkerset.sigs.k8s.io/worker-index": "3"}
    scheduler.pod_changed(worker)
    await run_cycle(scheduler)
    assert len(api.binds) == 4

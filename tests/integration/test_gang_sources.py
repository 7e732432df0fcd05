"""Gangs as other projects write them, on the real control plane: the upstream Workload API
(``scheduling.k8s.io`` PodGroup and CompositePodGroup, pods naming their group in
``spec.schedulingGroup``), Volcano's and coscheduling's PodGroups (CRDs from
tests/data/crds), Kueue's plain-pod groups, a scheduler name forced by a controller, and a pod
that names two groups. Each story asserts where the real operator bound the pods, and what it
wrote on the foreign object in that object's own fields.

Every story has the same two racks (8 GPUs a node): a gang of 4 pods × 4 GPUs fits only in
rack-2, and ignoring the group splits it 2 + 2.

    #      zone-a
    #    /       \\
    #  rack-1   rack-2
    #  n1-1     n2-1 n2-2

The same gangs as the real controllers write them (the Job controller's Workload and
PodGroup, KubeRay's coscheduling PodGroup, Kueue ungating a group, a plain Job's owner group)
are in tests/integration/test_real_gangs.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from testing.apiserver import ApiClient, wait_for
from testing.apiserver.resources import ResourceSpec
from testing.cluster.cluster import RealCluster
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
from testing.harness import (
    RACK,
    domains,
    dump,
    events_for,
    gpu_node,
    gpu_pod,
    placement_of,
    pods,
    running_operator,
)
from testing.upstream import clear_upstream, kube_scheduler

CRDS = Path(__file__).resolve().parents[1] / "data" / "crds"
VOLCANO = ResourceSpec("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup", True)
COSCHEDULING = ResourceSpec(
    "scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup", True, status_subresource=True
)
UPSTREAM = "scheduling.k8s.io"
GANG = [f"train-{i}" for i in range(4)]


@pytest.fixture
def cluster(apiserver: Any, api: ApiClient) -> Iterator[ApiClient]:
    """Two racks, the foreign CRDs installed (before the operator starts: it discovers what
    is served once), and every foreign group cleared after the story."""
    if not isinstance(apiserver, RealCluster):
        pytest.skip("a story of the real control plane")
    _install_crds(api)
    for rack, names in (("rack-1", ["n1-1"]), ("rack-2", ["n2-1", "n2-2"])):
        for name in names:
            api.create(gpu_node(name, "zone-a", rack))
    try:
        yield api
    finally:
        clear_upstream(api, ["default"])
        for spec in (VOLCANO, COSCHEDULING):
            api.http.request("DELETE", spec.path("default"))


def _install_crds(api: ApiClient) -> None:
    for path in sorted(CRDS.glob("*.yaml")):
        body = yaml.safe_load(path.read_text(encoding="utf-8"))
        name = body["metadata"]["name"]
        crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        if api.http.get(f"{crds}/{name}").status_code == 404:
            response = api.http.post(crds, json=body)
            assert response.status_code < 300, response.text
    for spec in (VOLCANO, COSCHEDULING):
        if spec not in api.specs:
            api.specs.append(spec)
        wait_for(
            lambda s=spec: api.http.get(s.path("default")).status_code == 200,
            message=f"{spec.plural}.{spec.group} served",
        )


def _bound_in_one_rack(api: ApiClient, names: list[str]) -> str:
    keys = [f"default/{name}" for name in names]
    wait_for(
        lambda: all(placement_of(pods(api).get(k, {})) for k in keys),
        timeout=30,
        message=lambda: f"all of {names} bound: {dump(pods(api, 'default'))}",
    )
    racks = domains(api, keys, RACK)
    assert len(racks) == 1, f"{names} split over {racks}"
    return racks.pop()


def _their_status(api: ApiClient, spec: ResourceSpec, name: str) -> dict[str, Any]:
    body = api.http.get(spec.path("default", name)).json()
    status: dict[str, Any] = body.get("status") or {}
    return status


def _upstream_condition(api: ApiClient, name: str) -> dict[str, Any]:
    body = api.get("podgroups", name, "default", group=UPSTREAM)
    for item in (body.get("status") or {}).get("conditions") or []:
        if item["type"] == "PodGroupInitiallyScheduled":
            return dict(item)
    return {}


def test_an_upstream_gang_lands_whole_in_the_one_rack_it_fits_and_says_so_upstreams_way(
    cluster: ApiClient, kubeconfig: Path
) -> None:
    api = cluster
    with running_operator(kubeconfig):
        api.create(upstream_pod_group("train", 4))
        for name in GANG:
            api.create(upstream_member(name, 4, "train"))
        assert _bound_in_one_rack(api, GANG) == "rack-2"
        condition = wait_for(
            lambda: (c := _upstream_condition(api, "train")).get("status") == "True" and c,
            message=lambda: f"PodGroupInitiallyScheduled: {_upstream_condition(api, 'train')}",
        )
        assert condition["reason"] == "Scheduled"
        assert "rack-2" in condition["message"]


def test_pods_naming_an_upstream_group_not_yet_created_wait_then_land_whole(
    cluster: ApiClient, kubeconfig: Path
) -> None:
    api = cluster
    with running_operator(kubeconfig) as runtime:
        for name in GANG:
            api.create(upstream_member(name, 4, "train"))
        wait_for(
            lambda: any("not found" in e["message"] for e in events_for(api, "train-0")),
            message=lambda: f"a waiting Event on train-0: {events_for(api, 'train-0')}",
        )
        assert not any(placement_of(p) for p in pods(api, "default").values())
        assert runtime.scheduler.state.pending()
        api.create(upstream_pod_group("train", 4))
        assert _bound_in_one_rack(api, GANG) == "rack-2"


def test_a_basic_upstream_composite_places_the_child_that_fits_and_leaves_the_other_waiting(
    cluster: ApiClient, kubeconfig: Path
) -> None:
    # A CompositePodGroup (v1alpha3) with the `basic` policy over two gangs of 2 pods × 8
    # GPUs; the 3 nodes hold one of them. Basic: the children go independently, so the one
    # that fits is bound and the other waits (a gang composite would bind neither).
    api = cluster
    composite = upstream_composite("job", 2, key="topology.kubernetes.io/zone")
    composite["spec"]["schedulingPolicy"] = {"basic": {}}
    composite["spec"]["workloadRef"] = {"workloadName": "job", "templateName": "job"}  # required
    with running_operator(kubeconfig):
        api.create(composite)
        for part in ("p0", "p1"):
            child = upstream_pod_group(f"job-{part}", 2, key=None, parent="job")
            child["spec"]["workloadRef"] = {"workloadName": "job", "templateName": part}
            api.create(child)
            for i in range(2):
                api.create(upstream_member(f"job-{part}-{i}", 8, f"job-{part}"))
        names = [f"job-{part}-{i}" for part in ("p0", "p1") for i in range(2)]

        def bound() -> list[str]:
            everything = pods(api, "default")
            return sorted(n for n in names if placement_of(everything[f"default/{n}"]))

        placed = wait_for(
            lambda: len(b := bound()) == 2 and b,
            message=lambda: f"one child bound: {dump(pods(api, 'default'))}",
        )
        assert {name.rsplit("-", 1)[0] for name in placed} in ({"job-p0"}, {"job-p1"})
        condition = wait_for(
            lambda: (c := _composite_condition(api, "job")).get("status") == "True" and c,
            message=lambda: (
                f"CompositePodGroupInitiallyScheduled: {_composite_condition(api, 'job')}"
            ),
        )
        assert condition["reason"] == "Scheduled"
        assert bound() == placed  # the other child still waits


def _composite_condition(api: ApiClient, name: str) -> dict[str, Any]:
    body = api.get("compositepodgroups", name, "default", group=UPSTREAM)
    for item in (body.get("status") or {}).get("conditions") or []:
        if item["type"] == "CompositePodGroupInitiallyScheduled":
            return dict(item)
    return {}


def test_a_volcano_gang_lands_whole_and_its_podgroup_reads_as_volcanos(
    cluster: ApiClient, kubeconfig: Path
) -> None:
    api = cluster
    with running_operator(kubeconfig):
        api.create(volcano_pod_group("train", 4, queue="research"))
        for name in GANG:
            api.create(volcano_member(name, 4, "train"))
        assert _bound_in_one_rack(api, GANG) == "rack-2"
        status = wait_for(
            lambda: (s := _their_status(api, VOLCANO, "train")).get("phase") == "Inqueue" and s,
            message=lambda: f"Volcano status: {_their_status(api, VOLCANO, 'train')}",
        )
        assert status["conditions"][0]["type"] == "Scheduled"


def test_a_volcano_min_member_above_its_pods_holds_nothing_names_the_shortfall_and_others_go_on(
    cluster: ApiClient, kubeconfig: Path
) -> None:
    api = cluster
    with running_operator(kubeconfig):
        api.create(volcano_pod_group("train", 5, key=None))
        for name in GANG:
            api.create(volcano_member(name, 1, "train"))
        api.create(gpu_pod("loose", 1))
        wait_for(lambda: placement_of(pods(api)["default/loose"]), message="loose bound")
        status = wait_for(  # the status follows the pods as they come: 4 of them in the end
            lambda: (
                "4 of 5" in (s := _their_status(api, VOLCANO, "train"))["conditions"][0]["message"]
                and s
            ),
            message=lambda: f"Volcano status: {_their_status(api, VOLCANO, 'train')}",
        )
        assert status["phase"] == "Pending"
        assert status["conditions"][0]["reason"] == "NotEnoughResources"
        assert not any(placement_of(pods(api)[f"default/{n}"]) for n in GANG)


def test_a_volcano_group_waits_for_its_min_resources_then_goes_once_the_cluster_has_them(
    cluster: ApiClient, kubeconfig: Path
) -> None:
    # minMember 2 of 1-GPU pods: they would fit at once, but minResources asks 28 GPUs of a
    # cluster with 24. Volcano keeps such a group Pending (NotEnoughResources) in its enqueue
    # action; so does gpusched, until a node joins.
    api = cluster
    with running_operator(kubeconfig):
        api.create(volcano_pod_group("train", 2, key=None, minResources={"nvidia.com/gpu": "28"}))
        for name in GANG[:2]:
            api.create(volcano_member(name, 1, "train"))
        status = wait_for(
            lambda: (
                "minResources"
                in (s := _their_status(api, VOLCANO, "train"))
                .get("conditions", [{}])[0]
                .get("message", "")
                and s
            ),
            message=lambda: f"Volcano status: {_their_status(api, VOLCANO, 'train')}",
        )
        assert status["phase"] == "Pending"
        assert status["conditions"][0]["reason"] == "NotEnoughResources"
        assert "24 of the 28 nvidia.com/gpu" in status["conditions"][0]["message"]
        assert not any(placement_of(pods(api)[f"default/{n}"]) for n in GANG[:2])
        api.create(gpu_node("n3-1", "zone-a", "rack-3"))
        keys = [f"default/{n}" for n in GANG[:2]]
        wait_for(
            lambda: all(placement_of(pods(api)[k]) for k in keys),
            timeout=30,
            message=lambda: f"both bound: {dump(pods(api, 'default'))}",
        )


def test_a_coscheduling_gang_under_a_forced_scheduler_name_is_placed_through_the_alias(
    cluster: ApiClient, kubeconfig: Path
) -> None:
    api = cluster
    config = {"schedulerNameAliases": ["scheduler-plugins-scheduler"]}
    with running_operator(kubeconfig, config):
        api.create(coscheduling_pod_group("train", 4))
        for name in GANG:
            api.create(
                coscheduling_member(name, 4, "train", scheduler="scheduler-plugins-scheduler")
            )
        assert _bound_in_one_rack(api, GANG) == "rack-2"
        wait_for(
            lambda: _their_status(api, COSCHEDULING, "train").get("phase") == "Scheduled",
            message=lambda: f"coscheduling status: {_their_status(api, COSCHEDULING, 'train')}",
        )


def test_a_kueue_group_waits_while_gated_then_lands_whole_where_its_selector_says(
    cluster: ApiClient, kubeconfig: Path
) -> None:
    api = cluster
    gate = "kueue.x-k8s.io/admission"
    with running_operator(kubeconfig):
        for i in range(3):
            api.create(
                kueue_member(f"k-{i}", 2, "batch", 3, selector={RACK: "rack-1"}, gates=(gate,))
            )
        for i in range(2):  # Kueue admits pods one by one: a part of the group must not go
            api.patch("pods", f"k-{i}", {"spec": {"schedulingGates": None}}, namespace="default")
        wait_for(
            lambda: any(e["reason"] == "WaitingForPods" for e in events_for(api, "k-0")),
            message=lambda: f"k-0 waiting: {events_for(api, 'k-0')}",
        )
        assert not any(placement_of(p) for p in pods(api, "default").values())
        api.patch("pods", "k-2", {"spec": {"schedulingGates": None}}, namespace="default")
        assert _bound_in_one_rack(api, ["k-0", "k-1", "k-2"]) == "rack-1"


def test_a_pod_claimed_by_two_groups_is_refused_naming_both_and_the_rest_is_scheduled(
    cluster: ApiClient, kubeconfig: Path
) -> None:
    api = cluster
    with running_operator(kubeconfig):
        torn = upstream_member("torn", 1, "train")
        torn["metadata"]["labels"]["scheduling.gpusched.io/pod-group"] = "other"
        api.create(torn)
        api.create(gpu_pod("loose", 1))
        wait_for(lambda: placement_of(pods(api)["default/loose"]), message="loose bound")
        message = wait_for(
            lambda: next((e["message"] for e in events_for(api, "torn")), ""),
            message="an Event on the torn pod",
        )
        assert "spec.schedulingGroup.podGroupName" in message
        assert "metadata.labels[scheduling.gpusched.io/pod-group]" in message
        assert placement_of(pods(api)["default/torn"]) is None


def test_an_upstream_gang_whose_pods_are_fewer_than_its_min_count_waits_saying_so(
    cluster: ApiClient, kubeconfig: Path
) -> None:
    api = cluster
    with running_operator(kubeconfig):
        api.create(upstream_pod_group("train", 4, key=None))
        for name in GANG[:3]:
            api.create(upstream_member(name, 1, "train"))
        api.create(gpu_pod("loose", 1))
        wait_for(lambda: placement_of(pods(api)["default/loose"]), message="loose bound")
        condition = wait_for(
            lambda: (c := _upstream_condition(api, "train")).get("status") == "False" and c,
            message=lambda: f"PodGroupInitiallyScheduled: {_upstream_condition(api, 'train')}",
        )
        assert condition["reason"] == "Unschedulable"
        assert condition["message"].startswith("WaitingForPods"), condition
        assert not any(placement_of(pods(api)[f"default/{n}"]) for n in GANG[:3])


def test_a_jobs_pods_without_a_group_are_one_gang_when_owner_groups_are_on(
    cluster: ApiClient, kubeconfig: Path
) -> None:
    # No job controller runs here: the test makes the Job, then its pods as the controller
    # would (owned by it, with its uid, so the garbage collector keeps them).
    api = cluster
    if not any(s.plural == "jobs" for s in api.specs):
        api.specs.append(ResourceSpec("batch", "v1", "jobs", "Job", True, status_subresource=True))
    config = {"ownerGroups": {"namespaces": ["default"]}}
    with running_operator(kubeconfig, config):
        template = {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}
        annotations = {"scheduling.gpusched.io/topology-key": RACK}
        body = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "train", "namespace": "default", "annotations": annotations},
            "spec": {"parallelism": 4, "completions": 4, "suspend": True, "template": template},
        }
        uid = api.create(body)["metadata"]["uid"]
        owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": uid}
        for name in GANG:
            member = gpu_pod(name, 4)
            member["metadata"]["ownerReferences"] = [{**owner, "controller": True}]
            api.create(member)
        assert _bound_in_one_rack(api, GANG) == "rack-2"
    api.http.request("DELETE", "/apis/batch/v1/namespaces/default/jobs/train")


@pytest.mark.parametrize("scheduler", ["gpusched", "default-scheduler"])
def test_the_same_upstream_objects_land_whole_in_rack_2_with_either_scheduler(
    cluster: ApiClient, apiserver: RealCluster, kubeconfig: Path, scheduler: str
) -> None:
    # Side by side on identical objects: only spec.schedulerName differs (no translation).
    api = cluster

    def story() -> None:
        api.create(upstream_pod_group("train", 4))
        for name in GANG:
            api.create(upstream_member(name, 4, "train", scheduler=scheduler))
        assert _bound_in_one_rack(api, GANG) == "rack-2"
        condition = wait_for(
            lambda: (c := _upstream_condition(api, "train")).get("status") == "True" and c,
            message=lambda: f"PodGroupInitiallyScheduled: {_upstream_condition(api, 'train')}",
        )
        assert condition["reason"] == "Scheduled"

    if scheduler == "gpusched":
        with running_operator(kubeconfig):
            story()
    else:
        with kube_scheduler(apiserver):
            story()


def _statefulset(name: str, namespace: str, owner: dict[str, Any]) -> dict[str, Any]:
    """A StatefulSet as LWS's controller writes one (no StatefulSet controller runs here:
    its pods are written by the test, as that controller would)."""
    labels = {"leaderworkerset.sigs.k8s.io/name": "lws"}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "ownerReferences": [_reference(owner)],
        },
        "spec": {
            "serviceName": "lws",
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "serve", "image": "registry.example/serve:1"}]},
            },
        },
    }


def _reference(owner: dict[str, Any]) -> dict[str, Any]:
    meta = owner["metadata"]
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _lws_pod(name: str, namespace: str, owner: dict[str, Any]) -> dict[str, Any]:
    body = gpu_pod(name, 4, namespace=namespace)
    body["metadata"]["labels"] = {
        "leaderworkerset.sigs.k8s.io/name": "lws",
        "leaderworkerset.sigs.k8s.io/group-index": "0",
    }
    body["metadata"]["ownerReferences"] = [_reference(owner)]
    return body


def test_a_leader_worker_sets_pods_are_one_gang_in_a_namespace_opted_in_by_its_label(
    cluster: ApiClient, workload_crds: RealCluster, kubeconfig: Path
) -> None:
    # The owner chain LWS's controller makes: LeaderWorkerSet lws → StatefulSet lws → leader
    # Pod lws-0 → StatefulSet lws-0 → worker Pods lws-0-1 … lws-0-3. Owner groups are off in
    # the configuration; the Namespace's label turns them on. The 4 pods × 4 GPUs fit whole
    # only in rack-2; as gangs of one they would split.
    api = cluster
    namespace = "serve"
    workload_crds.ensure_namespace(namespace)
    api.patch(
        "namespaces",
        namespace,
        {"metadata": {"labels": {"scheduling.gpusched.io/owner-groups": "enabled"}}},
    )
    lws_api = "leaderworkerset.x-k8s.io"
    sets = ResourceSpec("apps", "v1", "statefulsets", "StatefulSet", True)
    try:
        with running_operator(kubeconfig):
            lws = api.http.post(
                f"/apis/{lws_api}/v1/namespaces/{namespace}/leaderworkersets",
                json={
                    "apiVersion": f"{lws_api}/v1",
                    "kind": "LeaderWorkerSet",
                    "metadata": {
                        "name": "lws",
                        "namespace": namespace,
                        "annotations": {"scheduling.gpusched.io/topology-key": RACK},
                    },
                    "spec": {
                        "replicas": 1,
                        "leaderWorkerTemplate": {
                            "size": 4,
                            "workerTemplate": {
                                "spec": {"containers": [{"name": "w", "image": "r.example/w:1"}]}
                            },
                        },
                    },
                },
            )
            assert lws.status_code < 300, lws.text
            leaders = api.http.post(
                sets.path(namespace), json=_statefulset("lws", namespace, lws.json())
            ).json()
            leader = api.create(_lws_pod("lws-0", namespace, leaders))
            workers = api.http.post(
                sets.path(namespace), json=_statefulset("lws-0", namespace, leader)
            ).json()
            names = ["lws-0", *(f"lws-0-{i}" for i in range(1, 4))]
            for name in names[1:]:
                api.create(_lws_pod(name, namespace, workers))
            keys = [f"{namespace}/{name}" for name in names]
            wait_for(
                lambda: all(placement_of(pods(api).get(k, {})) for k in keys),
                timeout=30,
                message=lambda: f"all of {names} bound: {dump(pods(api, namespace))}",
            )
            assert domains(api, keys, RACK) == {"rack-2"}
    finally:
        api.http.request("DELETE", sets.path(namespace))

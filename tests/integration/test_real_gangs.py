"""Gangs that REAL controllers wrote, placed by the real operator on the real control plane:
the Job controller's Workload and PodGroup (WorkloadWithJob), KubeRay's coscheduling PodGroup
under the scheduler name it forces, Kueue's plain-pod group as Kueue admits and ungates it
(inside the node labels Kueue injects), a plain Job's pods grouped by their owner, and a plain
Job's `basic` Workload (not a gang, and not an owner group). No object of a group is written
here by hand: the test writes what a user writes (a Job, a RayCluster, pods with Kueue's
labels, Kueue's queues) and
asserts where gpusched bound what the controller made, and what it wrote back.

The clusters are small; where a story needs "only one rack has room for the whole gang" it is
the same shape as tests/integration/test_gang_sources.py (8 GPUs a node):

    #      zone-a
    #    /       \\
    #  rack-1   rack-2
    #  n1-1     n2-1 (n2-2)

A gang of 4 pods x 4 GPUs has room in rack-2 only once n2-2 is there; before, the cluster has
room for all 4 pods only split 2 + 2, which a gang that wants one rack must refuse.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from testing.apiserver import ApiClient, wait_for
from testing.cluster.cluster import RealCluster
from testing.cluster.controllers import KubeRay, Kueue
from testing.gangs import kueue_member
from testing.harness import (
    RACK,
    domains,
    dump,
    events_for,
    gpu_node,
    placement_of,
    running_operator,
)

UPSTREAM = "scheduling.k8s.io"
NAMESPACE = "ml"
PATIENCE = 60.0
"""Seconds to wait for a controller's objects or a placement on this shared, loaded machine."""


def gpu_job(
    name: str, parallelism: int, gpus: int, scheduling: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A ``batch/v1`` Job as a user writes it, its pods for gpusched."""
    spec: dict[str, Any] = {
        "parallelism": parallelism,
        "completions": parallelism,
        "completionMode": "Indexed",
        "template": {
            "spec": {
                "schedulerName": "gpusched",
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "train",
                        "image": "registry.example/train:1",
                        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                    }
                ],
            }
        },
    }
    if scheduling is not None:
        spec["scheduling"] = scheduling
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }


def owned_by(obj: dict[str, Any], owner: dict[str, Any]) -> bool:
    refs = obj["metadata"].get("ownerReferences") or []
    return any(ref["uid"] == owner["metadata"]["uid"] for ref in refs)


def pods_of(api: ApiClient, owner: dict[str, Any], count: int) -> list[dict[str, Any]]:
    """The `count` pods the controller made for `owner` (waits for them)."""

    def made() -> list[dict[str, Any]]:
        found = [p for p in api.list("pods", NAMESPACE) if owned_by(p, owner)]
        return found if len(found) == count else []

    name = owner["metadata"]["name"]
    return wait_for(made, PATIENCE, interval=0.2, message=f"{count} pods of {name}")


def keys(found: list[dict[str, Any]]) -> list[str]:
    return [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in found]


def bound(api: ApiClient, owner: dict[str, Any]) -> list[str]:
    """Names of `owner`'s pods that have a node."""
    return [
        p["metadata"]["name"]
        for p in api.list("pods", NAMESPACE)
        if owned_by(p, owner) and placement_of(p)
    ]


def all_bound(api: ApiClient, owner: dict[str, Any], count: int) -> list[dict[str, Any]]:
    def done() -> list[dict[str, Any]]:
        found = [p for p in api.list("pods", NAMESPACE) if owned_by(p, owner)]
        return found if len(found) == count and all(placement_of(p) for p in found) else []

    return wait_for(
        done,
        PATIENCE,
        interval=0.2,
        message=lambda: f"all {count} pods bound: {dump(api.list('pods', NAMESPACE))}",
    )


def waiting_reason(api: ApiClient, pod: str, namespace: str = NAMESPACE) -> str:
    """The reason gpusched gave a pod it did not place: its PodScheduled=False condition's
    message, or else its latest Event's."""
    body = api.get("pods", pod, namespace)
    for item in (body.get("status") or {}).get("conditions") or []:
        if item["type"] == "PodScheduled" and item["status"] == "False" and item.get("message"):
            return str(item["message"])
    messages = [e.get("message", "") for e in events_for(api, pod, namespace)]
    return messages[-1] if messages else ""


@pytest.fixture
def racks(apiserver: Any, api: ApiClient) -> ApiClient:
    """The two racks without n2-2 (a test adds it), in a fresh namespace ``ml``."""
    if not isinstance(apiserver, RealCluster):
        pytest.skip("a story of the real control plane")
    apiserver.ensure_namespace(NAMESPACE)
    api.create(gpu_node("n1-1", "zone-a", "rack-1"))
    api.create(gpu_node("n2-1", "zone-a", "rack-2"))
    return api


def test_a_job_controllers_gang_waits_whole_then_lands_whole_in_the_one_rack_with_room(
    workload_job_controller: RealCluster, racks: ApiClient, kubeconfig: Path
) -> None:
    api = racks
    scheduling = {
        "schedulingPolicy": {"gang": {"minCount": 4}},
        "schedulingConstraints": {"topology": [{"key": RACK}]},
    }
    with running_operator(kubeconfig):
        job = api.create(gpu_job("train", 4, 4, scheduling))
        group = wait_for(
            lambda: [
                g for g in api.list("podgroups", NAMESPACE, group=UPSTREAM) if owned_by(g, job)
            ],
            PATIENCE,
            interval=0.2,
            message="the Job controller's PodGroup",
        )[0]
        name = group["metadata"]["name"]
        members = pods_of(api, job, 4)
        assert {p["spec"]["schedulingGroup"]["podGroupName"] for p in members} == {name}

        # Room for all 4 only split over two racks: nothing binds, and the group says why.
        def refused() -> dict[str, Any]:
            body = api.get("podgroups", name, NAMESPACE, group=UPSTREAM)
            for item in (body.get("status") or {}).get("conditions") or []:
                if item["type"] == "PodGroupInitiallyScheduled" and item["status"] == "False":
                    return dict(item)
            return {}

        condition = wait_for(refused, PATIENCE, interval=0.2, message="the gang refused")
        assert condition["reason"] == "Unschedulable", condition
        assert bound(api, job) == [], "a part of the gang was bound"
        wait_for(
            lambda: all(waiting_reason(api, p["metadata"]["name"]) for p in members),
            PATIENCE,
            interval=0.2,
            message=lambda: f"a reason on every pod: {dump(api.list('pods', NAMESPACE))}",
        )
        assert bound(api, job) == [], "a part of the gang was bound"

        api.create(gpu_node("n2-2", "zone-a", "rack-2"))
        placed = all_bound(api, job, 4)
        assert domains(api, keys(placed), RACK) == {"rack-2"}

        def scheduled() -> dict[str, Any]:
            body = api.get("podgroups", name, NAMESPACE, group=UPSTREAM)
            for item in (body.get("status") or {}).get("conditions") or []:
                if item["type"] == "PodGroupInitiallyScheduled" and item["status"] == "True":
                    return dict(item)
            return {}

        condition = wait_for(
            scheduled, PATIENCE, interval=0.2, message="PodGroupInitiallyScheduled"
        )
        assert condition["reason"] == "Scheduled"
        assert "rack-2" in condition["message"]


def ray_cluster(name: str, workers: int) -> dict[str, Any]:
    """A RayCluster with KubeRay's gang label: a CPU head and `workers` workers of 8 GPUs."""

    def template(container: str, limits: dict[str, str]) -> dict[str, Any]:
        resources = {"limits": limits}
        return {"spec": {"containers": [{"name": container, "image": "rayproject/ray:2.9.0",
                                         "resources": resources}]}}  # fmt: skip

    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {KubeRay.GANG_LABEL: "true"}},
        "spec": {
            "headGroupSpec": {
                "rayStartParams": {},
                "template": template("ray-head", {"cpu": "1", "memory": "2Gi"}),
            },
            "workerGroupSpecs": [
                {
                    "groupName": "gpu",
                    "replicas": workers,
                    "minReplicas": workers,
                    "maxReplicas": workers,
                    "rayStartParams": {},
                    "template": template("ray-worker", {"nvidia.com/gpu": "8"}),
                }
            ],
        },
    }


def test_a_kuberay_gang_under_its_forced_scheduler_name_is_placed_all_or_nothing(
    kuberay: KubeRay, racks: ApiClient, kubeconfig: Path
) -> None:
    # KubeRay forces spec.schedulerName to scheduler-plugins-scheduler and writes a
    # coscheduling PodGroup (minMember: head + workers); gpusched answers to that name.
    api = racks
    config = {"schedulerNameAliases": [KubeRay.SCHEDULER_NAME]}
    with running_operator(kubeconfig, config):
        ray = api.create(ray_cluster("raygang", workers=3))
        members = pods_of(api, ray, 4)
        assert {p["spec"]["schedulerName"] for p in members} == {KubeRay.SCHEDULER_NAME}
        assert {p["metadata"]["labels"][KubeRay.POD_GROUP_LABEL] for p in members} == {"raygang"}

        # 3 workers of 8 GPUs, 2 nodes of 8: the head alone would fit, and 2 workers would.
        # KubeRay writes the gang's whole ask as the PodGroup's minResources (24 GPUs), and
        # gpusched, as coscheduling does, tries the gang only once the cluster has that free.
        # Until KubeRay has written its PodGroup the pods wait on "not found"; the gang's own
        # reason follows once the group is read.
        head = next(p for p in members if p["metadata"]["labels"]["ray.io/node-type"] == "head")
        wait_for(
            lambda: (
                all(waiting_reason(api, p["metadata"]["name"]) for p in members)
                and "minResources: 16 of the 24 nvidia.com/gpu"
                in waiting_reason(api, head["metadata"]["name"])
            ),
            PATIENCE,
            interval=0.2,
            message=lambda: (
                "the gang's reason on every pod: "
                + repr([waiting_reason(api, p["metadata"]["name"]) for p in members])
            ),
        )
        assert bound(api, ray) == [], "a part of the Ray gang was bound"

        api.create(gpu_node("n2-2", "zone-a", "rack-2"))
        placed = all_bound(api, ray, 4)
        workers = [p for p in placed if p["metadata"]["labels"]["ray.io/node-type"] == "worker"]
        assert len({placement_of(p)[0] for p in workers}) == 3  # type: ignore[index]
        path = f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{NAMESPACE}/podgroups/raygang"
        wait_for(
            lambda: (api.http.get(path).json().get("status") or {}).get("phase") == "Scheduled",
            PATIENCE,
            interval=0.2,
            message=lambda: f"coscheduling status: {api.http.get(path).json().get('status')}",
        )


def kueue_status(api: ApiClient, namespace: str) -> list[Any]:
    return [w.get("status") for w in api.list("workloads", namespace, group="kueue.x-k8s.io")]


def test_a_kueue_group_admitted_and_ungated_by_kueue_is_placed_as_one_gang(
    kueue: Kueue, apiserver: RealCluster, racks: ApiClient, kubeconfig: Path
) -> None:
    # Kueue gates each pod of the group, admits the group as one Workload once all 3 pods
    # exist, and lifts the gates; gpusched then places the 3 pods (8 GPUs each) together.
    api = racks
    namespace = "queued"
    apiserver.ensure_namespace(namespace, kueue=True)
    api.create(Kueue.local_queue(namespace))
    names = [f"g-{index}" for index in range(3)]
    with running_operator(kubeconfig):
        for name in names:
            member = kueue_member(name, 8, "g", 3, namespace=namespace)
            member["metadata"]["labels"][Kueue.QUEUE_LABEL] = "queue"
            api.create(member)
        gated = api.get("pods", names[0], namespace)
        assert {"name": Kueue.GATE} in gated["spec"].get("schedulingGates", [])

        def ungated() -> list[dict[str, Any]]:
            found = api.list("pods", namespace)
            return found if all(not p["spec"].get("schedulingGates") for p in found) else []

        ready = wait_for(
            ungated,
            PATIENCE,
            interval=0.2,
            message=lambda: f"Kueue to ungate: {dump(kueue_status(api, namespace))}",
        )
        assert len(ready) == 3
        # Two nodes of 8 GPUs: two of the three would fit; none is bound, each says why.
        wait_for(
            lambda: all(waiting_reason(api, name, namespace) for name in names),
            PATIENCE,
            interval=0.2,
            message=lambda: f"a reason on every pod: {dump(api.list('pods', namespace))}",
        )
        assert not any(placement_of(p) for p in api.list("pods", namespace))

        api.create(gpu_node("n2-2", "zone-a", "rack-2"))
        wait_for(
            lambda: all(placement_of(p) for p in api.list("pods", namespace)),
            PATIENCE,
            interval=0.2,
            message=lambda: f"the group bound: {dump(api.list('pods', namespace))}",
        )
        nodes = {placement_of(p)[0] for p in api.list("pods", namespace)}  # type: ignore[index]
        assert nodes == {"n1-1", "n2-1", "n2-2"}


def test_a_plain_jobs_pods_are_one_gang_sized_from_parallelism_when_owner_groups_are_on(
    job_controller: RealCluster, racks: ApiClient, kubeconfig: Path
) -> None:
    # The Job controller as 1.37 ships it: pods that name no group. With owner groups on in
    # the namespace, gpusched makes the Job one gang of `parallelism` pods.
    api = racks
    config = {"ownerGroups": {"namespaces": [NAMESPACE]}}
    with running_operator(kubeconfig, config):
        job = api.create(gpu_job("plain", 3, 8))
        members = pods_of(api, job, 3)
        assert all("schedulingGroup" not in p["spec"] for p in members)
        # Two nodes of 8 GPUs: two of the three pods would fit; none is bound, each says why.
        wait_for(
            lambda: all(waiting_reason(api, p["metadata"]["name"]) for p in members),
            PATIENCE,
            interval=0.2,
            message=lambda: f"a reason on every pod: {dump(api.list('pods', NAMESPACE))}",
        )
        assert bound(api, job) == [], "a part of the Job's gang was bound"

        api.create(gpu_node("n2-2", "zone-a", "rack-2"))
        placed = all_bound(api, job, 3)
        assert {placement_of(p)[0] for p in placed} == {"n1-1", "n2-1", "n2-2"}  # type: ignore[index]


def test_a_plain_jobs_basic_workload_wins_over_owner_groups_its_pods_go_one_by_one(
    workload_job_controller: RealCluster, racks: ApiClient, kubeconfig: Path
) -> None:
    # With WorkloadWithJob, a Job without .spec.scheduling still gets a Workload whose
    # PodGroup has the `basic` policy, and its pods name it: an explicit group, so the owner
    # grouper leaves them alone even in an owner-grouped namespace, and `basic` is no gang
    # (upstream's meaning): what fits is bound, the rest waits with a reason.
    api = racks
    config = {"ownerGroups": {"namespaces": [NAMESPACE]}}
    with running_operator(kubeconfig, config):
        job = api.create(gpu_job("plain", 3, 8))
        members = pods_of(api, job, 3)
        assert all(p["spec"]["schedulingGroup"]["podGroupName"] for p in members)

        def settled() -> str:
            if len(bound(api, job)) != 2:
                return ""
            (left,) = [p for p in api.list("pods", NAMESPACE) if not placement_of(p)]
            return waiting_reason(api, left["metadata"]["name"])

        reason = wait_for(settled, PATIENCE, interval=0.2, message="2 bound, 1 told why not")
        assert "Insufficient nvidia.com/gpu" in reason, reason


def test_a_kueue_group_lands_whole_inside_the_node_labels_kueue_injects(
    kueue: Kueue, apiserver: RealCluster, racks: ApiClient, kubeconfig: Path
) -> None:
    # A ResourceFlavor with nodeLabels: on admission Kueue writes them into each pod's
    # nodeSelector as it ungates it. Rack-1's node is the tighter fit for 2 pods of 4 GPUs;
    # the selector Kueue injected sends the gang to rack-2, whole.
    api = racks
    api.create(gpu_node("n2-2", "zone-a", "rack-2"))
    namespace = "queued"
    apiserver.ensure_namespace(namespace, kueue=True)
    kinds = "/apis/kueue.x-k8s.io/v1beta2"
    flavor = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": "rack-2"},
        "spec": {"nodeLabels": {RACK: "rack-2"}},
    }
    quota = [{"name": "nvidia.com/gpu", "nominalQuota": "16"}]
    cluster_queue = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "rack-2"},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [{"name": "rack-2", "resources": quota}],
                }
            ],
        },
    }
    for body, plural in ((flavor, "resourceflavors"), (cluster_queue, "clusterqueues")):
        response = api.http.post(f"{kinds}/{plural}", json=body)
        assert response.status_code < 300, response.text
    try:
        local = Kueue.local_queue(namespace, "rack-2")
        local["spec"]["clusterQueue"] = "rack-2"
        api.create(local)
        names = ["r-0", "r-1"]
        with running_operator(kubeconfig):
            for name in names:
                member = kueue_member(name, 4, "r", 2, namespace=namespace, cpu=None, memory=None)
                member["metadata"]["labels"][Kueue.QUEUE_LABEL] = "rack-2"
                api.create(member)
            wait_for(
                lambda: all(placement_of(p) for p in api.list("pods", namespace)),
                PATIENCE,
                interval=0.2,
                message=lambda: f"the group bound: {dump(kueue_status(api, namespace))}",
            )
            placed = api.list("pods", namespace)
            assert {p["spec"].get("nodeSelector", {}).get(RACK) for p in placed} == {"rack-2"}
            assert domains(api, keys(placed), RACK) == {"rack-2"}
    finally:
        for plural in ("clusterqueues", "resourceflavors"):
            api.http.request("DELETE", f"{kinds}/{plural}/rack-2")

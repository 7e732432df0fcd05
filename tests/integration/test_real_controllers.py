"""The real controllers the other tests build on, on the real control plane: what each one makes
from a user's object, asserted on the objects it made (no gpusched here; the stories that
place these groups use the same fixtures).

- The API server serves the Workload API at the versions the harness turns on.
- kube-controller-manager's Job controller with WorkloadWithJob: a Job with `.spec.scheduling`
  becomes a Workload, its PodGroup and pods that name the PodGroup.
- The Job controller as 1.37 ships it: a Job becomes pods, and nothing else.
- The KubeRay operator with its scheduler-plugins batch scheduler: a gang-labelled RayCluster
  becomes a coscheduling PodGroup and pods under the scheduler name KubeRay forces.
- Kueue's manager with its plain-pod integration: a pod group is gated, admitted, ungated.
- What Karpenter reads of a pending pod (testing/cluster/karpenter.py: it cannot run here) is
  what the real server keeps of the condition a scheduler writes.
- The JobSet, LeaderWorkerSet and Kubeflow CRDs are served, with their schemas' defaults; a
  JobSet's Job (the owner chain JobSet -> Job -> Pod) gets its pods from the real Job controller.
"""

from __future__ import annotations

from typing import Any

import pytest

from testing.apiserver import ApiClient, ApiStatusError, wait_for
from testing.cluster import karpenter
from testing.cluster.cluster import RealCluster
from testing.cluster.controllers import KubeRay, Kueue

NAMESPACE = "ml"
UPSTREAM = "scheduling.k8s.io"
COSCHEDULING = "scheduling.x-k8s.io"
PATIENCE = 60.0
"""Seconds to wait for a controller's objects on this (shared, loaded) machine."""


def job(name: str, parallelism: int, scheduling: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "parallelism": parallelism,
        "completions": parallelism,
        "completionMode": "Indexed",
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "train",
                        "image": "registry.example/train:1",
                        "resources": {"limits": {"nvidia.com/gpu": "8"}},
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


def owned_by(obj: dict[str, Any], owner: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        ref
        for ref in obj["metadata"].get("ownerReferences", [])
        if ref["uid"] == owner["metadata"]["uid"]
    ]


def pods_of(api: ApiClient, job: dict[str, Any], count: int) -> list[dict[str, Any]]:
    def made() -> list[dict[str, Any]]:
        pods = [p for p in api.list("pods", NAMESPACE) if owned_by(p, job)]
        return pods if len(pods) == count else []

    return wait_for(
        made, PATIENCE, interval=0.2, message=f"{count} pods of Job {job['metadata']['name']}"
    )


def test_the_api_server_serves_the_workload_api(real_cluster: RealCluster) -> None:
    api = real_cluster.admin
    versions = {v["version"] for v in api.http.get(f"/apis/{UPSTREAM}").json()["versions"]}
    assert {"v1", "v1beta1", "v1alpha3"} <= versions, versions
    served = {}
    for version in ("v1beta1", "v1alpha3"):
        answer = api.http.get(f"/apis/{UPSTREAM}/{version}").json()
        served[version] = {r["name"] for r in answer["resources"] if "/" not in r["name"]}
    assert {"workloads", "podgroups"} <= served["v1beta1"], served
    assert "compositepodgroups" in served["v1alpha3"], served


def test_a_job_with_scheduling_becomes_a_workload_its_podgroup_and_pods_that_name_it(
    workload_job_controller: RealCluster,
) -> None:
    cluster = workload_job_controller
    cluster.ensure_namespace(NAMESPACE)
    api = cluster.admin
    scheduling = {
        "schedulingPolicy": {"gang": {"minCount": 3}},
        "schedulingConstraints": {"topology": [{"key": "topology.kubernetes.io/rack"}]},
    }
    created = api.create(job("train", 3, scheduling))
    assert created["spec"]["scheduling"] == scheduling, "the API server dropped .spec.scheduling"

    workload = wait_for(
        lambda: [
            w for w in api.list("workloads", NAMESPACE, group=UPSTREAM) if owned_by(w, created)
        ],
        PATIENCE,
        interval=0.2,
        message="the Job controller's Workload",
    )[0]
    assert workload["spec"]["controllerRef"] == {
        "apiGroup": "batch",
        "kind": "Job",
        "name": "train",
    }
    (template,) = workload["spec"]["podGroupTemplates"]
    assert template["schedulingPolicy"] == {"gang": {"minCount": 3}}
    assert template["schedulingConstraints"] == scheduling["schedulingConstraints"]

    group = wait_for(
        lambda: [
            g for g in api.list("podgroups", NAMESPACE, group=UPSTREAM) if owned_by(g, created)
        ],
        PATIENCE,
        interval=0.2,
        message="the Job controller's PodGroup",
    )[0]
    assert group["spec"]["workloadRef"] == {
        "workloadName": workload["metadata"]["name"],
        "templateName": template["name"],
    }
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 3}}
    assert owned_by(group, workload), "the PodGroup is not owned by its Workload"

    pods = pods_of(api, created, 3)
    assert {p["spec"]["schedulingGroup"]["podGroupName"] for p in pods} == {
        group["metadata"]["name"]
    }
    assert all("nodeName" not in p["spec"] for p in pods)


def test_a_job_without_scheduling_gets_a_basic_workload(
    workload_job_controller: RealCluster,
) -> None:
    cluster = workload_job_controller
    cluster.ensure_namespace(NAMESPACE)
    api = cluster.admin
    created = api.create(job("plain", 2))
    pods = pods_of(api, created, 2)
    (workload,) = [
        w for w in api.list("workloads", NAMESPACE, group=UPSTREAM) if owned_by(w, created)
    ]
    assert workload["spec"]["podGroupTemplates"][0]["schedulingPolicy"] == {"basic": {}}
    assert all(p["spec"].get("schedulingGroup", {}).get("podGroupName") for p in pods)


def test_the_shipped_job_controller_makes_pods_and_no_workload(
    job_controller: RealCluster,
) -> None:
    cluster = job_controller
    cluster.ensure_namespace(NAMESPACE)
    api = cluster.admin
    created = api.create(job("plain", 2))
    pods = pods_of(api, created, 2)
    assert all("schedulingGroup" not in p["spec"] for p in pods)
    assert api.list("workloads", NAMESPACE, group=UPSTREAM) == []
    assert api.list("podgroups", NAMESPACE, group=UPSTREAM) == []


def test_kuberay_makes_a_coscheduling_podgroup_and_pods_under_its_scheduler_name(
    apiserver: RealCluster, kuberay: KubeRay
) -> None:
    apiserver.ensure_namespace(NAMESPACE)
    api = apiserver.admin
    created = api.create(KubeRay.ray_cluster("raygang", workers=3))

    group = api.wait_for_object(
        "podgroups", "raygang", lambda g: True, NAMESPACE, group=COSCHEDULING, timeout=PATIENCE
    )
    assert group["spec"]["minMember"] == 4, "3 workers and the head"
    assert owned_by(group, created), "the PodGroup is not owned by its RayCluster"

    pods = pods_of(api, created, 4)
    assert {p["spec"]["schedulerName"] for p in pods} == {KubeRay.SCHEDULER_NAME}
    assert {p["metadata"]["labels"][KubeRay.POD_GROUP_LABEL] for p in pods} == {"raygang"}
    kinds = sorted(p["metadata"]["labels"]["ray.io/node-type"] for p in pods)
    assert kinds == ["head", "worker", "worker", "worker"]


def test_the_workload_crds_are_served(workload_crds: RealCluster) -> None:
    workload_crds.ensure_namespace(NAMESPACE)
    api = workload_crds.admin
    job_template = {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}}
    jobset = api.create(
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": "js", "namespace": NAMESPACE},
            "spec": {"replicatedJobs": [{"name": "workers", "template": job_template}]},
        }
    )
    assert jobset["spec"]["replicatedJobs"][0]["replicas"] == 1, "the schema's default"
    lws = api.create(
        {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "metadata": {"name": "lws", "namespace": NAMESPACE},
            "spec": {
                "leaderWorkerTemplate": {
                    "size": 4,
                    "workerTemplate": job_template["spec"]["template"],
                }
            },
        }
    )
    assert lws["spec"]["replicas"] == 1
    assert lws["spec"]["leaderWorkerTemplate"]["restartPolicy"] == "RecreateGroupOnPodRestart"
    with pytest.raises(ApiStatusError) as refused:
        api.create(
            {
                "apiVersion": "kubeflow.org/v1",
                "kind": "PyTorchJob",
                "metadata": {"name": "pt", "namespace": NAMESPACE},
                "spec": {"runPolicy": {}},
            }
        )
    assert "pytorchReplicaSpecs" in str(refused.value)
    for kind, version in (
        ("MPIJob", "kubeflow.org/v2beta1"),
        ("TrainJob", "trainer.kubeflow.org/v1alpha1"),
    ):
        listed = api.http.get(f"/apis/{version}").json()
        assert kind in {r["kind"] for r in listed["resources"]}, listed


def test_kueue_admits_and_ungates_a_plain_pod_group(apiserver: RealCluster, kueue: Kueue) -> None:
    namespace = "queued"
    apiserver.ensure_namespace(namespace, kueue=True)
    api = apiserver.admin
    api.create(Kueue.local_queue(namespace))
    for index in range(3):
        api.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"g-{index}",
                    "namespace": namespace,
                    "labels": {Kueue.QUEUE_LABEL: "queue", Kueue.GROUP_LABEL: "g"},
                    "annotations": {Kueue.GROUP_COUNT: "3"},
                },
                "spec": {
                    "containers": [
                        {
                            "name": "c",
                            "image": "registry.example/train:1",
                            "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "8"},
                                          "limits": {"nvidia.com/gpu": "8"}},
                        }
                    ]
                },
            }
        )  # fmt: skip
    created = api.get("pods", "g-0", namespace)
    assert {"name": Kueue.GATE} in created["spec"].get("schedulingGates", []), (
        "Kueue's pod webhook did not gate the pod"
    )

    def admitted() -> list[dict[str, Any]]:
        workloads = api.list("workloads", namespace, group="kueue.x-k8s.io")
        return [w for w in workloads if w.get("status", {}).get("admission")]

    (workload,) = wait_for(admitted, PATIENCE, interval=0.2, message="Kueue's admission")
    assert workload["status"]["admission"]["clusterQueue"] == Kueue.CLUSTER_QUEUE
    assert sum(s["count"] for s in workload["spec"]["podSets"]) == 3

    def ungated() -> list[dict[str, Any]]:
        pods = api.list("pods", namespace)
        return pods if all(not p["spec"].get("schedulingGates") for p in pods) else []

    assert len(wait_for(ungated, PATIENCE, interval=0.2, message="Kueue to ungate")) == 3


def test_a_jobset_s_job_gets_pods_owned_through_the_chain_and_no_workload(
    workload_job_controller: RealCluster, workload_crds: RealCluster
) -> None:
    cluster = workload_job_controller
    cluster.ensure_namespace(NAMESPACE)
    api = cluster.admin
    template = job("x", 2)["spec"]
    jobset = api.create(
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": "js", "namespace": NAMESPACE},
            "spec": {"replicatedJobs": [{"name": "workers", "template": {"spec": template}}]},
        }
    )
    # What the JobSet controller makes: a Job per replica, controlled by the JobSet.
    owner = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "name": "js",
        "uid": jobset["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    body = job("js-workers-0", 2)
    body["metadata"]["ownerReferences"] = [owner]
    body["metadata"]["labels"] = {"jobset.sigs.k8s.io/jobset-name": "js"}
    created = api.create(body)
    pods = pods_of(api, created, 2)
    assert all(p["metadata"]["ownerReferences"][0]["kind"] == "Job" for p in pods)
    assert all("schedulingGroup" not in p["spec"] for p in pods)
    assert api.list("workloads", NAMESPACE, group=UPSTREAM) == []


def test_what_karpenter_reads_of_a_pending_pod_survives_the_real_server(
    apiserver: RealCluster,
) -> None:
    apiserver.ensure_namespace(NAMESPACE)
    api = apiserver.admin
    spec = job("x", 1)["spec"]["template"]["spec"]

    def pending(name: str, reason: str, **status: str) -> dict[str, Any]:
        api.create({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": name, "namespace": NAMESPACE}, "spec": spec})  # fmt: skip
        condition = {"type": "PodScheduled", "status": "False", "reason": reason,
                     "message": "0/4 nodes are available"}  # fmt: skip
        api.patch_status("pods", name, {"conditions": [condition], **status}, NAMESPACE)
        return api.get("pods", name, NAMESPACE)

    assert karpenter.provisionable(pending("unschedulable", "Unschedulable"))
    assert not karpenter.provisionable(pending("gated", "SchedulingGated"))
    nominated = pending("nominated", "Unschedulable", nominatedNodeName="node-a")
    assert not karpenter.provisionable(nominated), "a pod awaiting a preemption is left alone"

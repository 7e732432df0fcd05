"""Gangs that REAL controllers wrote, placed by the real operator on the real control plane:
the Job controller's Workload and PodGroup (WorkloadWithJob), KubeRay's coscheduling PodGroup
under the scheduler name it forces, Kueue's plain-pod group as Kueue admits and ungates it
(inside the node labels Kueue injects), a plain Job's pods grouped by their owner, and a plain
Job's `basic` Workload (not a gang, and not an owner group). No object of a group is written
here by hand: the test writes what a user writes (a Job, a RayCluster, pods with Kueue's
labels, Kueue's queues) and
asserts where gpusched bound what the controller made, and what it wrote back. The owners
whose controllers do not run here (JobSet, the training operator, the mpi-operator) are
played: the test writes what their controller writes (the JobSet's Jobs, a PyTorchJob's pods,
an MPIJob's workers and launcher Job, each owned by its owner as the controller sets it), and
the real Job controller makes the Jobs' pods.

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
        nothing_bound_each_told(api, [job], 4)

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


def test_a_kuberay_gang_under_its_forced_scheduler_name_is_placed_all_or_nothing(
    kuberay: KubeRay, racks: ApiClient, kubeconfig: Path
) -> None:
    # KubeRay forces spec.schedulerName to scheduler-plugins-scheduler and writes a
    # coscheduling PodGroup (minMember: head + workers); gpusched answers to that name.
    api = racks
    config = {"schedulerNameAliases": [KubeRay.SCHEDULER_NAME]}
    with running_operator(kubeconfig, config):
        ray = api.create(KubeRay.ray_cluster("raygang", workers=3))
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
            # Each pod as its create answered (the webhook's mutation): read back later, the
            # whole group may already be admitted and its gates lifted.
            created = api.create(member)
            assert {"name": Kueue.GATE} in created["spec"].get("schedulingGates", [])

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
        nothing_bound_each_told(api, [job], 3)

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


def create_owner(api: ApiClient, api_version: str, plural: str, body: dict[str, Any]) -> Any:
    """A custom object (a CRD the harness serves) created as its user writes it."""
    body = {"apiVersion": api_version, **body}
    body["metadata"].setdefault("namespace", NAMESPACE)
    response = api.http.post(f"/apis/{api_version}/namespaces/{NAMESPACE}/{plural}", json=body)
    assert response.status_code < 300, response.text
    return response.json()


def controller_ref(owner: dict[str, Any]) -> dict[str, Any]:
    """The ``ownerReferences`` entry a controller writes on what it makes for `owner`."""
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def gpu_container(gpus: int) -> dict[str, Any]:
    return {
        "name": "train",
        "image": "registry.example/train:1",
        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
    }


def nothing_bound_each_told(
    api: ApiClient, owners: list[dict[str, Any]], count: int, saying: str = ""
) -> None:
    """Waits until each of the `count` pods of `owners` has gpusched's reason, with `saying` in
    it; none is bound."""

    def told() -> bool:
        found = [p for p in api.list("pods", NAMESPACE) if any(owned_by(p, o) for o in owners)]
        reasons = [waiting_reason(api, p["metadata"]["name"]) for p in found]
        return len(found) == count and all(reason and saying in reason for reason in reasons)

    wait_for(
        told,
        PATIENCE,
        interval=0.2,
        message=lambda: f"{saying!r} on each of {count} pods: {dump(api.list('pods', NAMESPACE))}",
    )
    assert [p for o in owners for p in bound(api, o)] == [], "a part of the gang was bound"


def jobset_job(jobset: dict[str, Any], replicated: str, index: int, size: int) -> dict[str, Any]:
    """The Job the JobSet controller makes for replica `index` of `replicated`: its name, labels
    and annotations, and an owner reference to the JobSet as its controller."""
    name = jobset["metadata"]["name"]
    labels = {
        "jobset.sigs.k8s.io/jobset-name": name,
        "jobset.sigs.k8s.io/replicatedjob-name": replicated,
        "jobset.sigs.k8s.io/replicatedjob-replicas": str(size),
        "jobset.sigs.k8s.io/job-index": str(index),
        "jobset.sigs.k8s.io/restart-attempt": "0",
    }
    job = gpu_job(f"{name}-{replicated}-{index}", 2, 4)
    job["metadata"]["labels"] = labels
    job["metadata"]["ownerReferences"] = [controller_ref(jobset)]
    job["spec"]["template"]["metadata"] = {"labels": dict(labels)}
    return job


def test_a_jobsets_jobs_made_by_the_real_job_controller_are_one_gang_over_all_its_jobs(
    job_controller: RealCluster, workload_crds: RealCluster, racks: ApiClient, kubeconfig: Path
) -> None:
    # JobSet → Job → Pod: the test writes the JobSet and the two Jobs its controller makes
    # (owned by it); the real Job controller makes the pods, which name no group. With owner
    # groups on, the JobSet is one gang of 2 Jobs × 2 pods, in one rack (its annotation).
    api = racks
    api.create(gpu_node("n2-2", "zone-a", "rack-2"))
    config = {"ownerGroups": {"namespaces": [NAMESPACE]}}
    with running_operator(kubeconfig, config):
        template = {"spec": gpu_job("t", 2, 4)["spec"]}
        jobset = create_owner(
            api,
            "jobset.x-k8s.io/v1alpha2",
            "jobsets",
            {
                "kind": "JobSet",
                "metadata": {
                    "name": "js",
                    "annotations": {"scheduling.gpusched.io/topology-key": RACK},
                },
                "spec": {"replicatedJobs": [{"name": "w", "replicas": 2, "template": template}]},
            },
        )
        first = api.create(jobset_job(jobset, "w", 0, 2))
        # Two pods of 4 GPUs fit on any node; the JobSet's other Job has made none yet.
        nothing_bound_each_told(api, [first], 2, "2 of 4 valid pods exist")

        second = api.create(jobset_job(jobset, "w", 1, 2))
        placed = [*all_bound(api, first, 2), *all_bound(api, second, 2)]
        assert all("schedulingGroup" not in p["spec"] for p in placed)
        assert domains(api, keys(placed), RACK) == {"rack-2"}


def test_a_pytorchjobs_and_an_mpijobs_pods_are_each_one_gang_sized_from_their_replica_specs(
    job_controller: RealCluster, workload_crds: RealCluster, racks: ApiClient, kubeconfig: Path
) -> None:
    # The pods the training operator makes for a PyTorchJob (Master + Workers, owned by it)
    # and the mpi-operator for an MPIJob (Workers owned by it, the Launcher a Job it owns, whose
    # pod the real Job controller makes). Each is one gang of its replica specs' sum: nothing
    # is bound while one pod of it is missing, though what is there fits.
    api = racks
    api.create(gpu_node("n2-2", "zone-a", "rack-2"))
    config = {"ownerGroups": {"namespaces": [NAMESPACE]}}

    def replica(count: int, gpus: int) -> dict[str, Any]:
        template = {"spec": {"schedulerName": "gpusched", "containers": [gpu_container(gpus)]}}
        return {"replicas": count, "template": template}

    def member(name: str, owner: dict[str, Any], labels: dict[str, str], gpus: int) -> Any:
        return api.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": NAMESPACE,
                    "labels": labels,
                    "ownerReferences": [controller_ref(owner)],
                },
                "spec": {"schedulerName": "gpusched", "containers": [gpu_container(gpus)]},
            }
        )

    with running_operator(kubeconfig, config):
        torch = create_owner(
            api,
            "kubeflow.org/v1",
            "pytorchjobs",
            {
                "kind": "PyTorchJob",
                "metadata": {"name": "pt"},
                "spec": {"pytorchReplicaSpecs": {"Master": replica(1, 4), "Worker": replica(3, 4)}},
            },
        )

        def torch_pod(role: str, index: int) -> Any:
            labels = {
                "training.kubeflow.org/job-name": "pt",
                "training.kubeflow.org/replica-type": role,
                "training.kubeflow.org/replica-index": str(index),
            }
            return member(f"pt-{role}-{index}", torch, labels, 4)

        for role, index in (("master", 0), ("worker", 0), ("worker", 1)):
            torch_pod(role, index)
        nothing_bound_each_told(api, [torch], 3, "3 of 4 valid pods exist")

        mpi = create_owner(
            api,
            "kubeflow.org/v2beta1",
            "mpijobs",
            {
                "kind": "MPIJob",
                "metadata": {"name": "mpi"},
                "spec": {"mpiReplicaSpecs": {"Launcher": replica(1, 0), "Worker": replica(2, 4)}},
            },
        )
        for index in range(2):
            member(
                f"mpi-worker-{index}",
                mpi,
                {
                    "training.kubeflow.org/job-name": "mpi",
                    "training.kubeflow.org/job-role": "worker",
                    "training.kubeflow.org/replica-index": str(index),
                },
                4,
            )
        nothing_bound_each_told(api, [mpi], 2, "2 of 3 valid pods exist")

        launcher = gpu_job("mpi-launcher", 1, 0)
        launcher["metadata"]["ownerReferences"] = [controller_ref(mpi)]
        launcher = api.create(launcher)
        placed = [*all_bound(api, mpi, 2), *all_bound(api, launcher, 1)]
        assert len(placed) == 3
        assert bound(api, torch) == [], "the PyTorchJob's 3 of 4 pods were bound"

        torch_pod("worker", 2)
        assert len(all_bound(api, torch, 4)) == 4


def test_a_rayclusters_pods_made_by_kuberay_are_one_gang_of_head_and_workers_by_owner(
    kuberay: KubeRay, racks: ApiClient, kubeconfig: Path
) -> None:
    # The real KubeRay operator, on a RayCluster without its gang label: no PodGroup, pods that
    # name no group, owned by the RayCluster, under the scheduler name KubeRay forces. With
    # owner groups on, gpusched makes the RayCluster one gang of 1 head + 3 workers: 2 workers
    # of 8 GPUs would fit, none is bound.
    api = racks
    config = {
        "ownerGroups": {"namespaces": [NAMESPACE]},
        "schedulerNameAliases": [KubeRay.SCHEDULER_NAME],
    }
    with running_operator(kubeconfig, config):
        body = KubeRay.ray_cluster("rayowner", workers=3)
        del body["metadata"]["labels"][KubeRay.GANG_LABEL]
        for group in (body["spec"]["headGroupSpec"], *body["spec"]["workerGroupSpecs"]):
            group["template"]["spec"]["schedulerName"] = "gpusched"
        ray = api.create(body)
        members = pods_of(api, ray, 4)
        assert all(KubeRay.POD_GROUP_LABEL not in p["metadata"]["labels"] for p in members)
        # KubeRay's batch scheduler forces its name even without the gang label: the alias.
        assert {p["spec"]["schedulerName"] for p in members} == {KubeRay.SCHEDULER_NAME}
        nothing_bound_each_told(api, [ray], 4)

        api.create(gpu_node("n2-2", "zone-a", "rack-2"))
        placed = all_bound(api, ray, 4)
        workers = [p for p in placed if p["metadata"]["labels"]["ray.io/node-type"] == "worker"]
        assert len({placement_of(p)[0] for p in workers}) == 3  # type: ignore[index]


def test_a_leader_ready_leader_worker_set_has_its_leader_bound_alone_then_its_workers_as_one_gang(
    workload_crds: RealCluster, racks: ApiClient, kubeconfig: Path
) -> None:
    # LWS's controller (played: it does not run here) makes a LeaderReady LeaderWorkerSet's
    # workers' StatefulSet only once the leader is Ready: one gang of `size` would wait for
    # ever. The leader is bound alone; its 3 workers are one gang of `size - 1`.
    api = racks
    config = {"ownerGroups": {"namespaces": [NAMESPACE]}}
    sets = f"/apis/apps/v1/namespaces/{NAMESPACE}/statefulsets"
    labels = {"leaderworkerset.sigs.k8s.io/name": "lws"}

    def statefulset(name: str, owner: dict[str, Any]) -> dict[str, Any]:
        response = api.http.post(
            sets,
            json={
                "apiVersion": "apps/v1",
                "kind": "StatefulSet",
                "metadata": {
                    "name": name,
                    "labels": labels,
                    "ownerReferences": [controller_ref(owner)],
                },
                "spec": {
                    "serviceName": "lws",
                    "replicas": 1,
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {"containers": [gpu_container(4)]},
                    },
                },
            },
        )
        assert response.status_code < 300, response.text
        return dict(response.json())

    def lws_pod(name: str, owner: dict[str, Any], worker: int) -> Any:
        member = {
            **labels,
            "leaderworkerset.sigs.k8s.io/group-index": "0",
            "leaderworkerset.sigs.k8s.io/worker-index": str(worker),
        }
        return api.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": NAMESPACE,
                    "labels": member,
                    "ownerReferences": [controller_ref(owner)],
                },
                "spec": {"schedulerName": "gpusched", "containers": [gpu_container(4)]},
            }
        )

    try:
        with running_operator(kubeconfig, config):
            template = {"spec": {"containers": [{"name": "w", "image": "r.example/w:1"}]}}
            lws = create_owner(
                api,
                "leaderworkerset.x-k8s.io/v1",
                "leaderworkersets",
                {
                    "kind": "LeaderWorkerSet",
                    "metadata": {"name": "lws"},
                    "spec": {
                        "replicas": 1,
                        "startupPolicy": "LeaderReady",
                        "leaderWorkerTemplate": {"size": 4, "workerTemplate": template},
                    },
                },
            )
            leader = lws_pod("lws-0", statefulset("lws", lws), 0)
            all_bound(api, statefulset_owner(leader), 1)

            workers = statefulset("lws-0", leader)
            for index in (1, 2):
                lws_pod(f"lws-0-{index}", workers, index)
            nothing_bound_each_told(api, [workers], 2, "2 of 3 valid pods exist")

            lws_pod("lws-0-3", workers, 3)
            assert len(all_bound(api, workers, 3)) == 3
    finally:
        api.http.request("DELETE", sets)


def statefulset_owner(pod: dict[str, Any]) -> dict[str, Any]:
    """A stand-in owner naming `pod`'s controller by uid (for `owned_by`)."""
    (ref,) = pod["metadata"]["ownerReferences"]
    return {"metadata": {"uid": ref["uid"]}}

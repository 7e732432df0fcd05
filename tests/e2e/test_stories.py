"""The stories of examples/workloads/ on a real cluster: kind, the image built from the
Dockerfile, the chart installed with helm, the objects applied with kubectl.

The stories run in file order on one cluster, each building on the state the previous left:

1. the API server itself rejects invalid objects naming the field (the CRDs' schemas and CEL);
2. a Workload: eight 2-GPU workers in one rack, the driver in the same zone;
3. a 4-GPU pod on NVLink-connected GPUs in as few NUMA nodes as possible, and a GPU share;
4. a gang that cannot fit stays pending, holds nothing, and says rack by rack why;
5. a deleted worker comes back to its rack;
6. the active replica is killed and the other takes over.

After each story no GPU index is held by two live pods on one node.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from tests.e2e.cluster import (
    GPUS_PER_NODE,
    GROUP,
    GROUP_LABEL,
    NAMESPACE,
    RACK,
    TOPOLOGY_ANNOTATION,
    ZONE,
    Bound,
    apply,
    bound_pods,
    example,
    kubectl,
    kubectl_json,
    kubectl_try,
    lease_holder,
    rack_of,
    shrink,
    wait_until,
)
from tests.unit.api.test_crd_schemas import BAD, OPERATOR_ONLY

pytestmark = pytest.mark.usefixtures("kind_cluster")

TIMEOUT = 180
"""Seconds a story may take to settle: binds are sub-second; pods starting on kind are not."""


def group(name: str, namespace: str = "ml", kind: str = "podgroups") -> dict[str, Any]:
    """One of our objects; kinds fully qualified, as other projects have Workloads too."""
    found: dict[str, Any] = kubectl_json("-n", namespace, "get", f"{kind}.{GROUP}", name)
    return found


def phase_in(name: str, *phases: str, kind: str = "podgroups") -> dict[str, Any] | None:
    found = group(name, kind=kind)
    return found if found.get("status", {}).get("phase") in phases else None


def events(namespace: str, name: str, reason: str) -> list[str]:
    selector = f"involvedObject.name={name},reason={reason}"
    items = kubectl_json("-n", namespace, "get", "events", "--field-selector", selector)["items"]
    return [item["message"] for item in items]


def assert_no_gpu_held_twice() -> None:
    held: Counter[tuple[str, int]] = Counter()
    for namespace in ("ml", "research"):
        for pod in bound_pods(namespace):
            held.update((pod.node, gpu) for gpu in pod.gpus)
    assert [key for key, count in held.items() if count > 1] == []
    assert all(0 <= gpu < GPUS_PER_NODE for _, gpu in held)


# --- 1. the API server validates ---------------------------------------------------------------


@pytest.mark.parametrize("bad", BAD, ids=[b.story for b in BAD])
def test_1_the_api_server_rejects_invalid_objects_naming_the_field(bad: Any) -> None:
    result = kubectl_try("create", "--dry-run=server", "-f", "-", stdin=json.dumps(bad.obj))
    assert result.returncode != 0, f"{bad.story}: accepted"
    assert bad.want_field in result.stderr, result.stderr


@pytest.mark.parametrize(("story", "obj", "_"), OPERATOR_ONLY, ids=[s for s, _, _ in OPERATOR_ONLY])
def test_1_what_only_the_operator_checks_is_accepted(story: str, obj: Any, _: str) -> None:
    result = kubectl_try("create", "--dry-run=server", "-f", "-", stdin=json.dumps(obj))
    assert result.returncode == 0, f"{story}: {result.stderr}"


# --- 2. a Workload: workers in one rack, the driver in their zone ---------------------------------


def test_2_workers_share_a_rack_and_the_driver_their_zone() -> None:
    apply(example("workloads/01-zone-rack-training/1-workload.yaml"))
    apply(example("workloads/01-zone-rack-training/2-pods.yaml"))
    workers = wait_until(
        "the workers' group to be scheduled",
        lambda: phase_in("train-workers", "Scheduled", "Running"),
        TIMEOUT,
    )
    wait_until(
        "the driver to be scheduled", lambda: phase_in("train-driver", "Scheduled", "Running")
    )

    pods = bound_pods("ml", f"{GROUP_LABEL}=train-workers")
    assert len(pods) == 8
    assert {rack_of(p.node) for p in pods} == {("zone-a", "rack-1")}
    assert all(len(p.gpus) == 2 for p in pods), pods
    (driver,) = bound_pods("ml", f"{GROUP_LABEL}=train-driver")
    assert rack_of(driver.node)[0] == "zone-a"

    assert workers["status"]["placement"] == {ZONE: "zone-a", RACK: "rack-1"}
    (condition,) = workers["status"]["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == (
        "PodGroupScheduled",
        "True",
        "Scheduled",
    )
    workload = group("train", kind="workloads")
    assert sorted(g["name"] for g in workload["status"]["groups"]) == [
        "train-driver",
        "train-workers",
        "train-zone",
    ]
    (message,) = events("ml", "train-worker-0", "Scheduled")
    assert "GPUs" in message
    assert_no_gpu_held_twice()


def test_2_kubectl_get_pg_shows_the_printer_columns() -> None:
    header = kubectl("-n", "ml", "get", "pg").splitlines()[0].split()
    assert header == ["NAME", "MIN", "SCHEDULED", "RUNNING", "PHASE", "PLACEMENT", "AGE"]


# --- 3. NVLink and NUMA -----------------------------------------------------------------------


def _numa_nodes(pod: Bound) -> set[int]:
    node = kubectl_json("get", "node", pod.node)
    topology = json.loads(node["metadata"]["annotations"][TOPOLOGY_ANNOTATION])
    numa = {gpu["index"]: gpu["numa"] for gpu in topology["gpus"]}
    return {numa[i] for i in pod.gpus}


def test_3_a_4_gpu_pod_gets_two_whole_numa_pairs_and_a_share_gets_one_gpu() -> None:
    apply(example("workloads/02-nvlink-pod/pod.yaml"))

    def both_bound() -> dict[str, Bound] | None:
        pods = {p.pod: p for p in bound_pods("research")}
        return pods if {"finetune-0", "embeddings-0"} <= pods.keys() else None

    pods = wait_until("both research pods to be bound", both_bound, TIMEOUT)
    assert len(pods["finetune-0"].gpus) == 4
    assert len(_numa_nodes(pods["finetune-0"])) == 2, "a DGX A100 has two GPUs per NUMA node"
    assert len(pods["embeddings-0"].gpus) == 1
    assert_no_gpu_held_twice()


# --- 4. a gang that cannot fit ------------------------------------------------------------------


def test_4_a_gang_that_cannot_fit_holds_nothing_and_says_why() -> None:
    apply(example("workloads/03-gang-that-cannot-fit/podgroup.yaml"))

    def explained() -> dict[str, Any] | None:
        status = group("pretrain").get("status", {})
        return status if status.get("lastAttempt", {}).get("domains") else None

    status = wait_until("the gang's last attempt to name the racks", explained, TIMEOUT)
    assert bound_pods("ml", f"{GROUP_LABEL}=pretrain") == []
    assert status["phase"] in ("Pending", "Unschedulable")
    (condition,) = status["conditions"]
    assert condition["status"] == "False"
    assert any("rack" in line for line in status["lastAttempt"]["domains"]), status
    assert events("ml", "pretrain", "FailedScheduling") != []
    assert_no_gpu_held_twice()


# --- 5. a deleted worker returns to its rack ----------------------------------------------------


def test_5_a_deleted_worker_comes_back_to_its_rack() -> None:
    (manifest,) = [
        p for p in example("workloads/01-zone-rack-training/2-pods.yaml")
        if p["metadata"]["name"] == "train-worker-3"
    ]  # fmt: skip
    kubectl("-n", "ml", "delete", "pod", "train-worker-3", "--wait=true")
    apply([shrink(manifest)])

    def back() -> Bound | None:
        pods = [p for p in bound_pods("ml") if p.pod == "train-worker-3"]
        return pods[0] if pods else None

    pod = wait_until("train-worker-3 to be bound again", back, TIMEOUT)
    assert rack_of(pod.node) == ("zone-a", "rack-1")
    assert len(pod.gpus) == 2
    assert_no_gpu_held_twice()


# --- 6. failover ------------------------------------------------------------------------------


def test_6_when_the_active_replica_dies_the_other_takes_over() -> None:
    leader = wait_until("a replica to hold the Lease", lambda: lease_holder() or None)
    kubectl("-n", NAMESPACE, "delete", "pod", leader, "--grace-period=0", "--force", "--wait=false")

    def new_leader() -> str | None:
        holder = lease_holder()
        return holder if holder and holder != leader else None

    wait_until("another replica to take the Lease", new_leader, TIMEOUT)

    pod = shrink(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "after-failover", "namespace": "research"},
            "spec": {
                "schedulerName": "gpusched",
                "containers": [
                    {
                        "name": "main",
                        "image": "unused",
                        "resources": {"limits": {"nvidia.com/gpu": "1"}},
                    }
                ],
            },
        }
    )
    apply([pod])
    bound = wait_until(
        "a pod created after the failover to be bound",
        lambda: [p for p in bound_pods("research") if p.pod == "after-failover"] or None,
        TIMEOUT,
    )
    assert len(bound[0].gpus) == 1
    assert_no_gpu_held_twice()
    kubectl(
        "-n", NAMESPACE, "rollout", "status", "deployment/gpusched", f"--timeout={TIMEOUT}s"
    )  # fmt: skip

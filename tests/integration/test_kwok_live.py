"""kwok (sigs.k8s.io/kwok v0.8.0, testing/cluster/kwok.py) plays the kubelet of GPU Nodes on the
real control plane, as the scale benchmarks use it: the Nodes become Ready and hold Leases it
renews; a gang gpusched places (the Workload API's objects, as kube-scheduler gets them) goes
Running through kwok's Stages and completes by ours; the harness kubelet plays no part for
those Nodes, and kwok none for the Nodes it was not told to manage.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from testing.apiserver import ApiClient, wait_for
from testing.cluster.cluster import RealCluster
from testing.cluster.karpenter import listening
from testing.cluster.kwok import COMPLETE_AFTER, MANAGED, POD_CIDR, Kwok, is_ready, kwok_node
from testing.gangs import upstream_member
from testing.harness import RACK, ensure_namespace, gpu_node, pods, running_operator
from testing.upstream import WORKLOAD_API, clear_upstream, for_scheduler, workload_objects

NAMESPACE = "train"
LEASES = "coordination.k8s.io"


@pytest.fixture
def upstream(api: ApiClient) -> Iterator[ApiClient]:
    """`api`, and the Workload API's objects of `NAMESPACE` cleared after the test (the
    cluster's reset leaves PodGroups held by their protection finalizer)."""
    yield api
    clear_upstream(api, [NAMESPACE])


def gang_workload(name: str, size: int) -> dict[str, Any]:
    """A Workload of one gang of `size` pods kept to one rack."""
    template = {
        "name": "workers",
        "schedulingPolicy": {"gang": {"minCount": size}},
        "schedulingConstraints": {"topology": [{"key": RACK}]},
    }
    return {
        "apiVersion": WORKLOAD_API,
        "kind": "Workload",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"podGroupTemplates": [template]},
    }


def submit_gang(api: ApiClient, name: str, size: int, runs_for: str | None) -> list[str]:
    """The gang's Workload API objects, then its pods of 8 GPUs for gpusched; `runs_for`: how
    long each runs before it completes (None: until deleted). Returns the pods' names."""
    for body in workload_objects(gang_workload(name, size)):
        api.create(body)
    annotations = {COMPLETE_AFTER: runs_for} if runs_for else {}
    names = [f"{name}-{i}" for i in range(size)]
    for pod in names:
        member = upstream_member(
            pod, 8, f"{name}-workers", namespace=NAMESPACE, annotations=annotations
        )
        api.create(for_scheduler(member, "gpusched"))
    return names


def of(api: ApiClient, names: list[str]) -> list[dict[str, Any]]:
    found = pods(api, NAMESPACE)
    return [found[f"{NAMESPACE}/{n}"] for n in names if f"{NAMESPACE}/{n}" in found]


def phases(api: ApiClient, names: list[str]) -> dict[str, Any]:
    return {p["metadata"]["name"]: (p["spec"].get("nodeName"), p["status"].get("phase"))
            for p in of(api, names)}  # fmt: skip


def ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def renewed(api: ApiClient, node: str) -> datetime:
    lease = api.get("leases", node, "kube-node-lease", group=LEASES)
    return datetime.fromisoformat(lease["spec"]["renewTime"])


def assert_lease_renewed(api: ApiClient, kwok: Kwok, node: str) -> None:
    """`node` holds a Lease of kwok's lease duration, and kwok renews it."""
    lease = wait_for(lambda: kwok.lease(api, node), timeout=30, message=f"{node}'s Lease")
    assert lease is not None
    assert lease["spec"]["leaseDurationSeconds"] == kwok.lease_seconds, lease
    first = renewed(api, node)
    wait_for(
        lambda: renewed(api, node) > first,
        timeout=6 * kwok.lease_seconds,
        message=f"{node}'s Lease renewed after {first}",
    )


def test_kwok_serves_on_loopback_only(kwok: Kwok) -> None:
    addresses = listening(kwok.process.popen.pid)
    assert len(addresses) == 1, addresses  # its health endpoint (--server-address)
    assert addresses[0].startswith("127.0.0.1:"), addresses


def test_kwok_keeps_gpu_nodes_ready_with_renewed_leases_and_leaves_other_nodes_alone(
    apiserver: RealCluster, api: ApiClient, kwok: Kwok
) -> None:
    nodes = [kwok_node(f"k{i}", "zone-a", "rack-1") for i in range(2)]
    kwok.create_nodes(api, nodes)
    api.create(gpu_node("plain", "zone-a", "rack-9"))  # the harness kubelet's

    def statuses() -> dict[str, Any]:
        return {n["metadata"]["name"]: n.get("status", {}) for n in api.list("nodes")}

    wait_for(
        lambda: all(is_ready(n) for n in api.list("nodes")),
        timeout=60,
        message=lambda: f"kwok's Nodes Ready: {statuses()}",
    )
    for name in ("k0", "k1"):
        node = api.get("nodes", name)
        assert node["metadata"]["annotations"][MANAGED] == "true"
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
        assert {"type": "InternalIP", "address": "127.0.0.1"} in node["status"]["addresses"]
        assert node["status"]["nodeInfo"]["kubeletVersion"].startswith("kwok-")
        assert_lease_renewed(api, kwok, name)
    # kwok renewed the others' Leases twice over by now; the Node it was not told of has none,
    # and kept the status the harness gave it.
    assert kwok.lease(api, "plain") is None
    assert "addresses" not in api.get("nodes", "plain")["status"]


def test_a_gang_placed_by_gpusched_runs_and_completes_on_kwok_nodes(
    apiserver: RealCluster, upstream: ApiClient, kwok: Kwok, kubeconfig: Any
) -> None:
    api = upstream
    #        zone-a
    #   rack-1 (kwok)     rack-9
    #    k0      k1       plain (the harness kubelet's; too small a rack for a gang of 2)
    kwok.create_nodes(api, [kwok_node(f"k{i}", "zone-a", "rack-1") for i in range(2)])
    api.create(gpu_node("plain", "zone-a", "rack-9"))
    wait_for(lambda: all(is_ready(n) for n in api.list("nodes")), timeout=60, message="Ready")
    ensure_namespace(api, NAMESPACE)
    confirmed = apiserver.kubelet.deleted

    # Gang a fills rack-1 and runs 3 s; gang b, the same shape, waits for its GPUs.
    first = submit_gang(api, "a", 2, runs_for="3s")
    second = submit_gang(api, "b", 2, runs_for=None)
    with running_operator(kubeconfig):
        wait_for(
            lambda: {p["status"].get("phase") for p in of(api, first)} == {"Succeeded"},
            timeout=90,
            message=lambda: f"gang a ran and completed: {phases(api, first + second)}",
        )
        # Gang b was placed only once a's pods completed: their GPUs were held until then.
        wait_for(
            lambda: len(of(api, second)) == 2 and all(map(ready, of(api, second))),
            timeout=90,
            message=lambda: f"gang b Running: {phases(api, first + second)}",
        )
    done, running = of(api, first), of(api, second)
    assert {p["spec"]["nodeName"] for p in done} == {"k0", "k1"}
    assert {p["spec"]["nodeName"] for p in running} == {"k0", "k1"}
    for pod in done:
        # kwok's pod-ready Stage ran it (start time, a pod address), ours completed it.
        assert pod["status"]["startTime"]
        assert ipaddress.ip_address(pod["status"]["podIP"]) in ipaddress.ip_network(POD_CIDR)
        (state,) = [c["state"] for c in pod["status"]["containerStatuses"]]
        assert state["terminated"]["exitCode"] == 0, state
        assert state["terminated"]["reason"] == "Completed", state
    assert {p["status"]["phase"] for p in running} == {"Running"}

    # A running pod deleted: kwok confirms the deletion, not the harness kubelet.
    api.delete("pods", second[0], NAMESPACE)
    wait_for(
        lambda: api.get_or_none("pods", second[0], NAMESPACE) is None,
        timeout=60,
        message=lambda: f"kwok to remove {second[0]}: {phases(api, second)}",
    )
    assert apiserver.kubelet.deleted == confirmed

"""A real autoscaler on the real control plane (Kubernetes 1.37): Karpenter v1.15.0 with its kwok
cloud provider (testing/cluster/karpenter.py). A gang gpusched cannot place carries
``PodScheduled=False``/``Unschedulable``; Karpenter reads that (``IsProvisionable``), adds the
nodes the gang needs from its NodePool, and gpusched then places the gang whole on them.
"""

from __future__ import annotations

from typing import Any

import pytest

from testing.apiserver import ApiClient, wait_for
from testing.cluster import karpenter as kwok
from testing.cluster.cluster import RealCluster
from testing.harness import (
    GROUP_LABEL,
    RACK,
    ZONE,
    condition,
    gang,
    gpu_pod,
    group_status,
    pods,
    running_operator,
)

POOL = "gpus"
RACK_OF_POOL = "rack-7"


def gang_pods(api: ApiClient) -> list[dict[str, Any]]:
    return [p for p in pods(api).values() if p["metadata"]["labels"].get(GROUP_LABEL) == "g"]


def seen(api: ApiClient) -> str:
    """What there is to see when a wait runs out."""
    claims = [c["metadata"]["name"] for c in api.list("nodeclaims", group=kwok.GROUP)]
    nodes = [(n["metadata"]["name"], n["spec"].get("taints")) for n in api.list("nodes")]
    conditions = [(p["metadata"]["name"], p.get("status")) for p in gang_pods(api)]
    group = condition(group_status(api, "g"))
    return f"nodeclaims {claims}, nodes {nodes}, pods {conditions}, group {group}"


def test_karpenter_serves_on_loopback_only(karpenter: kwok.Karpenter) -> None:
    addresses = kwok.listening(karpenter.process.popen.pid)
    assert len(addresses) == 2, addresses  # its metrics and its health probes
    assert all(a.startswith("127.0.0.1:") for a in addresses), addresses


@pytest.mark.usefixtures("karpenter")
def test_karpenter_adds_nodes_for_a_pending_gang_and_gpusched_places_it_whole(
    apiserver: RealCluster, api: ApiClient, kubeconfig: Any
) -> None:
    api.create(kwok.node_pool(POOL, "zone-a", RACK_OF_POOL))
    wait_for(
        lambda: condition(api.get("nodepools", POOL, group=kwok.GROUP).get("status") or {},
                          "Ready").get("status") == "True",
        timeout=60,
        message=lambda: f"NodePool {POOL} Ready: {api.get('nodepools', POOL, group=kwok.GROUP)}",
    )  # fmt: skip
    assert api.list("nodes") == []  # nothing to place on: only Karpenter can add capacity
    api.create(gang("g", 2))
    for i in range(2):
        api.create(gpu_pod(f"g-{i}", 8, group="g"))

    with running_operator(kubeconfig):
        # gpusched marks the gang unschedulable, as Karpenter reads it ...
        wait_for(
            lambda: len(gang_pods(api)) == 2 and all(map(kwok.provisionable, gang_pods(api))),
            timeout=60,
            message=lambda: f"the gang's pods provisionable: {seen(api)}",
        )  # fmt: skip

        # ... Karpenter adds nodes (their kubelet's part played here), gpusched binds the gang.
        def placed() -> bool:
            kwok.report_ready(api)
            found = gang_pods(api)
            return len(found) == 2 and all(p["spec"].get("nodeName") for p in found)

        wait_for(
            placed,
            timeout=180,
            message=lambda: f"the gang placed on Karpenter's nodes: {seen(api)}",
        )  # fmt: skip
        wait_for(
            lambda: condition(group_status(api, "g")).get("status") == "True",
            timeout=30,
            message=lambda: f"the group's status: {group_status(api, 'g')}",
        )

    claims = api.list("nodeclaims", group=kwok.GROUP)
    nodes = {n["metadata"]["name"]: n for n in api.list("nodes")}
    # Two machines of 8 GPUs for two pods of 8: no more, no fewer, all of the pool's.
    assert len(claims) == 2, [c["metadata"]["name"] for c in claims]
    # Each claim's machine is one of the nodes (by provider ID, which the claim carries from its
    # launch; its nodeName comes with registration, which may trail the bind).
    providers = {n["spec"]["providerID"]: name for name, n in nodes.items()}
    assert {providers.get(c["status"].get("providerID")) for c in claims} == set(nodes)
    bound = [p["spec"]["nodeName"] for p in gang_pods(api)]
    assert sorted(bound) == sorted(nodes)  # the gang whole, one pod on each new node
    for name in bound:
        labels = nodes[name]["metadata"]["labels"]
        assert labels[kwok.NODEPOOL_LABEL] == POOL
        assert labels[kwok.KWOK_LABEL] == "fake"
        assert (labels[ZONE], labels[RACK]) == ("zone-a", RACK_OF_POOL)
        assert nodes[name]["status"]["allocatable"]["nvidia.com/gpu"] == "8"

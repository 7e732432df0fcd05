"""Extended resources backed by DRA (KEP-5004, GA in 1.37: no feature gate) on the real
control plane: pods asking ``nvidia.com/gpu`` on nodes whose GPUs only the DRA driver
publishes, a DeviceClass with ``extendedResourceName: nvidia.com/gpu``, and gpusched creating
and allocating the claim kube-scheduler would, through the real kube-apiserver's validation
(the claim, its finalizer and status, the pod's ``status.extendedResourceClaimStatus``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testing import dra
from testing.apiserver import ApiClient, wait_for
from testing.cluster.cluster import RealCluster
from testing.harness import dump, ensure_namespace, events_for, pods, running_operator
from tests.integration.test_dra import (
    FINALIZER,
    NS,
    _all_bound,
    _assert_no_device_twice,
    _claims,
    _clean,
    _devices,
    _engine_choice,
)

pytestmark = pytest.mark.usefixtures("real_cluster")
ANNOTATION = "resource.kubernetes.io/extended-resource-claim"


@pytest.fixture
def extended_nodes(api: ApiClient) -> Iterator[list[str]]:
    """Two 8-GPU DRA nodes, and the driver's class serving nvidia.com/gpu too."""
    ensure_namespace(api, NS)
    _clean(api)
    names = ["ext-1", "ext-2"]
    api.create(dra.device_class(extended="nvidia.com/gpu"))
    for name in names:
        api.create(dra.node(name))
        api.create(dra.resource_slice(name))
    yield names
    _clean(api)


def _claim_for(api: ApiClient, pod: dict[str, Any]) -> dict[str, Any] | None:
    """The claim made for the pod's extended resources, as kube-scheduler finds it."""
    for claim in _claims(api):
        owners = claim["metadata"].get("ownerReferences") or []
        if claim["metadata"].get("annotations", {}).get(ANNOTATION) == "true" and any(
            o["uid"] == pod["metadata"]["uid"] and o.get("controller") for o in owners
        ):
            return claim
    return None


def test_nvidia_gpu_on_dra_nodes_gets_the_claim_kube_scheduler_would_create(
    apiserver: RealCluster, api: ApiClient, kubeconfig: Path, extended_nodes: list[str]
) -> None:
    with running_operator(kubeconfig) as runtime:
        api.create(dra.pod_group("ext", NS, 4))
        members = [f"ext-{i}" for i in range(4)]
        for member in members:
            api.create(dra.pod(member, NS, gpus=4, group="ext"))
        bound = wait_for(
            lambda: _all_bound(api, members),
            timeout=90,
            message=lambda: f"the gang bound: {dump(_claims(api))}",
        )
        placed = []
        for member in members:
            pod = bound[f"{NS}/{member}"]
            claim = _claim_for(api, pod)
            assert claim is not None, dump(_claims(api))
            name = claim["metadata"]["name"]
            assert name.startswith(f"{member}-extended-resources-")
            assert FINALIZER in claim["metadata"]["finalizers"]
            assert claim["spec"]["devices"]["requests"] == [
                {
                    "name": "container-0-request-2",  # cpu, memory, nvidia.com/gpu
                    "exactly": {
                        "deviceClassName": dra.CLASS,
                        "allocationMode": "ExactCount",
                        "count": 4,
                    },
                }
            ]
            status = claim["status"]
            assert status["reservedFor"] == [
                {"resource": "pods", "name": member, "uid": pod["metadata"]["uid"]}
            ]
            node = pod["spec"]["nodeName"]
            assert status["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"] == [
                {"key": "metadata.name", "operator": "In", "values": [node]}
            ]
            assert pod["status"]["extendedResourceClaimStatus"] == {
                "requestMappings": [
                    {
                        "containerName": "main",
                        "resourceName": "nvidia.com/gpu",
                        "requestName": "container-0-request-2",
                    }
                ],
                "resourceClaimName": name,
            }
            held = _devices(claim)
            assert held is not None
            assert held[0] == node
            placed.append(held)
        _assert_no_device_twice(api)
        assert sorted(placed) == _engine_choice(extended_nodes, 4, 4)
        wait_for(lambda: runtime.scheduler.idle, message="no reservation left")


def test_a_refused_allocation_deletes_the_claim_and_binds_nothing_until_allowed(
    apiserver: RealCluster, api: ApiClient, kubeconfig: Path, extended_nodes: list[str]
) -> None:
    refusal = apiserver.faults.fail(
        422,
        method="PUT",
        path=r"resourceclaims/lone-0-extended-resources-[a-z0-9]+/status",
        times=None,
    )
    slow_retries = {"operator": {"initialBackoffSeconds": 4, "maxBackoffSeconds": 8}}
    with running_operator(kubeconfig, slow_retries) as runtime:
        api.create(dra.pod("lone-0", NS, gpus=2))

        def refused_and_deleted() -> bool:
            events = [e["message"] for e in events_for(api, "lone-0", NS)]
            return (
                any("allocating ResourceClaim" in m for m in events)
                and not _claims(api)
                and not runtime.scheduler.claims.writes
            )

        wait_for(refused_and_deleted, timeout=90, message=lambda: dump(_claims(api)))
        assert not pods(api, NS)[f"{NS}/lone-0"]["spec"].get("nodeName")
        apiserver.faults.remove(refusal)
        bound = wait_for(lambda: _all_bound(api, ["lone-0"]), timeout=90, message="bound")
        pod = bound[f"{NS}/lone-0"]
        (claim,) = _claims(api)
        assert _claim_for(api, pod) == claim
        assert (
            pod["status"]["extendedResourceClaimStatus"]["resourceClaimName"]
            == (claim["metadata"]["name"])
        )

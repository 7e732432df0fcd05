"""The NVIDIA DRA driver as it publishes devices, on the real control plane: what gpusched
does not place (MIG slices) is refused with a reason naming it, and the rest is scheduled;
IMEX channels of a ComputeDomain are allocated with the pods' GPUs."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpusched.api.quantity import parse_bytes
from testing import dra
from testing.apiserver import ApiClient, wait_for
from testing.cluster.cluster import RealCluster
from testing.harness import condition, events_for, group_status, pods, running_operator
from testing.manifests import TOPOLOGY
from tests.integration.test_dra import NS, _all_bound, _claims, _devices, _gang, dra_nodes  # noqa: F401
from tests.unit.engine.test_imex_channels import (
    CD_DRIVER,
    CHANNEL_CEL,
    CHANNEL_CLASS,
    channel_claim,
    channel_slice,
)

pytestmark = pytest.mark.usefixtures("real_cluster")

MIG_CLASS = "mig.nvidia.com"
MIG_SELECTOR = "device.attributes['gpu.nvidia.com'].type == 'mig'"
"""The driver's DeviceClass for MIG slices selects them by the ``type`` attribute."""


def test_a_claim_for_mig_slices_is_refused_naming_them_and_the_rest_is_scheduled(
    apiserver: RealCluster,
    api: ApiClient,
    kubeconfig: Path,
    dra_nodes: list[str],  # noqa: F811
) -> None:
    api.create(dra.device_class(MIG_CLASS, MIG_SELECTOR))
    api.create(dra.claim_template("slice", NS, 1, device_class_name=MIG_CLASS))
    api.create(dra.pod("wants-mig", NS, template="slice"))
    with running_operator(kubeconfig):
        members = _gang(api, "whole", 2, 4)
        wait_for(lambda: _all_bound(api, members), timeout=90, message="the whole-GPU gang bound")

        def reason() -> str:
            return " ".join(
                e["message"]
                for e in events_for(api, "wants-mig", NS)
                if e["reason"] == "FailedScheduling"
            )

        assert wait_for(
            lambda: "devices of type 'mig'; gpusched allocates whole GPUs" in reason(),
            message=reason,
        )
    mig_claims = [
        c
        for c in _claims(api)
        if c["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == MIG_CLASS
    ]
    assert mig_claims, "the resource-claim controller made the pod's claim"
    assert all(not (c.get("status") or {}).get("allocation") for c in mig_claims), mig_claims


def test_a_compute_domains_pods_get_a_channel_each_with_their_gpus_one_pod_a_node(
    apiserver: RealCluster,
    api: ApiClient,
    kubeconfig: Path,
    dra_nodes: list[str],  # noqa: F811
) -> None:
    """Each node publishes the ComputeDomain plugin's pool (channel-0, daemon-0); the pods
    claim GPUs and a channel from the ComputeDomain's template, whose config the driver reads
    at Prepare: gpusched allocates both in one decision, copies the config, and never puts
    two channel pods on one node."""
    api.create(dra.device_class(CHANNEL_CLASS, CHANNEL_CEL))
    for node in dra_nodes:
        api.create(channel_slice(node))
    template = channel_claim("cd-channel")
    api.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "cd-channel", "namespace": NS},
            "spec": {"spec": template["spec"]},
        }
    )
    api.create(dra.claim_template("imex-gpus", NS, 4))
    api.create(dra.pod_group("imex", NS, 2))
    members = ["imex-0", "imex-1"]
    for member in members:
        body = dra.pod(member, NS, template="imex-gpus", group="imex")
        body["spec"]["resourceClaims"].append(
            {"name": "channel", "resourceClaimTemplateName": "cd-channel"}
        )
        body["spec"]["containers"][0]["resources"]["claims"].append({"name": "channel"})
        api.create(body)
    with running_operator(kubeconfig):
        bound = wait_for(
            lambda: _all_bound(api, members),
            timeout=90,
            message=lambda: (
                str([e["message"] for e in events_for(api, "imex-0", NS)][-3:])
                + str(condition(group_status(api, "imex", NS)))
            ),
        )
    nodes = sorted(bound[f"{NS}/{m}"]["spec"]["nodeName"] for m in members)
    assert nodes == sorted(dra_nodes), "one channel pod a node"
    channels = [c for c in _claims(api) if c["spec"]["devices"]["requests"][0]["name"] == "channel"]
    assert len(channels) == 2
    for claim in channels:
        allocation = claim["status"]["allocation"]
        (result,) = allocation["devices"]["results"]
        assert (result["driver"], result["device"]) == (CD_DRIVER, "channel-0")
        owner = claim["status"]["reservedFor"][0]["name"]
        assert result["pool"] == bound[f"{NS}/{owner}"]["spec"]["nodeName"]
        (config,) = allocation["devices"]["config"]
        assert config["source"] == "FromClaim"
        assert config["opaque"]["parameters"]["kind"] == "ComputeDomainChannelConfig"


NUMA = "resource.kubernetes.io/numaNode"


def test_numa_node_published_as_a_list_is_kept_by_the_server_and_its_gpus_are_placed(
    apiserver: RealCluster,
    api: ApiClient,
    kubeconfig: Path,
    dra_nodes: list[str],  # noqa: F811
) -> None:
    """Under its DRAListTypeAttributes gate the driver publishes ``numaNode`` as ``ints: [n]``
    (KEP-5491, alpha in 1.36): the API server, with the gate on, keeps the list, and gpusched
    reads such slices and allocates their GPUs."""
    for node in dra_nodes:
        body = dra.resource_slice(node, numa_list=True, generation=2)
        api.delete("resourceslices", body["metadata"]["name"], None, group="resource.k8s.io")
        api.create(body)
        stored = api.get("resourceslices", body["metadata"]["name"], None, group="resource.k8s.io")
        numa = [d["attributes"].get(NUMA) for d in stored["spec"]["devices"]]
        assert numa, stored
        assert all(n is not None and list(n) == ["ints"] for n in numa), numa
        assert {tuple(n["ints"]) for n in numa} == {(0,), (1,)}, numa
    with running_operator(kubeconfig):
        members = _gang(api, "listed", 2, 4)
        bound = wait_for(
            lambda: _all_bound(api, members), timeout=90, message="the gang on list-NUMA slices"
        )
    nodes = {bound[f"{NS}/{m}"]["spec"]["nodeName"] for m in members}
    assert nodes <= set(dra_nodes)
    allocated = [c for c in _claims(api) if (c.get("status") or {}).get("allocation")]
    assert len(allocated) == 2, allocated
    assert all(len(c["status"]["allocation"]["devices"]["results"]) == 4 for c in allocated)


def test_on_fabric_manager_partitioned_nodes_a_claim_gets_one_whole_partition(
    apiserver: RealCluster,
    api: ApiClient,
    kubeconfig: Path,
    dra_nodes: list[str],  # noqa: F811
) -> None:
    """Slices with the driver's ``gpuModuleID`` and ``partitionN`` attributes: each claim is
    allocated exactly one partition of its count (what the driver's Prepare demands), and a
    count no partition has is refused with a reason naming the partition sizes."""
    for node in dra_nodes:
        body = dra.resource_slice(node, partitioned=True, generation=2)
        api.delete("resourceslices", body["metadata"]["name"], None, group="resource.k8s.io")
        api.create(body)
    api.create(dra.claim_template("three", NS, 3))
    api.create(dra.pod("wants-three", NS, template="three"))
    with running_operator(kubeconfig):
        members = _gang(api, "pairs", 4, 2)
        wait_for(lambda: _all_bound(api, members), timeout=90, message="the gang of pairs bound")

        def reason() -> str:
            return " ".join(
                e["message"]
                for e in events_for(api, "wants-three", NS)
                if e["reason"] == "FailedScheduling"
            )

        assert wait_for(lambda: "none has 3" in reason(), message=reason)
    pairs = {frozenset({i, i + 1}) for i in range(0, 8, 2)}
    sets = [found for c in _claims(api) if (found := _devices(c)) is not None]
    assert len(sets) == 4, sets
    assert all(frozenset(gpus) in pairs for _, gpus in sets), sets


def test_devices_shared_by_capacity_are_left_out_and_the_whole_gpus_placed(
    apiserver: RealCluster,
    api: ApiClient,
    kubeconfig: Path,
    dra_nodes: list[str],  # noqa: F811
) -> None:
    """GPUs 0 and 1 of each node published as the driver's ConsumableShares publishes them
    (``allowMultipleAllocations``, a memory capacity with its request policy): gpusched never
    allocates them as whole GPUs; the other six of each node are placed, and a pod needing
    seven is refused with a reason naming the shared devices."""
    for node in dra_nodes:
        body = dra.resource_slice(node, shared=(0, 1), generation=2)
        api.delete("resourceslices", body["metadata"]["name"], None, group="resource.k8s.io")
        api.create(body)
        stored = api.get("resourceslices", body["metadata"]["name"], None, group="resource.k8s.io")
        kept = [d for d in stored["spec"]["devices"] if d.get("allowMultipleAllocations")]
        assert len(kept) == 2, "the server keeps allowMultipleAllocations (DRAConsumableCapacity)"
    api.create(dra.claim_template("seven", NS, 7))
    api.create(dra.pod("wants-seven", NS, template="seven"))
    with running_operator(kubeconfig):
        members = _gang(api, "sixes", 2, 6)
        wait_for(lambda: _all_bound(api, members), timeout=90, message="the gang of sixes bound")

        def reason() -> str:
            return " ".join(
                e["message"]
                for e in events_for(api, "wants-seven", NS)
                if e["reason"] == "FailedScheduling"
            )

        assert wait_for(lambda: "allow multiple allocations" in reason(), message=reason)
    sets = [found for c in _claims(api) if (found := _devices(c)) is not None]
    assert len(sets) == 2, sets
    assert all(sorted(gpus) == [2, 3, 4, 5, 6, 7] for _, gpus in sets), sets


def test_claims_share_a_device_by_memory_and_one_over_its_capacity_waits(
    apiserver: RealCluster,
    api: ApiClient,
    kubeconfig: Path,
    dra_nodes: list[str],  # noqa: F811
) -> None:
    """GPU 0 of each node published as the driver's ConsumableShares publishes it (81559Mi of
    memory, 1Mi steps): five pods each claiming 30000Mi of one shared device; two share each
    node's device, written with the ``consumedCapacity`` and ``shareID`` the API server asks
    for, and the fifth is refused saying how much memory is left."""
    for node in dra_nodes:
        body = dra.resource_slice(node, shared=(0,), generation=2)
        api.delete("resourceslices", body["metadata"]["name"], None, group="resource.k8s.io")
        api.create(body)
    api.create(dra.claim_template("share", NS, 1, memory="30000Mi"))
    names = [f"share-{i}" for i in range(5)]
    for name in names:
        api.create(dra.pod(name, NS, template="share"))
    with running_operator(kubeconfig):

        def bound() -> list[str]:
            found = pods(api, NS)
            return [n for n in names if found.get(f"{NS}/{n}", {}).get("spec", {}).get("nodeName")]

        wait_for(lambda: len(bound()) == 4, timeout=90, message=lambda: str(bound()))
        (waiting,) = set(names) - set(bound())

        def reason() -> str:
            return " ".join(
                e["message"]
                for e in events_for(api, waiting, NS)
                if e["reason"] == "FailedScheduling"
            )

        # 81559 - 2 * 30000 = 21559Mi is left of each device: no piece a claim fits in
        said = "have 0Mi of memory left in pieces its claims fit, the pod's claims consume 30000Mi"
        assert wait_for(lambda: said in reason(), timeout=60, message=reason)
        assert len(bound()) == 4, "nothing more bound meanwhile"
    results = [
        r
        for c in _claims(api)
        if (c.get("status") or {}).get("allocation")
        for r in c["status"]["allocation"]["devices"]["results"]
    ]
    assert len(results) == 4, results
    by_device: dict[tuple[str, str], int] = {}
    for result in results:
        assert dra.index_of_device(result["device"]) == 0, result
        assert parse_bytes(result["consumedCapacity"]["memory"]) == 30000 * 2**20, result
        assert result["shareID"], result
        key = (result["pool"], result["device"])
        by_device[key] = by_device.get(key, 0) + 1
    assert sorted(by_device.values()) == [2, 2], by_device
    assert len({r["shareID"] for r in results}) == 4, results


CD_LABEL = "resource.nvidia.com/computeDomain"


def _compute_domain(cluster: RealCluster, name: str, namespace: str) -> str:
    """A ComputeDomain (the driver's CRD, testing/cluster/crds); its uid."""
    cluster.ensure_namespace(namespace)
    created = cluster.admin.create(
        {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "ComputeDomain",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": name}}},
        }
    )
    return str(created["metadata"]["uid"])


def _channel_pod(api: ApiClient, name: str, domain: str) -> None:
    """A pod with one GPU and a channel whose claim template names ComputeDomain ``domain``."""
    template = channel_claim(f"{name}-channel", domain=domain)
    api.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": f"{name}-channel", "namespace": NS},
            "spec": {"spec": template["spec"]},
        }
    )
    body = dra.pod(name, NS, template="one-gpu")
    body["spec"]["resourceClaims"].append(
        {"name": "channel", "resourceClaimTemplateName": f"{name}-channel"}
    )
    body["spec"]["containers"][0]["resources"]["claims"].append({"name": "channel"})
    api.create(body)


def test_compute_domain_rules_are_kept_before_binding(
    workload_crds: RealCluster,
    api: ApiClient,
    kubeconfig: Path,
    dra_nodes: list[str],  # noqa: F811
) -> None:
    """A channel claim of a ComputeDomain in another namespace is refused, its Event naming
    the field; a node the plugin labelled for another ComputeDomain is not used for a
    channel pod (the driver's Prepare would refuse both after the bind)."""
    far = _compute_domain(workload_crds, "cd-far", "training")
    near = _compute_domain(workload_crds, "cd-near", NS)
    api.create(dra.device_class(CHANNEL_CLASS, CHANNEL_CEL))
    for node in dra_nodes:
        api.create(channel_slice(node))
    api.create(dra.claim_template("one-gpu", NS, 1))
    busy = dra_nodes[0]
    api.patch("nodes", busy, {"metadata": {"labels": {CD_LABEL: "uid-of-another-domain"}}})
    try:
        _channel_pod(api, "far", far)
        _channel_pod(api, "near", near)
        with running_operator(kubeconfig):
            bound = wait_for(
                lambda: _all_bound(api, ["near"]),
                timeout=90,
                message=lambda: str([e["message"] for e in events_for(api, "near", NS)][-3:]),
            )

            def reason() -> str:
                return " ".join(
                    e["message"]
                    for e in events_for(api, "far", NS)
                    if e["reason"] == "FailedScheduling"
                )

            field = "spec.devices.config[0].opaque.parameters.domainID"
            assert wait_for(
                lambda: field in reason() and "training/cd-far" in reason(), message=reason
            )
        assert bound[f"{NS}/near"]["spec"]["nodeName"] == dra_nodes[1]
        assert not api.get("pods", "far", NS)["spec"].get("nodeName")
    finally:
        api.patch("nodes", busy, {"metadata": {"labels": {CD_LABEL: None}}})


CLIQUE = "nvidia.com/gpu.clique"


def _clique_gang(api: ApiClient, name: str, size: int, gpus: int) -> list[str]:
    """A gang of ``size`` pods of ``gpus`` DRA GPUs each, in one NVLink clique."""
    api.create(dra.claim_template(f"{name}-gpus", NS, gpus))
    group = dra.pod_group(name, NS, size)
    group["spec"]["schedulingConstraints"] = {"topology": [{"key": CLIQUE}]}
    api.create(group)
    members = [f"{name}-{i}" for i in range(size)]
    for member in members:
        api.create(dra.pod(member, NS, template=f"{name}-gpus", group=name))
    return members


def test_a_node_whose_gpus_name_different_cliques_hosts_nothing_clique_constrained(
    apiserver: RealCluster,
    api: ApiClient,
    kubeconfig: Path,
    dra_nodes: list[str],  # noqa: F811
) -> None:
    """Both nodes labelled one clique; on the first, the node agent read two cliques from
    NVML's fabric info (GPUs 4-7 in another; the NVIDIA DRA driver publishes no per-device
    clique, so the agent's ``gpusched.io/gpu-topology`` annotation is where it shows): a
    clique-constrained gang lands on the other node only, and one needing both stays pending
    with a reason naming the node and its cliques."""
    label = "6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f.1"
    other = "6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f.2"
    mixed = dra_nodes[0]
    plain = dra.topology()
    for node in dra_nodes:
        gpus = tuple(
            g.model_copy(update={"clique": other if node == mixed and g.index >= 4 else label})
            for g in plain.gpus
        )
        annotation = plain.model_copy(update={"gpus": gpus}).to_annotation()
        patch = {"labels": {CLIQUE: label}, "annotations": {TOPOLOGY: annotation}}
        api.patch("nodes", node, {"metadata": patch})
    try:
        with running_operator(kubeconfig):
            small = _clique_gang(api, "fits", 2, 4)
            bound = wait_for(
                lambda: _all_bound(api, small), timeout=90, message="the 2x4 gang bound"
            )
            assert {bound[f"{NS}/{m}"]["spec"]["nodeName"] for m in small} == {dra_nodes[1]}
            big = _clique_gang(api, "needs-both", 2, 8)

            def said() -> str:
                return str(condition(group_status(api, "needs-both", NS)).get("message", ""))

            assert wait_for(
                lambda: f"GPUs name different cliques ({mixed}: " in said() and other in said(),
                timeout=90,
                message=said,
            )
            assert not any(
                pods_found.get("spec", {}).get("nodeName")
                for m in big
                if (pods_found := api.get_or_none("pods", m, NS)) is not None
            )
    finally:
        restored = {"labels": {CLIQUE: None}, "annotations": {TOPOLOGY: plain.to_annotation()}}
        for node in dra_nodes:
            api.patch("nodes", node, {"metadata": restored})

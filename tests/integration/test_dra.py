"""DRA on the real control plane: ResourceSlices and a DeviceClass as the NVIDIA DRA driver
publishes them, pods with ResourceClaimTemplates whose claims the real resource-claim
controller (kube-controller-manager) creates, gpusched allocating them through the real
kube-apiserver's validation, and the ledger read back from the claims after a restart."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from gpusched.api.config import SchedulerConfig
from gpusched.api.k8s import parse_node
from gpusched.engine.groups import GroupKind, GroupSpec
from gpusched.engine.policy import Policy
from gpusched.engine.schedule import schedule
from gpusched.inputs.objects import from_documents
from gpusched.offline.simulate import simulate
from testing import dra
from testing.apiserver import ApiClient, ApiStatusError, wait_for
from testing.cluster.cluster import RealCluster
from testing.engine import cluster
from testing.engine import pod as gpu_request
from testing.harness import dump, ensure_namespace, events_for, pods, running_operator
from tests.integration.test_preemption import priority_classes  # noqa: F401  (a fixture)

NS = "ml"
RESOURCE = "resource.k8s.io"
FINALIZER = "resource.kubernetes.io/delete-protection"
pytestmark = pytest.mark.usefixtures("real_cluster")


@pytest.fixture
def dra_nodes(apiserver: RealCluster, api: ApiClient) -> Iterator[list[str]]:
    """Two 8-GPU nodes whose GPUs only the DRA driver publishes, and the driver's class."""
    ensure_namespace(api, NS)
    _clean(api)  # what an earlier failed test may have left
    names = ["dra-1", "dra-2"]
    api.create(dra.device_class())
    for name in names:
        api.create(dra.node(name))
        api.create(dra.resource_slice(name))
    yield names
    _clean(api)


def _clean(api: ApiClient) -> None:
    """Claims carry our finalizer: delete them, strip it (retrying while controllers update
    them too), then delete everything else DRA this test made."""
    for item in api.list("pods", namespace=NS):
        with contextlib.suppress(ApiStatusError):  # gone meanwhile
            api.delete("pods", item["metadata"]["name"], NS)
    for body in _claims(api):
        with contextlib.suppress(ApiStatusError):  # gone already: its pod's deletion took it
            api.delete("resourceclaims", body["metadata"]["name"], NS, group=RESOURCE)

    def claims_gone() -> bool:
        for body in _claims(api):
            if body["metadata"].get("finalizers"):
                body["metadata"]["finalizers"] = []
                api.replace({**body, "apiVersion": f"{RESOURCE}/v1", "kind": "ResourceClaim"})
        return not _claims(api)

    wait_for(claims_gone, message=lambda: f"claims deleted: {dump(_claims(api))}")
    for plural, namespace in (
        ("resourceclaimtemplates", NS),
        ("resourceslices", None),
        ("deviceclasses", None),
    ):
        for body in api.list(plural, namespace=namespace, group=RESOURCE):
            api.delete(plural, body["metadata"]["name"], namespace, group=RESOURCE)


def _gang(
    api: ApiClient, name: str, size: int, gpus: int, priority_class: str | None = None
) -> list[str]:
    api.create(dra.claim_template(f"{name}-gpus", NS, gpus))
    group = dra.pod_group(name, NS, size)
    if priority_class is not None:
        group["spec"].update({"priorityClassName": priority_class, "disruptionMode": "All"})
    api.create(group)
    members = [f"{name}-{i}" for i in range(size)]
    for member in members:
        body = dra.pod(member, NS, template=f"{name}-gpus", group=name)
        if priority_class is not None:
            body["spec"]["priorityClassName"] = priority_class
        api.create(body)
    return members


def _claim_of(api: ApiClient, pod: dict[str, Any]) -> dict[str, Any] | None:
    statuses = pod.get("status", {}).get("resourceClaimStatuses") or []
    if not statuses or not statuses[0].get("resourceClaimName"):
        return None
    return api.get_or_none("resourceclaims", statuses[0]["resourceClaimName"], NS, group=RESOURCE)


def _claims(api: ApiClient) -> list[dict[str, Any]]:
    return api.list("resourceclaims", namespace=NS, group=RESOURCE)


def _devices(claim: dict[str, Any]) -> tuple[str, tuple[int, ...]] | None:
    allocation = (claim.get("status") or {}).get("allocation")
    if not allocation:
        return None
    results = allocation["devices"]["results"]
    pools = {r["pool"] for r in results}
    assert len(pools) == 1, claim
    return pools.pop(), tuple(sorted(dra.index_of_device(r["device"]) for r in results))


def _all_bound(api: ApiClient, members: list[str]) -> dict[str, dict[str, Any]]:
    found = pods(api, NS)
    ready = all(found.get(f"{NS}/{m}", {}).get("spec", {}).get("nodeName") for m in members)
    return found if ready else {}


def _assert_no_device_twice(api: ApiClient) -> None:
    owners: dict[tuple[str, int], str] = {}
    for claim in _claims(api):
        held = _devices(claim)
        for gpu in held[1] if held else ():
            other = owners.setdefault((held[0], gpu), claim["metadata"]["name"])  # type: ignore[index]
            assert other == claim["metadata"]["name"], f"GPU {gpu} in {other} and {claim}"


def _why(api: ApiClient, runtime: Any, members: list[str]) -> str:
    events = {m: [e["message"] for e in events_for(api, m, NS)] for m in members}
    attempts = {k: str(v) for k, v in runtime.scheduler.reporter.attempts.items()}
    seen = {
        m: str(r.pod.status) + " src=" + str(r.source)[-120:] + " v=" + r.version
        for m in members
        if (r := runtime.scheduler.state.pods.get(f"{NS}/{m}")) is not None
    }
    server = {m: pods(api, NS).get(f"{NS}/{m}", {}).get("status", {}) for m in members}
    return dump(
        {
            "events": events,
            "seen": seen,
            "server": server,
            "attempts": attempts,
            "claims": _claims(api),
        }
    )


def _engine_choice(nodes: list[str], size: int, gpus: int) -> list[tuple[str, tuple[int, ...]]]:
    """What the engine picks for the same gang asking nvidia.com/gpu on the same machines."""
    snapshot = cluster(nodes=[parse_node(dra.node(n, plugin_gpus=8)) for n in nodes])
    requests = [gpu_request(f"p{i}", gpus=gpus, group="g") for i in range(size)]
    group = GroupSpec(key="default/g", kind=GroupKind.POD_GROUP, minimum=size)
    result = schedule(snapshot, requests, [group], Policy())
    return sorted((b.node, tuple(sorted(b.gpus))) for b in result.bindings)


def test_claims_from_templates_are_allocated_by_gpusched_as_the_engine_chooses(
    apiserver: RealCluster, api: ApiClient, kubeconfig: Path, dra_nodes: list[str]
) -> None:
    with running_operator(kubeconfig) as runtime:
        members = _gang(api, "tmpl", 4, 4)
        bound = wait_for(
            lambda: _all_bound(api, members),
            timeout=90,
            message=lambda: f"the gang bound: {_why(api, runtime, members)}",
        )
        placed = []
        for member in members:
            pod = bound[f"{NS}/{member}"]
            claim = _claim_of(api, pod)
            assert claim is not None, pod
            # kube-scheduler's shape: finalizer, allocation for the pod's node, reserved for it.
            assert FINALIZER in claim["metadata"]["finalizers"]
            status = claim["status"]
            assert status["reservedFor"] == [
                {"resource": "pods", "name": member, "uid": pod["metadata"]["uid"]}
            ]
            node = pod["spec"]["nodeName"]
            assert status["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"] == [
                {"key": "metadata.name", "operator": "In", "values": [node]}
            ]
            held = _devices(claim)
            assert held is not None
            assert held[0] == node
            placed.append(held)
        _assert_no_device_twice(api)
        assert sorted(placed) == _engine_choice(dra_nodes, 4, 4)
        wait_for(lambda: runtime.scheduler.idle, message="no reservation left")


def test_a_refused_claim_write_leaves_every_claim_of_the_gang_free_and_no_pod_bound(
    apiserver: RealCluster, api: ApiClient, kubeconfig: Path, dra_nodes: list[str]
) -> None:
    refusal = apiserver.faults.fail(
        422, method="PUT", path=r"resourceclaims/halt-3-gpus-[a-z0-9]+/status", times=None
    )
    # Its own pod names: a pod re-created under the name of one just deleted (the previous
    # story's) can wait on the resource-claim controller's backoff for its claim.
    # Retries a few seconds apart, so that the released state between two is there to see.
    slow_retries = {"operator": {"initialBackoffSeconds": 4, "maxBackoffSeconds": 8}}
    with running_operator(kubeconfig, slow_retries) as runtime:
        members = _gang(api, "halt", 4, 4)

        def refused_and_released() -> bool:
            events = [e["message"] for e in events_for(api, "halt-3", NS)]
            claims = _claims(api)
            return (
                any("allocating ResourceClaim" in m for m in events)
                and len(claims) == 4
                and all(not (c.get("status") or {}) for c in claims)
                and not runtime.scheduler.claims.writes
            )

        wait_for(
            refused_and_released,
            timeout=90,
            message=lambda: f"claims released: {dump(_claims(api))}",
        )
        assert not any(p["spec"].get("nodeName") for p in pods(api, NS).values())
        for claim in _claims(api):
            assert FINALIZER not in claim["metadata"].get("finalizers", []), claim
        apiserver.faults.remove(refusal)
        wait_for(lambda: _all_bound(api, members), timeout=90, message="bound once allowed")
        _assert_no_device_twice(api)


def test_a_refused_bind_gives_that_pods_claim_back(
    apiserver: RealCluster, api: ApiClient, kubeconfig: Path, dra_nodes: list[str]
) -> None:
    refusal = apiserver.faults.fail(403, method="POST", path=r"pods/solo-0/binding", times=None)
    with running_operator(kubeconfig):
        _gang(api, "solo", 1, 2)

        def released() -> bool:
            events = [e["message"] for e in events_for(api, "solo-0", NS)]
            claims = _claims(api)
            return (
                any("Binding rejected" in m for m in events)
                and len(claims) == 1
                and not (claims[0].get("status") or {}).get("allocation")
            )

        wait_for(released, timeout=90, message=lambda: f"released: {dump(_claims(api))}")
        apiserver.faults.remove(refusal)
        wait_for(lambda: _all_bound(api, ["solo-0"]), timeout=90, message="bound once allowed")


def test_killed_between_claim_writes_and_binds_then_restarted_nothing_is_held_twice(
    apiserver: RealCluster, api: ApiClient, kubeconfig: Path, dra_nodes: list[str]
) -> None:
    # The binds never reach the server: the operator stops with claims written, pods unbound.
    apiserver.faults.drop(method="POST", path=r"/binding", times=None)
    members = _gang(api, "again", 4, 4)
    with running_operator(kubeconfig):
        wait_for(
            lambda: sum(1 for c in _claims(api) if (c.get("status") or {}).get("reservedFor")),
            timeout=90,
            message=lambda: f"some claims written: {dump(_claims(api))}",
        )
    assert not any(p["spec"].get("nodeName") for p in pods(api, NS).values())
    # While it is down, one pod goes away; its claim is kube-controller-manager's to free.
    api.delete("pods", "again-3", NS)
    api.create(dra.pod("again-4", NS, template="again-gpus", group="again"))
    members = [*members[:3], "again-4"]
    apiserver.faults.clear()  # the cut too
    with running_operator(kubeconfig) as runtime:
        bound = wait_for(lambda: _all_bound(api, members), timeout=45, message="all bound")
        _assert_no_device_twice(api)
        for member in members:
            pod = bound[f"{NS}/{member}"]
            claim = _claim_of(api, pod)
            assert claim is not None
            assert claim["status"]["reservedFor"] == [
                {"resource": "pods", "name": member, "uid": pod["metadata"]["uid"]}
            ]
        uids = {p["metadata"]["uid"] for p in pods(api, NS).values()}
        wait_for(
            lambda: all(
                r["uid"] in uids
                for c in _claims(api)
                for r in (c.get("status") or {}).get("reservedFor", [])
            ),
            timeout=90,
            message=lambda: f"no claim reserved for a gone pod: {dump(_claims(api))}",
        )
        wait_for(lambda: runtime.scheduler.idle, message="no reservation left")


def test_claims_gpusched_cannot_allocate_get_a_reason_and_the_rest_is_scheduled(
    apiserver: RealCluster, api: ApiClient, kubeconfig: Path, dra_nodes: list[str]
) -> None:
    api.create(dra.device_class("nic.example.com", "device.driver == 'nic.example.com'"))
    api.create(dra.claim_template("nic", NS, 1, device_class_name="nic.example.com"))
    cel = "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0"
    api.create(dra.claim_template("big", NS, 1, selectors=(cel,)))
    api.create(dra.pod("wants-nic", NS, template="nic"))
    api.create(dra.pod("wants-big", NS, template="big"))
    # A third node whose slice names a GPU its topology does not have.
    api.create(dra.node("dra-3"))
    api.create(dra.resource_slice("dra-3", replace={5: "GPU-00000000-dead-beef-0000-000000000000"}))
    with running_operator(kubeconfig):
        members = _gang(api, "fine", 2, 8)
        wait_for(lambda: _all_bound(api, members), timeout=90, message="the good gang bound")
        # Only dra-3 is left, and one of its 8 GPUs cannot be matched.
        api.create(dra.claim_template("eight", NS, 8))
        api.create(dra.pod("eight-on-dra-3", NS, template="eight"))

        def reason(pod: str) -> str:
            return " ".join(
                e["message"] for e in events_for(api, pod, NS) if e["reason"] == "FailedScheduling"
            )

        assert wait_for(
            lambda: "gpusched allocates only gpu.nvidia.com GPUs" in reason("wants-nic"),
            message=lambda: reason("wants-nic"),
        )
        assert wait_for(
            lambda: "beyond what gpusched evaluates" in reason("wants-big"),
            message=lambda: reason("wants-big"),
        )
        assert wait_for(
            lambda: (
                "DRA node dra-3: device gpu-5 (uuid GPU-00000000-dead-beef"
                in reason("eight-on-dra-3")
            ),
            message=lambda: reason("eight-on-dra-3"),
        )


def test_pods_sharing_one_claim_are_placed_on_its_one_allocation(
    apiserver: RealCluster, api: ApiClient, kubeconfig: Path, dra_nodes: list[str]
) -> None:
    # One claim by name (not from a template), two pods on it: the first allocates it, the
    # second is only added to reservedFor and goes to the allocation's node.
    api.create(dra.claim("shared", NS, 2))
    with running_operator(kubeconfig) as runtime:
        members = ["share-a", "share-b"]
        for member in members:
            api.create(dra.pod(member, NS, claim_name="shared"))
        bound = wait_for(
            lambda: _all_bound(api, members),
            timeout=90,
            message=lambda: f"both bound: {_why(api, runtime, members)}",
        )
        claim = api.get("resourceclaims", "shared", NS, group=RESOURCE)
        assert FINALIZER in claim["metadata"]["finalizers"]
        reserved = claim["status"]["reservedFor"]
        assert sorted(r["name"] for r in reserved) == members
        assert {r["uid"] for r in reserved} == {
            bound[f"{NS}/{m}"]["metadata"]["uid"] for m in members
        }
        held = _devices(claim)
        assert held is not None
        assert {bound[f"{NS}/{m}"]["spec"]["nodeName"] for m in members} == {held[0]}
        assert len(held[1]) == 2
        _assert_no_device_twice(api)
        wait_for(lambda: runtime.scheduler.idle, message="no reservation left")


def test_a_high_priority_gang_evicts_a_low_one_holding_its_gpus_through_claims(
    apiserver: RealCluster,
    api: ApiClient,
    kubeconfig: Path,
    dra_nodes: list[str],
    priority_classes: None,  # noqa: F811
) -> None:
    # Both nodes' GPUs are held by the low gang's claims. Its pods are the victims (evicted
    # through the Eviction API), kube-controller-manager then frees their claims, and the high
    # gang's claims get the same devices: none held twice at any point we look.
    with running_operator(kubeconfig) as runtime:
        low = _gang(api, "low", 2, 8, priority_class="gpusched-test-low")
        wait_for(
            lambda: _all_bound(api, low),
            timeout=90,
            message=lambda: f"the low gang bound: {_why(api, runtime, low)}",
        )
        high = _gang(api, "high", 2, 8, priority_class="gpusched-test-high")
        bound = wait_for(
            lambda: _all_bound(api, high),
            timeout=120,
            message=lambda: f"the high gang bound: {_why(api, runtime, high)}",
        )
        assert not [k for k in pods(api, NS) if k.startswith(f"{NS}/low-")], "low evicted"
        evictions = sorted(
            urlsplit(r.path).path.split("/")[-2]
            for r in apiserver.requests()
            if r.method == "POST" and r.path.endswith("/eviction")
        )
        assert evictions == ["low-0", "low-1"]
        _assert_no_device_twice(api)
        for member in high:
            claim = _claim_of(api, bound[f"{NS}/{member}"])
            assert claim is not None
            assert _devices(claim) == (bound[f"{NS}/{member}"]["spec"]["nodeName"], tuple(range(8)))


def _server_documents(api: ApiClient) -> list[dict[str, Any]]:
    """What ``gpusched explain`` lists of this test's cluster, each item with its kind."""
    found: list[dict[str, Any]] = []
    for kind, plural, namespace, group in (
        ("Node", "nodes", None, None),
        ("Pod", "pods", NS, None),
        ("PodGroup", "podgroups", NS, "scheduling.gpusched.io"),
        ("ResourceSlice", "resourceslices", None, RESOURCE),
        ("DeviceClass", "deviceclasses", None, RESOURCE),
        ("ResourceClaim", "resourceclaims", NS, RESOURCE),
    ):
        found += [{**item, "kind": kind} for item in api.list(plural, namespace, group=group)]
    return found


def _results(claim: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return [
        (r["request"], r["driver"], r["pool"], r["device"])
        for r in allocation.get("devices", {}).get("results", [])
    ]


def test_simulate_on_the_servers_objects_chooses_the_devices_the_operator_allocates(
    apiserver: RealCluster, api: ApiClient, kubeconfig: Path, dra_nodes: list[str]
) -> None:
    # A gang of three asking 4 GPUs each, its claims made by kube-controller-manager before
    # gpusched runs: simulate on what the server holds then, and the operator on the server.
    members = _gang(api, "same", 3, 4)

    def claims_made() -> bool:
        found = pods(api, NS)
        return all(_claim_of(api, found[f"{NS}/{m}"]) is not None for m in members)

    wait_for(claims_made, timeout=60, message="the claims made from the template")
    run = simulate(from_documents(_server_documents(api)), SchedulerConfig())
    want = {
        claim.claim: [(d.request, d.driver, d.pool, d.device) for d in claim.devices]
        for binding in run.result.bindings
        for claim in binding.devices
    }
    assert len(want) == len(members), run.result.to_dict()
    with running_operator(kubeconfig) as runtime:
        wait_for(
            lambda: _all_bound(api, members),
            timeout=90,
            message=lambda: f"the gang bound: {_why(api, runtime, members)}",
        )
        got = {f"{NS}/{c['metadata']['name']}": _results(c) for c in _claims(api)}
        assert got == want

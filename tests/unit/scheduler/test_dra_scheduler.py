"""The scheduling service allocating ResourceClaims, against fakes that keep the order of
every write: finalizer, then allocation with reservedFor, then the bind; a gang all or nothing;
the ledger read from claims. The same stories run on the real control plane in
tests/integration/test_dra.py; these add exact control of failures."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from prometheus_client import REGISTRY

from gpusched.api.config import load_config
from gpusched.api.k8s import parse_node
from gpusched.engine.groups import GroupKind
from gpusched.engine.policy import Policy
from gpusched.engine.schedule import schedule
from gpusched.scheduler.factory import build_scheduler
from gpusched.scheduler.ports import ApiError, Fence, FencedError, Listing, ObjectRef
from gpusched.scheduler.service import Scheduler
from gpusched.scheduler.state import ClusterState
from testing import dra
from testing.clock import Clock
from testing.engine import cluster
from testing.engine import pod as gpu_request
from testing.fakes import FakeApi
from tests.unit.scheduler.test_scheduler_service import run_cycle

NS = "ml"


@dataclass
class FakeClaims:
    """ResourceClaims with resourceVersions, as the API server keeps them. Every write asks
    its fence first, as the real client does as the request goes out: a refused write is
    logged as ``fenced`` and changes nothing."""

    log: list[tuple[str, ...]]
    claims: dict[str, dict[str, Any]] = field(default_factory=dict)
    refuse_status: dict[str, ApiError] = field(default_factory=dict)
    pod_statuses: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    version: int = 1
    created: int = 0

    def _fenced(self, fence: Fence | None, what: str) -> None:
        if fence is not None and not fence():
            self.log.append(("fenced", what))
            raise FencedError(what)

    def add(self, body: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        body = copy.deepcopy(body)
        body["metadata"].update(uid=f"uid-{body['metadata']['name']}")
        body["metadata"]["resourceVersion"] = str(self.version)
        self.claims[f"{body['metadata']['namespace']}/{body['metadata']['name']}"] = body
        return copy.deepcopy(body)

    def _put(self, body: Mapping[str, Any], what: str) -> dict[str, Any]:
        key = f"{body['metadata']['namespace']}/{body['metadata']['name']}"
        stored = self.claims[key]
        if stored["metadata"]["resourceVersion"] != body["metadata"]["resourceVersion"]:
            raise ApiError(409, "the object has been modified")
        updated = copy.deepcopy(stored)
        if what == "status":
            updated["status"] = copy.deepcopy(body.get("status") or {})
        else:
            updated["metadata"]["finalizers"] = list(body["metadata"].get("finalizers") or [])
        return self.add(updated)

    async def list_resource_slices(self) -> list[dict[str, Any]]:
        return []

    async def list_device_classes(self) -> list[dict[str, Any]]:
        return []

    async def list_resource_claims(self) -> list[dict[str, Any]]:
        return [copy.deepcopy(c) for c in self.claims.values()]

    async def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        found = self.claims.get(f"{namespace}/{name}")
        return copy.deepcopy(found) if found is not None else None

    async def update_claim(
        self, body: Mapping[str, Any], fence: Fence | None = None
    ) -> dict[str, Any]:
        key = f"{body['metadata']['namespace']}/{body['metadata']['name']}"
        self._fenced(fence, f"finalizers of {key}")
        self.log.append(("finalizers", key, *body["metadata"].get("finalizers", [])))
        return self._put(body, "metadata")

    async def create_claim(
        self, body: Mapping[str, Any], fence: Fence | None = None
    ) -> dict[str, Any]:
        self._fenced(fence, "create")
        self.created += 1
        created = copy.deepcopy(dict(body))
        created["metadata"]["name"] = f"{body['metadata']['generateName']}{self.created:05d}"
        self.log.append(
            ("create", f"{created['metadata']['namespace']}/{created['metadata']['name']}")
        )
        return self.add(created)

    async def delete_claim(
        self, namespace: str, name: str, uid: str, fence: Fence | None = None
    ) -> None:
        self._fenced(fence, f"delete {namespace}/{name}")
        self.log.append(("delete", f"{namespace}/{name}"))
        found = self.claims.get(f"{namespace}/{name}")
        if found is not None and found["metadata"]["uid"] == uid:
            assert not found["metadata"].get("finalizers"), found  # else it would only be marked
            del self.claims[f"{namespace}/{name}"]

    async def patch_pod_status(
        self, namespace: str, name: str, status: Mapping[str, Any], fence: Fence | None = None
    ) -> None:
        self._fenced(fence, f"status of pod {namespace}/{name}")
        self.log.append(("pod-status", f"{namespace}/{name}"))
        self.pod_statuses.append((f"{namespace}/{name}", dict(status)))

    async def update_claim_status(
        self, body: Mapping[str, Any], fence: Fence | None = None
    ) -> dict[str, Any]:
        key = f"{body['metadata']['namespace']}/{body['metadata']['name']}"
        self._fenced(fence, f"status of {key}")
        status = body.get("status") or {}
        devices = (status.get("allocation") or {}).get("devices", {}).get("results", [])
        reserved = [r["name"] for r in status.get("reservedFor") or []]
        self.log.append(("status", key, ",".join(d["device"] for d in devices), ",".join(reserved)))
        refused = self.refuse_status.pop(key, None)
        if refused is not None:
            raise refused
        return self._put(body, "status")


@dataclass
class LoggingApi(FakeApi):
    log: list[tuple[str, ...]] = field(default_factory=list)

    async def bind(
        self,
        pod: ObjectRef,
        node: str,
        annotations: Mapping[str, str],
        fence: Fence | None = None,
    ) -> None:
        await super().bind(pod, node, annotations, fence)
        self.log.append(("bind", pod.key, node))


def _world(
    gang: int = 2, gpus: int = 2, clock: Clock | None = None
) -> tuple[Scheduler, LoggingApi, FakeClaims]:
    api = LoggingApi()
    claims = FakeClaims(api.log)
    config = load_config({"operator": {"batchWindowSeconds": 0, "initialBackoffSeconds": 1}})
    scheduler = build_scheduler(config, ClusterState(), api, claims=claims, clock=clock or Clock())
    fill(scheduler, claims, gang, gpus)
    return scheduler, api, claims


def fill(
    scheduler: Scheduler, claims: FakeClaims, gang: int, gpus: int, *, add_claims: bool = True
) -> None:
    """Node n1 (8 DRA GPUs), the driver's class, and a gang of ``gang`` pods with a claim of
    ``gpus`` each (``add_claims``: made now; else the server has them already)."""
    scheduler.state.upsert_node(dra.node("n1"))
    scheduler.claims.book.upsert_slice(dra.resource_slice("n1"))
    scheduler.claims.book.upsert_class(dra.device_class())
    if gang:
        group = dra.pod_group("train", NS, gang)
        group["metadata"].update(uid="uid-train", generation=1)
        scheduler.state.upsert_group(GroupKind.POD_GROUP, group)
    for i in range(gang):
        if add_claims:
            scheduler.claims.book.upsert_claim(claims.add(dra.claim(f"w{i}-gpus", NS, gpus)))
        pod = dra.pod(f"w{i}", NS, template="gpus", group="train")
        pod["metadata"].update(uid=f"uid-w{i}", creationTimestamp="2026-12-01T10:00:00Z")
        pod["status"] = {
            "resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": f"w{i}-gpus"}]
        }
        scheduler.state.upsert_pod(pod)


@pytest.mark.asyncio
async def test_claims_are_written_in_kube_schedulers_order_and_every_one_before_any_bind() -> None:
    scheduler, api, claims = _world()
    await run_cycle(scheduler)
    kinds = [entry[0] for entry in api.log]
    assert sorted(kinds[:4]) == ["finalizers", "finalizers", "status", "status"], api.log
    assert kinds[4:] == ["bind", "bind"], api.log
    for i in range(2):
        mine = [e for e in api.log if e[1] == f"{NS}/w{i}-gpus"]
        assert [e[0] for e in mine] == ["finalizers", "status"], api.log
        assert mine[0][2:] == ("resource.kubernetes.io/delete-protection",)
    for i in range(2):
        status = claims.claims[f"{NS}/w{i}-gpus"]["status"]
        assert status["reservedFor"] == [{"resource": "pods", "name": f"w{i}", "uid": f"uid-w{i}"}]
        allocation = status["allocation"]
        assert allocation["nodeSelector"] == {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
            ]
        }
        assert {r["pool"] for r in allocation["devices"]["results"]} == {"n1"}
    held = [
        d["device"]
        for c in claims.claims.values()
        for d in c["status"]["allocation"]["devices"]["results"]
    ]
    assert len(held) == len(set(held)) == 4


@pytest.mark.asyncio
async def test_a_refused_claim_write_releases_every_claim_of_the_gang_and_binds_nothing() -> None:
    scheduler, api, claims = _world()
    claims.refuse_status[f"{NS}/w1-gpus"] = ApiError(422, "allocation refused")
    await run_cycle(scheduler)
    assert api.binds == []
    for body in claims.claims.values():
        assert "allocation" not in body.get("status", {}), body
        assert "reservedFor" not in body.get("status", {}), body
        assert "resource.kubernetes.io/delete-protection" not in body["metadata"].get(
            "finalizers", []
        )
    assert scheduler.claims.writes == {}
    assert scheduler.state.ledger.reservations == {}
    messages = [e["message"] for e in api.events if e["reason"] == "FailedScheduling"]
    assert any("allocating ResourceClaim ml/w1-gpus failed" in m for m in messages), messages


@pytest.mark.asyncio
async def test_the_devices_allocated_are_the_set_the_engine_picks_for_the_same_gpu_pod() -> None:
    scheduler, _, claims = _world(gang=1, gpus=4)
    await run_cycle(scheduler)
    results = claims.claims[f"{NS}/w0-gpus"]["status"]["allocation"]["devices"]["results"]
    allocated = sorted(dra.index_of_device(r["device"]) for r in results)
    # The same machine with device-plugin GPUs, and a pod asking for 4 nvidia.com/gpu.
    snapshot = cluster(nodes=[parse_node(dra.node("n1", plugin_gpus=8))])
    want = schedule(snapshot, [gpu_request("ml/w0", gpus=4)], [], Policy()).bindings[0].gpus
    assert tuple(allocated) == tuple(sorted(want))


@pytest.mark.asyncio
async def test_claims_hold_their_devices_after_a_restart_even_when_their_pod_is_gone() -> None:
    scheduler, _, claims = _world(gang=1, gpus=4)
    await run_cycle(scheduler)
    # A new replica: it knows only what it lists. The pod is gone; its claim still allocated.
    api2 = LoggingApi()
    fresh = build_scheduler(
        load_config({"operator": {"batchWindowSeconds": 0}}),
        ClusterState(),
        api2,
        claims=claims,
        clock=Clock(),
    )
    fresh.state.upsert_node(dra.node("n1"))
    await fresh.claims.resync()
    fresh.claims.book.upsert_slice(dra.resource_slice("n1"))
    fresh.claims.book.upsert_class(dra.device_class())
    for i in range(2):
        fresh.claims.book.upsert_claim(claims.add(dra.claim(f"p{i}-gpus", NS, 4)))
        body = dra.pod(f"p{i}", NS, template="gpus")
        body["metadata"]["uid"] = f"uid-p{i}"
        body["status"] = {
            "resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": f"p{i}-gpus"}]
        }
        fresh.state.upsert_pod(body)
    await run_cycle(fresh)
    allocated = {
        key: {r["device"] for r in c["status"]["allocation"]["devices"]["results"]}
        for key, c in claims.claims.items()
        if (c.get("status") or {}).get("allocation")
    }
    assert len(allocated) == 2, allocated  # the old claim and one new: 8 GPUs, no more
    first, second = allocated.values()
    assert not first & second


def _extended_world(*, plugin_node: bool = False) -> tuple[Scheduler, LoggingApi, FakeClaims]:
    """n1 publishes its GPUs through DRA and its class also serves nvidia.com/gpu (KEP-5004);
    ``plugin_node``: p1, the same machine with device-plugin GPUs, besides."""
    scheduler, api, claims = _world(gang=0)
    scheduler.claims.book.upsert_class(dra.device_class(extended="nvidia.com/gpu"))
    if plugin_node:
        scheduler.state.upsert_node(dra.node("p1", plugin_gpus=8))
    return scheduler, api, claims


def _gpu_pod(scheduler: Scheduler, name: str, gpus: int) -> None:
    body = dra.pod(name, NS, gpus=gpus)
    body["metadata"].update(uid=f"uid-{name}", creationTimestamp="2026-12-01T10:00:00Z")
    scheduler.state.upsert_pod(body)


@pytest.mark.asyncio
async def test_nvidia_gpu_backed_by_a_device_class_gets_the_claim_kube_scheduler_creates() -> None:
    scheduler, api, claims = _extended_world()
    _gpu_pod(scheduler, "plain", 4)
    await run_cycle(scheduler)
    assert len(claims.claims) == 1, claims.claims
    key, claim = next(iter(claims.claims.items()))
    assert [e[0] for e in api.log] == ["create", "finalizers", "status", "pod-status", "bind"]
    assert claim["metadata"]["generateName"] == "plain-extended-resources-"
    assert claim["metadata"]["annotations"] == {
        "resource.kubernetes.io/extended-resource-claim": "true"
    }
    assert claim["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "plain", "uid": "uid-plain", "controller": True}
    ]
    # One request for the one container; 2: nvidia.com/gpu's place among cpu, memory, GPUs.
    assert claim["spec"] == {
        "devices": {
            "requests": [
                {
                    "name": "container-0-request-2",
                    "exactly": {
                        "deviceClassName": "gpu.nvidia.com",
                        "allocationMode": "ExactCount",
                        "count": 4,
                    },
                }
            ]
        }
    }
    status = claim["status"]
    assert status["reservedFor"] == [{"resource": "pods", "name": "plain", "uid": "uid-plain"}]
    results = status["allocation"]["devices"]["results"]
    assert {r["request"] for r in results} == {"container-0-request-2"}
    allocated = sorted(dra.index_of_device(r["device"]) for r in results)
    snapshot = cluster(nodes=[parse_node(dra.node("n1", plugin_gpus=8))])
    want = schedule(snapshot, [gpu_request("ml/plain", gpus=4)], [], Policy()).bindings[0].gpus
    assert allocated == sorted(want)
    assert claims.pod_statuses == [
        (
            f"{NS}/plain",
            {
                "extendedResourceClaimStatus": {
                    "requestMappings": [
                        {
                            "containerName": "main",
                            "resourceName": "nvidia.com/gpu",
                            "requestName": "container-0-request-2",
                        }
                    ],
                    "resourceClaimName": key.split("/", 1)[1],
                }
            },
        )
    ]


@pytest.mark.asyncio
async def test_on_a_device_plugin_node_the_same_pod_is_bound_without_a_claim() -> None:
    scheduler, api, claims = _extended_world(plugin_node=True)
    _gpu_pod(scheduler, "first", 8)
    _gpu_pod(scheduler, "second", 8)
    await run_cycle(scheduler)
    nodes = {key: node for key, node, _ in api.binds}
    assert sorted(nodes.values()) == ["n1", "p1"], api.binds
    on_dra = next(key for key, node in nodes.items() if node == "n1")
    (claim,) = claims.claims.values()
    assert [r["name"] for r in claim["status"]["reservedFor"]] == [on_dra.split("/")[1]]
    assert [pod for pod, _ in claims.pod_statuses] == [on_dra]


@pytest.mark.asyncio
async def test_a_refused_allocation_deletes_the_claim_made_for_extended_resources() -> None:
    scheduler, api, claims = _extended_world()
    _gpu_pod(scheduler, "plain", 2)
    original = claims.update_claim_status

    async def refuse_allocations(
        body: Mapping[str, Any], fence: Fence | None = None
    ) -> dict[str, Any]:
        if (body.get("status") or {}).get("allocation"):
            claims.log.append(("refused", body["metadata"]["name"]))
            raise ApiError(422, "allocation refused")
        return await original(body, fence)

    claims.update_claim_status = refuse_allocations  # type: ignore[method-assign]
    await run_cycle(scheduler)
    assert api.binds == []
    assert claims.claims == {}
    assert [e[0] for e in api.log] == ["create", "finalizers", "refused", "finalizers", "delete"]
    assert scheduler.claims.writes == {}
    assert scheduler.claims.named == {}
    assert scheduler.state.ledger.reservations == {}


@pytest.mark.asyncio
async def test_a_claim_left_by_an_attempt_that_never_bound_is_deleted_then_made_afresh() -> None:
    scheduler, api, claims = _extended_world()
    _gpu_pod(scheduler, "plain", 2)
    await run_cycle(scheduler)
    # A new replica finds the claim allocated and the pod unbound (the bind never landed).
    (left,) = claims.claims
    fresh = build_scheduler(
        load_config({"operator": {"batchWindowSeconds": 0}}),
        ClusterState(),
        api,
        claims=claims,
        clock=Clock(),
    )
    fresh.state.upsert_node(dra.node("n1"))
    await fresh.claims.resync()
    fresh.claims.book.upsert_slice(dra.resource_slice("n1"))
    fresh.claims.book.upsert_class(dra.device_class(extended="nvidia.com/gpu"))
    _gpu_pod(fresh, "plain", 2)
    api.binds.clear()
    await run_cycle(fresh)
    assert left not in claims.claims
    await run_cycle(fresh)
    (made,) = claims.claims
    assert made != left
    assert [key for key, _, _ in api.binds] == [f"{NS}/plain"]


@pytest.mark.asyncio
async def test_a_fence_that_turns_false_between_claim_writes_stops_every_later_write() -> None:
    api = LoggingApi()
    claims = FakeClaims(api.log)
    leading = [True]
    config = load_config({"operator": {"batchWindowSeconds": 0, "initialBackoffSeconds": 1}})
    scheduler = build_scheduler(
        config, ClusterState(), api, claims=claims, clock=Clock(), leading=lambda: leading[0]
    )
    await scheduler.take_leadership(_noop_list())
    fill(scheduler, claims, gang=2, gpus=4)
    original = claims.update_claim_status

    async def lose_the_lease_after(
        body: Mapping[str, Any], fence: Fence | None = None
    ) -> dict[str, Any]:
        written = await original(body, fence)
        leading[0] = False  # the renew deadline passes right after this write
        return written

    claims.update_claim_status = lose_the_lease_after  # type: ignore[method-assign]
    await run_cycle(scheduler)
    written = [e for e in api.log if e[0] != "fenced"]
    assert [e[0] for e in written].count("status") == 1, api.log
    assert "bind" not in [e[0] for e in written]
    first_fenced = next(i for i, e in enumerate(api.log) if e[0] == "fenced")
    assert all(e[0] == "fenced" for e in api.log[first_fenced:]), api.log
    assert api.binds == []
    # The next leader lists the claims: the one allocated for a pod never bound is given
    # back, and the gang is placed afresh with no device held twice.
    claims.update_claim_status = original  # type: ignore[method-assign]
    fresh = build_scheduler(config, ClusterState(), api, claims=claims, clock=Clock())
    await fresh.claims.resync()
    fill(fresh, claims, gang=2, gpus=4, add_claims=False)
    for _ in range(3):
        await run_cycle(fresh)
    assert sorted(key for key, _, _ in api.binds) == [f"{NS}/w0", f"{NS}/w1"]
    held = [
        (d["pool"], d["device"])
        for c in claims.claims.values()
        for d in c["status"]["allocation"]["devices"]["results"]
    ]
    assert len(held) == len(set(held)) == 8
    for i in range(2):
        reserved = claims.claims[f"{NS}/w{i}-gpus"]["status"]["reservedFor"]
        assert reserved == [{"resource": "pods", "name": f"w{i}", "uid": f"uid-w{i}"}]


async def _noop_list() -> AsyncIterator[Listing]:
    yield Listing([])


# ----- shared claims ----------------------------------------------------------------------------
#
#   n1 and n2: 8 DRA GPUs each. "shared" is one ResourceClaim (not from a template) that
#   several pods name in spec.resourceClaims.


def _shared_world(
    count: int = 2, clock: Clock | None = None
) -> tuple[Scheduler, LoggingApi, FakeClaims]:
    scheduler, api, claims = _world(gang=0, clock=clock)
    scheduler.state.upsert_node(dra.node("n2"))
    scheduler.claims.book.upsert_slice(dra.resource_slice("n2"))
    scheduler.claims.book.upsert_claim(claims.add(dra.claim("shared", NS, count)))
    return scheduler, api, claims


def _sharing_pod(
    scheduler: Scheduler,
    claims: FakeClaims,
    name: str,
    own: int = 0,
    group: str | None = None,
) -> None:
    """A pod on claim "shared", and (``own``) a claim of its own of that many GPUs."""
    body = dra.pod(name, NS, claim_name="shared", group=group)
    body["metadata"].update(uid=f"uid-{name}", creationTimestamp="2026-12-01T10:00:00Z")
    if own:
        scheduler.claims.book.upsert_claim(claims.add(dra.claim(f"{name}-own", NS, own)))
        body["spec"]["resourceClaims"].append({"name": "own", "resourceClaimName": f"{name}-own"})
    scheduler.state.upsert_pod(body)


def _allocated_node(claim: Mapping[str, Any]) -> str:
    terms = claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"]
    (node,) = terms[0]["matchFields"][0]["values"]
    return str(node)


@pytest.mark.asyncio
async def test_a_second_pod_on_an_allocated_shared_claim_is_only_added_to_its_reserved_for() -> (
    None
):
    clock = Clock()
    scheduler, api, claims = _shared_world(clock=clock)
    _sharing_pod(scheduler, claims, "first")
    _sharing_pod(scheduler, claims, "second")
    await run_cycle(scheduler)
    # Both were placed; the first bind's claim write goes out first, and the second is
    # refused (as kube-scheduler's in-flight allocations refuse it) to join next time.
    assert [key for key, _, _ in api.binds] == [f"{NS}/first"]
    messages = [e["message"] for e in api.events if e["involvedObject"]["name"] == "second"]
    assert any(
        "ResourceClaim ml/shared (shared) is being allocated for ml/first" in m for m in messages
    ), messages
    shared = claims.claims[f"{NS}/shared"]
    devices = shared["status"]["allocation"]["devices"]["results"]
    api.log.clear()
    clock.now += 1.0  # the shortest backoff
    await run_cycle(scheduler)
    shared = claims.claims[f"{NS}/shared"]
    assert [e[0] for e in api.log] == ["status", "bind"], api.log
    assert shared["status"]["allocation"]["devices"]["results"] == devices
    assert [r["name"] for r in shared["status"]["reservedFor"]] == ["first", "second"]
    nodes = {key: node for key, node, _ in api.binds}
    assert nodes[f"{NS}/second"] == nodes[f"{NS}/first"] == _allocated_node(shared)


@pytest.mark.asyncio
async def test_a_pod_joining_a_shared_claim_goes_only_to_its_node_or_nowhere() -> None:
    scheduler, api, claims = _shared_world(count=2)
    _sharing_pod(scheduler, claims, "first")
    await run_cycle(scheduler)
    node = _allocated_node(claims.claims[f"{NS}/shared"])
    # 6 GPUs are left on the claim's node and 8 on the other: 8 of its own fit only there.
    _sharing_pod(scheduler, claims, "big", own=8)
    _sharing_pod(scheduler, claims, "small", own=2)
    api.log.clear()
    await run_cycle(scheduler)
    nodes = {key: n for key, n, _ in api.binds}
    assert f"{NS}/big" not in nodes
    assert nodes[f"{NS}/small"] == node
    own = claims.claims[f"{NS}/small-own"]["status"]["allocation"]["devices"]["results"]
    shared = claims.claims[f"{NS}/shared"]["status"]["allocation"]["devices"]["results"]
    assert not {r["device"] for r in own} & {r["device"] for r in shared}
    assert "allocation" not in claims.claims[f"{NS}/big-own"].get("status", {})
    other = "n2" if node == "n1" else "n1"
    messages = [e["message"] for e in api.events if e["involvedObject"]["name"] == "big"]
    want = f"its shared ResourceClaim {NS}/shared is allocated on another node: {other}"
    assert any(want in m for m in messages), messages


@pytest.mark.asyncio
async def test_pods_of_one_gang_on_one_unallocated_shared_claim_get_a_reason() -> None:
    scheduler, api, claims = _shared_world()
    group = dra.pod_group("pair", NS, 2)
    group["metadata"].update(uid="uid-pair", generation=1)
    scheduler.state.upsert_group(GroupKind.POD_GROUP, group)
    _sharing_pod(scheduler, claims, "a", group="pair")
    _sharing_pod(scheduler, claims, "b", group="pair")
    await run_cycle(scheduler)
    assert api.binds == []
    assert "allocation" not in claims.claims[f"{NS}/shared"].get("status", {})
    messages = [e["message"] for e in api.events if e["reason"] == "FailedScheduling"]
    assert any("is shared with ml/a of the same gang" in m for m in messages), messages


@pytest.mark.asyncio
async def test_the_quality_gauges_count_dra_gpus_and_what_claims_hold() -> None:
    # n1's 8 GPUs exist only as devices; a claim holds 4 of them.
    scheduler, api, _ = _world(gang=1, gpus=4)
    await run_cycle(scheduler)
    assert len(api.binds) == 1
    scheduler.loop.decider.measure_quality(now=1e9)
    cluster_labels = {"level": "cluster", "domain": "cluster"}
    assert REGISTRY.get_sample_value("gpusched_domain_gpus", cluster_labels) == 8
    assert REGISTRY.get_sample_value("gpusched_domain_free_gpus", cluster_labels) == 4


@pytest.mark.asyncio
async def test_a_pod_asking_nvidia_gpu_besides_claims_gets_a_reason_not_a_guess() -> None:
    scheduler, api, claims = _world(gang=0)
    scheduler.claims.book.upsert_claim(claims.add(dra.claim("both-gpus", NS, 2)))
    body = dra.pod("both", NS, claim_name="both-gpus", gpus=1)
    body["metadata"]["uid"] = "uid-both"
    scheduler.state.upsert_pod(body)
    await run_cycle(scheduler)
    assert api.binds == []
    assert "allocation" not in claims.claims[f"{NS}/both-gpus"].get("status", {})
    messages = [e["message"] for e in api.events if e["reason"] == "FailedScheduling"]
    assert any("asks for nvidia.com/gpu besides ResourceClaims" in m for m in messages), messages


@pytest.mark.asyncio
async def test_a_claims_devices_are_held_for_the_pods_it_is_reserved_for() -> None:
    # What preemption reads: the claim's holding is no pod; evicting both its pods frees it.
    clock = Clock()
    scheduler, _, claims = _shared_world(clock=clock)
    _sharing_pod(scheduler, claims, "first")
    _sharing_pod(scheduler, claims, "second")
    await run_cycle(scheduler)
    clock.now += 1.0  # the shortest backoff: the second joins the claim now
    await run_cycle(scheduler)
    scheduler.claims.book.upsert_claim(claims.claims[f"{NS}/shared"])
    _, held, _ = scheduler.claims.view.cluster(
        scheduler.state.nodes, scheduler.state.bound(), scheduler.claims.busy
    )
    by_key = {h.pod.key: h.pod.reserved_for for h in held}
    assert by_key[f"ResourceClaim {NS}/shared"] == (f"{NS}/first", f"{NS}/second")


@pytest.mark.asyncio
async def test_a_dra_node_is_not_warned_about_and_a_real_mismatch_warns_once() -> None:
    # A DRA node advertises no nvidia.com/gpu: judged by its slices, it is fine, whichever
    # watch speaks first. A device whose UUID is not in its topology warns once per change.
    api = LoggingApi()
    claims = FakeClaims(api.log)
    scheduler = build_scheduler(load_config({}), ClusterState(), api, claims=claims, clock=Clock())
    scheduler.node_changed(dra.node("n1"))
    scheduler.slice_changed(dra.resource_slice("n1"))
    scheduler.node_changed(dra.node("n1"))
    await run_cycle(scheduler)

    def warnings() -> list[str]:
        return [e["message"] for e in api.events if e["reason"] == "GPUTopologyMismatch"]

    assert warnings() == []
    wrong = dra.resource_slice("n1", replace={3: "GPU-elsewhere"})
    scheduler.slice_changed(wrong)
    scheduler.slice_changed(wrong)
    scheduler.node_changed(dra.node("n1"))
    await run_cycle(scheduler)
    (message,) = warnings()
    assert "device gpu-3 (uuid GPU-elsewhere) matches no GPU" in message, message


@pytest.mark.asyncio
async def test_claims_sharing_devices_by_memory_are_written_each_on_a_device_with_room() -> None:
    """Two shared devices of 81559Mi and a gang of two claims of 50000Mi: the node's total
    holds both, and the writes, checked against each other, put them on different devices
    with what each consumes and a share ID each."""
    api = LoggingApi()
    claims = FakeClaims(api.log)
    config = load_config({"operator": {"batchWindowSeconds": 0, "initialBackoffSeconds": 1}})
    scheduler = build_scheduler(config, ClusterState(), api, claims=claims, clock=Clock())
    fill(scheduler, claims, 2, 1, add_claims=False)
    scheduler.claims.book.upsert_slice(dra.resource_slice("n1", shared=(0, 1), generation=2))
    for i in range(2):
        claim = dra.claim(f"w{i}-gpus", NS, 1, memory="50000Mi")
        scheduler.claims.book.upsert_claim(claims.add(claim))
    await run_cycle(scheduler)
    assert [e[0] for e in api.log].count("bind") == 2, api.log
    results = [
        r for c in claims.claims.values() for r in c["status"]["allocation"]["devices"]["results"]
    ]
    assert sorted(dra.index_of_device(r["device"]) for r in results) == [0, 1], results
    assert {r["consumedCapacity"]["memory"] for r in results} == {"50000Mi"}, results
    assert len({r["shareID"] for r in results}) == 2, results

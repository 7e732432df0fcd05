"""The scheduling service allocating ResourceClaims, against fakes that keep the order of
every write: finalizer, then allocation with reservedFor, then the bind; a gang all or nothing;
the ledger read from claims. The same stories run on the real control plane in
tests/integration/test_dra.py; these add exact control of failures."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from gpusched.api.config import load_config
from gpusched.api.k8s import parse_node
from gpusched.engine.groups import GroupKind
from gpusched.engine.schedule import schedule
from gpusched.scheduler.factory import build_scheduler
from gpusched.scheduler.ports import ApiError, Fence, ObjectRef
from gpusched.scheduler.service import Scheduler
from gpusched.scheduler.state import ClusterState
from tests.support import dra
from tests.support.engine import cluster
from tests.support.engine import pod as gpu_request
from tests.support.fakes import FakeApi
from tests.unit.scheduler.test_scheduler_service import run_cycle

NS = "ml"


@dataclass
class FakeClaims:
    """ResourceClaims with resourceVersions, as the API server keeps them."""

    log: list[tuple[str, ...]]
    claims: dict[str, dict[str, Any]] = field(default_factory=dict)
    refuse_status: dict[str, ApiError] = field(default_factory=dict)
    version: int = 1

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

    async def update_claim(self, body: Mapping[str, Any]) -> dict[str, Any]:
        key = f"{body['metadata']['namespace']}/{body['metadata']['name']}"
        self.log.append(("finalizers", key, *body["metadata"].get("finalizers", [])))
        return self._put(body, "metadata")

    async def update_claim_status(self, body: Mapping[str, Any]) -> dict[str, Any]:
        key = f"{body['metadata']['namespace']}/{body['metadata']['name']}"
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


def _world(gang: int = 2, gpus: int = 2) -> tuple[Scheduler, LoggingApi, FakeClaims]:
    api = LoggingApi()
    claims = FakeClaims(api.log)
    config = load_config({"operator": {"batchWindowSeconds": 0, "initialBackoffSeconds": 1}})
    scheduler = build_scheduler(config, ClusterState(), api, claims=claims)
    scheduler.state.upsert_node(dra.node("n1"))
    scheduler.claims.book.upsert_slice(dra.resource_slice("n1"))
    scheduler.claims.book.upsert_class(dra.device_class())
    group = dra.pod_group("train", NS, gang)
    group["metadata"].update(uid="uid-train", generation=1)
    scheduler.state.upsert_group(GroupKind.POD_GROUP, group)
    for i in range(gang):
        body = claims.add(dra.claim(f"w{i}-gpus", NS, gpus))
        scheduler.claims.book.upsert_claim(body)
        pod = dra.pod(f"w{i}", NS, template="gpus", group="train")
        pod["metadata"].update(uid=f"uid-w{i}", creationTimestamp="2026-12-01T10:00:00Z")
        pod["status"] = {
            "resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": f"w{i}-gpus"}]
        }
        scheduler.state.upsert_pod(pod)
    return scheduler, api, claims


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
    assert scheduler.state.reservations == {}
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
    want = schedule(snapshot, [gpu_request("ml/w0", gpus=4)], []).bindings[0].gpus
    assert tuple(allocated) == tuple(sorted(want))


@pytest.mark.asyncio
async def test_claims_hold_their_devices_after_a_restart_even_when_their_pod_is_gone() -> None:
    scheduler, _, claims = _world(gang=1, gpus=4)
    await run_cycle(scheduler)
    # A new replica: it knows only what it lists. The pod is gone; its claim still allocated.
    api2 = LoggingApi()
    fresh = build_scheduler(
        load_config({"operator": {"batchWindowSeconds": 0}}), ClusterState(), api2, claims=claims
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


@pytest.mark.asyncio
async def test_nvidia_gpu_backed_by_a_device_class_is_refused_with_a_reason_not_guessed() -> None:
    # KEP-5004: the class serves nvidia.com/gpu on DRA nodes. gpusched does not create the
    # claim kube-scheduler would; the pod is kept off DRA nodes and told why.
    scheduler, api, _ = _world(gang=0)
    scheduler.claims.book.upsert_class(dra.device_class(extended="nvidia.com/gpu"))
    body = dra.pod("plain", NS, gpus=2)
    body["metadata"]["uid"] = "uid-plain"
    scheduler.state.upsert_pod(body)
    await run_cycle(scheduler)
    assert api.binds == []
    messages = [e["message"] for e in api.events if e["reason"] == "FailedScheduling"]
    assert any(
        "DRA nodes serve nvidia.com/gpu through DeviceClass gpu.nvidia.com" in m for m in messages
    ), messages

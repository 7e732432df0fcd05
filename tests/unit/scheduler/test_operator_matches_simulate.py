"""One decider: the same objects through the operator's path (the scheduling service, with the
fakes the DRA tests use for the API server) and through ``simulate`` decide the same: the
same bindings and GPUs, the same devices in every claim, the same reasons for pods left
pending, the same victims. Stories: DRA pods, a budget-protected victim, other schedulers'
pods."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from gpusched.api.config import load_config
from gpusched.engine.groups import GroupKind
from gpusched.engine.result import Reason
from gpusched.inputs.objects import from_documents
from gpusched.offline.simulate import simulate
from gpusched.scheduler.factory import build_scheduler
from gpusched.scheduler.state import ClusterState
from tests.support import dra, manifests
from tests.support.clock import Clock
from tests.unit.scheduler.test_dra_scheduler import FakeClaims, LoggingApi
from tests.unit.scheduler.test_scheduler_service import run_cycle

NS = "ml"
CONFIG = {"operator": {"batchWindowSeconds": 0, "initialBackoffSeconds": 1}}


@dataclass
class Outcome:
    bindings: dict[str, tuple[str, tuple[int, ...]]] = field(default_factory=dict)
    """Pod → node, GPUs (``gpusched.io/gpus``; none for a pod whose claims carry them)."""
    devices: dict[str, list[tuple[str, str, str, str]]] = field(default_factory=dict)
    """Claim → (request, driver, pool, device) of each device it was given."""
    reasons: dict[str, str] = field(default_factory=dict)
    """Pod left pending (not only waiting) → why."""
    victims: list[str] = field(default_factory=list)


async def through_the_operator(documents: list[dict[str, Any]]) -> Outcome:
    api = LoggingApi()
    claims = FakeClaims(api.log)
    scheduler = build_scheduler(
        load_config(CONFIG), ClusterState(), api, claims=claims, clock=Clock()
    )
    for body in documents:
        kind = body["kind"]
        if kind == "Node":
            scheduler.node_changed(body)
        elif kind == "Pod":
            scheduler.pod_changed(body)
        elif kind == "ResourceSlice":
            scheduler.slice_changed(body)
        elif kind == "DeviceClass":
            scheduler.device_class_changed(body)
        elif kind == "ResourceClaim":
            scheduler.claim_changed(claims.add(body))
        elif kind == "PodDisruptionBudget":
            scheduler.budget_changed(body)
        elif kind == "PodGroup":
            scheduler.group_changed(GroupKind.POD_GROUP, body)
    await run_cycle(scheduler)
    found = Outcome()
    for pod, node, written in api.binds:
        gpus = written.get(manifests.GPUS, "")
        found.bindings[pod] = (node, tuple(int(g) for g in gpus.split(",") if g))
    for key, claim in claims.claims.items():
        allocation = (claim.get("status") or {}).get("allocation")
        if allocation is not None:
            found.devices[key] = [
                (r["request"], r["driver"], r["pool"], r["device"])
                for r in allocation["devices"]["results"]
            ]
    for event in api.events:
        if event["reason"] == "FailedScheduling":
            involved = event["involvedObject"]
            if involved["kind"] == "Pod":
                found.reasons[f"{involved['namespace']}/{involved['name']}"] = event["message"]
    found.victims = sorted(api.evictions + api.deleted)
    return found


def through_simulate(documents: list[dict[str, Any]]) -> Outcome:
    run = simulate(from_documents(documents), load_config(CONFIG))
    found = Outcome()
    for binding in run.result.bindings:
        # A DRA pod's GPUs are its claims' devices (compared below); the operator writes no
        # gpusched.io/gpus for it.
        gpus = () if binding.devices else binding.gpus
        found.bindings[binding.pod] = (binding.node, gpus)
        for claim in binding.devices:
            found.devices[claim.claim] = [
                (d.request, d.driver, d.pool, d.device) for d in claim.devices
            ]
    for failure in run.result.unschedulable:
        if failure.reason is not Reason.WAITING_FOR_PODS:
            found.reasons[failure.pod] = failure.message
    found.victims = sorted(v.pod for plan in run.preemptions for v in plan.victims)
    return found


def claim_pod(name: str, count: int, **claim_args: Any) -> list[dict[str, Any]]:
    """A pod of ours with its claim ``<name>-gpus`` (made already, as the controller makes it)."""
    made = dra.claim(f"{name}-gpus", NS, count, **claim_args)
    body = dra.pod(name, NS, template="gpus")
    body["metadata"].update(uid=f"uid-{name}", creationTimestamp="2026-12-01T10:00:00Z")
    body["status"] = {
        "resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": made["metadata"]["name"]}]
    }
    return [made, body]


def plain_pod(name: str, gpus: int, **kwargs: Any) -> dict[str, Any]:
    priority = kwargs.pop("priority", 0)
    labels = kwargs.pop("labels", {})
    body = manifests.pod(name, gpus, uid=f"uid-{name}", **kwargs)
    body["spec"]["priority"] = priority
    body["metadata"].setdefault("labels", {}).update(labels)
    return body


def dra_story() -> list[dict[str, Any]]:
    """Two DRA nodes of 8; pods asking 6, 4, 3 and 2 GPUs by claims, one whose selector no
    device of any node passes, and one asking nvidia.com/gpu, which no DRA node advertises."""
    documents: list[dict[str, Any]] = [
        dra.node("n1"),
        dra.node("n2"),
        dra.resource_slice("n1"),
        dra.resource_slice("n2"),
        dra.device_class(),
    ]
    for name, count in (("big", 6), ("mid", 4), ("three", 3), ("two", 2)):
        documents += claim_pod(name, count)
    documents += claim_pod(
        "picky", 1, selectors=("device.attributes['gpu.nvidia.com'].productName == 'A100'",)
    )
    plain = dra.pod("plain", NS, gpus=1)
    plain["metadata"]["uid"] = "uid-plain"
    documents.append(plain)
    return documents


def budget_story() -> list[dict[str, Any]]:
    """One node of 8 held by two low-priority pods of 4; the younger is under a budget that
    allows no disruption; an urgent pod asks for 4."""
    return [
        manifests.node("n1"),
        plain_pod("old", 4, node="n1", at=[0, 1, 2, 3], created="2026-12-01T08:00:00Z"),
        plain_pod(
            "young",
            4,
            node="n1",
            at=[4, 5, 6, 7],
            created="2026-12-01T09:00:00Z",
            labels={"app": "serving"},
        ),
        plain_pod("urgent", 4, priority=100, created="2026-12-01T10:00:00Z"),
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "serving", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "serving"}}},
            "status": {"disruptionsAllowed": 0},
        },
    ]


def foreign_story() -> list[dict[str, Any]]:
    """Other schedulers' pods hold GPUs without naming them: two on n1 beside ours on 6 and
    7, all eight of n2. Ours ask 4 (fits n1 only, on 0-3) and 2 (nowhere left)."""
    return [
        manifests.node("n1"),
        manifests.node("n2"),
        plain_pod("a-foreign", 2, node="n1", scheduler="default-scheduler"),
        plain_pod("b-ours", 2, node="n1", at=[6, 7]),
        plain_pod("c-foreign", 8, node="n2", scheduler="default-scheduler"),
        plain_pod("four", 4, created="2026-12-01T10:00:00Z"),
        plain_pod("two", 2, created="2026-12-01T10:00:01Z"),
    ]


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("story", "documents"),
    [("dra", dra_story()), ("budget", budget_story()), ("foreign", foreign_story())],
)
async def test_the_operator_and_simulate_decide_the_same(
    story: str, documents: list[dict[str, Any]]
) -> None:
    operator = await through_the_operator(documents)
    offline = through_simulate(documents)
    assert operator.bindings == offline.bindings, story
    assert operator.devices == offline.devices, story
    assert operator.reasons == offline.reasons, story
    assert operator.victims == offline.victims, story


@pytest.mark.asyncio
async def test_the_stories_decide_what_they_are_about() -> None:
    # The comparison above would pass if both sides placed nothing: each story's point, once.
    placed = await through_the_operator(dra_story())
    assert sorted(placed.bindings) == [f"{NS}/big", f"{NS}/mid", f"{NS}/three", f"{NS}/two"]
    assert sum(len(d) for d in placed.devices.values()) == 15
    assert "not every device passes the claims' selector" in placed.reasons[f"{NS}/picky"]
    assert "its GPUs are gpu.nvidia.com devices" in placed.reasons[f"{NS}/plain"]
    budget = await through_the_operator(budget_story())
    assert budget.victims == ["default/old"]
    foreign = await through_the_operator(foreign_story())
    assert foreign.bindings == {"default/four": ("n1", (0, 1, 2, 3))}
    assert "default/two" in foreign.reasons

"""Refusals back off, on the real control plane: a ValidatingAdmissionPolicy answers 422 to
every ResourceClaim allocation (or every Binding) of namespace ``ml``, and the scheduling
service (the operator's collaborators, built as the operator builds them, on a virtual clock)
tries the gang again 1, 2, 4, 8, 8 … virtual seconds apart, never binding a pod, logging the
server's refusal once. The attempts are counted from the requests that reached the server."""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

from gpusched.api.config import load_config
from gpusched.k8s.claims import KubeClaimApi
from gpusched.k8s.client import KubeClusterApi, api_client
from gpusched.scheduler.factory import build_scheduler
from gpusched.scheduler.state import ClusterState
from testing import dra
from testing.apiserver import ApiClient, wait_for
from testing.clock import Clock
from testing.cluster.cluster import RealCluster
from testing.harness import pods
from tests.integration.test_dra import NS, RESOURCE, _claims, _gang, dra_nodes  # noqa: F401

pytestmark = pytest.mark.usefixtures("real_cluster")

ADMISSION = "/apis/admissionregistration.k8s.io/v1"
STEP = 0.25
"""Virtual seconds between cycles, far below every delay."""
SECONDS = 30.0
PROBE = "gpusched-test/probe"

POLICIES = {
    "claims": (
        [{"apiGroups": [RESOURCE], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"],
          "resources": ["resourceclaims", "resourceclaims/status"]}],
        "!has(request.subResource) || request.subResource != 'status' "
        "|| !has(object.status.allocation)",
        "denied by policy no-gpus",
    ),
    "binds": (
        [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
          "resources": ["pods", "pods/binding"]}],
        "!has(request.subResource) || request.subResource != 'binding'",
        "binding denied by policy no-binds",
    ),
}  # fmt: skip


def _policy(name: str, which: str) -> tuple[dict[str, Any], dict[str, Any]]:
    rules, expression, message = POLICIES[which]
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": rules},
            "validations": [
                {"expression": expression, "message": message},
                {  # lets the test see when the policy is in force
                    "expression": f"!has(object.metadata.labels) || !('{PROBE}' in "
                    "object.metadata.labels)",
                    "message": "probe refused",
                },
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NS}}
            },
        },
    }
    return policy, binding


def _probe(which: str) -> tuple[str, dict[str, Any]]:
    """An object the policy refuses once it is in force (and is never created otherwise)."""
    labels = {PROBE: "1"}
    if which == "claims":
        body = {"metadata": {"generateName": "probe-", "labels": labels}, "spec": {}}
        return f"/apis/{RESOURCE}/v1/namespaces/{NS}/resourceclaims", body
    container = {"name": "c", "image": "busybox"}
    body = {"metadata": {"generateName": "probe-", "labels": labels},
            "spec": {"containers": [container]}}  # fmt: skip
    return f"/api/v1/namespaces/{NS}/pods", body


@contextlib.contextmanager
def refusing(api: ApiClient, which: str) -> Iterator[str]:
    """The policy, in force: yields the message it answers with; deleted afterwards."""
    name = f"gpusched-test-no-{which}"
    policy, binding = _policy(name, which)
    for plural, body in (
        ("validatingadmissionpolicies", policy),
        ("validatingadmissionpolicybindings", binding),
    ):
        api.request("POST", f"{ADMISSION}/{plural}", json=body).raise_for_status()
    try:
        path, probe = _probe(which)
        answers: list[str] = []

        def in_force() -> bool:
            answers.append(api.request("POST", f"{path}?dryRun=All", json=probe).text)
            return "probe refused" in answers[-1]

        wait_for(in_force, timeout=60, message=lambda: f"the policy {name} in force: {answers[-1]}")
        yield POLICIES[which][2]
    finally:
        for plural in ("validatingadmissionpolicybindings", "validatingadmissionpolicies"):
            api.request("DELETE", f"{ADMISSION}/{plural}/{name}")


def _attempt(which: str, request: Any) -> bool:
    if which == "claims":
        return bool(request.method == "PUT" and "/resourceclaims/" in request.path) and (
            request.path.split("?")[0].endswith("/status")
        )
    return bool(request.method == "POST" and request.path.split("?")[0].endswith("/binding"))


@pytest.mark.parametrize("which", ["claims", "binds"])
@pytest.mark.asyncio
async def test_a_gang_the_admission_policy_refuses_is_tried_again_after_doubling_delays(
    apiserver: RealCluster,
    api: ApiClient,
    kube_configuration: Callable[[], Awaitable[Any]],
    dra_nodes: list[str],  # noqa: F811
    caplog: pytest.LogCaptureFixture,
    which: str,
) -> None:
    caplog.set_level(logging.INFO, logger="gpusched")
    members = _gang(api, f"refused-{which}", 2, 2)
    wait_for(lambda: len(_claims(api)) == 2, message="the resource-claim controller's claims")
    clock = Clock()
    client = KubeClusterApi(api_client(await kube_configuration()))
    config = load_config(
        {"operator": {"batchWindowSeconds": 0, "initialBackoffSeconds": 1, "maxBackoffSeconds": 8}}
    )
    scheduler = build_scheduler(
        config, ClusterState(), client, clock=clock, claims=KubeClaimApi(client)
    )
    attempts: list[float] = []
    with refusing(api, which) as message:
        try:
            await scheduler.take_leadership(client.pages("pods"))
            end = clock.now + SECONDS
            while clock.now < end:
                before = len(apiserver.requests())
                await scheduler.cycle()
                await scheduler.settle()
                if any(_attempt(which, r) for r in apiserver.requests()[before:]):
                    attempts.append(clock.now)
                for body in _claims(api):  # what the claims' watch would tell the operator
                    scheduler.claim_changed(body)
                clock.now += STEP
        finally:
            await client.close()
    gaps = [round(b - a, 2) for a, b in itertools.pairwise(attempts)]
    assert gaps == [1.0, 2.0, 4.0, 8.0, 8.0], attempts
    bound = [k for k, p in pods(api, NS).items() if p["spec"].get("nodeName")]
    assert bound == [], f"{bound} bound while every {which} write was refused ({members})"
    for claim in _claims(api):
        assert not (claim.get("status") or {}).get("allocation"), claim
    info = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    refusals = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(refusals) == 1, refusals
    assert message in refusals[0], refusals
    assert not [m for m in info if "Scheduled" in m], info


@pytest.mark.asyncio
async def test_another_group_is_not_re_evaluated_on_a_refused_gangs_cadence(
    apiserver: RealCluster,
    api: ApiClient,
    kube_configuration: Callable[[], Awaitable[Any]],
    dra_nodes: list[str],  # noqa: F811
) -> None:
    """A pod that never fits (12 GPUs, nodes of 8) beside a gang whose claim writes the policy
    refuses: each refused attempt gives its room back, and that room is no news to the pod
    (it was free when the pod failed), so the pod keeps its own doubling."""
    _gang(api, "refused", 2, 2)
    api.create(dra.claim("big", NS, 12))
    big = api.create(dra.pod("big", NS, claim_name="big"))
    wait_for(lambda: len(_claims(api)) == 3, message="the gang's claims and the big one")
    clock = Clock()
    client = KubeClusterApi(api_client(await kube_configuration()))
    config = load_config(
        {"operator": {"batchWindowSeconds": 0, "initialBackoffSeconds": 1, "maxBackoffSeconds": 8}}
    )
    scheduler = build_scheduler(
        config, ClusterState(), client, clock=clock, claims=KubeClaimApi(client)
    )
    key = f"{NS}/{big['metadata']['name']}"
    tried: list[float] = []
    gang: list[float] = []
    with refusing(api, "claims"):
        try:
            await scheduler.take_leadership(client.pages("pods"))
            end = clock.now + SECONDS
            while clock.now < end:
                if not scheduler.backoff.backing_off(key, clock.now):
                    tried.append(clock.now)
                before = len(apiserver.requests())
                await scheduler.cycle()
                await scheduler.settle()
                if any(_attempt("claims", r) for r in apiserver.requests()[before:]):
                    gang.append(clock.now)
                for body in _claims(api):
                    scheduler.claim_changed(body)
                clock.now += STEP
        finally:
            await client.close()
    assert [round(b - a, 2) for a, b in itertools.pairwise(gang)] == [1.0, 2.0, 4.0, 8.0, 8.0], gang
    # Its second try comes early once (it failed in the cycle whose decision the gang's
    # refused claims undid, so it may have lacked their room); then its own doubling, never
    # the gang's tries (1, 2, 4, 8, 8 apart, each giving room back).
    gaps = [round(b - a, 2) for a, b in itertools.pairwise(tried)]
    assert gaps == [1.0, 1.0, 4.0, 8.0, 8.0], (tried, gang)
    assert not set(tried[2:]) & set(gang), (tried, gang)

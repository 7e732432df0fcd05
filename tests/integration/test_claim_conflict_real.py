"""A claim conflict on the real control plane, with the operator running: a gang's pod shares
a ResourceClaim with a pod of another scheduler, and that scheduler allocates the claim (for
its pod) between the operator's read of it and its write: the fault proxy lets the other
scheduler's writes land just before the operator's request goes on, so the real
kube-apiserver answers the operator's write 409 Conflict. The operator gives back every claim
of the gang it touched, binds no pod, logs the refusal once, and, although its backoff is
five minutes long, tries again as soon as its watch shows the contested claim changed: the
gang is then placed around the other scheduler's allocation (its pod joins the claim)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from testing import dra
from testing.apiserver import ApiClient, wait_for
from testing.cluster.cluster import RealCluster
from testing.harness import dump, events_for, pods, running_operator
from tests.integration.test_dra import (  # noqa: F401  (dra_nodes: a fixture)
    NS,
    RESOURCE,
    _all_bound,
    _assert_no_device_twice,
    _claim_of,
    _claims,
    _devices,
    _gang,
    dra_nodes,
)

pytestmark = pytest.mark.usefixtures("real_cluster")

LONG = {"operator": {"initialBackoffSeconds": 300, "maxBackoffSeconds": 300}}
"""A delay no test waits out: a retry within the test is the claim's change at work."""
RIVAL_NODE = "dra-2"
RIVAL_MINORS = (0, 1, 2, 3)


def _rival_allocates(api: ApiClient, name: str, pod: dict[str, Any]) -> None:
    """What another scheduler writes: its finalizer, then the allocation, reserved for its
    pod ``pod``."""
    claim = api.get("resourceclaims", name, NS, group=RESOURCE)
    claim["metadata"]["finalizers"] = ["resource.kubernetes.io/delete-protection"]
    claim = api.replace({**claim, "apiVersion": f"{RESOURCE}/v1", "kind": "ResourceClaim"})
    claim["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {
                        "request": "gpus",
                        "driver": dra.DRIVER,
                        "pool": RIVAL_NODE,
                        "device": f"gpu-{m}",
                    }
                    for m in RIVAL_MINORS
                ]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": [RIVAL_NODE]}
                        ]
                    }
                ]
            },
        },
        "reservedFor": [
            {"resource": "pods", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}
        ],
    }
    api.request(
        "PUT",
        f"/apis/{RESOURCE}/v1/namespaces/{NS}/resourceclaims/{name}/status",
        json={**claim, "apiVersion": f"{RESOURCE}/v1", "kind": "ResourceClaim"},
    ).raise_for_status()


def _why(api: ApiClient, members: list[str], caplog: pytest.LogCaptureFixture) -> str:
    claims = {
        c["metadata"]["name"]: (c["metadata"].get("finalizers"), c.get("status"))
        for c in _claims(api)
    }
    events = {m: [e["message"] for e in events_for(api, m, NS)] for m in members}
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    return dump({"claims": claims, "events": events, "log": said[-30:]})


def test_a_claim_another_scheduler_allocates_between_read_and_write_is_refused_once_and_retried_on_its_change(  # noqa: E501
    apiserver: RealCluster,
    api: ApiClient,
    kubeconfig: Path,
    dra_nodes: list[str],  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="gpusched")
    shared = "contest-shared"
    api.create(dra.claim(shared, NS, 4))
    other = dra.pod("elsewhere", NS, claim_name=shared)
    other["spec"]["schedulerName"] = "another-scheduler"  # nobody here runs it
    other = api.create(other)
    api.create(dra.claim_template("contest-gpus", NS, 4))
    api.create(dra.pod_group("contest", NS, 2))
    members = ["contest-0", "contest-1"]
    api.create(dra.pod(members[0], NS, claim_name=shared, group="contest"))
    api.create(dra.pod(members[1], NS, template="contest-gpus", group="contest"))
    wait_for(
        lambda: _claim_of(api, pods(api, NS)[f"{NS}/{members[1]}"]),
        message="the resource-claim controller's claim",
    )
    rule = apiserver.faults.before(
        lambda: _rival_allocates(api, shared, other),
        method="PUT",
        path=rf"/resourceclaims/{shared}(/status)?(\?.*)?$",
    )
    with running_operator(kubeconfig, LONG) as runtime:
        bound = wait_for(
            lambda: _all_bound(api, members),
            timeout=90,
            message=lambda: f"the gang bound after the conflict: {_why(api, members, caplog)}",
        )
        wait_for(lambda: runtime.scheduler.idle, message="no reservation left")
    assert rule.hits == 1, "the other scheduler never came in between"
    refusals = [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and "ResourceClaims were refused" in r.getMessage()
    ]
    assert len(refusals) == 1, refusals
    assert f"ResourceClaim {NS}/{shared}" in refusals[0], refusals
    # Placed around the other scheduler's allocation: the pod sharing the claim where it was
    # allocated, on those devices, reserved for both pods; no device in two claims.
    why = _why(api, members, caplog)
    assert bound[f"{NS}/{members[0]}"]["spec"]["nodeName"] == RIVAL_NODE, why
    claim = api.get("resourceclaims", shared, NS, group=RESOURCE)
    held = _devices(claim)
    assert held == (
        RIVAL_NODE,
        tuple(sorted(dra.index_of_device(f"gpu-{m}") for m in RIVAL_MINORS)),
    )
    reserved = sorted(r["name"] for r in claim["status"]["reservedFor"])
    assert reserved == sorted(["elsewhere", members[0]]), claim
    _assert_no_device_twice(api)
    own = _claim_of(api, bound[f"{NS}/{members[1]}"])
    assert own is not None
    assert [r["name"] for r in own["status"]["reservedFor"]] == [members[1]], own
    binds = [r for r in apiserver.requests() if r.path.split("?")[0].endswith("/binding")]
    assert len(binds) == 2, [r.path for r in binds]

"""Preemption of a ``batch/v1`` Job's pods on the real control plane: a Job without a
``podFailurePolicy`` that ignores ``DisruptionTarget`` gets a Warning Event at preemption (each
preemption would count against its ``backoffLimit``); a Job with the rule gets none.

The pods are made here with the Job as their controller (this control plane runs no Job
controller yet; with one, `make cluster`'s, the Job would also be seen ending ``Complete``
after its pods come back, which is left to that story)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from testing.apiserver import ApiClient, wait_for
from testing.cluster.cluster import RealCluster
from testing.harness import (
    dump,
    events_for,
    gang,
    gpu_node,
    gpu_pod,
    pods,
    running_operator,
)

LOW, HIGH = "visible-job-low", "visible-job-high"
SURVIVES = {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}


@pytest.fixture
def classes(api: ApiClient) -> Iterator[None]:
    for name, value in ((LOW, 10), (HIGH, 1000)):
        if api.get_or_none("priorityclasses", name, group="scheduling.k8s.io") is None:
            api.create(
                {
                    "apiVersion": "scheduling.k8s.io/v1",
                    "kind": "PriorityClass",
                    "metadata": {"name": name},
                    "value": value,
                }
            )
    yield
    for name in (LOW, HIGH):
        api.delete("priorityclasses", name, group="scheduling.k8s.io")


def job(name: str, policy: dict[str, Any] | None) -> dict[str, Any]:
    template = {
        "metadata": {"labels": {"app": name}},
        "spec": {
            "schedulerName": "gpusched",
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "registry.example.com/train:1.0"}],
        },
    }
    # Made with their pods by hand, so managed by "another controller": a real Job controller
    # left running by an earlier test of the session (testing/cluster/fixtures.py) leaves them
    # alone instead of making pods of its own beside these.
    spec: dict[str, Any] = {
        "parallelism": 1,
        "completions": 1,
        "template": template,
        "managedBy": "gpusched.test/by-hand",
    }
    if policy is not None:
        spec["podFailurePolicy"] = policy
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec}


JOBS = "/apis/batch/v1/namespaces/default/jobs"


@pytest.fixture
def jobs(api: ApiClient) -> Iterator[Callable[[dict[str, Any]], None]]:
    """Creates Jobs; deletes them after (the reset between tests knows no Jobs)."""
    made: list[str] = []

    def create(body: dict[str, Any]) -> None:
        api._json(api.request("POST", JOBS, json=body))
        made.append(body["metadata"]["name"])

    yield create
    for name in made:
        api.request("DELETE", f"{JOBS}/{name}", json={"propagationPolicy": "Background"})


def owned_pod(api: ApiClient, job_name: str, name: str) -> dict[str, Any]:
    owner = api._json(api.request("GET", f"{JOBS}/{job_name}"))
    pod = gpu_pod(name, 8)
    pod["spec"]["priorityClassName"] = LOW
    pod["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": job_name,
            "uid": owner["metadata"]["uid"],
            "controller": True,
        }
    ]
    return pod


def test_a_job_that_would_count_a_preemption_as_a_failure_is_warned_and_one_that_ignores_it_is_not(
    apiserver: RealCluster,
    api: ApiClient,
    kubeconfig: Path,
    classes: None,
    jobs: Callable[[dict[str, Any]], None],
) -> None:
    api.create(gpu_node("n1", "zone-a", "rack-1"))
    api.create(gpu_node("n2", "zone-a", "rack-1"))
    jobs(job("plain", None))
    jobs(job("careful", SURVIVES))
    with running_operator(kubeconfig):
        api.create(owned_pod(api, "plain", "plain-0"))
        api.create(owned_pod(api, "careful", "careful-0"))
        wait_for(
            lambda: all(
                pods(api)[f"default/{n}"]["spec"].get("nodeName") for n in ("plain-0", "careful-0")
            ),
            timeout=30,
            message=lambda: f"the Jobs' pods bound: {dump(pods(api))}",
        )
        group = gang("high", 2)
        group["spec"]["priorityClassName"] = HIGH
        api.create(group)
        for i in range(2):
            member = gpu_pod(f"high-{i}", 8, group="high")
            member["spec"]["priorityClassName"] = HIGH
            api.create(member)
        wait_for(
            lambda: [
                e for e in events_for(api, "plain") if e["reason"] == "PreemptedWithoutPolicy"
            ],
            timeout=60,
            message=lambda: f"the Job warned: {events_for(api, 'plain')} {dump(pods(api))}",
        )
        wait_for(lambda: "default/careful-0" not in pods(api), timeout=60, message="both preempted")
    (warning,) = [e for e in events_for(api, "plain") if e["reason"] == "PreemptedWithoutPolicy"]
    assert warning["type"] == "Warning"
    assert warning["involvedObject"]["kind"] == "Job"
    assert "onPodConditions: [{type: DisruptionTarget}]" in warning["message"]
    assert "backoffLimit (6)" in warning["message"]
    assert [e for e in events_for(api, "careful") if e["involvedObject"]["kind"] == "Job"] == []

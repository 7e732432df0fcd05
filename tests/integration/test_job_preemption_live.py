"""Preemption of ``batch/v1`` Jobs on the real control plane, with the real Job controller
(kube-controller-manager built from the Kubernetes modules, testing/cluster/fixtures.py).

Two Jobs alike (parallelism 2, ``backoffLimit`` 1, each a gang of 2 whole nodes) but for one
rule: "careful" has a ``podFailurePolicy`` that ignores ``DisruptionTarget``, "plain" has none.
gpusched places both gangs, then preempts all four pods for a higher-priority gang of 4. The
harness plays the kubelet (testing/cluster/kubelet.py): it reports the preempted pods Failed
before it confirms their deletion, as a kubelet does, and moves the pods it is told to Running
and Succeeded.

- "careful" counts no failure, gets new pods from its controller, is placed again once the
  high gang has finished, and ends ``Complete``.
- "plain" counts each preempted pod against its ``backoffLimit``, ends ``Failed``
  (``BackoffLimitExceeded``), and carries gpusched's Warning ``PreemptedWithoutPolicy`` naming
  the rule to add.

Every wait is on a condition, with a deadline.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from testing.apiserver import ApiClient, wait_for
from testing.cluster.cluster import RealCluster
from testing.harness import (
    GROUP_LABEL,
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
PATIENCE = 120.0
"""Seconds for a step that needs the Job controller and the operator on this shared machine."""
JOB_NAME = "batch.kubernetes.io/job-name"
T = TypeVar("T")


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
    """A Job of 2 pods of 8 GPUs, each a member of the gang (our PodGroup) named like it."""
    template = gpu_pod("template", 8, group=name)
    template["spec"]["restartPolicy"] = "Never"
    template["spec"]["priorityClassName"] = LOW
    spec: dict[str, Any] = {
        "parallelism": 2,
        "completions": 2,
        "backoffLimit": 1,
        "template": {
            "metadata": {"labels": {GROUP_LABEL: name}},
            "spec": template["spec"],
        },
    }
    if policy is not None:
        spec["podFailurePolicy"] = policy
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }


def until(predicate: Callable[[], T], what: Callable[[], str]) -> T:
    """Waits (polling 4 times a second) for `predicate`, at most PATIENCE seconds."""
    return wait_for(predicate, timeout=PATIENCE, interval=0.25, message=what)


def low_gang(name: str) -> dict[str, Any]:
    group = gang(name, 2)
    group["spec"]["priorityClassName"] = LOW
    return group


def live_pods_of(api: ApiClient, job_name: str) -> list[dict[str, Any]]:
    """The Job's pods that are not being deleted."""
    return [
        p
        for p in pods(api).values()
        if p["metadata"].get("labels", {}).get(JOB_NAME) == job_name
        and not p["metadata"].get("deletionTimestamp")
    ]


def condition_of(job: dict[str, Any], type_: str) -> dict[str, Any] | None:
    for cond in job.get("status", {}).get("conditions") or []:
        if cond["type"] == type_ and cond["status"] == "True":
            return dict(cond)
    return None


def test_a_preempted_job_that_ignores_disruptions_comes_back_complete_and_one_without_fails(
    job_controller: RealCluster,
    api: ApiClient,
    kubeconfig: Path,
    classes: None,
) -> None:
    cluster = job_controller
    kubelet = cluster.kubelet
    for i in range(4):
        api.create(gpu_node(f"n{i}", "zone-a", "rack-1"))
    for name in ("careful", "plain"):
        api.create(low_gang(name))
    api.create(job("careful", SURVIVES))
    api.create(job("plain", None))

    def placed(job_name: str) -> Callable[[], list[dict[str, Any]]]:
        def members() -> list[dict[str, Any]]:
            on_nodes = [p for p in live_pods_of(api, job_name) if p["spec"].get("nodeName")]
            return on_nodes if len(on_nodes) == 2 else []

        return members

    def job_now(name: str) -> dict[str, Any]:
        return api.get("jobs", name, "default", group="batch")

    with running_operator(kubeconfig):
        for name in ("careful", "plain"):
            for member in until(placed(name), lambda: f"the gangs placed: {dump(pods(api))}"):
                kubelet.run("default", member["metadata"]["name"])

        high = gang("high", 4)
        high["spec"]["priorityClassName"] = HIGH
        api.create(high)
        high_pods = [f"high-{i}" for i in range(4)]
        for name in high_pods:
            member = gpu_pod(name, 8, group="high")
            member["spec"]["priorityClassName"] = HIGH
            api.create(member)
        until(
            lambda: all(
                pods(api).get(f"default/{n}", {}).get("spec", {}).get("nodeName") for n in high_pods
            ),
            lambda: f"the high gang placed over the Jobs: {dump(pods(api))}",
        )
        plain = until(
            lambda: condition_of(job_now("plain"), "Failed"),
            lambda: f"Job plain Failed: {dump(job_now('plain'))}",
        )
        until(
            lambda: len(live_pods_of(api, "careful")) == 2,
            lambda: f"careful's pods made again: {dump(pods(api))}",
        )
        assert job_now("careful")["status"].get("failed", 0) == 0, dump(job_now("careful"))
        for name in high_pods:
            kubelet.run("default", name)
            kubelet.finish("default", name)

        def advance_careful() -> dict[str, Any] | None:
            """Plays the kubelet for careful's placed pods (Running, then Succeeded) until the
            Job is Complete."""
            for member in live_pods_of(api, "careful"):
                name, phase = member["metadata"]["name"], member["status"].get("phase")
                if member["spec"].get("nodeName") and phase == "Pending":
                    kubelet.run("default", name)
                elif phase == "Running":
                    kubelet.finish("default", name)
            return condition_of(job_now("careful"), "Complete")

        until(
            advance_careful,
            lambda: f"Job careful Complete: {dump(job_now('careful'))} {dump(pods(api))}",
        )

    careful = job_now("careful")
    assert careful["status"].get("failed", 0) == 0, dump(careful["status"])
    assert careful["status"]["succeeded"] == 2, dump(careful["status"])
    assert plain["reason"] == "BackoffLimitExceeded", plain
    warnings = [e for e in events_for(api, "plain") if e["reason"] == "PreemptedWithoutPolicy"]
    assert warnings, events_for(api, "plain")
    for warning in warnings:
        assert warning["type"] == "Warning"
        assert warning["involvedObject"]["kind"] == "Job"
        assert "onPodConditions: [{type: DisruptionTarget}]" in warning["message"]
        assert "backoffLimit (1)" in warning["message"]
    careful_warnings = [
        e
        for e in events_for(api, "careful")
        if e["involvedObject"]["kind"] == "Job" and e["type"] == "Warning"
    ]
    assert careful_warnings == [], careful_warnings

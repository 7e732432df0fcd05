"""Preemption on the real control plane: a high-priority gang arrives in a cluster full of
low-priority gangs; the cheapest gang is evicted whole through the Eviction API, the gang is
bound into the room it freed, in one rack, and nothing else took that room meanwhile."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from testing.apiserver import ApiClient, ApiStatusError, wait_for
from testing.cluster.cluster import RealCluster
from testing.cluster.kubelet import LINGER
from testing.harness import (
    GROUP_LABEL,
    RACK,
    assert_no_gpu_shared,
    condition,
    domains,
    dump,
    events_for,
    gang,
    gpu_node,
    gpu_pod,
    group_status,
    pods,
    running_operator,
)

BUDGETS = "/apis/policy/v1/namespaces/default/poddisruptionbudgets"
CLASSES = {"gpusched-test-low": 10, "gpusched-test-mid": 20, "gpusched-test-high": 1000}


@pytest.fixture
def priority_classes(api: ApiClient) -> Iterator[None]:
    """PriorityClasses are cluster-wide and outlive the reset: made here, removed after."""
    for name, value in CLASSES.items():
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
    for name in CLASSES:
        api.delete("priorityclasses", name, group="scheduling.k8s.io")


def prioritized_gang(name: str, size: int, priority_class: str) -> list[dict[str, Any]]:
    group = gang(name, size)
    group["spec"].update({"priorityClassName": priority_class, "disruptionMode": "All"})
    members = [gpu_pod(f"{name}-{i}", 4, group=name) for i in range(size)]
    for member in members:
        member["spec"]["priorityClassName"] = priority_class
    return [group, *members]


def bound(api: ApiClient, prefix: str) -> dict[str, str]:
    return {
        key: pod["spec"]["nodeName"]
        for key, pod in pods(api, "default").items()
        if key.startswith(f"default/{prefix}-") and pod["spec"].get("nodeName")
    }


def two_racks(api: ApiClient) -> None:
    """n1, n2 in rack-1 and n3, n4 in rack-2, zone-a: 8 GPUs each."""
    for name, rack in (("n1", "rack-1"), ("n2", "rack-1"), ("n3", "rack-2"), ("n4", "rack-2")):
        api.create(gpu_node(name, "zone-a", rack))


def low_and_mid_bound(api: ApiClient, *, linger: bool = False) -> None:
    """low (10, All) then mid (20, All), four 4-GPU pods each, each gang bound before the next
    (so each fills a rack); ``linger``: low's pods held by a finalizer once deleted."""
    for name, cls in (("low", "gpusched-test-low"), ("mid", "gpusched-test-mid")):
        for body in prioritized_gang(name, 4, cls):
            if linger and name == "low" and body["kind"] == "Pod":
                body["metadata"]["finalizers"] = [LINGER]
            api.create(body)
        wait_for(
            lambda name=name: len(bound(api, name)) == 4,  # type: ignore[misc]
            timeout=30,
            message=lambda name=name: f"{name} bound: {dump(pods(api, 'default'))}",  # type: ignore[misc]
        )


def test_a_high_priority_gang_evicts_the_cheapest_gang_whole_and_takes_its_rack(
    apiserver: RealCluster, api: ApiClient, kubeconfig: Path, priority_classes: None
) -> None:
    #            zone-a
    #       rack-1       rack-2
    #      n1    n2     n3    n4      8 GPUs each
    #      low (10, All) mid (20, All): four 4-GPU pods each, filling a rack
    two_racks(api)
    with running_operator(kubeconfig):
        low_and_mid_bound(api)
        low_rack = domains(api, list(bound(api, "low")), RACK)
        mid_before = bound(api, "mid")

        # A newcomer of the victims' own priority arrives with the preemptor: it may not
        # preempt anyone (nothing is strictly lower) nor take the room freed for the gang.
        for body in prioritized_gang("high", 4, "gpusched-test-high"):
            api.create(body)
        squatter = gpu_pod("squatter", 4)
        squatter["spec"]["priorityClassName"] = "gpusched-test-low"
        api.create(squatter)

        wait_for(
            lambda: len(bound(api, "high")) == 4,
            timeout=60,
            message=lambda: f"the high gang bound: {dump(pods(api, 'default'))}",
        )
        everything = pods(api, "default")
        assert not [k for k in everything if k.startswith("default/low-")], "low evicted whole"
        assert bound(api, "mid") == mid_before  # the dearer gang untouched
        assert domains(api, list(bound(api, "high")), RACK) == low_rack
        assert not everything["default/squatter"]["spec"].get("nodeName")
        assert_no_gpu_shared(api)
        evictions = sorted(
            urlsplit(r.path).path.split("/")[-2]
            for r in apiserver.requests()
            if r.method == "POST" and r.path.endswith("/eviction")
        )
        assert evictions == [f"low-{i}" for i in range(4)]  # each once, through the Eviction API

        preempted = wait_for(
            lambda: [e for e in events_for(api, "low-0") if e["reason"] == "Preempted"],
            message=lambda: f"a Preempted Event on low-0: {dump(events_for(api, 'low-0'))}",
        )
        assert "default/high" in preempted[0]["message"]
        preempting = wait_for(
            lambda: [e for e in events_for(api, "high") if e["reason"] == "Preempting"],
            message=lambda: f"a Preempting Event on high: {dump(events_for(api, 'high'))}",
        )
        assert "default/low-0" in preempting[0]["message"]


@pytest.fixture
def low_budget(api: ApiClient) -> Iterator[None]:
    """A PodDisruptionBudget keeping every pod of the gang ``low`` (the cluster's reset does
    not know PodDisruptionBudgets: removed here)."""
    body = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "low", "namespace": "default"},
        "spec": {"minAvailable": 4, "selector": {"matchLabels": {GROUP_LABEL: "low"}}},
    }
    api.request("POST", BUDGETS, json=body).raise_for_status()
    yield
    api.request("DELETE", f"{BUDGETS}/low").raise_for_status()


def test_a_budget_that_allows_no_disruption_turns_the_gang_to_the_dearer_rack(
    apiserver: RealCluster,
    api: ApiClient,
    kubeconfig: Path,
    priority_classes: None,
    low_budget: None,
) -> None:
    # As above, but a PodDisruptionBudget keeps all four low pods (minAvailable 4): evicting
    # mid (priority 20) violates nothing, so the gang takes mid's rack and low stays whole.
    two_racks(api)
    with running_operator(kubeconfig):
        low_and_mid_bound(api)
        low_before = bound(api, "low")
        mid_rack = domains(api, list(bound(api, "mid")), RACK)
        for body in prioritized_gang("high", 4, "gpusched-test-high"):
            api.create(body)
        wait_for(
            lambda: len(bound(api, "high")) == 4,
            timeout=60,
            message=lambda: f"the high gang bound: {dump(pods(api, 'default'))}",
        )
        assert bound(api, "low") == low_before
        assert not bound(api, "mid")
        assert domains(api, list(bound(api, "high")), RACK) == mid_rack
        assert_no_gpu_shared(api)


def lone_pod(
    name: str, gpus: int, priority_class: str, node: str | None = None, at: range | None = None
) -> dict[str, Any]:
    body = gpu_pod(name, gpus, node=node, at=at, cpu="1", memory="1Gi")
    body["spec"]["priorityClassName"] = priority_class
    return body


@pytest.fixture
def never_class(api: ApiClient) -> Iterator[str]:
    """A PriorityClass as high as the highest, whose pods never preempt."""
    name = "gpusched-test-high-never"
    if api.get_or_none("priorityclasses", name, group="scheduling.k8s.io") is None:
        body = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": CLASSES["gpusched-test-high"],
            "preemptionPolicy": "Never",
        }
        api.create(body)
    yield name
    api.delete("priorityclasses", name, group="scheduling.k8s.io")


def test_a_lone_high_priority_pod_evicts_the_fewest_lowest_pods_and_is_bound_where_nominated(
    apiserver: RealCluster,
    api: ApiClient,
    kubeconfig: Path,
    priority_classes: None,
    never_class: str,
) -> None:
    #   n1 (8 GPUs): small-0 (GPUs 0-1), small-1 (2-3), big (4-7), priority 10, no group
    #   n2 (8 GPUs): mid-0 (0-3), mid-1 (4-7), priority 20
    # A pod of priority 10 and one of priority 1000 whose class says preemptionPolicy Never
    # evict nothing; a 4-GPU pod of priority 1000 evicts big alone (the lowest priority, the
    # fewest victims), is nominated to n1 while big terminates, and is bound there.
    api.create(gpu_node("n1"))
    api.create(gpu_node("n2"))
    held = {
        "small-0": ("n1", range(2), "low"),
        "small-1": ("n1", range(2, 4), "low"),
        "big": ("n1", range(4, 8), "low"),
        "mid-0": ("n2", range(4), "mid"),
        "mid-1": ("n2", range(4, 8), "mid"),
    }
    for name, (node, gpus, cls) in held.items():
        body = lone_pod(name, len(gpus), f"gpusched-test-{cls}", node, gpus)
        if name == "big":
            body["metadata"]["finalizers"] = [LINGER]
        api.create(body)
    try:
        with running_operator(kubeconfig):
            api.create(lone_pod("equal", 4, "gpusched-test-low"))
            api.create(lone_pod("never", 4, never_class))
            for name in ("equal", "never"):
                wait_for(
                    lambda name=name: [  # type: ignore[misc]
                        e for e in events_for(api, name) if e["reason"] == "FailedScheduling"
                    ],
                    timeout=30,
                    message=lambda name=name: dump(events_for(api, name)),  # type: ignore[misc]
                )
            assert not _evictions(apiserver)

            api.create(lone_pod("urgent", 4, "gpusched-test-high"))
            urgent = wait_for(
                lambda: (
                    (got := pods(api, "default")["default/urgent"])["status"].get(
                        "nominatedNodeName"
                    )
                    and _evictions(apiserver)
                    and got
                ),
                timeout=30,
                message=lambda: f"urgent nominated: {dump(pods(api, 'default'))}",
            )
            assert urgent["status"]["nominatedNodeName"] == "n1"
            assert not urgent["spec"].get("nodeName")  # big still holds its GPUs
            assert _evictions(apiserver) == ["big"]
            preempting = wait_for(
                lambda: [e for e in events_for(api, "urgent") if e["reason"] == "Preempting"],
                message=lambda: f"a Preempting Event on urgent: {dump(events_for(api, 'urgent'))}",
            )
            assert "default/big" in preempting[0]["message"], dump(preempting)

            api.patch("pods", "big", {"metadata": {"finalizers": None}}, "default")
            wait_for(
                lambda: pods(api, "default")["default/urgent"]["spec"].get("nodeName") == "n1",
                timeout=30,
                message=lambda: f"urgent bound to n1: {dump(pods(api, 'default'))}",
            )
            everything = pods(api, "default")
            assert "default/big" not in everything
            assert not everything["default/equal"]["spec"].get("nodeName")
            assert not everything["default/never"]["spec"].get("nodeName")
            assert _evictions(apiserver) == ["big"]
            assert_no_gpu_shared(api)
    finally:
        if api.get_or_none("pods", "big", "default") is not None:
            api.patch("pods", "big", {"metadata": {"finalizers": None}}, "default")


def _evictions(apiserver: RealCluster) -> list[str]:
    return sorted(
        r.name or ""
        for r in apiserver.requests()
        if r.method == "POST" and r.path.endswith("/eviction")
    )


def gpusched_run(kubeconfig: Path, tmp_path: Path, log: str) -> subprocess.Popen[bytes]:
    """A `gpusched run` process with the operator's identity, one replica."""
    config = tmp_path / "config.yaml"
    operator = {"initialBackoffSeconds": 0.2, "maxBackoffSeconds": 1.0}
    config.write_text(
        yaml.safe_dump({"operator": {**operator, "leaderElection": {"enabled": False}}})
    )
    command = [sys.executable, "-m", "gpusched.cli", "run", "--kubeconfig", str(kubeconfig)]
    command += ["--config", str(config), "--metrics-address", "127.0.0.1:0"]
    output = (tmp_path / log).open("wb")
    return subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)


def test_a_gang_left_part_evicted_by_a_killed_operator_is_evicted_whole_after_a_restart(
    apiserver: RealCluster,
    api: ApiClient,
    kubeconfig: Path,
    tmp_path: Path,
    priority_classes: None,
) -> None:
    # low's first pod is evicted; every way of moving the other three is cut off (eviction,
    # its fallback's status patch and delete), and the operator is SIGKILLed there. The
    # preemptor then goes too, so a restarted operator has nobody to plan for: it must finish
    # the gang from the marks its pods carry, never leave three of four running.
    two_racks(api)
    first = gpusched_run(kubeconfig, tmp_path, "first.log")
    try:
        low_and_mid_bound(api)
        mid_before = bound(api, "mid")
        rest = r"/pods/low-[123]"
        apiserver.faults.drop(method="POST", path=rf"{rest}/eviction$", times=None)
        apiserver.faults.drop(method="PATCH", path=rf"{rest}/status$", times=None)
        apiserver.faults.drop(method="DELETE", path=rf"{rest}$", times=None)
        for body in prioritized_gang("high", 4, "gpusched-test-high"):
            api.create(body)
        wait_for(
            lambda: (
                "default/low-0" not in pods(api, "default")
                and any(
                    r.path.endswith("/eviction") and "low-0" not in r.path
                    for r in apiserver.requests()
                )
            ),
            timeout=30,
            message=lambda: f"low-0 evicted, the rest tried: {dump(pods(api, 'default'))}",
        )
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    for i in range(4):
        api.delete("pods", f"high-{i}", "default")
    api.delete("podgroups", "high", "default", group="scheduling.gpusched.io")
    apiserver.faults.clear()
    assert len(bound(api, "low")) == 3  # what the kill left: a broken gang

    second = gpusched_run(kubeconfig, tmp_path, "second.log")
    try:
        wait_for(
            lambda: not bound(api, "low"),
            timeout=60,
            message=lambda: f"the rest of low evicted: {dump(pods(api, 'default'))}",
        )
        assert bound(api, "mid") == mid_before
        assert_no_gpu_shared(api)
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(20)


@pytest.fixture
def spendable_budget(api: ApiClient) -> Iterator[None]:
    """A PodDisruptionBudget over the gang ``low`` that allows evicting all four of its pods
    once: the API server counts each eviction against it, so once they are evicted (and
    while they terminate) it allows none. The test plays the disruption controller, which
    this control plane does not run, by writing the first status."""
    body = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "low", "namespace": "default"},
        "spec": {"maxUnavailable": 4, "selector": {"matchLabels": {GROUP_LABEL: "low"}}},
    }
    api.request("POST", BUDGETS, json=body).raise_for_status()
    yield
    api.request("DELETE", f"{BUDGETS}/low").raise_for_status()


def allow_disruptions(api: ApiClient, allowed: int) -> None:
    status = {
        "observedGeneration": 1,
        "disruptionsAllowed": allowed,
        "currentHealthy": 4,
        "desiredHealthy": 0,
        "expectedPods": 4,
    }
    api.request(
        "PATCH",
        f"{BUDGETS}/low/status",
        json={"status": status},
        headers={"Content-Type": "application/merge-patch+json"},
    ).raise_for_status()


def test_an_operator_restarted_while_victims_terminate_waits_for_them_and_evicts_no_more(
    apiserver: RealCluster,
    api: ApiClient,
    kubeconfig: Path,
    tmp_path: Path,
    priority_classes: None,
    spendable_budget: None,
) -> None:
    # low (10, rack-1) is evicted for high; its pods linger, terminating, and the budget
    # over them is spent by those evictions. The operator is SIGKILLed then. Planned afresh,
    # high would now find evicting low (its terminating pods) dearer than evicting mid (4 PDB
    # violations against none) and evict mid as well. The restarted operator carries the
    # first plan on from its record instead: it waits for low's pods and binds high into
    # rack-1, and mid is never touched.
    two_racks(api)
    first = gpusched_run(kubeconfig, tmp_path, "first.log")
    try:
        low_and_mid_bound(api, linger=True)
        for i in range(4):  # Ready: the Eviction API counts only healthy pods against it
            apiserver.kubelet.run("default", f"low-{i}")
        allow_disruptions(api, 4)
        mid_before = bound(api, "mid")
        low_rack = domains(api, list(bound(api, "low")), RACK)
        for body in prioritized_gang("high", 4, "gpusched-test-high"):
            api.create(body)
        wait_for(
            lambda: (
                _evictions(apiserver) == [f"low-{i}" for i in range(4)]
                and all(
                    p["metadata"].get("deletionTimestamp")
                    for k, p in pods(api, "default").items()
                    if k.startswith("default/low-")
                )
            ),
            timeout=30,
            message=lambda: f"low evicted, terminating: {dump(pods(api, 'default'))}",
        )
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    spent = api.request("GET", f"{BUDGETS}/low").json()["status"]["disruptionsAllowed"]
    assert spent == 0, spent

    second = gpusched_run(kubeconfig, tmp_path, "second.log")
    try:
        # A pod that fits nowhere: once the restarted operator has told it so, it has run a
        # cycle (and planned, had it planned afresh).
        api.create(lone_pod("probe", 8, "gpusched-test-low"))
        wait_for(
            lambda: [e for e in events_for(api, "probe") if e["reason"] == "FailedScheduling"],
            timeout=30,
            message=lambda: f"the probe tried: {dump(events_for(api, 'probe'))}",
        )
        release = [k.split("/", 1)[1] for k in pods(api, "default") if k.startswith("default/low-")]
        for name in release:
            api.patch("pods", name, {"metadata": {"finalizers": None}}, "default")
        wait_for(
            lambda: len(bound(api, "high")) == 4,
            timeout=60,
            message=lambda: f"the high gang bound: {dump(pods(api, 'default'))}",
        )
        assert domains(api, list(bound(api, "high")), RACK) == low_rack
        assert bound(api, "mid") == mid_before
        assert _evictions(apiserver) == [f"low-{i}" for i in range(4)]
        assert_no_gpu_shared(api)
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(20)
        for key, pod in pods(api, "default").items():
            if LINGER in (pod["metadata"].get("finalizers") or []):
                api.patch(
                    "pods", key.split("/", 1)[1], {"metadata": {"finalizers": None}}, "default"
                )


def unschedulable(api: ApiClient, name: str) -> dict[str, Any]:
    """The group's PodGroupScheduled condition once its reason is Unschedulable, else {}."""
    said = condition(group_status(api, name))
    return said if said.get("reason") == "Unschedulable" else {}


def test_a_gang_whose_priority_cannot_be_resolved_evicts_nothing_and_says_why(
    apiserver: RealCluster, api: ApiClient, kubeconfig: Path, priority_classes: None
) -> None:
    # The racks full as above. Two gangs whose own priority cannot be resolved (a
    # PriorityClass that does not exist; a priority that contradicts its class) say so in
    # their condition and evict nothing; a gang of the same pods with a sound priority, made
    # after them, evicts low alone: nothing else was evicted for the first two.
    two_racks(api)
    huge = prioritized_gang("huge", 4, "gpusched-test-high")[0]
    huge["spec"]["priority"] = 2**31
    with pytest.raises(ApiStatusError) as refused:
        api.create(huge)  # beyond int32: the CRD's schema refuses it, naming the field
    assert refused.value.status == 422, refused.value
    assert "spec.priority" in str(refused.value), refused.value
    with running_operator(kubeconfig):
        low_and_mid_bound(api)
        mid_before = bound(api, "mid")
        problems = {
            "missing": "spec.priorityClassName: PriorityClass 'gpusched-test-missing' not found",
            "conflict": "spec.priority: is 5, but PriorityClass 'gpusched-test-high' "
            "(spec.priorityClassName) has value 1000",
        }
        for name in problems:
            group, *members = prioritized_gang(name, 4, "gpusched-test-high")
            if name == "missing":
                group["spec"]["priorityClassName"] = "gpusched-test-missing"
            else:
                group["spec"]["priority"] = 5
            for body in (group, *members):
                api.create(body)
        for name, problem in problems.items():
            said = wait_for(
                lambda name=name: unschedulable(api, name),  # type: ignore[misc]
                timeout=30,
                message=lambda name=name: dump(group_status(api, name)),  # type: ignore[misc]
            )
            assert f"preempts nobody: PodGroup default/{name}: {problem}" in said["message"], said

        for body in prioritized_gang("high", 4, "gpusched-test-high"):
            api.create(body)
        wait_for(
            lambda: len(bound(api, "high")) == 4,
            timeout=60,
            message=lambda: f"the sound gang bound: {dump(pods(api, 'default'))}",
        )
        evictions = sorted(
            r.name or ""
            for r in apiserver.requests()
            if r.method == "POST" and r.path.endswith("/eviction")
        )
        assert evictions == [f"low-{i}" for i in range(4)]
        assert bound(api, "mid") == mid_before
        assert not bound(api, "missing")
        assert not bound(api, "conflict")

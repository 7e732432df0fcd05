"""The issue's preemption stories at full size, on the real control plane, judged from the API
server's objects: a cluster full of low-priority gangs, and a 64-pod high-priority gang that
needs a whole rack.

    #                    zone-a
    #           rack-1              rack-2
    #     n1-0 … n1-15          n2-0 … n2-15        8 GPUs each
    #   4 low gangs (8 × 4 GPUs, All) per rack, each in one rack: the cluster is full
    #
    # high: 64 pods × 2 GPUs (priority 1000) wants one rack: 4 low gangs must go, whole.

The timings the stories print (``-s``) are information, not assertions.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testing.apiserver import ApiClient, wait_for
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
    labels_of,
    pods,
    running_operator,
)
from tests.integration.test_preemption import gpusched_run, priority_classes

__all__ = ["priority_classes"]  # the fixture, used by name

LOW_GANGS = [f"low{i}" for i in range(8)]
HIGH_PODS = 64
PLACE = "gpusched.io/nomination"
"""Where a preemption in flight puts each of its pods (its durable record)."""
MARK = "gpusched.io/preemption"
"""On each victim of a preemption in flight."""
POLL = 0.2
"""Seconds between polls of the pod list (129 pods: polling faster only loads the server)."""


def full_cluster(api: ApiClient) -> None:
    for rack in (1, 2):
        for i in range(16):
            api.create(gpu_node(f"n{rack}-{i}", "zone-a", f"rack-{rack}"))


def low_gang(name: str, *, linger: bool = False) -> list[dict[str, Any]]:
    group = gang(name, 8)
    group["spec"].update({"priorityClassName": "gpusched-test-low", "disruptionMode": "All"})
    members = [gpu_pod(f"{name}-{i}", 4, group=name) for i in range(8)]
    for member in members:
        member["spec"]["priorityClassName"] = "gpusched-test-low"
        if linger:
            member["metadata"]["finalizers"] = [LINGER]
    return [group, *members]


def high_gang() -> list[dict[str, Any]]:
    group = gang("high", HIGH_PODS)
    group["spec"]["priorityClassName"] = "gpusched-test-high"
    members = [gpu_pod(f"high-{i}", 2, group="high") for i in range(HIGH_PODS)]
    for member in members:
        member["spec"]["priorityClassName"] = "gpusched-test-high"
    return [group, *members]


def of_group(everything: dict[str, dict[str, Any]], name: str) -> dict[str, dict[str, Any]]:
    return {
        k: p
        for k, p in everything.items()
        if (p["metadata"].get("labels") or {}).get(GROUP_LABEL) == name
    }


def bound_nodes(everything: dict[str, dict[str, Any]], name: str) -> dict[str, str]:
    return {
        k: p["spec"]["nodeName"]
        for k, p in of_group(everything, name).items()
        if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")
    }


def fill(api: ApiClient, *, linger: bool = False) -> dict[str, dict[str, str]]:
    """Every low gang created and bound, each in one rack: where each pod is."""
    for name in LOW_GANGS:
        for body in low_gang(name, linger=linger):
            api.create(body)
    wait_for(
        lambda: all(len(bound_nodes(pods(api, "default"), n)) == 8 for n in LOW_GANGS),
        timeout=120,
        interval=POLL,
        message=lambda: f"the low gangs bound: {dump(pods(api, 'default'))}",
    )
    everything = pods(api, "default")
    placed = {name: bound_nodes(everything, name) for name in LOW_GANGS}
    for name in LOW_GANGS:
        assert len(rack_of(api, placed[name])) == 1, f"{name} spans racks: {placed[name]}"
    return placed


def rack_of(api: ApiClient, where: dict[str, str]) -> set[str]:
    """The racks of the nodes in ``where`` (pod → node), read from the Nodes."""
    return {labels_of(api, node)[RACK] for node in set(where.values())}


def assert_gangs_whole_or_gone(
    api: ApiClient, before: dict[str, dict[str, str]]
) -> tuple[list[str], list[str]]:
    """Every low gang is either untouched (all 8 pods where they were) or entirely gone:
    (evicted gangs, untouched gangs)."""
    everything = pods(api, "default")
    gone, whole = [], []
    for name, where in before.items():
        left = of_group(everything, name)
        if not left:
            gone.append(name)
        else:
            assert bound_nodes(everything, name) == where, f"{name} half-evicted: {dump(left)}"
            whole.append(name)
    return gone, whole


def release_lingering(api: ApiClient) -> None:
    for key, pod in pods(api, "default").items():
        if LINGER in (pod["metadata"].get("finalizers") or []):
            name = key.split("/", 1)[1]
            api.patch("pods", name, {"metadata": {"finalizers": None}}, "default")


@pytest.fixture
def lingering(api: ApiClient) -> Iterator[None]:
    """Takes the story's finalizer off every pod at the end (the reset could not delete them)."""
    yield
    release_lingering(api)


def test_a_64_pod_gang_evicts_four_whole_gangs_and_nobody_takes_the_room_it_waits_for(
    apiserver: RealCluster,
    api: ApiClient,
    kubeconfig: Path,
    priority_classes: None,
    lingering: None,
) -> None:
    full_cluster(api)
    with running_operator(kubeconfig):
        before = fill(api, linger=True)

        started = time.monotonic()
        for body in high_gang():
            api.create(body)
        # The victims are evicted but linger (terminating, holding their GPUs): the room is
        # nominated and waits for them.
        wait_for(
            lambda: sum(1 for p in pods(api, "default").values() if _terminating(p)) == 32,
            timeout=120,
            interval=POLL,
            message=lambda: f"32 victims terminating: {dump(pods(api, 'default'))}",
        )
        evicted_at = time.monotonic()
        high = of_group(pods(api, "default"), "high")
        nominated = {p["status"].get("nominatedNodeName") for p in high.values()}
        assert None not in nominated, dump(nominated)
        assert len(nominated) == 16, dump(nominated)  # a whole rack, for 4 pods each
        assert not [k for k, p in high.items() if p["spec"].get("nodeName")]
        status = wait_for(
            lambda: (
                condition(group_status(api, "high")).get("reason") == "Preempting"
                and group_status(api, "high")
            ),
            timeout=30,
            interval=POLL,
            message=lambda: f"high's status says Preempting: {dump(group_status(api, 'high'))}",
        )
        assert "waiting for 32 victims" in condition(status)["message"], dump(status)
        explained = explain_live(kubeconfig, "pg/high")
        assert explained["preempting"] == condition(status)["message"], dump(explained)

        # A newcomer of the victims' own priority arrives while the room is held: nothing is
        # strictly lower than it, and the room is promised.
        squatter = gpu_pod("squatter", 2)
        squatter["spec"]["priorityClassName"] = "gpusched-test-low"
        api.create(squatter)
        wait_for(
            lambda: [e for e in events_for(api, "squatter") if e["reason"] == "FailedScheduling"],
            timeout=30,
            interval=POLL,
            message=lambda: f"the squatter was tried: {dump(events_for(api, 'squatter'))}",
        )
        assert not pods(api, "default")["default/squatter"]["spec"].get("nodeName")
        assert not bound_nodes(pods(api, "default"), "high")

        released = time.monotonic()
        release_lingering(api)
        wait_for(
            lambda: len(bound_nodes(pods(api, "default"), "high")) == HIGH_PODS,
            timeout=120,
            interval=POLL,
            message=lambda: f"the high gang bound: {dump(pods(api, 'default'))}",
        )
        bound_at = time.monotonic()

        everything = pods(api, "default")
        assert not everything["default/squatter"]["spec"].get("nodeName")
        gone, whole = assert_gangs_whole_or_gone(api, before)
        assert (len(gone), len(whole)) == (4, 4), (gone, whole)
        high_rack = domains(api, list(bound_nodes(everything, "high")), RACK)
        assert len(high_rack) == 1
        gone_racks = {r for name in gone for r in rack_of(api, before[name])}
        assert gone_racks == high_rack  # exactly the gangs of the rack it took
        assert_no_gpu_shared(api)
        evictions = [
            r.name
            for r in apiserver.requests()
            if r.method == "POST" and r.path.endswith("/eviction")
        ]
        victims = sorted(k.split("/", 1)[1] for name in gone for k in before[name])
        assert sorted(evictions) == victims  # each once, through the Eviction API
    # (printed outside the operator's block: its runner captures stdout while it runs)
    print(
        f"\n64-pod preemption: 32 victims evicted {evicted_at - started:.1f} s after the gang "
        f"was created; the gang bound {bound_at - released:.1f} s after they were let go"
    )


def explain_live(kubeconfig: Path, target: str) -> dict[str, Any]:
    """``gpusched explain TARGET -o json`` on the live cluster: the target group's report (a
    process of its own: the operator's runner holds this one's stdout)."""
    command = [sys.executable, "-m", "gpusched.cli", "explain", target, "-n", "default"]
    command += ["--kubeconfig", str(kubeconfig), "-o", "json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)["groups"][0]
    return report


def evictions(apiserver: RealCluster) -> list[str]:
    """The pods whose eviction was asked, as often as it was."""
    return [
        r.name or ""
        for r in apiserver.requests()
        if r.method == "POST" and r.path.endswith("/eviction")
    ]


def _terminating(pod: dict[str, Any]) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def test_the_operator_killed_between_evictions_of_a_64_pod_preemption_finishes_after_a_restart(
    apiserver: RealCluster,
    api: ApiClient,
    kubeconfig: Path,
    tmp_path: Path,
    priority_classes: None,
) -> None:
    # Evictions are slowed so the kill lands between them: the first operator has begun on
    # the victims, not finished. It recorded its plan before the first eviction (its victims
    # marked, the gang's pods' places), so the restarted one carries that plan on: it evicts
    # only the first plan's victims (a rack's four gangs, whole), binds the gang where the
    # first plan nominated, and gives no GPU twice.
    full_cluster(api)
    first = gpusched_run(kubeconfig, tmp_path, "first.log")
    try:
        before = fill(api)
        apiserver.faults.delay(0.5, method="POST", path=r"/eviction$")
        started = time.monotonic()
        for body in high_gang():
            api.create(body)
        wait_for(
            lambda: any(r.path.endswith("/eviction") for r in apiserver.requests()),
            timeout=120,
            interval=0.05,
            message="the first eviction sent",
        )
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    killed = time.monotonic()
    apiserver.faults.clear()
    sent = sum(1 for r in apiserver.requests() if r.path.endswith("/eviction"))
    assert sent < 32, f"all {sent} evictions were sent before the kill: nothing was interrupted"
    listed = pods(api, "default")
    places = {
        k: json.loads(p["metadata"]["annotations"][PLACE])["node"]
        for k, p in of_group(listed, "high").items()
        if PLACE in (p["metadata"].get("annotations") or {})
    }
    assert len(places) == HIGH_PODS, dump(places)  # recorded before the first eviction
    first_victims = {
        k for k, p in listed.items() if MARK in (p["metadata"].get("annotations") or {})
    }
    first_victims |= {f"default/{name}" for name in evictions(apiserver)}
    first_gangs = {
        name for name in LOW_GANGS if any(k.startswith(f"default/{name}-") for k in first_victims)
    }
    assert len(first_gangs) == 4, sorted(first_victims)

    second = gpusched_run(kubeconfig, tmp_path, "second.log")
    try:
        wait_for(
            lambda: len(bound_nodes(pods(api, "default"), "high")) == HIGH_PODS,
            timeout=180,
            interval=POLL,
            message=lambda: f"the high gang bound after the restart: {dump(pods(api))}",
        )
        bound_at = time.monotonic()
        everything = pods(api, "default")
        assert len(domains(api, list(bound_nodes(everything, "high")), RACK)) == 1
        assert bound_nodes(everything, "high") == places  # where the first plan nominated
        gone, whole = assert_gangs_whole_or_gone(api, before)
        assert sorted(gone) == sorted(first_gangs), (gone, whole)  # nothing beyond the plan
        assert {f"default/{name}" for name in evictions(apiserver)} <= first_victims
        assert_no_gpu_shared(api)
        print(
            f"\nkilled after {sent} of 32 evictions, {killed - started:.1f} s in; "
            f"the gang bound {bound_at - killed:.1f} s after the kill; evicted {sorted(gone)}"
        )
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(20)

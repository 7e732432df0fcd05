"""What users and the cluster's other tools see, on the real control plane (Kubernetes 1.37):

- a gang pod gpusched cannot place carries ``PodScheduled=False``/``Unschedulable`` with its
  group's reason, shown by ``kubectl describe pod``, in the form cluster autoscalers read
  (Karpenter's ``FailedToSchedule``, cluster-autoscaler's ``UnschedulablePodLister``); the
  bind sets it ``True``;
- waits (a gang short of pods, a group not created yet) are told on the pods once, as Normal
  Events, with a reason no autoscaler acts on;
- our short names resolve to our kinds on 1.37 and collide with nothing the server serves;
  ``kubectl get`` prints PRIORITY (the class) and PLACEMENT (a path), not raw JSON.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from gpusched.handlers import Runtime
from testing.apiserver import ApiClient, wait_for
from testing.cluster.cluster import RealCluster
from testing.harness import (
    EXAMPLES,
    apply_yaml,
    condition,
    events_for,
    gang,
    gpu_node,
    gpu_pod,
    group_status,
    placement_of,
    pods,
    running_operator,
)

OURS = "scheduling.gpusched.io"


def scheduled(api: ApiClient, name: str) -> dict[str, Any]:
    pod = pods(api)[f"default/{name}"]
    return condition(pod.get("status") or {}, "PodScheduled")


def karpenter_would_provision(pod: Mapping[str, Any]) -> bool:
    """Karpenter's reading (pkg/utils/pod/scheduling.go): not bound, not nominated, and a
    ``PodScheduled`` condition with reason ``Unschedulable`` (``FailedToSchedule``)."""
    status = pod.get("status") or {}
    failed = condition(status, "PodScheduled").get("reason") == "Unschedulable"
    return failed and not pod["spec"].get("nodeName") and not status.get("nominatedNodeName")


def autoscaler_lists(pod: Mapping[str, Any]) -> bool:
    """cluster-autoscaler's ``UnschedulablePodLister.List`` (utils/kubernetes/listers.go)."""
    found = condition(pod.get("status") or {}, "PodScheduled")
    return found.get("status") == "False" and found.get("reason") == "Unschedulable"


def test_a_pending_gang_pod_says_unschedulable_as_autoscalers_read_it_until_its_bind(
    apiserver: RealCluster, api: ApiClient, kubeconfig: Path
) -> None:
    api.create(gpu_node("n1", "zone-a", "rack-1"))
    api.create(gang("g", 2))
    for i in range(2):
        api.create(gpu_pod(f"g-{i}", 8, group="g"))
    with running_operator(kubeconfig) as runtime:
        wait_for(
            lambda: all(autoscaler_lists(pods(api)[f"default/g-{i}"]) for i in range(2)),
            timeout=30,
            message=lambda: f"PodScheduled on the gang's pods: {scheduled(api, 'g-0')}",
        )
        found = pods(api)
        assert all(karpenter_would_provision(found[f"default/g-{i}"]) for i in range(2))
        # The group's status has its own sender: it may land after the pods' conditions.
        reason = wait_for(
            lambda: condition(group_status(api, "g")).get("message"),
            timeout=30,
            message=lambda: f"the group's condition: {condition(group_status(api, 'g'))}",
        )
        assert scheduled(api, "g-0")["message"] == reason  # the group's reason, unchanged
        described = apiserver.plane.kubectl("describe", "pod", "g-0", "-n", "default")
        # describe shows the condition's type and status, the reason text in the Event
        assert re.search(r"Conditions:\n\s+Type\s+Status\n\s+PodScheduled\s+False", described)
        assert "FailedScheduling" in described, described
        assert reason in described, described

        # Written once: later cycles that fail the same way send nothing more.
        before = scheduled(api, "g-0")["lastTransitionTime"], _version(api, "g-0")
        more_cycles(runtime, 4)  # the gang retried (backoff 0.2-1 s), failing the same way
        assert (scheduled(api, "g-0")["lastTransitionTime"], _version(api, "g-0")) == before

        api.create(gpu_node("n2", "zone-a", "rack-1"))  # what an autoscaler would add
        wait_for(
            lambda: all(placement_of(pods(api)[f"default/g-{i}"]) for i in range(2)),
            timeout=30,
            message="the gang bound once a node joined",
        )
    for i in range(2):
        cleared = scheduled(api, f"g-{i}")
        assert cleared.get("status") == "True", cleared  # set by the API server with the bind
        assert not autoscaler_lists(pods(api)[f"default/g-{i}"])


def more_cycles(runtime: Runtime, count: int) -> None:
    """Waits until the scheduling loop has run ``count`` more cycles."""
    loop = runtime.scheduler.loop
    target = loop.cycles + count
    wait_for(lambda: loop.cycles >= target, timeout=30, message="more scheduling cycles")


def _version(api: ApiClient, name: str) -> str:
    return str(pods(api)[f"default/{name}"]["metadata"]["resourceVersion"])


def test_waits_are_told_once_on_the_pods_and_never_as_unschedulable(
    apiserver: RealCluster, api: ApiClient, kubeconfig: Path
) -> None:
    api.create(gpu_node("n1", "zone-a", "rack-1"))
    api.create(gang("short", 5))
    for i in range(2):
        api.create(gpu_pod(f"short-{i}", 1, group="short"))
    api.create(gpu_pod("orphan", 1, group="not-yet"))
    api.create(gpu_pod("stray", 1, group="short", scheduler="other-scheduler"))
    with running_operator(kubeconfig) as runtime:
        wait_for(
            lambda: (
                scheduled(api, "short-1").get("reason") == "WaitingForPods"
                and scheduled(api, "orphan").get("reason") == "WaitingForPodGroup"
            ),
            timeout=30,
            message=lambda: f"{scheduled(api, 'short-1')} {scheduled(api, 'orphan')}",
        )
        assert "2 of 5 valid pods exist (minCount 5)" in scheduled(api, "short-1")["message"]
        api.create(gpu_pod("short-2", 1, group="short"))  # a change: the waits are decided again
        wait_for(
            lambda: "3 of 5" in condition(group_status(api, "short")).get("message", ""),
            timeout=30,
        )
        more_cycles(runtime, 2)
        for name, reason in (("short-0", "WaitingForPods"), ("orphan", "WaitingForPodGroup")):
            told = [(e["type"], e["reason"], e.get("count")) for e in events_for(api, name)]
            assert told == [("Normal", reason, 1)], (name, told)
        assert not any(autoscaler_lists(p) for p in pods(api).values())
        stray = [(e["type"], e["reason"], e.get("count")) for e in events_for(api, "stray")]
        assert stray == [("Warning", "NotForGpusched", 1)], stray

        api.create(gang("not-yet", 1))  # the group arrives: the orphan is placed
        wait_for(lambda: placement_of(pods(api)["default/orphan"]), timeout=30)


@pytest.fixture
def high_class(api: ApiClient) -> Iterator[str]:
    name = "visible-high"
    if api.get_or_none("priorityclasses", name, group="scheduling.k8s.io") is None:
        api.create(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": 1000,
            }
        )
    yield name
    api.delete("priorityclasses", name, group="scheduling.k8s.io")


def test_our_short_names_resolve_to_our_kinds_and_the_columns_read_plainly(
    apiserver: RealCluster, api: ApiClient, kubeconfig: Path, high_class: str
) -> None:
    plane = apiserver.plane
    table = plane.kubectl("api-resources", "--no-headers", "-o", "wide")
    short_names: dict[str, list[str]] = {}
    for line in table.splitlines():
        fields = line.split()
        # NAME SHORTNAMES APIVERSION NAMESPACED KIND VERBS CATEGORIES (SHORTNAMES may be empty)
        if len(fields) >= 5 and "/" in fields[2]:
            for short in fields[1].split(","):
                short_names.setdefault(short, []).append(f"{fields[0]}.{fields[2]}")
    for short, plural in (
        ("gspg", "podgroups"),
        ("gscpg", "compositepodgroups"),
        ("gswl", "workloads"),
    ):
        assert short_names.get(short) == [f"{plural}.{OURS}/v1alpha1"], (
            short,
            short_names.get(short),
        )
    for taken in ("pg", "cpg", "wl"):
        assert not any(OURS in r for r in short_names.get(taken, [])), taken

    api.create(gpu_node("n1", "zone-a", "rack-1"))
    group = gang("g", 1)
    group["spec"]["priorityClassName"] = high_class
    api.create(group)
    api.create(gpu_pod("g-0", 4, group="g"))
    with running_operator(kubeconfig):
        wait_for(lambda: group_status(api, "g").get("domain"), timeout=30)
    printed = plane.kubectl("get", "gspg", "g", "-n", "default")
    header, row = printed.splitlines()[:2]
    assert header.split() == [
        "NAME",
        "MIN",
        "SCHEDULED",
        "RUNNING",
        "PHASE",
        "PRIORITY",
        "PLACEMENT",
        "AGE",
    ], header
    cells = row.split()
    assert cells[5:7] == [high_class, "zone-a/rack-1"], row
    wide = plane.kubectl("get", "gspg", "g", "-n", "default", "-o", "wide")
    assert wide.splitlines()[1].split()[-1] == "1000", wide
    everything = plane.kubectl("get", "gpusched", "-A")
    assert f"podgroup.{OURS}/g" in everything, everything


def test_a_workload_edit_its_groups_do_not_show_is_named_on_the_workload(
    apiserver: RealCluster, api: ApiClient, kubeconfig: Path
) -> None:
    apply_yaml(api, EXAMPLES / "workloads" / "01-zone-rack-training" / "1-workload.yaml")

    def materialized() -> dict[str, Any]:
        status = api.get("workloads", "train", namespace="ml", group=OURS).get("status") or {}
        return condition(status, "Materialized")

    with running_operator(kubeconfig):
        wait_for(lambda: materialized().get("status") == "True", timeout=30, message=materialized)
        path = (
            "/spec/compositePodGroupTemplates/0/podGroupTemplates/0/schedulingPolicy/gang/minCount"
        )
        api.patch(
            "workloads",
            "train",
            [{"op": "replace", "path": path, "value": 4}],
            "ml",
            content_type="application/json-patch+json",
            group=OURS,
        )
        wait_for(
            lambda: materialized().get("reason") == "Drifted", timeout=30, message=materialized
        )
    told = materialized()
    assert told["status"] == "False", told
    assert (
        "PodGroup train-workers spec.schedulingPolicy.gang.minCount is 8, the template says 4"
        in told["message"]
    ), told
    workers = api.get("podgroups", "train-workers", namespace="ml", group=OURS)
    assert workers["spec"]["schedulingPolicy"]["gang"]["minCount"] == 8  # never changed under it

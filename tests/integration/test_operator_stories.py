"""The operator's stories, end to end over HTTP: the real operator (Kopf) against the API
emulator. Each asserts bindings, GPU indices, status and Events."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from testing.apiserver import ApiClient, ApiServer, ApiStatusError, wait_for
from testing.harness import (
    EXAMPLES,
    RACK,
    ZONE,
    apply_yaml,
    assert_no_gpu_shared,
    condition,
    domains,
    dump,
    events_for,
    gang,
    gpu_node,
    gpu_pod,
    group_status,
    placement_of,
    pods,
    running_operator,
    wait_nodes_ready,
)

SAMPLE = EXAMPLES / "clusters" / "sample"
TRAINING = EXAMPLES / "workloads" / "01-zone-rack-training"


def test_the_seed_workload_lands_workers_and_driver_in_racks_of_one_zone(
    apiserver: ApiServer, api: ApiClient, kubeconfig: Path
) -> None:
    #           zone-a                     zone-b
    #      rack-1      rack-2         rack-1      rack-2 (PCIe 4090)
    #   dgx-a1-1 a1-2  a2-1 a2-2   b1-1 (busy) b1-2   pcie-b2-1 b2-2
    apply_yaml(api, SAMPLE / "nodes.yaml", SAMPLE / "running-pods.yaml")
    # The README's cluster is up: its Nodes Ready, the API server's not-ready taint lifted (a
    # Node still tainted is rightly refused, with a Warning this story says never comes).
    wait_nodes_ready(api)
    with running_operator(kubeconfig) as runtime:
        apply_yaml(api, TRAINING / "1-workload.yaml", TRAINING / "2-pods.yaml")
        workers = [f"ml/train-worker-{i}" for i in range(8)]
        everyone = [*workers, "ml/train-driver-0"]
        wait_for(
            lambda: all(placement_of(pods(api)[k]) for k in everyone),
            timeout=20,
            message=lambda: f"all training pods bound: {dump(pods(api, 'ml'))}",
        )
        bound = pods(api, "ml")
        for key in workers:
            node, gpus = placement_of(bound[key])  # type: ignore[misc]
            assert len(gpus) == 2, f"{key} on {node} got GPUs {gpus}"
        assert len(domains(api, workers, RACK)) == 1
        assert len(domains(api, ["ml/train-driver-0"], RACK)) == 1
        assert len(domains(api, everyone, ZONE)) == 1
        assert_no_gpu_shared(api)

        workers_status = wait_for(
            lambda: (s := group_status(api, "train-workers", "ml")).get("scheduled") == 8 and s,
            message=lambda: f"train-workers status: {group_status(api, 'train-workers', 'ml')}",
        )
        zone = domains(api, workers, ZONE).pop()
        rack = domains(api, workers, RACK).pop()
        assert workers_status["phase"] == "Scheduled"
        assert workers_status["placement"] == {ZONE: zone, RACK: rack}
        assert condition(workers_status)["status"] == "True"
        zone_status = wait_for(
            lambda: (
                (s := group_status(api, "train-zone", "ml", "compositepodgroups")).get("placement")
                and s
            ),
        )
        assert zone_status["placement"] == {ZONE: zone}
        assert zone_status["phase"] == "Scheduled"
        workload = wait_for(
            lambda: (
                (w := api.get("workloads", "train", "ml", group="scheduling.gpusched.io"))
                .get("status", {})
                .get("scheduled")
                == 9
                and w
            ),
        )
        assert workload["status"]["phase"] == "Scheduled"
        assert condition(workload["status"], "Materialized")["status"] == "True"

        def scheduled_event() -> str:
            events = events_for(api, "train-worker-0", "ml")
            return next((e["message"] for e in events if e["reason"] == "Scheduled"), "")

        message = wait_for(scheduled_event, message="a Scheduled event on train-worker-0")
        # Applied in the README's order (the Workload first), the example raises no Warning.
        warnings = [e for e in api.list("events", "ml") if e.get("type") == "Warning"]
        assert warnings == [], dump(warnings)
        node, gpus = placement_of(pods(api)["ml/train-worker-0"])  # type: ignore[misc]
        assert message == (
            f"Successfully assigned ml/train-worker-0 to {node}, GPUs {','.join(map(str, gpus))}"
        )
        wait_for(lambda: runtime.scheduler.idle, message="no reservation left")


def _two_racks(api: ApiClient) -> None:
    #        zone-a
    #     /         \
    #  rack-1      rack-2
    #  n1-1 n1-2   n2-1 n2-2     (8 × A100 each)
    for rack in ("1", "2"):
        for index in ("1", "2"):
            api.create(gpu_node(f"n{rack}-{index}", "zone-a", f"rack-{rack}"))


def _rack_of(api: ApiClient, key: str) -> str:
    return domains(api, [key], RACK).pop()


def test_a_gang_that_cannot_fit_binds_nothing_then_schedules_once_room_is_freed(
    apiserver: ApiServer, api: ApiClient, kubeconfig: Path
) -> None:
    _two_racks(api)
    # Other schedulers' pods leave 2 free GPUs per node: no rack has room for 4 × 4 GPUs.
    for node in ("n1-1", "n1-2", "n2-1", "n2-2"):
        api.create(gpu_pod(f"blocker-{node}", 6, scheduler="default-scheduler", node=node))
    with running_operator(kubeconfig):
        api.create(gang("big", 4))
        for i in range(4):
            api.create(gpu_pod(f"big-{i}", 4, group="big"))
        status = wait_for(
            lambda: (s := group_status(api, "big")).get("lastAttempt") and s,
            message=lambda: f"a failed attempt on big: {group_status(api, 'big')}",
        )
        assert status["phase"] == "Pending"
        assert condition(status)["reason"] == "Unschedulable"
        lines = status["lastAttempt"]["domains"]
        assert len(lines) == 2, dump(status)
        assert lines[0].startswith("zone-a/rack-1: ")
        assert "Insufficient nvidia.com/gpu" in lines[0]
        assert lines[1].startswith("zone-a/rack-2: ")
        assert not any(placement_of(p) for k, p in pods(api).items() if k.startswith("default/big"))
        # Retries go on (backoff) but each pod keeps one aggregated FailedScheduling Event.
        wait_for(lambda: apiserver.request_count > 0 and len(_failures(api, "big-0")) == 1)
        api.delete("pods", "blocker-n1-1", "default")
        api.delete("pods", "blocker-n1-2", "default")
        wait_for(
            lambda: all(placement_of(pods(api)[f"default/big-{i}"]) for i in range(4)),
            message=lambda: f"big bound after room was freed: {group_status(api, 'big')}",
        )
        assert {_rack_of(api, f"default/big-{i}") for i in range(4)} == {"rack-1"}
        assert_no_gpu_shared(api)
        final = wait_for(lambda: (s := group_status(api, "big")).get("scheduled") == 4 and s)
        assert condition(final)["reason"] == "Scheduled"
        # Retries aggregate into the Event of their message. A cycle that runs between the two
        # deletions sees rack-1 half free and says so: a second message, not a duplicate.
        said = [e["message"] for e in _failures(api, "big-0")]
        assert len(said) == len(set(said)), said


def _failures(api: ApiClient, pod: str) -> list[dict[str, Any]]:
    return [e for e in events_for(api, pod) if e["reason"] == "FailedScheduling"]


def test_a_failed_bind_releases_its_gpus_and_the_pod_lands_in_the_gangs_rack_on_retry(
    apiserver: ApiServer, api: ApiClient, kubeconfig: Path
) -> None:
    _two_racks(api)
    apiserver.faults.fail(500, method="POST", path=r"/pods/w-2/binding$", times=1)
    with running_operator(kubeconfig) as runtime:
        api.create(gang("w", 4))
        for i in range(4):
            api.create(gpu_pod(f"w-{i}", 4, group="w"))
        wait_for(
            lambda: all(placement_of(pods(api)[f"default/w-{i}"]) for i in range(4)),
            message=lambda: f"w bound: {dump(pods(api))}",
        )
        assert len({_rack_of(api, f"default/w-{i}") for i in range(4)}) == 1
        assert_no_gpu_shared(api)
        rejected = [e for e in _failures(api, "w-2") if "Binding rejected" in e["message"]]
        assert len(rejected) == 1, dump(events_for(api, "w-2"))
        wait_for(lambda: runtime.scheduler.idle, message="no reservation left behind")
        assert runtime.scheduler.state.ledger.reserved_gpus() == 0


def test_a_recreated_gang_pod_returns_to_its_rack_or_waits_there(
    apiserver: ApiServer, api: ApiClient, kubeconfig: Path
) -> None:
    _two_racks(api)
    with running_operator(kubeconfig):
        api.create(gang("w", 4))
        for i in range(4):
            api.create(gpu_pod(f"w-{i}", 4, group="w"))
        wait_for(lambda: all(placement_of(pods(api)[f"default/w-{i}"]) for i in range(4)))
        rack = _rack_of(api, "default/w-0")
        # Deleted and re-created (as a Job controller would): back into the same rack.
        api.delete("pods", "w-0", "default")
        wait_for(lambda: "default/w-0" not in pods(api))
        api.create(gpu_pod("w-0", 4, group="w"))
        wait_for(lambda: placement_of(pods(api)["default/w-0"]))
        assert _rack_of(api, "default/w-0") == rack
        # Now its place is taken by another scheduler's pod: it waits, saying why.
        node, _ = placement_of(pods(api)["default/w-1"])  # type: ignore[misc]
        api.delete("pods", "w-1", "default")
        wait_for(lambda: "default/w-1" not in pods(api))
        api.create(gpu_pod("intruder", 4, scheduler="default-scheduler", node=node))
        uid = api.create(gpu_pod("w-1", 4, group="w"))["metadata"]["uid"]
        failure = wait_for(
            lambda: [e for e in _failures(api, "w-1") if e["involvedObject"]["uid"] == uid],
            message=lambda: dump(group_status(api, "w")),
        )
        assert rack in failure[0]["message"], failure[0]["message"]
        assert placement_of(pods(api)["default/w-1"]) is None
        status = wait_for(lambda: (s := group_status(api, "w")).get("scheduled") == 3 and s)
        assert status["phase"] == "Pending", dump(status)
        assert any(rack in line for line in status["lastAttempt"]["domains"]), dump(status)
        assert_no_gpu_shared(api)


def test_pods_of_the_default_scheduler_count(
    apiserver: ApiServer, api: ApiClient, kubeconfig: Path
) -> None:
    api.create(gpu_node("solo", "zone-a", "rack-1"))
    # Bound by the default scheduler, without GPU indices: 6 of 8 GPUs are in use.
    api.create(gpu_pod("theirs", 6, scheduler="default-scheduler", node="solo"))
    with running_operator(kubeconfig):
        api.create(gpu_pod("too-big", 4))
        api.create(gpu_pod("fits", 2))
        wait_for(lambda: placement_of(pods(api)["default/fits"]))
        failure = wait_for(lambda: _failures(api, "too-big"))
        assert "Insufficient nvidia.com/gpu" in failure[0]["message"], failure[0]["message"]
        assert placement_of(pods(api)["default/too-big"]) is None
        node, gpus = placement_of(pods(api)["default/fits"])  # type: ignore[misc]
        assert (node, len(gpus)) == ("solo", 2)


def test_bad_objects_are_reported_and_everything_else_is_scheduled(
    apiserver: ApiServer, api: ApiClient, kubeconfig: Path
) -> None:
    api.create(gpu_node("good", "zone-a", "rack-1"))
    broken = gpu_node("broken", "zone-a", "rack-1")
    broken["metadata"]["annotations"]["gpusched.io/gpu-topology"] = "{not json"
    api.create(broken)
    # What the CRD's schema and CEL rules can judge, the API server refuses itself, naming
    # the field, before the operator ever sees it.
    invalid = gang("invalid", 2)
    invalid["spec"]["schedulingPolicy"]["basic"] = {}
    with pytest.raises(ApiStatusError) as refused:
        api.create(invalid)
    assert refused.value.status == 422
    assert "spec.schedulingPolicy" in str(refused.value), refused.value
    with running_operator(kubeconfig):
        # What they cannot (a generated name over 253 characters) the operator reports.
        api.create(_workload_with_a_name_too_long())
        api.create(gpu_pod("lost-0", 1, group="invalid"))
        odd = gpu_pod("odd-share", 0)
        odd["metadata"]["annotations"] = {"gpusched.io/gpu-milli": "lots"}
        api.create(odd)
        api.create(gang("fine", 2))
        for i in range(2):
            api.create(gpu_pod(f"fine-{i}", 4, group="fine"))
        wait_for(lambda: all(placement_of(pods(api)[f"default/fine-{i}"]) for i in range(2)))
        status = wait_for(
            lambda: (s := group_status(api, LONG_NAME, plural="workloads")).get("conditions") and s
        )
        materialized = condition(status, "Materialized")
        assert materialized["reason"] == "Invalid", dump(status)
        assert "spec.podGroupTemplates[0].name" in materialized["message"], dump(status)
        wait_for(lambda: [e for e in events_for(api, LONG_NAME) if e["reason"] == "Invalid"])
        share = wait_for(lambda: _failures(api, "odd-share"))
        assert "gpusched.io/gpu-milli" in share[0]["message"], share[0]["message"]
        assert placement_of(pods(api)["default/lost-0"]) is None
        assert placement_of(pods(api)["default/odd-share"]) is None


LONG_NAME = "w" * 200


def _workload_with_a_name_too_long() -> dict[str, Any]:
    """Valid on its own; `<workload>-<template>` is 261 characters, over the 253 allowed."""
    return {
        "apiVersion": "scheduling.gpusched.io/v1alpha1",
        "kind": "Workload",
        "metadata": {"name": LONG_NAME, "namespace": "default"},
        "spec": {
            "podGroupTemplates": [{"name": "t" * 60, "schedulingPolicy": {"gang": {"minCount": 1}}}]
        },
    }

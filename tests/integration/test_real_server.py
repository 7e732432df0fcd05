"""What only a real control plane shows: the garbage collector cascading a Workload's deletion
to the groups the operator made, RBAC holding the operator to exactly what the chart grants,
and a `gpusched run` process killed between the binds of a gang, then restarted, leaving the
server's objects consistent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testing.apiserver import ApiClient, ApiStatusError, wait_for
from testing.cluster.cluster import RealCluster
from testing.cluster.controlplane import OPERATOR_NAMESPACE
from testing.harness import (
    EXAMPLES,
    RACK,
    apply_yaml,
    assert_no_gpu_shared,
    domains,
    gang,
    gpu_node,
    gpu_pod,
    group_status,
    placement_of,
    pods,
    running_operator,
)

OUR_GROUP = "scheduling.gpusched.io"
TRAINING = EXAMPLES / "workloads" / "01-zone-rack-training"


def _children(api: ApiClient, namespace: str) -> list[str]:
    return [
        f"{plural}/{o['metadata']['name']}"
        for plural in ("compositepodgroups", "podgroups")
        for o in api.list(plural, namespace, group=OUR_GROUP)
    ]


@pytest.mark.parametrize("propagation", ["Background", "Foreground"])
def test_deleting_a_workload_cascades_to_its_groups_through_the_garbage_collector(
    propagation: str, apiserver: RealCluster, api: ApiClient, kubeconfig: Path
) -> None:
    apply_yaml(api, *sorted(TRAINING.glob("*workload*.yaml")))
    with running_operator(kubeconfig):
        made = wait_for(lambda: len(_children(api, "ml")) == 3 and _children(api, "ml"))
        owners = {
            ref["kind"]: ref
            for o in api.list("podgroups", "ml", group=OUR_GROUP)
            for ref in o["metadata"]["ownerReferences"]
        }
        assert owners["Workload"]["blockOwnerDeletion"] is True
        api.http.request(
            "DELETE",
            api.path("workloads", "ml", "train", group=OUR_GROUP),
            json={"propagationPolicy": propagation},
        )
        wait_for(lambda: not _children(api, "ml"), timeout=30, message=f"{made} collected")
        wait_for(lambda: api.get_or_none("workloads", "train", "ml", group=OUR_GROUP) is None)


def test_the_operator_can_do_what_the_chart_grants_and_nothing_more(
    apiserver: RealCluster,
) -> None:
    with apiserver.client("operator") as operator:
        assert operator.list("pods") == []
        assert operator.list("podgroups", group=OUR_GROUP) == []
        for forbidden in (
            lambda: operator.list("leases", "default"),  # its Lease lives in its namespace only
            lambda: operator.create(gpu_node("n1", "zone-a", "rack-1")),
            lambda: operator.delete("nodes", "anything"),
            lambda: operator.list("serviceaccounts", OPERATOR_NAMESPACE),
        ):
            with pytest.raises(ApiStatusError) as refused:
                forbidden()
            assert refused.value.status == 403, refused.value


@pytest.fixture
def operator_process(apiserver: RealCluster, kubeconfig: Path, tmp_path: Path) -> list[str]:
    """The command line of a `gpusched run` with the operator's identity, one replica."""
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "operator": {
                    "initialBackoffSeconds": 0.2,
                    "maxBackoffSeconds": 1.0,
                    "bindConcurrency": 1,
                    "leaderElection": {"enabled": False},
                }
            }
        )
    )
    return [
        sys.executable,
        "-m",
        "gpusched.cli",
        "run",
        "--kubeconfig",
        str(kubeconfig),
        "--config",
        str(config),
        "--metrics-address",
        "127.0.0.1:0",
    ]


def _binds(apiserver: RealCluster) -> int:
    return sum(r.method == "POST" and r.path.endswith("/binding") for r in apiserver.requests())


@pytest.mark.parametrize("kill_after", [1, 3])
def test_a_gpusched_run_killed_between_a_gangs_binds_completes_it_after_a_restart(
    kill_after: int,
    apiserver: RealCluster,
    api: ApiClient,
    operator_process: list[str],
    tmp_path: Path,
) -> None:
    for name, rack in (("a1", "rack-1"), ("a2", "rack-1"), ("b1", "rack-2"), ("b2", "rack-2")):
        api.create(gpu_node(name, "zone-a", rack))
    api.create(gang("big", 4))
    members = [f"default/big-{i}" for i in range(4)]
    for i in range(4):
        api.create(gpu_pod(f"big-{i}", 4, group="big"))
    # Binds are slowed so that the process can be killed between two of them.
    apiserver.faults.delay(1.0, method="POST", path=r"/binding$")
    log = (tmp_path / "first.log").open("wb")
    first = subprocess.Popen(operator_process, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: _binds(apiserver) >= kill_after, timeout=60, message="the binds began")
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    apiserver.faults.clear()
    bound_at_kill = sum(bool(placement_of(p)) for k, p in pods(api).items() if k in members)
    second = subprocess.Popen(
        operator_process,
        stdout=(tmp_path / "second.log").open("wb"),
        stderr=subprocess.STDOUT,
        env={**os.environ},
    )
    try:
        wait_for(
            lambda: all(placement_of(pods(api)[k]) for k in members),
            timeout=60,
            message=f"the gang completed after the restart ({bound_at_kill} bound at the kill)",
        )
        wait_for(lambda: group_status(api, "big").get("scheduled") == 4, timeout=30)
        assert_no_gpu_shared(api)
        assert len(domains(api, members, RACK)) == 1
        # No GPU is held for a pod that is gone: once the gang is deleted, a gang needing
        # every GPU of the cluster binds whole.
        for key in members:
            api.delete("pods", key.split("/")[1], "default")
        wait_for(lambda: not any(k in pods(api) for k in members), timeout=30)
        api.create(gang("whole", 4, key=None))
        for i in range(4):
            api.create(gpu_pod(f"whole-{i}", 8, group="whole"))
        wait_for(
            lambda: all(placement_of(pods(api).get(f"default/whole-{i}", {})) for i in range(4)),
            timeout=30,
            message="a gang of every GPU bound after the first gang left",
        )
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(20)


def test_a_bind_the_server_applied_but_whose_answer_was_lost_keeps_its_gpus(
    apiserver: RealCluster, api: ApiClient, kubeconfig: Path
) -> None:
    """The connection is cut after the server bound the pod: the operator cannot know, so the
    GPUs stay held until it reads the pod back, and the next pod never gets them."""
    api.create(gpu_node("only", "zone-a", "rack-1"))
    lost = apiserver.faults.lose(method="POST", path=r"/pods/first/binding$")
    with running_operator(kubeconfig):
        api.create(gpu_pod("first", 8))
        wait_for(lambda: placement_of(pods(api)["default/first"]), message="first bound")
        api.create(gpu_pod("second", 8))
        wait_for(
            lambda: [
                e
                for e in api.list("events", "default")
                if e["involvedObject"]["name"] == "second" and e["reason"] == "FailedScheduling"
            ],
            message="second judged unschedulable",
        )
        assert placement_of(pods(api)["default/second"]) is None
        assert_no_gpu_shared(api)
    assert lost.hits == 1, "the bind's answer was never cut: the test proved nothing"

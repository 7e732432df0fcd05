"""Two `gpusched run` processes sharing one Lease on the real control plane, judged only from
the server's objects and the requests that reached it: the leader killed or stopped between
the binds of a gang, the other replica taking over, and nothing sent by the first once its
renew deadline has passed."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from testing.apiserver import ApiClient, wait_for
from testing.cluster.cluster import RealCluster
from testing.harness import (
    RACK,
    assert_no_gpu_shared,
    domains,
    gang,
    gpu_node,
    gpu_pod,
    placement_of,
    pods,
)

MEMBERS = [f"default/big-{i}" for i in range(4)]
LEASE = {
    # The shortest timing the config accepts with 4 s binds: a stopped leader's renew
    # deadline (5 s) passes well before anyone may take the Lease (10 s).
    "leaseDurationSeconds": 10,
    "renewDeadlineSeconds": 5,
    "retryPeriodSeconds": 1,
}


class Replica:
    """One `gpusched run` process with its own identity (``POD_NAME``) and log file."""

    def __init__(self, name: str, command: list[str], log: Path) -> None:
        self.name, self.log = name, log
        env = {**os.environ, "POD_NAME": name}
        self.process = subprocess.Popen(
            command, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env
        )

    def said(self, text: str) -> bool:
        return text in self.log.read_text(errors="replace")

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGCONT)  # a stopped process cannot act on TERM
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


@pytest.fixture
def replicas(
    apiserver: RealCluster, kubeconfig: Path, tmp_path: Path
) -> Iterator[Callable[[str], Replica]]:
    """Starts replicas on demand (``replicas("a")``); stops every one at the end."""
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "operator": {
                    "initialBackoffSeconds": 0.2,
                    "maxBackoffSeconds": 1.0,
                    "bindConcurrency": 1,
                    "leaderElection": {"enabled": True, **LEASE},
                }
            }
        )
    )
    command = [sys.executable, "-m", "gpusched.cli", "run", "--kubeconfig", str(kubeconfig)]
    command += ["--config", str(config), "--metrics-address", "127.0.0.1:0"]
    started: list[Replica] = []

    def start(name: str) -> Replica:
        replica = Replica(name, command, tmp_path / f"{name}.log")
        started.append(replica)
        return replica

    try:
        yield start
    finally:
        for replica in started:
            replica.stop()


def _lease_holder(api: ApiClient) -> str | None:
    namespace = os.environ["POD_NAMESPACE"]
    lease = api.get_or_none("leases", "gpusched", namespace, group="coordination.k8s.io")
    return (lease or {}).get("spec", {}).get("holderIdentity")


def _binds(apiserver: RealCluster, since: int = 0) -> list[str]:
    return [
        r.name or ""
        for r in apiserver.requests()[since:]
        if r.method == "POST" and r.path.endswith("/binding")
    ]


def _a_gang_on_two_racks(api: ApiClient) -> None:
    #        zone-a
    #    rack-1    rack-2
    #   a1   a2   b1   b2       a gang of 4 × 4 GPUs fits in either rack
    for name, rack in (("a1", "rack-1"), ("a2", "rack-1"), ("b1", "rack-2"), ("b2", "rack-2")):
        api.create(gpu_node(name, "zone-a", rack))
    api.create(gang("big", 4))
    for i in range(4):
        api.create(gpu_pod(f"big-{i}", 4, group="big"))


def _first_leads(start: Callable[[str], Replica], api: ApiClient) -> tuple[Replica, Replica]:
    first = start("replica-a")
    wait_for(lambda: _lease_holder(api) == "replica-a", timeout=60, message="replica-a leads")
    wait_for(lambda: first.said("leading: pods and nodes listed"), timeout=60)
    second = start("replica-b")
    wait_for(lambda: second.said("standing by"), timeout=60, message="replica-b stands by")
    return first, second


def _gang_whole_in_one_rack(api: ApiClient, why: str) -> None:
    wait_for(
        lambda: all(placement_of(pods(api).get(k, {})) for k in MEMBERS),
        timeout=90,
        message=why,
    )
    assert_no_gpu_shared(api)
    assert len(domains(api, MEMBERS, RACK)) == 1


def test_the_leader_killed_between_a_gangs_binds_the_other_replica_completes_it(
    apiserver: RealCluster, api: ApiClient, replicas: Callable[[str], Replica]
) -> None:
    first, _ = _first_leads(replicas, api)
    apiserver.faults.delay(1.0, method="POST", path=r"/binding$")  # room to kill between binds
    _a_gang_on_two_racks(api)
    wait_for(lambda: len(_binds(apiserver)) >= 2, timeout=60, message="the binds began")
    first.process.send_signal(signal.SIGKILL)
    first.process.wait(10)
    apiserver.faults.clear()
    wait_for(lambda: _lease_holder(api) == "replica-b", timeout=60, message="replica-b took over")
    _gang_whole_in_one_rack(api, "replica-b completed the gang replica-a began")


def test_a_stopped_leader_sends_nothing_after_its_renew_deadline(
    apiserver: RealCluster, api: ApiClient, replicas: Callable[[str], Replica]
) -> None:
    first, _ = _first_leads(replicas, api)
    apiserver.faults.delay(1.0, method="POST", path=r"/binding$")
    _a_gang_on_two_racks(api)
    wait_for(lambda: _binds(apiserver), timeout=60, message="replica-a's first bind")
    first.process.send_signal(signal.SIGSTOP)  # three binds of the gang still to send
    # The watches in flight go quiet: once resumed, replica-a must not learn from a watch
    # event that replica-b bound the pods; only its fence can keep its binds from going out.
    apiserver.proxy.silence_watches()
    apiserver.faults.clear()
    wait_for(lambda: _lease_holder(api) == "replica-b", timeout=60, message="replica-b took over")
    _gang_whole_in_one_rack(api, "replica-b bound the rest of the gang")
    settled = len(apiserver.requests())
    first.process.send_signal(signal.SIGCONT)
    wait_for(
        lambda: first.said("standing by: lost the lease"),
        timeout=60,
        message="replica-a, resumed, saw it lost the Lease",
    )
    # Nothing was left to bind: any bind now would be replica-a's, decided before it stopped.
    assert _binds(apiserver, settled) == [], "a replica past its renew deadline sent a bind"
    assert_no_gpu_shared(api)
    assert sum(bool(placement_of(p)) for k, p in pods(api).items() if k in MEMBERS) == 4

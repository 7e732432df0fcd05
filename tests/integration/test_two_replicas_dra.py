"""The Lease's fence holds for ResourceClaims: two `gpusched run` processes on the real control
plane, the leader stopped (SIGSTOP) between the writes of a DRA gang's claims (its finalizer
updates sent, no allocation yet), the other replica taking over and completing the gang, then
the first resumed. Judged from the server's objects and the requests that reached it: no
device in two claims, every pod bound on the node its claim is allocated for, and no claim
written by the old leader once the new one has taken over."""

from __future__ import annotations

import signal
from collections.abc import Callable

import pytest

from testing.apiserver import ApiClient, wait_for
from testing.cluster.cluster import RealCluster
from testing.harness import pods
from tests.integration.test_dra import (  # noqa: F401  (dra_nodes: a fixture)
    NS,
    _assert_no_device_twice,
    _claim_of,
    _devices,
    _gang,
    dra_nodes,
)
from tests.integration.test_two_replicas import (  # noqa: F401  (replicas: a fixture)
    Replica,
    _first_leads,
    _lease_holder,
    replicas,
)

pytestmark = pytest.mark.usefixtures("real_cluster")

FINALIZER_WRITE = r"/resourceclaims/[^/?]+(\?.*)?$"
"""A claim's own object (its finalizer), not its status."""


def _claim_writes(apiserver: RealCluster, since: int = 0) -> list[str]:
    return [
        f"{r.method} {r.path}"
        for r in apiserver.requests()[since:]
        if r.method in ("POST", "PUT", "PATCH", "DELETE") and "/resourceclaims" in r.path
    ]


def _finalizer_writes(apiserver: RealCluster) -> int:
    return sum(
        r.method == "PUT" and "/resourceclaims/" in r.path and "/status" not in r.path
        for r in apiserver.requests()
    )


def test_a_leader_stopped_between_a_dra_gangs_claim_writes_writes_no_claim_after_the_take_over(
    apiserver: RealCluster,
    api: ApiClient,
    dra_nodes: list[str],  # noqa: F811  (before replicas: torn down after they stop)
    replicas: Callable[[str], Replica],  # noqa: F811
) -> None:
    first, _ = _first_leads(replicas, api)
    # Each claim's finalizer update is held 3 s on its way: room to stop the leader after it
    # sent them and before any allocation (each claim's next write) goes out.
    apiserver.faults.delay(3.0, method="PUT", path=FINALIZER_WRITE)
    members = _gang(api, "fence", 4, 2)
    wait_for(lambda: _finalizer_writes(apiserver) >= 1, timeout=90, message="the claim writes")
    first.process.send_signal(signal.SIGSTOP)
    # Replica-a, resumed, must not learn from a watch what replica-b did: only its fence
    # can keep its remaining claim writes from going out.
    apiserver.proxy.silence_watches()
    apiserver.faults.clear()
    allocated_by_a = [
        w for w in _claim_writes(apiserver) if "/status" in w.split("?")[0] and w.startswith("PUT")
    ]
    assert allocated_by_a == [], f"replica-a allocated before it was stopped: {allocated_by_a}"
    wait_for(lambda: _lease_holder(api) == "replica-b", timeout=60, message="replica-b took over")

    def all_bound() -> bool:
        found = pods(api, NS)
        return all(found.get(f"{NS}/{m}", {}).get("spec", {}).get("nodeName") for m in members)

    wait_for(all_bound, timeout=90, message="replica-b completed the gang")
    settled = len(apiserver.requests())
    first.process.send_signal(signal.SIGCONT)
    wait_for(
        lambda: first.said("standing by: lost the lease"),
        timeout=60,
        message="replica-a, resumed, saw it lost the Lease",
    )
    # Replica-b had nothing left to write: any claim write now is replica-a's.
    assert _claim_writes(apiserver, settled) == [], "a replica past its renew deadline wrote"
    _assert_no_device_twice(api)
    for member in members:
        pod = pods(api, NS)[f"{NS}/{member}"]
        claim = _claim_of(api, pod)
        assert claim is not None, pod
        held = _devices(claim)
        assert held is not None, claim
        assert held[0] == pod["spec"]["nodeName"], (held, pod["spec"]["nodeName"])
        assert len(held[1]) == 2, held
        assert pod["metadata"]["annotations"]["gpusched.io/gpus"] == ",".join(map(str, held[1])), (
            "the bind carries the claim's GPUs"
        )

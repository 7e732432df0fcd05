"""Leader election over HTTP: two electors, one Lease on the real API server, each with the
operator's identity (the chart's Role allows the one Lease in the release namespace only)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from kubernetes_asyncio import client

from gpusched.api.config import LeaderElectionConfig
from gpusched.k8s.client import KubeClusterApi
from gpusched.scheduler.leader import LeaderElector
from testing.apiserver import ApiServer
from testing.clock import Clock
from testing.cluster.controlplane import OPERATOR_NAMESPACE


@pytest.mark.asyncio
async def test_two_replicas_one_lease(
    apiserver: ApiServer, kube_configuration: Callable[[], Awaitable[Any]]
) -> None:
    config = LeaderElectionConfig(leaseDurationSeconds=15, renewDeadlineSeconds=10)
    api_a = KubeClusterApi(client.ApiClient(await kube_configuration()))
    api_b = KubeClusterApi(client.ApiClient(await kube_configuration()))
    clock_a, clock_b = Clock(), Clock()
    a = LeaderElector(
        api=api_a, config=config, namespace=OPERATOR_NAMESPACE, identity="replica-a", clock=clock_a
    )
    b = LeaderElector(
        api=api_b, config=config, namespace=OPERATOR_NAMESPACE, identity="replica-b", clock=clock_b
    )
    try:
        assert await a.attempt()
        assert not await b.attempt()
        apiserver.faults.fail(500, method="PUT", path=r"/leases/gpusched$", times=10)
        clock_a.now += 10.5  # a cannot renew past its deadline: it stops acting
        assert not await a.attempt()
        clock_b.now += 15.5  # and b may take over only after the lease duration
        apiserver.faults.clear()
        assert await b.attempt()
        lease = await api_a.get_lease(OPERATOR_NAMESPACE, "gpusched")
        assert lease is not None
        assert lease["spec"]["holderIdentity"] == "replica-b"
        assert lease["spec"]["leaseTransitions"] == 1
        await b.release()
        assert await a.attempt()
    finally:
        await api_a.close()
        await api_b.close()

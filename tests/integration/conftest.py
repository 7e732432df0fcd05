"""Fixtures for the integration tests: a real control plane (testing/cluster), or, for the tests
marked `emulator`, the Kubernetes API emulator on 127.0.0.1 (see ./apiserver).

The real one is a kube-apiserver with etcd and kube-controller-manager built from the
Kubernetes Go modules, started once per session and reset before each test; the operator
talks to it through a fault proxy, with the chart's service-account identity and RBAC. Where
Go is missing the tests that need it skip, naming it. The emulator stays for what a real
server cannot do: faults inside one request, virtual time, its own behaviour (test_apiserver).

- `apiserver`: the server under test (`RealCluster` or `ApiServer`): `faults`,
  `drop_watches`, `expire_watches`, `request_count`, `requests`, `write_kubeconfig`; the test
  fails if it (or, on the real one, a control-plane process or the fake kubelet) failed.
- `crds`: our CRDs, installed (the real control plane applies them with kubectl at start).
- `api`: a synchronous `ApiClient` as cluster admin, straight to the server (no faults).
- `kubeconfig`: a kubeconfig for the operator (pass it explicitly: `kubernetes` and
  `kubernetes_asyncio` read $KUBECONFIG when imported). On the real server: the operator's
  service-account identity, through the fault proxy.
- `kube_configuration`: an async helper building a fresh `kubernetes_asyncio` Configuration
  from that file.
- Real controllers started on demand (testing/cluster/fixtures.py): `workload_job_controller`,
  `job_controller`, `kuberay`, `kueue`, `karpenter`, `kwok`; and `workload_crds` (JobSet, LWS,
  Kubeflow kinds).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from testing.apiserver import ApiClient, ApiServer
from testing.cluster.cluster import RealCluster
from testing.cluster.controlplane import OPERATOR_NAMESPACE, UnavailableError
from testing.cluster.fixtures import (  # noqa: F401 (fixtures)
    job_controller,
    karpenter,
    kuberay,
    kueue,
    kwok,
    workload_crds,
    workload_job_controller,
)

Server = RealCluster | ApiServer


def _on_emulator(request: pytest.FixtureRequest) -> bool:
    return request.node.get_closest_marker("emulator") is not None


@pytest.fixture(scope="session")
def real_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    try:
        with RealCluster.running(tmp_path_factory.mktemp("controlplane")) as cluster:
            yield cluster
    except UnavailableError as missing:
        if os.environ.get("GPUSCHED_REQUIRE_CONTROLPLANE") == "1":  # set by .ci/run
            pytest.fail(str(missing))
        pytest.skip(str(missing))


@pytest.fixture
def apiserver(request: pytest.FixtureRequest) -> Iterator[Server]:
    if _on_emulator(request):
        server = ApiServer(bookmark_interval=0.5).start()
        try:
            yield server
        finally:
            server.stop()
        assert not server.failures, f"the API emulator failed: {server.failures!r}"
        return
    cluster: RealCluster = request.getfixturevalue("real_cluster")
    cluster.reset()
    before = os.environ.get("POD_NAMESPACE")
    os.environ["POD_NAMESPACE"] = OPERATOR_NAMESPACE  # as the chart's Deployment sets it
    try:
        yield cluster
    finally:
        if before is None:
            os.environ.pop("POD_NAMESPACE", None)
        else:
            os.environ["POD_NAMESPACE"] = before
        cluster.proxy.faults.clear()
    assert not cluster.failures, f"the control plane failed: {cluster.failures!r}"
    # Every call the operator made was allowed by the chart's RBAC, or the chart grants less
    # than the operator needs.
    forbidden, cluster.proxy.forbidden[:] = list(cluster.proxy.forbidden), []
    assert not forbidden, f"the chart's RBAC refused the operator: {forbidden}"


@pytest.fixture
def crds(apiserver: Server) -> list[dict[str, Any]]:
    return apiserver.install_crds()


@pytest.fixture
def api(apiserver: Server, crds: list[dict[str, Any]]) -> Iterator[ApiClient]:
    client = apiserver.client() if isinstance(apiserver, RealCluster) else ApiClient(apiserver.url)
    with client:
        yield client


@pytest.fixture
def kubeconfig(apiserver: Server, tmp_path: Path) -> Path:
    return apiserver.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def kube_configuration(kubeconfig: Path) -> Callable[[], Awaitable[Any]]:
    """`await kube_configuration()` -> kubernetes_asyncio.client.Configuration for the server."""

    async def load() -> Any:
        from kubernetes_asyncio import client, config

        configuration = client.Configuration()
        await config.load_kube_config(
            config_file=str(kubeconfig), client_configuration=configuration, persist_config=False
        )
        return configuration

    return load

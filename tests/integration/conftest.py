"""Fixtures for the integration tests: a Kubernetes API emulator on 127.0.0.1 (see ./apiserver).

- `apiserver`: a running `ApiServer` (built-in resources only), stopped after the test; the
  test fails if the emulator itself raised (its `failures`).
- `crds`: installs our CRDs (podgroups, compositepodgroups, workloads) on `apiserver`.
- `api`: a synchronous `ApiClient` on `apiserver` with our CRDs installed.
- `kubeconfig`: a kubeconfig file pointing at `apiserver` (pass it explicitly: `kubernetes`
  and `kubernetes_asyncio` read $KUBECONFIG when imported).
- `kube_configuration`: an async helper building a fresh `kubernetes_asyncio` Configuration
  from that file.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.apiserver import ApiClient, ApiServer


@pytest.fixture
def apiserver() -> Iterator[ApiServer]:
    server = ApiServer(bookmark_interval=0.5).start()
    try:
        yield server
    finally:
        server.stop()
    assert not server.failures, f"the API emulator failed: {server.failures!r}"


@pytest.fixture
def crds(apiserver: ApiServer) -> list[dict[str, Any]]:
    return apiserver.install_crds()


@pytest.fixture
def api(apiserver: ApiServer, crds: list[dict[str, Any]]) -> Iterator[ApiClient]:
    with ApiClient(apiserver.url) as client:
        yield client


@pytest.fixture
def kubeconfig(apiserver: ApiServer, tmp_path: Path) -> Path:
    return apiserver.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def kube_configuration(kubeconfig: Path) -> Callable[[], Awaitable[Any]]:
    """`await kube_configuration()` -> kubernetes_asyncio.client.Configuration for the emulator."""

    async def load() -> Any:
        from kubernetes_asyncio import client, config

        configuration = client.Configuration()
        await config.load_kube_config(
            config_file=str(kubeconfig), client_configuration=configuration, persist_config=False
        )
        return configuration

    return load

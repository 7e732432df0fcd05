"""The operator's API client (gpusched.k8s.client.api_client) trusts no environment per
request: a proxy the environment names for the API server is taken once, at start. It has
a connection for every bind in flight, besides those of status patches, Events and lists."""

from __future__ import annotations

import pytest
from kubernetes_asyncio import client

from gpusched.k8s.client import OTHER_CONNECTIONS, api_client


def configuration(host: str = "https://10.0.0.1:6443") -> client.Configuration:
    made = client.Configuration()
    made.host = host
    return made


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("story", "environment", "want_proxy"),
    [
        ("no proxy variables: straight to the API server", {}, None),
        (
            "HTTPS_PROXY names the proxy for an https API server",
            {"HTTPS_PROXY": "http://proxy.corp:3128"},
            "http://proxy.corp:3128",
        ),
        (
            "NO_PROXY covers the API server: no proxy",
            {"HTTPS_PROXY": "http://proxy.corp:3128", "NO_PROXY": "10.0.0.1"},
            None,
        ),
        (
            "only HTTP_PROXY: an https API server is not proxied",
            {"HTTP_PROXY": "http://proxy.corp:3128"},
            None,
        ),
    ],
)
async def test_the_environments_proxy_is_looked_up_once(
    monkeypatch: pytest.MonkeyPatch, story: str, environment: dict[str, str], want_proxy: str | None
) -> None:
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    made = api_client(configuration())
    try:
        assert made.rest_client.proxy == want_proxy, story
        assert made.rest_client.pool_manager.trust_env is False, story
    finally:
        await made.close()


@pytest.mark.asyncio
async def test_a_proxy_the_kubeconfig_names_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.corp:3128")
    given = configuration()
    given.proxy = "http://kubeconfig-proxy:8080"
    made = api_client(given)
    try:
        assert made.rest_client.proxy == "http://kubeconfig-proxy:8080"
    finally:
        await made.close()


@pytest.mark.asyncio
async def test_every_bind_in_flight_has_a_connection_beside_the_other_requests() -> None:
    given = configuration()
    given.connection_pool_maxsize = 10  # the client's own default on two CPUs
    made = api_client(given, binds=64)
    try:
        assert made.rest_client.pool_manager.connector.limit == 64 + OTHER_CONNECTIONS
    finally:
        await made.close()

"""`TelemetryCache` and the Prometheus client against a stub Prometheus on 127.0.0.1.

The stub (aiohttp) answers ``/api/v1/query`` with bodies shaped like Prometheus 2.x's answers to
our queries (compact JSON, one element per GPU plus one sample-time element per node), or with
whatever failure a case needs. The real server is exercised in tests/integration.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web
from prometheus_client import CollectorRegistry

from gpusched.api.config import TelemetryConfig
from gpusched.telemetry.cache import TelemetryCache
from gpusched.telemetry.prometheus import metric_query, read_answer
from gpusched.telemetry.series import METRICS, SeriesIndex, SkipReason

NOW = 1_800_000_000.0
HEALTHY = {
    METRICS[0]: 40.0,
    METRICS[1]: 70000.0,
    METRICS[2]: 10000.0,
    METRICS[3]: 5.0,
    METRICS[4]: 0.0,
}


def answer(metric: str, gpus: dict[tuple[str, int], float], sample_time: float = NOW - 2) -> str:
    """A compact answer as Prometheus writes it for `metric_query`."""
    result: list[dict[str, Any]] = [
        {"metric": {"Hostname": node, "gpu": str(gpu)}, "value": [NOW, _number(v)]}
        for (node, gpu), v in sorted(gpus.items())
    ]
    for node in sorted({node for node, _ in gpus}):
        result.append(
            {
                "metric": {"Hostname": node, "gpusched_sample_time": "1"},
                "value": [NOW, repr(sample_time)],
            }
        )
    body = {"status": "success", "data": {"resultType": "vector", "result": result}}
    return json.dumps(body, separators=(",", ":"))


def _number(value: float) -> str:
    return "NaN" if value != value else repr(value)


def cluster_answers(nodes: int = 2, gpus: int = 8, **changes: float) -> dict[str, str]:
    """Per metric, the answer for ``nodes`` healthy 8-GPU nodes; ``changes`` maps
    ``"<node>/<gpu>/<metric suffix>"``-style keys (with ``_`` for ``/``) to values."""
    bodies = {}
    for metric, value in HEALTHY.items():
        values = {(f"n{n}", g): value for n in range(nodes) for g in range(gpus)}
        for key, changed in changes.items():
            node, gpu, suffix = key.split("__")
            if metric.endswith(suffix):
                values[node, int(gpu)] = changed
        bodies[metric] = answer(metric, values)
    return bodies


@dataclass
class StubPrometheus:
    """Answers each metric's query with ``bodies[metric]``, or fails as told."""

    bodies: dict[str, str] = field(default_factory=cluster_answers)
    status: int = 200
    delay: float = 0.0
    garbage: str | None = None
    requests: list[dict[str, str]] = field(default_factory=list)
    url: str = ""

    async def handle(self, request: web.Request) -> web.Response:
        query = request.query.get("query", "")
        self.requests.append({"query": query, "auth": request.headers.get("Authorization", "")})
        if self.delay:
            await asyncio.sleep(self.delay)  # a slow server, for the client's timeout
        if self.garbage is not None:
            return web.Response(text=self.garbage, status=self.status)
        metric = next(m for m in METRICS if query == metric_query(m, ("Hostname", "hostname")))
        return web.Response(text=self.bodies[metric], status=self.status)


@pytest_asyncio.fixture
async def stub() -> AsyncIterator[StubPrometheus]:
    server = StubPrometheus()
    app = web.Application()
    app.router.add_get("/api/v1/query", server.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    server.url = f"http://127.0.0.1:{port}"
    yield server
    await runner.cleanup()


def make_cache(
    url: str,
    *,
    known: tuple[str, ...] | None = None,
    clock: Callable[[], float] = lambda: NOW,
    **prometheus: object,
) -> tuple[TelemetryCache, CollectorRegistry]:
    # A generous timeout: a refresh from a local stub that took over a second on a loaded
    # machine failed these tests; only test_timeout asks for a short one, with a slow stub.
    config = TelemetryConfig.model_validate(
        {"prometheus": {"url": url, "timeoutSeconds": 30, **prometheus}, "cacheTtlSeconds": 60}
    )
    registry = CollectorRegistry()
    cache = TelemetryCache(
        config,
        known_nodes=(lambda: known) if known is not None else None,
        registry=registry,
        clock=clock,
    )
    return cache, registry


@pytest.mark.asyncio
async def test_one_refresh_is_one_query_per_metric_for_the_whole_cluster(
    stub: StubPrometheus,
) -> None:
    cache, registry = make_cache(stub.url)
    assert await cache.refresh()
    samples = cache.samples()
    assert samples is not None
    assert len(samples) == 16
    assert samples["n1", 7].temperature_c == 40.0
    assert samples["n1", 7].age_seconds == 2.0
    assert sorted(r["query"] for r in stub.requests) == sorted(
        metric_query(m, ("Hostname", "hostname")) for m in METRICS
    )
    assert registry.get_sample_value("gpusched_telemetry_up") == 1.0
    assert registry.get_sample_value("gpusched_telemetry_gpus") == 16.0
    assert registry.get_sample_value("gpusched_telemetry_age_seconds") == 2.0
    assert cache.describe().summary() == f"prometheus {stub.url} up: 16 GPUs, data 2-2 s old"


@pytest.mark.asyncio
async def test_bad_series_are_counted_in_the_skipped_counter(stub: StubPrometheus) -> None:
    stub.bodies = cluster_answers(**{"n0__3__GPU_TEMP": float("nan")})
    cache, registry = make_cache(stub.url, known=("n0",))
    assert await cache.refresh()
    samples = cache.samples()
    assert samples is not None
    assert ("n0", 3) not in samples
    assert len(samples) == 7

    def skipped(reason: SkipReason) -> float | None:
        return registry.get_sample_value(
            "gpusched_telemetry_skipped_series_total", {"reason": reason.value}
        )

    assert skipped(SkipReason.NOT_FINITE) == 1.0
    assert skipped(SkipReason.INCOMPLETE) == 1.0
    assert skipped(SkipReason.UNKNOWN_NODE) == 5 * 9.0, "8 GPUs and one time series per metric"
    assert skipped(SkipReason.DUPLICATE) == 0.0


@pytest.mark.parametrize(
    ("garbage", "status", "error"),
    [
        pytest.param("<html>502 Bad Gateway</html>", 502, "HTTP 502", id="a proxy's error page"),
        pytest.param("<html>login</html>", 200, "not JSON", id="HTML with status 200"),
        pytest.param('{"status":"error","error":"bad_data"}', 200, "bad_data", id="query error"),
        pytest.param(
            '{"status":"success","data":{"resultType":"matrix","result":[]}}',
            200,
            "not a vector",
            id="a matrix, not a vector",
        ),
        pytest.param(
            '{"status":"success","data":{"resultType":"vector","result":[',
            200,
            "not JSON",
            id="a body cut short",
        ),
    ],
)
@pytest.mark.asyncio
async def test_garbage_keeps_the_last_good_data_and_logs_once_per_change(
    stub: StubPrometheus,
    caplog: pytest.LogCaptureFixture,
    garbage: str,
    status: int,
    error: str,
) -> None:
    cache, registry = make_cache(stub.url)
    assert await cache.refresh()
    stub.garbage, stub.status = garbage, status
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="gpusched.telemetry"):
        assert not await cache.refresh()
        assert not await cache.refresh()
        stub.garbage, stub.status = None, 200
        assert await cache.refresh()
    assert registry.get_sample_value("gpusched_telemetry_up") == 1.0
    # Only ours: a Kopf operator run earlier in this process leaves the root logger at INFO.
    records = [r for r in caplog.records if r.name.startswith("gpusched.")]
    warnings = [r.getMessage() for r in records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert error in warnings[0], warnings
    assert "keeping 16 GPUs' data" in warnings[0]
    infos = [r.getMessage() for r in records if r.levelno == logging.INFO]
    assert infos == [f"telemetry from prometheus {stub.url} is up: 16 GPUs"], infos


@pytest.mark.asyncio
async def test_failure_sets_up_0_and_the_data_ages_until_stale(stub: StubPrometheus) -> None:
    now = [NOW]
    cache, registry = make_cache(stub.url, clock=lambda: now[0])
    assert await cache.refresh()
    stub.garbage, stub.status = "down", 503
    assert not await cache.refresh()
    status = cache.describe()
    assert (status.up, status.gpus) == (False, 16), status
    assert status.last_error is not None
    assert "HTTP 503" in status.last_error
    assert registry.get_sample_value("gpusched_telemetry_up") == 0.0
    now[0] = NOW + 100
    samples = cache.samples()
    assert samples is not None
    assert samples["n0", 0].age_seconds == 102.0
    assert registry.get_sample_value("gpusched_telemetry_age_seconds") == 102.0
    assert "older than 60 s is unknown" in cache.describe().summary()


@pytest.mark.asyncio
async def test_timeout(stub: StubPrometheus) -> None:
    stub.delay = 2.0
    cache, _ = make_cache(stub.url, timeoutSeconds=0.2)
    assert not await cache.refresh()
    assert cache.samples() == {}, "a source without data yet: every GPU unknown"
    assert "Timeout" in (cache.describe().last_error or "")


@pytest.mark.asyncio
async def test_bearer_token_is_read_from_its_file_at_every_refresh(
    stub: StubPrometheus, tmp_path: Path
) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    cache, _ = make_cache(stub.url, bearerTokenFile=str(token))
    assert await cache.refresh()
    token.write_text("rotated")
    assert await cache.refresh()
    assert {r["auth"] for r in stub.requests} == {"Bearer first", "Bearer rotated"}
    token.unlink()
    assert not await cache.refresh()
    assert "bearer token file" in (cache.describe().last_error or "")


@pytest.mark.asyncio
async def test_start_refreshes_in_the_background_and_stop_ends_it(stub: StubPrometheus) -> None:
    config = TelemetryConfig.model_validate(
        {"prometheus": {"url": stub.url}, "cacheTtlSeconds": 0.05}
    )
    cache = TelemetryCache(config, registry=None)
    await cache.start()
    try:
        deadline = asyncio.get_running_loop().time() + 10
        while len(stub.requests) < 3 * len(METRICS):
            assert asyncio.get_running_loop().time() < deadline, stub.requests
            await asyncio.sleep(0.02)  # polling with a deadline
    finally:
        await cache.stop()
    count = len(stub.requests)
    await asyncio.sleep(0.2)  # nothing may happen after stop: there is no condition to await
    assert len(stub.requests) == count, "no refresh after stop"
    assert cache.samples() is not None, "the data stays readable after stop"


@pytest.mark.asyncio
async def test_no_source_configured() -> None:
    cache = TelemetryCache(TelemetryConfig(), registry=None)
    await cache.start()
    assert cache.samples() is None
    assert not await cache.refresh()
    assert cache.describe().summary() == "no telemetry source: GPUs judged by allocation alone"
    await cache.stop()


# ----- answers: the regular-expression path equals json.loads ----------------------------


def _both_ways(body: str, slot: int = 0) -> tuple[object, object]:
    config = TelemetryConfig()
    fast, slow = SeriesIndex(config), SeriesIndex(config)
    read_answer(slot, body, fast)
    read_answer(slot, json.dumps(json.loads(body), indent=1), slow)  # not compact: json path
    return fast.build(), slow.build()


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(cluster_answers()[METRICS[0]], id="healthy cluster"),
        pytest.param(
            cluster_answers(**{"n0__1__GPU_TEMP": float("nan")})[METRICS[0]], id="with a NaN"
        ),
        pytest.param(
            answer(METRICS[0], {("a}{", 0): 1.0, ('q"uote', 1): 2.0, ("x\\y", 2): 3.0}),
            id="labels with braces, quotes and backslashes",
        ),
        pytest.param('{"status":"success","data":{"resultType":"vector","result":[]}}', id="empty"),
        pytest.param(
            json.dumps(
                {
                    "status": "success",
                    "data": {
                        "resultType": "vector",
                        "result": [
                            {"metric": {"Hostname": "a", "gpu": "0"}, "value": [NOW, "1"]},
                            {"metric": {"Hostname": "a"}, "value": "oops"},
                            ["not", "an", "element"],
                            {
                                "metric": {"Hostname": "a", "gpusched_sample_time": "1"},
                                "value": [NOW, repr(NOW)],
                            },
                        ],
                    },
                },
                separators=(",", ":"),
            ),
            id="malformed elements",
        ),
    ],
)
def test_fast_and_json_paths_agree(body: str) -> None:
    fast, slow = _both_ways(body)
    assert fast == slow


def test_malformed_elements_are_skipped_not_fatal() -> None:
    body = json.dumps(
        {
            "status": "success",
            "data": {
                "resultType": "vector",
                "result": [
                    {"metric": {"Hostname": "a", "gpu": "0"}, "value": [NOW, "1"]},
                    {"metric": {"Hostname": "a"}, "value": "oops"},
                    {"metric": {"Hostname": "a", "gpusched_sample_time": "1"}, "value": [NOW, "5"]},
                ],
            },
        }
    )
    index = SeriesIndex(TelemetryConfig())
    read_answer(0, body, index)
    data = index.build()
    assert (list(data.values), dict(data.skipped)) == ([("a", 0)], {SkipReason.MALFORMED: 1})


# ----- TLS ------------------------------------------------------------------------------------


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (made with the openssl command)."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
            "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


@pytest_asyncio.fixture
async def tls_stub(certificate: tuple[Path, Path]) -> AsyncIterator[StubPrometheus]:
    server = StubPrometheus()
    app = web.Application()
    app.router.add_get("/api/v1/query", server.handle)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*certificate)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    server.url = f"https://127.0.0.1:{runner.addresses[0][1]}"
    yield server
    await runner.cleanup()


@pytest.mark.parametrize(
    ("tls", "want_up", "error"),
    [
        pytest.param("ca", True, None, id="caFile trusts the server"),
        pytest.param("insecure", True, None, id="insecureSkipVerify"),
        pytest.param("none", False, "CERTIFICATE_VERIFY_FAILED", id="system trust store: refused"),
    ],
)
@pytest.mark.asyncio
async def test_tls(
    tls_stub: StubPrometheus,
    certificate: tuple[Path, Path],
    tls: str,
    want_up: bool,
    error: str | None,
) -> None:
    options: dict[str, object] = {
        "ca": {"caFile": str(certificate[0])},
        "insecure": {"insecureSkipVerify": True},
        "none": {},
    }[tls]
    cache, _ = make_cache(tls_stub.url, **options)
    assert await cache.refresh() is want_up
    if error is not None:
        assert error in (cache.describe().last_error or ""), cache.describe()
    await cache.stop()


@pytest.mark.asyncio
async def test_an_unreadable_ca_file_fails_loudly_at_start(tmp_path: Path) -> None:
    cache, _ = make_cache("https://127.0.0.1:1", caFile=str(tmp_path / "missing.pem"))
    with pytest.raises(ValueError, match=r"telemetry.prometheus.caFile .*missing.pem"):
        await cache.start()


@pytest.mark.asyncio
async def test_a_read_before_the_nodes_are_listed_is_joined_once_they_are(
    stub: StubPrometheus, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    nodes: set[str] = set()
    cache, _ = make_cache(stub.url)
    cache._known_nodes = lambda: nodes  # the operator's node list, empty before it is listed
    assert await cache.refresh()
    samples = cache.samples()
    assert samples is not None
    assert len(samples) == 0, "every series of a node not listed yet"
    assert cache.joined(), "joined with every node listed (none)"
    nodes.update({"n0", "n1"})
    assert not cache.joined(), "n0 and n1 were listed after the read left their series out"
    assert await cache.join()
    samples = cache.samples()
    assert samples is not None
    assert len(samples) == 16
    assert samples["n0", 3].temperature_c == 40.0
    assert len(stub.requests) == 5, "joined from the answers held, not read again"
    assert not [r for r in caplog.records if r.getMessage().startswith("HTTP Request:")]
    await cache.stop()

"""Prometheus's instant-query API: one query per dcgm-exporter metric for the whole cluster.

Each metric's query (`metric_query`) asks for two things in one answer:

* the value of each GPU, aggregated ``by (<node labels>, gpu)`` with the metric's "worse"
  operator (``max`` for temperature, ``min`` for free memory, …), so that the answer carries
  only the labels we read and duplicate series (GPU sharing, MIG, two scrape jobs) merge to the
  worst value, as `SeriesIndex` merges them;
* the oldest sample time of each node, ``min by (<node labels>) (timestamp(metric))``, marked
  with the label `SAMPLE_TIME_LABEL`. An instant query stamps every value with the evaluation
  time, not the time it was scraped, so without this a value up to the lookback delta (5 min)
  old would pass for fresh.

Answers are parsed by `read_answer` into a `SeriesIndex`. Prometheus writes compact JSON in a
fixed shape; a 40,000-GPU answer is read with one regular expression over the text (a quarter
of the time ``json.loads`` takes to build the objects), after checking that the pattern
accounted for every element. Any answer the pattern does not fully cover — escapes, another
layout, a truncated body — is read with ``json.loads`` instead, with the same result.
"""

from __future__ import annotations

import json
import logging
import re
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpusched.api.config import PrometheusConfig
from gpusched.telemetry.series import (
    GPU_LABEL,
    METRICS,
    SAMPLE_TIME_LABEL,
    WORSE,
    SeriesIndex,
    SkipReason,
)

if TYPE_CHECKING:
    import httpx

__all__ = [
    "PrometheusClient",
    "TelemetryError",
    "metric_query",
    "read_answer",
]

QUERY_PATH = "/api/v1/query"
_PREFIX = '{"status":"success","data":{"resultType":"vector","result":['
_ELEMENT = re.compile(r'\{"metric":\{([^{}]*)\},"value":\[[^,\]]*,"([^"]*)"\]\}')
_ELEMENT_START = '{"metric":'


def _request_lines_at_debug(record: logging.LogRecord) -> bool:
    """httpx logs every request at INFO (``HTTP Request: GET …``); the operator's INFO is
    decisions, binds and leadership, so these become DEBUG lines."""
    if record.levelno == logging.INFO and record.getMessage().startswith("HTTP Request:"):
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger().isEnabledFor(logging.DEBUG)
    return True


def quiet_httpx() -> None:
    """Demotes httpx's request lines to DEBUG (idempotent)."""
    httpx_logger = logging.getLogger("httpx")
    httpx_logger.removeFilter(_request_lines_at_debug)
    httpx_logger.addFilter(_request_lines_at_debug)


class TelemetryError(Exception):
    """Prometheus could not be asked, or answered something other than a vector."""


def metric_query(metric: str, node_labels: Sequence[str]) -> str:
    """The PromQL for one metric (see the module docstring)."""
    slot = METRICS.index(metric)
    nodes = ", ".join(node_labels)
    return (
        f"{WORSE[slot]} by ({nodes}, {GPU_LABEL}) ({metric}) or "
        f'label_replace(min by ({nodes}) (timestamp({metric})), "{SAMPLE_TIME_LABEL}", '
        f'"1", "", "")'
    )


def read_answer(slot: int, body: str, index: SeriesIndex) -> None:
    """Adds the series of one query answer to ``index``; `TelemetryError` if it is not a
    successful vector answer."""
    if body.startswith(_PREFIX) and "\\" not in body:
        matches = _ELEMENT.findall(body, len(_PREFIX))
        # Every element matched, and the body is not cut after one of them.
        if len(matches) == body.count(_ELEMENT_START) and body.rstrip().endswith("]}}"):
            index.add_json_answer(slot, matches)
            return
    _read_json(slot, body, index)


def _read_json(slot: int, body: str, index: SeriesIndex) -> None:
    try:
        answer = json.loads(body)
    except ValueError as err:
        raise TelemetryError(f"answer is not JSON: {err}") from None
    result = _vector(answer)
    for element in result:
        series = _element(element)
        if series is None:
            index.skip(SkipReason.MALFORMED, f"{METRICS[slot]} element {str(element)[:200]}")
            continue
        labels, value = series
        index.add(slot, labels, value, None)


def _vector(answer: Any) -> list[Any]:
    if not isinstance(answer, dict):
        raise TelemetryError(f"answer is a JSON {type(answer).__name__}, not an object")
    if answer.get("status") != "success":
        error = answer.get("error") or answer.get("status")
        raise TelemetryError(f"query failed: {str(error)[:300]}")
    data = answer.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "vector":
        kind = data.get("resultType") if isinstance(data, dict) else type(data).__name__
        raise TelemetryError(f"answer is not a vector (resultType {kind!r})")
    result = data.get("result")
    if not isinstance(result, list):
        raise TelemetryError("answer has no result list")
    return result


def _element(element: Any) -> tuple[dict[str, str], str] | None:
    if not isinstance(element, dict):
        return None
    labels, value = element.get("metric"), element.get("value")
    if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
        return None
    if not isinstance(value, list) or len(value) != 2 or not isinstance(value[1], str):
        return None
    return labels, value[1]


@dataclass(frozen=True, slots=True)
class _Auth:
    token_file: str | None

    def header(self) -> dict[str, str]:
        """Read at every refresh: a projected service-account token is rotated in place."""
        if self.token_file is None:
            return {}
        try:
            with open(self.token_file, encoding="utf-8") as handle:
                token = handle.read().strip()
        except OSError as err:
            raise TelemetryError(f"bearer token file {self.token_file}: {err}") from None
        if not token:
            raise TelemetryError(f"bearer token file {self.token_file} is empty")
        return {"Authorization": f"Bearer {token}"}


class PrometheusClient:
    """Asks one Prometheus server for the dcgm-exporter metrics, concurrently, over one
    connection pool. Use as an async context manager, or call `aclose`."""

    def __init__(self, config: PrometheusConfig, node_labels: Sequence[str]) -> None:
        if config.url is None:
            raise ValueError("PrometheusClient needs telemetry.prometheus.url")
        self.url = config.url.rstrip("/")
        self._queries = [metric_query(m, node_labels) for m in METRICS]
        # Imported here: httpx brings its command line's rich and pygments, a tenth of a
        # second of every start, and most clusters configure no Prometheus.
        import httpx

        quiet_httpx()
        self._auth = _Auth(config.bearer_token_file)
        self._http: httpx.AsyncClient = httpx.AsyncClient(
            base_url=self.url,
            timeout=httpx.Timeout(config.timeout_seconds),
            verify=_verify(config),
            trust_env=False,
            follow_redirects=False,
        )

    async def __aenter__(self) -> PrometheusClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def fetch(self, slot: int) -> str:
        """The body of metric ``METRICS[slot]``'s query; `TelemetryError` on any failure."""
        import httpx  # imported by `__init__` already: a dictionary lookup

        headers = self._auth.header()
        try:
            response = await self._http.get(
                QUERY_PATH, params={"query": self._queries[slot]}, headers=headers
            )
        except httpx.HTTPError as err:
            raise TelemetryError(f"{self.url}: {type(err).__name__}: {err}") from None
        if response.status_code != httpx.codes.OK:
            raise TelemetryError(
                f"{self.url}: HTTP {response.status_code} for {METRICS[slot]}: "
                f"{response.text[:300]}"
            )
        return response.text


def _verify(config: PrometheusConfig) -> ssl.SSLContext | bool:
    if config.insecure_skip_verify:
        return False
    if config.ca_file is not None:
        try:
            return ssl.create_default_context(cafile=config.ca_file)
        except (OSError, ssl.SSLError) as err:
            raise ValueError(f"telemetry.prometheus.caFile {config.ca_file}: {err}") from None
    return True

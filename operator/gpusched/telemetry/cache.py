"""`TelemetryCache`: the operator's view of dcgm-exporter telemetry, refreshed in the background.

Every ``telemetry.cacheTtlSeconds`` (default 10 s) the cache asks Prometheus for the five
metrics (five queries, concurrently, for the whole cluster), indexes the answers in a worker
thread, and swaps the result in. Scheduling cycles call `TelemetryCache.samples`, which costs
nothing: it wraps the current data with the cycle's clock, and ages are computed when the
engine looks a GPU up.

When a refresh fails (Prometheus down, a timeout, garbage), the last good data is kept; its
sample times keep aging, so past ``telemetry.maxAgeSeconds`` every GPU is unknown and the
``telemetry.stale`` policy applies. Failures are logged once per change of state (up → down,
down → up), and exported as ``gpusched_telemetry_up`` and ``gpusched_telemetry_age_seconds``;
without a Prometheus URL those are absent and ``gpusched_telemetry_configured`` is 0.

A read is joined with the node list it was indexed against: series of nodes the operator did
not know then are left out. The operator's first read comes before its nodes are listed, so
while a read left series out as ``unknown_node`` its answers are kept, and indexed again once
the node list has grown (`TelemetryCache.join`, and by itself when `samples` sees new nodes):
a node's telemetry is never dropped because the read came before the node.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable, Collection, Mapping, Sequence

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge

from gpusched.api.config import TelemetryConfig
from gpusched.engine.health import GpuSample
from gpusched.telemetry.prometheus import PrometheusClient, TelemetryError, read_answer
from gpusched.telemetry.series import METRICS, SeriesIndex, SkipReason, TelemetryData
from gpusched.telemetry.status import TelemetryStatus, describe_data

__all__ = ["TelemetryCache"]

logger = logging.getLogger(__name__)

_LABEL_CACHE_SLACK = 1024


class _Gauges:
    """The ``gpusched_telemetry_*`` metrics. ``gpusched_telemetry_configured`` is 1 when a
    Prometheus URL is set, else 0; the gauges that describe the source (``_up``,
    ``_age_seconds``, ``_gpus``) exist only when one is: without a source there is nothing to
    be up or down, and a 0 would paint a dashboard red for a choice, not a fault."""

    def __init__(
        self, registry: CollectorRegistry, age: Callable[[], float], *, configured: bool
    ) -> None:
        self.configured = Gauge(
            "gpusched_telemetry_configured",
            "1 if a Prometheus URL is configured (telemetry.prometheus.url), else 0.",
            registry=registry,
        )
        self.configured.set(1 if configured else 0)
        source_registry = registry if configured else None
        self.up = Gauge(
            "gpusched_telemetry_up",
            "1 if the last telemetry refresh from Prometheus succeeded, else 0 "
            "(absent when no Prometheus is configured).",
            registry=source_registry,
        )
        self.age = Gauge(
            "gpusched_telemetry_age_seconds",
            "Age of the freshest GPU telemetry the scheduler holds (+Inf without data; "
            "absent when no Prometheus is configured).",
            registry=source_registry,
        )
        self.age.set_function(age)
        self.gpus = Gauge(
            "gpusched_telemetry_gpus",
            "GPUs with telemetry in the last successful refresh (absent when no Prometheus "
            "is configured).",
            registry=source_registry,
        )
        self.skipped = Counter(
            "gpusched_telemetry_skipped_series",
            "Telemetry series (or GPUs) left out, by reason.",
            ["reason"],
            registry=registry,
        )
        for reason in SkipReason:
            self.skipped.labels(reason=reason.value)
        self.registry: CollectorRegistry | None = registry
        self._registered = [self.configured, self.skipped]
        if configured:
            self._registered += [self.up, self.age, self.gpus]

    def close(self) -> None:
        """Unregisters the metrics, so that a later cache in this process can register its
        own (tests run operators one after another)."""
        if self.registry is not None:
            for collector in self._registered:
                self.registry.unregister(collector)
            self.registry = None


async def _fetch_all(client: PrometheusClient) -> list[str]:
    """Every metric's answer, asked concurrently; the first failure cancels the others."""
    failure: TelemetryError | None = None
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(client.fetch(s)) for s in range(len(METRICS))]
    except* TelemetryError as errors:
        first = errors.exceptions[0]
        failure = first if isinstance(first, TelemetryError) else TelemetryError(str(first))
    if failure is not None:
        raise failure
    return [task.result() for task in tasks]


class TelemetryCache:
    """dcgm-exporter telemetry from Prometheus, cached; see the module docstring.

    ``known_nodes`` returns the cluster's node names; series of other nodes are skipped and
    counted. ``registry`` receives the ``gpusched_telemetry_*`` metrics (``None``: not
    exported). ``clock`` is the wall clock (Unix seconds, like Prometheus's sample times).
    """

    def __init__(
        self,
        config: TelemetryConfig,
        *,
        known_nodes: Callable[[], Collection[str]] | None = None,
        registry: CollectorRegistry | None = REGISTRY,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._config = config
        self._known_nodes = known_nodes
        self._clock = clock
        url = config.prometheus.url
        self.source: str | None = f"prometheus {url}" if url else None
        self._data: TelemetryData | None = None
        self._bodies: Sequence[str] | None = None
        """The last answers, kept while they left series out as of unknown nodes."""
        self._joined_with: frozenset[str] = frozenset()
        """The nodes the last answers were indexed against (while ``_bodies`` is kept)."""
        self._rejoining: asyncio.Task[bool] | None = None
        self._up = False
        self._last_error: str | None = None
        self._logged_skips: dict[SkipReason, int] = {}
        self._label_cache: dict[str, tuple[str, int] | SkipReason] = {}
        self._client: PrometheusClient | None = None
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._gauges = (
            _Gauges(registry, self._age, configured=self.source is not None)
            if registry is not None
            else None
        )

    # ----- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Refreshes once (failures are logged, not raised), then keeps refreshing in the
        background every ``cacheTtlSeconds``. Does nothing without a Prometheus URL."""
        if self.source is None or self._task is not None:
            return
        self._client = PrometheusClient(self._config.prometheus, self._config.node_labels)
        await self.refresh()
        self._task = asyncio.create_task(self._loop(), name="gpusched-telemetry-refresh")

    async def stop(self) -> None:
        """Stops refreshing and closes the connections; the data stays readable."""
        rejoining, self._rejoining = self._rejoining, None
        if rejoining is not None:
            rejoining.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await rejoining
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()
        if self._gauges is not None:
            self._gauges.close()

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._config.cache_ttl_seconds)
            try:
                await self.refresh()
            except Exception:  # a bug must not stop the refreshes for good
                logger.exception("telemetry refresh crashed; retrying in the next period")

    # ----- reading ------------------------------------------------------------------------

    def samples(self, now: float | None = None) -> Mapping[tuple[str, int], GpuSample] | None:
        """Telemetry keyed by (node name, GPU index) for `build_snapshot`, ages as of ``now``
        (default: the clock). ``None`` when no source is configured; an empty mapping while a
        source exists but has given no data yet (every GPU unknown)."""
        if self.source is None:
            return None
        if not self.joined():
            self._rejoin_soon()
        data = self._data
        if data is None:
            return {}
        return data.view(self._clock() if now is None else now)

    def joined(self) -> bool:
        """Whether Prometheus has answered, and its answer was joined with every node known
        now (no series left out for a node that has since been listed)."""
        if self.source is None:
            return True
        if self._data is None:
            return False
        if self._bodies is None or self._known_nodes is None:
            return True
        return self._joined_with.issuperset(self._known_nodes())

    async def join(self) -> bool:
        """Makes the data joined with the nodes known now: the last answers indexed again
        when they left series of these nodes out, or, before any answer, a read. Returns
        `joined` (False while Prometheus has not answered)."""
        if self.joined():
            return True
        if self._bodies is None:
            await self.refresh()
            return self.joined()
        async with self._lock:
            bodies, known = self._bodies, self._known_nodes
            if bodies is not None and known is not None:
                nodes = frozenset(known())
                data = await asyncio.to_thread(self._index, bodies, nodes)
                self._keep(data, bodies, nodes)
                logger.info(
                    "telemetry joined with the %d nodes listed: %d GPUs",
                    len(nodes),
                    len(data.values),
                )
                self._log_skips(data)
        return self.joined()

    def _rejoin_soon(self) -> None:
        """Starts `join` in the background (a node was listed after the last read)."""
        if self._bodies is None or (self._rejoining and not self._rejoining.done()):
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # read from a thread: the next read in the loop joins
        self._rejoining = loop.create_task(self.join(), name="gpusched-telemetry-rejoin")

    def describe(self, now: float | None = None) -> TelemetryStatus:
        """Which telemetry the scheduler is using, for status, Events and logs."""
        return describe_data(
            self._data,
            self.source,
            self._clock() if now is None else now,
            self._config.max_age_seconds,
            up=self._up,
            last_error=self._last_error,
        )

    # ----- refreshing ---------------------------------------------------------------------

    async def refresh(self) -> bool:
        """Asks Prometheus now; returns whether it answered. One refresh at a time."""
        if self._client is None:
            if self.source is None:
                return False
            self._client = PrometheusClient(self._config.prometheus, self._config.node_labels)
        async with self._lock:
            client = self._client
            try:
                bodies = await _fetch_all(client)
                known = frozenset(self._known_nodes()) if self._known_nodes is not None else None
                data = await asyncio.to_thread(self._index, bodies, known)
            except TelemetryError as err:
                self._failed(str(err))
                return False
            self._keep(data, bodies, known)
            self._succeeded(data)
            return True

    def _keep(
        self, data: TelemetryData, bodies: Sequence[str], known: frozenset[str] | None
    ) -> None:
        """Holds ``data``, and the answers it came from while they left series out as of
        unknown nodes (a node listed later is joined from them)."""
        self._data = data
        if known is not None and data.skipped.get(SkipReason.UNKNOWN_NODE):
            self._bodies, self._joined_with = bodies, known
        else:
            self._bodies, self._joined_with = None, frozenset()

    def _index(self, bodies: Sequence[str], known: Collection[str] | None) -> TelemetryData:
        index = SeriesIndex(self._config, known, self._label_cache)
        for slot, body in enumerate(bodies):
            read_answer(slot, body, index)
        data = index.build()
        if len(self._label_cache) > 2 * (len(data.values) + len(data.node_time)) + (
            _LABEL_CACHE_SLACK
        ):
            self._label_cache.clear()
        return data

    def _failed(self, error: str) -> None:
        if self._up or self._last_error is None:
            kept = f"keeping {len(self._data.values)} GPUs' data" if self._data else "no data"
            logger.warning("telemetry refresh failed: %s; %s until it ages out", error, kept)
        else:
            logger.debug("telemetry refresh failed again: %s", error)
        self._up, self._last_error = False, error
        if self._gauges is not None:
            self._gauges.up.set(0)

    def _succeeded(self, data: TelemetryData) -> None:
        if not self._up:
            logger.info("telemetry from %s is up: %d GPUs", self.source, len(data.values))
        self._up, self._last_error = True, None
        self._log_skips(data)
        if self._gauges is not None:
            self._gauges.up.set(1)
            self._gauges.gpus.set(len(data.values))
            for reason, count in data.skipped.items():
                self._gauges.skipped.labels(reason=reason.value).inc(count)

    def _log_skips(self, data: TelemetryData) -> None:
        """Logs skipped series when what is skipped changes, not at every refresh."""
        if dict(data.skipped) == self._logged_skips:
            return
        self._logged_skips = dict(data.skipped)
        for reason, count in sorted(data.skipped.items()):
            logger.info(
                "telemetry: skipped %d %s (e.g. %s)", count, reason.value, data.examples[reason]
            )

    def _age(self) -> float:
        data = self._data
        newest = data.newest_time() if data is not None else None
        return math.inf if newest is None else max(0.0, self._clock() - newest)

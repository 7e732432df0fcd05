"""Placement-quality metrics on the operator's ``/metrics``: what the cluster could still take.

`update` measures a snapshot with `gpusched.engine.quality.measure` and sets the gauges; the
scheduling loop calls it every few seconds (it takes a few milliseconds at 5,000 nodes). Label
sets of domains that went away are removed, never left at their last value.

Metrics (``level`` is a ``topologyLevels`` node label key or ``cluster``; ``domain`` the
domain's full path, ``zone-a/rack-1``, or ``cluster``):

- ``gpusched_domain_gpus{level,domain}``: GPUs the domain's nodes advertise.
- ``gpusched_domain_free_gpus{level,domain}``: usable, wholly free GPUs.
- ``gpusched_domain_excluded_gpus{level,domain}``: GPUs excluded by telemetry.
- ``gpusched_domain_largest_gang{level,domain,gpus_per_pod}``: how many pods of 1, 2, 4 or 8
  GPUs would fit in the domain at once now.
- ``gpusched_stranded_gpus{level,domain}``: FGD fragmentation against the workload mix, in GPUs.
- ``gpusched_excluded_gpus{reason}``: GPUs excluded by telemetry, by reason.
- ``gpusched_binding_link_tier_total{tier,best}``: multi-GPU bindings by the worst link tier
  they got and the best their node offered.
- ``gpusched_quality_duration_seconds``: how long the last `update` took.
- ``gpusched_pending_oldest_seconds``: age of the oldest pod waiting for a node (set by
  `QualityMetrics.pending`, which the loop calls with its queue).
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge

from gpusched.api.config import SchedulerConfig
from gpusched.engine.quality import ClusterQuality, link_tiers, measure
from gpusched.engine.result import Binding
from gpusched.engine.snapshot import Snapshot
from gpusched.engine.workload import TaskType

_DOMAIN = ("level", "domain")


class QualityMetrics:
    """The gauges, registered in ``registry`` (tests pass their own)."""

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.registry = registry
        self.gpus = Gauge(
            "gpusched_domain_gpus",
            "GPUs the nodes of a topology domain advertise.",
            _DOMAIN,
            registry=registry,
        )
        self.free = Gauge(
            "gpusched_domain_free_gpus",
            "Usable, wholly free GPUs in a topology domain.",
            _DOMAIN,
            registry=registry,
        )
        self.excluded = Gauge(
            "gpusched_domain_excluded_gpus",
            "GPUs of a topology domain excluded by telemetry.",
            _DOMAIN,
            registry=registry,
        )
        self.largest_gang = Gauge(
            "gpusched_domain_largest_gang",
            "Pods of gpus_per_pod whole GPUs that would fit in a topology domain at once now.",
            (*_DOMAIN, "gpus_per_pod"),
            registry=registry,
        )
        self.stranded = Gauge(
            "gpusched_stranded_gpus",
            "Idle GPU capacity the workload mix could not use (FGD fragmentation), in GPUs.",
            _DOMAIN,
            registry=registry,
        )
        self.exclusions = Gauge(
            "gpusched_excluded_gpus",
            "GPUs excluded by telemetry, by reason.",
            ("reason",),
            registry=registry,
        )
        self.link_tier = Counter(
            "gpusched_binding_link_tier",
            "Multi-GPU bindings by the worst link tier given and the best the node offered.",
            ("tier", "best"),
            registry=registry,
        )
        self.duration = Gauge(
            "gpusched_quality_duration_seconds",
            "Time the last placement-quality measurement took.",
            registry=registry,
        )
        self.oldest_pending = Gauge(
            "gpusched_pending_oldest_seconds",
            "Age of the oldest pod of ours waiting for a node (0 when none waits).",
            registry=registry,
        )
        self._domains: set[tuple[str, str]] = set()
        self.last: ClusterQuality | None = None

    def update(
        self,
        snapshot: Snapshot,
        config: SchedulerConfig | None = None,
        bindings: Iterable[Binding] = (),
        workload: tuple[TaskType, ...] | None = None,
    ) -> ClusterQuality:
        """Measures ``snapshot`` and sets every gauge; counts ``bindings`` (the ones made
        since the last call) by link tier. ``config`` names the levels (default: the
        snapshot's) and the NUMA rule of its gang counts; ``workload`` is the mix for
        stranded GPUs (default: the pods held)."""
        started = time.perf_counter()
        levels = config.topology_levels if config is not None else snapshot.levels
        numa = (config or SchedulerConfig()).numa_policy
        quality = measure(snapshot, numa, levels, workload)
        seen: set[tuple[str, str]] = set()
        for domain in quality.domains:
            labels = (domain.level, domain.domain)
            seen.add(labels)
            self.gpus.labels(*labels).set(domain.gpus)
            self.free.labels(*labels).set(domain.free_gpus)
            self.excluded.labels(*labels).set(domain.excluded_gpus)
            self.stranded.labels(*labels).set(domain.stranded_gpus)
            for size, fitting in domain.largest_gang.items():
                self.largest_gang.labels(*labels, str(size)).set(fitting)
        self._forget(self._domains - seen, quality)
        self._domains = seen
        for reason, count in quality.exclusions.items():
            self.exclusions.labels(reason).set(count)
        for (tier, best), count in link_tiers(bindings).items():
            self.link_tier.labels(tier, best).inc(count)
        self.last = quality
        self.duration.set(time.perf_counter() - started)
        return quality

    def _forget(self, gone: set[tuple[str, str]], quality: ClusterQuality) -> None:
        sizes = {str(s) for d in quality.domains for s in d.largest_gang} or {"1", "2", "4", "8"}
        for labels in gone:
            for gauge in (self.gpus, self.free, self.excluded, self.stranded):
                gauge.remove(*labels)
            for size in sizes:
                try:
                    self.largest_gang.remove(*labels, size)
                except KeyError:
                    continue

    def pending(self, created: Iterable[float], now: float) -> None:
        """Sets the oldest-pending age from the creation times (Unix seconds) of the pods
        waiting now; creation time 0 means unknown and is left out."""
        known = [c for c in created if c > 0]
        self.oldest_pending.set(max(0.0, now - min(known)) if known else 0.0)

    def clear(self) -> None:
        """Drops every domain and exclusion series (a replica that lost the Lease stops
        measuring: its last values must not linger beside the leader's)."""
        for gauge in (self.gpus, self.free, self.excluded, self.largest_gang, self.stranded):
            gauge.clear()
        self.exclusions.clear()
        self._domains = set()
        self.last = None

    def close(self) -> None:
        """Unregisters the metrics (tests that build several in one registry)."""
        for metric in (
            self.gpus,
            self.free,
            self.excluded,
            self.largest_gang,
            self.stranded,
            self.exclusions,
            self.link_tier,
            self.duration,
            self.oldest_pending,
        ):
            self.registry.unregister(metric)


_DEFAULT: QualityMetrics | None = None


def default() -> QualityMetrics:
    """The metrics in the process-wide registry, created on first use."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = QualityMetrics()
    return _DEFAULT


def update(
    snapshot: Snapshot,
    config: SchedulerConfig | None = None,
    bindings: Iterable[Binding] = (),
    workload: tuple[TaskType, ...] | None = None,
) -> ClusterQuality:
    """`QualityMetrics.update` on the process-wide metrics (what the scheduling loop calls)."""
    return default().update(snapshot, config, bindings, workload)

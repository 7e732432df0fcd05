"""`SchedulerConfig`: every setting of the scheduler, loaded from YAML and validated loudly.

The chart's ``values.yaml`` mirrors this model one-to-one. Unknown keys are errors: a typo must
never silently fall back to a default.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gpusched.api.errors import InvalidObjectError, from_validation_error

GPU_RESOURCE = "nvidia.com/gpu"


class NumaPolicy(StrEnum):
    """How the GPUs of one multi-GPU pod may spread over NUMA nodes (kubelet Topology Manager's
    words). ``single-numa-node``: all in one NUMA node, or the node does not fit.
    ``best-effort``: as few NUMA nodes as the node allows. ``none``: NUMA is ignored."""

    SINGLE_NUMA_NODE = "single-numa-node"
    BEST_EFFORT = "best-effort"
    NONE = "none"


class StaleTelemetry(StrEnum):
    """What a GPU whose telemetry is older than ``maxAgeSeconds`` (or missing) counts as."""

    USABLE = "usable"
    UNUSABLE = "unusable"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class BinpackConfig(_Strict):
    """Volcano's binpack plugin, same names and formula.

    score = weight × Σ_r w_r·(request_r + used_r)/allocatable_r ÷ Σ_r w_r × 100, summed over the
    resources the pod requests that have a weight. Range [0, 100 × weight].
    """

    weight: float = Field(default=1.0, ge=0)
    cpu: float = Field(default=1.0, ge=0)
    memory: float = Field(default=1.0, ge=0)
    resources: dict[str, float] = Field(default_factory=lambda: {GPU_RESOURCE: 2.0})
    """Per-resource weights of other resources; GPU included by default with weight 2."""

    @model_validator(mode="after")
    def _non_negative(self) -> BinpackConfig:
        for name, weight in self.resources.items():
            if weight < 0:
                raise ValueError(f"resources[{name}] must be >= 0, got {weight}")
        return self


class GpuScoreConfig(_Strict):
    """The seed's three GPU dimensions, each scaled to [0, its weight] and summed.

    ``memoryContinuity``: mean free-memory ratio of the chosen GPUs (telemetry; 0 when unknown
    or stale).
    ``appAffinity``: share of chosen GPUs already used by pods with the same ``app`` label.
    ``fewerPods``: 1 − (pods already on the chosen GPUs ÷ (4 × GPUs chosen)), floored at 0.
    """

    memory_continuity: float = Field(default=40.0, alias="memoryContinuity", ge=0)
    app_affinity: float = Field(default=30.0, alias="appAffinity", ge=0)
    fewer_pods: float = Field(default=50.0, alias="fewerPods", ge=0)


class ScoringConfig(_Strict):
    """Weights of the node scores, summed. A weight of 0 turns a score off (and skips its cost).
    Binpack's weight is ``binpack.weight``, as in Volcano.

    Each score's range before weighting: binpack [0, 100 × binpack.weight]; leastAllocated
    [0, 100]; gpu [0, 120] with the defaults; fragmentation [0, 100] (FGD's sigmoid of the
    fragmentation increase); topology [0, 100] (NVLink 100, SYS ≈ 17, unknown 0; pods of
    fewer than two GPUs 100)."""

    binpack: BinpackConfig = Field(default_factory=BinpackConfig)
    least_allocated_weight: float = Field(default=0.0, alias="leastAllocatedWeight", ge=0)
    gpu: GpuScoreConfig = Field(default_factory=GpuScoreConfig)
    gpu_weight: float = Field(default=1.0, alias="gpuWeight", ge=0)
    fragmentation_weight: float = Field(default=0.0, alias="fragmentationWeight", ge=0)
    topology_weight: float = Field(default=1.0, alias="topologyWeight", ge=0)


class TelemetryConfig(_Strict):
    """Which GPUs count as usable, from dcgm-exporter telemetry."""

    temperature_limit_c: float = Field(default=80.0, alias="temperatureLimitC", gt=0)
    """GPUs hotter than this (°C) are excluded. Default 80 °C."""
    min_free_memory_ratio: float = Field(default=0.3, alias="minFreeMemoryRatio", ge=0, le=1)
    """A GPU with less free framebuffer than this share of its total is excluded (the seed's
    fragmentation threshold). Default 0.3."""
    exclude_xid_errors: bool = Field(default=True, alias="excludeXidErrors")
    """Exclude GPUs reporting a non-zero XID error. Default true."""
    max_age_seconds: float = Field(default=60.0, alias="maxAgeSeconds", gt=0)
    """Samples older than this are unknown, never healthy. Default 60 s."""
    stale: StaleTelemetry = StaleTelemetry.USABLE
    """What a GPU with unknown telemetry counts as; always reported. Default usable."""
    cache_ttl_seconds: float = Field(default=10.0, alias="cacheTtlSeconds", gt=0)
    """How often the operator refreshes telemetry from Prometheus. Default 10 s."""
    exclude_whole_node: bool = Field(default=False, alias="excludeWholeNode")
    """Exclude a node entirely when any of its GPUs is excluded. Default false: single bad
    GPUs are excluded, not their node."""


class SchedulerConfig(_Strict):
    """Everything the scheduler can be told. Defaults are DESIGN §6's."""

    scheduler_name: str = Field(default="gpusched", alias="schedulerName", min_length=1)
    numa_policy: NumaPolicy = Field(default=NumaPolicy.BEST_EFFORT, alias="numaPolicy")
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)
    scoring: ScoringConfig = Field(default_factory=ScoringConfig)
    topology_levels: tuple[str, ...] = Field(
        default=(
            "topology.kubernetes.io/region",
            "topology.kubernetes.io/zone",
            "topology.example.com/block",
            "topology.example.com/rack",
        ),
        alias="topologyLevels",
    )
    """Node label keys from the outermost level in. A domain of one of these keys is
    identified by its full path (zone-a/rack-1), so rack names need not be unique across
    zones; a topology key not listed here forms flat domains of its value alone."""
    backtracking_budget: int = Field(default=64, alias="backtrackingBudget", ge=0)
    """How many extra domain choices the placement of one root group (with everything under
    it) may try beyond the first greedy ones. 0 means greedy, as upstream. Default 64."""
    max_domains_reported: int = Field(default=20, alias="maxDomainsReported", ge=1)
    """At most this many per-domain lines in a group's ``lastAttempt``."""


def load_config(raw: Any, source: str = "SchedulerConfig") -> SchedulerConfig:
    """Validates a parsed YAML/JSON mapping; raises `InvalidObjectError` naming the field."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise InvalidObjectError(source, "", f"must be a mapping, got {type(raw).__name__}")
    try:
        return SchedulerConfig.model_validate(raw)
    except ValidationError as err:
        raise from_validation_error(source, err) from None

"""`SchedulerConfig`: every setting of the scheduler, loaded from YAML and validated loudly.

The chart's ``values.yaml`` mirrors this model one-to-one. Unknown keys are errors: a typo must
never silently fall back to a default.
"""

from __future__ import annotations

import difflib
import re
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gpusched.api.errors import InvalidObjectError, every_error, field_error
from gpusched.api.names import LabelKey

GPU_RESOURCE = "nvidia.com/gpu"


class NumaPolicy(StrEnum):
    """How the GPUs of one multi-GPU pod may spread over NUMA nodes (kubelet Topology Manager's
    words). ``single-numa-node``: all in one NUMA node, or the node does not fit.
    ``best-effort``: as few NUMA nodes as the node allows without a slower link (the best link
    tier comes first). ``none``: NUMA is ignored."""

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

    weight: float = Field(default=0.0, ge=0)
    """Default 0 (off): gpusched's default policy packs by fragmentation instead (see
    `ScoringConfig`); Volcano's own default is 1. The per-resource weights below keep
    Volcano's defaults for whoever turns it on."""
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
    """Three GPU dimensions of the chosen GPUs, each scaled to [0, its weight] and summed.

    ``memoryContinuity``: mean free-memory ratio of the chosen GPUs (telemetry; 0 when unknown
    or stale).
    ``appAffinity``: share of chosen GPUs already used by pods with the same ``app`` label.
    ``fewerPods``: 1 − (pods already on the chosen GPUs ÷ (4 × GPUs chosen)), floored at 0.
    """

    memory_continuity: float = Field(default=40.0, alias="memoryContinuity", ge=0)
    app_affinity: float = Field(default=30.0, alias="appAffinity", ge=0)
    fewer_pods: float = Field(default=50.0, alias="fewerPods", ge=0)


class TieBreakOrder(StrEnum):
    """How nodes of equal score are ordered; the first wins.

    ``interleaved``: name order within each node shape (GPU model, GPU count, allocatable
    resources), shapes interleaved in proportion to their node counts, so that a tie never fills
    one kind of node before the others; on a cluster of one shape it is name order.
    ``name``: node name order. ``shuffled``: one fixed, seeded permutation of the node names
    (every pod prefers the same nodes). ``random``: a fresh seeded order for each pod, drawn
    from a hash of the pod's key, so it is still the same for the same input (kube-scheduler's
    random choice among equal nodes, made reproducible)."""

    INTERLEAVED = "interleaved"
    NAME = "name"
    SHUFFLED = "shuffled"
    RANDOM = "random"


class ShareGpu(StrEnum):
    """Which GPU of a node a GPU share takes when the fragmentation score is on.
    ``bestFit``: the least milli-GPU left over (then a GPU running the same ``app``, then the
    lowest index), and the node is scored for that GPU. ``leastFragmentation``: FGD's own
    choice, the GPU of the best fragmentation score (lowest index among equals)."""

    BEST_FIT = "bestFit"
    LEAST_FRAGMENTATION = "leastFragmentation"


class TieBreakConfig(_Strict):
    """Which of several equally scored nodes wins."""

    order: TieBreakOrder = TieBreakOrder.INTERLEAVED
    """Default ``interleaved``: a consistent preference that mixes node shapes. Measured on
    openb with the default scores: interleaved 4.62 % of GPUs unallocated, shuffled 4.70 %,
    name order (which groups shapes there) 4.89 %, orders by node size or by CPU per GPU
    4.7 to 14.7 %."""
    seed: int = Field(default=0, ge=0, le=2**63 - 1)
    """Seed of ``shuffled`` and ``random``; ignored otherwise. Default 0."""


class ScoringConfig(_Strict):
    """Weights of the node scores, summed. A weight of 0 turns a score off (and skips its cost).
    Binpack's weight is ``binpack.weight``, as in Volcano.

    Each score's range before weighting: binpack [0, 100 × binpack.weight]; leastAllocated
    [0, 100]; gpu [0, 120] with the defaults; fragmentation [0, 100] (FGD's sigmoid of the
    fragmentation increase, floored to a multiple of ``fragmentationStep``); topology [0, 100]
    (NVLink 100, SYS ≈ 17, unknown 0; pods of fewer than two GPUs 100); bestFit, dotProduct
    and packing [0, 100] each.

    The defaults are gpusched's placement policy, measured on Alibaba's openb production trace
    with the published FGD protocol (``gpusched bench openb``, bench/README.md). In order of
    precedence:

    1. FGD's fragmentation score, in steps of one point (``fragmentationWeight`` 1000, so one
       step outweighs everything below). Near no change one point is about 40 milli-GPU of
       fragmentation growth: placements that differ by less are equally good for the cluster.
    2. Topology, for pods of two GPUs or more (weight 1, at most 100 points).
    3. The tie-break order, ``interleaved``: among equal nodes, the same ones win pod after
       pod (so the cluster fills node by node inside a step), and node shapes take turns.

    Why no binpack, best-fit or GPU-dimension term by default: inside a fragmentation step
    they rank nodes by small differences again and undo what the step is for; measured on
    openb (default trace, seeds 42-44): adding binpack costs about 1 pp of GPUs, packing 2.4 pp,
    best fit 0.1 pp, the GPU dimensions 0.05 pp at half the decisions per second. Turn them
    on for other goals. The fragmentation score needs a target workload: `schedule` takes it
    from the pods it sees when the snapshot has none."""

    binpack: BinpackConfig = Field(default_factory=BinpackConfig)
    least_allocated_weight: float = Field(default=0.0, alias="leastAllocatedWeight", ge=0)
    gpu: GpuScoreConfig = Field(default_factory=GpuScoreConfig)
    gpu_weight: float = Field(default=0.0, alias="gpuWeight", ge=0)
    """Weight of the GPU dimensions (`GpuScoreConfig`). Default 0 (off): see above."""
    fragmentation_weight: float = Field(default=1000.0, alias="fragmentationWeight", ge=0)
    """Weight of FGD's fragmentation score. Default 1000: one score step (1000) outweighs every
    other default score (topology, at most 100)."""
    fragmentation_step: float = Field(default=1.0, alias="fragmentationStep", ge=0, le=100)
    """The fragmentation score (0 to 100) is floored to a multiple of this many points before
    weighting. Default 1: FGD's published integer score. 0: the exact sigmoid."""
    fragmentation_share_gpu: ShareGpu = Field(
        default=ShareGpu.BEST_FIT, alias="fragmentationShareGpu"
    )
    """Default ``bestFit``: on openb it places exactly as FGD's own choice does, and it keeps
    whole GPUs free and same-app pods together as without the fragmentation score."""
    topology_weight: float = Field(default=1.0, alias="topologyWeight", ge=0)
    best_fit_weight: float = Field(default=0.0, alias="bestFitWeight", ge=0)
    """FGD paper's best-fit: 100 × (1 − ½·cpu left/largest node cpu − ½·milli-GPU left/largest
    node milli-GPU) after placing, floored to an integer. Default 0 (off)."""
    dot_product_weight: float = Field(default=0.0, alias="dotProductWeight", ge=0)
    """Tetris's alignment: 100 × ½ Σ over cpu and GPU of (request ÷ capacity) × (free ÷
    capacity), higher when a big request meets a node with much of it free. Default 0 (off)."""
    packing_weight: float = Field(default=0.0, alias="packingWeight", ge=0)
    """GPU packing in three tiers: a share on an already used GPU [50, 100] (less left over is
    better), whole GPUs on a partly used node [33, 50], an idle node [0, 33]. Default 0 (off)."""
    domain_fill_weight: float = Field(default=5.0, alias="domainFillWeight", ge=0)
    """Weight of the NVLink-domain fill score: 100 × the share of GPUs in use in the node's
    domain of ``domainKey`` (0 for a node in no domain), so that small jobs fill partly used
    NVLink domains and whole domains stay free for big gangs. Default 5: at most 500 points,
    below one fragmentation step (1000) and above most topology differences. Costs nothing
    where no node carries ``domainKey``."""
    domain_key: LabelKey = Field(default="nvidia.com/gpu.clique", alias="domainKey")
    """The node label whose values are NVLink domains for ``domainFillWeight``. Default
    ``nvidia.com/gpu.clique``, as the NVIDIA GPU stack labels GB200/GB300 NVL72 nodes."""
    tie_break: TieBreakConfig = Field(default_factory=TieBreakConfig, alias="tieBreak")


_LABEL_NAME = r"^[a-zA-Z_][a-zA-Z0-9_]*$"
"""A Prometheus label name (it is written into PromQL ``by (...)`` clauses)."""


class PrometheusConfig(_Strict):
    """Where the operator reads dcgm-exporter metrics: a Prometheus server's query API."""

    url: str | None = Field(default=None, pattern=r"^https?://[^\s]+$")
    """Base URL of Prometheus, e.g. ``http://prometheus.monitoring:9090`` (``/api/v1/query`` is
    appended). Default none: no telemetry source, GPUs are judged by allocation alone."""
    timeout_seconds: float = Field(default=5.0, alias="timeoutSeconds", gt=0, le=300)
    """Timeout of one query (connect and read), in seconds. Default 5 s: well under the cache
    TTL, so a hung server costs one refresh, not the next one too."""
    ca_file: str | None = Field(default=None, alias="caFile", min_length=1)
    """PEM file of the CA that signed Prometheus's certificate (``https`` URLs). Default none:
    the system's trust store."""
    insecure_skip_verify: bool = Field(default=False, alias="insecureSkipVerify")
    """Do not verify Prometheus's TLS certificate. Default false; for tests only."""
    bearer_token_file: str | None = Field(default=None, alias="bearerTokenFile", min_length=1)
    """File holding a bearer token sent as ``Authorization: Bearer …``; re-read at every
    refresh so that a rotated token is picked up. Default none: no Authorization header."""

    @model_validator(mode="after")
    def _tls_choice(self) -> PrometheusConfig:
        if self.ca_file is not None and self.insecure_skip_verify:
            raise ValueError("caFile and insecureSkipVerify exclude each other")
        return self


class TelemetryConfig(_Strict):
    """Which GPUs count as usable, from dcgm-exporter telemetry, and where it comes from."""

    temperature_limit_c: float = Field(default=80.0, alias="temperatureLimitC", gt=0)
    """GPUs hotter than this (°C) are excluded. Default 80 °C."""
    min_free_memory_ratio: float = Field(default=0.3, alias="minFreeMemoryRatio", ge=0, le=1)
    """A GPU with less free framebuffer than this share of its total is excluded: too little
    is left for another job's framebuffer. Default 0.3."""
    exclude_xid_errors: bool = Field(default=True, alias="excludeXidErrors")
    """Exclude GPUs reporting a non-zero XID error. Default true."""
    max_age_seconds: float = Field(default=60.0, alias="maxAgeSeconds", gt=0)
    """Samples older than this are unknown, never healthy. Default 60 s."""
    stale: StaleTelemetry = StaleTelemetry.USABLE
    """What a GPU with unknown telemetry counts as; always reported. Default usable."""
    cache_ttl_seconds: float = Field(default=10.0, alias="cacheTtlSeconds", gt=0)
    """How often the operator refreshes telemetry from Prometheus. Default 10 s."""
    first_read_wait_seconds: float = Field(default=5.0, alias="firstReadWaitSeconds", ge=0)
    """After it starts or takes the Lease over, the operator places no pod until Prometheus
    has answered and its answer is joined with the freshly listed nodes, waiting at most this
    long (seconds); past it, GPUs without telemetry count as ``stale`` says, as when Prometheus
    is down. Without it the first decisions, a whole backlog, would take every GPU for
    unknown. Unused without a Prometheus URL. Default 5 s (a read takes milliseconds)."""
    exclude_whole_node: bool = Field(default=False, alias="excludeWholeNode")
    """Exclude a node entirely when any of its GPUs is excluded. Default false: single bad
    GPUs are excluded, not their node."""
    prometheus: PrometheusConfig = Field(default_factory=PrometheusConfig)
    """The Prometheus server the operator queries; ``simulate --metrics`` does not use it."""
    node_labels: tuple[str, ...] = Field(
        default=("Hostname", "hostname"), alias="nodeLabels", min_length=1, max_length=8
    )
    """Labels naming a series' node, tried in order; the first one present and non-empty wins.
    Default ``Hostname`` then ``hostname`` (dcgm-exporter's old and new names)."""
    node_mapping: dict[str, str] = Field(default_factory=dict, alias="nodeMapping")
    """Node label value → Kubernetes node name, for exporters whose hostname is not the node's
    name (a pod name, a short hostname). Values not listed are used as they are. Default
    empty."""

    @model_validator(mode="after")
    def _label_names(self) -> TelemetryConfig:
        for label in self.node_labels:
            if not re.match(_LABEL_NAME, label):
                raise ValueError(f"nodeLabels: {label!r} is not a Prometheus label name")
        if len(set(self.node_labels)) != len(self.node_labels):
            raise ValueError(f"nodeLabels: duplicates in {list(self.node_labels)}")
        for value, name in self.node_mapping.items():
            if not value or not name:
                raise ValueError(f"nodeMapping: empty name in {value!r}: {name!r}")
        return self


BIND_TIMEOUT_SECONDS = 4.0
"""How long the operator waits for the answer to one bind before it counts the bind's outcome
as unknown (its GPUs stay held until the pod is read back). The Lease's fencing relies on it:
a bind written just before the renew deadline is answered, or given up, before another
replica can take the Lease."""


class LeaderElectionConfig(_Strict):
    """Only the holder of a ``coordination.k8s.io/v1`` Lease schedules (see
    `gpusched.scheduler.leader`). Defaults are client-go's."""

    enabled: bool = True
    """Off only for a single replica that must not depend on the Lease API."""
    lease_name: str = Field(default="gpusched", alias="leaseName", min_length=1)
    lease_namespace: str | None = Field(default=None, alias="leaseNamespace")
    """Namespace of the Lease; default ``$POD_NAMESPACE``, else ``default``."""
    lease_duration_seconds: float = Field(default=15.0, alias="leaseDurationSeconds", gt=0)
    """How long a Lease nobody renews stays taken. Default 15 s."""
    renew_deadline_seconds: float = Field(default=10.0, alias="renewDeadlineSeconds", gt=0)
    """A holder that could not renew for this long stops binding. Shorter than the lease
    duration, so it stops before anyone else could take over. Default 10 s."""
    retry_period_seconds: float = Field(default=2.0, alias="retryPeriodSeconds", gt=0)
    """How often the Lease is renewed, or tried for. Default 2 s."""

    @model_validator(mode="after")
    def _fenced(self) -> LeaderElectionConfig:
        if not self.retry_period_seconds < self.renew_deadline_seconds:
            raise ValueError("retryPeriodSeconds must be shorter than renewDeadlineSeconds")
        if not self.renew_deadline_seconds < self.lease_duration_seconds:
            raise ValueError("renewDeadlineSeconds must be shorter than leaseDurationSeconds")
        gap = self.lease_duration_seconds - self.renew_deadline_seconds
        if self.enabled and not gap > BIND_TIMEOUT_SECONDS:
            raise ValueError(
                f"leaseDurationSeconds ({self.lease_duration_seconds:g}) minus "
                f"renewDeadlineSeconds ({self.renew_deadline_seconds:g}) is {gap:g} s, which "
                f"must be longer than the bind timeout ({BIND_TIMEOUT_SECONDS:g} s): a bind "
                "sent just before the renew deadline could otherwise still be in flight when "
                "another replica takes the Lease"
            )
        return self


class OperatorConfig(_Strict):
    """How the running operator queues, retries and binds (not used by ``simulate``)."""

    batch_window_seconds: float = Field(default=0.02, alias="batchWindowSeconds", ge=0, le=5)
    """After a change wakes the scheduling loop, wait this long for more changes before
    deciding, so that the pods of a gang created together are placed in one cycle. Default
    20 ms: long enough for a burst of creations, short against a bind's own latency."""
    initial_backoff_seconds: float = Field(default=1.0, alias="initialBackoffSeconds", gt=0)
    """First retry delay of a group (or group-less pod) that did not fit; doubles per failed
    attempt. A change that frees capacity (a pod gone, a node added) retries at once. Default
    1 s, as kube-scheduler."""
    max_backoff_seconds: float = Field(default=10.0, alias="maxBackoffSeconds", gt=0)
    """Longest retry delay. Default 10 s, as kube-scheduler."""
    bind_concurrency: int = Field(default=16, alias="bindConcurrency", ge=1, le=256)
    """Bindings in flight at once, over all groups. Default 16."""
    status_refresh_seconds: float = Field(default=60.0, alias="statusRefreshSeconds", gt=0)
    """A group whose unchanged failure is retried gets its ``lastAttempt.time`` rewritten at
    most this often, and an unchanged ``FailedScheduling`` Event its count. Default 60 s."""
    discovery_interval_seconds: float = Field(
        default=30.0, alias="discoveryIntervalSeconds", ge=0.1, le=3600
    )
    """While a kind gpusched reads is not served (a CRD not installed yet: JobSet, Volcano's
    PodGroup, ComputeDomain), the API server's group list is read this often, and the kind is
    watched from when it appears, without a restart. Default 30 s (one request each time)."""
    leader_election: LeaderElectionConfig = Field(
        default_factory=LeaderElectionConfig, alias="leaderElection"
    )

    @model_validator(mode="after")
    def _ordered(self) -> OperatorConfig:
        if self.max_backoff_seconds < self.initial_backoff_seconds:
            raise ValueError("maxBackoffSeconds must be at least initialBackoffSeconds")
        return self


class PreemptionConfig(_Strict):
    """How a group that does not fit may make room by evicting lower-priority pods."""

    budget: int = Field(default=16, ge=0)
    """Placement trials one preemption plan may make (each tries the whole group in one
    domain with some victims set aside); when spent, the best plan found so far is kept and
    the result says the budget ran out. Default 16: every domain's first trial on a cluster
    of a few zones, and a few more to evict fewer pods. 0: never preempt."""
    evict_other_schedulers_pods: bool = Field(default=True, alias="evictOtherSchedulersPods")
    """Whether pods bound by another scheduler may be victims (only ever lower-priority ones,
    as kube-scheduler would treat them). Default on; off leaves them alone whatever their
    priority."""
    nomination_timeout_seconds: float = Field(default=600.0, alias="nominationTimeoutSeconds", gt=0)
    """Room nominated for a preemptor whose victims are not all gone after this many seconds
    is released and the group planned again. Default 600 s (10 minutes): long enough for a
    generous termination grace period, short enough that a victim stuck terminating (on a
    node that stopped reporting) does not hold the room for good. Only the operator uses it."""
    eviction_retry_seconds: float = Field(default=5.0, alias="evictionRetrySeconds", gt=0)
    """A victim gang left part-evicted (an eviction failed, or an operator stopped midway) is
    finished by evicting the rest; when that fails, it is tried again after this many
    seconds rather than in every cycle. Default 5 s. Only the operator uses it."""


DEFAULT_SCHEDULER = "default-scheduler"
"""kube-scheduler's name, and the name of every pod that names none."""


class OwnerGroupsConfig(_Strict):
    """Implicit gangs for pods that name no group, one per top owner (`gpusched.api.owners`)."""

    namespaces: tuple[str, ...] = ()
    """Namespaces where a pod of ours that names no group joins its top owner's gang; ``*``
    is every namespace. Default none: a pod without a group is placed on its own."""


class SchedulerConfig(_Strict):
    """Everything the scheduler can be told; every field's docstring gives its default."""

    scheduler_name: str = Field(default="gpusched", alias="schedulerName", min_length=1)
    scheduler_name_aliases: tuple[str, ...] = Field(default=(), alias="schedulerNameAliases")
    """Other ``spec.schedulerName`` values whose pods gpusched places as its own, for
    controllers that force a name (KubeRay's batch schedulers write ``volcano`` or
    ``scheduler-plugins-scheduler``). Run no other scheduler answering to them. Never
    ``default-scheduler`` unless `allow_default_scheduler_alias`. Default: none."""
    allow_default_scheduler_alias: bool = Field(default=False, alias="allowDefaultSchedulerAlias")
    """Whether ``schedulerNameAliases`` may name ``default-scheduler``: gpusched would then
    take every pod that names no scheduler, kube-scheduler's included. Default off."""
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
    preemption: PreemptionConfig = Field(default_factory=PreemptionConfig)
    operator: OperatorConfig = Field(default_factory=OperatorConfig)
    owner_groups: OwnerGroupsConfig = Field(default_factory=OwnerGroupsConfig, alias="ownerGroups")

    @model_validator(mode="after")
    def _no_silent_default_scheduler(self) -> SchedulerConfig:
        names = (self.scheduler_name, *self.scheduler_name_aliases)
        if DEFAULT_SCHEDULER in names and not self.allow_default_scheduler_alias:
            where = (
                "schedulerName"
                if self.scheduler_name == DEFAULT_SCHEDULER
                else ("schedulerNameAliases")
            )
            raise field_error(
                f"names {DEFAULT_SCHEDULER}: gpusched would take every pod of the cluster that "
                "names no scheduler from kube-scheduler; set allowDefaultSchedulerAlias: true "
                "if that is meant",
                where,
            )
        if any(not name for name in self.scheduler_name_aliases):
            raise field_error("an alias may not be empty", "schedulerNameAliases")
        return self

    def owner_grouped(self, namespace: str) -> bool:
        """Whether pods without a group in ``namespace`` join their top owner's gang."""
        namespaces = self.owner_groups.namespaces
        return "*" in namespaces or namespace in namespaces

    @property
    def scheduler_names(self) -> frozenset[str]:
        """Every ``spec.schedulerName`` gpusched answers to: its name and its aliases."""
        return frozenset((self.scheduler_name, *self.scheduler_name_aliases))


def load_config(raw: Any, source: str = "SchedulerConfig") -> SchedulerConfig:
    """Validates a parsed YAML/JSON mapping; raises `InvalidObjectError` naming the field."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise InvalidObjectError(source, "", f"must be a mapping, got {type(raw).__name__}")
    try:
        return SchedulerConfig.model_validate(raw)
    except ValidationError as err:
        raise every_error(source, err, _closest_field) from None


def _closest_field(loc: tuple[str | int, ...]) -> str | None:
    """The field of the config's model at ``loc`` (an unknown key) whose name is closest."""
    model: type[BaseModel] = SchedulerConfig
    for part in loc[:-1]:
        field = model.model_fields.get(str(part)) or next(
            (f for f in model.model_fields.values() if f.alias == part), None
        )
        annotation = getattr(field, "annotation", None)
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return None
        model = annotation
    names = [f.alias or name for name, f in model.model_fields.items()]
    close = difflib.get_close_matches(str(loc[-1]), names, n=1, cutoff=0.6)
    return close[0] if close else None

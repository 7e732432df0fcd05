"""The operator's Prometheus metrics (served on ``/metrics`` by `gpusched run`)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

ATTEMPTS = Counter(
    "gpusched_schedule_attempts",
    "Placement attempts of root groups and group-less pods, by result.",
    ["result"],
)
"""``result``: scheduled, unschedulable, invalid, waiting, error."""
DECISION_SECONDS = Histogram(
    "gpusched_decision_duration_seconds",
    "Time the engine took for one scheduling cycle (snapshot and placement).",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
BIND_SECONDS = Histogram(
    "gpusched_bind_duration_seconds",
    "Latency of one pods/binding request.",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)
BINDS = Counter("gpusched_binds", "pods/binding requests, by result.", ["result"])
GANG_SECONDS = Histogram(
    "gpusched_gang_bind_seconds",
    "Time from the first scheduling cycle that saw a root group's pods pending to all of its "
    "pods bound, on the operator's monotonic clock (scheduler/gangtimer.py).",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300),
)
PENDING_GROUPS = Gauge("gpusched_pending_groups", "Root groups with pods waiting for a node.")
RESERVED_GPUS = Gauge("gpusched_reserved_gpus", "GPUs reserved for pods whose bind is in flight.")
LEADER = Gauge("gpusched_leader", "1 while this replica holds the scheduler Lease, else 0.")
NODES_UNUSABLE_TOPOLOGY = Gauge(
    "gpusched_nodes_with_unusable_topology",
    "Nodes whose GPU topology annotation does not parse or disagrees with the GPUs they "
    "advertise (only single-GPU pods are placed there, on the smaller count).",
)
PREEMPTIONS = Counter(
    "gpusched_preemptions",
    "Preemption plans carried out, by result.",
    ["result"],
)
"""``result``: planned (room nominated, evictions begin), evicted (every victim evicted),
stale (a victim refused, a node or the preemptor went: the room is released and planned
again), failed (an eviction or delete the API server refused for another reason), recovered
(a new leader holds the room of a plan in flight again, from its durable record)."""
LEDGER_RELEASES = Counter(
    "gpusched_ledger_releases",
    "Reservations and nominations let go of, by why.",
    ["why"],
)
"""``why``: a `gpusched.scheduler.ledger.Release` label (bound, seen-bound, bind-refused,
room-taken, plan-stale, victims-gone, leadership-lost, …)."""
EVICTED_PODS = Counter("gpusched_preempted_pods", "Pods evicted to make room for a preemptor.")
EVICTED_GPUS = Counter("gpusched_preempted_gpus", "GPUs held by the pods evicted for a preemptor.")
NOMINATION_SECONDS = Histogram(
    "gpusched_nomination_to_bound_seconds",
    "Time from a preemptor's room being nominated to all of its nominated pods bound.",
    buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600),
)

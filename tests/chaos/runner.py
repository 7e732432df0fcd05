"""Seeded chaos runs of the real scheduler on the simulated API server.

One run: a small cluster (two racks), then a few dozen steps, each advancing a fake clock,
delivering due watch events, doing one or two random things — gangs, CompositePodGroups,
loose and default-scheduler pods, deletions and re-creations, finished pods, node removals,
faults on binds, status patches and reads, latency, watch relists, telemetry outages,
operator crashes and leader changes — and running a scheduling cycle. GPUs are checked after
every step; the rest after a quiet spell at the end (faults off, watches caught up).

    python -m tests.chaos.runner --seed 1234          # one run, verbose on violation
    python -m tests.chaos.runner --seed 1234 --trace  # the same, printing every step
    python -m tests.chaos.runner --runs 10000         # many
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import logging
import random
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

from gpusched.api.config import SchedulerConfig, load_config
from gpusched.engine.health import GpuSample
from gpusched.scheduler import decider
from testing.clock import Clock
from testing.engine import topology_annotation
from tests.chaos import invariants
from tests.chaos.sim import (
    GROUP_LABEL,
    Body,
    Faults,
    Replica,
    World,
    _finished,
    inline_to_thread,
    pod_pages,
)
from tests.chaos.trace import Tracer

ZONE = "topology.kubernetes.io/zone"
RACK = invariants.RACK
STEPS = 36
QUIET_ROUNDS = 12
CONFIG: dict[str, Any] = {
    "operator": {
        "batchWindowSeconds": 0,
        "initialBackoffSeconds": 1,
        "maxBackoffSeconds": 8,
        "bindConcurrency": 3,
    }
}
REPRO = "python -m tests.chaos.runner --seed {seed}"


@dataclass
class Totals:
    """What a batch of runs did, for the closing figures."""

    runs: int = 0
    steps: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    actions: Counter[str] = field(default_factory=Counter)
    binds: int = 0
    violations: list[tuple[int, str]] = field(default_factory=list)
    partial_gangs: int = 0
    competing_partial_gangs: int = 0
    """Gangs-mode runs' partial gangs that share their rack with another partial gang: each
    holds part of the room the other needs (their in-flight binds were fenced at a leader
    change and the rack filled with the rest). Named Degraded in their status; counted."""
    overcommitted_nodes: int = 0
    relist_ghosts: list[tuple[int, str]] = field(default_factory=list)
    """Findings of runs where a watch was relisted after missing a node's deletion: Kopf does
    not tell a relist's missing objects, so the cache keeps the node until the leader's next
    resync of pods and nodes (reported apart; GPU double-booking is never put here)."""

    def add(self, other: Totals) -> None:
        self.runs += other.runs
        self.steps += other.steps
        self.faults.update(other.faults)
        self.actions.update(other.actions)
        self.binds += other.binds
        self.violations.extend(other.violations)
        self.partial_gangs += other.partial_gangs
        self.competing_partial_gangs += other.competing_partial_gangs
        self.overcommitted_nodes += other.overcommitted_nodes
        self.relist_ghosts.extend(other.relist_ghosts)

    def report(self) -> str:
        lines = [
            f"chaos: {self.runs} runs, {self.steps} steps, {self.binds} binds applied, "
            f"{len(self.violations)} invariant violations",
            "  faults: " + _counts(self.faults),
            "  actions: " + _counts(self.actions),
            f"  restarts survived: {self.actions['crash']}, "
            f"leader changes: {self.actions['leader-change']}, "
            f"partial gangs with a true status: {self.partial_gangs} "
            f"({self.competing_partial_gangs} competing in one rack, gangs mode), "
            f"nodes overcommitted by a default-scheduler race: {self.overcommitted_nodes}",
            f"  known gap: findings after a relist that missed a node's deletion: "
            f"{len(self.relist_ghosts)} in {len({s for s, _ in self.relist_ghosts})} runs",
        ]
        for seed, message in self.violations[:20]:
            lines.append(f"  VIOLATION seed={seed}: {message}")
            lines.append(f"    repro: {REPRO.format(seed=seed)}")
        return "\n".join(lines)


def _counts(counter: Counter[str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(counter.items())) or "none"


# ----- the cluster -----------------------------------------------------------------------------


def gpu_node(name: str, rack: str, gpus: int) -> Body:
    annotations = {}
    if gpus == 8:
        annotations["gpusched.io/gpu-topology"] = _A100
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {ZONE: "zone-a", RACK: rack},
            "annotations": annotations,
        },
        "status": {
            "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": gpus},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


_A100 = topology_annotation("a100x8") or ""


def gpu_pod(name: str, gpus: int, group: str | None = None, scheduler: str = "gpusched") -> Body:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "creationTimestamp": "2026-11-30T00:00:00Z",
            "labels": {GROUP_LABEL: group} if group else {},
            "annotations": {},
        },
        "spec": {
            "schedulerName": scheduler,
            "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}],
        },
    }


def pod_group(
    name: str, min_count: int, rack: bool, parent: str | None = None, basic: bool = False
) -> Body:
    spec: dict[str, Any] = {
        "schedulingPolicy": {"basic": {}} if basic else {"gang": {"minCount": min_count}}
    }
    if rack:
        spec["schedulingConstraints"] = {"topology": [{"key": RACK}]}
    if parent:
        spec["parentCompositePodGroupName"] = parent
    return {
        "apiVersion": "scheduling.gpusched.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }


def composite(name: str, min_groups: int) -> Body:
    return {
        "apiVersion": "scheduling.gpusched.io/v1alpha1",
        "kind": "CompositePodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedulingPolicy": {"gang": {"minGroupCount": min_groups}},
            "schedulingConstraints": {"topology": [{"key": RACK}]},
        },
    }


# ----- one run ---------------------------------------------------------------------------------


class Run:
    def __init__(
        self,
        seed: int,
        steps: int = STEPS,
        trace: Callable[[str], None] | None = None,
        mode: str = "all",
    ) -> None:
        self.seed = seed
        self.mode = mode
        """``all``: every attack; ``gangs``: gangs big and small, newcomers and faults on
        their binds (500s, drops, late commits, stops, leader changes), nothing deleted,
        nothing foreign: then no gang may end below its minCount."""
        self.rng = random.Random(seed)
        self.steps = steps
        self.clock = Clock()
        self.world = World()
        self.faults = Faults(random.Random(seed * 7919 + 1))
        self.config: SchedulerConfig = load_config(CONFIG)
        self.max_lag = self.rng.choice([0, 1, 2, 4])
        self.telemetry_up = True
        self.replicas: list[Replica] = []
        self.totals = Totals(runs=1)
        self.names = 0
        self.deleted: list[Body] = []
        self.later: list[tuple[int, Callable[[], None]]] = []
        self.step = 0
        self.seen: set[str] = set()
        self.tracer = Tracer(self.world, trace) if trace is not None else None
        """Writes the run's steps as they happen (``--trace``); None: silent."""
        election = self.config.operator.leader_election
        self.renew_deadline = election.renew_deadline_seconds
        self.lease_duration = election.lease_duration_seconds
        self.renewed_at: dict[str, float] = {}
        """When each replica last renewed the Lease (the runner's own account of it)."""
        self.resume_at: dict[str, int] = {}
        """Stopped replicas, by the step at which they are resumed."""
        self.world.authority = self._may_write
        self.world.now = self.clock
        self.quieting = False

    # ----- replicas and leadership -----------------------------------------------------------

    def _telemetry(self) -> dict[tuple[str, int], GpuSample] | None:
        if not self.telemetry_up:
            return None
        healthy = GpuSample(temperature_c=50, fb_free_mib=80000, fb_used_mib=0, age_seconds=1)
        return {
            (name, g): healthy
            for name, body in self.world.nodes.items()
            for g in range(int(body["status"]["allocatable"]["nvidia.com/gpu"]))
        }

    def _start_replica(self) -> Replica:
        self.names += 1
        replica = Replica.start(
            f"replica-{self.names}",
            self.world,
            self.faults,
            self.config,
            self.clock,
            self._telemetry,
            self.rng,
            self.max_lag,
        )
        replica.scheduler.lost_leadership()  # as `gpusched.handlers` starts it
        self.replicas.append(replica)
        return replica

    @property
    def leader(self) -> Replica | None:
        return next((r for r in self.replicas if r.leader), None)

    def _may_write(self, name: str) -> bool:
        """The Lease's truth: ``name`` holds it and renewed it within the renew deadline."""
        holder = self.leader
        renewed = self.renewed_at.get(name, float("-inf"))
        return (
            holder is not None
            and holder.name == name
            and self.clock.now - renewed < (self.renew_deadline)
        )

    def _renew(self, replica: Replica) -> None:
        self.renewed_at[replica.name] = self.clock.now
        replica.valid_until = self.clock.now + self.renew_deadline

    async def _lead(self, replica: Replica) -> None:
        replica.leader = True
        self._renew(replica)

        await replica.scheduler.take_leadership(pod_pages(self.world))

    def _lease_expires(self, old: Replica | None) -> None:
        """Nobody leads until ``old``'s Lease expires: the clock moves on to that moment,
        and what the server was still committing lands meanwhile."""
        if old is not None:
            expiry = self.renewed_at.get(old.name, float("-inf")) + self.lease_duration
            self.clock.now = max(self.clock.now, expiry)
        self.world.commit_late_binds()

    async def crash(self) -> None:
        """The leader's process dies wherever it is; a new one starts and takes the Lease
        once it has expired."""
        old = self.leader
        if old is not None:
            old.crash()
            self.replicas.remove(old)
        self._lease_expires(old)
        await self._lead(self._start_replica())

    async def leader_change(self) -> None:
        """The Lease moves to the standby (started now when there is none). The old holder
        stopped binding before the Lease could expire; the new one lists pods afresh."""
        old = self.leader
        if old is not None and old.stopped:
            return  # `_leases` moves it once it expires
        standby = (
            next((r for r in self.replicas if not r.leader and not r.stopped), None)
            or self._start_replica()
        )
        if old is not None:
            old.leader = False
            old.scheduler.lost_leadership()
            await old.settle()  # the renew deadline passed before the Lease expired
        self._lease_expires(old)
        await self._lead(standby)

    # ----- actions -----------------------------------------------------------------------------

    def _name(self, prefix: str) -> str:
        self.names += 1
        return f"{prefix}{self.names}"

    def new_gang(self) -> None:
        if self.mode == "gangs" and self.rng.random() < 0.4:
            self._big_gang()
            return
        name = self._name("g")
        minimum = self.rng.randint(1, 4)
        size = minimum + self.rng.choice([0, 0, 1])
        gpus = self.rng.choice([1, 2, 2, 4] if minimum > 2 else [1, 2, 4, 8])
        pods = [gpu_pod(f"{name}-{i}", gpus, group=name) for i in range(size)]
        group = pod_group(name, minimum, rack=self.rng.random() < 0.7)
        self._create_together(group, pods)

    def _big_gang(self) -> None:
        """Up to 16 one-GPU pods in one rack, all needed."""
        name = self._name("g")
        size = self.rng.randint(5, 16)
        pods = [gpu_pod(f"{name}-{i}", 1, group=name) for i in range(size)]
        self._create_together(pod_group(name, size, rack=True), pods)

    def new_composite(self) -> None:
        name = self._name("c")
        children = self.rng.randint(1, 3)
        self.world.put_group(composite(name, self.rng.randint(1, children)))
        for c in range(children):
            child = f"{name}-{c}"
            minimum = self.rng.randint(1, 2)
            pods = [gpu_pod(f"{child}-{i}", self.rng.choice([1, 2]), child) for i in range(minimum)]
            self._create_together(pod_group(child, minimum, rack=False, parent=name), pods)

    def _create_together(self, group: Body, pods: list[Body]) -> None:
        if self.rng.random() < 0.3:  # pods first, their group a little later
            for pod in pods:
                self.world.create_pod(pod)
            self.later.append((self.step + 1, lambda: self.world.put_group(group)))
        else:
            self.world.put_group(group)
            for pod in pods:
                self.world.create_pod(pod)

    def loose_pod(self) -> None:
        self.world.create_pod(gpu_pod(self._name("p"), self.rng.choice([0, 1, 2, 4])))

    def foreign_pod(self) -> None:
        """A default-scheduler pod, bound by that scheduler where its count still fits."""
        gpus = self.rng.choice([1, 2])
        used = Counter(
            p["spec"]["nodeName"]
            for p in self.world.live_pods()
            if p["spec"].get("nodeName")
            for _ in range(invariants._requested(p))
        )
        nodes = sorted(
            n
            for n, b in self.world.nodes.items()
            if used[n] + gpus <= int(b["status"]["allocatable"]["nvidia.com/gpu"])
        )
        if nodes:
            pod = gpu_pod(self._name("x"), gpus, scheduler="default-scheduler")
            pod["spec"]["nodeName"] = self.rng.choice(nodes)
            self.world.create_pod(pod)

    def _some_pod(self, where: Callable[[Body], bool] = lambda p: True) -> str | None:
        keys = sorted(k for k, p in self.world.pods.items() if where(p))
        return self.rng.choice(keys) if keys else None

    def delete_pod(self) -> None:
        key = self._some_pod()
        if key is None:
            return
        if self.rng.random() < 0.4:  # graceful: terminating first, gone a step later
            self.world.modify_pod(
                key, lambda p: p["metadata"].__setitem__("deletionTimestamp", "2026-11-30T01:00Z")
            )
            self.later.append((self.step + 1, lambda: self._gone(key)))
        else:
            self._gone(key)

    def _gone(self, key: str) -> None:
        body = self.world.pods.get(key)
        if body is not None:
            self.deleted.append(copy.deepcopy(body))
            self.world.delete_pod(key)

    def recreate_pod(self) -> None:
        """A controller creates a deleted pod again under its name (a new uid, pending)."""
        candidates = [b for b in self.deleted if _key(b) not in self.world.pods]
        if not candidates:
            return
        body = copy.deepcopy(self.rng.choice(candidates))
        if body["spec"]["schedulerName"] != "gpusched":
            return
        body["spec"].pop("nodeName", None)
        body["metadata"]["annotations"] = {}
        for stale in ("deletionTimestamp", "resourceVersion"):
            body["metadata"].pop(stale, None)
        body.pop("status", None)
        self.world.create_pod(body)

    def pod_runs_or_finishes(self) -> None:
        key = self._some_pod(lambda p: bool(p["spec"].get("nodeName")) and not _finished(p))
        if key is not None:  # a finished pod never runs again
            phase = self.rng.choice(["Running", "Running", "Succeeded", "Failed"])
            self.world.modify_pod(key, lambda p: p.__setitem__("status", {"phase": phase}))

    def touch_pod(self) -> None:
        """Someone labels a pending pod: a watch event that may arrive after our bind."""
        key = self._some_pod(lambda p: not p["spec"].get("nodeName"))
        if key is not None:
            stamp = str(self.step)
            self.world.modify_pod(
                key, lambda p: p["metadata"].setdefault("labels", {}).__setitem__("touched", stamp)
            )

    def remove_node(self) -> None:
        if len(self.world.nodes) <= 1:
            return
        name = self.rng.choice(sorted(self.world.nodes))
        self.world.delete_node(name)

        def collect() -> None:  # the pod garbage collector removes its pods
            for key in [k for k, p in self.world.pods.items() if p["spec"].get("nodeName") == name]:
                self._gone(key)

        self.later.append((self.step + 1, collect))

    def relabel_node(self) -> None:
        """A label change on a node: the snapshot's node facts are rebuilt."""
        if self.world.nodes:
            name = self.rng.choice(sorted(self.world.nodes))
            body = copy.deepcopy(self.world.nodes[name])
            body["metadata"]["labels"]["team"] = self._name("t")
            self.world.put_node(body)

    def add_node(self) -> None:
        rack = self.rng.choice(["rack-1", "rack-2"])
        self.world.put_node(gpu_node(self._name("n"), rack, self.rng.choice([4, 8])))

    def set_faults(self) -> None:
        rng = self.rng
        self.faults.bind_rate = rng.choice([0, 0.1, 0.3, 0.6])
        self.faults.status_rate = rng.choice([0, 0.2, 0.5])
        self.faults.other_rate = rng.choice([0, 0.1, 0.3])
        self.faults.max_latency = rng.choice([0, 1, 3, 6])

    def stop_leader(self) -> None:
        """SIGSTOP: the leader freezes wherever it is, now or as it writes one of its next
        binds, and is resumed some steps later (`_leases`)."""
        leader = self.leader
        if leader is None or leader.stopped or leader.name in self.resume_at:
            return
        if self.rng.random() < 0.5:
            leader.api.stop()
        else:
            leader.api.stop_at_bind = leader.api.binds_tried + self.rng.randint(1, 4)
        self.resume_at[leader.name] = self.step + self.rng.randint(1, 8)
        self.faults.injected["sigstop"] += 1

    async def _leases(self) -> None:
        """The Lease over time: the leader renews it unless it is stopped; a stopped one's
        Lease is taken by another replica once it expires; a stopped replica is resumed when
        due, and its elector, finding its renew deadline passed, ends its term first (then
        re-takes the Lease if nobody else has it, listing everything afresh)."""
        leader = self.leader
        if leader is not None and not leader.stopped:
            self._renew(leader)
        elif leader is not None and (
            self.clock.now - self.renewed_at[leader.name] >= self.lease_duration
        ):
            leader.leader = False
            self.world.commit_late_binds()
            standby = next((r for r in self.replicas if not r.stopped and r is not leader), None)
            await self._lead(standby or self._start_replica())
        for replica in list(self.replicas):
            due = self.resume_at.get(replica.name)
            if due is None or (due > self.step and not self.quieting):
                continue
            del self.resume_at[replica.name]
            replica.api.stop_at_bind = None
            replica.api.resume()
            for _ in range(8):  # what was in flight runs on first, as after a real SIGCONT
                await asyncio.sleep(0)
            if self.clock.now >= replica.valid_until:
                replica.scheduler.lost_leadership()
                if replica.leader:
                    await self._lead(replica)  # still its Lease: a new term, a fresh list

    def relist(self) -> None:
        replica = self.rng.choice(self.replicas)
        replica.watch.relist()
        self.faults.injected["watch-410-relist"] += 1

    def watch_fails(self) -> None:
        """A replica's watch is refused (404: a CRD re-installed) for a few steps, then
        started over with a fresh list; what happened meanwhile is only in that list."""
        replica = self.rng.choice(self.replicas)
        replica.watch.cut(self.rng.randint(1, 6), failed=True)
        self.faults.injected["watch-404"] += 1

    def watch_silent(self) -> None:
        """A replica's watch goes quiet for a few steps, then resumes and delivers what it
        held back: meanwhile only the periodic resync's lists show pods created, bound or
        deleted, and the late events must not undo what the lists showed."""
        replica = self.rng.choice(self.replicas)
        replica.watch.cut(self.rng.randint(1, 6), failed=False)
        self.faults.injected["watch-silent"] += 1

    def telemetry_outage(self) -> None:
        self.telemetry_up = not self.telemetry_up
        if not self.telemetry_up:
            self.faults.injected["telemetry-outage"] += 1

    ACTIONS: tuple[tuple[str, int], ...] = (
        ("gang", 12),
        ("composite", 4),
        ("loose", 5),
        ("foreign", 3),
        ("delete", 5),
        ("recreate", 3),
        ("phase", 4),
        ("touch", 4),
        ("remove-node", 1),
        ("add-node", 1),
        ("relabel-node", 2),
        ("faults", 4),
        ("relist", 2),
        ("watch-404", 2),
        ("watch-silent", 2),
        ("telemetry", 2),
        ("crash", 2),
        ("leader-change", 2),
        ("sigstop", 2),
        ("idle", 6),
    )

    GANG_ACTIONS: tuple[tuple[str, int], ...] = (
        ("gang", 10),
        ("loose", 6),
        ("faults", 6),
        ("relist", 2),
        ("watch-404", 1),
        ("watch-silent", 1),
        ("leader-change", 2),
        ("sigstop", 2),
        ("add-node", 1),
        ("idle", 4),
    )

    async def act(self, action: str) -> None:
        self.totals.actions[action] += 1
        if self.tracer is not None:
            self.tracer.action(action)
        simple: dict[str, Callable[[], None]] = {
            "gang": self.new_gang,
            "composite": self.new_composite,
            "loose": self.loose_pod,
            "foreign": self.foreign_pod,
            "delete": self.delete_pod,
            "recreate": self.recreate_pod,
            "phase": self.pod_runs_or_finishes,
            "touch": self.touch_pod,
            "remove-node": self.remove_node,
            "add-node": self.add_node,
            "relabel-node": self.relabel_node,
            "faults": self.set_faults,
            "relist": self.relist,
            "watch-404": self.watch_fails,
            "watch-silent": self.watch_silent,
            "telemetry": self.telemetry_outage,
            "sigstop": self.stop_leader,
            "idle": lambda: None,
        }
        if action in simple:
            simple[action]()
        elif action == "crash":
            await self.crash()
        elif action == "leader-change":
            await self.leader_change()

    # ----- the loop ----------------------------------------------------------------------------

    async def _turn(self, everything: bool = False) -> None:
        self.world.step = self.step
        self.world.commit_late_binds(everything)
        await self._leases()
        for replica in self.replicas:
            replica.watch.step = self.step
            replica.watch.back_if_due(everything)
            if not replica.stopped:
                replica.deliver(everything)
        due = [(s, f) for s, f in self.later if s <= self.step or everything]
        self.later = [(s, f) for s, f in self.later if not (s <= self.step or everything)]
        for _, work in due:
            work()

    async def _cycle(self, quiet: bool = False) -> None:
        for replica in list(self.replicas):
            if not replica.stopped:
                await replica.scheduler.cycle()
        leader = self.leader
        if leader is None or leader.stopped:
            return
        if quiet or self.rng.random() < 0.5:
            await leader.settle()
        if (quiet or self.rng.random() < 0.5) and not leader.stopped:
            await leader.unless_stopped(leader.scheduler.reporter.outbox.flush())
            await leader.unless_stopped(leader.scheduler.reporter.recorder.flush())
        for _ in range(self.rng.randint(0, 3)):
            await asyncio.sleep(0)

    def _check_gpus(self, when: str) -> None:
        late, self.world.late_writes = self.world.late_writes, []
        for message in [*invariants.no_gpu_shared(self.world), *late]:
            if message not in self.seen:  # each once, at the step it first held
                self.seen.add(message)
                self.totals.violations.append((self.seed, f"{when}: {message}"))

    async def run(self) -> Totals:
        for rack, count in (("rack-1", self.rng.randint(1, 3)), ("rack-2", self.rng.randint(1, 3))):
            for _ in range(count):
                self.world.put_node(gpu_node(self._name("n"), rack, self.rng.choice([4, 8, 8])))
        await self._lead(self._start_replica())
        if self.rng.random() < 0.5:
            self._start_replica()  # a standby
        actions = self.GANG_ACTIONS if self.mode == "gangs" else self.ACTIONS
        names = [a for a, _ in actions]
        weights = [w for _, w in actions]
        for step in range(1, self.steps + 1):
            self.step = step
            self.clock.now += self.rng.choice([0.0, 0.3, 1.0, 2.0, 5.0])
            if self.tracer is not None:
                self.tracer.step(step, self.clock.now)
            await self._turn()
            for action in self.rng.choices(names, weights, k=self.rng.randint(1, 2)):
                await self.act(action)
            await self._cycle()
            self._check_gpus(f"step {self.step}")
        await self._quiet()
        self._final_checks()
        self.totals.steps = self.steps
        self.totals.faults = self.faults.injected
        self.totals.binds = self.world.binds
        return self.totals

    async def _quiet(self) -> None:
        """Faults off, watches caught up, cycles until nothing moves."""
        self.faults.calm()
        self.telemetry_up = True
        if self.tracer is not None:
            self.tracer.step(self.step + 1, self.clock.now)
            self.tracer.action("quiet spell: faults off, telemetry up, watches caught up")
        self.quieting = True
        last = -1
        for _ in range(QUIET_ROUNDS):
            self.step += 1
            self.clock.now += 10.0
            await self._turn(everything=True)
            await self._cycle(quiet=True)
            await self._turn(everything=True)
            leader = self.leader
            busy = leader is not None and not leader.scheduler.idle
            if self.world.version == last and not busy:
                break
            last = self.world.version
        self._check_gpus("after the quiet spell")

    def _final_checks(self) -> None:
        found, partial = invariants.gangs_whole_and_in_one_domain(self.world)
        found += invariants.status_agrees_with_pods(self.world)
        found += invariants.ledger_and_cache_agree(self.world, self.replicas)
        self.totals.partial_gangs += partial
        if self.mode == "gangs" and partial:
            alone = invariants.partial_gangs_alone_in_their_rack(self.world)
            if alone:
                found.append(f"gang(s) left below minCount after the faults stopped: {alone}")
            else:
                self.totals.competing_partial_gangs += partial
        self.totals.overcommitted_nodes += len(invariants.overcommitted(self.world))
        lost = sum(r.watch.lost_node_deletions for r in self.replicas)
        findings = self.totals.relist_ghosts if lost else self.totals.violations
        findings.extend((self.seed, message) for message in found)


def _key(body: Body) -> str:
    return f"{body['metadata'].get('namespace', 'default')}/{body['metadata']['name']}"


def run_one(
    seed: int,
    steps: int = STEPS,
    trace: Callable[[str], None] | None = None,
    mode: str = "all",
) -> Totals:
    """One seeded run, in its own event loop; the scheduler's warnings (expected, under
    injected faults) are not printed. ``trace`` is given the run's steps as they happen, one
    line at a time."""
    quiet = logging.getLogger("gpusched")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    run = Run(seed, steps, trace, mode)
    schedule = decider.schedule if run.tracer is None else run.tracer.wrap(decider.schedule)
    try:
        with (
            mock.patch("asyncio.to_thread", inline_to_thread),
            mock.patch.object(decider, "schedule", schedule),
        ):
            return asyncio.run(run.run())
    finally:
        quiet.setLevel(level)


def run_many(
    seeds: range,
    deadline: float | None = None,
    progress: Callable[[int], None] | None = None,
    mode: str = "all",
) -> Totals:
    """Runs ``seeds`` in order, stopping early (counted) once ``deadline`` (time.monotonic)
    has passed."""
    totals = Totals()
    for seed in seeds:
        if deadline is not None and time.monotonic() > deadline:
            break
        totals.add(run_one(seed, mode=mode))
        if progress is not None:
            progress(seed)
    return totals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, help="run this one seed")
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--first", type=int, default=0, help="first seed of --runs")
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument(
        "--trace",
        action="store_true",
        help="with --seed: print each step's actions, object changes and engine decisions",
    )
    parser.add_argument("--mode", choices=("all", "gangs"), default="all")
    args = parser.parse_args(argv)
    if args.trace and args.seed is None:
        parser.error("--trace needs --seed: it prints the steps of one run")
    started = time.monotonic()
    if args.seed is not None:
        totals = run_one(args.seed, args.steps, print if args.trace else None, args.mode)
    else:
        totals = Totals()
        for seed in range(args.first, args.first + args.runs):
            totals.add(run_one(seed, args.steps, mode=args.mode))
    print(totals.report())
    print(f"  took {time.monotonic() - started:.1f} s")
    return 1 if totals.violations else 0


if __name__ == "__main__":
    sys.exit(main())

__all__ = ["Run", "Totals", "main", "run_many", "run_one"]

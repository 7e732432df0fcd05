"""NVLink-domain fragmentation on a simulated GB200 NVL72 cluster: gpusched against
topology-blind placement and against domain-aware first-fit.

    python bench/nvlink_replay.py --quick        # 32 domains, 1 seed, 800 jobs (about a minute)
    python bench/nvlink_replay.py                # 36 domains, seeds 42-44, 3,000 jobs each

The cluster: ``--domains`` NVL72 racks (18 trays × 4 GB200 GPUs, one NVLink domain each,
labelled ``nvidia.com/gpu.clique`` as the NVIDIA stack does; `gpusched.offline.nvlink`), four
racks a block. Jobs, seeded and openb-style (each is placed once, whole, or fails: no queue,
no retry, no preemption), arrive one per time unit and run for an exponential time (mean
``--duration``), sized from a mix of 1 to 144 GPUs: up to 4 GPUs one pod, above that pods of
4 GPUs (whole trays), all or nothing. The mean duration offers about 120 % of capacity, so the
cluster runs full and fragmentation decides what still fits.

Policies:
- **gpusched**: the operator's engine (`schedule`) with its default scoring; a multi-node job
  is a gang constrained to ``nvidia.com/gpu.clique`` (144-GPU jobs: ``segmentSize`` 18).
- **gpusched without domain fill**: as gpusched, with ``scoring.domainFillWeight`` 0 (what
  the NVLink-domain fill score adds).
- **topology-blind**: the same engine and gangs without the topology constraint, and without
  the domain-fill score (gpusched's node scoring otherwise: FGD first).
- **domain-aware first-fit**: a multi-node job takes the first domain, in name order, with
  enough free trays (144-GPU jobs: two such domains, 18 trays each); a small job the first
  node with enough free GPUs.

Measured after a warm-up of two mean durations, at every arrival: occupancy (GPUs allocated),
the GPU demand placed, the share of multi-node jobs placed in the fewest NVLink domains their
size allows (one for up to 72 GPUs; target 100 %), the largest free block of GPUs inside one
domain, and the number of wholly free domains.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from gpusched.api.config import SchedulerConfig
from gpusched.engine.build import build_snapshot
from gpusched.engine.groups import GroupKind, GroupSpec
from gpusched.engine.policy import Policy
from gpusched.engine.request import WHOLE_GPU_MILLI, PodRequest
from gpusched.engine.schedule import schedule
from gpusched.engine.snapshot import Snapshot
from gpusched.offline.nvlink import CLIQUE_LABEL, GPUS_PER_TRAY, TRAYS_PER_DOMAIN, nvl72_nodes

MIX: tuple[tuple[int, float], ...] = (
    (1, 0.18),
    (2, 0.10),
    (4, 0.22),
    (8, 0.12),
    (16, 0.12),
    (32, 0.10),
    (48, 0.06),
    (64, 0.05),
    (72, 0.03),
    (144, 0.02),
)
"""Job sizes in GPUs and their shares of jobs."""
DOMAIN_GPUS = TRAYS_PER_DOMAIN * GPUS_PER_TRAY
POLICIES = ("gpusched", "gpusched without domain fill", "topology-blind", "domain-aware first-fit")


@dataclass(frozen=True, slots=True)
class Job:
    name: str
    gpus: int
    arrival: int
    departure: int

    @property
    def pods(self) -> int:
        return 1 if self.gpus <= GPUS_PER_TRAY else self.gpus // GPUS_PER_TRAY

    @property
    def pod_gpus(self) -> int:
        return self.gpus if self.gpus <= GPUS_PER_TRAY else GPUS_PER_TRAY

    @property
    def fewest_domains(self) -> int:
        return -(-self.pods // TRAYS_PER_DOMAIN)


def jobs(count: int, duration: float, seed: int) -> list[Job]:
    """The seeded arrival sequence: one job per time unit, sizes drawn from `MIX`."""
    rng = np.random.default_rng(seed)
    sizes = np.array([s for s, _ in MIX])
    shares = np.array([p for _, p in MIX])
    drawn = rng.choice(sizes, size=count, p=shares / shares.sum())
    lengths = np.maximum(1, np.round(rng.exponential(duration, size=count))).astype(int)
    return [
        Job(f"j{i:05d}", int(g), i, i + int(n))
        for i, (g, n) in enumerate(zip(drawn, lengths, strict=True))
    ]


@dataclass(slots=True)
class Run:
    policy: str
    occupancy: list[float] = field(default_factory=list)
    largest_free: list[int] = field(default_factory=list)
    free_domains: list[int] = field(default_factory=list)
    demand: int = 0
    placed_demand: int = 0
    multi: int = 0
    multi_whole: int = 0
    seconds: float = 0.0


class Cluster:
    """A placement policy with the cluster state it keeps: `place` a job or fail, `release`
    a job's pods; per node, its NVLink domain (index) and free GPUs."""

    domain_of: np.ndarray
    domains: int

    def place(self, job: Job) -> list[int] | None:
        """The nodes of the job's pods (one entry per pod), or None if it did not fit."""
        raise NotImplementedError

    def release(self, job: Job) -> None:
        raise NotImplementedError

    def free(self) -> np.ndarray:
        raise NotImplementedError


class EngineCluster(Cluster):
    """gpusched's engine, with or without the NVLink constraint and domain-fill score."""

    def __init__(self, domains: int, aware: bool, fill: bool = True) -> None:
        config = SchedulerConfig()
        if not (aware and fill):
            scoring = config.scoring.model_copy(update={"domain_fill_weight": 0.0})
            config = config.model_copy(update={"scoring": scoring})
        self.aware = aware
        self.policy = Policy.of(config)
        self.snapshot: Snapshot = build_snapshot(nvl72_nodes(domains), (), None, config)
        codes, _ = self.snapshot.domain_codes(CLIQUE_LABEL)
        self.domain_of = codes
        self.domains = domains
        self.held: dict[str, list[str]] = {}

    def place(self, job: Job) -> list[int] | None:
        group = None
        key = f"bench/{job.name}"
        if job.pods > 1:
            group = GroupSpec(
                key=key,
                kind=GroupKind.POD_GROUP,
                minimum=job.pods,
                topology_key=CLIQUE_LABEL if self.aware else None,
                segment_size=TRAYS_PER_DOMAIN
                if self.aware and job.pods > TRAYS_PER_DOMAIN
                else None,
            )
        pods = [
            PodRequest(
                key=f"{key}-{i}",
                resources={"cpu": 8000, "memory": 64 * 2**30, "pods": 1},
                gpus=job.pod_gpus,
                group=job.name if group is not None else None,
                created=float(job.arrival),
            )
            for i in range(job.pods)
        ]
        groups = [group] if group else []
        result = schedule(self.snapshot, pods, groups, self.policy, undo=False)
        self.snapshot.settle()
        if len(result.bindings) < job.pods:
            for binding in result.bindings:  # a gang is never partly placed; a guard only
                self.snapshot.forget(binding.pod)
            return None
        index = self.snapshot.index
        self.held[job.name] = [b.pod for b in result.bindings]
        return [index[b.node] for b in result.bindings]

    def release(self, job: Job) -> None:
        for key in self.held.pop(job.name, []):
            self.snapshot.forget(key)
        self.snapshot.settle()

    def free(self) -> np.ndarray:
        gpus = np.diff(self.snapshot.gpu_offset) * WHOLE_GPU_MILLI
        left: np.ndarray = (gpus - self.snapshot.gpu_allocated) // WHOLE_GPU_MILLI
        return left


class FirstFitCluster(Cluster):
    """Domain-aware first-fit: whole jobs into the first domain (name order) that holds them."""

    def __init__(self, domains: int) -> None:
        self.domains = domains
        self.domain_of = np.repeat(np.arange(domains), TRAYS_PER_DOMAIN)
        self.left = np.full(domains * TRAYS_PER_DOMAIN, GPUS_PER_TRAY)
        self.held: dict[str, list[tuple[int, int]]] = {}

    def place(self, job: Job) -> list[int] | None:
        if job.pods == 1:
            fits = np.flatnonzero(self.left >= job.gpus)
            if not fits.size:
                return None
            return self._take(job, [int(fits[0])], job.gpus)
        chosen: list[int] = []
        segments = [TRAYS_PER_DOMAIN] * (job.pods // TRAYS_PER_DOMAIN)
        if job.pods % TRAYS_PER_DOMAIN:
            segments.append(job.pods % TRAYS_PER_DOMAIN)
        used: set[int] = set()
        for size in segments:
            found = None
            for domain in range(self.domains):
                if domain in used:
                    continue
                whole = np.flatnonzero((self.domain_of == domain) & (self.left == GPUS_PER_TRAY))
                if whole.size >= size:
                    found = [int(n) for n in whole[:size]]
                    used.add(domain)
                    break
            if found is None:
                return None
            chosen.extend(found)
        return self._take(job, chosen, GPUS_PER_TRAY)

    def _take(self, job: Job, nodes: list[int], gpus: int) -> list[int]:
        for node in nodes:
            self.left[node] -= gpus
        self.held[job.name] = [(n, gpus) for n in nodes]
        return nodes

    def release(self, job: Job) -> None:
        for node, gpus in self.held.pop(job.name, []):
            self.left[node] += gpus

    def free(self) -> np.ndarray:
        return self.left


def make(policy: str, domains: int) -> Cluster:
    if policy == "gpusched":
        return EngineCluster(domains, aware=True)
    if policy == "gpusched without domain fill":
        return EngineCluster(domains, aware=True, fill=False)
    if policy == "topology-blind":
        return EngineCluster(domains, aware=False)
    return FirstFitCluster(domains)


def replay(policy: str, domains: int, sequence: Sequence[Job], warmup: int) -> Run:
    cluster = make(policy, domains)
    run = Run(policy)
    capacity = domains * DOMAIN_GPUS
    running: list[Job] = []
    started = time.process_time()
    for job in sequence:
        for done in [j for j in running if j.departure <= job.arrival]:
            cluster.release(done)
            running.remove(done)
        nodes = cluster.place(job)
        if nodes is not None:
            running.append(job)
        if job.arrival < warmup:
            continue
        run.demand += job.gpus
        if nodes is not None:
            run.placed_demand += job.gpus
            if job.pods > 1:
                run.multi += 1
                spanned = len({int(cluster.domain_of[n]) for n in nodes})
                run.multi_whole += spanned == job.fewest_domains
        free = cluster.free()
        per_domain = np.bincount(cluster.domain_of, weights=free, minlength=domains)
        run.occupancy.append(100.0 * (capacity - float(free.sum())) / capacity)
        run.largest_free.append(int(per_domain.max()))
        run.free_domains.append(int((per_domain == DOMAIN_GPUS).sum()))
    run.seconds = time.process_time() - started
    return run


def table(runs: dict[str, list[Run]], jobs: int) -> str:
    lines = [
        "| policy | occupancy % | GPU demand placed % | multi-node jobs in fewest NVLink domains % "
        "| largest free block in one domain, GPUs (mean / min) | wholly free domains (mean) "
        "| CPU s per job |",
        "|---|---|---|---|---|---|---|",
    ]
    for policy, per_seed in runs.items():
        occupancy = np.mean([np.mean(r.occupancy) for r in per_seed])
        placed = np.mean([100.0 * r.placed_demand / max(r.demand, 1) for r in per_seed])
        whole = np.mean([100.0 * r.multi_whole / max(r.multi, 1) for r in per_seed])
        largest = np.mean([np.mean(r.largest_free) for r in per_seed])
        smallest = min(min(r.largest_free) for r in per_seed)
        free_domains = np.mean([np.mean(r.free_domains) for r in per_seed])
        per_job = np.mean([r.seconds / jobs for r in per_seed])
        lines.append(
            f"| {policy} | {occupancy:.1f} | {placed:.1f} | {whole:.1f} "
            f"| {largest:.1f} / {smallest} | {free_domains:.2f} | {per_job * 1000:.1f} ms |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="32 domains, 1 seed, 800 jobs")
    parser.add_argument("--domains", type=int, default=36, help="NVL72 domains (default 36)")
    parser.add_argument("--jobs", type=int, default=3000, help="arrivals per seed (default 3000)")
    parser.add_argument("--seeds", default="42-44", help="seeds, e.g. 42-44 (default)")
    parser.add_argument(
        "--duration", type=float, default=0.0, help="mean job duration (default: 120 %% load)"
    )
    parser.add_argument("--policies", default=",".join(POLICIES), help="comma-separated")
    args = parser.parse_args(argv)
    if args.quick:
        args.domains, args.jobs, args.seeds = 32, 800, "42"
    if args.domains < 1 or args.jobs < 1:
        parser.error("--domains and --jobs must be positive")
    first, _, last = args.seeds.partition("-")
    seeds = range(int(first), int(last or first) + 1)
    mean_gpus = sum(s * p for s, p in MIX) / sum(p for _, p in MIX)
    duration = args.duration or 1.2 * args.domains * DOMAIN_GPUS / mean_gpus
    warmup = int(2 * duration)
    if warmup >= args.jobs:
        parser.error(f"--jobs must exceed the warm-up of {warmup} arrivals")
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    unknown = set(policies) - set(POLICIES)
    if unknown:
        parser.error(f"unknown policies {sorted(unknown)}; known: {', '.join(POLICIES)}")
    print(
        f"{args.domains} NVL72 domains ({args.domains * DOMAIN_GPUS} GPUs), {args.jobs} jobs a "
        f"seed, seeds {seeds.start}-{seeds.stop - 1}, mean duration {duration:.0f} "
        f"(about 120 % load), measured after {warmup} arrivals",
        flush=True,
    )
    runs: dict[str, list[Run]] = {p: [] for p in policies}
    for seed in seeds:
        sequence = jobs(args.jobs, duration, seed)
        for policy in policies:
            runs[policy].append(replay(policy, args.domains, sequence, warmup))
    print(table(runs, args.jobs))
    return 0


if __name__ == "__main__":
    sys.exit(main())

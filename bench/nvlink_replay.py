"""NVLink-domain fragmentation on a simulated GB200 NVL72 cluster: gpusched against
topology-blind placement and against domain-aware first-fit.

    python bench/nvlink_replay.py --quick        # 32 domains, 1 seed, 800 jobs (about a minute)
    python bench/nvlink_replay.py                # 36 domains, seeds 42-44, 3,000 jobs each
    python bench/nvlink_replay.py --patience 0   # no queue: each job placed on arrival or never

The cluster: ``--domains`` NVL72 racks (18 trays × 4 GB200 GPUs, one NVLink domain each,
labelled ``nvidia.com/gpu.clique`` as the NVIDIA stack does; `gpusched.offline.nvlink`), four
racks a block. Jobs, seeded and openb-style, arrive one per time unit and run for an
exponential time (mean ``--duration``) from when they start, sized from a mix of 1 to 144
GPUs: up to 4 GPUs one pod, above that pods of 4 GPUs (whole trays), all or nothing. The mean
duration offers about 120 % of capacity, so the cluster runs full and fragmentation decides
what still fits.

The queue is the operator's (`gpusched.scheduler.loop`): each time unit is one cycle; every
waiting job goes to the policy at once, oldest first, each placed whole or holding nothing, so
a job that does not fit blocks none behind it (no reservation, no head-of-line blocking, and
no preemption: all jobs have one priority). A job that failed is tried again only once
something frees capacity, as the operator's back-off does. A job waiting longer than
``--patience`` mean durations (default 1) is withdrawn by its user; ``--patience 0`` is the
openb-style replay without a queue.

Policies:
- **gpusched**: the operator's engine (`schedule`) with its default scoring; a multi-node job
  is a gang constrained to ``nvidia.com/gpu.clique`` (144-GPU jobs: ``segmentSize`` 18).
- **gpusched without domain fill**: as gpusched, with ``scoring.domainFillWeight`` 0 (what
  the NVLink-domain fill score adds).
- **gpusched with Slurm's segment sizes**: as gpusched, but each job asks for the segment
  size NVIDIA's Slurm guidance for GB200 NVL72 recommends (`slurm_segments`): none up to 16
  GPUs, 4 trays for 32 to 72 GPUs, whole domains above; a job is then kept inside one domain
  per segment, not as a whole.
- **topology-blind**: the same engine and gangs without the topology constraint, and without
  the domain-fill score (gpusched's node scoring otherwise: FGD first).
- **domain-aware first-fit**: the same queue; a multi-node job takes the first domain, in name
  order, with enough free trays (144-GPU jobs: two such domains, 18 trays each); a small job
  the first node with enough free GPUs.

Measured after a warm-up of two mean durations, at every arrival: occupancy (GPUs allocated),
the GPU demand placed, the share of multi-node jobs placed in the fewest NVLink domains their
size allows (one for up to 72 GPUs; target 100 %), the largest free block of GPUs inside one
domain, the number of wholly free domains, the share of 72- and 144-GPU jobs placed and the
mean wait of the jobs placed.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Callable, Sequence
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
POLICIES = (
    "gpusched",
    "gpusched without domain fill",
    "gpusched with Slurm's segment sizes",
    "topology-blind",
    "domain-aware first-fit",
)


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
    big: int = 0
    big_placed: int = 0
    waited: list[int] = field(default_factory=list)
    seconds: float = 0.0


class Cluster:
    """A placement policy with the cluster state it keeps: `place` what fits of a batch of
    waiting jobs, `release` a job's pods; per node, its NVLink domain (index) and free GPUs."""

    domain_of: np.ndarray
    domains: int

    def place(self, batch: Sequence[Job]) -> dict[str, list[int]]:
        """Per job placed (whole), the nodes of its pods (one entry per pod)."""
        raise NotImplementedError

    def release(self, job: Job) -> None:
        raise NotImplementedError

    def free(self) -> np.ndarray:
        raise NotImplementedError


class EngineCluster(Cluster):
    """gpusched's engine, with or without the NVLink constraint and domain-fill score."""

    def __init__(
        self,
        domains: int,
        aware: bool,
        fill: bool = True,
        segment: Callable[[Job], int | None] | None = None,
    ) -> None:
        config = SchedulerConfig()
        if not (aware and fill):
            scoring = config.scoring.model_copy(update={"domain_fill_weight": 0.0})
            config = config.model_copy(update={"scoring": scoring})
        self.aware = aware
        self.policy = Policy.of(config)
        self.segment = segment or whole_domains
        self.snapshot: Snapshot = build_snapshot(nvl72_nodes(domains), (), None, config)
        codes, _ = self.snapshot.domain_codes(CLIQUE_LABEL)
        self.domain_of = codes
        self.domains = domains
        self.held: dict[str, list[str]] = {}

    def place(self, batch: Sequence[Job]) -> dict[str, list[int]]:
        """One scheduling cycle, as the operator runs it: every job of ``batch`` handed to
        the engine at once, which takes them oldest first and places each whole or not at
        all (a job that does not fit holds nothing, so it blocks none behind it)."""
        pods: list[PodRequest] = []
        groups: list[GroupSpec] = []
        for job in batch:
            key = f"bench/{job.name}"
            if job.pods > 1:
                groups.append(self._group(job, key))
            pods.extend(
                PodRequest(
                    key=f"{key}-{i}",
                    resources={"cpu": 8000, "memory": 64 * 2**30, "pods": 1},
                    gpus=job.pod_gpus,
                    group=job.name if job.pods > 1 else None,
                    created=float(job.arrival),
                )
                for i in range(job.pods)
            )
        result = schedule(self.snapshot, pods, groups, self.policy, undo=False)
        self.snapshot.settle()
        index = self.snapshot.index
        nodes: dict[str, list[int]] = {}
        keys: dict[str, list[str]] = {}
        for binding in result.bindings:
            name = binding.pod.removeprefix("bench/").rpartition("-")[0]
            nodes.setdefault(name, []).append(index[binding.node])
            keys.setdefault(name, []).append(binding.pod)
        by_name = {job.name: job for job in batch}
        for name, held in keys.items():
            if len(held) < by_name[name].pods:  # a gang is never partly placed; a guard only
                for key in held:
                    self.snapshot.forget(key)
                del nodes[name]
                continue
            self.held[name] = held
        if len(nodes) < len(keys):
            self.snapshot.settle()
        return nodes

    def _group(self, job: Job, key: str) -> GroupSpec:
        segment = self.segment(job)
        return GroupSpec(
            key=key,
            kind=GroupKind.POD_GROUP,
            minimum=job.pods,
            topology_key=CLIQUE_LABEL if self.aware and segment != 1 else None,
            segment_size=segment if segment is not None and 1 < segment < job.pods else None,
        )

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

    def place(self, batch: Sequence[Job]) -> dict[str, list[int]]:
        placed = {}
        for job in sorted(batch, key=lambda j: j.arrival):
            nodes = self._fit(job)
            if nodes is not None:
                placed[job.name] = self._take(job, nodes, min(job.gpus, GPUS_PER_TRAY))
        return placed

    def _fit(self, job: Job) -> list[int] | None:
        if job.pods == 1:
            fits = np.flatnonzero(self.left >= job.gpus)
            return [int(fits[0])] if fits.size else None
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
        return chosen

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


def whole_domains(job: Job) -> int | None:
    """gpusched as the replay asks it: a multi-node job whole in one NVLink domain, a job larger
    than a domain in segments of a whole domain."""
    return TRAYS_PER_DOMAIN if job.pods > TRAYS_PER_DOMAIN else None


def slurm_segments(job: Job) -> int | None:
    """Segment sizes as NVIDIA's published Slurm guidance for GB200 NVL72 recommends them, in
    trays: none for jobs up to 16 GPUs (1: no NVLink constraint), 4 trays for 32 to 72 GPUs
    (the smallest divisor of the tray count from 4 up: 72 GPUs = 18 trays takes 6), 18 above."""
    if job.gpus <= 4 * GPUS_PER_TRAY:
        return 1
    if job.pods > TRAYS_PER_DOMAIN:
        return TRAYS_PER_DOMAIN
    return next(size for size in range(4, job.pods + 1) if job.pods % size == 0)


def make(policy: str, domains: int) -> Cluster:
    if policy == "gpusched":
        return EngineCluster(domains, aware=True)
    if policy == "gpusched without domain fill":
        return EngineCluster(domains, aware=True, fill=False)
    if policy == "gpusched with Slurm's segment sizes":
        return EngineCluster(domains, aware=True, segment=slurm_segments)
    if policy == "topology-blind":
        return EngineCluster(domains, aware=False)
    return FirstFitCluster(domains)


def replay(policy: str, domains: int, sequence: Sequence[Job], warmup: int, patience: int) -> Run:
    """One time unit per arrival, each a scheduling cycle as the operator runs it: the jobs that
    finished release their GPUs; a job waiting longer than ``patience`` is withdrawn by its
    user; the new job, and the waiting ones when capacity was freed (the operator retries a
    group that failed only when something frees capacity), go to the policy together."""
    cluster = make(policy, domains)
    run = Run(policy)
    capacity = domains * DOMAIN_GPUS
    running: list[Job] = []
    waiting: list[Job] = []
    started = time.process_time()
    for job in sequence:
        now = job.arrival
        done = [j for j in running if j.departure <= now]
        for finished in done:
            cluster.release(finished)
            running.remove(finished)
        waiting = [j for j in waiting if now - j.arrival < patience]
        batch = [*waiting, job] if done else [job]
        placed = cluster.place(batch)
        if job.arrival >= warmup:
            run.demand += job.gpus
            run.big += job.pods >= TRAYS_PER_DOMAIN
        for started_job in batch:
            nodes = placed.get(started_job.name)
            if nodes is None:
                continue
            # Its run time starts now: it departs that long after it started.
            length = started_job.departure - started_job.arrival
            running.append(dataclasses.replace(started_job, departure=now + length))
            if started_job.arrival < warmup:
                continue
            run.placed_demand += started_job.gpus
            run.big_placed += started_job.pods >= TRAYS_PER_DOMAIN
            run.waited.append(now - started_job.arrival)
            if started_job.pods > 1:
                run.multi += 1
                spanned = len({int(cluster.domain_of[n]) for n in nodes})
                run.multi_whole += spanned == started_job.fewest_domains
        waiting = [j for j in waiting if j.name not in placed]
        if job.name not in placed and patience > 0:
            waiting.append(job)
        if job.arrival < warmup:
            continue
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
        "| jobs of 72+ GPUs placed % | mean wait of placed jobs | CPU s per job |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for policy, per_seed in runs.items():
        occupancy = np.mean([np.mean(r.occupancy) for r in per_seed])
        placed = np.mean([100.0 * r.placed_demand / max(r.demand, 1) for r in per_seed])
        whole = np.mean([100.0 * r.multi_whole / max(r.multi, 1) for r in per_seed])
        largest = np.mean([np.mean(r.largest_free) for r in per_seed])
        smallest = min(min(r.largest_free) for r in per_seed)
        free_domains = np.mean([np.mean(r.free_domains) for r in per_seed])
        per_job = np.mean([r.seconds / jobs for r in per_seed])
        big = np.mean([100.0 * r.big_placed / max(r.big, 1) for r in per_seed])
        wait = np.mean([np.mean(r.waited) if r.waited else 0.0 for r in per_seed])
        lines.append(
            f"| {policy} | {occupancy:.1f} | {placed:.1f} | {whole:.1f} "
            f"| {largest:.1f} / {smallest} | {free_domains:.2f} | {big:.1f} | {wait:.1f} "
            f"| {per_job * 1000:.1f} ms |"
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
    parser.add_argument(
        "--patience",
        type=float,
        default=1.0,
        help="how long a job waits before its user withdraws it, in mean durations (default 1;"
        " 0: placed on arrival or never, no queue)",
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
    patience = round(args.patience * duration)
    if warmup >= args.jobs:
        parser.error(f"--jobs must exceed the warm-up of {warmup} arrivals")
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    unknown = set(policies) - set(POLICIES)
    if unknown:
        parser.error(f"unknown policies {sorted(unknown)}; known: {', '.join(POLICIES)}")
    print(
        f"{args.domains} NVL72 domains ({args.domains * DOMAIN_GPUS} GPUs), {args.jobs} jobs a "
        f"seed, seeds {seeds.start}-{seeds.stop - 1}, mean duration {duration:.0f} "
        f"(about 120 % load), patience {patience}, measured after {warmup} arrivals",
        flush=True,
    )
    runs: dict[str, list[Run]] = {p: [] for p in policies}
    for seed in seeds:
        sequence = jobs(args.jobs, duration, seed)
        for policy in policies:
            runs[policy].append(replay(policy, args.domains, sequence, warmup, patience))
    print(table(runs, args.jobs))
    return 0


if __name__ == "__main__":
    sys.exit(main())

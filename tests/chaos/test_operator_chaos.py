"""Seeded chaos runs against the real operator over HTTP (Kopf + the API emulator).

Slower than the simulated suite (tests/chaos/runner.py), so fewer runs: each one creates a
gang, a loose pod and sometimes a default-scheduler pod, injects one or two faults (failed or
conflicting binds, failed status patches, latency, dropped or expired watches), sometimes
deletes a gang member and creates it again, waits for everything to be placed, checks the
invariants and cleans up. The operator is restarted every few runs.

``GPUSCHED_CHAOS_HTTP_RUNS`` sets the number of runs (default 30).
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from testing.apiserver import ApiClient, ApiServer, wait_for
from testing.cluster.controlplane import OPERATOR_NAMESPACE
from testing.harness import (
    FAST,
    RACK,
    assert_no_gpu_shared,
    gang,
    gpu_node,
    gpu_pod,
    group_status,
    labels_of,
    placement_of,
    pods,
    running_operator,
)

RUNS = int(os.environ.get("GPUSCHED_CHAOS_HTTP_RUNS", "30"))
RESTART_EVERY = 6
LEASE = {
    "operator": {
        **FAST["operator"],
        "leaderElection": {"leaseNamespace": OPERATOR_NAMESPACE, "retryPeriodSeconds": 0.2},
    }
}
"""Each start takes the Lease (the previous holder gave it up on exit) and lists every pod
afresh before its first bind: a restart is also a leader change."""


def _faults(apiserver: ApiServer, rng: random.Random, injected: Counter[str]) -> None:
    choices: dict[str, Callable[[], Any]] = {
        "bind-500": lambda: apiserver.faults.fail(500, method="POST", path=r"/binding$", times=2),
        "bind-409": lambda: apiserver.faults.fail(409, method="POST", path=r"/binding$"),
        "status-500": lambda: apiserver.faults.fail(500, method="PATCH", path=r"/status$", times=2),
        "event-500": lambda: apiserver.faults.fail(500, method="POST", path=r"/events$", times=3),
        "latency": lambda: apiserver.faults.delay(0.05, path=r"/binding$", times=4),
        "watch-dropped": lambda: apiserver.drop_watches(abort=True),
        "watch-410": lambda: apiserver.expire_watches(),
    }
    for name in rng.sample(sorted(choices), k=rng.randint(1, 2)):
        choices[name]()
        injected[name] += 1


def _bound(api: ApiClient, keys: list[str]) -> bool:
    everything = pods(api)
    return all(k in everything and placement_of(everything[k]) for k in keys)


def _one_run(seed: int, apiserver: ApiServer, api: ApiClient, injected: Counter[str]) -> list[str]:
    rng = random.Random(seed)
    name = f"r{seed}"
    size = rng.randint(2, 4)
    gpus = rng.choice([1, 2, 4] if size < 4 else [1, 2])
    _faults(apiserver, rng, injected)
    api.create(gang(name, size))
    members = [f"{name}-{i}" for i in range(size)]
    for member in members:
        api.create(gpu_pod(member, gpus, group=name))
    api.create(gpu_pod(f"{name}-loose", rng.choice([0, 1, 2])))
    if rng.random() < 0.3:
        api.create(gpu_pod(f"{name}-theirs", 1, scheduler="default-scheduler", node="n4"))
    ours = [f"default/{m}" for m in [*members, f"{name}-loose"]]
    wait_for(lambda: _bound(api, ours), timeout=20, message=f"run {seed}: all placed")
    if rng.random() < 0.3:  # a member dies and its controller creates it again
        injected["pod-recreated"] += 1
        api.delete("pods", members[0], namespace="default")
        wait_for(lambda: f"default/{members[0]}" not in pods(api), timeout=10)
        api.create(gpu_pod(members[0], gpus, group=name))
        wait_for(lambda: _bound(api, ours), timeout=20, message=f"run {seed}: re-placed")
    apiserver.faults.clear()
    found = _check(api, name, members)
    for key in pods(api):
        if key.startswith(f"default/{name}-"):
            api.delete("pods", key.split("/", 1)[1], namespace="default", missing_ok=True)
    api.delete("podgroups", name, namespace="default", group="scheduling.gpusched.io")
    return found


def _check(api: ApiClient, name: str, members: list[str]) -> list[str]:
    found = []
    try:
        assert_no_gpu_shared(api)
    except AssertionError as error:
        found.append(str(error))
    everything = pods(api)
    racks = {labels_of(api, placement_of(everything[f"default/{m}"])[0])[RACK] for m in members}  # type: ignore[index]
    if len(racks) != 1:
        found.append(f"gang {name} spread over {sorted(racks)}")
    try:
        wait_for(
            lambda: group_status(api, name).get("scheduled") == len(members),
            timeout=10,
            message=f"status of {name} counts its {len(members)} pods",
        )
    except Exception as error:  # wait_for's timeout: reported as a violation with the seed
        found.append(f"{error}: {group_status(api, name)}")
    return found


def test_seeded_runs_against_the_real_operator(
    apiserver: ApiServer, api: ApiClient, kubeconfig: Path
) -> None:
    for i, rack in enumerate(["rack-1", "rack-1", "rack-2", "rack-2"], 1):
        api.create(gpu_node(f"n{i}", "zone-a", rack))
    injected: Counter[str] = Counter()
    violations: list[str] = []
    started, seed, restarts = time.monotonic(), 0, 0
    while seed < RUNS:
        with running_operator(kubeconfig, LEASE) as runtime:
            wait_for(lambda: runtime.elector is not None and runtime.elector.leading)
            for seed in range(seed, min(seed + RESTART_EVERY, RUNS)):  # noqa: B020
                violations += [
                    f"seed={seed}: {v}" for v in _one_run(seed, apiserver, api, injected)
                ]
            seed += 1
            wait_for(lambda: runtime.scheduler.idle, timeout=10, message="no reservation left")
        restarts += 1
    print(
        f"\nchaos over HTTP: {RUNS} runs, {restarts} operator starts (each a new Lease holder), "
        f"{len(violations)} violations, {time.monotonic() - started:.1f} s; faults: "
        + ", ".join(f"{k}={v}" for k, v in sorted(injected.items()))
    )
    assert not violations, "\n".join(violations)

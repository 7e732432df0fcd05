"""The chaos suite: seeded runs of the real scheduler on the simulated API server
(tests/chaos/runner.py). Every violation names its seed and the command that replays it."""

from __future__ import annotations

import os
import time

from tests.chaos.runner import run_many, run_one

SHORT_RUNS = 60
"""Runs in the default suite (about 10 s on two busy cores)."""
SHORT_BUDGET_SECONDS = 20.0
"""The default suite stops early rather than run past this (the runs done are reported)."""


def test_seeded_chaos_runs_keep_every_invariant() -> None:
    runs = int(os.environ.get("GPUSCHED_CHAOS_RUNS", SHORT_RUNS))
    first = int(os.environ.get("GPUSCHED_CHAOS_FIRST", 0))
    long_form = "GPUSCHED_CHAOS_RUNS" in os.environ
    started = time.monotonic()
    deadline = None if long_form else started + SHORT_BUDGET_SECONDS
    totals = run_many(range(first, first + runs), deadline=deadline)
    print(totals.report())
    print(f"  took {time.monotonic() - started:.1f} s")
    assert totals.runs >= min(runs, 20), totals.report()
    assert totals.faults["bind-0-applied"] + totals.faults["bind-500"] > 0
    assert not totals.violations, totals.report()


def test_a_seed_replays_the_same_run() -> None:
    first, again = run_one(75), run_one(75)
    assert (first.binds, first.faults, first.actions) == (again.binds, again.faults, again.actions)


def test_seed_7574_keeps_a_composite_pod_group_in_one_rack() -> None:
    # Two paths spread CompositePodGroup c28 over both racks in this run. The engine's (a
    # group whose bound pods sit in two racks was extended anyway, step 36) is fixed and
    # covered by tests/unit/engine/test_placement_defects.py. The other (a new leader lists pods
    # and nodes afresh but not PodGroups, so bound pods of a child group its watch has not
    # shown yet count for no CompositePodGroup) no longer shows in this seed's run since the
    # reliability work changed its steps, but is not fixed at its cause: see the CHANGELOG.
    #     python -m tests.chaos.runner --seed 7574 --trace
    totals = run_one(7574)
    assert totals.violations == [], totals.report()


def test_trace_prints_the_steps_of_a_seed() -> None:
    lines: list[str] = []
    run_one(7574, steps=6, trace=lines.append)
    steps = [line for line in lines if line.startswith("step ")]
    assert [s.split(" (")[0] for s in steps] == [f"step {n}" for n in range(1, 8)], lines
    assert any(line.startswith("  bind ") for line in lines), lines
    assert any(line.startswith("  decide ") for line in lines), lines


GANG_RUNS = 25
"""Runs of the gangs class in the default suite (about 5 s)."""


def test_gangs_whose_binds_fail_while_newcomers_arrive_end_whole() -> None:
    # Gangs of up to 16 pods, 500s, drops, late commits, SIGSTOPs and leader changes on their
    # binds, newcomers all the while; nothing deleted. Once the faults stop, no gang may be
    # left below its minCount (unless two partial gangs share one full rack: counted).
    runs = int(os.environ.get("GPUSCHED_CHAOS_GANG_RUNS", GANG_RUNS))
    first = int(os.environ.get("GPUSCHED_CHAOS_FIRST", 0))
    totals = run_many(range(first, first + runs), mode="gangs")
    print(totals.report())
    assert totals.faults["bind-500"] + totals.faults["bind-0-commits-later"] > 0
    assert not totals.violations, totals.report()

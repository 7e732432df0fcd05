"""The decision log: a line when a group's outcome changes, not one per retry; no "placed"
line when nothing was placed; a summary every five minutes while groups wait."""

from __future__ import annotations

import logging

import pytest

from gpusched.engine.result import GroupDecision, Phase, Reason
from gpusched.scheduler.decisionlog import SUMMARY_SECONDS, DecisionLog
from testing.clock import Clock

FULL = GroupDecision(
    name="ml/train",
    kind="PodGroup",
    phase=Phase.PENDING,
    reason=Reason.UNSCHEDULABLE,
    message="no placement in any domain: …",
)
PLACED = GroupDecision(
    name="ml/train",
    kind="PodGroup",
    phase=Phase.SCHEDULED,
    reason=Reason.SCHEDULED,
    message="placed",
    placement={"topology.kubernetes.io/zone": "zone-a", "topology.example.com/rack": "rack-1"},
)


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]


def test_a_group_retried_91_times_logs_once_and_again_when_its_reason_changes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    log = DecisionLog(Clock())
    for _ in range(91):
        log.outcome(FULL, 0)
    assert lines(caplog) == [
        "PodGroup ml/train: not placed (Unschedulable): no placement in any domain: …"
    ]
    other = GroupDecision(
        name="ml/train",
        kind="PodGroup",
        phase=Phase.PENDING,
        reason=Reason.UNSCHEDULABLE,
        message="another",
    )
    log.outcome(other, 0)
    assert lines(caplog)[-1] == "PodGroup ml/train: not placed (Unschedulable): another"


def test_a_gang_counting_its_pods_logs_once_not_once_per_pod(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    log = DecisionLog(Clock())
    for present in range(1, 8):
        message = f"{present} of 8 valid pods exist (minCount 8)"
        log.outcome(
            GroupDecision(
                name="ml/g",
                kind="PodGroup",
                phase=Phase.PENDING,
                reason=Reason.WAITING_FOR_PODS,
                message=message,
            ),
            0,
        )
    assert lines(caplog) == [
        "PodGroup ml/g: not placed (WaitingForPods): 1 of 8 valid pods exist (minCount 8)"
    ]


def test_placed_is_logged_only_when_pods_were_placed_with_a_readable_domain(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    log = DecisionLog(Clock())
    log.outcome(PLACED, 0)  # decided Scheduled, but nothing new bound this cycle
    log.outcome(dataclass_replace(PLACED, placement={}), 1)
    log.outcome(PLACED, 3)
    assert lines(caplog) == [
        "PodGroup ml/train: 1 pod placed",
        "PodGroup ml/train: 3 pods placed in zone-a/rack-1",
    ]
    assert not any("no topology constraint" in line or "pieces" in line for line in lines(caplog))


def test_the_summary_comes_every_five_minutes_while_groups_wait(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    clock = Clock()
    log = DecisionLog(clock)
    log.outcome(FULL, 0)
    log.outcome(dataclass_replace(PLACED, name="ml/other"), 4)
    caplog.clear()
    log.summary({"ml/train", "ml/other"})
    assert lines(caplog) == []  # not due yet
    clock.now += SUMMARY_SECONDS
    log.summary({"ml/train", "ml/other"})
    assert lines(caplog) == [
        "summary: 4 pods placed in the last 300 s; 1 group waiting (1 Unschedulable)"
    ]
    caplog.clear()
    clock.now += SUMMARY_SECONDS
    log.summary(set())  # ml/train was deleted: nothing waits, nothing placed, nothing said
    assert lines(caplog) == []


def dataclass_replace(decision: GroupDecision, **changes: object) -> GroupDecision:
    import dataclasses

    return dataclasses.replace(decision, **changes)  # type: ignore[arg-type]

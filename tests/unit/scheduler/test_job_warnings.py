"""Which Jobs survive preemption (a podFailurePolicy rule ignoring DisruptionTarget), and the
Warning Event on those that do not. The real-server story is
tests/integration/test_job_preemption_live.py."""

from __future__ import annotations

from typing import Any

import pytest

from gpusched.api.meta import OwnerReference
from gpusched.scheduler.events import EventRecorder
from gpusched.scheduler.jobs import JobWarnings, job_owner, survives_preemption
from testing.clock import Clock
from testing.fakes import FakeApi


def job(*rules: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {"backoffLimit": 3}
    if rules:
        spec["podFailurePolicy"] = {"rules": list(rules)}
    return {"metadata": {"name": "train", "uid": "uid-job"}, "spec": spec}


IGNORE = {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}


@pytest.mark.parametrize(
    ("story", "body", "want"),
    [
        ("no podFailurePolicy: every preemption is a failure", job(), False),
        ("Ignore on DisruptionTarget", job(IGNORE), True),
        (
            "Ignore on DisruptionTarget with status True, after a FailJob rule on exit codes",
            job(
                {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}},
                {
                    "action": "Ignore",
                    "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                },
            ),
            True,
        ),
        (
            "Count on DisruptionTarget counts it",
            job({"action": "Count", "onPodConditions": [{"type": "DisruptionTarget"}]}),
            False,
        ),
        (
            "Ignore on another condition does not help",
            job({"action": "Ignore", "onPodConditions": [{"type": "ConfigIssue"}]}),
            False,
        ),
    ],
)
def test_which_jobs_survive_preemption(story: str, body: dict[str, Any], want: bool) -> None:
    assert survives_preemption(body) is want, story


def owners(kind: str = "Job", controller: bool = True) -> list[OwnerReference]:
    return [
        OwnerReference.model_validate(
            {
                "apiVersion": "batch/v1",
                "kind": kind,
                "name": "train",
                "uid": "uid-job",
                "controller": controller,
            }
        )
    ]


def test_only_a_controlling_batch_job_is_an_owner() -> None:
    assert job_owner(owners()) is not None
    assert job_owner(owners(controller=False)) is None
    assert job_owner(owners(kind="JobSet")) is None


@pytest.mark.asyncio
async def test_the_job_without_the_rule_is_warned_naming_the_rule_and_its_backoff_limit() -> None:
    api = FakeApi(jobs={"ml/train": job()})
    warnings = JobWarnings(api=api, events=EventRecorder(api, 60.0, Clock()))
    await warnings.preempted("ml", "train-0", owners())
    (event,) = api.events
    assert (event["type"], event["reason"], event["involvedObject"]["kind"]) == (
        "Warning",
        "PreemptedWithoutPolicy",
        "Job",
    )
    assert "pod train-0 was preempted" in event["message"]
    assert "backoffLimit (3)" in event["message"]

    api.jobs["ml/train"] = job(IGNORE)
    api.events.clear()
    await warnings.preempted("ml", "train-1", owners())
    assert api.events == []

"""A pod event that changes nothing the scheduler reads (the kubelet's heartbeats: conditions,
container states; a new resourceVersion; managed fields) costs no parse: the record keeps a
digest of what `parse_pod` reads, 16 bytes rather than the pod's text."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from gpusched.scheduler.records import pod_fingerprint
from gpusched.scheduler.state import ClusterState
from testing.manifests import pod

Body = dict[str, Any]
GPUS_AT_23 = {"gpusched.io/gpus": "2,3"}


def running(version: str = "5") -> Body:
    body = pod("p", 2, node="a", at=[0, 1])
    body["metadata"]["resourceVersion"] = version
    body["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    return body


def changed(change: Callable[[Body], None]) -> Body:
    body = copy.deepcopy(running("9"))
    change(body)
    return body


@pytest.mark.parametrize(
    ("story", "change", "want_parsed"),
    [
        ("a heartbeat: Ready went False", lambda b: b["status"].update(conditions=[]), False),
        (
            "managed fields written",
            lambda b: b["metadata"].update(managedFields=[{"manager": "kubelet"}]),
            False,
        ),
        ("the pod finished", lambda b: b["status"].update(phase="Succeeded"), True),
        ("a label added", lambda b: b["metadata"]["labels"].update(team="vision"), True),
        (
            "being deleted",
            lambda b: b["metadata"].update(deletionTimestamp="2026-12-01T10:00:00Z"),
            True,
        ),
        ("other GPUs named", lambda b: b["metadata"]["annotations"].update(GPUS_AT_23), True),
    ],
)
def test_only_what_the_scheduler_reads_makes_a_pod_parsed_again(
    story: str, change: Callable[[Body], None], want_parsed: bool
) -> None:
    state = ClusterState()
    state.upsert_pod(running())
    held = state.pods["default/p"]
    body = changed(change)
    state.upsert_pod(body)
    record = state.pods["default/p"]
    assert (record.pod is not held.pod) == want_parsed, story
    assert (pod_fingerprint(body) != held.source) == want_parsed, story
    assert record.version == "9", story
    assert record.source == pod_fingerprint(body), story


def test_the_record_keeps_a_digest_not_the_text() -> None:
    state = ClusterState()
    state.upsert_pod(running())
    source = state.pods["default/p"].source
    assert isinstance(source, bytes)
    assert len(source) == 16

"""What the operator logs at INFO, end to end against the API emulator: each decision (group,
placement, pods and GPUs, or why not), each bind, leadership; and not Kopf's line per event."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from testing.apiserver import ApiClient, ApiServer, wait_for
from testing.harness import gang, gpu_node, gpu_pod, placement_of, pods, running_operator


def test_the_log_says_what_was_decided_and_bound_and_nothing_per_event(
    apiserver: ApiServer, api: ApiClient, kubeconfig: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    api.create(gpu_node("n1", "zone-a", "rack-1"))
    api.create(gpu_node("n2", "zone-a", "rack-1"))
    with running_operator(kubeconfig):
        api.create(gang("g", 2))
        for i in range(2):
            api.create(gpu_pod(f"g-{i}", 4, group="g"))
        api.create(gpu_pod("huge", 9))
        wait_for(
            lambda: all(placement_of(pods(api)[f"default/g-{i}"]) for i in range(2)),
            message="the gang bound",
        )
        wait_for(
            lambda: "pod default/huge not placed" in caplog.text,
            message=lambda: f"the loose pod's failure logged:\n{caplog.text}",
        )
        wait_for(
            lambda: caplog.text.count("bound: Successfully assigned default/g-") == 2,
            message=lambda: f"both binds logged:\n{caplog.text}",
        )
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    text = "\n".join(messages)
    assert "PodGroup default/g: 2 pods placed in zone-a/rack-1" in text, text
    scheduled = text.index("default/g: Scheduled, every pod bound")
    assert all(
        text.index(f"bound: Successfully assigned default/g-{i}") < scheduled for i in (0, 1)
    )
    for i in range(2):
        assert re.search(rf"placing default/g-{i} on n[12], GPUs \d,\d,\d,\d \(default/g\)", text)
    assert re.search(r"pod default/huge not placed \(\w+\): .*nvidia.com/gpu", text), text
    assert "standing by as" in text, text
    assert "leading: pods and nodes listed" in text, text
    per_event = [m for m in messages if re.fullmatch(r"Handler '\w+' succeeded\.", m)]
    assert per_event == [], f"{len(per_event)} of Kopf's per-event lines, e.g. {per_event[:3]}"

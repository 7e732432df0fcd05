"""`explain` on a group the operator is preempting for: the live status (its
``PodGroupScheduled`` condition, reason ``Preempting``) is shown beside the engine's word."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpusched.cli import main
from gpusched.commands import EXIT_OK
from testing.manifests import node, pod, pod_group

NOMINATED = (
    "room nominated on 1 nodes (a) by preempting 1 lower-priority pods; waiting for 1 victim to go"
)


def cluster(reason: str) -> list[dict[str, Any]]:
    group = pod_group("high", 1, namespace="ml")
    group["status"] = {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodGroupScheduled",
                "status": "False",
                "reason": reason,
                "message": NOMINATED if reason == "Preempting" else "no room",
                "lastTransitionTime": "2026-12-01T10:00:00Z",
            }
        ],
    }
    return [
        node("a"),
        pod("low", 8, namespace="ml", node="a", at=range(8)),
        group,
        pod("high-0", 8, group="high", namespace="ml"),
    ]


@pytest.mark.parametrize(("reason", "want"), [("Preempting", NOMINATED), ("Unschedulable", None)])
def test_explain_shows_what_the_operator_says_while_it_preempts(
    reason: str, want: str | None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "c.yaml").write_text(yaml.safe_dump_all(cluster(reason)))
    base = ["explain", "pg/high", "-n", "ml", "-f", str(tmp_path / "c.yaml")]
    assert main([*base, "-o", "json"]) == EXIT_OK
    [group] = json.loads(capsys.readouterr().out)["groups"]
    assert group["preempting"] == want
    assert main(base) == EXIT_OK
    text = capsys.readouterr().out
    line = f"  the operator is preempting for it: {NOMINATED}"
    assert (line in text.splitlines()) == (want is not None), text

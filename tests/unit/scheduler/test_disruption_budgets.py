"""PodDisruptionBudgets as the preemption planner gets them: which pods each one covers."""

from __future__ import annotations

from typing import Any

import pytest

from gpusched.engine.preemption import DisruptionBudget
from gpusched.scheduler.state import ClusterState
from testing.manifests import pod


def budget(name: str, selector: Any, allowed: Any = 1, namespace: str = "default") -> Any:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": selector},
        "status": {"disruptionsAllowed": allowed},
    }


def labelled(name: str, labels: dict[str, str]) -> dict[str, Any]:
    body = pod(name, 1, node="a")
    body["metadata"]["labels"] = labels
    return body


CASES = [
    ("matchLabels select by every pair", {"matchLabels": {"app": "x", "tier": "1"}}, ["x1"]),
    (
        "matchExpressions with NotIn also match pods without the label",
        {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["x"]}]},
        ["none", "y1"],
    ),
    ("an empty selector selects every pod of its namespace", {}, ["none", "x1", "x2", "y1"]),
    ("a null selector selects nothing", None, []),
]


@pytest.mark.parametrize(("story", "selector", "want_pods"), CASES, ids=[c[0] for c in CASES])
def test_a_budget_covers_the_pods_its_selector_matches(
    story: str, selector: Any, want_pods: list[str]
) -> None:
    state = ClusterState()
    for name, labels in (
        ("x1", {"app": "x", "tier": "1"}),
        ("x2", {"app": "x", "tier": "2"}),
        ("y1", {"app": "y", "tier": "1"}),
        ("none", {}),
    ):
        state.upsert_pod(labelled(name, labels))
    other = labelled("elsewhere", {"app": "x", "tier": "1"})
    other["metadata"]["namespace"] = "other"
    state.upsert_pod(other)
    state.budgets.upsert(budget("pdb", selector))
    want = DisruptionBudget("default/pdb", 1, frozenset(f"default/{p}" for p in want_pods))
    assert state.budgets.for_pods(state.pods.values()) == [want]


@pytest.mark.parametrize(
    ("selector", "allowed", "want_field"),
    [
        ({"matchExpressions": [{"key": "app", "operator": "In"}]}, 1, "values"),
        ({}, -1, "status.disruptionsAllowed"),
    ],
)
def test_a_malformed_budget_is_left_out_and_named_in_the_log(
    selector: Any, allowed: Any, want_field: str, caplog: pytest.LogCaptureFixture
) -> None:
    state = ClusterState()
    state.budgets.upsert(budget("bad", selector, allowed))
    assert state.budgets.for_pods(state.pods.values()) == []
    assert "PodDisruptionBudget default/bad" in caplog.text
    assert want_field in caplog.text

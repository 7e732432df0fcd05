"""``simulate`` decides with the operator's other inputs: PodDisruptionBudgets (built into the
engine's budgets by `gpusched.engine.budgets`) and the GPUs assumed for pods that do not say
which they hold (`gpusched.engine.pins`)."""

from __future__ import annotations

from typing import Any

from gpusched.api.budgets import parse_pod_disruption_budget
from gpusched.api.config import SchedulerConfig
from gpusched.api.k8s import parse_pod
from gpusched.engine.budgets import disruption_budgets
from gpusched.inputs.objects import from_documents
from gpusched.offline.simulate import simulate
from tests.support import manifests


def _pod(name: str, gpus: int, **kwargs: Any) -> dict[str, Any]:
    priority = kwargs.pop("priority", 0)
    labels = kwargs.pop("labels", {})
    body = manifests.pod(name, gpus, uid=f"uid-{name}", **kwargs)
    body["spec"]["priority"] = priority
    body["metadata"].setdefault("labels", {}).update(labels)
    return body


def _budget(name: str, app: str, allowed: int, namespace: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": {"matchLabels": {"app": app}}},
        "status": {"disruptionsAllowed": allowed},
    }


def _story(budgets: list[dict[str, Any]]) -> list[str]:
    """One node of 8 GPUs held by two low-priority pods of 4; an urgent pod asks for 4: the
    victims the plan names."""
    documents = [
        manifests.node("n1"),
        _pod("old", 4, node="n1", at=[0, 1, 2, 3], created="2026-12-01T08:00:00Z"),
        _pod(
            "young",
            4,
            node="n1",
            at=[4, 5, 6, 7],
            created="2026-12-01T09:00:00Z",
            labels={"app": "serving"},
        ),
        _pod("urgent", 4, priority=100, created="2026-12-01T10:00:00Z"),
        *budgets,
    ]
    run = simulate(from_documents(documents), SchedulerConfig())
    (plan,) = run.preemptions
    return sorted(v.pod for v in plan.victims)


def test_a_budget_protected_pod_is_spared_when_another_victim_will_do() -> None:
    # Without a budget the younger pod goes; its budget allows no disruption: the older goes.
    assert _story([]) == ["default/young"]
    assert _story([_budget("serving", "serving", 0)]) == ["default/old"]
    assert _story([_budget("serving", "serving", 1)]) == ["default/young"]


def test_a_budget_covers_the_pods_of_its_namespace_its_selector_matches() -> None:
    pods = [
        parse_pod(_pod("a", 0, labels={"app": "x"})),
        parse_pod(_pod("b", 0, labels={"app": "y"})),
        parse_pod(_pod("c", 0, labels={"app": "x"}, namespace="other")),
    ]
    no_selector = _budget("none", "x", 0)
    del no_selector["spec"]["selector"]
    found = disruption_budgets(
        [parse_pod_disruption_budget(b) for b in (_budget("x", "x", 2), no_selector)], pods
    )
    assert [(b.name, b.allowed, sorted(b.pods)) for b in found] == [
        ("default/none", 0, []),
        ("default/x", 2, ["default/a"]),
    ]


def test_gpus_of_a_foreign_pod_that_names_none_are_assumed_around_ours() -> None:
    # Another scheduler's pod holds 2 GPUs without naming them; ours names 6 and 7. The
    # foreign pod is assumed on 4 and 5 (free ones, highest first), never on ours: 4 are left.
    documents = [
        manifests.node("n1"),
        _pod("a-foreign", 2, node="n1", scheduler="default-scheduler"),
        _pod("b-ours", 2, node="n1", at=[6, 7]),
        _pod("pending", 4),
    ]
    run = simulate(from_documents(documents), SchedulerConfig())
    assert run.bound["default/a-foreign"].gpus == (4, 5)
    assert [(b.pod, b.gpus) for b in run.result.bindings] == [("default/pending", (0, 1, 2, 3))]

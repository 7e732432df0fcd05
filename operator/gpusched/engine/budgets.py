"""PodDisruptionBudgets as the preemption planner reads them (`DisruptionBudget`): each
budget with the pods it covers now, matched from the API models the same way for the operator
and for ``simulate``."""

from __future__ import annotations

from collections.abc import Iterable

from gpusched.api.budgets import PodDisruptionBudget
from gpusched.api.k8s import Pod
from gpusched.engine.preemption import DisruptionBudget


def disruption_budgets(
    budgets: Iterable[PodDisruptionBudget], pods: Iterable[Pod]
) -> list[DisruptionBudget]:
    """Each budget (by key) with the keys of the pods of its namespace its selector matches;
    a budget without a selector covers none (policy/v1)."""
    found = sorted(budgets, key=lambda b: b.key)
    if not found:
        return []
    listed = list(pods)
    return [
        DisruptionBudget(
            budget.key,
            budget.allowed,
            frozenset(
                pod.key
                for pod in listed
                if budget.selector is not None
                and pod.metadata.namespace == budget.namespace
                and budget.selector.matches(pod.labels)
            ),
        )
        for budget in found
    ]

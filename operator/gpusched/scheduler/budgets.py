"""PodDisruptionBudgets as last watched, and the pods each one covers, for the preemption planner.

The planner prefers plans that evict no more of a budget's pods than its
``status.disruptionsAllowed`` (`gpusched.engine.preemption.DisruptionBudget`); the Eviction
API enforces the same budgets when the victims are evicted.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpusched.api.errors import InvalidObjectError, from_validation_error
from gpusched.api.selectors import NodeSelectorRequirement
from gpusched.engine.preemption import DisruptionBudget
from gpusched.scheduler.records import PodRecord, mapping, metadata_of, name_of, namespace_of

logger = logging.getLogger(__name__)


class LabelSelector(BaseModel):
    """``metav1.LabelSelector``: every ``matchLabels`` pair and every expression must match."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)

    match_labels: dict[str, str] = Field(default_factory=dict, alias="matchLabels")
    match_expressions: list[NodeSelectorRequirement] = Field(
        default_factory=list, alias="matchExpressions"
    )

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match_labels.items()) and all(
            requirement.matches(labels) for requirement in self.match_expressions
        )


@dataclass(frozen=True, slots=True)
class Budget:
    key: str
    namespace: str
    selector: LabelSelector | None
    """None: the budget selects no pod (policy/v1: a null selector matches nothing)."""
    allowed: int


@dataclass(slots=True)
class Budgets:
    by_key: dict[str, Budget] = field(default_factory=dict)

    def upsert(self, body: Mapping[str, Any]) -> None:
        key = f"{namespace_of(body)}/{name_of(body)}"
        try:
            self.by_key[key] = _budget(key, body)
        except InvalidObjectError as error:
            # Left out, not guessed: the Eviction API still enforces it when victims go.
            logger.warning("ignoring PodDisruptionBudget: %s", error)
            self.by_key.pop(key, None)

    def delete(self, key: str) -> None:
        self.by_key.pop(key, None)

    def for_pods(self, pods: Iterable[PodRecord]) -> list[DisruptionBudget]:
        """Each budget with the keys of the pods it selects now."""
        if not self.by_key:
            return []
        records = list(pods)
        found = []
        for budget in sorted(self.by_key.values(), key=lambda b: b.key):
            selector = budget.selector
            covered = frozenset(
                r.key
                for r in records
                if selector is not None
                and r.pod.metadata.namespace == budget.namespace
                and selector.matches(r.pod.labels)
            )
            found.append(DisruptionBudget(budget.key, budget.allowed, covered))
        return found


def _budget(key: str, body: Mapping[str, Any]) -> Budget:
    spec = mapping(body.get("spec"))
    raw = spec.get("selector")
    try:
        selector = LabelSelector.model_validate(raw) if raw is not None else None
    except ValidationError as error:
        raise from_validation_error(
            f"PodDisruptionBudget {key}", error, ("spec", "selector")
        ) from None
    allowed = mapping(body.get("status")).get("disruptionsAllowed", 0)
    if not isinstance(allowed, int) or isinstance(allowed, bool) or allowed < 0:
        raise InvalidObjectError(
            f"PodDisruptionBudget {key}", "status.disruptionsAllowed", "must be an integer >= 0"
        )
    return Budget(key, str(metadata_of(body).get("namespace") or "default"), selector, allowed)

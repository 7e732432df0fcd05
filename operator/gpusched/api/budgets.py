"""PodDisruptionBudgets (``policy/v1``), as far as the preemption planner reads them: whom a
budget covers (its namespace and selector) and how many of them may go now
(``status.disruptionsAllowed``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpusched.api.errors import InvalidObjectError, from_validation_error
from gpusched.api.selectors import NodeSelectorRequirement


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
class PodDisruptionBudget:
    key: str
    namespace: str
    selector: LabelSelector | None
    """None: the budget selects no pod (policy/v1: a null selector matches nothing)."""
    allowed: int


def parse_pod_disruption_budget(body: Mapping[str, Any]) -> PodDisruptionBudget:
    """Raises `InvalidObjectError` naming the field for a selector or a
    ``status.disruptionsAllowed`` that cannot be read (a budget read wrong would let the
    planner evict what it protects)."""
    metadata = _mapping(body.get("metadata"))
    namespace = str(metadata.get("namespace") or "default")
    key = f"{namespace}/{metadata.get('name') or ''}"
    raw = _mapping(body.get("spec")).get("selector")
    try:
        selector = LabelSelector.model_validate(raw) if raw is not None else None
    except ValidationError as error:
        raise from_validation_error(
            f"PodDisruptionBudget {key}", error, ("spec", "selector")
        ) from None
    allowed = _mapping(body.get("status")).get("disruptionsAllowed", 0)
    if not isinstance(allowed, int) or isinstance(allowed, bool) or allowed < 0:
        raise InvalidObjectError(
            f"PodDisruptionBudget {key}", "status.disruptionsAllowed", "must be an integer >= 0"
        )
    return PodDisruptionBudget(key, namespace, selector, allowed)


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}

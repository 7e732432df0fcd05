"""PodDisruptionBudgets as last watched, for the preemption planner.

The planner prefers plans that evict no more of a budget's pods than its
``status.disruptionsAllowed`` (`gpusched.engine.preemption.DisruptionBudget`, matched to pods
by `gpusched.engine.budgets`); the Eviction API enforces the same budgets when the victims are
evicted.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpusched.api.budgets import PodDisruptionBudget, parse_pod_disruption_budget
from gpusched.api.errors import InvalidObjectError
from gpusched.engine.budgets import disruption_budgets
from gpusched.engine.preemption import DisruptionBudget
from gpusched.scheduler.records import PodRecord, name_of, namespace_of

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class Budgets:
    by_key: dict[str, PodDisruptionBudget] = field(default_factory=dict)

    def upsert(self, body: Mapping[str, Any]) -> None:
        key = f"{namespace_of(body)}/{name_of(body)}"
        try:
            self.by_key[key] = parse_pod_disruption_budget(body)
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
        return disruption_budgets(self.by_key.values(), (r.pod for r in pods))

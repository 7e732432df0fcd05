"""Status of our custom resources: written by the operator, read back permissively."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class _Status(BaseModel):
    """Written by us; fields we do not know (from a newer operator) are ignored, not errors."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)


class GroupPhase(StrEnum):
    PENDING = "Pending"
    SCHEDULED = "Scheduled"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNSCHEDULABLE = "Unschedulable"


class Condition(_Status):
    """A standard Kubernetes condition (``metav1.Condition`` without observedGeneration)."""

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str = ""
    message: str = ""
    last_transition_time: datetime | None = Field(default=None, alias="lastTransitionTime")


class LastAttempt(_Status):
    """The latest placement attempt, kept so `kubectl get -o yaml` explains a Pending group."""

    time: datetime
    reason: str
    message: str = ""
    domains: list[str] = Field(default_factory=list)
    """One line per topology domain tried, saying why it did not fit."""


class GroupStatus(_Status):
    """Status of a PodGroup or CompositePodGroup (for a composite, counts are over pods of all
    its descendants)."""

    phase: GroupPhase = GroupPhase.PENDING
    conditions: list[Condition] = Field(default_factory=list)
    placement: dict[str, str] = Field(default_factory=dict)
    """The topology domain chosen, e.g. ``{"topology.example.com/rack": "rack-1"}``."""
    domain: str | None = None
    """The placement as ``kubectl get`` prints it: ``zone-a/rack-1``; ``anywhere`` for a group
    placed without a topology constraint; None while nothing is placed."""
    priority: int | None = None
    """The group's resolved priority; None when its pods' own priority decides."""
    scheduled: int = Field(default=0, ge=0)
    running: int = Field(default=0, ge=0)
    succeeded: int = Field(default=0, ge=0)
    failed: int = Field(default=0, ge=0)
    last_attempt: LastAttempt | None = Field(default=None, alias="lastAttempt")


class WorkloadGroupStatus(_Status):
    """One materialised group as seen from its Workload."""

    name: str
    kind: str
    phase: GroupPhase = GroupPhase.PENDING


class WorkloadStatus(_Status):
    """The Workload's groups at a glance: ``phase`` is the least advanced of its groups'
    (Failed or Unschedulable as soon as one group is), counts are summed over its PodGroups."""

    phase: GroupPhase = GroupPhase.PENDING
    conditions: list[Condition] = Field(default_factory=list)
    """``Materialized``: every template has its object (reason ``Invalid`` naming the field
    when the templates cannot be materialised)."""
    groups: list[WorkloadGroupStatus] = Field(default_factory=list)
    scheduled: int = Field(default=0, ge=0)
    running: int = Field(default=0, ge=0)
    succeeded: int = Field(default=0, ge=0)
    failed: int = Field(default=0, ge=0)

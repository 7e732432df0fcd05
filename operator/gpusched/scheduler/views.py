"""What each collaborator reads of the watch cache, as narrow views of `ClusterState`.

`build_scheduler` hands the one `ClusterState` to each; the type says which part a
collaborator may touch, so a reader is not handed the whole hub (about forty ways in).
The ledger is handed on its own (`gpusched.scheduler.ledger.Ledger`), or as `Promises` to
those that only read it."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Protocol

from gpusched.api.k8s import Node
from gpusched.engine.groups import GroupSpec
from gpusched.engine.preemption import DisruptionBudget
from gpusched.engine.request import PodRequest
from gpusched.engine.snapshot import BoundPod
from gpusched.scheduler.feed import FeedSource
from gpusched.scheduler.groups import GroupRecord, WorkloadRecord
from gpusched.scheduler.records import Nomination, PodRecord, Reservation


class Promises(Protocol):
    """The ledger, read-only: what this scheduler holds that the watch does not show yet."""

    @property
    def reservations(self) -> Mapping[str, Reservation]: ...

    @property
    def nominations(self) -> Mapping[str, Nomination]: ...

    @property
    def marked(self) -> Mapping[str, str]: ...


class Watched(Protocol):
    """Pods, nodes and groups as last watched, read-only."""

    @property
    def pods(self) -> Mapping[str, PodRecord]: ...

    @property
    def nodes(self) -> Mapping[str, Node]: ...

    @property
    def groups(self) -> Mapping[str, GroupRecord]: ...

    def descendants(self, key: str) -> list[str]: ...

    def pods_of(self, group_keys: Iterable[str]) -> list[PodRecord]: ...

    def root_of_request(self, request: PodRequest) -> str: ...


class VictimsView(Watched, Protocol):
    """What `Evictions` reads: the victims and the units they belong to."""

    @property
    def scheduler_name(self) -> str: ...

    def victim_present(self, key: str, uid: str) -> bool: ...


class PlansView(VictimsView, Protocol):
    """What `Preemptor` and the take-over of plans in flight read: also the pods pending and
    what is bound."""

    def pending(self) -> list[PodRecord]: ...

    def bound(self) -> Iterator[BoundPod]: ...


class RoomView(Watched, Protocol):
    """What `Binder` and `UnknownBinds` read before a bind, and the one write of a bind:
    whether another pod holds the room, and the pod shown bound once the bind succeeded."""

    @property
    def capacity_generation(self) -> int: ...

    def taken_by_others(self, key: str, reservation: Reservation) -> bool: ...

    def overcommits(self, key: str, reservation: Reservation) -> bool: ...

    def confirm(self, key: str, reservation: Reservation) -> None: ...


class ReadBackView(RoomView, Protocol):
    """`UnknownBinds` also takes what reading a pod back says, as a watch event would."""

    def upsert_pod(self, body: Mapping[str, Any]) -> None: ...

    def delete_pod(self, key: str, uid: str | None = None) -> None: ...


class OursView(Watched, Protocol):
    """What tells our pods from other schedulers' (`gpusched.scheduler.foreign_status`)."""

    @property
    def scheduler_name(self) -> str: ...

    def is_ours(self, scheduler_name: str) -> bool: ...


class WorkloadsView(Protocol):
    """What `Materializer` reads: the Workloads and the groups that exist already."""

    @property
    def workloads(self) -> Mapping[str, WorkloadRecord]: ...

    @property
    def groups(self) -> Mapping[str, GroupRecord]: ...


class Untold(Protocol):
    """Messages queued for the reporter (`OwnerGroups`), each handed over once."""

    def drain_untold(self) -> Mapping[str, str]: ...


class ReportView(VictimsView, OursView, WorkloadsView, Protocol):
    """What `Reporter` reads to write statuses and Events: also the root of each group,
    and the owner-group messages it tells."""

    @property
    def owner_groups(self) -> Untold: ...

    def root_of(self, key: str) -> str: ...


class PodBudgets(Protocol):
    """The PodDisruptionBudgets, as the preemption planner takes them."""

    def for_pods(self, pods: Iterable[PodRecord]) -> list[DisruptionBudget]: ...


class DecideView(FeedSource, Protocol):
    """What `Decider` reads: the nodes and pods a snapshot is built from (the bound ones
    through its `FeedSource` side), the groups' specs, which pods are other schedulers', and
    the budgets guarding victims."""

    @property
    def nodes(self) -> Mapping[str, Node]: ...

    @property
    def pods(self) -> Mapping[str, PodRecord]: ...

    @property
    def budgets(self) -> PodBudgets: ...

    def bound(self) -> Iterator[BoundPod]: ...

    def group_specs(self) -> list[GroupSpec]: ...

    def is_ours(self, scheduler_name: str) -> bool: ...

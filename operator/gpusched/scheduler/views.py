"""What each collaborator reads of the watch cache, as narrow views of `ClusterState`.

`build_scheduler` hands the one `ClusterState` to each; the type says which part a
collaborator may touch, so a reader is not handed the whole hub (about forty ways in).
The ledger is handed on its own (`gpusched.scheduler.ledger.Ledger`)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Protocol

from gpusched.api.k8s import Node
from gpusched.engine.request import PodRequest
from gpusched.engine.snapshot import BoundPod
from gpusched.scheduler.groups import GroupRecord
from gpusched.scheduler.records import PodRecord, Reservation


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

"""The ledger lets go of what it holds through one door, `Ledger.release(key, why)`: each
`Release` says what it ends (a pod's reservation, or a root's nomination), whether that makes
room (groups backing off retry at once when the capacity generation moves), and is counted by
its label."""

from __future__ import annotations

import pytest

from gpusched.engine.snapshot import BoundPod
from gpusched.scheduler import metrics
from gpusched.scheduler.ledger import Held, Release
from gpusched.scheduler.records import Nomination
from gpusched.scheduler.state import ClusterState
from testing.manifests import node, pod


def released(why: Release) -> float:
    return metrics.LEDGER_RELEASES.labels(why.label)._value.get()


def reserved_state() -> ClusterState:
    state = ClusterState()
    state.upsert_node(node("a"))
    state.upsert_pod(pod("p", 2))
    assert state.ledger.reserve("default/p", "a", (0, 1)) is not None
    return state


@pytest.mark.parametrize(
    ("story", "why", "want_room"),
    [
        ("a refused bind gives its room back", Release.BIND_REFUSED, True),
        ("another pod took the room before the bind went out", Release.ROOM_TAKEN, True),
        ("the bind succeeded: the pod holds the room now", Release.BOUND, False),
        ("the watch shows our bind: the pod holds the room now", Release.SEEN_BOUND, False),
    ],
)
def test_a_release_says_why_and_moves_the_capacity_only_when_it_makes_room(
    story: str, why: Release, want_room: bool
) -> None:
    state = reserved_state()
    capacity, generation, counted = state.capacity_generation, state.generation, released(why)
    assert state.ledger.release("default/p", why) is not None, story
    assert state.ledger.reservations == {}, story
    assert (state.capacity_generation != capacity) is want_room, story
    assert state.generation > generation, story
    assert released(why) == counted + 1, story


def test_a_release_of_another_reservation_than_the_one_held_changes_nothing() -> None:
    state = reserved_state()
    held = state.ledger.reservations["default/p"]
    state.ledger.release("default/p", Release.BIND_REFUSED)
    again = state.ledger.reserve("default/p", "a", (0, 1))
    capacity, counted = state.capacity_generation, released(Release.BIND_REFUSED)
    assert state.ledger.release("default/p", Release.BIND_REFUSED, only=held) is None
    assert state.ledger.reservations == {"default/p": again}
    assert (state.capacity_generation, released(Release.BIND_REFUSED)) == (capacity, counted)


def test_a_lone_pods_nomination_and_its_reservation_are_told_apart_by_why() -> None:
    # A pod without a group preempts for itself: its nomination is keyed by the pod's key.
    state = reserved_state()
    holding = BoundPod(state.ledger.reservations["default/p"].request, "a", (2, 3))
    nomination = Nomination(
        root="default/p", pods={"default/p": ""}, holdings=(holding,), victims={}, since=0.0
    )
    state.ledger.nominate(nomination)
    assert state.ledger.release("default/p", Release.PLAN_STALE) is nomination
    assert state.ledger.nominations == {}
    assert list(state.ledger.reservations) == ["default/p"]


def test_every_nomination_goes_when_leadership_is_lost_and_pods_are_pending_again() -> None:
    state = ClusterState()
    state.upsert_node(node("a"))
    for name in ("p", "q"):
        state.upsert_pod(pod(name, 1))
    for name, gpu in (("p", 0), ("q", 1)):
        record = state.pods[f"default/{name}"]
        assert record.request is not None
        holding = BoundPod(record.request, "a", (gpu,))
        state.ledger.nominate(
            Nomination(
                root=record.key,
                pods={record.key: record.uid},
                holdings=(holding,),
                victims={},
                since=0,
            )
        )
    assert state.pending() == []
    state.ledger.release_nominations(Release.LEADERSHIP_LOST)
    assert state.ledger.nominations == {}
    assert sorted(r.key for r in state.pending()) == ["default/p", "default/q"]


def test_every_release_names_what_it_ends() -> None:
    assert {why.held for why in Release} == set(Held)
    assert len({why.label for why in Release}) == len(Release)

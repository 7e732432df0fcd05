"""A bind's answer (`ClusterState.confirm`) against the watch's word on the same bind, in
either order: the pod is bound where we put it, and a record the watch already gave is kept
as it is (a copy of it held a second spec and pod per pod in the real leader)."""

from __future__ import annotations

from typing import Any

from gpusched.scheduler.state import ClusterState
from testing.manifests import node, pod

KEY = "default/p"


def at(body: dict[str, Any], version: int) -> dict[str, Any]:
    body["metadata"]["resourceVersion"] = str(version)
    return body


def reserved() -> tuple[ClusterState, Any]:
    state = ClusterState()
    state.upsert_node(node("a"))
    state.upsert_pod(at(pod("p", 2, uid="u"), 1))
    reservation = state.ledger.reserve(KEY, "a", (0, 1))
    assert reservation is not None
    return state, reservation


def test_the_watch_first_then_the_bind_answer_keeps_the_watched_record() -> None:
    state, reservation = reserved()
    state.upsert_pod(at(pod("p", 2, node="a", at=(0, 1), uid="u"), 2))
    watched = state.pods[KEY]
    state.confirm(KEY, reservation)
    assert state.pods[KEY] is watched
    assert watched.source is not None  # its next heartbeat is not parsed again
    assert KEY not in state.ledger.reservations


def test_the_bind_answer_first_binds_the_pod_where_we_put_it_until_the_watch_shows_it() -> None:
    state, reservation = reserved()
    state.confirm(KEY, reservation)
    confirmed = state.pods[KEY]
    assert (confirmed.node, confirmed.assigned) == ("a", (0, 1))
    assert confirmed.holding is reservation.holding
    state.upsert_pod(at(pod("p", 2, node="a", at=(0, 1), uid="u"), 2))
    assert state.pods[KEY] is not confirmed
    assert (state.pods[KEY].node, state.pods[KEY].assigned) == ("a", (0, 1))
    assert KEY not in state.ledger.reservations


def test_a_watched_bind_to_other_gpus_than_reserved_is_still_told_ours() -> None:
    # Only a record that already says what the bind said is kept: this one names no GPUs.
    state, reservation = reserved()
    state.upsert_pod(at(pod("p", 2, node="a", uid="u"), 2))
    state.confirm(KEY, reservation)
    assert state.pods[KEY].assigned == (0, 1)

"""The state's indexes answer what a walk over every pod and reservation would: `pending`,
`bound`, `pods_of` and what one node holds, after any sequence of watch events and ledger
changes. Each walk below is the one the state did before it kept indexes."""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpusched.engine.snapshot import BoundPod
from gpusched.scheduler.ledger import Release
from gpusched.scheduler.state import ClusterState, PodRecord
from testing.manifests import node, pod

NODES = ("a", "b")
NAMES = ("p0", "p1", "p2", "p3", "p4")
GROUPS = ("g1", "g2")


def pending_walk(state: ClusterState) -> list[PodRecord]:
    nominated = state.ledger.nominated_pods()
    return [
        record
        for key, record in state.pods.items()
        if record.node is None
        and record.pod.spec.scheduler_name == state.scheduler_name
        and not record.pod.is_terminal
        and not record.deleting
        and key not in state.ledger.reservations
        and key not in nominated
    ]


def bound_walk(state: ClusterState) -> list[BoundPod]:
    ledger = [
        *(r.holding for r in state.ledger.reservations.values()),
        *(h for n in state.ledger.nominations.values() for h in n.holdings),
    ]
    named = [r.holding for r in state.pods.values() if r.holding and r.holding.gpus is not None]
    pinned = state.ledger.pins.pinned(state.pods, [*named, *ledger], state._gpu_count)
    held = [pinned.get(r.uid, r.holding) for r in state.pods.values() if r.holding is not None]
    return [*held, *ledger]


def members_walk(state: ClusterState, group: str) -> list[str]:
    return [
        record.key
        for record in state.pods.values()
        if record.request is not None
        and record.request.group is not None
        and f"{record.pod.metadata.namespace}/{record.request.group}" == group
    ]


def body(name: str, shape: str, group: str | None, uid: int) -> dict[str, Any]:
    """Pod ``name`` in one of the shapes a watch shows."""
    kind = {"uid": f"{name}-{uid}", "group": group}
    if shape == "pending":
        return pod(name, 1, **kind)
    if shape == "foreign":
        return pod(name, 1, scheduler="default-scheduler", **kind)
    if shape == "bound":
        return pod(name, 1, node="a", at=[0], **kind)
    if shape == "bound-unnamed":
        return pod(name, 1, node="b", **kind)
    if shape == "finished":
        return pod(name, 1, node="a", at=[1], phase="Succeeded", **kind)
    deleting = pod(name, 1, **kind)
    deleting["metadata"]["deletionTimestamp"] = "2026-12-01T10:00:00Z"
    return deleting


SHAPES = ("pending", "foreign", "bound", "bound-unnamed", "finished", "deleting")
steps = st.lists(
    st.one_of(
        st.tuples(
            st.just("upsert"),
            st.sampled_from(NAMES),
            st.sampled_from(SHAPES),
            st.sampled_from((None, *GROUPS)),
            st.integers(0, 1),
        ),
        st.tuples(st.just("delete"), st.sampled_from(NAMES)),
        st.tuples(st.just("reserve"), st.sampled_from(NAMES), st.sampled_from(NODES)),
        st.tuples(st.just("release"), st.sampled_from(NAMES)),
        st.tuples(st.just("confirm"), st.sampled_from(NAMES)),
    ),
    max_size=30,
)


def apply(state: ClusterState, step: tuple[Any, ...]) -> None:
    verb, name, *rest = step
    key = f"default/{name}"
    if verb == "upsert":
        shape, group, uid = rest
        state.upsert_pod(body(name, shape, group, uid))
    elif verb == "delete":
        state.delete_pod(key)
    elif verb == "reserve":
        state.ledger.reserve(key, rest[0], (7,))
    elif (reservation := state.ledger.reservations.get(key)) is not None:
        if verb == "release":
            state.ledger.release(key, Release.BIND_REFUSED, only=reservation)
        else:
            state.confirm(key, reservation)


@settings(max_examples=300)
@given(steps)
def test_the_indexes_answer_what_a_walk_over_every_pod_would(history: list[Any]) -> None:
    state = ClusterState()
    for name in NODES:
        state.upsert_node(node(name, gpus=8))
    for step in history:
        apply(state, step)
        assert state.pending() == pending_walk(state), step
        assert list(state.bound()) == bound_walk(state), step
        for group in GROUPS:
            want = members_walk(state, f"default/{group}")
            assert [r.key for r in state.pods_of([f"default/{group}"])] == want, step
        for name in NODES:
            on_node = Counter(h.pod.key for h in bound_walk(state) if h.node == name)
            assert Counter(h.pod.key for h in state._held_on(name)) == on_node, step


def test_a_pod_that_leaves_its_group_is_no_longer_one_of_its_members() -> None:
    state = ClusterState()
    state.upsert_pod(pod("p", 1, group="g1"))
    state.upsert_pod(pod("q", 1, group="g1"))
    state.upsert_pod(pod("p", 1, group="g2"))  # its label was changed
    assert [r.key for r in state.pods_of(["default/g1"])] == ["default/q"]
    assert [r.key for r in state.pods_of(["default/g2", "default/g1"])] == [
        "default/p",
        "default/q",
    ]

"""The node cache: a relist's unchanged Nodes (same resourceVersion) are not parsed again and
change nothing a cycle reads; a new version, a malformed one or a deletion is taken at once."""

from __future__ import annotations

from typing import Any

from gpusched.scheduler.state import ClusterState
from testing.manifests import node


def versioned(name: str, version: str, gpus: int = 8) -> dict[str, Any]:
    body = node(name, gpus=gpus)
    body["metadata"]["resourceVersion"] = version
    return body


def test_a_relisted_unchanged_node_is_kept_as_it_was() -> None:
    state = ClusterState()
    state.upsert_node(versioned("a", "7"))
    held, generation = state.nodes["a"], state.generation
    state.upsert_node(versioned("a", "7"))  # the same object, listed again
    assert state.nodes["a"] is held  # not parsed again: the snapshot cache keeps it
    assert state.generation == generation  # nothing for a cycle to look at


def test_a_new_version_of_a_node_replaces_it() -> None:
    state = ClusterState()
    state.upsert_node(versioned("a", "7"))
    held, generation = state.nodes["a"], state.generation
    state.upsert_node(versioned("a", "8", gpus=4))
    assert state.nodes["a"] is not held
    assert state.generation > generation
    assert state.nodes["a"].allocatable_resources()["nvidia.com/gpu"] == 4


def test_a_node_deleted_then_listed_again_is_taken_again() -> None:
    state = ClusterState()
    state.upsert_node(versioned("a", "7"))
    state.delete_node("a")
    state.upsert_node(versioned("a", "7"))
    assert "a" in state.nodes


def test_a_node_that_became_malformed_is_dropped_and_taken_back_when_fixed() -> None:
    state = ClusterState()
    state.upsert_node(versioned("a", "7"))
    broken = versioned("a", "8")
    broken["status"]["allocatable"]["nvidia.com/gpu"] = "lots"
    state.upsert_node(broken)
    assert "a" not in state.nodes
    assert "a" in state.node_errors
    state.upsert_node(versioned("a", "7"))  # an older good body after the bad one: taken
    assert "a" in state.nodes

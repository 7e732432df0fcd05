"""A topology key no node carries is named, with the closest known key and the configured
``topologyLevels``: on a PodGroup itself, and, for a CompositePodGroup's child, on the parent
(whose decision the child shares), so that neither points at the other for the reason."""

from __future__ import annotations

from gpusched.engine.policy import Policy
from gpusched.engine.schedule import schedule
from gpusched.offline.hints import composite_hints
from testing.engine import RACK, ZONE, cluster, composite, decision, gang, members

TYPO = "topology.example.com/rak"
TWO_RACKS = {"z1": {"r1": ["a100x8"], "r2": ["a100x8"]}}


def test_a_pod_groups_own_typo_says_did_you_mean() -> None:
    result = schedule(
        cluster(TWO_RACKS),
        members("w", 2, gpus=1, group="g"),
        [gang("g", 2, topology=TYPO)],
        Policy(),
    )
    (attempt,) = decision(result, "g").tried
    assert attempt.note.startswith(
        f"no node has label {TYPO}; did you mean {RACK}? (topologyLevels: "
    )


def test_a_childs_typo_is_named_on_the_parent_and_the_hint_is_the_fix() -> None:
    groups = [composite("zone", 1, topology=ZONE), gang("g", 2, topology=TYPO, parent="zone")]
    result = schedule(cluster(TWO_RACKS), members("w", 2, gpus=1, group="g"), groups, Policy())
    parent = decision(result, "zone")
    (attempt,) = parent.tried
    assert attempt.note.startswith(
        f"PodGroup default/g: no node has label {TYPO}; did you mean {RACK}?"
    )
    assert attempt.note in decision(result, "g").message  # the child shares its parent's reason
    assert composite_hints(groups[0], parent.tried) == [f"fix: {attempt.note}"]

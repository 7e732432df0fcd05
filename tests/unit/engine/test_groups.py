"""The group tree (`GroupTree`) and the typed group key (`GroupKey`): the walks every room of
the operator makes over PodGroups and CompositePodGroups."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gpusched.engine.groups import GroupKey, GroupSpec, GroupTree
from testing.engine import composite, gang

#          job
#        /     \
#   trainers    ps
#    /    \
#  t-a    t-b
JOB = [
    gang("t-b", 1, parent="trainers"),
    composite("job", 2),
    gang("ps", 1, parent="job"),
    composite("trainers", 2, parent="job"),
    gang("t-a", 1, parent="trainers"),
    gang("alone", 1),
]


@dataclass(frozen=True)
class WalkCase:
    id: str
    groups: list[GroupSpec]
    start: str
    want_descendants: list[str]
    want_root: str
    want_chain: list[str]
    """The start and its ancestors, innermost first."""


WALK_CASES = [
    WalkCase(
        "a root lists itself, then each child before its own children, children by name",
        JOB,
        "default/job",
        ["default/job", "default/ps", "default/trainers", "default/t-a", "default/t-b"],
        "default/job",
        ["default/job"],
    ),
    WalkCase(
        "a leaf two levels down walks up to the root",
        JOB,
        "default/t-b",
        ["default/t-b"],
        "default/job",
        ["default/t-b", "default/trainers", "default/job"],
    ),
    WalkCase(
        "a group without a parent or children is its own tree",
        JOB,
        "default/alone",
        ["default/alone"],
        "default/alone",
        ["default/alone"],
    ),
    WalkCase(
        "a parent that is missing ends the walk up at the missing parent's key",
        [gang("orphan", 1, parent="gone")],
        "default/orphan",
        ["default/orphan"],
        "default/gone",
        ["default/orphan"],
    ),
    WalkCase(
        "a cycle of parents is walked once, never forever",
        [composite("a", 1, parent="b"), composite("b", 1, parent="a")],
        "default/a",
        ["default/a", "default/b"],
        "default/b",
        ["default/a", "default/b"],
    ),
]


@pytest.mark.parametrize("case", WALK_CASES, ids=lambda c: c.id)
def test_walks(case: WalkCase) -> None:
    tree = GroupTree(case.groups)
    start = tree.groups[case.start]
    assert [g.key for g in tree.descendants(start)] == case.want_descendants
    assert tree.root_of(case.start) == case.want_root
    assert [g.key for g in tree.chain(case.start)] == case.want_chain


def test_roots_keep_the_given_order_and_children_come_in_key_order() -> None:
    tree = GroupTree(JOB)
    assert [g.key for g in tree.roots()] == ["default/job", "default/alone"]
    assert [g.key for g in tree.children("default/trainers")] == ["default/t-a", "default/t-b"]
    assert tree.children("default/ps") == []


def test_the_children_list_is_the_callers_own() -> None:
    tree = GroupTree(JOB)
    tree.children("default/job").clear()
    assert [g.key for g in tree.children("default/job")] == ["default/ps", "default/trainers"]


@pytest.mark.parametrize(
    ("key", "text"),
    [
        (GroupKey("default", "job"), "default/job"),
        (GroupKey("team-a", "llm-train"), "team-a/llm-train"),
    ],
)
def test_a_key_renders_as_namespace_slash_name_and_parses_back(key: GroupKey, text: str) -> None:
    assert str(key) == text
    assert GroupKey.parse(text) == key
    assert GroupSpec(key=text, kind=gang("x", 1).kind).namespace == key.namespace

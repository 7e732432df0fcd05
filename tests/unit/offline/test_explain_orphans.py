"""`explain` on a group tree whose root is missing: a PodGroup naming a parent
CompositePodGroup that does not exist is reported (Invalid, naming the parent), with its
sibling under the same missing parent, instead of failing on the missing key."""

from __future__ import annotations

from typing import Any

from gpusched.api.config import SchedulerConfig
from gpusched.inputs.objects import from_documents
from gpusched.offline.explain import Target, explain_target

Doc = dict[str, Any]


def _node(name: str) -> Doc:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"}},
    }


def _orphan(name: str) -> Doc:
    return {
        "apiVersion": "scheduling.gpusched.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "parentCompositePodGroupName": "nowhere",
            "schedulingPolicy": {"gang": {"minCount": 1}},
        },
    }


def _pod(name: str, group: str) -> Doc:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "labels": {"scheduling.gpusched.io/pod-group": group},
        },
        "spec": {
            "schedulerName": "gpusched",
            "containers": [
                {"name": "main", "image": "img", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            ],
        },
    }


def test_a_pod_whose_group_has_a_missing_parent_shows_the_groups_under_that_parent() -> None:
    objects = from_documents(
        [_node("n1"), _orphan("lost"), _orphan("stray"), _pod("lost-0", "lost")]
    )

    _, explanation = explain_target(objects, SchedulerConfig(), None, Target("Pod", "ml", "lost-0"))

    assert [g.key for g in explanation.groups] == ["ml/lost", "ml/stray"]
    lost = explanation.groups[0].decision
    assert lost is not None
    assert lost.message == "PodGroup ml/lost: parent CompositePodGroup ml/nowhere not found"

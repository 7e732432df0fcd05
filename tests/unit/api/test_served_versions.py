"""Which version of each foreign group kind the operator reads, from the API server's
discovery documents (``GET /apis/<group>/<version>``, an ``APIResourceList``), as servers of
each Kubernetes release answer. 1.37.2 is run for real in
tests/integration/test_served_versions.py; the releases it cannot be are here."""

from __future__ import annotations

from typing import Any

import pytest

from gpusched.api.foreign import Served, group_versions, served_versions


def resource_list(group_version: str, *kinds: str) -> dict[str, Any]:
    """An ``APIResourceList`` as kube-apiserver writes it: each kind with its status
    subresource beside it."""
    plurals = {"PodGroup": "podgroups", "CompositePodGroup": "compositepodgroups"}
    resources: list[dict[str, Any]] = []
    for kind in kinds:
        plural = {"Workload": "workloads", "PriorityClass": "priorityclasses"}.get(kind)
        plural = plural or plurals[kind]
        resources.append(
            {
                "name": plural,
                "singularName": "",
                "namespaced": True,
                "kind": kind,
                "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
            }
        )
        if kind in plurals:
            resources.append(
                {
                    "name": f"{plural}/status",
                    "singularName": "",
                    "namespaced": True,
                    "kind": kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
            "resources": resources}  # fmt: skip


def server(*served: tuple[str, tuple[str, ...]]) -> dict[str, dict[str, Any] | None]:
    """What discovery answers for each group/version the operator asks about: the served
    ones their list, the others 404 (None)."""
    answers: dict[str, dict[str, Any] | None] = dict.fromkeys(group_versions())
    for group_version, kinds in served:
        answers[group_version] = resource_list(group_version, *kinds)
    return answers


VOLCANO = ("scheduling.volcano.sh/v1beta1", ("PodGroup",))
COSCHEDULING = ("scheduling.x-k8s.io/v1alpha1", ("PodGroup",))
PRIORITY_ONLY = ("scheduling.k8s.io/v1", ("PriorityClass",))

CASES = [
    pytest.param(
        server(
            ("scheduling.k8s.io/v1", ("PriorityClass", "Workload", "PodGroup")),
            ("scheduling.k8s.io/v1beta1", ("Workload", "PodGroup")),
            ("scheduling.k8s.io/v1alpha3", ("Workload", "PodGroup", "CompositePodGroup")),
        ),
        Served(
            (
                ("scheduling.k8s.io/v1", "PodGroup"),
                ("scheduling.k8s.io/v1alpha3", "CompositePodGroup"),
            ),
            (
                "PodGroup.scheduling.volcano.sh (v1beta1)",
                "PodGroup.scheduling.x-k8s.io (v1alpha1)",
            ),
        ),
        id="1.38 serves PodGroup as v1 beside the older versions: v1 is read",
    ),
    pytest.param(
        server(
            PRIORITY_ONLY,
            ("scheduling.k8s.io/v1beta1", ("Workload", "PodGroup")),
            ("scheduling.k8s.io/v1alpha3", ("Workload", "PodGroup", "CompositePodGroup")),
            VOLCANO,
            COSCHEDULING,
        ),
        Served(
            (
                ("scheduling.k8s.io/v1beta1", "PodGroup"),
                ("scheduling.k8s.io/v1alpha3", "CompositePodGroup"),
                ("scheduling.volcano.sh/v1beta1", "PodGroup"),
                ("scheduling.x-k8s.io/v1alpha1", "PodGroup"),
            ),
            (),
        ),
        id="1.37 with both versions on: PodGroup as v1beta1, not v1alpha3",
    ),
    pytest.param(
        server(PRIORITY_ONLY, ("scheduling.k8s.io/v1alpha2", ("Workload", "PodGroup"))),
        Served(
            (("scheduling.k8s.io/v1alpha2", "PodGroup"),),
            (
                "CompositePodGroup.scheduling.k8s.io (v1, v1beta1, v1alpha3)",
                "PodGroup.scheduling.volcano.sh (v1beta1)",
                "PodGroup.scheduling.x-k8s.io (v1alpha1)",
            ),
        ),
        id="1.36 serves v1alpha2 only, and no CompositePodGroup",
    ),
    pytest.param(
        server(PRIORITY_ONLY, VOLCANO),
        Served(
            (("scheduling.volcano.sh/v1beta1", "PodGroup"),),
            (
                "PodGroup.scheduling.k8s.io (v1, v1beta1, v1alpha3, v1alpha2)",
                "CompositePodGroup.scheduling.k8s.io (v1, v1beta1, v1alpha3)",
                "PodGroup.scheduling.x-k8s.io (v1alpha1)",
            ),
        ),
        id="no Workload API at all (scheduling.k8s.io/v1 holds PriorityClass only)",
    ),
]


@pytest.mark.parametrize(("discovery", "want"), CASES)
def test_the_newest_served_version_of_each_kind_is_read(
    discovery: dict[str, dict[str, Any] | None], want: Served
) -> None:
    assert served_versions(discovery) == want


def test_a_discovery_document_of_an_odd_shape_serves_nothing_rather_than_failing() -> None:
    odd: dict[str, Any] = {"scheduling.k8s.io/v1beta1": {"resources": "podgroups"}}
    odd["scheduling.k8s.io/v1"] = {"resources": [None, "podgroups"]}
    assert served_versions(odd).chosen == ()

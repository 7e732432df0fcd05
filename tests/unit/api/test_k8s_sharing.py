"""Pods made from one template hold their equal parts once: the container list, the
tolerations, the status, and the repeated strings (namespace, node, scheduler, label and
annotation keys and values); so do machines of one kind their status. A leader holds every
pod and Node of the cluster, and a decoded body has its own copy of every string; what one
object says differently is never shared."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from gpusched.api import k8s
from gpusched.api.k8s import Node, Pod, parse_node, parse_pod
from testing.manifests import HOSTNAME, node, pod

Body = dict[str, Any]
GPU = "nvidia.com/gpu"
NOT_READY = {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}


def served(name: str, change: Callable[[Body], None] = lambda body: None) -> Pod:
    """Pod ``name`` of one template, bound to node a, as the API server admits it (its
    not-ready toleration) and a watch decodes it (no string shared with another body)."""
    body = pod(name, 1, node="a", at=[0], annotations={"team": "vision"})
    body["metadata"]["labels"]["app"] = "serve"
    body["spec"]["tolerations"] = [{**NOT_READY, "tolerationSeconds": 300}]
    body["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    change(body)
    decoded: Body = json.loads(json.dumps(body))
    return parse_pod(decoded)


def test_pods_of_one_template_share_their_equal_parts() -> None:
    a, b = served("a"), served("b")
    assert a.spec.containers is b.spec.containers
    assert a.spec.tolerations is b.spec.tolerations
    assert a.status is b.status
    assert a.spec.node_name is b.spec.node_name
    assert a.spec.scheduler_name is b.spec.scheduler_name
    assert a.metadata.namespace is b.metadata.namespace
    for mine, theirs in ((a.labels, b.labels), (a.metadata.annotations, b.metadata.annotations)):
        assert list(mine) == list(theirs)
        assert all(x is y for x, y in zip(mine, theirs, strict=True))  # the keys
        assert all(mine[key] is theirs[key] for key in mine)  # and the values
    assert (a.name, b.name) == ("a", "b")


def _container(body: Body) -> Body:
    container: Body = body["spec"]["containers"][0]
    return container


@pytest.mark.parametrize(
    ("story", "change", "part"),
    [
        (
            "another CPU request",
            lambda b: _container(b)["resources"]["requests"].update(cpu="8"),
            lambda p: p.spec.containers,
        ),
        (
            "the same GPU count written as a number, not a string",
            lambda b: _container(b)["resources"]["limits"].update({"nvidia.com/gpu": 1}),
            lambda p: p.spec.containers,
        ),
        (
            "another container name",
            lambda b: _container(b).update(name="sidecar"),
            lambda p: p.spec.containers,
        ),
        (
            "a toleration kept 60 s, not 300",
            lambda b: b["spec"]["tolerations"][0].update(tolerationSeconds=60),
            lambda p: p.spec.tolerations,
        ),
        (
            "no toleration seconds at all",
            lambda b: b["spec"]["tolerations"][0].pop("tolerationSeconds"),
            lambda p: p.spec.tolerations,
        ),
        (
            "a finished pod",
            lambda b: b["status"].update(phase="Succeeded"),
            lambda p: p.status,
        ),
        (
            "a pod with a ResourceClaim made for it",
            lambda b: b["status"].update(
                resourceClaimStatuses=[{"name": "gpus", "resourceClaimName": "b-gpus"}]
            ),
            lambda p: p.status,
        ),
    ],
)
def test_what_one_pod_says_differently_is_its_own(
    story: str, change: Callable[[Body], None], part: Callable[[Pod], object]
) -> None:
    template, other = served("a"), served("b", change)
    assert part(other) is not part(template), story
    assert part(other) != part(template), story
    assert part(served("c", change)) is part(other), story  # and shared with its own kind


def test_one_gpu_written_as_an_integer_and_as_a_float_are_two_inputs() -> None:
    """Python's ``1 == 1.0`` must not make one pod's container stand for the other's."""
    as_int = served("a", lambda b: _container(b)["resources"]["limits"].update({GPU: 1}))
    as_float = served("b", lambda b: _container(b)["resources"]["limits"].update({GPU: 1.0}))
    assert as_int.spec.containers is not as_float.spec.containers
    assert type(as_float.spec.containers[0].resources.limits[GPU]) is float


def test_the_memory_of_parts_starts_over_when_full(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(k8s, "SHARED_PARTS", 3)
    monkeypatch.setattr(k8s, "_parts", {})
    pods = [
        served(f"p{cpu}", lambda b, cpu=cpu: _container(b)["resources"]["requests"].update(cpu=cpu))
        for cpu in ("1", "2", "3", "4", "5")
    ]
    assert len(k8s._parts) <= 3
    assert [p.requests()["cpu"] for p in pods] == [1000, 2000, 3000, 4000, 5000]


def test_machines_of_one_kind_share_their_status_until_one_reports_otherwise() -> None:
    def decoded(name: str, ready: bool = True) -> Node:
        body = json.loads(json.dumps(node(name, capacity=True, ready=ready)))
        return parse_node(body)

    a, b, sick = decoded("a"), decoded("b"), decoded("c", ready=False)
    assert a.status is b.status
    assert sick.status is not a.status
    assert (a.ready, sick.ready) == (True, False)
    assert a.labels[HOSTNAME] == "a"

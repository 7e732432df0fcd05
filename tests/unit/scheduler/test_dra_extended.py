"""The claim gpusched creates for a pod's ``nvidia.com/gpu`` served by a DeviceClass
(KEP-5004): requests named and counted, and containers mapped to them, as kube-scheduler
does, since the kubelet hands each container its devices by these mappings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from gpusched.api.k8s import parse_pod
from gpusched.engine.extended import Mapping, extended_claim

GPU = "nvidia.com/gpu"


def _container(name: str, gpus: int, *, sidecar: bool = False, cpu: bool = True) -> dict[str, Any]:
    requests = {"cpu": "1"} if cpu else {}
    body: dict[str, Any] = {
        "name": name,
        "image": "registry.example.com/x:1",
        "resources": {"requests": requests, "limits": {GPU: str(gpus)} if gpus else {}},
    }
    if sidecar:
        body["restartPolicy"] = "Always"
    return body


@dataclass(frozen=True)
class Case:
    name: str
    init: list[dict[str, Any]]
    containers: list[dict[str, Any]]
    want_requests: tuple[tuple[str, int], ...]
    want_mappings: tuple[tuple[str, str], ...]
    """(container, request)."""


CASES = [
    Case(
        "one container: one request, named by its index and nvidia.com/gpu's place after cpu",
        [],
        [_container("main", 4)],
        (("container-0-request-1", 4),),
        (("main", "container-0-request-1"),),
    ),
    Case(
        "two app containers each get their own request; one asking none gets nothing",
        [],
        [_container("a", 2, cpu=False), _container("log", 0), _container("b", 1)],
        (("container-0-request-0", 2), ("container-2-request-1", 1)),
        (("a", "container-0-request-0"), ("b", "container-2-request-1")),
    ),
    Case(
        "an init container reuses the app container's devices and asks only for the rest",
        [_container("warm", 3)],
        [_container("main", 2)],
        (("container-0-request-1", 1), ("container-1-request-1", 2)),
        (
            ("main", "container-1-request-1"),
            ("warm", "container-1-request-1"),
            ("warm", "container-0-request-1"),
        ),
    ),
    Case(
        "init containers run one at a time: only the largest extra request is kept",
        [_container("small", 3), _container("large", 4)],
        [_container("main", 2)],
        (("container-1-request-1", 2), ("container-2-request-1", 2)),
        (
            ("main", "container-2-request-1"),
            ("small", "container-2-request-1"),
            ("small", "container-1-request-1"),
            ("large", "container-2-request-1"),
            ("large", "container-1-request-1"),
        ),
    ),
    Case(
        "a sidecar runs beside the app: its own request, and an init container before it reuses it",
        [_container("fetch", 1), _container("proxy", 1, sidecar=True)],
        [_container("main", 2)],
        (("container-1-request-1", 1), ("container-2-request-1", 2)),
        (
            ("proxy", "container-1-request-1"),
            ("main", "container-2-request-1"),
            ("fetch", "container-1-request-1"),
        ),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_requests_and_mappings(case: Case) -> None:
    pod = parse_pod(
        {
            "metadata": {"name": "p", "namespace": "ml", "uid": "uid-p"},
            "spec": {"initContainers": case.init, "containers": case.containers},
        }
    )
    claim = extended_claim(pod, "uid-p", GPU, "gpu.nvidia.com")
    assert claim.requests == case.want_requests
    assert claim.mappings == tuple(Mapping(c, GPU, r) for c, r in case.want_mappings)

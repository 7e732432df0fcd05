"""Extended resources backed by DRA (KEP-5004): a pod asking ``nvidia.com/gpu`` where a
DeviceClass has ``spec.extendedResourceName: nvidia.com/gpu`` gets its GPUs on a DRA node
through a ResourceClaim that the scheduler creates for it.

gpusched creates the claim kube-scheduler would: generated name ``<pod>-extended-resources-``,
the annotation ``resource.kubernetes.io/extended-resource-claim: "true"``, the pod as its
controlling owner, one ``ExactCount`` request per container (named
``container-<index>-request-<index of the resource among the container's sorted requests>``;
an init container that runs before the others first reuses their requests), and the pod's
``status.extendedResourceClaimStatus`` mapping each container to its requests. The kubelet
reads that mapping to hand each container its devices, so it must be exactly this shape.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpusched.api.dra import DRA_API_VERSION, EXTENDED_RESOURCE_CLAIM_ANNOTATION
from gpusched.api.k8s import Container, Pod

SIDECAR = "Always"
"""An init container with this restart policy runs beside the app containers."""


@dataclass(frozen=True, slots=True)
class Mapping:
    """Container ``container`` gets ``resource`` from request ``request`` of the claim."""

    container: str
    resource: str
    request: str


@dataclass(frozen=True, slots=True)
class ExtendedClaim:
    """The claim to create for a pod's extended-resource requests."""

    pod: str
    """The pod's name (its namespace is the claim's)."""
    uid: str
    device_class: str
    requests: tuple[tuple[str, int], ...]
    """(request name, device count), sorted by name, as kube-scheduler orders them."""
    mappings: tuple[Mapping, ...]

    @property
    def count(self) -> int:
        return sum(count for _, count in self.requests)

    def body(self, namespace: str) -> dict[str, Any]:
        return {
            "apiVersion": DRA_API_VERSION,
            "kind": "ResourceClaim",
            "metadata": {
                "namespace": namespace,
                "generateName": f"{self.pod}-extended-resources-",
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": self.pod,
                        "uid": self.uid,
                        "controller": True,
                    }
                ],
                "annotations": {EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"},
            },
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": name,
                            "exactly": {
                                "deviceClassName": self.device_class,
                                "allocationMode": "ExactCount",
                                "count": count,
                            },
                        }
                        for name, count in self.requests
                    ]
                }
            },
        }

    def pod_status(self, claim_name: str) -> dict[str, Any]:
        """The pod's ``status`` patch naming its claim and each container's requests."""
        return {
            "extendedResourceClaimStatus": {
                "requestMappings": [
                    {
                        "containerName": m.container,
                        "resourceName": m.resource,
                        "requestName": m.request,
                    }
                    for m in self.mappings
                ],
                "resourceClaimName": claim_name,
            }
        }


def extended_claim(pod: Pod, uid: str, resource: str, device_class: str) -> ExtendedClaim:
    """The claim for ``pod``'s requests of ``resource``, served by ``device_class``.

    Phases: (1) every app container and sidecar gets its own request, as they all run
    together; (2) each other init container runs alone before them, so it first reuses the
    requests of the containers that start after it, and asks only for what they lack; (3) of
    those extra requests only the largest is kept (init containers run one at a time), and
    the mappings to the others name it instead."""
    containers = [*pod.spec.init_containers, *pod.spec.containers]
    inits = len(pod.spec.init_containers)
    long_lived = [i for i, c in enumerate(containers) if i >= inits or c.restart_policy == SIDECAR]
    short_lived = [i for i in range(inits) if i not in long_lived]
    running: list[tuple[str, int] | None] = [None] * len(containers)
    mappings: list[Mapping] = []
    for i in long_lived:
        running[i], found = _request(i, containers[i], resource, ())
        mappings.extend(found)
    largest: tuple[str, int] | None = None
    extra_names: set[str] = set()
    init_mappings: list[Mapping] = []
    for i in short_lived:
        extra, found = _request(i, containers[i], resource, running[i:])
        if extra is not None:
            extra_names.add(extra[0])
            if largest is None or largest[1] < extra[1]:
                largest = extra
        init_mappings.extend(found)
    if largest is not None:
        init_mappings = [
            Mapping(m.container, m.resource, largest[0]) if m.request in extra_names else m
            for m in init_mappings
        ]
    requests = [r for r in running if r is not None]
    if largest is not None:
        requests.append(largest)
    return ExtendedClaim(
        pod.metadata.name,
        uid,
        device_class,
        tuple(sorted(requests)),
        (*mappings, *init_mappings),
    )


def _request(
    index: int,
    container: Container,
    resource: str,
    reusable: Sequence[tuple[str, int] | None],
) -> tuple[tuple[str, int] | None, list[Mapping]]:
    """The request container ``index`` needs beyond ``reusable`` ones (None: they suffice),
    and its mappings."""
    wanted = container.resources.effective_requests().get(resource, 0)
    if wanted <= 0:
        return None, []
    mappings: list[Mapping] = []
    covered = 0
    for request in reusable:
        if request is None:
            continue
        covered += request[1]
        mappings.append(Mapping(container.name, resource, request[0]))
        if covered >= wanted:
            return None, mappings
    # The API server defaults every request from its limit, so the requests it stores have
    # both keys; their sorted position names the request.
    names = sorted({*container.resources.requests, *container.resources.limits})
    name = f"container-{index}-request-{names.index(resource)}"
    mappings.append(Mapping(container.name, resource, name))
    return (name, wanted - covered), mappings

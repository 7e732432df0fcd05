"""What the kubelet actually gave each pod, from its PodResources API.

With the NVIDIA device plugin the kubelet, not gpusched, picks a pod's GPUs (the device-plugin
API carries no pod identity). The kubelet records its pick, and serves it over gRPC on
``/var/lib/kubelet/pod-resources/kubelet.sock`` (``v1.PodResourcesLister``: ``List``,
``GetAllocatableResources``). The agent reads it, maps device IDs (GPU UUIDs, as the NVIDIA
device plugin names devices; plain indices are accepted too) to the indices of the node's
topology, and publishes the result as the node annotation ``gpusched.io/gpus-actual``. The
scheduler counts those GPUs as held, whatever it had chosen.

A kubelet that is down or does not answer within the timeout publishes nothing: the last
value stays (a stale record is corrected at the next read; an empty one would free GPUs in
use).

The stubs in ``podresources_v1`` are generated from the kubelet's own ``api.proto``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

import grpc

from gpusched.agent.node import NodeAnnotator
from gpusched.agent.podresources_v1 import api_pb2, api_pb2_grpc
from gpusched.api.assignments import ACTUAL_GPUS_ANNOTATION, format_actual_gpus
from gpusched.api.config import GPU_RESOURCE
from gpusched.api.topology import GpuTopology

logger = logging.getLogger(__name__)

KUBELET_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
TIMEOUT_SECONDS = 10.0
"""How long one ``List`` may take. The kubelet answers from memory in milliseconds; ten
seconds means it is stuck, and the agent tries again at its next interval."""


class KubeletUnavailableError(Exception):
    """The PodResources API did not answer (kubelet down, socket missing, too slow)."""


async def list_pod_resources(
    socket: str = KUBELET_SOCKET, timeout: float = TIMEOUT_SECONDS
) -> api_pb2.ListPodResourcesResponse:
    async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
        stub = api_pb2_grpc.PodResourcesListerStub(channel)  # type: ignore[no-untyped-call]
        try:
            response: api_pb2.ListPodResourcesResponse = await stub.List(
                api_pb2.ListPodResourcesRequest(), timeout=timeout
            )
        except grpc.aio.AioRpcError as error:
            raise KubeletUnavailableError(
                f"PodResources List on {socket}: {error.code().name}: {error.details()}"
            ) from None
        return response


@dataclass(frozen=True, slots=True)
class ActualGpus:
    """Pod (``namespace/name``) → the topology indices of the GPUs it holds."""

    pods: dict[str, tuple[int, ...]] = field(default_factory=dict)
    unknown: tuple[str, ...] = ()
    """Device IDs that name no GPU of the topology (reported, not guessed)."""


def actual_gpus(
    response: api_pb2.ListPodResourcesResponse,
    topology: GpuTopology,
    resource: str = GPU_RESOURCE,
) -> ActualGpus:
    """Every container's devices of ``resource``, per pod (containers of one pod together)."""
    index_of = {g.uuid: g.index for g in topology.gpus if g.uuid}
    index_of.update({str(g.index): g.index for g in topology.gpus})
    pods: dict[str, set[int]] = {}
    unknown: list[str] = []
    for pod in response.pod_resources:
        for device_id in _device_ids(pod.containers, resource):
            index = index_of.get(device_id)
            if index is None:
                unknown.append(f"{pod.namespace}/{pod.name}: {device_id}")
            else:
                pods.setdefault(f"{pod.namespace}/{pod.name}", set()).add(index)
    return ActualGpus({k: tuple(sorted(v)) for k, v in sorted(pods.items())}, tuple(unknown))


def _device_ids(containers: Iterable[api_pb2.ContainerResources], resource: str) -> Iterable[str]:
    for container in containers:
        for devices in container.devices:
            if devices.resource_name == resource:
                yield from devices.device_ids


class ActualGpuPublisher:
    """Publishes `actual_gpus` on the agent's Node after each topology read."""

    def __init__(
        self,
        annotator: NodeAnnotator,
        socket: str = KUBELET_SOCKET,
        timeout: float = TIMEOUT_SECONDS,
    ) -> None:
        self.annotator = annotator
        self.socket = socket
        self.timeout = timeout

    async def __call__(self, topology: GpuTopology) -> bool:
        """Returns whether the annotation was written; a kubelet that does not answer leaves
        it as it is (logged)."""
        try:
            response = await list_pod_resources(self.socket, self.timeout)
        except KubeletUnavailableError as error:
            logger.warning(
                "kubelet unavailable; %s left as it was: %s", ACTUAL_GPUS_ANNOTATION, error
            )
            return False
        found = actual_gpus(response, topology)
        if found.unknown:
            logger.warning("device IDs that match no GPU: %s", ", ".join(found.unknown))
        return await self.annotator.publish(format_actual_gpus(found.pods), ACTUAL_GPUS_ANNOTATION)

"""The agent against a fake kubelet: a PodResources gRPC server on a unix socket, built from
the same generated stubs as the agent's client, so both sides speak the kubelet's protocol."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio

from gpusched.agent.podresources import (
    ActualGpuPublisher,
    KubeletUnavailableError,
    actual_gpus,
    list_pod_resources,
)
from gpusched.agent.podresources_v1 import api_pb2, api_pb2_grpc
from gpusched.api.assignments import ACTUAL_GPUS_ANNOTATION, parse_actual_gpus
from testing import dra

UUID = [uuid for _, uuid, _ in dra.gpus()]


def _pod(name: str, *containers: list[str], namespace: str = "ml") -> api_pb2.PodResources:
    return api_pb2.PodResources(
        name=name,
        namespace=namespace,
        containers=[
            api_pb2.ContainerResources(
                name=f"c{i}",
                devices=[api_pb2.ContainerDevices(resource_name="nvidia.com/gpu", device_ids=ids)],
            )
            for i, ids in enumerate(containers)
        ],
    )


@dataclass
class FakeKubelet(api_pb2_grpc.PodResourcesListerServicer):  # type: ignore[misc]
    pods: list[api_pb2.PodResources] = field(default_factory=list)
    delay: float = 0.0
    calls: int = 0

    async def List(self, request: Any, context: Any) -> api_pb2.ListPodResourcesResponse:  # noqa: N802
        self.calls += 1
        if self.delay:
            await asyncio.sleep(self.delay)  # the kubelet being slow, not the test waiting
        return api_pb2.ListPodResourcesResponse(pod_resources=self.pods)


@pytest.fixture
def socket_path() -> Iterator[str]:
    # A short path: unix socket paths are limited to about 100 bytes.
    with tempfile.TemporaryDirectory(prefix="pr-") as folder:
        yield str(Path(folder) / "kubelet.sock")


@pytest_asyncio.fixture
async def kubelet(socket_path: str) -> AsyncIterator[FakeKubelet]:
    fake = FakeKubelet()
    server = grpc.aio.server()
    api_pb2_grpc.add_PodResourcesListerServicer_to_server(fake, server)
    server.add_insecure_port(f"unix://{socket_path}")
    await server.start()
    yield fake
    await server.stop(grace=None)


@dataclass
class FakeNodeApi:
    annotations: dict[str, str] = field(default_factory=dict)
    patches: int = 0

    async def read_node(self, name: str) -> Any:
        meta = type("Meta", (), {"annotations": dict(self.annotations)})()
        return type("Node", (), {"metadata": meta})()

    async def patch_node(self, name: str, body: dict[str, Any]) -> None:
        self.patches += 1
        self.annotations.update(body["metadata"]["annotations"])


def _publisher(api: FakeNodeApi, socket: str, timeout: float = 5.0) -> ActualGpuPublisher:
    from gpusched.agent.node import NodeAnnotator

    return ActualGpuPublisher(NodeAnnotator(api, "node-a"), socket, timeout)  # type: ignore[arg-type]


@pytest.mark.asyncio
async def test_pods_are_published_with_the_gpus_the_kubelet_gave_them(
    kubelet: FakeKubelet, socket_path: str
) -> None:
    kubelet.pods = [
        # Chosen 0,1 by gpusched; the device plugin gave 2 and 5.
        _pod("train-0", [UUID[2], UUID[5]]),
        # Two containers, one GPU each: the pod holds both.
        _pod("two-containers", [UUID[3]], [UUID[7]]),
        _pod("cpu-only"),
        _pod("by-index", ["6"]),
    ]
    api = FakeNodeApi()
    assert await _publisher(api, socket_path)(dra.topology())
    assert parse_actual_gpus("node-a", api.annotations[ACTUAL_GPUS_ANNOTATION]) == {
        "ml/train-0": (2, 5),
        "ml/two-containers": (3, 7),
        "ml/by-index": (6,),
    }
    assert not await _publisher(api, socket_path)(dra.topology())  # unchanged: no patch
    assert api.patches == 1


@pytest.mark.asyncio
async def test_a_device_id_that_names_no_gpu_is_left_out_and_reported(
    kubelet: FakeKubelet, socket_path: str
) -> None:
    kubelet.pods = [_pod("p", ["GPU-not-here", UUID[1]])]
    found = actual_gpus(await list_pod_resources(socket_path, 5.0), dra.topology())
    assert found.pods == {"ml/p": (1,)}
    assert found.unknown == ("ml/p: GPU-not-here",)


@pytest.mark.asyncio
async def test_a_slow_kubelet_leaves_the_last_record_as_it_was(
    kubelet: FakeKubelet, socket_path: str
) -> None:
    api = FakeNodeApi({ACTUAL_GPUS_ANNOTATION: '{"ml/p":[1]}'})
    kubelet.delay = 5.0
    assert not await _publisher(api, socket_path, timeout=0.2)(dra.topology())
    assert api.annotations[ACTUAL_GPUS_ANNOTATION] == '{"ml/p":[1]}'
    assert api.patches == 0


@pytest.mark.asyncio
async def test_a_kubelet_that_is_down_is_an_error_not_an_empty_record(socket_path: str) -> None:
    with pytest.raises(KubeletUnavailableError, match="PodResources List"):
        await list_pod_resources(socket_path, 1.0)
    api = FakeNodeApi({ACTUAL_GPUS_ANNOTATION: '{"ml/p":[1]}'})
    assert not await _publisher(api, socket_path, timeout=1.0)(dra.topology())
    assert api.annotations[ACTUAL_GPUS_ANNOTATION] == '{"ml/p":[1]}'

"""The node agent: ``nvidia-smi`` (against a fake script it runs), and patching the Node only
when the annotation changed (against a stub API server on 127.0.0.1)."""

from __future__ import annotations

import json
import stat
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web
from kubernetes_asyncio import client

from gpusched.agent.node import NodeAnnotator
from gpusched.agent.service import publish_loop
from gpusched.agent.smi import AgentError, read_nvidia_smi
from gpusched.api.nvsmi import parse_topo_matrix
from gpusched.api.topology import (
    TOPOLOGY_ANNOTATION,
    GpuInfo,
    GpuTopology,
    parse_topology_annotation,
)
from gpusched.cli import main

TOPO = Path(__file__).resolve().parents[1] / "data" / "gpu-topology"


def capture(name: str) -> GpuTopology:
    return parse_topo_matrix((TOPO / name).read_bytes().decode()).topology


# ----- nvidia-smi ------------------------------------------------------------------------------


QUERY_OUTPUT = (
    "0, GPU-aaaa, NVIDIA GeForce RTX 3090, 24576\n1, GPU-bbbb, NVIDIA GeForce RTX 3090, [N/A]\n"
)


def fake_nvidia_smi(
    tmp_path: Path, topo_file: str | None, query: str | None = QUERY_OUTPUT
) -> Path:
    """A script answering ``topo -m`` with a capture and ``--query-gpu`` with ``query``."""
    (tmp_path / "query.txt").write_text(query or "")
    topo = f'cat "{TOPO / topo_file}"' if topo_file else 'echo "NVIDIA-SMI has failed" >&2; exit 9'
    answer = f'cat "{tmp_path / "query.txt"}"' if query is not None else "exit 3"
    script = tmp_path / "nvidia-smi"
    script.write_text(
        f'#!/bin/sh\ncase "$1" in\n  topo) {topo} ;;\n  --query-gpu=*) {answer} ;;\n'
        "  *) exit 2 ;;\nesac\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def test_nvidia_smi_gives_links_numa_and_details(tmp_path: Path) -> None:
    script = fake_nvidia_smi(tmp_path, "workstation-2xrtx3090-nvlink-bridge-nv4.topo.txt")
    got = read_nvidia_smi(str(script))
    assert got.links == (("X", "NV4"), ("NV4", "X"))
    assert got.gpus == (
        GpuInfo(
            index=0, uuid="GPU-aaaa", model="NVIDIA GeForce RTX 3090", memory_mib=24576, numa=0
        ),
        GpuInfo(index=1, uuid="GPU-bbbb", model="NVIDIA GeForce RTX 3090", numa=0),
    )


def test_nvidia_smi_without_the_query_still_gives_links(tmp_path: Path) -> None:
    script = fake_nvidia_smi(tmp_path, "pcie-rtx4090-8gpu-8numa-allsys.topo.txt", query=None)
    got = read_nvidia_smi(str(script))
    assert [g.numa for g in got.gpus] == [3, 2, 1, 0, 7, 6, 5, 4]
    assert all(g.uuid is None for g in got.gpus)


@pytest.mark.parametrize(
    ("topo_file", "message"),
    [
        pytest.param(
            "hgx-h100class-8gpu-9nic-4numa-uneven.topo.partial.txt",
            "truncated",
            id="a partial capture is not published",
        ),
        pytest.param(None, "exit 9: NVIDIA-SMI has failed", id="nvidia-smi fails"),
    ],
)
def test_nvidia_smi_failures(tmp_path: Path, topo_file: str | None, message: str) -> None:
    with pytest.raises(AgentError, match=message):
        read_nvidia_smi(str(fake_nvidia_smi(tmp_path, topo_file)))


def test_dry_run_prints_the_annotation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = fake_nvidia_smi(tmp_path, "dgx1-v100-8gpu-hybridcubemesh-1nic.topo.txt", query="")
    code = main(["agent", "--dry-run", "--source", "nvidia-smi", "--nvidia-smi", str(script)])
    out = capsys.readouterr().out
    assert code == 0
    topology = parse_topology_annotation("node-a", out.strip())
    assert topology == capture("dgx1-v100-8gpu-hybridcubemesh-1nic.topo.txt")


# ----- publishing ------------------------------------------------------------------------------


@dataclass
class StubApiServer:
    """GET and PATCH of one Node, recording the patches."""

    annotations: dict[str, str] = field(default_factory=dict)
    patches: list[dict[str, Any]] = field(default_factory=list)
    url: str = ""

    def node(self) -> dict[str, Any]:
        metadata = {"name": "node-a", "annotations": dict(self.annotations)}
        return {"apiVersion": "v1", "kind": "Node", "metadata": metadata}

    async def get(self, request: web.Request) -> web.Response:
        if request.match_info["name"] != "node-a":
            return web.json_response({"kind": "Status", "code": 404}, status=404)
        return web.json_response(self.node())

    async def patch(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.patches.append(body)
        self.annotations.update(body["metadata"]["annotations"])
        return web.json_response(self.node())


@pytest_asyncio.fixture
async def apiserver() -> AsyncIterator[StubApiServer]:
    stub = StubApiServer()
    app = web.Application()
    app.router.add_get("/api/v1/nodes/{name}", stub.get)
    app.router.add_patch("/api/v1/nodes/{name}", stub.patch)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    stub.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    yield stub
    await runner.cleanup()


@pytest.mark.asyncio
async def test_the_node_is_patched_only_when_the_annotation_changes(
    apiserver: StubApiServer,
) -> None:
    first = capture("workstation-2xrtx3090-nvlink-bridge-nv4.topo.txt").to_annotation()
    second = capture("delos-4gpu-partialmesh-nv2-nv1-sys.topo.txt").to_annotation()
    async with client.ApiClient(client.Configuration(host=apiserver.url)) as api:
        annotator = NodeAnnotator(client.CoreV1Api(api), "node-a")
        assert [await annotator.publish(v) for v in (first, first, second, second)] == [
            True,
            False,
            True,
            False,
        ]
        del apiserver.annotations[TOPOLOGY_ANNOTATION]  # removed by hand
        assert await annotator.publish(second), "a removed annotation is put back"
    assert [p["metadata"]["annotations"][TOPOLOGY_ANNOTATION] for p in apiserver.patches] == [
        first,
        second,
        second,
    ]
    assert all(
        set(p) == {"metadata"} and set(p["metadata"]) == {"annotations"} for p in apiserver.patches
    )


@pytest.mark.asyncio
async def test_once_with_an_unreadable_topology_publishes_nothing(
    apiserver: StubApiServer,
) -> None:
    def fail() -> GpuTopology:
        raise AgentError("nvidia-smi topo -m: no row for GPU7; the capture may be truncated")

    async with client.ApiClient(client.Configuration(host=apiserver.url)) as api:
        annotator = NodeAnnotator(client.CoreV1Api(api), "node-a")
        assert await publish_loop(fail, annotator, 60, once=True) == 1
        good = capture("workstation-2xrtx3090-nvlink-bridge-nv4.topo.txt")
        assert await publish_loop(lambda: good, annotator, 60, once=True) == 0
    assert len(apiserver.patches) == 1
    assert json.loads(apiserver.annotations[TOPOLOGY_ANNOTATION])["links"][0] == ["X", "NV4"]

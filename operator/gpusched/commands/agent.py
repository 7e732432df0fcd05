"""``gpusched agent``: publish this node's GPU topology as the ``gpusched.io/gpu-topology``
annotation (runs as a DaemonSet; needs the GPU devices, not privileges)."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, TextIO

from gpusched.commands import EXIT_BAD_INPUT, EXIT_OK

if TYPE_CHECKING:
    from gpusched.agent.service import TopologyReader

EXIT_FAILED = 1


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    agent = commands.add_parser(
        "agent",
        help="publish this node's GPU topology as a node annotation",
        description=(
            "Read every GPU's index, UUID, model, memory and NUMA node and every pair's link "
            "(NVML, or `nvidia-smi topo -m` where NVML is unusable), and write the node "
            "annotation gpusched.io/gpu-topology when it changed; repeat every --interval."
        ),
    )
    agent.add_argument(
        "--node-name",
        default=os.environ.get("NODE_NAME"),
        help="the Node to annotate (default: $NODE_NAME, set from spec.nodeName)",
    )
    agent.add_argument(
        "--interval",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="seconds between two reads (default 60)",
    )
    agent.add_argument("--once", action="store_true", help="read and publish once, then exit")
    agent.add_argument(
        "--dry-run",
        action="store_true",
        help="print the annotation's value and exit, touching no API server (implies --once)",
    )
    agent.add_argument(
        "--source",
        choices=("auto", "nvml", "nvidia-smi"),
        default="auto",
        help="where the topology comes from (default auto: NVML, else nvidia-smi)",
    )
    agent.add_argument("--nvidia-smi", default="nvidia-smi", metavar="PATH")
    agent.add_argument(
        "--pod-resources-socket",
        default="",
        metavar="PATH",
        help="the kubelet's PodResources socket: also publish the GPUs each pod really got "
        "as gpusched.io/gpus-actual (e.g. /var/lib/kubelet/pod-resources/kubelet.sock; "
        "default: off)",
    )
    agent.add_argument(
        "--kubeconfig", help="kubeconfig file (default: the in-cluster service account)"
    )
    agent.set_defaults(handler=_agent)


def _agent(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    import asyncio
    import logging

    from gpusched.agent.service import Source, TopologyReader
    from gpusched.agent.smi import AgentError

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if not args.interval > 0:
        print(f"gpusched agent: --interval must be > 0, got {args.interval}", file=err)
        return EXIT_BAD_INPUT
    read = TopologyReader(Source(args.source), args.nvidia_smi)
    if args.dry_run:
        try:
            out.write(read().to_annotation() + "\n")
        except AgentError as error:
            print(f"gpusched agent: {error}", file=err)
            return EXIT_FAILED
        return EXIT_OK
    if not args.node_name:
        print("gpusched agent: no node name: set NODE_NAME or pass --node-name", file=err)
        return EXIT_BAD_INPUT
    return asyncio.run(_run(args, read))


async def _run(args: argparse.Namespace, read: TopologyReader) -> int:
    from kubernetes_asyncio import client, config

    from gpusched.agent.node import NodeAnnotator
    from gpusched.agent.service import publish_loop

    if args.kubeconfig:
        await config.load_kube_config(config_file=args.kubeconfig)
    else:
        config.load_incluster_config()  # type: ignore[no-untyped-call]  # untyped upstream
    async with client.ApiClient() as api:
        annotator = NodeAnnotator(client.CoreV1Api(api), args.node_name)
        actual = None
        if args.pod_resources_socket:
            from gpusched.agent.podresources import ActualGpuPublisher

            actual = ActualGpuPublisher(annotator, args.pod_resources_socket)
        return await publish_loop(read, annotator, args.interval, once=args.once, actual=actual)

"""A simulated GB200 NVL72 cluster, as the NVIDIA GPU stack labels it: racks of 18 compute
trays with 4 GPUs each, every tray's GPUs in the rack's NVLink domain (node label
``nvidia.com/gpu.clique`` = ``<ClusterUUID>.<CliqueID>``; empty where the tray's fabric is not
attached). Inside a tray the four GPUs are NV18 to one another, two per Grace CPU (NUMA node).
Used by the NVLink replay (bench/nvlink_replay.py) and the engine's NVLink tests."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gpusched.api.k8s import Node, parse_node

CLIQUE_LABEL = "nvidia.com/gpu.clique"
"""The NVIDIA GPU driver stack's NVLink domain label (GPU feature discovery / DRA driver)."""
CLUSTER_UUID = "5f0c1d2e-8a3b-4c7d-9e21-6b4a8f3c2d10"
"""The fabric's cluster UUID in the simulated clique labels."""
PRODUCT = "NVIDIA-GB200"
GPUS_PER_TRAY = 4
TRAYS_PER_DOMAIN = 18
ZONE = "topology.kubernetes.io/zone"
BLOCK = "topology.example.com/block"
RACK = "topology.example.com/rack"


def tray_topology() -> str:
    """The ``gpusched.io/gpu-topology`` annotation of one GB200 compute tray."""
    gpus = [
        {"index": i, "model": "NVIDIA GB200", "memoryMiB": 189471, "numa": i // 2}
        for i in range(GPUS_PER_TRAY)
    ]
    links = [["X" if i == j else "NV18" for j in range(GPUS_PER_TRAY)] for i in range(4)]
    return json.dumps({"gpus": gpus, "links": links}, separators=(",", ":"))


def clique(domain: int) -> str:
    """The clique label value of NVLink domain ``domain`` (its CliqueID is ``domain``)."""
    return f"{CLUSTER_UUID}.{domain}"


def gb200_node(name: str, labels: Mapping[str, str]) -> Node:
    """One compute tray: 4 GPUs, 142 CPUs, 850 GiB allocatable."""
    raw: dict[str, Any] = {
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "nvidia.com/gpu.product": PRODUCT, **labels},
            "annotations": {"gpusched.io/gpu-topology": tray_topology()},
        },
        "status": {
            "allocatable": {
                "cpu": "142",
                "memory": "850Gi",
                "pods": "110",
                "nvidia.com/gpu": str(GPUS_PER_TRAY),
            },
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    return parse_node(raw)


def nvl72_nodes(
    domains: int, *, domains_per_block: int = 4, trays: int = TRAYS_PER_DOMAIN
) -> list[Node]:
    """``domains`` NVL72 racks of ``trays`` trays, ``domains_per_block`` racks per block, one
    zone; rack ``d`` is NVLink domain ``d``. Nodes are named ``nvl-<domain>-<tray>``."""
    nodes: list[Node] = []
    for domain in range(domains):
        labels = {
            ZONE: "zone-a",
            BLOCK: f"block-{domain // domains_per_block:02d}",
            RACK: f"rack-{domain:02d}",
            CLIQUE_LABEL: clique(domain),
        }
        nodes.extend(gb200_node(f"nvl-{domain:02d}-{tray:02d}", labels) for tray in range(trays))
    return nodes

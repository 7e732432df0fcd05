"""Karpenter (sigs.k8s.io/karpenter v1.15.0) with its kwok cloud provider, run for real beside the
control plane, and which pending pods it provisions nodes for, read as its code reads them.

`Karpenter.start` runs `karpenter-kwok`, built by build-go.sh from testing/cluster/karpenter/
(Karpenter's go.mod needs Go >= 1.26.9: build.list names the toolchain the go command fetches
from the module proxy). That main.go assembles Karpenter as its own kwok/main.go does but makes
the controller manager itself, to bind metrics and health probes on 127.0.0.1: Karpenter's
`operator.NewOperator` binds both on every address (pkg/operator/operator.go,
`fmt.Sprintf(":%d", ...)`) and no option names the host. The kwok provider creates a Node for
each NodeClaim, shaped by the instance types written here (`INSTANCE_TYPE`: 8 GPUs, like
testing/engine.py's a100x8) and labelled by the NodePool's template (`node_pool`: our zone and
rack labels, the GPU topology annotation). No kubelet stands behind those Nodes: the test plays
its part with `report_ready`, and kube-controller-manager's node-lifecycle controller lifts the
not-ready taint; Karpenter lifts its own `karpenter.sh/unregistered` taint on registration.

Karpenter's provisioner takes a pod when `IsProvisionable` (pkg/utils/pod/scheduling.go) holds:
`FailedToSchedule` (a `PodScheduled` condition with reason `Unschedulable`; its status is not
read), not bound (`spec.nodeName` empty), not nominated (`status.nominatedNodeName` empty: a pod
waiting for a preemption is left alone), and owned by neither a DaemonSet (apps/v1) nor a Node
(v1, a static pod). `provisionable` answers the same question of a pod as the API returns it.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from testing.apiserver import ApiClient, ResourceSpec, wait_for
from testing.cluster.controllers import apply_crds
from testing.cluster.controlplane import (
    LOOPBACK,
    ControlPlane,
    Process,
    _get,
    _spawn,
    _wait,
    free_port,
)
from testing.engine import topology_annotation
from testing.manifests import RACK, TOPOLOGY, ZONE

IGNORED_OWNERS = {("apps/v1", "DaemonSet"), ("v1", "Node")}


def failed_to_schedule(pod: Mapping[str, Any]) -> bool:
    """A PodScheduled condition with reason Unschedulable (`FailedToSchedule`)."""
    return any(
        c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
        for c in pod.get("status", {}).get("conditions", [])
    )


def provisionable(pod: Mapping[str, Any]) -> bool:
    """Whether Karpenter v1.15.0 would provision capacity for `pod` (`IsProvisionable`)."""
    owners = {
        (o.get("apiVersion"), o.get("kind")) for o in pod["metadata"].get("ownerReferences", [])
    }
    return (
        failed_to_schedule(pod)
        and not pod.get("spec", {}).get("nodeName")
        and not pod.get("status", {}).get("nominatedNodeName")
        and not owners & IGNORED_OWNERS
    )


NAME = "karpenter"
GROUP = "karpenter.sh"
KWOK_GROUP = "karpenter.kwok.sh"
NODEPOOLS = ResourceSpec(GROUP, "v1", "nodepools", "NodePool", False, True)
NODECLAIMS = ResourceSpec(GROUP, "v1", "nodeclaims", "NodeClaim", False, True)
NODECLASSES = ResourceSpec(KWOK_GROUP, "v1alpha1", "kwoknodeclasses", "KWOKNodeClass", False, True)
SPECS = (NODEPOOLS, NODECLAIMS, NODECLASSES)
NODEPOOL_LABEL = "karpenter.sh/nodepool"
"""On each Node Karpenter made: the name of its NodePool."""
KWOK_LABEL = "kwok.x-k8s.io/node"
"""On each Node the kwok provider made (value `fake`)."""
NODE_CLASS = "default"
INSTANCE_TYPE = "gpu-a100x8"
CRDS = (
    "kwok/charts/crds/karpenter.sh_nodepools.yaml",
    "kwok/charts/crds/karpenter.sh_nodeclaims.yaml",
    "kwok/charts/crds/karpenter.sh_nodeoverlays.yaml",
    "kwok/charts/crds/autoscaling.x-k8s.io_capacitybuffers.yaml",
    "kwok/apis/crds/karpenter.kwok.sh_kwoknodeclasses.yaml",
)
"""Paths in the built folder: Karpenter's CRDs (as its kwok chart ships them) and the kwok
provider's KWOKNodeClass."""


def instance_types(zone: str) -> list[dict[str, Any]]:
    """The kwok provider's instance types (its INSTANCE_TYPES_FILE_PATH format): one machine of
    8 GPUs, 64 CPUs and 512Gi like testing/engine.py's a100x8, on demand in `zone`."""
    on_demand = {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
    in_zone = {"key": ZONE, "operator": "In", "values": [zone]}
    resources = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"}
    return [
        {
            "name": INSTANCE_TYPE,
            "offerings": [{"Price": 1.0, "Available": True, "Requirements": [on_demand, in_zone]}],
            "architecture": "amd64",
            "operatingSystems": ["linux"],
            "resources": {**resources, "ephemeral-storage": "100Gi"},
        }
    ]


def node_class() -> dict[str, Any]:
    """The KWOKNodeClass the NodePools name (its CRD defaults its status to Ready)."""
    return {
        "apiVersion": f"{KWOK_GROUP}/v1alpha1",
        "kind": "KWOKNodeClass",
        "metadata": {"name": NODE_CLASS},
        "spec": {},
    }


def node_pool(name: str, zone: str, rack: str) -> dict[str, Any]:
    """A NodePool of `INSTANCE_TYPE` machines in `zone`, labelled with `rack` and annotated with
    the machine's GPU topology, as gpusched reads nodes; never consolidated nor expired, so a
    node stays while the test runs."""
    annotation = topology_annotation("a100x8")
    assert annotation is not None
    requirements = [
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [INSTANCE_TYPE]},
        {"key": ZONE, "operator": "In", "values": [zone]},
    ]
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "metadata": {"labels": {RACK: rack}, "annotations": {TOPOLOGY: annotation}},
                "spec": {
                    "nodeClassRef": {
                        "group": KWOK_GROUP,
                        "kind": "KWOKNodeClass",
                        "name": NODE_CLASS,
                    },
                    "requirements": requirements,
                    "expireAfter": "Never",
                },
            },
            "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never"},
        },
    }


def report_ready(api: ApiClient) -> list[str]:
    """The kubelet's part for the kwok provider's Nodes: each reports Ready once. Returns the
    names of those Nodes."""
    names = []
    for node in api.list("nodes", labels=f"{KWOK_LABEL}=fake"):
        name = node["metadata"]["name"]
        names.append(name)
        conditions = (node.get("status") or {}).get("conditions") or []
        if not any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
            api.patch_status("nodes", name, {"conditions": [{"type": "Ready", "status": "True"}]})
    return names


@dataclass
class Karpenter:
    """Karpenter's controllers with the kwok provider, running against `plane` until the plane
    stops. It acts on nothing until a NodePool exists (`node_pool`)."""

    process: Process

    @classmethod
    def start(
        cls, plane: ControlPlane, folder: Path, zone: str = "zone-a", timeout: float = 180
    ) -> Karpenter:
        """Install the CRDs and the KWOKNodeClass, start Karpenter and wait until it is
        ready."""
        if (running := plane.processes.get(NAME)) and running.popen.poll() is None:
            return cls(running)
        apply_crds(plane, *(folder / crd for crd in CRDS))
        plane.kubectl("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump(node_class()))
        work = plane.workdir / NAME
        work.mkdir(parents=True, exist_ok=True)
        types = work / "instance-types.json"
        types.write_text(json.dumps(instance_types(zone)))
        probe = free_port()
        process = _spawn(
            NAME,
            [
                # ctrl.GetConfigOrDie reads $KUBECONFIG; Karpenter's own flags take the rest.
                "env", f"KUBECONFIG={plane.kubeconfig_admin}",
                str(folder / "karpenter-kwok"),
                f"--metrics-port={free_port()}",
                f"--health-probe-port={probe}",
                "--disable-leader-election=true",
                f"--instance-types-file-path={types}",
                # Its batching window: how long it gathers pending pods before it provisions.
                "--batch-idle-duration=1s",
                "--batch-max-duration=5s",
                "--log-level=debug",
            ],
            plane.logs,
        )  # fmt: skip
        plane.processes[NAME] = process
        ready = f"http://{LOOPBACK}:{probe}/readyz"
        _wait(lambda: _get(ready) == 200, "Karpenter to be ready", process, timeout)
        return cls(process)

    def remove_node_pool(self, api: ApiClient, name: str, timeout: float = 120) -> None:
        """Delete the NodePool and its NodeClaims, and wait until Karpenter has removed their
        Nodes (it drains them; the fake kubelet confirms the pods' deletions)."""
        api.delete("nodepools", name, group=GROUP, missing_ok=True)
        selector = f"{NODEPOOL_LABEL}={name}"
        for claim in api.list("nodeclaims", labels=selector, group=GROUP):
            api.delete("nodeclaims", claim["metadata"]["name"], group=GROUP, missing_ok=True)

        def left() -> list[str]:
            claims = api.list("nodeclaims", labels=selector, group=GROUP)
            nodes = api.list("nodes", labels=selector)
            return [f"nodeclaim/{c['metadata']['name']}" for c in claims] + [
                f"node/{n['metadata']['name']}" for n in nodes
            ]

        wait_for(lambda: not left(), timeout=timeout, message=lambda: f"Karpenter left {left()}")


def listening(pid: int) -> list[str]:
    """The addresses (host:port) process `pid` accepts TCP connections on, read from /proc: its
    socket inodes matched against the kernel's LISTEN sockets (state 0A)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
    found = []
    for table, width in (("tcp", 4), ("tcp6", 16)):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A" or fields[9] not in inodes:
                continue
            host, port = fields[1].split(":")
            raw = bytes.fromhex(host)
            # /proc/net prints each 32-bit word of the address in host (little-endian) order.
            words = b"".join(raw[i : i + 4][::-1] for i in range(0, width, 4))
            found.append(f"{ipaddress.ip_address(words)}:{int(port, 16)}")
    return found

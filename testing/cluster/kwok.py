"""kwok ("Kubernetes WithOut Kubelet", sigs.k8s.io/kwok v0.8.0) run for real beside the control
plane: it plays the kubelet of the Nodes we mark, the way KAI's and Volcano's scale tests do.

`Kwok.start` runs the kwok controller (`cmd/kwok`, built by build-go.sh from
testing/cluster/kwok/) as the cluster admin. It manages only the Nodes annotated `MANAGED`
(`--manage-nodes-with-annotation-selector`), so the harness kubelet keeps every other Node and
the Nodes Karpenter's kwok provider makes stay untouched. For those Nodes it does what kubelets
do, by Stages (kwok's `Stage` objects, handed over with `--config`):

- a new Node gets its first status: Ready and the other conditions, its address (127.0.0.1,
  `--node-ip`), its node info (kwok's `node-initialize`);
- each Node holds a Lease in `kube-node-lease` (`--node-lease-duration-seconds`, renewed every
  quarter of it, as a kubelet renews its own) and refreshes its conditions now and then (kwok's
  `node-heartbeat-with-lease`): real load on the API server;
- a pod bound to one of them turns Ready and Running (kwok's `pod-ready`); a pod annotated
  `COMPLETE_AFTER` (a Go duration, "30s") completes that long after it started running: phase
  Succeeded, containers terminated with exit code 0 (our `completion_stage`, the shape of kwok's
  pod-complete Stage for Job pods without its Job-owner condition);
- a deleted pod is removed (kwok's `pod-delete`), as a kubelet confirms the deletion, but
  without first reporting a terminal phase as kubelets do since 1.27 (testing/cluster/kubelet.py
  does): a Job's `podFailurePolicy` never sees such a pod fail.

kwok serves its health endpoint on 127.0.0.1 only (`--server-address`) and gives pods addresses
from a loopback range (`--cidr`): nothing here binds or advertises anything else.

    kwok = Kwok.start(cluster)                  # UnavailableError without Go
    kwok.create_nodes(api, [kwok_node("n0", "zone-a", "rack-1")])
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from testing.apiserver import ApiClient
from testing.cluster.cluster import RealCluster
from testing.cluster.controllers import go_build
from testing.cluster.controlplane import LOOPBACK, Process, _get, _spawn, _wait, free_port
from testing.manifests import node as node_manifest

NAME = "kwok"
MANAGED = "kwok.gpusched.test/managed"
"""Annotation (value "true") on each Node kwok manages."""
COMPLETE_AFTER = "pod-complete.stage.kwok.x-k8s.io/delay"
"""Annotation on a pod: how long it runs before it completes (a Go duration such as "30s"). The
name is the one kwok's own pod-complete Stage reads for Job pods."""
LEASE_SECONDS = 40
"""A Node Lease's duration, seconds: the kubelet's default (`nodeLeaseDurationSeconds`). Renewed
every quarter of it."""
POD_CIDR = "127.64.0.0/10"
"""Where kwok draws pod addresses from: loopback (4 million addresses), as every address of
these tests is."""
SHIPPED_STAGES = (
    "kustomize/stage/node/fast/node-initialize.yaml",
    "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "kustomize/stage/pod/fast/pod-ready.yaml",
    "kustomize/stage/pod/fast/pod-delete.yaml",
)
"""Paths in the built folder: the Stages kwok's module ships that we run as they are."""

Body = dict[str, Any]


def completion_stage() -> Body:
    """A Stage: a Running pod annotated `COMPLETE_AFTER` ends that long after it began running
    (kwok starts the delay when it sees the pod Running): Succeeded, not Ready, each container
    terminated with exit code 0, reason Completed."""
    delay = f'.metadata.annotations["{COMPLETE_AFTER}"]'
    status = """\
{{ $now := Now }}
conditions:
- lastTransitionTime: {{ $now | Quote }}
  reason: PodCompleted
  status: "False"
  type: Ready
- lastTransitionTime: {{ $now | Quote }}
  reason: PodCompleted
  status: "False"
  type: ContainersReady
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: false
  restartCount: 0
  started: false
  state:
    terminated:
      exitCode: 0
      finishedAt: {{ $now | Quote }}
      reason: Completed
{{ end }}
phase: Succeeded
"""
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": "pod-complete-after"},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": {
                "matchExpressions": [
                    {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                    {"key": ".status.phase", "operator": "In", "values": ["Running"]},
                    {"key": delay, "operator": "Exists"},
                ]
            },
            "delay": {"durationMilliseconds": 0, "durationFrom": {"expressionFrom": delay}},
            "next": {"statusTemplate": status},
        },
    }


def kwok_node(
    name: str,
    zone: str,
    rack: str,
    *,
    kind: str | None = "a100x8",
    cpu: str = "64",
    memory: str = "512Gi",
    labels: Mapping[str, str] | None = None,
) -> Body:
    """A Node for kwok to manage: machine `kind` (testing/engine.py's KINDS: its GPUs and our
    topology annotation; None: no GPUs) in `zone`/`rack`, annotated `MANAGED`. Its status
    carries capacity and allocatable only: kwok reports the conditions and the address, as a
    kubelet would."""
    body = node_manifest(
        name, zone, rack, kind=kind, cpu=cpu, memory=memory, labels=labels, capacity=True
    )
    body["metadata"]["annotations"][MANAGED] = "true"
    del body["status"]["conditions"]
    return body


def is_ready(node: Body) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


@dataclass
class Kwok:
    """The kwok controller, running against `cluster` until its control plane stops."""

    process: Process
    cluster: RealCluster
    lease_seconds: int

    @classmethod
    def start(
        cls,
        cluster: RealCluster,
        folder: Path | None = None,
        *,
        lease_seconds: int = LEASE_SECONDS,
        timeout: float = 60,
    ) -> Kwok:
        """Start kwok (built on first use: `go_build("kwok")`) and wait until it serves its
        health endpoint, which it does once its informers run. A kwok already running on the
        cluster's plane with the same lease duration is reused; with another, restarted."""
        plane = cluster.plane
        lease_flag = f"--node-lease-duration-seconds={lease_seconds}"
        running = plane.processes.pop(NAME, None)
        if running is not None and running.popen.poll() is None:
            if lease_flag in running.popen.args:
                plane.processes[NAME] = running
                return cls(running, cluster, lease_seconds)
            running.stop()
        folder = folder or go_build(NAME)
        work = plane.workdir / NAME
        work.mkdir(parents=True, exist_ok=True)
        stages = work / "stages.yaml"
        texts = [(folder / path).read_text() for path in SHIPPED_STAGES]
        stages.write_text("\n---\n".join([*texts, yaml.safe_dump(completion_stage())]))
        port = free_port()
        process = _spawn(
            NAME,
            [
                # kwok also reads ~/.kwok/kwok.yaml when it exists: HOME is its own folder.
                "env", f"HOME={work}",
                str(folder / "kwok"),
                f"--kubeconfig={plane.kubeconfig_admin}",
                f"--config={stages}",
                f"--manage-nodes-with-annotation-selector={MANAGED}=true",
                lease_flag,
                f"--node-ip={LOOPBACK}",
                f"--cidr={POD_CIDR}",
                f"--server-address={LOOPBACK}:{port}",
            ],
            plane.logs,
        )  # fmt: skip
        plane.processes[NAME] = process
        healthy = f"http://{LOOPBACK}:{port}/healthz"
        _wait(lambda: _get(healthy) == 200, "kwok to serve /healthz", process, timeout)
        return cls(process, cluster, lease_seconds)

    def adopt(self, names: Iterable[str]) -> None:
        """Tell the harness kubelet that kwok serves Nodes `names`: it leaves their pods
        alone. `create_nodes` does it; a caller creating the Nodes itself calls it first."""
        self.cluster.kubelet.elsewhere.update(names)

    def create_nodes(self, api: ApiClient, nodes: Sequence[Body]) -> list[Body]:
        """Create `nodes` (`kwok_node`) for kwok to manage."""
        self.adopt(n["metadata"]["name"] for n in nodes)
        return [api.create(n) for n in nodes]

    def lease(self, api: ApiClient, node: str) -> Body | None:
        """Node `node`'s Lease in kube-node-lease, None before kwok made it."""
        return api.get_or_none("leases", node, "kube-node-lease", group="coordination.k8s.io")

"""Other projects' controllers, run for real beside the control plane (controlplane.py), and the
CRDs of the workload kinds whose controllers cannot run here.

Each controller is built from its pinned Go module in testing/cluster/<name>/ by build-go.sh
(once, cached outside the repository, like the control plane) and runs as a process of the
`ControlPlane`, as the cluster admin, bound to 127.0.0.1; its CRDs come with its module.

- `KubeRay`: the KubeRay operator (ray-operator v1.5.0) with its scheduler-plugins batch
  scheduler (`--batch-scheduler=scheduler-plugins`). A RayCluster labelled
  `ray.io/gang-scheduling-enabled` becomes a coscheduling PodGroup
  (scheduling.x-k8s.io/v1alpha1, named after the RayCluster, minMember = workers + 1 head) and
  pods labelled `scheduling.x-k8s.io/pod-group=<RayCluster>` with schedulerName
  `scheduler-plugins-scheduler`.
- `Kueue`: Kueue's manager (v0.17.0) with its plain-pod integration and its webhooks on
  127.0.0.1: a pod group (label `kueue.x-k8s.io/pod-group-name`, annotation
  `kueue.x-k8s.io/pod-group-total-count`, label `kueue.x-k8s.io/queue-name`) in a namespace
  labelled `gpusched.test/kueue=true` is gated, becomes a Kueue Workload, is admitted into the
  test ClusterQueue and ungated.
- `WORKLOAD_CRDS`: JobSet, LeaderWorkerSet, PyTorchJob, MPIJob and TrainJob, written from their
  published schemas (testing/cluster/crds/README.md), for tests that play their controllers.

    folder = go_build("kuberay")              # UnavailableError without Go
    ray = KubeRay.start(cluster.plane, folder)
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from testing.cluster.controlplane import (
    LOOPBACK,
    ControlPlane,
    Process,
    UnavailableError,
    _certificate,
    _get,
    _spawn,
    _wait,
    _write_key,
    free_port,
)

HERE = Path(__file__).resolve().parent
BUILD_GO = HERE / "build-go.sh"
WORKLOAD_CRDS = HERE / "crds"
"""Folder of the JobSet, LeaderWorkerSet and Kubeflow CRDs (YAML, one CRD a file)."""


def go_build(name: str) -> Path:
    """The folder `build-go.sh <name>` built (minutes the first time, then instant)."""
    if shutil.which("go") is None:
        raise UnavailableError(f"{name} is built from its Go module: Go is not on PATH")
    done = subprocess.run(
        ["bash", str(BUILD_GO), name], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"building {name} failed:\n{done.stderr[-4000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


def apply_crds(plane: ControlPlane, *paths: Path) -> None:
    """Server-side apply of CRD files or folders, waiting until each is Established. Conflicts
    are forced: another test may have applied the same CRD under another field manager."""
    for path in paths:
        plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))
    for path in paths:
        plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(path))


@dataclass
class KubeRay:
    """The KubeRay operator, running against `plane` until the plane stops."""

    process: Process

    NAME = "ray-operator"
    SCHEDULER_NAME = "scheduler-plugins-scheduler"
    """The schedulerName KubeRay's scheduler-plugins batch scheduler forces on every pod."""
    GANG_LABEL = "ray.io/gang-scheduling-enabled"
    """On a RayCluster: make a coscheduling PodGroup for it and label its pods."""
    POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
    """On each pod: the name of its coscheduling PodGroup (the RayCluster's name)."""
    CRDS = (
        "config/crd/bases/ray.io_rayclusters.yaml",
        "config/crd/bases/ray.io_rayjobs.yaml",
        "config/crd/bases/ray.io_rayservices.yaml",
        "config/crd/bases/scheduling.x-k8s.io_podgroups.yaml",
    )
    """Paths in the built folder: KubeRay's CRDs and the coscheduling PodGroup's."""

    @classmethod
    def ray_cluster(cls, name: str, workers: int, namespace: str = "ml") -> dict[str, Any]:
        """A RayCluster with KubeRay's gang label: a CPU head and `workers` workers of 8 GPUs."""

        def template(container: str, limits: dict[str, str]) -> dict[str, Any]:
            resources = {"limits": limits}
            return {"spec": {"containers": [{"name": container, "image": "rayproject/ray:2.9.0",
                                             "resources": resources}]}}  # fmt: skip

        return {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "metadata": {"name": name, "namespace": namespace, "labels": {cls.GANG_LABEL: "true"}},
            "spec": {
                "headGroupSpec": {
                    "rayStartParams": {},
                    "template": template("ray-head", {"cpu": "1", "memory": "2Gi"}),
                },
                "workerGroupSpecs": [
                    {
                        "groupName": "gpu",
                        "replicas": workers,
                        "minReplicas": workers,
                        "maxReplicas": workers,
                        "rayStartParams": {},
                        "template": template("ray-worker", {"nvidia.com/gpu": "8"}),
                    }
                ],
            },
        }

    @classmethod
    def start(cls, plane: ControlPlane, folder: Path, timeout: float = 120) -> KubeRay:
        """Install the CRDs, start the operator and wait until it is ready."""
        if (running := plane.processes.get(cls.NAME)) and running.popen.poll() is None:
            return cls(running)
        apply_crds(plane, *(folder / crd for crd in cls.CRDS))
        probe = free_port()
        process = _spawn(
            cls.NAME,
            [
                str(folder / "ray-operator"),
                f"--kubeconfig={plane.kubeconfig_admin}",
                f"--metrics-addr={LOOPBACK}:{free_port()}",
                f"--health-probe-bind-address={LOOPBACK}:{probe}",
                "--enable-leader-election=false",
                "--batch-scheduler=scheduler-plugins",
                "--log-stdout-encoder=console",
            ],
            plane.logs,
        )
        plane.processes[cls.NAME] = process
        ready = f"http://{LOOPBACK}:{probe}/readyz"
        _wait(lambda: _get(ready) == 200, "the KubeRay operator to be ready", process, timeout)
        return cls(process)


@dataclass
class Kueue:
    """Kueue's manager with its plain-pod integration, running against `plane` until the plane
    stops, with its webhooks served on 127.0.0.1 (a CA generated here; the webhook
    configurations point at the manager by URL). It manages pods only in namespaces labelled
    `NAMESPACE_LABEL` (the webhooks see no other pod), and admits into the ClusterQueue
    `CLUSTER_QUEUE` (ResourceFlavor `FLAVOR`, quota far beyond any test)."""

    process: Process

    NAME = "kueue"
    NAMESPACE = "kueue-system"
    NAMESPACE_LABEL = "gpusched.test/kueue"
    """`<label>: "true"` on a namespace lets Kueue manage its pods."""
    QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
    GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
    GROUP_COUNT = "kueue.x-k8s.io/pod-group-total-count"
    """Annotation: how many pods the group has."""
    GATE = "kueue.x-k8s.io/admission"
    """The scheduling gate Kueue's webhook puts on a managed pod and lifts on admission."""
    CLUSTER_QUEUE = "gpusched-test"
    FLAVOR = "default-flavor"
    WEBHOOKS = frozenset({"mpod.kb.io", "vpod.kb.io"})
    """Of Kueue's webhooks, those of the plain-pod integration. Its own kinds' webhooks only
    default and validate them, which the tests do not need."""
    CRDS = "config/components/crd/bases"
    WEBHOOK_MANIFEST = "config/components/webhook/manifests.yaml"

    @classmethod
    def start(cls, plane: ControlPlane, folder: Path, timeout: float = 180) -> Kueue:
        """Install the CRDs and webhooks, start the manager, wait until it is ready, and
        create the ResourceFlavor and ClusterQueue."""
        if (running := plane.processes.get(cls.NAME)) and running.popen.poll() is None:
            return cls(running)
        work = plane.workdir / "kueue"
        certs = work / "certs"
        ca = _webhook_certificates(certs)
        apply_crds(plane, folder / cls.CRDS)
        plane.kubectl("apply", "-f", "-", stdin=_namespace(cls.NAMESPACE))
        port, probe = free_port(), free_port()
        config = work / "config.yaml"
        config.write_text(yaml.safe_dump(cls._configuration(port, probe, certs)))
        webhooks = cls._webhooks(folder / cls.WEBHOOK_MANIFEST, port, ca)
        plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=webhooks)
        process = _spawn(
            cls.NAME,
            [
                *_with_files_in_etc(work / "etc", {"kueue/metrics/certs": certs}),
                str(folder / "kueue"),
                f"--config={config}",
                f"--kubeconfig={plane.kubeconfig_admin}",
            ],
            plane.logs,
        )
        plane.processes[cls.NAME] = process
        ready = f"http://{LOOPBACK}:{probe}/readyz"
        _wait(lambda: _get(ready) == 200, "Kueue's manager to be ready", process, timeout)
        plane.kubectl("apply", "--server-side", "-f", "-", stdin=cls._queues())
        return cls(process)

    @classmethod
    def _configuration(cls, port: int, probe: int, certs: Path) -> dict[str, Any]:
        return {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "namespace": cls.NAMESPACE,
            "health": {"healthProbeBindAddress": f"{LOOPBACK}:{probe}"},
            "metrics": {"bindAddress": "0"},
            "webhook": {"port": port, "host": LOOPBACK, "certDir": str(certs)},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "managedJobsNamespaceSelector": {"matchLabels": {cls.NAMESPACE_LABEL: "true"}},
            "integrations": {"frameworks": ["pod"]},
            # The visibility API server would listen on every address; nothing here uses it.
            "featureGates": {"VisibilityOnDemand": False},
        }

    @classmethod
    def _webhooks(cls, manifest: Path, port: int, ca: bytes) -> str:
        """Kueue's plain-pod webhooks, pointed at the manager on 127.0.0.1 and limited to the
        namespaces labelled for it."""
        documents = []
        for config in yaml.safe_load_all(manifest.read_text()):
            if not config:
                continue
            kept = []
            for hook in config["webhooks"]:
                if hook["name"] not in cls.WEBHOOKS:
                    continue
                path = hook["clientConfig"]["service"]["path"]
                hook["clientConfig"] = {
                    "url": f"https://{LOOPBACK}:{port}{path}",
                    "caBundle": base64.b64encode(ca).decode(),
                }
                hook["namespaceSelector"] = {"matchLabels": {cls.NAMESPACE_LABEL: "true"}}
                kept.append(hook)
            config["metadata"] = {"name": f"gpusched-test-kueue-{config['kind'].lower()}"}
            config["webhooks"] = kept
            documents.append(config)
        return yaml.safe_dump_all(documents)

    @classmethod
    def _queues(cls) -> str:
        flavor = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": cls.FLAVOR},
        }
        quota = [  # memory in Gi: a bare number is bytes
            {"name": resource, "nominalQuota": amount}
            for resource, amount in (
                ("cpu", "100000"),
                ("memory", "100000Gi"),
                ("nvidia.com/gpu", "100000"),
            )
        ]
        queue = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": cls.CLUSTER_QUEUE},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": [q["name"] for q in quota],
                        "flavors": [{"name": cls.FLAVOR, "resources": quota}],
                    }
                ],
            },
        }
        return yaml.safe_dump_all([flavor, queue])

    @classmethod
    def local_queue(cls, namespace: str, name: str = "queue") -> dict[str, Any]:
        """A LocalQueue into the test ClusterQueue (create it in a labelled namespace)."""
        return {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterQueue": cls.CLUSTER_QUEUE},
        }


def _namespace(name: str, labels: dict[str, str] | None = None) -> str:
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    if labels:
        body["metadata"] = {"name": name, "labels": labels}
    return yaml.safe_dump(body)


def _with_files_in_etc(folder: Path, copies: dict[str, Path]) -> list[str]:
    """The start of a command line that runs a program with `copies` (path under /etc: folder
    whose files to put there) seen under /etc by it alone: in a private mount namespace, with
    an overlay whose upper layer is `folder`, so the machine's /etc is never written. Kueue's
    manager reads its metrics certificate from /etc/kueue/metrics/certs, a path no flag moves
    (cmd/kueue/main.go, when its internal certificate management is off, as here: that would
    issue certificates for a Service name, not for 127.0.0.1). Needs root (CI's user) or
    unprivileged user namespaces."""
    if shutil.which("unshare") is None:
        raise UnavailableError("Kueue's manager needs unshare (util-linux) to see its files")
    upper, scratch = folder / "upper", folder / "work"
    for target, source in copies.items():
        (upper / target).mkdir(parents=True, exist_ok=True)
        for file in source.iterdir():
            shutil.copyfile(file, upper / target / file.name)
    scratch.mkdir(parents=True, exist_ok=True)
    mount = f"mount -t overlay overlay -o lowerdir=/etc,upperdir={upper},workdir={scratch} /etc"
    user = [] if os.geteuid() == 0 else ["--map-root-user"]
    return ["unshare", "--mount", "--propagation", "private", *user,
            "sh", "-c", f'{mount} && exec "$0" "$@"']  # fmt: skip


def _webhook_certificates(folder: Path) -> bytes:
    """A CA and a serving certificate for 127.0.0.1 in `folder` (tls.crt, tls.key, as
    controller-runtime's webhook server reads them); returns the CA in PEM."""
    folder.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _certificate("gpusched-test-webhook-ca", ca_key, None, ca=True)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _certificate("webhook", key, (ca, ca_key), ca=False)
    (folder / "tls.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(folder / "tls.key", key)
    return ca.public_bytes(serialization.Encoding.PEM)

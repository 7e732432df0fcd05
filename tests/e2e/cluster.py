"""The kind cluster the e2e stories run on, and small helpers to drive it with kubectl.

Everything goes through the real command-line tools (docker, kind, kubectl, helm) against a
real cluster; nothing here talks to an emulator. Waiting is always on a condition with a
deadline (``kubectl wait`` where it can, `wait_until` otherwise).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
CLUSTER = os.environ.get("GPUSCHED_E2E_CLUSTER", "gpusched-e2e")
IMAGE = "gpusched:e2e"
NAMESPACE = "gpusched-system"
RELEASE = "gpusched"
GPUS_PER_NODE = 8
GPU_PRODUCT = "NVIDIA-A100-SXM4-80GB"
ZONE = "topology.kubernetes.io/zone"
RACK = "topology.example.com/rack"
TOPOLOGY_ANNOTATION = "gpusched.io/gpu-topology"
GPUS_ANNOTATION = "gpusched.io/gpus"
GROUP = "scheduling.gpusched.io"
GROUP_LABEL = f"{GROUP}/pod-group"

LAYOUT = {
    f"{CLUSTER}-worker": ("zone-a", "rack-1"),
    f"{CLUSTER}-worker2": ("zone-a", "rack-1"),
    f"{CLUSTER}-worker3": ("zone-a", "rack-2"),
    f"{CLUSTER}-worker4": ("zone-b", "rack-3"),
}
"""Node → (zone, rack); see kind-config.yaml."""

T = TypeVar("T")


def missing_tools() -> list[str]:
    """What the suite needs and this machine lacks, in words, e.g. ``docker (no engine: …)``."""
    missing = [tool for tool in ("docker", "kind", "kubectl") if shutil.which(tool) is None]
    if "docker" not in missing:
        info = subprocess.run(
            ["docker", "info", "--format", "{{.ServerVersion}}"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if info.returncode != 0 or not info.stdout.strip():
            reason = (info.stderr.strip().splitlines() or ["no answer"])[-1]
            missing.append(f"a running Docker engine ({reason})")
    if find_helm() is None:
        missing.append("helm (on PATH or .ci/bin/helm: run .ci/install-helm.sh)")
    return missing


def find_helm() -> str | None:
    for candidate in (os.environ.get("HELM"), shutil.which("helm"), str(ROOT / ".ci/bin/helm")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def run(*args: str, stdin: str | None = None, timeout: float = 600, check: bool = True) -> str:
    result = subprocess.run(
        list(args), input=stdin, capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
    return result.stdout


def kubectl(*args: str, stdin: str | None = None, check: bool = True) -> str:
    return run("kubectl", "--context", f"kind-{CLUSTER}", *args, stdin=stdin, check=check)


def kubectl_json(*args: str) -> Any:
    return json.loads(kubectl(*args, "-o", "json"))


def kubectl_try(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """kubectl whose failure is the answer (a rejected object), not an error."""
    return subprocess.run(
        ["kubectl", "--context", f"kind-{CLUSTER}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def apply(objects: Iterable[Mapping[str, Any]]) -> None:
    kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(list(objects)))


def wait_until(what: str, probe: Callable[[], T | None], timeout: float = 120) -> T:
    """Polls ``probe`` until it returns something other than None or False; fails naming
    ``what`` and the last answer after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last is not None and last is not False:
            return last
        time.sleep(1)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; last: {last!r}")


# --- the cluster ------------------------------------------------------------------------------


def create_cluster() -> None:
    clusters = run("kind", "get", "clusters").split()
    if CLUSTER not in clusters:
        config = str(HERE / "kind-config.yaml")
        run("kind", "create", "cluster", "--name", CLUSTER, "--config", config, "--wait", "180s")


def delete_cluster() -> None:
    run("kind", "delete", "cluster", "--name", CLUSTER, check=False)


def _sample_topology() -> str:
    """A DGX A100's topology annotation, from the sample cluster (a real `nvidia-smi topo -m`
    capture, tests/data/gpu-topology/dgx-a100-8gpu-10nic.topo.txt)."""
    nodes = yaml.safe_load_all((ROOT / "examples/clusters/sample/nodes.yaml").read_text())
    for node in nodes:
        if node and node["metadata"]["labels"].get("nvidia.com/gpu.product") == GPU_PRODUCT:
            value: str = node["metadata"]["annotations"][TOPOLOGY_ANNOTATION]
            return value
    raise AssertionError("no DGX A100 node in examples/clusters/sample/nodes.yaml")


def advertise_gpus() -> None:
    """Zones, racks, GPU model labels, the topology annotation, and fake GPUs in the node
    status (extended resources a kubelet keeps: pods asking for them are admitted)."""
    topology = _sample_topology()
    for node, (zone, rack) in LAYOUT.items():
        kubectl(
            "label", "node", node, "--overwrite",
            f"{ZONE}={zone}", f"{RACK}={rack}", f"nvidia.com/gpu.product={GPU_PRODUCT}",
        )  # fmt: skip
        kubectl("annotate", "node", node, "--overwrite", f"{TOPOLOGY_ANNOTATION}={topology}")
        patch = [
            {"op": "add", "path": f"/status/{field}/nvidia.com~1gpu", "value": str(GPUS_PER_NODE)}
            for field in ("capacity", "allocatable")
        ]
        kubectl(
            "patch", "node", node, "--subresource=status", "--type=json",
            "-p", json.dumps(patch),
        )  # fmt: skip
    wait_until(f"every worker to advertise {GPUS_PER_NODE} GPUs", _all_advertise_gpus)


def _all_advertise_gpus() -> bool:
    path = "jsonpath={.status.allocatable.nvidia\\.com/gpu}"
    counts = [kubectl("get", "node", node, "-o", path).strip() for node in LAYOUT]
    return counts == [str(GPUS_PER_NODE)] * len(LAYOUT)


def build_and_load_image() -> None:
    run("docker", "build", "--tag", IMAGE, str(ROOT), timeout=1200)
    run("kind", "load", "docker-image", IMAGE, "--name", CLUSTER, timeout=600)


def install_chart() -> None:
    repository, tag = IMAGE.split(":")
    helm = find_helm()
    assert helm is not None
    run(
        helm, "upgrade", "--install", RELEASE, str(ROOT / "charts/gpusched"),
        "--kube-context", f"kind-{CLUSTER}", "--namespace", NAMESPACE, "--create-namespace",
        "--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
        "--set", "image.pullPolicy=Never", "--set", "verbose=true",
        "--wait", "--timeout", "5m",
    )  # fmt: skip


def dump_logs(into: Path) -> None:
    """kind's node logs and the operator's, for a failed run (CI uploads the folder)."""
    into.mkdir(parents=True, exist_ok=True)
    run("kind", "export", "logs", str(into), "--name", CLUSTER, check=False)
    logs = kubectl(
        "-n", NAMESPACE, "logs", "-l", "app.kubernetes.io/component=scheduler",
        "--all-containers", "--prefix", "--tail=-1", check=False,
    )  # fmt: skip
    (into / "gpusched.log").write_text(logs)


# --- the stories' objects ---------------------------------------------------------------------


def example(path: str) -> list[dict[str, Any]]:
    """The documents of an example file, pods made to fit a kind node: the same GPUs, groups,
    affinity and scheduler, but tiny CPU and memory requests and an image that is already
    loaded (the operator's own, sleeping)."""
    docs = [d for d in yaml.safe_load_all((ROOT / "examples" / path).read_text()) if d]
    return [shrink(d) if d["kind"] == "Pod" else d for d in docs]


def shrink(pod: dict[str, Any]) -> dict[str, Any]:
    pod = json.loads(json.dumps(pod))
    spec = pod["spec"]
    spec["terminationGracePeriodSeconds"] = 1
    for container in spec["containers"]:
        container["image"] = IMAGE
        container["imagePullPolicy"] = "Never"
        container["command"] = ["python", "-c", "import signal; signal.pause()"]
        for part in ("requests", "limits"):
            amounts = container.get("resources", {}).get(part)
            if amounts:
                amounts.pop("cpu", None)
                amounts.pop("memory", None)
        container.setdefault("resources", {}).setdefault("requests", {}).update(
            {"cpu": "5m", "memory": "16Mi"}
        )
    return pod


@dataclass(frozen=True)
class Bound:
    pod: str
    node: str
    gpus: tuple[int, ...]


def bound_pods(namespace: str, selector: str | None = None) -> list[Bound]:
    args = ["get", "pods", "-n", namespace]
    if selector:
        args += ["-l", selector]
    found = []
    for pod in kubectl_json(*args)["items"]:
        node = pod["spec"].get("nodeName")
        if node:
            value = (pod["metadata"].get("annotations") or {}).get(GPUS_ANNOTATION, "")
            gpus = tuple(int(i) for i in value.split(",") if i)
            found.append(Bound(pod["metadata"]["name"], node, gpus))
    return found


def rack_of(node: str) -> tuple[str, str]:
    return LAYOUT[node]


def lease_holder() -> str:
    """The replica holding the leader-election Lease; "" while there is none (or no Lease)."""
    result = kubectl_try("-n", NAMESPACE, "get", "lease", "gpusched", "-o", "json")
    if result.returncode != 0:
        return ""
    holder: str = json.loads(result.stdout)["spec"].get("holderIdentity") or ""
    return holder

"""Runs the real operator (Kopf, in its own thread) against the API emulator, and the helpers
its stories share. The objects come from testing/manifests.py, under the names the
stories use: ``gpu_node``, ``gpu_pod`` and ``gang``."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from kopf.testing import KopfRunner

from gpusched import handlers
from gpusched.api.config import SchedulerConfig, load_config
from testing import manifests
from testing.apiserver import ApiClient, wait_for

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
ZONE, RACK = manifests.ZONE, manifests.RACK
GROUP_LABEL, GPUS = manifests.GROUP_LABEL, manifests.GPUS
gpu_node = manifests.node
gpu_pod = manifests.pod
gang = manifests.pod_group
"""The stories' names for the one set of builders: a node, a pod, a PodGroup."""
FAST = {"operator": {"initialBackoffSeconds": 0.2, "maxBackoffSeconds": 1.0}}
"""Short backoffs so retries happen within a test's patience."""


@contextlib.contextmanager
def running_operator(
    kubeconfig: Path, config: Mapping[str, Any] | None = None, metrics_port: int = 0
) -> Iterator[handlers.Runtime]:
    """The operator, started and stopped around the block; fails if it crashed."""
    handlers.configure(
        handlers.Options(
            config=load_config({**FAST, **(config or {})}),
            kubeconfig=str(kubeconfig),
            metrics_address="127.0.0.1",
            metrics_port=metrics_port,
        )
    )
    handlers.running = None  # never wait on a previous run's runtime
    args = ["run", "--all-namespaces", "--standalone", "-m", "gpusched.handlers"]
    with KopfRunner(args, registry=handlers.registry, timeout=30) as runner:
        runtime = wait_for(lambda: handlers.running, timeout=20, message="operator startup")
        yield runtime
    assert runner.exception is None, runner.exception
    assert runner.exit_code == 0, runner.output
    assert "Traceback" not in runner.output, runner.output


def default_config() -> SchedulerConfig:
    return load_config(FAST)


def apply_yaml(api: ApiClient, *paths: Path) -> list[dict[str, Any]]:
    """``kubectl apply`` of YAML files (multi-document), in order, after creating the
    namespaces they name (a real API server refuses objects in a namespace that is missing)."""
    documents = [
        document
        for path in paths
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8"))
        if document
    ]
    for namespace in sorted({d["metadata"].get("namespace") or "default" for d in documents}):
        ensure_namespace(api, namespace)
    return [api.create(document) for document in documents]


def wait_nodes_ready(api: ApiClient) -> None:
    """Waits until no Node carries ``node.kubernetes.io/not-ready``: the API server puts that
    taint on every new Node and kube-controller-manager's node-lifecycle controller lifts it
    once the Node reports Ready, a moment later. A test that reads the cluster twice (live,
    then a dump of it) must not read it half-way through."""

    def tainted() -> list[str]:
        return [
            n["metadata"]["name"]
            for n in api.list("nodes")
            if any(t.get("key") == NOT_READY for t in n.get("spec", {}).get("taints") or [])
        ]

    wait_for(lambda: not tainted(), timeout=60, message=lambda: f"not-ready taints: {tainted()}")


NOT_READY = "node.kubernetes.io/not-ready"


def ensure_namespace(api: ApiClient, name: str) -> None:
    """Create namespace `name` if missing, and wait for its ``default`` ServiceAccount where
    the server has them (its admission refuses pods until the controller made it)."""
    if api.get_or_none("namespaces", name) is None:
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    if any(spec.plural == "serviceaccounts" for spec in api.specs):
        wait_for(
            lambda: api.get_or_none("serviceaccounts", "default", name),
            message=f"the default ServiceAccount of namespace {name}",
        )


def pods(api: ApiClient, namespace: str | None = None) -> dict[str, dict[str, Any]]:
    """Every pod by ``namespace/name``."""
    found = api.list("pods", namespace=namespace)
    return {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p for p in found}


def placement_of(pod: Mapping[str, Any]) -> tuple[str, tuple[int, ...]] | None:
    node = pod.get("spec", {}).get("nodeName")
    if not node:
        return None
    raw = pod["metadata"].get("annotations", {}).get(GPUS, "")
    return node, tuple(int(g) for g in raw.split(",") if g)


def assert_no_gpu_shared(api: ApiClient) -> None:
    """No GPU of any node belongs to two live pods."""
    owners: dict[tuple[str, int], str] = {}
    for key, pod in pods(api).items():
        if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            continue
        where = placement_of(pod)
        if where is None:
            continue
        for gpu in where[1]:
            other = owners.setdefault((where[0], gpu), key)
            assert other == key, f"GPU {gpu} of {where[0]} given to both {other} and {key}"


def events_for(api: ApiClient, name: str, namespace: str = "default") -> list[dict[str, Any]]:
    return [
        e
        for e in api.list("events", namespace=namespace, group="")
        if e.get("involvedObject", {}).get("name") == name
    ]


def group_status(
    api: ApiClient, name: str, namespace: str = "default", plural: str = "podgroups"
) -> dict[str, Any]:
    body = api.get(plural, name, namespace=namespace, group="scheduling.gpusched.io")
    status: dict[str, Any] = body.get("status") or {}
    return status


def condition(status: Mapping[str, Any], type_: str = "PodGroupScheduled") -> dict[str, Any]:
    for item in status.get("conditions") or []:
        if item.get("type") == type_:
            return dict(item)
    return {}


def dump(value: Any) -> str:
    return json.dumps(value, indent=1, default=str)[:4000]


def labels_of(api: ApiClient, node: str) -> dict[str, str]:
    labels: dict[str, str] = api.get("nodes", node)["metadata"].get("labels", {})
    return labels


def domains(api: ApiClient, pod_keys: Sequence[str], key: str) -> set[str]:
    everything = pods(api)
    nodes = {placement_of(everything[k])[0] for k in pod_keys}  # type: ignore[index]
    return {labels_of(api, n).get(key, "") for n in nodes}

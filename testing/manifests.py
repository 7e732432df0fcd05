"""Kubernetes objects as a person or a controller hands them to the API server, for tests.

One builder per kind, each with defaults so that a case states only what matters:

    node("a")                                  # 8 A100s in zone-a/rack-1, with its topology
    pod("train-0", 4, group="train")           # 4 GPUs, a member of PodGroup train
    pod_group("train", 4)                      # a gang of 4 that wants one rack

The defaults are the ones the API server would not set itself: a server fills in uid,
creationTimestamp and generation on create, so those given here matter only to tests that
hand objects straight to the operator's state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from testing.clock import WALL_START
from testing.engine import KINDS, topology_annotation

Body = dict[str, Any]

ZONE = "topology.kubernetes.io/zone"
RACK = "topology.example.com/rack"
HOSTNAME = "kubernetes.io/hostname"
GROUP_LABEL = "scheduling.gpusched.io/pod-group"
TOPOLOGY = "gpusched.io/gpu-topology"
GPUS = "gpusched.io/gpus"
GROUP_API = "scheduling.gpusched.io/v1alpha1"
NOW = WALL_START.strftime("%Y-%m-%dT%H:%M:%SZ")
"""Pods are created when a test clock starts unless a test says otherwise: a gang's timeout
counts from there, on the test's clock, never the machine's."""


def node(
    name: str,
    zone: str | None = "zone-a",
    rack: str | None = "rack-1",
    *,
    kind: str | None = "a100x8",
    gpus: int | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    cordoned: bool = False,
    taints: Sequence[Mapping[str, str]] = (),
    ready: bool = True,
    cpu: str = "64",
    memory: str = "512Gi",
    capacity: bool = False,
) -> Body:
    """A node shaped like machine ``kind`` (testing/engine.py's KINDS), labelled with
    its zone and rack. It carries the machine's topology annotation only when it has the
    machine's GPU count: a topology of 8 GPUs on a node with 2 would describe another machine.
    ``capacity`` also writes status.capacity (the kubelet's report), equal to allocatable."""
    machine_gpus = KINDS[kind][1] if kind is not None else 0
    count = machine_gpus if gpus is None else gpus
    allocatable = {"cpu": cpu, "memory": memory, "pods": "110"}
    if count:
        allocatable["nvidia.com/gpu"] = str(count)
    all_annotations: dict[str, str] = {}
    annotation = topology_annotation(kind) if kind is not None and count == machine_gpus else None
    if annotation is not None:
        all_annotations[TOPOLOGY] = annotation
    all_annotations.update(annotations or {})
    all_labels = {HOSTNAME: name}
    all_labels.update({k: v for k, v in ((ZONE, zone), (RACK, rack)) if v is not None})
    all_labels.update(labels or {})
    status: Body = {
        "allocatable": allocatable,
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
    }
    if capacity:
        status["capacity"] = dict(allocatable)
    body: Body = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": all_labels, "annotations": all_annotations},
        "status": status,
    }
    if cordoned or taints:
        body["spec"] = {"unschedulable": cordoned, "taints": [dict(t) for t in taints]}
    return body


def pod(
    name: str,
    gpus: int = 0,
    *,
    group: str | None = None,
    namespace: str = "default",
    scheduler: str = "gpusched",
    node: str | None = None,
    at: Sequence[int] | None = None,
    cpu: str | None = "4",
    memory: str | None = "16Gi",
    selector: Mapping[str, str] | None = None,
    gates: Sequence[str] = (),
    created: str | None = NOW,
    uid: str | None = None,
    annotations: Mapping[str, str] | None = None,
    phase: str | None = None,
) -> Body:
    """A pod asking ``scheduler`` for ``gpus`` whole GPUs (``nvidia.com/gpu``), a member of
    PodGroup ``group`` if given. ``node`` binds it; ``at`` names the GPUs it holds there."""
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    resources: Body = {"requests": requests}
    if gpus:
        requests["nvidia.com/gpu"] = str(gpus)
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
    container = {"name": "main", "image": "registry.example.com/train:1.0", "resources": resources}
    spec: Body = {"schedulerName": scheduler, "containers": [container]}
    if node is not None:
        spec["nodeName"] = node
    if selector:
        spec["nodeSelector"] = dict(selector)
    if gates:
        spec["schedulingGates"] = [{"name": gate} for gate in gates]
    all_annotations = {GPUS: ",".join(map(str, at))} if at is not None else {}
    all_annotations.update(annotations or {})
    metadata: Body = {
        "name": name,
        "namespace": namespace,
        "uid": uid or f"uid-{name}",
        "labels": {GROUP_LABEL: group} if group else {},
        "annotations": all_annotations,
    }
    if created is not None:
        metadata["creationTimestamp"] = created
    body: Body = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
    if phase is not None:
        body["status"] = {"phase": phase}
    return body


def pod_group(
    name: str,
    min_count: int,
    *,
    key: str | None = RACK,
    namespace: str = "default",
    timeout: int | None = None,
    parent: str | None = None,
    basic: bool = False,
) -> Body:
    """A PodGroup: a gang of ``min_count`` that wants one domain of ``key`` (None: anywhere);
    ``basic`` schedules its pods one by one instead."""
    policy = {"basic": {}} if basic else {"gang": {"minCount": min_count}}
    spec: Body = {"schedulingPolicy": policy}
    if key is not None:
        spec["schedulingConstraints"] = {"topology": [{"key": key}]}
    if timeout is not None:
        spec["scheduleTimeoutSeconds"] = timeout
    if parent:
        spec["parentCompositePodGroupName"] = parent
    return _group("PodGroup", name, namespace, spec)


def composite(name: str, min_groups: int, *, key: str = RACK, namespace: str = "default") -> Body:
    """A CompositePodGroup: ``min_groups`` child groups together in one domain of ``key``."""
    spec: Body = {
        "schedulingPolicy": {"gang": {"minGroupCount": min_groups}},
        "schedulingConstraints": {"topology": [{"key": key}]},
    }
    return _group("CompositePodGroup", name, namespace, spec)


def _group(kind: str, name: str, namespace: str, spec: Body) -> Body:
    metadata = {"name": name, "namespace": namespace, "uid": f"uid-{name}", "generation": 1}
    return {"apiVersion": GROUP_API, "kind": kind, "metadata": metadata, "spec": spec}

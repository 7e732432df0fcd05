"""kube-scheduler 1.37 given the same work as gpusched: the same groups written as its
Workload API objects, the same pods naming their group as it expects, and kube-scheduler
itself, run on the real control plane only while a story needs it.

Our CRDs mirror the upstream Workload API field for field, so one story's objects are
translated, not rewritten:

- a `scheduling.gpusched.io` Workload becomes a `scheduling.k8s.io/v1beta1` Workload plus
  the objects a workload controller (Job, JobSet, LWS) would create from its templates: one
  v1alpha3 CompositePodGroup or v1beta1 PodGroup per template, named `<workload>-<template>`
  as gpusched names its own, each with `workloadRef` and `parentCompositePodGroupName`
  (kube-scheduler materialises nothing itself);
- a standalone PodGroup becomes a v1beta1 PodGroup with the same spec;
- a pod's `scheduling.gpusched.io/pod-group` label becomes `spec.schedulingGroup.podGroupName`
  and its `schedulerName` kube-scheduler's (`default-scheduler`).
"""

from __future__ import annotations

import contextlib
import copy
import ssl
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import httpx

from testing.apiserver import ApiClient
from testing.cluster.cluster import RealCluster
from testing.cluster.controlplane import LOOPBACK, free_port
from testing.harness import GROUP_LABEL

UPSTREAM_GROUP = "scheduling.k8s.io"
WORKLOAD_API = f"{UPSTREAM_GROUP}/v1beta1"
COMPOSITE_API = f"{UPSTREAM_GROUP}/v1alpha3"
KUBE_SCHEDULER = "default-scheduler"
UPSTREAM_RESOURCES = (
    ("workloads", "v1beta1"),
    ("compositepodgroups", "v1alpha3"),
    ("podgroups", "v1beta1"),
)

Obj = dict[str, Any]


def upstream_pod(pod: Mapping[str, Any]) -> Obj:
    """The same pod for kube-scheduler: its scheduler name, its group in `schedulingGroup`."""
    body = copy.deepcopy(dict(pod))
    labels = body["metadata"].get("labels") or {}
    group = labels.pop(GROUP_LABEL, None)
    spec = body["spec"]
    if spec.get("schedulerName") == "gpusched":
        spec["schedulerName"] = KUBE_SCHEDULER
    if group is not None:
        spec["schedulingGroup"] = {"podGroupName": group}
    return body


def upstream_pod_group(group: Mapping[str, Any]) -> Obj:
    """A standalone gpusched PodGroup as a v1beta1 PodGroup (same spec, less our extras)."""
    spec = {k: v for k, v in group["spec"].items() if k != "scheduleTimeoutSeconds"}
    return _object(WORKLOAD_API, "PodGroup", group["metadata"], spec)


def upstream_workload(workload: Mapping[str, Any]) -> list[Obj]:
    """A gpusched Workload as kube-scheduler needs it: the v1beta1 Workload, then every group
    its templates make, parents before children (what a workload controller would create)."""
    meta = workload["metadata"]
    spec = workload["spec"]
    objects = [_object(WORKLOAD_API, "Workload", meta, copy.deepcopy(spec))]
    for template in spec.get("compositePodGroupTemplates") or []:
        objects += _from_composite_template(meta, template, None)
    for template in spec.get("podGroupTemplates") or []:
        objects.append(_from_pod_group_template(meta, template, None))
    return objects


def _from_composite_template(
    workload: Mapping[str, Any], template: Mapping[str, Any], parent: str | None
) -> list[Obj]:
    name = f"{workload['name']}-{template['name']}"
    spec: Obj = {
        "workloadRef": {"workloadName": workload["name"], "templateName": template["name"]},
        "schedulingPolicy": copy.deepcopy(template["schedulingPolicy"]),
    }
    if constraints := template.get("schedulingConstraints"):
        spec["schedulingConstraints"] = copy.deepcopy(constraints)
    if parent is not None:
        spec["parentCompositePodGroupName"] = parent
    objects = [_object(COMPOSITE_API, "CompositePodGroup", {**workload, "name": name}, spec)]
    for child in template.get("compositePodGroupTemplates") or []:
        objects += _from_composite_template(workload, child, name)
    for child in template.get("podGroupTemplates") or []:
        objects.append(_from_pod_group_template(workload, child, name))
    return objects


def _from_pod_group_template(
    workload: Mapping[str, Any], template: Mapping[str, Any], parent: str | None
) -> Obj:
    spec: Obj = {
        "workloadRef": {"workloadName": workload["name"], "templateName": template["name"]},
        "schedulingPolicy": copy.deepcopy(template["schedulingPolicy"]),
    }
    if constraints := template.get("schedulingConstraints"):
        spec["schedulingConstraints"] = copy.deepcopy(constraints)
    if parent is not None:
        spec["parentCompositePodGroupName"] = parent
    name = f"{workload['name']}-{template['name']}"
    return _object(WORKLOAD_API, "PodGroup", {**workload, "name": name}, spec)


def _object(api_version: str, kind: str, meta: Mapping[str, Any], spec: Obj) -> Obj:
    metadata = {"name": meta["name"], "namespace": meta.get("namespace") or "default"}
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata, "spec": spec}


def upstream_condition(api: ApiClient, plural: str, name: str, namespace: str) -> Obj:
    """The PodGroupInitiallyScheduled condition kube-scheduler wrote on a group ({} if none)."""
    body = api.get(plural, name, namespace, group=UPSTREAM_GROUP)
    for item in (body.get("status") or {}).get("conditions") or []:
        if item.get("type") == "PodGroupInitiallyScheduled":
            return dict(item)
    return {}


def clear_upstream(api: ApiClient, namespaces: Sequence[str], timeout: float = 30) -> None:
    """Deletes every Workload API object in `namespaces` (the cluster's reset knows only ours)
    and waits until they are gone.

    The API server puts the `scheduling.k8s.io/podgroup-protection` finalizer on every
    PodGroup; kube-controller-manager's podgroup-protection controller, which lifts it once no
    pod names the group, is not among the controllers the test control plane runs, so this
    lifts it itself."""
    deadline = time.monotonic() + timeout
    for namespace in namespaces:
        for plural, version in UPSTREAM_RESOURCES:
            path = f"/apis/{UPSTREAM_GROUP}/{version}/namespaces/{namespace}/{plural}"
            while True:
                response = api.http.request("DELETE", path, json={"gracePeriodSeconds": 0})
                if response.status_code >= 400 and response.status_code != 404:
                    raise RuntimeError(f"DELETE {path}: {response.status_code} {response.text}")
                left = api.http.get(path).json().get("items") or []
                if not left:
                    break
                for item in left:
                    api.http.patch(
                        f"{path}/{item['metadata']['name']}",
                        json={"metadata": {"finalizers": None}},
                        headers={"Content-Type": "application/merge-patch+json"},
                    )
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{plural} left in {namespace}: {len(left)}")
                time.sleep(0.05)


@contextlib.contextmanager
def kube_scheduler(
    cluster: RealCluster, extra: Sequence[str] = (), timeout: float = 60
) -> Iterator[int]:
    """kube-scheduler at its defaults (with the Workload API's gates, plus `extra` flags) for
    the block; yields its process id once its /readyz answers (its informers have synced),
    stops it after."""
    port = free_port()
    process = cluster.plane.start_scheduler([f"--secure-port={port}", *extra])
    try:
        _wait_ready(f"https://{LOOPBACK}:{port}/readyz", process.popen, timeout)
        yield process.popen.pid
        cluster.plane.check()
    finally:
        cluster.plane.stop_scheduler()


def _wait_ready(url: str, popen: Any, timeout: float) -> None:
    # kube-scheduler serves a self-signed certificate made at start; only loopback is asked.
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    deadline = time.monotonic() + timeout
    with httpx.Client(verify=context, timeout=2) as client:
        while True:
            if popen.poll() is not None:
                raise RuntimeError(f"kube-scheduler exited ({popen.returncode}) before ready")
            with contextlib.suppress(httpx.HTTPError):
                if client.get(url).status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"kube-scheduler not ready at {url} after {timeout}s")
            time.sleep(0.1)

"""kube-scheduler 1.37 and gpusched given the same work: the Workload API's objects
(`scheduling.k8s.io` v1beta1 Workload and PodGroup, v1alpha3 CompositePodGroup) and pods naming
their group in `spec.schedulingGroup`, identical for both but for the pods' `schedulerName`;
and kube-scheduler itself, run on the real control plane only while a story needs it.

Nothing is translated from our CRDs: gpusched reads these objects natively. What a workload
controller (Job, JobSet, LWS) would create from an upstream Workload's templates is written
here by `workload_objects`, since kube-scheduler materialises nothing itself.
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


def for_scheduler(pod: Mapping[str, Any], scheduler: str) -> Obj:
    """`pod` as given to `scheduler` (`gpusched` or kube-scheduler's `default-scheduler`): a
    copy differing only in `spec.schedulerName`."""
    body = copy.deepcopy(dict(pod))
    body["spec"]["schedulerName"] = scheduler
    return body


def workload_objects(workload: Mapping[str, Any]) -> list[Obj]:
    """An upstream Workload and every group its templates make, parents before children, each
    named `<workload>-<template>` with `workloadRef` and `parentCompositePodGroupName`: what a
    workload controller creates for kube-scheduler, and what gpusched reads as it is."""
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
    cluster: RealCluster, extra: Sequence[str] = (), timeout: float = 60, port: int | None = None
) -> Iterator[int]:
    """kube-scheduler at its defaults (with the Workload API's gates, plus `extra` flags) for
    the block; yields its process id once its /readyz answers (its informers have synced),
    stops it after. It serves /readyz and /metrics on `port` (a free one if not given)."""
    port = port or free_port()
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

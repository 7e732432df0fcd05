"""Other projects' gangs as their controllers write them, for tests: the upstream Workload
API's PodGroup and CompositePodGroup, Volcano's and coscheduling's PodGroup, and pods that
name their group the way each of them does (a label, an annotation, ``spec.schedulingGroup``,
Kueue's label and count)."""

from __future__ import annotations

from typing import Any

from testing.manifests import RACK, pod

Body = dict[str, Any]

UPSTREAM_API = "scheduling.k8s.io/v1beta1"
UPSTREAM_COMPOSITE_API = "scheduling.k8s.io/v1alpha3"
VOLCANO_API = "scheduling.volcano.sh/v1beta1"
COSCHEDULING_API = "scheduling.x-k8s.io/v1alpha1"
VOLCANO_ANNOTATION = "scheduling.k8s.io/group-name"
COSCHEDULING_LABEL = "scheduling.x-k8s.io/pod-group"
KUEUE_LABEL = "kueue.x-k8s.io/pod-group-name"
KUEUE_COUNT = "kueue.x-k8s.io/pod-group-total-count"
TOPOLOGY_KEY = "scheduling.gpusched.io/topology-key"


def upstream_pod_group(
    name: str,
    min_count: int,
    *,
    key: str | None = RACK,
    namespace: str = "default",
    parent: str | None = None,
    basic: bool = False,
    disruption: str | None = None,
) -> Body:
    """A ``scheduling.k8s.io/v1beta1`` PodGroup, as the Job controller or a person writes it."""
    spec: Body = {"schedulingPolicy": {"basic": {}} if basic else {"gang": {"minCount": min_count}}}
    if key is not None:
        spec["schedulingConstraints"] = {"topology": [{"key": key}]}
    if parent is not None:
        spec["parentCompositePodGroupName"] = parent
    if disruption is not None:
        spec["disruptionMode"] = {disruption: {}}
    return _object(UPSTREAM_API, name, namespace, spec)


def upstream_composite(
    name: str, min_groups: int, *, key: str = RACK, namespace: str = "default"
) -> Body:
    spec: Body = {
        "schedulingPolicy": {"gang": {"minGroupCount": min_groups}},
        "schedulingConstraints": {"topology": [{"key": key}]},
    }
    return _object(UPSTREAM_COMPOSITE_API, name, namespace, spec, kind="CompositePodGroup")


def volcano_pod_group(
    name: str, min_member: Any, *, key: str | None = RACK, namespace: str = "default", **spec: Any
) -> Body:
    """A Volcano PodGroup; our topology knob, when ``key`` is given, is its annotation."""
    body = _object(VOLCANO_API, name, namespace, {"minMember": min_member, **spec})
    if key is not None:
        body["metadata"]["annotations"] = {TOPOLOGY_KEY: key}
    return body


def coscheduling_pod_group(
    name: str, min_member: int, *, key: str | None = RACK, namespace: str = "default", **spec: Any
) -> Body:
    body = _object(COSCHEDULING_API, name, namespace, {"minMember": min_member, **spec})
    if key is not None:
        body["metadata"]["annotations"] = {TOPOLOGY_KEY: key}
    return body


def upstream_member(name: str, gpus: int, group: str, **kw: Any) -> Body:
    body = pod(name, gpus, **kw)
    body["spec"]["schedulingGroup"] = {"podGroupName": group}
    return body


def volcano_member(name: str, gpus: int, group: str, **kw: Any) -> Body:
    return pod(
        name, gpus, annotations={VOLCANO_ANNOTATION: group, **kw.pop("annotations", {})}, **kw
    )


def coscheduling_member(name: str, gpus: int, group: str, **kw: Any) -> Body:
    body = pod(name, gpus, **kw)
    body["metadata"]["labels"][COSCHEDULING_LABEL] = group
    return body


def kueue_member(name: str, gpus: int, group: str, total: int | str, **kw: Any) -> Body:
    body = pod(name, gpus, annotations={KUEUE_COUNT: str(total)}, **kw)
    body["metadata"]["labels"][KUEUE_LABEL] = group
    return body


def _object(api: str, name: str, namespace: str, spec: Body, kind: str = "PodGroup") -> Body:
    metadata = {"name": name, "namespace": namespace, "uid": f"uid-{name}", "generation": 1}
    return {"apiVersion": api, "kind": kind, "metadata": metadata, "spec": spec}

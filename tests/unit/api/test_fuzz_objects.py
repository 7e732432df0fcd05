"""Fuzzed bad input through the real parsing paths: our CRs, the GPU topology annotation, pods
(parse_pod and the engine's PodRequest), nodes, SchedulerConfig, and the watch entry points
of ClusterState. Bad input is only ever an `InvalidObjectError` naming the field; the watch
entry points never raise at all."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpusched.api.config import load_config
from gpusched.api.crds import parse_composite_pod_group, parse_pod_group, parse_workload
from gpusched.api.errors import InvalidObjectError
from gpusched.api.k8s import parse_node, parse_pod
from gpusched.api.materialize import materialize
from gpusched.api.topology import parse_topology_annotation
from gpusched.engine.groups import GroupKind
from gpusched.engine.request import PodRequest
from gpusched.scheduler.state import ClusterState
from testing.engine import topology_annotation
from testing.fuzz import fuzz_settings, json_values, mutants

RACK = "topology.example.com/rack"
API = "scheduling.gpusched.io/v1alpha1"
META = {"name": "train", "namespace": "ml", "uid": "u-1", "generation": 1}

POD_GROUP = {
    "apiVersion": API,
    "kind": "PodGroup",
    "metadata": META,
    "spec": {
        "schedulingPolicy": {"gang": {"minCount": 4}},
        "schedulingConstraints": {"topology": [{"key": RACK}]},
        "parentCompositePodGroupName": "zone",
        "workloadRef": {"workloadName": "w", "templateName": "t"},
        "scheduleTimeoutSeconds": 60,
    },
}
COMPOSITE = {
    "apiVersion": API,
    "kind": "CompositePodGroup",
    "metadata": META,
    "spec": {
        "schedulingPolicy": {"gang": {"minGroupCount": 2}},
        "schedulingConstraints": {"topology": [{"key": RACK}]},
    },
}
WORKLOAD = {
    "apiVersion": API,
    "kind": "Workload",
    "metadata": META,
    "spec": {
        "podGroupTemplates": [{"name": "solo", "schedulingPolicy": {"basic": {}}}],
        "compositePodGroupTemplates": [
            {
                "name": "zone",
                "schedulingPolicy": {"gang": {"minGroupCount": 2}},
                "schedulingConstraints": {"topology": [{"key": RACK}]},
                "podGroupTemplates": [
                    {"name": "a", "schedulingPolicy": {"gang": {"minCount": 2}}},
                    {"name": "b", "schedulingPolicy": {"gang": {"minCount": 2}}},
                ],
            }
        ],
    },
}
POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "w-0",
        "namespace": "ml",
        "uid": "u-2",
        "creationTimestamp": "2026-11-30T00:00:00Z",
        "labels": {"scheduling.gpusched.io/pod-group": "train"},
        "annotations": {"gpusched.io/gpus": "0,1", "gpusched.io/gpu-milli": "500"},
    },
    "spec": {
        "schedulerName": "gpusched",
        "nodeName": "node-a",
        "priority": 10,
        "nodeSelector": {RACK: "rack-1"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": RACK, "operator": "In", "values": ["r1"]}]}
                    ]
                }
            }
        },
        "initContainers": [{"name": "init", "resources": {"requests": {"cpu": "1"}}}],
        "containers": [
            {
                "name": "main",
                "resources": {
                    "requests": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
                    "limits": {"nvidia.com/gpu": 1},
                },
            }
        ],
    },
    "status": {"phase": "Running"},
}
NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {
        "name": "node-a",
        "labels": {RACK: "rack-1"},
        "annotations": {"gpusched.io/gpu-topology": topology_annotation("a100x8") or ""},
    },
    "spec": {"taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]},
    "status": {
        "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"},
        "conditions": [{"type": "Ready", "status": "True"}],
    },
}
CONFIG = {
    "schedulerName": "gpusched",
    "numaPolicy": "best-effort",
    "topologyLevels": ["topology.kubernetes.io/zone", RACK],
    "telemetry": {
        "temperatureLimitC": 80,
        "minFreeMemoryRatio": 0.3,
        "maxAgeSeconds": 60,
        "stale": "usable",
        "prometheus": {"url": "http://127.0.0.1:9090", "bearerTokenFile": "/var/run/token"},
    },
    "operator": {
        "bindConcurrency": 8,
        "initialBackoffSeconds": 1,
        "maxBackoffSeconds": 60,
        "leaderElection": {"enabled": True, "leaseDurationSeconds": 15},
    },
}
TOPOLOGY = json.loads(topology_annotation("a100x8") or "{}")


def _refusal(parse: Any, *args: Any) -> InvalidObjectError | None:
    try:
        parse(*args)
    except InvalidObjectError as error:
        return error
    return None


def _names_the_field(error: InvalidObjectError, raw: Any) -> None:
    """A rejection says which field, unless the whole thing is not an object."""
    assert error.obj, error
    if isinstance(raw, dict):
        assert error.field or "apiVersion" in error.message or "kind" in error.message, error


# ----- our CRs ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("parse", "seed"),
    [
        (parse_pod_group, POD_GROUP),
        (parse_composite_pod_group, COMPOSITE),
        (parse_workload, WORKLOAD),
    ],
    ids=["PodGroup", "CompositePodGroup", "Workload"],
)
@fuzz_settings(300)
@given(data=st.data())
def test_mutated_custom_resources_are_rejected_naming_the_field(
    parse: Any, seed: dict[str, Any], data: st.DataObject
) -> None:
    raw = data.draw(mutants([seed]))
    try:
        obj = parse(raw)
    except InvalidObjectError as error:
        _names_the_field(error, raw)
        return
    if parse is parse_workload:
        try:
            materialize(obj)
        except InvalidObjectError as error:
            _names_the_field(error, raw)


# ----- the topology annotation -----------------------------------------------------------------


@fuzz_settings(600)
@given(data=st.data())
def test_mutated_topology_annotations_are_rejected_naming_the_annotation(
    data: st.DataObject,
) -> None:
    if data.draw(st.booleans()):
        value = data.draw(st.text(max_size=200))
    else:
        value = json.dumps(data.draw(mutants([TOPOLOGY])))
    error = _refusal(parse_topology_annotation, "node-a", value)
    if error is not None:
        assert error.field.startswith("metadata.annotations[gpusched.io/gpu-topology]"), error


def test_an_annotation_over_the_size_limit_is_refused_before_parsing() -> None:
    with pytest.raises(InvalidObjectError, match="larger than"):
        parse_topology_annotation("node-a", " " * (64 * 1024 + 1))


# ----- pods and nodes --------------------------------------------------------------------------


@fuzz_settings(1200)
@given(raw=mutants([POD]))
def test_mutated_pods_are_rejected_naming_the_field(raw: Any) -> None:
    try:
        pod = parse_pod(raw)
        PodRequest.from_pod(pod)
        if pod.spec.node_name:
            pod.assigned_gpus()
    except InvalidObjectError as error:
        _names_the_field(error, raw)


@fuzz_settings(700)
@given(raw=mutants([NODE]))
def test_mutated_nodes_are_rejected_naming_the_field(raw: Any) -> None:
    try:
        node = parse_node(raw)
        node.allocatable_resources()
    except InvalidObjectError as error:
        _names_the_field(error, raw)


# ----- SchedulerConfig -------------------------------------------------------------------------


@fuzz_settings(900)
@given(raw=mutants([CONFIG]) | json_values)
def test_mutated_configs_are_rejected_naming_the_field(raw: Any) -> None:
    error = _refusal(load_config, raw, "config.yaml")
    if error is not None:
        assert error.obj == "config.yaml", error
        assert error.field or not isinstance(raw, dict), error


# ----- the watch entry points ------------------------------------------------------------------


@fuzz_settings(800)
@given(
    pod=mutants([POD]),
    node=mutants([NODE]),
    group=mutants([POD_GROUP, COMPOSITE]),
    workload=mutants([WORKLOAD]),
)
def test_cluster_state_takes_any_watched_body_without_raising(
    pod: Any, node: Any, group: Any, workload: Any
) -> None:
    state = ClusterState()
    for body in (pod, node, group, workload):
        if not isinstance(body, dict):
            return  # a watch event's object is always a JSON object
    state.upsert_node(node)
    state.upsert_pod(pod)
    state.upsert_group(GroupKind.POD_GROUP, group)
    state.upsert_group(GroupKind.COMPOSITE, group)
    state.upsert_workload(workload)
    list(state.bound())
    state.pending()
    state.group_specs()

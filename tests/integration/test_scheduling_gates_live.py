"""Scheduling gates on the real control plane: the API server itself marks a gated pod
``PodScheduled=False`` (reason ``SchedulingGated``); gpusched never binds it, its gang waits
without counting it, and once the gate is removed (a merge patch cannot touch the list, so a
JSON patch, as a quota controller sends) the whole gang is bound together."""

from __future__ import annotations

from pathlib import Path

from testing.apiserver import ApiClient, wait_for
from testing.cluster.cluster import RealCluster
from testing.harness import (
    condition,
    gang,
    gpu_node,
    gpu_pod,
    group_status,
    placement_of,
    pods,
    running_operator,
)

JSON_PATCH = "application/json-patch+json"


def test_a_gated_pod_is_never_bound_and_its_gang_binds_whole_once_ungated(
    apiserver: RealCluster, api: ApiClient, kubeconfig: Path
) -> None:
    api.create(gpu_node("n1", "zone-a", "rack-1"))
    api.create(gang("g", 2))
    api.create(gpu_pod("g-0", 4, group="g"))
    gated = gpu_pod("g-1", 4, group="g")
    gated["spec"]["schedulingGates"] = [{"name": "example.com/quota"}]
    api.create(gated)
    with running_operator(kubeconfig):
        wait_for(
            lambda: condition(group_status(api, "g")).get("reason") == "WaitingForPods",
            timeout=30,
            message=lambda: f"the gang waits for its gated pod: {group_status(api, 'g')}",
        )
        found = pods(api)
        assert not placement_of(found["default/g-0"])  # the gang is not half-placed
        assert not placement_of(found["default/g-1"])
        server = condition(found["default/g-1"].get("status") or {}, "PodScheduled")
        assert (server.get("status"), server.get("reason")) == ("False", "SchedulingGated")
        api.patch(
            "pods",
            "g-1",
            [{"op": "remove", "path": "/spec/schedulingGates"}],
            "default",
            content_type=JSON_PATCH,
        )
        wait_for(
            lambda: all(placement_of(pods(api)[f"default/g-{i}"]) for i in range(2)),
            timeout=30,
            message="the gang bound once its last pod was ungated",
        )

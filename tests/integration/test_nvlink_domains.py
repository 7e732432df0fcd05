"""NVLink domains and segments on the real control plane: four NVL72 racks (18 trays × 4
GPUs each), labelled ``nvidia.com/gpu.clique`` as the NVIDIA GPU stack labels them; the
operator places a 72-GPU gang inside one domain, a 144-GPU gang with ``segmentSize: 18`` in
two whole domains, and says which field is wrong when a segment size does not divide the gang.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpusched.offline.nvlink import CLIQUE_LABEL, clique, tray_topology
from testing import manifests
from testing.apiserver import ApiClient, ApiStatusError, wait_for
from testing.cluster.cluster import RealCluster
from testing.harness import (
    condition,
    dump,
    ensure_namespace,
    events_for,
    group_status,
    pods,
    running_operator,
)

pytestmark = pytest.mark.usefixtures("real_cluster")

NS = "nvl"
DOMAINS = 4
TRAYS = 18
GROUP = "scheduling.gpusched.io"


def tray(domain: int, index: int) -> str:
    return f"gb-{domain}-{index:02d}"


@pytest.fixture
def nvl72(apiserver: RealCluster, api: ApiClient) -> Iterator[dict[str, str]]:
    """Four NVL72 domains; yields node → clique."""
    ensure_namespace(api, NS)
    cliques: dict[str, str] = {}
    for domain in range(DOMAINS):
        for index in range(TRAYS):
            name = tray(domain, index)
            body = manifests.node(
                name,
                "zone-a",
                f"rack-{domain}",
                kind="h100x4",
                labels={CLIQUE_LABEL: clique(domain)},
                annotations={manifests.TOPOLOGY: tray_topology()},
                cpu="142",
                memory="850Gi",
            )
            api.create(body)
            cliques[name] = clique(domain)
    yield cliques
    for item in api.list("pods", namespace=NS):
        with contextlib.suppress(ApiStatusError):
            api.delete("pods", item["metadata"]["name"], NS)
    for item in api.list("podgroups", namespace=NS, group=GROUP):
        with contextlib.suppress(ApiStatusError):
            api.delete("podgroups", item["metadata"]["name"], NS, group=GROUP)
    for name in cliques:
        with contextlib.suppress(ApiStatusError):
            api.delete("nodes", name)


def _gang(api: ApiClient, name: str, size: int, segment: int | None = None) -> list[str]:
    group = manifests.pod_group(name, size, key=CLIQUE_LABEL, namespace=NS)
    if segment is not None:
        group["spec"]["schedulingConstraints"]["topology"][0]["segmentSize"] = segment
    api.create(group)
    members = [f"{name}-{i}" for i in range(size)]
    for member in members:
        api.create(manifests.pod(member, 4, group=name, namespace=NS))
    return members


def _nodes_of(api: ApiClient, members: list[str]) -> dict[str, str] | None:
    found = pods(api, NS)
    nodes = {m: found.get(f"{NS}/{m}", {}).get("spec", {}).get("nodeName") for m in members}
    return nodes if all(nodes.values()) else None  # type: ignore[return-value]


def test_gangs_stay_inside_nvlink_domains_and_segments_take_whole_domains(
    apiserver: RealCluster, api: ApiClient, kubeconfig: Path, nvl72: dict[str, str]
) -> None:
    with running_operator(kubeconfig):
        one = _gang(api, "llm-72", 18)
        placed = wait_for(lambda: _nodes_of(api, one), timeout=120, message="the 72-GPU gang bound")
        domains = {nvl72[n] for n in placed.values()}
        assert len(domains) == 1, placed
        assert len(set(placed.values())) == TRAYS, "one tray per pod: the whole domain"

        two = _gang(api, "llm-144", 36, segment=18)
        placed_two = wait_for(
            lambda: _nodes_of(api, two), timeout=120, message="the 144-GPU gang bound"
        )
        per_domain: dict[str, int] = {}
        for node in placed_two.values():
            per_domain[nvl72[node]] = per_domain.get(nvl72[node], 0) + 1
        assert sorted(per_domain.values()) == [TRAYS, TRAYS], per_domain
        assert not set(per_domain) & domains, "the segments took the two free domains"
        status = wait_for(
            lambda: (
                (found := group_status(api, "llm-144", NS)).get("phase") == "Scheduled" and found
            ),
            timeout=60,
            message=lambda: dump(group_status(api, "llm-144", NS)),
        )
        assert condition(status).get("reason") == "Scheduled", dump(status)
        # The segments' common domain, as the engine placed them: the zone.
        assert status["placement"] == {"topology.kubernetes.io/zone": "zone-a"}, dump(status)

        bad = manifests.pod_group("odd", 36, key=CLIQUE_LABEL, namespace=NS)
        bad["spec"]["schedulingConstraints"]["topology"][0]["segmentSize"] = 5
        api.create(bad)
        api.create(manifests.pod("odd-0", 4, group="odd", namespace=NS))

        def invalid() -> dict[str, Any] | None:
            found = condition(group_status(api, "odd", NS))
            return found if found.get("reason") == "Invalid" else None

        said = wait_for(invalid, timeout=60, message=lambda: dump(group_status(api, "odd", NS)))
        field = "spec.schedulingConstraints.topology[0].segmentSize"
        assert field in said["message"]
        assert "does not divide minCount 36" in said["message"]
        wait_for(
            lambda: any(field in e["message"] for e in events_for(api, "odd", NS)),
            timeout=60,
            message=lambda: dump(events_for(api, "odd", NS)),
        )
        assert _nodes_of(api, ["odd-0"]) is None, "nothing of an invalid group is bound"

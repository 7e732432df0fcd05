"""The Workload API versions a real kube-apiserver 1.37.2 serves, as the operator finds them
at start (discovery), on control planes of its own: one serving ``scheduling.k8s.io/v1beta1``
only (``--runtime-config=scheduling.k8s.io/v1alpha3=false``: no CompositePodGroup), one
without the API at all. The releases this server cannot be (1.38's ``v1``, 1.36's
``v1alpha2``) are read from their discovery documents in tests/unit/api/test_served_versions.py.

    #      zone-a
    #    /       \\
    #  rack-1   rack-2
    #  n1-1     n2-1 n2-2
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from testing.apiserver import ApiClient, ResourceSpec, wait_for
from testing.cluster.cluster import RealCluster
from testing.cluster.controlplane import OPERATOR_NAMESPACE, UnavailableError
from testing.gangs import upstream_member, upstream_pod_group, volcano_member, volcano_pod_group
from testing.harness import (
    FAST,
    RACK,
    domains,
    dump,
    events_for,
    gpu_node,
    placement_of,
    pods,
    running_operator,
    wait_nodes_ready,
)

GANG = [f"train-{i}" for i in range(4)]
NO_COMPOSITE = ("--runtime-config=scheduling.k8s.io/v1alpha3=false",)
NO_WORKLOAD_API = (
    "--runtime-config=scheduling.k8s.io/v1beta1=false,scheduling.k8s.io/v1alpha3=false",
)


@pytest.fixture
def operator_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAMESPACE", OPERATOR_NAMESPACE)  # as the chart's Deployment sets it


def _cluster(workdir: Path, flags: tuple[str, ...]) -> Iterator[RealCluster]:
    try:
        with RealCluster.running(workdir, apiserver_flags=flags) as cluster:
            with cluster.client() as api:
                for rack, names in (("rack-1", ["n1-1"]), ("rack-2", ["n2-1", "n2-2"])):
                    for name in names:
                        api.create(gpu_node(name, "zone-a", rack))
                wait_nodes_ready(api)
            yield cluster
    except UnavailableError as missing:
        pytest.skip(str(missing))


@pytest.fixture(scope="module")
def v1beta1_only(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    yield from _cluster(tmp_path_factory.mktemp("v1beta1-only"), NO_COMPOSITE)


@pytest.fixture(scope="module")
def no_workload_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    yield from _cluster(tmp_path_factory.mktemp("no-workload-api"), NO_WORKLOAD_API)


def _not_served_lines(caplog: pytest.LogCaptureFixture, kind: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "in none of these versions" in r.getMessage()
        and r.getMessage().startswith(f"the API server serves {kind} (")
    ]  # fmt: skip


@pytest.mark.usefixtures("operator_namespace")
def test_a_server_serving_v1beta1_only_has_its_gangs_read_there_and_composites_named_once(
    v1beta1_only: RealCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gpusched")
    kubeconfig = v1beta1_only.write_kubeconfig(tmp_path / "kubeconfig")
    with v1beta1_only.client() as api, running_operator(kubeconfig) as runtime:
        served = runtime.api.foreign
        assert served is not None
        assert ("scheduling.k8s.io/v1beta1", "PodGroup") in served.chosen
        assert not any(kind == "CompositePodGroup" for _, kind in served.chosen)
        api.create(upstream_pod_group("train", 4))
        for name in GANG:
            api.create(upstream_member(name, 4, "train"))
        keys = [f"default/{name}" for name in GANG]
        wait_for(
            lambda: all(placement_of(pods(api).get(k, {})) for k in keys),
            timeout=30,
            message=lambda: f"all of {GANG} bound: {dump(pods(api, 'default'))}",
        )
        assert domains(api, keys, RACK) == {"rack-2"}
    lines = _not_served_lines(caplog, "CompositePodGroup.scheduling.k8s.io")
    assert len(lines) == 1, lines  # once, at start
    assert "(v1, v1beta1, v1alpha3)" in lines[0]


@pytest.mark.usefixtures("operator_namespace")
def test_on_a_server_without_the_workload_api_pods_naming_a_group_wait_and_are_never_placed_alone(
    no_workload_api: RealCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gpusched")
    kubeconfig = no_workload_api.write_kubeconfig(tmp_path / "kubeconfig")
    with no_workload_api.client() as api, running_operator(kubeconfig) as runtime:
        served = runtime.api.foreign
        assert served is not None
        assert not any(v.startswith("scheduling.k8s.io/") for v, _ in served.chosen)
        assert api.http.get("/apis/scheduling.k8s.io/v1beta1").status_code == 404
        for name in GANG:  # the pods' field is the Pod API's own: still accepted
            created = api.create(upstream_member(name, 1, "train"))
            assert created["spec"]["schedulingGroup"]["podGroupName"] == "train"
        wait_for(
            lambda: all(_waiting(api, name) for name in GANG),
            timeout=30,
            message=lambda: f"a reason on every pod: {[events_for(api, n) for n in GANG]}",
        )
        assert "k8s:train not found" in _waiting(api, "train-0")
        # A whole cycle later still nothing is bound, though each pod alone would fit.
        cycles = runtime.scheduler.cycles
        wait_for(lambda: runtime.scheduler.cycles > cycles + 1, timeout=30, message="2 cycles")
        assert not any(placement_of(p) for p in pods(api, "default").values())
    assert len(_not_served_lines(caplog, "PodGroup.scheduling.k8s.io")) == 1


def _waiting(api: ApiClient, name: str) -> str:
    found: list[dict[str, Any]] = events_for(api, name)
    return next((e["message"] for e in found if "not found" in e["message"]), "")


VOLCANO_CRD = (
    Path(__file__).resolve().parents[1] / "data" / "crds" / "scheduling.volcano.sh_podgroups.yaml"
)
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
LATE = [f"late-{i}" for i in range(4)]


@pytest.mark.usefixtures("operator_namespace")
def test_a_group_crd_installed_after_the_operator_started_is_watched_and_its_gang_placed(
    no_workload_api: RealCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Volcano installed after gpusched: its PodGroups are read from when discovery shows
    them, with no restart; until then the pods naming one wait, never placed alone."""
    caplog.set_level(logging.INFO, logger="gpusched")
    kubeconfig = no_workload_api.write_kubeconfig(tmp_path / "kubeconfig")
    crd = yaml.safe_load(VOLCANO_CRD.read_text(encoding="utf-8"))
    config = {"operator": {**FAST["operator"], "discoveryIntervalSeconds": 0.2}}
    with no_workload_api.client() as api, running_operator(kubeconfig, config) as runtime:
        served = runtime.api.foreign
        assert served is not None
        assert not any(v.startswith("scheduling.volcano.sh/") for v, _ in served.chosen)
        for name in LATE:
            api.create(volcano_member(name, 4, "late"))
        wait_for(
            lambda: all("not found" in _waiting(api, name) for name in LATE),
            timeout=30,
            message=lambda: f"a reason on every pod: {[events_for(api, n) for n in LATE]}",
        )
        assert not any(placement_of(p) for p in pods(api, "default").values())
        try:
            response = api.http.post(CRDS, json=crd)
            assert response.status_code < 300, response.text
            wait_for(
                lambda: (
                    ("scheduling.volcano.sh/v1beta1", "PodGroup")
                    in (runtime.api.foreign.chosen if runtime.api.foreign else ())
                ),
                timeout=30,
                message="the operator reads Volcano's PodGroups",
            )
            spec = ResourceSpec("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup", True)
            api.specs.append(spec)
            api.create(volcano_pod_group("late", 4))
            keys = [f"default/{name}" for name in LATE]
            wait_for(
                lambda: all(placement_of(pods(api).get(k, {})) for k in keys),
                timeout=30,
                message=lambda: f"all of {LATE} bound: {dump(pods(api, 'default'))}",
            )
            assert domains(api, keys, RACK) == {"rack-2"}
        finally:
            api.http.delete(f"{CRDS}/{crd['metadata']['name']}")
            for name in LATE:
                api.http.delete(f"/api/v1/namespaces/default/pods/{name}?gracePeriodSeconds=0")
    found = [r.getMessage() for r in caplog.records if "now serves PodGroup" in r.getMessage()]
    assert found == [
        "the API server now serves PodGroup.scheduling.volcano.sh as v1beta1: watching it"
    ]

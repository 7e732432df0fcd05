"""A node's DRA pool as kube-scheduler reads it, on the real control plane with the operator
running: a pool split across two ResourceSlices is used only once all ``resourceSliceCount``
slices of its newest generation are published (a slice missing, or one slice updated and the
other not yet, leaves it unused); and a DRA node is judged by its ResourceSlices, not by
``nvidia.com/gpu``: no warning for a consistent one, one Warning Event (and one log line) per
change for a real mismatch between its slices and its ``gpusched.io/gpu-topology``."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpusched import handlers
from testing import dra
from testing.apiserver import ApiClient, wait_for
from testing.cluster.cluster import RealCluster
from testing.harness import dump, ensure_namespace, events_for, pods, running_operator
from tests.integration.test_dra import NS, RESOURCE, _claim_of, _clean, _devices, _gang

pytestmark = pytest.mark.usefixtures("real_cluster")

NODE = "split-1"
HALVES = {"a": range(0, 4), "b": range(4, 8)}
"""Which GPUs (by topology index) each of the pool's two slices publishes."""
MISMATCH = "GPUTopologyMismatch"


@pytest.fixture
def dra_cluster(apiserver: RealCluster, api: ApiClient) -> Iterator[None]:
    """The driver's DeviceClass in a clean namespace; each test makes its nodes and slices."""
    ensure_namespace(api, NS)
    _clean(api)
    api.create(dra.device_class())
    yield
    _clean(api)
    for name in (NODE, "dra-ok", "dra-bad"):
        if api.get_or_none("nodes", name) is not None:
            api.delete("nodes", name)


def half_slice(half: str, generation: int) -> dict[str, Any]:
    """One of the two slices of ``NODE``'s pool (``resourceSliceCount: 2``)."""
    whole = dra.resource_slice(NODE, generation=generation)
    indices = set(HALVES[half])
    whole["spec"]["devices"] = [
        d for d in whole["spec"]["devices"] if dra.index_of_device(d["name"]) in indices
    ]
    whole["spec"]["pool"]["resourceSliceCount"] = 2
    whole["metadata"]["name"] = f"{NODE}-{half}"
    return whole


def publish(api: ApiClient, half: str, generation: int) -> None:
    body = half_slice(half, generation)
    found = api.get_or_none("resourceslices", body["metadata"]["name"], group=RESOURCE)
    if found is None:
        api.create(body)
    else:
        api.replace({**body, "metadata": {**body["metadata"], **found["metadata"]}})


def seen(runtime: handlers.Runtime, generations: dict[str, int]) -> bool:
    """Whether the operator's watch has delivered these slices at these generations."""
    book = runtime.scheduler.claims.book.slices
    return all(
        (s := book.get(f"{NODE}-{half}")) is not None and s.spec.pool.generation == generation
        for half, generation in generations.items()
    )


def not_placed_after(
    api: ApiClient, runtime: handlers.Runtime, generations: dict[str, int], why: str
) -> None:
    """Once the operator holds these slices and has run two more cycles over them, the pod is
    still unbound: the pool was not used."""
    wait_for(lambda: seen(runtime, generations), message=f"the operator sees {generations}")
    start = runtime.scheduler.cycles
    wait_for(lambda: runtime.scheduler.cycles >= start + 2, timeout=60, message="two cycles more")
    bound = {
        k: p["spec"]["nodeName"] for k, p in pods(api, NS).items() if p["spec"].get("nodeName")
    }
    assert bound == {}, f"bound while {why}: {bound}"


def test_a_pool_split_across_slices_is_used_only_once_its_slices_agree(
    api: ApiClient, kubeconfig: Path, dra_cluster: None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gpusched")
    api.create(dra.node(NODE))
    publish(api, "a", 1)  # one slice of two
    with running_operator(kubeconfig) as runtime:
        members = _gang(api, "split", 1, 4)
        wait_for(
            lambda: any(e["reason"] == "FailedScheduling" for e in events_for(api, members[0], NS)),
            message=lambda: f"the pod refused: {dump(events_for(api, members[0], NS))}",
        )
        key = f"{NS}/{members[0]}"
        # Its claim exists: what keeps the pod pending from here on is the pool alone.
        wait_for(lambda: _claim_of(api, pods(api, NS)[key]), message="the pod's claim")
        not_placed_after(api, runtime, {"a": 1}, "one of the pool's two slices is published")

        # The driver republishes: slice a at generation 2, slice b still at 1 (its update is
        # on its way). kube-scheduler counts generation 2 only: 1 of 2 slices.
        publish(api, "a", 2)
        publish(api, "b", 1)
        not_placed_after(api, runtime, {"a": 2, "b": 1}, "the slices disagree on generation")

        publish(api, "b", 2)
        wait_for(
            lambda: pods(api, NS)[key]["spec"].get("nodeName"),
            message=lambda: f"bound once the slices agree: {dump(events_for(api, members[0], NS))}",
        )
        pod = pods(api, NS)[key]
        # A pool half-way through an update is no mismatch: nothing was said about the node.
        assert _mismatch_events(api, NODE) == []
        said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert [m for m in said if NODE in m] == [], said
        assert pod["spec"]["nodeName"] == NODE
        claim = _claim_of(api, pod)
        assert claim is not None, pod
        held = _devices(claim)
        assert held is not None, claim
        assert (held[0], len(held[1])) == (NODE, 4), claim
        annotated = pod["metadata"]["annotations"]["gpusched.io/gpus"]
        assert sorted(int(i) for i in annotated.split(",")) == list(held[1]), (annotated, claim)


def _mismatch_events(api: ApiClient, node: str) -> list[dict[str, Any]]:
    """This node's (not an earlier node's of the same name) GPU topology warnings."""
    uid = api.get("nodes", node)["metadata"]["uid"]
    return [
        e
        for e in events_for(api, node, "default")
        if e["reason"] == MISMATCH and e["involvedObject"].get("uid") == uid
    ]


def test_a_dra_node_is_judged_by_its_slices_and_a_real_mismatch_warns_once_per_change(
    api: ApiClient,
    kubeconfig: Path,
    dra_cluster: None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="gpusched")
    stranger = "GPU-00000000-1111-2222-3333-444444444444"
    for name in ("dra-ok", "dra-bad"):
        api.create(dra.node(name))  # no nvidia.com/gpu: the DRA driver publishes its GPUs
    api.create(dra.resource_slice("dra-ok"))
    api.create(dra.resource_slice("dra-bad", replace={dra.gpus()[5][2]: stranger}))

    def warnings() -> list[str]:
        return [
            r.getMessage()
            for r in caplog.records
            if r.levelno >= logging.WARNING and "topology" in r.getMessage()
        ]

    with running_operator(kubeconfig) as runtime:
        wait_for(
            lambda: _mismatch_events(api, "dra-bad"),
            message=lambda: f"the mismatch reported: {warnings()}",
        )
        # The consistent node is judged by its slices too: once the operator holds them and
        # has cycled, it has said nothing about it.
        wait_for(
            lambda: (
                runtime.scheduler.claims.view.node_devices(runtime.scheduler.state.nodes["dra-ok"])
                is not None
            ),
            message="the operator holds dra-ok's slice",
        )
        start = runtime.scheduler.cycles
        wait_for(
            lambda: runtime.scheduler.cycles >= start + 2, timeout=60, message="two cycles more"
        )
        (event,) = _mismatch_events(api, "dra-bad")
        assert event["type"] == "Warning"
        assert "device gpu-" in event["message"], event
        assert stranger in event["message"], event
        assert [w for w in warnings() if "dra-ok" in w] == []
        assert _mismatch_events(api, "dra-ok") == []
        (said,) = [w for w in warnings() if "dra-bad" in w]
        assert stranger in said

        # The same slice written again (a new resourceVersion, same devices): no news.
        body = api.get("resourceslices", "dra-bad-gpu.nvidia.com-slice", group=RESOURCE)
        body["metadata"].setdefault("labels", {})["touched"] = "1"
        version = api.replace(body)["metadata"]["resourceVersion"]
        book = runtime.scheduler.claims.book.slices
        wait_for(
            lambda: book["dra-bad-gpu.nvidia.com-slice"].metadata.resource_version == version,
            message="the operator sees the touched slice",
        )
        start = runtime.scheduler.cycles
        wait_for(
            lambda: runtime.scheduler.cycles >= start + 2, timeout=60, message="two cycles more"
        )
        assert len([w for w in warnings() if "dra-bad" in w]) == 1, warnings()

        # A change: another device is a stranger now. Said again, once.
        other = "GPU-99999999-1111-2222-3333-444444444444"
        replace = {dra.gpus()[5][2]: stranger, dra.gpus()[6][2]: other}
        fresh = dra.resource_slice("dra-bad", replace=replace, generation=2)
        now = api.get("resourceslices", "dra-bad-gpu.nvidia.com-slice", group=RESOURCE)
        api.replace({**fresh, "metadata": now["metadata"]})
        wait_for(
            lambda: len([w for w in warnings() if "dra-bad" in w]) == 2,
            message=lambda: f"the changed mismatch said: {warnings()}",
        )
        said = [w for w in warnings() if "dra-bad" in w][-1]
        assert other in said, said
        assert stranger in said, said
        wait_for(
            lambda: any(other in e["message"] for e in _mismatch_events(api, "dra-bad")),
            message=lambda: f"an Event for the change: {dump(_mismatch_events(api, 'dra-bad'))}",
        )
        assert [w for w in warnings() if "dra-ok" in w] == []

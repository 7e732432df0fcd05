"""Watches the API server refuses (a CRD being re-installed answers 404), on the real control
plane through its fault proxy: the operator survives, is unready meanwhile, and schedules
what waited once the watch is back."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx

from testing.apiserver import ApiClient, wait_for
from testing.harness import (
    assert_no_gpu_shared,
    gang,
    gpu_node,
    gpu_pod,
    placement_of,
    pods,
    running_operator,
)
from tests.integration.conftest import Server

PODGROUP_WATCH = r"/podgroups\?.*watch="


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _readyz(port: int) -> tuple[int, str]:
    answer = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5)
    return answer.status_code, answer.text


def _bound(api: ApiClient, name: str, size: int) -> bool:
    everything = pods(api)
    return all(placement_of(everything.get(f"default/{name}-{i}", {})) for i in range(size))


def test_a_podgroup_watch_answered_404_makes_it_unready_and_the_gang_waits_for_its_return(
    apiserver: Server, api: ApiClient, kubeconfig: Path
) -> None:
    api.create(gpu_node("n1", "zone-a", "rack-1"))
    port = _free_port()
    with running_operator(kubeconfig, metrics_port=port) as runtime:
        wait_for(lambda: _readyz(port)[0] == 200, message="ready once started")
        refused = apiserver.faults.fail(
            404, method="GET", path=PODGROUP_WATCH, watch=True, times=None
        )

        def refused_yet() -> int:
            # Every watch reconnects and the PodGroups' is refused. A watch request already on
            # its way when the fault went in is not open yet, so not dropped: drop again until
            # the PodGroups' has been refused once.
            if not refused.hits:
                apiserver.drop_watches()
            return refused.hits

        wait_for(refused_yet, timeout=30, interval=1.0, message="the PodGroups watch refused")
        _, text = wait_for(
            lambda: (r := _readyz(port))[0] == 503 and r, timeout=30, message="unready"
        )
        assert "podgroups.scheduling.gpusched.io" in text, text
        api.create(gang("late", 2))
        for i in range(2):
            api.create(gpu_pod(f"late-{i}", 2, group="late"))
        # Each retry lists the PodGroups before its watch is refused: still unready.
        wait_for(lambda: refused.hits >= 2, timeout=30, message="the watch retried")
        assert _readyz(port)[0] == 503
        apiserver.faults.remove(refused)
        wait_for(lambda: _bound(api, "late", 2), timeout=60, message="the gang bound")
        wait_for(lambda: _readyz(port)[0] == 200, timeout=30, message="ready again")
        assert_no_gpu_shared(api)
        assert not runtime.task.done()  # the scheduling loop never stopped


SILENCE_SECONDS = 45.0
"""How long the pods watch stays silent: longer than the test waits for the pod's bind, so
only the operator's periodic resync can have shown it the pod."""


def test_a_pod_created_while_the_pods_watch_is_silent_is_bound_from_the_resyncs_list(
    apiserver: Server, api: ApiClient, kubeconfig: Path
) -> None:
    api.create(gpu_node("n1", "zone-a", "rack-1"))
    with running_operator(kubeconfig):
        api.create(gpu_pod("before", 2))
        wait_for(lambda: placement_of(pods(api)["default/before"]), message="before bound")
        # The pods watch reconnects into an answer that does not come for a while.
        apiserver.faults.delay(SILENCE_SECONDS, method="GET", path=r"/pods\?.*watch=", times=1)
        apiserver.drop_watches()
        api.create(gpu_pod("unseen", 2))
        wait_for(
            lambda: placement_of(pods(api)["default/unseen"]),
            timeout=SILENCE_SECONDS / 2,
            message="the pod bound while its watch is silent",
        )
        assert_no_gpu_shared(api)

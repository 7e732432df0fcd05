"""No token in the logs: the operator runs at DEBUG with a token-bearing kubeconfig, schedules
a pod and fails some requests (errors are where clients like to print their headers), and the
token appears nowhere in what it logged."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml

from testing.apiserver import ApiClient, ApiServer, wait_for
from testing.harness import gpu_node, gpu_pod, placement_of, pods, running_operator


def test_the_api_token_never_appears_in_the_logs_even_at_debug(
    apiserver: ApiServer, api: ApiClient, kubeconfig: Path, caplog: pytest.LogCaptureFixture
) -> None:
    token = yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"]
    assert len(token) >= 16
    caplog.set_level(logging.DEBUG)
    api.create(gpu_node("n1", "zone-a", "rack-1"))
    apiserver.faults.fail(500, method="POST", path=r"/binding$", times=1)
    apiserver.faults.fail(401, method="PATCH", path=r"/status$", times=1)
    with running_operator(kubeconfig):
        api.create(gpu_pod("p", 1))
        wait_for(lambda: placement_of(pods(api)["default/p"]), message="p bound")
    logged = "\n".join(f"{r.getMessage()} {r.exc_text or ''} {r.args!r}" for r in caplog.records)
    assert len(caplog.records) > 10, "nothing was logged at DEBUG: the test proves nothing"
    assert token not in logged
    assert token not in caplog.text

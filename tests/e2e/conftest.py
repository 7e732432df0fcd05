"""The kind cluster, created once per session for every e2e story.

Without Docker (a running engine), kind, kubectl or helm every test here is skipped with a
message naming what is missing; ``GPUSCHED_E2E_REQUIRE=1`` (set by the e2e workflow) turns that
into a failure. ``GPUSCHED_E2E_KEEP=1`` keeps the cluster afterwards for a look around; logs of
a failed session go to ``$GPUSCHED_E2E_LOGS`` (default /tmp/gpusched-e2e-logs).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e import cluster

_E2E = Path(__file__).resolve().parent


def _in_e2e(item: pytest.Item) -> bool:
    return _E2E in Path(str(item.fspath)).resolve().parents


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    ours = [item for item in items if _in_e2e(item)]
    if not ours:
        return
    missing = cluster.missing_tools()
    if not missing:
        return
    message = "kind e2e suite needs " + ", ".join(missing)
    if os.environ.get("GPUSCHED_E2E_REQUIRE") == "1":
        raise pytest.UsageError(message)
    for item in ours:
        item.add_marker(pytest.mark.skip(reason=message))


@pytest.fixture(scope="session")
def kind_cluster(request: pytest.FixtureRequest) -> Iterator[None]:
    failed_before = request.session.testsfailed
    cluster.create_cluster()
    try:
        cluster.advertise_gpus()
        cluster.build_and_load_image()
        cluster.install_chart()
        for namespace in ("ml", "research"):
            cluster.kubectl("create", "namespace", namespace, check=False)
        yield
    finally:
        if request.session.testsfailed > failed_before:
            cluster.dump_logs(Path(os.environ.get("GPUSCHED_E2E_LOGS", "/tmp/gpusched-e2e-logs")))
        if os.environ.get("GPUSCHED_E2E_KEEP") != "1":
            cluster.delete_cluster()

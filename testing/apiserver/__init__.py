"""A Kubernetes API-server emulator for integration tests, built on kmock.

    with ApiServer(crds=True) as server, ApiClient(server.url) as api:
        api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
        server.faults.fail(500, method="POST", path=r"/binding$", times=1)

- `ApiServer` (server.py): 127.0.0.1, a free port, its own thread and event loop; `url`,
  `stop()`, fault hooks (`faults`, `drop_watches`, `expire_watches`), inspection
  (`objects`, `requests`, `request_count`, `watch_count`), `call(fn)` onto its loop,
  `write_kubeconfig(path)`, `register_kopf_login(registry)`.
- `KubeApiHandler` (handler.py): the HTTP side, a kmock `KubernetesScaffold`.
- `Store` (store.py): objects, resourceVersions, the bounded event log, watchers, GC.
- `ApiClient` / `BackgroundWatch` / `wait_for` (client.py): a synchronous httpx client.
- `ApiServerProcess` (process.py): the emulator in a child process, hooks over HTTP.

Fixtures: tests/integration/conftest.py.
"""

from .client import (
    JSON_PATCH,
    MERGE,
    STRATEGIC,
    ApiClient,
    ApiStatusError,
    BackgroundWatch,
    wait_for,
)
from .faults import FaultRule, Faults
from .handler import KubeApiHandler, parse_target
from .process import ApiServerProcess
from .resources import (
    BUILTIN_RESOURCES,
    COMPOSITEPODGROUPS,
    CRD_GROUP,
    CRD_VERSION,
    OUR_CRDS,
    PODGROUPS,
    WORKLOADS,
    ResourceSpec,
    crd_manifest,
)
from .selectors import Selector
from .server import TOKEN, ApiServer
from .store import Store

__all__ = [
    "BUILTIN_RESOURCES",
    "COMPOSITEPODGROUPS",
    "CRD_GROUP",
    "CRD_VERSION",
    "JSON_PATCH",
    "MERGE",
    "OUR_CRDS",
    "PODGROUPS",
    "STRATEGIC",
    "TOKEN",
    "WORKLOADS",
    "ApiClient",
    "ApiServer",
    "ApiServerProcess",
    "ApiStatusError",
    "BackgroundWatch",
    "FaultRule",
    "Faults",
    "KubeApiHandler",
    "ResourceSpec",
    "Selector",
    "Store",
    "crd_manifest",
    "parse_target",
    "wait_for",
]

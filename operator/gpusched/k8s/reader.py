"""Read-only listing of what the engine needs from a live cluster (for ``gpusched explain``).

Nodes, Pods and our three custom resources, through paginated GETs only: nothing is written.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from kubernetes_asyncio import client

from gpusched.api.crds import GROUP, VERSION
from gpusched.k8s.client import PLURALS, KubeClusterApi, load_configuration
from gpusched.scheduler.ports import ApiError

PAGE_SIZE = 500
"""Objects per list request; larger clusters are read in pages (``continue`` tokens)."""
KINDS = {
    "Node": "/api/v1/nodes",
    "Pod": "/api/v1/pods",
    **{kind: f"/apis/{GROUP}/{VERSION}/{plural}" for kind, plural in PLURALS.items()},
}
"""Kind → the cluster-wide collection listed for it."""


async def list_cluster(kubeconfig: str | None = None) -> list[dict[str, Any]]:
    """Every Node, Pod, PodGroup, CompositePodGroup and Workload, as API documents with
    ``kind`` set (list items carry none). Raises `gpusched.scheduler.ports.ApiError`."""
    configuration = await load_configuration(kubeconfig)
    api = KubeClusterApi(client.ApiClient(configuration))
    try:
        documents: list[dict[str, Any]] = []
        for kind, path in KINDS.items():
            try:
                documents += await _list(api, kind, path)
            except ApiError as error:
                if error.status != 404 or kind in ("Node", "Pod"):
                    raise
                # Our CRDs are not installed: there are no such objects.
        return documents
    finally:
        await api.close()


async def _list(api: KubeClusterApi, kind: str, path: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    token = ""
    while True:
        query = f"?limit={PAGE_SIZE}" + (f"&continue={quote(token)}" if token else "")
        page = await api._request("GET", path + query)
        for item in page.get("items") or []:
            if isinstance(item, dict):
                items.append({**item, "kind": kind})
        token = str((page.get("metadata") or {}).get("continue") or "")
        if not token:
            return items

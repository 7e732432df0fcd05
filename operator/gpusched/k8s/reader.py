"""Read-only listing of what the engine needs from a live cluster (for ``gpusched explain``).

Nodes, Pods and our three custom resources, through paginated GETs only: nothing is written.
"""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client

from gpusched.api.crds import GROUP, VERSION
from gpusched.api.dra import DRA_API_VERSION
from gpusched.k8s.client import PLURALS, KubeClusterApi, load_configuration
from gpusched.scheduler.ports import ApiError

KINDS = {
    "Node": "/api/v1/nodes",
    "Pod": "/api/v1/pods",
    **{kind: f"/apis/{GROUP}/{VERSION}/{plural}" for kind, plural in PLURALS.items()},
    # What else the operator decides by: DRA devices and claims, disruption budgets. Not
    # ResourceClaimTemplates: in a live cluster kube-controller-manager makes the claims, and
    # a pod whose claim is not made yet waits for it, as the operator has it wait.
    "ResourceSlice": f"/apis/{DRA_API_VERSION}/resourceslices",
    "DeviceClass": f"/apis/{DRA_API_VERSION}/deviceclasses",
    "ResourceClaim": f"/apis/{DRA_API_VERSION}/resourceclaims",
    "PodDisruptionBudget": "/apis/policy/v1/poddisruptionbudgets",
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
                documents += [{**item, "kind": kind} for item in await api._list_all(path)]
            except ApiError as error:
                if error.status != 404 or kind in ("Node", "Pod"):
                    raise
                # Not served (our CRDs not installed, no DRA): there are no such objects.
        return documents
    finally:
        await api.close()

"""The chart's RBAC against the calls the code makes, not against a list kept by hand.

Every public method of `KubeClusterApi` (the operator's only way to the API server) is
called with a recording transport; each (HTTP method, path) is turned into the (API group,
resource, verb) RBAC checks, and the operator's watches (`gpusched.handlers.startup.watched`)
add list and watch on each watched kind. The chart must grant exactly that: a call without a grant
fails in a real cluster, a grant without a call is privilege nobody needs. A new method of
`KubeClusterApi` fails here until it is added to `CALLS`.
"""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from gpusched.api.foreign import CANDIDATES, Served
from gpusched.handlers import startup
from gpusched.k8s.claims import KubeClaimApi
from gpusched.k8s.client import KubeClusterApi
from gpusched.scheduler.ports import ObjectRef
from testing.helm import find, render

GROUP = "scheduling.gpusched.io"
POD = ObjectRef("v1", "Pod", "ml", "train-worker-0", "uid-1")
PODGROUP = ObjectRef(f"{GROUP}/v1alpha1", "PodGroup", "ml", "train-workers")
COMPOSITE = ObjectRef(f"{GROUP}/v1alpha1", "CompositePodGroup", "ml", "train-zone")
WORKLOAD = ObjectRef(f"{GROUP}/v1alpha1", "Workload", "ml", "train")
EVENT = {"metadata": {"namespace": "ml"}}
FOREIGN = (  # other projects' groups, their status in their own fields
    ObjectRef("scheduling.k8s.io/v1beta1", "PodGroup", "ml", "train"),
    ObjectRef("scheduling.k8s.io/v1alpha3", "CompositePodGroup", "ml", "train"),
    ObjectRef("scheduling.volcano.sh/v1beta1", "PodGroup", "ml", "train"),
    ObjectRef("scheduling.x-k8s.io/v1alpha1", "PodGroup", "ml", "train"),
)


def _custom(kind: str) -> dict[str, Any]:
    return {"kind": kind, "metadata": {"namespace": "ml", "name": "x"}}


_Call = Callable[[KubeClusterApi], Awaitable[Any]]


def _patch_status(obj: ObjectRef) -> _Call:
    return lambda api: api.patch_status(obj, {})


async def _drained(pages: AsyncIterator[object]) -> None:
    async for _ in pages:
        pass


def _create_custom(kind: str) -> _Call:
    return lambda api: api.create_custom(_custom(kind))


CALLS: dict[str, list[_Call]] = {
    "bind": [lambda api: api.bind(POD, "node-a", {"gpusched.io/gpus": "0,1"})],
    "get_pod": [lambda api: api.get_pod(POD)],
    # A preempted pod's Job, read to warn when it lacks a podFailurePolicy for preemption.
    "get_job": [lambda api: api.get_job("ml", "train")],
    # Preemption: victims annotated, then evicted (deleted where an eviction is not possible,
    # marked first), and the preemptor's pods' nominatedNodeName.
    "annotate_pod": [lambda api: api.annotate_pod(POD, {"gpusched.io/preemption": None})],
    "evict": [lambda api: api.evict(POD)],
    "delete_pod": [lambda api: api.delete_pod(POD)],
    "patch_pod_status": [lambda api: api.patch_pod_status(POD, {})],
    "patch_status": [_patch_status(o) for o in (PODGROUP, COMPOSITE, WORKLOAD, *FOREIGN)],
    "create_event": [lambda api: api.create_event(EVENT)],
    "patch_event": [lambda api: api.patch_event("ml", "e-1", {"count": 2})],
    # What `materialize` makes of a Workload; Workloads themselves are the user's.
    "create_custom": [_create_custom(k) for k in ("PodGroup", "CompositePodGroup")],
    "get_lease": [lambda api: api.get_lease("gpusched-system", "gpusched")],
    "create_lease": [lambda api: api.create_lease("gpusched-system", {})],
    "replace_lease": [lambda api: api.replace_lease("gpusched-system", "gpusched", {})],
    "pages": [
        lambda api: _drained(api.pages("pods")),
        lambda api: _drained(api.pages("nodes")),
        lambda api: _drained(api.pages("pods", cached=True)),
        lambda api: _drained(api.pages("nodes", cached=True)),
    ],
    "list_groups": [lambda api: api.list_groups()],
}
"""Each public request method of `KubeClusterApi`, called for every kind it serves."""
NOT_REQUESTS = {"close", "pages_of", "served", "discovery", "foreign_served"}
"""Not in `CALLS`: ``pages_of`` is the watches' list, of each watched kind (`_watched`);
``served``, ``discovery`` and ``foreign_served`` read discovery, which every authenticated
user may."""
CLAIM = {"metadata": {"namespace": "ml", "name": "train-worker-0-gpu-x"}}
CLAIM_CALLS: dict[str, list[Callable[[KubeClaimApi], Awaitable[Any]]]] = {
    "list_resource_slices": [lambda api: api.list_resource_slices()],
    "list_device_classes": [lambda api: api.list_device_classes()],
    "list_resource_claims": [lambda api: api.list_resource_claims()],
    "get_claim": [lambda api: api.get_claim("ml", "train-worker-0-gpu-x")],
    "update_claim": [lambda api: api.update_claim(CLAIM)],
    "update_claim_status": [lambda api: api.update_claim_status(CLAIM)],
    "create_claim": [lambda api: api.create_claim(CLAIM)],
    "delete_claim": [lambda api: api.delete_claim("ml", "train-worker-0-gpu-x", "uid-2")],
    "patch_pod_status": [lambda api: api.patch_pod_status("ml", "train-worker-0", {})],
}
"""Each public request method of `KubeClaimApi` (ResourceClaims, through the same client)."""

_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
_PATH = re.compile(
    r"^/(?:api/(?P<core>v1)|apis/(?P<group>[^/]+)/[^/]+)"
    r"(?:/namespaces/(?P<namespace>[^/]+))?/(?P<resource>[^/?]+)"
    r"(?:/(?P<name>[^/?]+))?(?:/(?P<sub>[^/?]+))?"
)


class _Recorder(KubeClusterApi):
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        # every foreign group kind served (in its newest version): each is listed
        chosen = tuple((f"{group}/{versions[0]}", kind) for group, versions, kind in CANDIDATES)
        self.foreign = Served(chosen, ())

    async def _request(
        self,
        method: str,
        path: str,
        body: object = None,
        content_type: str = "application/json",
        timeout: float = 0.0,
    ) -> dict[str, Any]:
        self.calls.append((method, path))
        return {}

    async def _write(
        self,
        method: str,
        path: str,
        body: object,
        content_type: str = "application/json",
        timeout: float = 0.0,
        fence: Any = None,
    ) -> dict[str, Any]:
        """Fenced writes (binds, status, Events, created groups) take their own path."""
        return await self._request(method, path, body, content_type, timeout)


def rbac_of(method: str, path: str) -> tuple[str, str, str, str]:
    """(API group, resource[/subresource], verb, namespace) that RBAC checks for a request."""
    match = _PATH.match(path)
    assert match, path
    group = "" if match["core"] else match["group"]
    resource = match["resource"] + (f"/{match['sub']}" if match["sub"] else "")
    verb = ("get" if match["name"] else "list") if method == "GET" else _VERBS[method]
    return group, resource, verb, match["namespace"] or ""


def _asynchronous(member: object) -> bool:
    """A coroutine function, or an async generator's (a list read page by page)."""
    return inspect.iscoroutinefunction(member) or inspect.isasyncgenfunction(member)


def test_every_request_method_is_in_the_table() -> None:
    public = {
        name
        for name, member in inspect.getmembers(KubeClusterApi, _asynchronous)
        if not name.startswith("_")
    }
    assert public - NOT_REQUESTS == set(CALLS)
    claim_methods = {
        name
        for name, _ in inspect.getmembers(KubeClaimApi, inspect.iscoroutinefunction)
        if not name.startswith("_")
    }
    assert claim_methods == set(CLAIM_CALLS)


def _requests() -> set[tuple[str, str, str, str]]:
    api = _Recorder()
    for calls in CALLS.values():
        for call in calls:
            asyncio.run(call(api))
    claims = KubeClaimApi(api)
    for claim_calls in CLAIM_CALLS.values():
        for claim_call in claim_calls:
            asyncio.run(claim_call(claims))
    return {rbac_of(method, path) for method, path in api.calls}


def _watched() -> set[tuple[str, str]]:
    """(group, plural) of every kind the operator watches."""
    return {(kind.group, kind.plural) for kind, _ in startup.watched()}


def needed() -> dict[tuple[str, str], set[str]]:
    """What the operator's ServiceAccount must be allowed, cluster-wide (not the Lease)."""
    grants: dict[tuple[str, str], set[str]] = {}
    for group, resource, verb, _ in _requests():
        if resource != "leases":
            grants.setdefault((group, resource), set()).add(verb)
    for group, plural in _watched():
        grants.setdefault((group, plural), set()).update({"list", "watch"})
    return grants


def _granted(role: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    grants: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                grants.setdefault((group, resource), set()).update(rule["verbs"])
    return grants


EXTRA = {
    (GROUP, "workloads/finalizers"): {"update"},
    ("resource.k8s.io", "resourceclaims/binding"): {"update"},
}
"""Granted without a request of their own: creating objects whose ownerReference has
blockOwnerDeletion needs it where OwnerReferencesPermissionEnforcement is on; a claim's status
update that changes its allocation or reservedFor needs ``resourceclaims/binding``."""


def test_the_cluster_role_grants_exactly_what_the_operator_calls() -> None:
    role = find(render(), "ClusterRole")
    assert _granted(role) == needed() | EXTRA


def test_the_lease_role_grants_exactly_the_lease_calls() -> None:
    lease_calls = {(verb, ns) for _, resource, verb, ns in _requests() if resource == "leases"}
    assert {ns for _, ns in lease_calls} == {"gpusched-system"}
    role = find(render(), "Role", "-leader-election")
    granted = {verb for rule in role["rules"] for verb in rule["verbs"]}
    assert granted == {verb for verb, _ in lease_calls}


STATUS = f"/apis/{GROUP}/v1alpha1/namespaces/ml/podgroups/pg/status"
LEASE = "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l"


@pytest.mark.parametrize(
    ("method", "path", "want"),
    [
        ("POST", "/api/v1/namespaces/ml/pods/p/binding", ("", "pods/binding", "create", "ml")),
        ("GET", "/api/v1/pods", ("", "pods", "list", "")),
        ("GET", "/api/v1/pods?limit=500", ("", "pods", "list", "")),
        ("PATCH", STATUS, (GROUP, "podgroups/status", "patch", "ml")),
        ("PUT", LEASE, ("coordination.k8s.io", "leases", "update", "ns")),
    ],
)
def test_request_paths_map_to_what_rbac_checks(
    method: str, path: str, want: tuple[str, str, str, str]
) -> None:
    assert rbac_of(method, path) == want

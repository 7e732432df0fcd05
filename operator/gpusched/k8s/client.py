"""The API server, through kubernetes_asyncio: credentials, and the calls the scheduler makes.

Configuration is always passed explicitly: kubernetes_asyncio reads ``$KUBECONFIG`` when it is
imported, which is too early for a process that is told its kubeconfig on the command line.
"""

from __future__ import annotations

import asyncio
import json
import os
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
from aiohttp.abc import AbstractStreamWriter
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from gpusched.api.config import BIND_TIMEOUT_SECONDS
from gpusched.api.crds import GROUP, VERSION
from gpusched.api.foreign import Served, group_versions, served_versions
from gpusched.api.k8s import PodStatus, scheduled_conditions
from gpusched.scheduler.ports import ApiError, Fence, FencedError, Listing, ObjectRef

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
PLURALS = {
    "PodGroup": "podgroups",
    "CompositePodGroup": "compositepodgroups",
    "Workload": "workloads",
}
LEASES = "/apis/coordination.k8s.io/v1"
NO_STATUS_SUBRESOURCE = "scheduling.volcano.sh/"
"""API groups whose group objects' status is written on the object (no status subresource)."""
REQUEST_TIMEOUT_SECONDS = 30.0
"""No single API request may take longer; the caller decides whether to retry. A bind gets
`BIND_TIMEOUT_SECONDS`."""
POD_STATUS_READ = tuple(field.alias or name for name, field in PodStatus.model_fields.items())
"""The status fields the Pod model reads: a listed pod keeps these (`slim_pod`)."""
PAGE_SIZE = 500
"""Objects per page of a whole-cluster list. Each page is decoded on its own, on the event
loop: 500 pods take tens of milliseconds, where one document of 15,000 held the loop for
seconds and its bytes, its objects and the cache all at once."""
Slim = Callable[[dict[str, Any]], dict[str, Any]]
"""What a list keeps of each object it reads (changed in place): `slim_pod`, `_unmanage`."""


async def load_configuration(kubeconfig: str | None = None) -> client.Configuration:
    """In-cluster credentials inside a pod, else the kubeconfig file (``kubeconfig``,
    ``$KUBECONFIG`` read now, or ``~/.kube/config``)."""
    configuration = client.Configuration()
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=configuration)
        return configuration
    path = kubeconfig or os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    await config.load_kube_config(
        config_file=path, client_configuration=configuration, persist_config=False
    )
    return configuration


def _error(error: Exception) -> ApiError:
    """A failure with no answer from the server: status 0."""
    return ApiError(0, f"{type(error).__name__}: {error}")


_FAILURES = (ApiException, aiohttp.ClientError, asyncio.TimeoutError, OSError)


def _always() -> bool:
    return True


class _RefusedError(Exception):
    """The fence said no as the body was about to be written."""


class _FencedBody(aiohttp.BytesPayload):
    """A request body that asks the fence at the last moment before its bytes are written.

    aiohttp holds a request's headers back until its body's first bytes, then hands both to
    the transport in one synchronous call (``StreamWriter.write``): nothing can run between
    the fence's answer and the socket write, so a process stopped anywhere before this point
    (SIGSTOP, a long GC pause) asks again when it resumes. A refused body is never written:
    the server sees at most headers announcing a body that never comes, and commits
    nothing."""

    def __init__(self, data: bytes, content_type: str, fence: Fence) -> None:
        super().__init__(data, content_type=content_type)
        self._fence = fence
        self.refused = False

    async def write(self, writer: AbstractStreamWriter) -> None:
        await self.write_with_length(writer, None)

    async def write_with_length(
        self, writer: AbstractStreamWriter, content_length: int | None
    ) -> None:
        if not self._fence():
            self.refused = True
            raise _RefusedError
        await super().write_with_length(writer, content_length)


class KubeClusterApi:
    """`gpusched.scheduler.ports.ClusterApi` over kubernetes_asyncio.

    Requests go through ``ApiClient.call_api`` with ``_preload_content=False``: the binding
    endpoint answers with a Status that the typed client cannot parse, and patches of our
    objects need a merge-patch body the typed methods would not send. Without preloading,
    kubernetes_asyncio does not check the status code, so `_request` does.

    ``fence`` is asked right before every write this replica makes on the cluster's state
    (binds, status patches, Events, created groups) and a bind may bring one of its own; the
    Lease calls and reads are not fenced. Writes go through the client's aiohttp session
    directly, so that the fence sits in the body writer (`_FencedBody`): checking it before
    ``call_api`` would leave awaits (auth, connection, serialisation) between the check and
    the write."""

    def __init__(self, api_client: client.ApiClient, fence: Fence = _always) -> None:
        self.api_client = api_client
        self.fence = fence
        self.foreign: Served | None = None
        """The foreign group versions served (`foreign_served`), once read."""

    async def close(self) -> None:
        await self.api_client.close()

    async def _request(
        self,
        method: str,
        path: str,
        body: object = None,
        content_type: str = "application/json",
        timeout: float = REQUEST_TIMEOUT_SECONDS,
    ) -> dict[str, Any]:
        """An unfenced request (reads and the Lease)."""
        try:
            response = await self.api_client.call_api(
                path,
                method,
                header_params={"Content-Type": content_type, "Accept": "application/json"},
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=timeout,
            )
            async with response:
                data = await response.read()
                status = int(response.status)
        except _FAILURES as error:
            raise _error(error) from None
        return _answer(status, data)

    async def _write(
        self,
        method: str,
        path: str,
        body: object,
        content_type: str = "application/json",
        timeout: float = REQUEST_TIMEOUT_SECONDS,
        fence: Fence | None = None,
    ) -> dict[str, Any]:
        """A fenced write: `FencedError` when this replica may not write now (nothing was sent)."""

        def allowed() -> bool:
            return self.fence() and (fence is None or fence())

        what = f"{method} {path}"
        if not allowed():
            raise FencedError(what)  # cheap early answer; the one that counts is in the body
        rest = self.api_client.rest_client
        headers = {
            **self.api_client.default_headers,
            "Content-Type": content_type,
            "Accept": "application/json",
        }
        await self.api_client.update_params_for_auth(headers, [], ["BearerToken"])
        # Compact, as Go clients write: a RawExtension (a ResourceClaim's opaque config) is
        # kept as the bytes sent, and an update must send the same bytes to leave it unchanged.
        text = json.dumps(body, separators=(",", ":"))
        payload = _FencedBody(text.encode(), content_type, allowed)
        options: dict[str, Any] = {"timeout": aiohttp.ClientTimeout(total=timeout)}
        if rest.proxy:
            options["proxy"] = rest.proxy
        if rest.proxy_headers:
            options["proxy_headers"] = rest.proxy_headers
        if rest.server_hostname:
            options["server_hostname"] = rest.server_hostname
        url = str(self.api_client.configuration.host) + path
        try:
            async with rest.pool_manager.request(
                method, url, data=payload, headers=headers, **options
            ) as response:
                data = await response.read()
                status = int(response.status)
        except _FAILURES as error:
            if payload.refused:
                raise FencedError(what) from None
            raise _error(error) from None
        return _answer(status, data)

    async def bind(
        self,
        pod: ObjectRef,
        node: str,
        annotations: Mapping[str, str],
        fence: Fence | None = None,
    ) -> None:
        metadata: dict[str, Any] = {"name": pod.name, "namespace": pod.namespace}
        if pod.uid:
            metadata["uid"] = pod.uid  # the server refuses to bind a same-named new pod
        if annotations:
            metadata["annotations"] = dict(annotations)
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": metadata,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/binding"
        await self._write("POST", path, body, timeout=BIND_TIMEOUT_SECONDS, fence=fence)

    async def evict(self, pod: ObjectRef, fence: Fence | None = None) -> None:
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod.name, "namespace": pod.namespace},
            "deleteOptions": _preconditions(pod),
        }
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/eviction"
        await self._write("POST", path, body, fence=fence)

    async def annotate_pod(
        self, pod: ObjectRef, annotations: Mapping[str, str | None], fence: Fence | None = None
    ) -> None:
        metadata: dict[str, Any] = {"annotations": dict(annotations)}
        if pod.uid:
            metadata["uid"] = pod.uid  # a precondition: a new pod of the name is left alone
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}"
        await self._write("PATCH", path, {"metadata": metadata}, MERGE_PATCH, fence=fence)

    async def delete_pod(self, pod: ObjectRef, fence: Fence | None = None) -> None:
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}"
        body = {"apiVersion": "v1", "kind": "DeleteOptions", **_preconditions(pod)}
        await self._write("DELETE", path, body, fence=fence)

    async def patch_pod_status(
        self,
        pod: ObjectRef,
        status: Mapping[str, Any],
        fence: Fence | None = None,
        *,
        version: str = "",
    ) -> None:
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status"
        body: dict[str, Any] = {"status": dict(status)}
        if version:
            body["metadata"] = {"resourceVersion": version}  # a precondition, as in an update
        await self._write("PATCH", path, body, STRATEGIC_PATCH, fence=fence)

    async def get_pod(self, pod: ObjectRef) -> Mapping[str, Any] | None:
        try:
            return await self._request("GET", f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}")
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    async def get_job(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        try:
            return await self._request("GET", f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}")
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    async def patch_status(self, obj: ObjectRef, status: Mapping[str, Any]) -> None:
        # Ours, or a foreign group's (upstream, Volcano, coscheduling): same plurals. Volcano's
        # PodGroup CRD has no status subresource: its status is patched on the object.
        collection = f"/apis/{obj.api_version}/namespaces/{obj.namespace}/{PLURALS[obj.kind]}"
        whole = obj.api_version.startswith(NO_STATUS_SUBRESOURCE)
        path = f"{collection}/{obj.name}" if whole else f"{collection}/{obj.name}/status"
        await self._write("PATCH", path, {"status": dict(status)}, MERGE_PATCH)

    async def create_event(self, body: Mapping[str, Any]) -> str:
        namespace = body["metadata"]["namespace"]
        created = await self._write("POST", f"/api/v1/namespaces/{namespace}/events", dict(body))
        return str(created.get("metadata", {}).get("name", ""))

    async def patch_event(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        path = f"/api/v1/namespaces/{namespace}/events/{name}"
        await self._write("PATCH", path, dict(patch), MERGE_PATCH)

    async def create_custom(self, body: Mapping[str, Any]) -> None:
        namespace = body["metadata"].get("namespace", "default")
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURALS[body['kind']]}"
        await self._write("POST", path, dict(body))

    async def get_lease(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        try:
            return await self._request("GET", f"{LEASES}/namespaces/{namespace}/leases/{name}")
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    async def create_lease(self, namespace: str, body: Mapping[str, Any]) -> None:
        await self._request("POST", f"{LEASES}/namespaces/{namespace}/leases", dict(body))

    async def replace_lease(self, namespace: str, name: str, body: Mapping[str, Any]) -> None:
        path = f"{LEASES}/namespaces/{namespace}/leases/{name}"
        await self._request("PUT", path, dict(body))

    async def _list_all(self, path: str, slim: Slim = lambda body: body) -> list[dict[str, Any]]:
        """Every object of the collection ``path``, read in pages of `PAGE_SIZE` (also for
        `gpusched.k8s.reader`, which runs with its user's credentials), each ``slim``-med."""
        return (await self._pages(path, "", slim)).items

    async def _pages(self, path: str, first: str, slim: Slim) -> Listing:
        """Every object of ``path`` (see `_each_page`), and the first page's resourceVersion."""
        items: list[dict[str, Any]] = []
        version = None
        async for page, listed_at in self._each_page(path, first, slim):
            items += page
            version = listed_at if version is None else version
        return Listing(items, version or "")

    async def _each_page(
        self, path: str, first: str, slim: Slim
    ) -> AsyncIterator[tuple[list[dict[str, Any]], str]]:
        """The pages of the collection ``path``, each with its resourceVersion, and each of
        its objects ``slim``-med as the page comes (a whole list of full bodies was held
        only to be slimmed after). ``first``: more of the first page's query (later pages
        carry only the continue token: they continue the first page's snapshot)."""
        page = await self._request("GET", f"{path}?limit={PAGE_SIZE}{first}")
        while True:
            metadata = page.get("metadata") or {}
            yield _items(page, slim), str(metadata.get("resourceVersion") or "")
            token = str(metadata.get("continue") or "")
            if not token:
                return
            page = await self._request("GET", f"{path}?limit={PAGE_SIZE}&continue={quote(token)}")

    async def pages(self, plural: str, *, cached: bool = False) -> AsyncIterator[Listing]:
        """Every pod or Node, page by page (`_each_page`), each page with the first page's
        resourceVersion: pods with what the scheduler reads of them (`slim_pod`), Nodes
        without managed fields. ``cached``: from the watch cache (``resourceVersion=0``)."""
        slim = slim_pod if plural == "pods" else _unmanage
        query = "&resourceVersion=0" if cached else ""
        version = None
        async for page, listed_at in self._each_page(f"/api/v1/{plural}", query, slim):
            version = listed_at if version is None else version
            yield Listing(page, version)

    async def served(self, group_version: str) -> set[str]:
        """The plurals the server serves in ``group_version`` (``/api/v1``, ``/apis/g/v``):
        discovery, which every authenticated user may read; empty when it serves none."""
        document = await self.discovery(group_version)
        resources = document.get("resources") if document is not None else None
        return {str(r.get("name")) for r in resources or [] if isinstance(r, dict)}

    async def discovery(self, group_version: str) -> dict[str, Any] | None:
        """The APIResourceList of ``group_version`` (``/apis/g/v``); None when not served."""
        try:
            return await self._request("GET", group_version)
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    async def foreign_served(self) -> Served:
        """Which version of each foreign group kind the server serves (`served_versions`):
        read once, then kept, so a new leader lists what the watches watch."""
        if self.foreign is None:
            paths = group_versions()
            found = await asyncio.gather(*(self.discovery(f"/apis/{path}") for path in paths))
            documents = dict(zip(paths, found, strict=True))
            self.foreign = served_versions(documents)
        return self.foreign

    async def pages_of(self, path: str) -> AsyncIterator[Listing]:
        """Every object of the collection ``path`` (``/api/v1/pods``, a custom resource's),
        page by page (`_each_page`), each page with the first page's resourceVersion: pods
        with what the scheduler reads of them (`slim_pod`), other kinds without managed
        fields."""
        slim = slim_pod if path == "/api/v1/pods" else _unmanage
        version = None
        async for page, listed_at in self._each_page(path, "", slim):
            version = listed_at if version is None else version
            yield Listing(page, version)

    async def list_groups(self) -> list[dict[str, Any]]:
        """Every PodGroup and CompositePodGroup of the cluster, without managed fields (each
        list item carries its kind, as a watch event's object does). The lists are asked for
        at once (a new leader's first decisions wait for them), and read in a fixed order."""
        ours = [(f"{GROUP}/{VERSION}", kind) for kind in ("PodGroup", "CompositePodGroup")]
        served = await self.foreign_served()
        wanted = [*ours, *served.chosen]
        found = await asyncio.gather(
            *(
                self._list_group(api_version, kind, foreign=i >= len(ours))
                for i, (api_version, kind) in enumerate(wanted)
            )
        )
        groups: list[dict[str, Any]] = []
        for i, ((api_version, kind), bodies) in enumerate(zip(wanted, found, strict=True)):
            for body in bodies:
                if i >= len(ours):
                    body.setdefault("apiVersion", api_version)
                body.setdefault("kind", kind)
                groups.append(body)
        return groups

    async def _list_group(
        self, api_version: str, kind: str, *, foreign: bool
    ) -> list[dict[str, Any]]:
        try:
            return await self._list_all(f"/apis/{api_version}/{PLURALS[kind]}", _unmanage)
        except ApiError as error:
            if not foreign or error.status != 404:
                raise
            return []  # another project's kind, gone since discovery (a CRD deleted)


def _items(page: Mapping[str, Any], slim: Slim) -> list[dict[str, Any]]:
    return [slim(item) for item in page.get("items") or [] if isinstance(item, dict)]


def slim_pod(body: dict[str, Any]) -> dict[str, Any]:
    """``body``, changed in place, without what the scheduler never reads: managed fields,
    and the status but for `POD_STATUS_READ` (no conditions, no container states). Its
    fingerprint and its parse are those of the whole body; a list of 15,000 pods held about
    a quarter of the memory (50 MB against 201 MB above the cache while a new leader took
    it in)."""
    _unmanage(body)
    status = body.get("status")
    if isinstance(status, dict):
        body["status"] = {key: status[key] for key in POD_STATUS_READ if key in status}
        if "conditions" in body["status"]:
            body["status"]["conditions"] = scheduled_conditions(body["status"]["conditions"])
    return body


def _unmanage(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` without ``metadata.managedFields`` (changed in place)."""
    metadata = body.get("metadata")
    if isinstance(metadata, dict):
        metadata.pop("managedFields", None)
    return body


def _preconditions(pod: ObjectRef) -> dict[str, Any]:
    """Delete options that touch only this very pod, not a new one of the same name."""
    return {"preconditions": {"uid": pod.uid}} if pod.uid else {}


def _answer(status: int, data: bytes) -> dict[str, Any]:
    """The JSON document of a 2xx answer; `ApiError` naming the server's message otherwise."""
    try:
        document = json.loads(data) if data else {}
    except ValueError:
        document = {}
    if not 200 <= status <= 299:
        message = document.get("message") if isinstance(document, dict) else None
        raise ApiError(status, str(message or data[:200].decode(errors="replace")))
    return document if isinstance(document, dict) else {}


WATCH_LINE_BYTES = 2**21
"""The session's read buffer, as kubernetes_asyncio sets it: a watch event of a large object
(etcd takes requests up to 1.5 MiB) fits."""
OTHER_CONNECTIONS = 10
"""Connections to the API server besides the binds' (``bindConcurrency``): status patches
(8 at once), the Event poster and a list."""


def api_client(configuration: client.Configuration, binds: int = 0) -> client.ApiClient:
    """kubernetes_asyncio's client, without aiohttp's trust in the environment, and with
    room for ``binds`` binds in flight beside `OTHER_CONNECTIONS`.

    Trusting the environment, aiohttp looks ``~/.netrc`` and the proxy variables up in a
    worker thread for every request: two thread hops a bind, which took a fifth of the
    operator's time at 300 binds a second on two cores. The proxy the variables name for
    the API server (none in a cluster, as a rule) is looked up once, here, instead; a
    ``~/.netrc`` entry would only have clashed with our bearer token. The client's own
    connection limit is five per CPU: 10 on two cores, which held binds, Events, status
    patches and lists together below ``bindConcurrency``."""
    if not configuration.proxy:
        configuration.proxy = _environment_proxy(str(configuration.host))
    configuration.connection_pool_maxsize = max(
        configuration.connection_pool_maxsize, binds + OTHER_CONNECTIONS
    )
    made = client.ApiClient(configuration)
    rest = made.rest_client
    connector = rest.pool_manager.connector
    rest.pool_manager.detach()  # the client's session, which trusts the environment
    rest.pool_manager = aiohttp.ClientSession(
        connector=connector, trust_env=False, read_bufsize=WATCH_LINE_BYTES
    )
    return made


def _environment_proxy(url: str) -> str | None:
    parts = urllib.parse.urlsplit(url)
    if not parts.hostname or urllib.request.proxy_bypass(parts.hostname):
        return None
    return urllib.request.getproxies().get(parts.scheme)

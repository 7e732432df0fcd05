"""A small synchronous client for tests: real HTTP (httpx) against the emulator."""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx

from .patches import JSON_PATCH, MERGE, STRATEGIC
from .resources import BUILTIN_RESOURCES, OUR_CRDS, ResourceSpec

T = TypeVar("T")
Obj = dict[str, Any]

__all__ = [
    "JSON_PATCH",
    "MERGE",
    "STRATEGIC",
    "ApiClient",
    "ApiStatusError",
    "BackgroundWatch",
    "wait_for",
]


class ApiStatusError(Exception):
    """A non-2xx answer; `status` is the HTTP code, `body` the v1 Status (or raw text)."""

    def __init__(self, status: int, body: Any, method: str, path: str) -> None:
        reason = body.get("reason") if isinstance(body, dict) else None
        message = body.get("message") if isinstance(body, dict) else body
        super().__init__(f"{method} {path} -> {status} {reason}: {message}")
        self.status = status
        self.body = body
        self.reason = reason


def wait_for(
    predicate: Callable[[], T],
    timeout: float = 10.0,
    interval: float = 0.02,
    message: str | Callable[[], str] = "condition",
) -> T:
    """Poll `predicate` until it returns something truthy (returned) or `timeout` passes.

    Exceptions from the predicate count as "not yet" (the last one is chained on timeout).
    """
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            result = predicate()
        except Exception as exc:
            last_error = exc
        else:
            if result:
                return result
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            text = message() if callable(message) else message
            raise TimeoutError(f"timed out after {timeout}s waiting for {text}") from last_error
        time.sleep(min(interval, remaining))


class ApiClient:
    """create/get/list/patch/delete/bind over HTTP. Resources are named by plural
    (`"pods"`, `"podgroups"`); pass `group=` to disambiguate (`events`: core by default)."""

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 10.0,
        token: str = "emulator-token",
        verify: str | bool = True,
    ) -> None:
        """`verify`: the CA file of an HTTPS server (the real control plane's)."""
        self.url = url
        self.http = httpx.Client(
            base_url=url,
            timeout=timeout,
            headers={"Authorization": f"Bearer {token}"},
            verify=ssl.create_default_context(cafile=verify) if isinstance(verify, str) else verify,
        )
        self.specs: list[ResourceSpec] = [*BUILTIN_RESOURCES, *OUR_CRDS]

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- paths -------------------------------------------------------------------------------

    def spec(self, plural: str, group: str | None = None) -> ResourceSpec:
        for spec in self.specs:
            if spec.plural == plural and (group is None or spec.group == group):
                return spec
        raise KeyError(f"unknown resource {plural!r} (group {group!r})")

    def spec_of(self, body: Mapping[str, Any]) -> ResourceSpec:
        for spec in self.specs:
            if spec.api_version == body.get("apiVersion") and spec.kind == body.get("kind"):
                return spec
        raise KeyError(f"unknown apiVersion/kind: {body.get('apiVersion')} {body.get('kind')}")

    def path(
        self,
        plural: str,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
        group: str | None = None,
    ) -> str:
        spec = self.spec(plural, group)
        if spec.namespaced and name is not None and namespace is None:
            namespace = "default"
        path = spec.path(namespace if spec.namespaced else None, name)
        return f"{path}/{subresource}" if subresource else path

    # -- raw requests ------------------------------------------------------------------------

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return self.http.request(method, path, **kwargs)

    def _json(self, response: httpx.Response) -> Any:
        try:
            body = response.json()
        except ValueError:
            body = response.text
        if response.status_code >= 400:
            raise ApiStatusError(
                response.status_code, body, response.request.method, response.request.url.path
            )
        return body

    # -- verbs -------------------------------------------------------------------------------

    def create(
        self, body: Mapping[str, Any], *, namespace: str | None = None, with_status: bool = True
    ) -> Obj:
        """POST `body`. If it carries a `status` the server drops on create (pods, our CRDs),
        `with_status` sets it afterwards through the status subresource (as a kubelet or
        controller would)."""
        spec = self.spec_of(body)
        if spec.namespaced:
            namespace = namespace or (body.get("metadata") or {}).get("namespace") or "default"
        path = spec.path(namespace if spec.namespaced else None)
        created: Obj = self._json(self.http.post(path, json=dict(body)))
        status = body.get("status")
        if with_status and status and spec.status_subresource and created.get("status") != status:
            meta = created["metadata"]
            created = self.patch(
                spec.plural,
                meta["name"],
                {"status": status},
                namespace=meta.get("namespace"),
                subresource="status",
                group=spec.group,
            )
        return created

    def get(
        self, plural: str, name: str, namespace: str | None = None, *, group: str | None = None
    ) -> Obj:
        result: Obj = self._json(self.http.get(self.path(plural, namespace, name, group=group)))
        return result

    def get_or_none(
        self, plural: str, name: str, namespace: str | None = None, *, group: str | None = None
    ) -> Obj | None:
        try:
            return self.get(plural, name, namespace, group=group)
        except ApiStatusError as exc:
            if exc.status == 404:
                return None
            raise

    def list_raw(
        self,
        plural: str,
        namespace: str | None = None,
        *,
        labels: str | None = None,
        fields: str | None = None,
        group: str | None = None,
        **params: str,
    ) -> Obj:
        query = dict(params)
        if labels:
            query["labelSelector"] = labels
        if fields:
            query["fieldSelector"] = fields
        result: Obj = self._json(
            self.http.get(self.path(plural, namespace, group=group), params=query)
        )
        return result

    def list(
        self,
        plural: str,
        namespace: str | None = None,
        *,
        labels: str | None = None,
        fields: str | None = None,
        group: str | None = None,
    ) -> list[Obj]:
        """The items (all namespaces when `namespace` is None)."""
        items: list[Obj] = self.list_raw(
            plural, namespace, labels=labels, fields=fields, group=group
        )["items"]
        return items

    def patch(
        self,
        plural: str,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
        content_type: str = MERGE,
        group: str | None = None,
    ) -> Obj:
        result: Obj = self._json(
            self.http.patch(
                self.path(plural, namespace, name, subresource, group),
                json=patch,
                headers={"Content-Type": content_type},
            )
        )
        return result

    def patch_status(
        self, plural: str, name: str, status: Mapping[str, Any], namespace: str | None = None
    ) -> Obj:
        return self.patch(plural, name, {"status": dict(status)}, namespace, subresource="status")

    def replace(self, body: Mapping[str, Any], *, subresource: str | None = None) -> Obj:
        spec = self.spec_of(body)
        meta = body["metadata"]
        path = self.path(spec.plural, meta.get("namespace"), meta["name"], subresource, spec.group)
        result: Obj = self._json(self.http.put(path, json=dict(body)))
        return result

    def delete(
        self,
        plural: str,
        name: str,
        namespace: str | None = None,
        *,
        group: str | None = None,
        missing_ok: bool = False,
    ) -> Obj | None:
        response = self.http.delete(self.path(plural, namespace, name, group=group))
        if missing_ok and response.status_code == 404:
            return None
        result: Obj = self._json(response)
        return result

    def bind(
        self,
        pod: str,
        node: str,
        namespace: str = "default",
        annotations: Mapping[str, str] | None = None,
    ) -> Obj:
        """POST pods/{pod}/binding; returns the Status."""
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {
                "name": pod,
                "namespace": namespace,
                "annotations": dict(annotations or {}),
            },
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        result: Obj = self._json(
            self.http.post(self.path("pods", namespace, pod, "binding"), json=binding)
        )
        return result

    def watch(
        self,
        plural: str,
        namespace: str | None = None,
        *,
        group: str | None = None,
        timeout: float = 5.0,
        **params: str,
    ) -> Iterator[Obj]:
        """Yield the events of one watch request (it ends with the server's stream)."""
        query = {"watch": "true", **params}
        url = self.path(plural, namespace, group=group)
        with self.http.stream("GET", url, params=query, timeout=timeout) as response:
            if response.status_code >= 400:
                response.read()
                self._json(response)
            for line in response.iter_lines():
                if line.strip():
                    yield json.loads(line)

    def watch_in_background(
        self, plural: str, namespace: str | None = None, *, group: str | None = None, **params: str
    ) -> BackgroundWatch:
        """Open a watch in a thread that collects its events; `stop()` it (or use `with`)."""
        return BackgroundWatch(self.url, self.path(plural, namespace, group=group), params)

    def wait_for_object(
        self,
        plural: str,
        name: str,
        predicate: Callable[[Obj], Any],
        namespace: str | None = None,
        *,
        group: str | None = None,
        timeout: float = 10.0,
    ) -> Obj:
        """Poll until the object exists and `predicate(obj)` is truthy; return the object."""

        def check() -> Obj | None:
            obj = self.get_or_none(plural, name, namespace, group=group)
            return obj if obj is not None and predicate(obj) else None

        found = wait_for(check, timeout, message=f"{plural}/{name}")
        assert found is not None
        return found


class BackgroundWatch:
    """One watch request read by a thread into `events` (BOOKMARKs go to `bookmarks`).

    It asks for bookmarks (the emulator sends one every `bookmark_interval`); `stop()` shuts
    the socket down to wake the reader at once.
    """

    def __init__(self, url: str, path: str, params: Mapping[str, str]) -> None:
        self.events: list[Obj] = []
        self.bookmarks: list[Obj] = []
        self.error: BaseException | None = None
        self.status: int | None = None
        self.ended = threading.Event()
        self._started = threading.Event()
        self._stopping = False
        self._socket: socket.socket | None = None
        self._http = httpx.Client(base_url=url, timeout=httpx.Timeout(10.0, read=30.0))
        self._params = {"watch": "true", "allowWatchBookmarks": "true", **params}
        self._path = path
        self._thread = threading.Thread(target=self._run, name="test-watch", daemon=True)
        self._thread.start()
        if not self._started.wait(10.0):
            raise TimeoutError("the watch did not start")

    def _run(self) -> None:
        try:
            with self._http.stream("GET", self._path, params=self._params) as response:
                self.status = response.status_code
                stream = response.extensions.get("network_stream")
                self._socket = stream.get_extra_info("socket") if stream is not None else None
                self._started.set()
                for line in response.iter_lines():
                    if self._stopping:
                        break
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    if event.get("type") == "BOOKMARK":
                        self.bookmarks.append(event)
                    else:
                        self.events.append(event)
        except Exception as exc:
            if not self._stopping:
                self.error = exc
        finally:
            self._started.set()
            self.ended.set()

    def summary(self) -> list[tuple[str, str]]:
        """(type, name) of each event so far."""
        return [
            (event["type"], event["object"].get("metadata", {}).get("name", ""))
            for event in list(self.events)
        ]

    def wait_for(self, predicate: Callable[[list[Obj]], Any], timeout: float = 10.0) -> list[Obj]:
        """Wait until `predicate(events)` is truthy; returns the events."""
        wait_for(
            lambda: predicate(list(self.events)),
            timeout,
            message=lambda: f"watch events; got {self.summary()}",
        )
        return list(self.events)

    def stop(self, timeout: float = 10.0) -> None:
        self._stopping = True
        if self._socket is not None and not self.ended.is_set():
            with contextlib.suppress(OSError):  # wakes the reader blocked in recv()
                self._socket.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout)
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

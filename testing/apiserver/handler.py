"""The HTTP side: a kmock KubernetesScaffold that serves the Store like a Kubernetes API server.

kmock's KubernetesEmulator falls short for a Kopf operator (see issue 3); this handler keeps
kmock's server, discovery documents, Request objects and DSL, and replaces the object
handling: every request is parsed once and dispatched directly (no matching against the
request history), and the history itself is bounded. Paths are split by `parse_target`:
kmock 0.8's own parser raises on `/api/v1/namespaces` and reads `/api/v1/namespaces/x`
as "namespace x".
"""

from __future__ import annotations

import asyncio
import base64
import collections
import json
import logging
import math
from dataclasses import dataclass
from typing import Any

import aiohttp.web
import attrs
import kmock
from kmock._internal import enums, rendering

from . import errors
from .faults import Faults
from .resources import PODS, VERBS, ResourceSpec
from .selectors import Selector, compile_matcher
from .store import Event, Gone, Obj, Store, Watcher

logger = logging.getLogger(__name__)

TRUE = frozenset({"true", "True", "TRUE", "1", "t", "T"})
JSON = "application/json"
CONTROL_PREFIX = "/_emulator/"
_EOF = "eof"
_ABORT = "abort"


@dataclass(frozen=True, slots=True)
class Target:
    """A request path, split the Kubernetes way."""

    group: str | None = None  # None: not under /api or /apis/<group>
    version: str | None = None
    plural: str | None = None
    namespace: str | None = None
    name: str | None = None
    subresource: str | None = None


def parse_target(path: str) -> Target:
    parts = [part for part in path.split("/") if part]
    if not parts:
        return Target()
    if parts[0] == "api":
        group, rest = "", parts[1:]
    elif parts[0] == "apis" and len(parts) >= 2:
        group, rest = parts[1], parts[2:]
    else:
        return Target()
    version, rest = (rest[0], rest[1:]) if rest else (None, [])
    namespace = None
    # /namespaces/{ns}/{plural}/...; but /namespaces/{ns}/status|finalize are the namespace's.
    if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in ("status", "finalize"):
        namespace, rest = rest[1], rest[2:]
    plural = rest[0] if rest else None
    name = rest[1] if len(rest) > 1 else None
    subresource = "/".join(rest[2:]) or None
    return Target(group, version, plural, namespace, name, subresource)


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _json_response(obj: Any, status: int = 200) -> aiohttp.web.Response:
    return aiohttp.web.Response(body=_dumps(obj), status=status, content_type=JSON)


def _status_response(exc: kmock.KubernetesError) -> aiohttp.web.Response:
    return _json_response(errors.error_status(exc), exc.status)


@attrs.define(kw_only=True)
class KubeApiHandler(kmock.KubernetesScaffold):
    """Serves a `Store` over HTTP as the Kubernetes API does (see the package docstring)."""

    store: Store = attrs.field(factory=Store)
    faults: Faults = attrs.field(factory=Faults)
    history_size: int = 1000
    bookmark_interval: float = 5.0
    #: server-side cap on a watch's duration when the client sends no timeoutSeconds
    default_watch_timeout: float | None = None
    #: unexpected exceptions while serving (emulator bugs); tests assert this stays empty
    failures: list[BaseException] = attrs.field(factory=list)
    _count: int = attrs.field(default=0, init=False)
    _watches: set[Watcher] = attrs.field(factory=set, init=False)
    _stopping: bool = attrs.field(default=False, init=False)
    _refs: dict[tuple[str | None, str | None, str], kmock.resource] = attrs.field(
        factory=dict, init=False
    )

    def __attrs_post_init__(self) -> None:
        # No DSL fallbacks (they would be matched per request): we dispatch directly.
        # The request history is bounded: kmock's own list grows forever.
        self._requests = collections.deque(maxlen=self.history_size)  # type: ignore[assignment]
        self.store.listeners.append(self._sync_discovery)
        self._sync_discovery()

    # -- discovery ---------------------------------------------------------------------------

    def _sync_discovery(self) -> None:
        self.resources.clear()
        for spec in self.store.specs.values():
            self.resources[kmock.resource(spec.group, spec.version, spec.plural)] = (
                kmock.ResourceInfo(
                    namespaced=spec.namespaced,
                    kind=spec.kind,
                    singular=spec.singular or spec.kind.lower(),
                    verbs=set(VERBS),
                    shortnames=set(spec.short_names),
                    categories=set(spec.categories),
                    subresources=set(spec.subresources),
                )
            )

    async def _discovery(self, path: str, target: Target) -> Any:
        if path in ("/", ""):
            return await self._serve_root(rendering.Request())
        if path == "/version":
            return await self._serve_server_version(rendering.Request())
        if path == "/api":
            return await self._serve_api(rendering.Request())
        if path == "/apis":
            return await self._serve_apis(rendering.Request())
        if path in ("/healthz", "/livez", "/readyz"):
            return "ok"
        if target.group is None or (target.group == "" and target.version is None):
            raise errors.api_error(
                404, "NotFound", "the server could not find the requested resource"
            )
        request = rendering.Request(
            resource=kmock.resource(group=target.group, version=target.version)
        )
        if target.version is None:
            return await self._serve_group(request)
        document = await self._serve_version(request)
        assert isinstance(document, dict)
        for entry in document["resources"]:  # kmock gives subresources the resource's verbs
            if entry["name"].endswith("/status"):
                entry["verbs"] = ["get", "patch", "update"]
            elif entry["name"].endswith("/binding"):
                entry["verbs"] = ["create"]
            else:
                entry["verbs"] = sorted(entry["verbs"])
        return document

    # -- the entry point ---------------------------------------------------------------------

    async def __call__(self, raw: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        try:
            body = await raw.read()
            if raw.path.startswith(CONTROL_PREFIX):
                return self._control(raw, body)
            target = parse_target(raw.path)
            params = raw.query
            method = raw.method.upper()
            is_watch = method == "GET" and params.get("watch", "") in TRUE
            request = self._record(raw, target, body, is_watch)
            delay, failure = self.faults.take(method, raw.path_qs, is_watch)
            if delay:
                await asyncio.sleep(delay)
            if failure is not None:
                assert failure.status is not None
                exc = errors.api_error(failure.status, failure.reason, failure.message)
                if is_watch and failure.status == 410:
                    return await self._stream_gone(raw, exc.message or "Gone")
                return _status_response(exc)
            if self._payloads:  # reactions added through kmock's DSL take precedence
                try:
                    response: aiohttp.web.StreamResponse
                    response = await kmock.RawHandler._handle(self, request)
                    return response
                except NotImplementedError:
                    pass
            return await self._dispatch(raw, request, target, method, is_watch)
        except kmock.KubernetesError as exc:
            return _status_response(exc)
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as exc:
            logger.exception("emulator failure on %s %s", raw.method, raw.path_qs)
            self.failures.append(exc)
            return _status_response(errors.api_error(500, "InternalError", repr(exc)))

    def _control(self, raw: aiohttp.web.BaseRequest, body: bytes) -> aiohttp.web.Response:
        """Test hooks over HTTP, for an emulator in another process (see `process.py`).

        GET stats; POST drop-watches[?abort=true]; POST expire-watches[?drop=false];
        POST faults {status|delay, method, path, watch, times, reason, message}; DELETE faults.
        Not recorded in the history and not subject to faults.
        """
        action = raw.path.removeprefix(CONTROL_PREFIX).strip("/")
        method = raw.method.upper()
        if method == "GET" and action == "stats":
            return _json_response(
                {
                    "requests": self._count,
                    "history": len(self._requests),
                    "watches": len(self._watches),
                    "resourceVersion": self.store.rv,
                    "failures": [repr(exc) for exc in self.failures],
                }
            )
        if method == "POST" and action == "drop-watches":
            dropped = self.drop_watches(abort=raw.query.get("abort", "") in TRUE)
            return _json_response({"dropped": dropped})
        if method == "POST" and action == "expire-watches":
            self.store.expire()
            if raw.query.get("drop", "true") in TRUE:
                self.drop_watches()
            return _json_response({"resourceVersion": self.store.rv})
        if action == "faults" and method == "DELETE":
            self.faults.clear()
            return _json_response({})
        if action == "faults" and method == "POST":
            spec = json.loads(body or b"{}")
            match = {k: spec.get(k) for k in ("method", "path", "watch")}
            if spec.get("status") is not None:
                self.faults.fail(
                    int(spec["status"]),
                    times=spec.get("times", 1),
                    reason=spec.get("reason"),
                    message=spec.get("message"),
                    **match,
                )
            if spec.get("delay"):
                self.faults.delay(float(spec["delay"]), times=spec.get("times"), **match)
            return _json_response({"rules": len(self.faults.rules)})
        raise errors.api_error(404, "NotFound", f"no emulator control {method} {action!r}")

    def _record(
        self, raw: aiohttp.web.BaseRequest, target: Target, body: bytes, is_watch: bool
    ) -> rendering.Request:
        data: Any = None
        if body:
            try:
                data = json.loads(body)
            except ValueError as exc:
                raise errors.bad_request(f"the request body is not JSON: {exc}") from exc
        method = enums.method.guess(raw.method)
        action: enums.action | None = None
        if target.plural is not None:
            if is_watch:
                action = enums.action.WATCH
            elif target.name is None:
                action = {"GET": enums.action.LIST, "POST": enums.action.CREATE}.get(method)
            else:
                action = {
                    "GET": enums.action.FETCH,
                    "PATCH": enums.action.UPDATE,
                    "PUT": enums.action.UPDATE,
                    "DELETE": enums.action.DELETE,
                }.get(method)
        request = rendering.Request(
            id=self._count,
            method=method,
            url=raw.url,
            params=dict(raw.query),
            headers=dict(raw.headers),
            body=body,
            data=data,
            action=action,
            resource=self._resource_ref(target),
            namespace=target.namespace,
            name=target.name,
            subresource=target.subresource,
            raw_request=raw,
        )
        self._count += 1
        self._requests.append(request)
        return request

    def _resource_ref(self, target: Target) -> kmock.resource | None:
        """kmock's resource reference, cached (building one costs a Protocol isinstance)."""
        if target.plural is None:
            return None
        key = (target.group, target.version, target.plural)
        ref = self._refs.get(key)
        if ref is None:
            ref = self._refs[key] = kmock.resource(target.group, target.version, target.plural)
        return ref

    # -- dispatching -------------------------------------------------------------------------

    def _spec(self, target: Target) -> ResourceSpec:
        assert target.group is not None
        assert target.version is not None
        assert target.plural is not None
        spec = self.store.find_spec(target.group, target.version, target.plural)
        if spec is None:
            raise errors.api_error(
                404, "NotFound", "the server could not find the requested resource"
            )
        if target.namespace is not None and not spec.namespaced:
            raise errors.api_error(
                404, "NotFound", "the server could not find the requested resource"
            )
        return spec

    async def _dispatch(
        self,
        raw: aiohttp.web.BaseRequest,
        request: rendering.Request,
        target: Target,
        method: str,
        is_watch: bool,
    ) -> aiohttp.web.StreamResponse:
        if target.plural is None:
            if method != "GET":
                raise errors.api_error(405, "MethodNotAllowed", f"{method} is not allowed here")
            document = await self._discovery(raw.path, target)
            if isinstance(document, str):
                return aiohttp.web.Response(text=document)
            return _json_response(document)

        if (target.group, target.plural, method, target.name) == ("", "bindings", "POST", None):
            # The older form: POST namespaces/{ns}/bindings with the pod's name in the body.
            pod_name = ((request.data or {}).get("metadata") or {}).get("name")
            if not target.namespace or not pod_name:
                raise errors.bad_request("a Binding needs metadata.name and a namespace")
            self.store.bind(target.namespace, pod_name, request.data)
            return _json_response(errors.status_body(201), 201)
        spec = self._spec(target)
        store = self.store
        ns = target.namespace if spec.namespaced else None
        name = target.name
        sub = target.subresource
        params = raw.query
        data = request.data

        if sub not in (None, *spec.subresources):
            raise errors.api_error(
                404, "NotFound", "the server could not find the requested resource"
            )
        if sub == "binding" and method != "POST":
            raise errors.api_error(
                405, "MethodNotAllowed", f"{method} is not allowed on {raw.path}"
            )
        if method == "GET":
            selector = Selector.parse(
                params.get("labelSelector"),
                params.get("fieldSelector"),
                spec.fields,
            )
            if name is not None and is_watch:  # watching one object, the old way
                selector = Selector(
                    selector.labels,
                    (*selector.fields, *Selector.parse(None, f"metadata.name={name}").fields),
                )
            if is_watch:
                return await self._watch(raw, spec, ns, selector)
            if name is None:
                return _json_response(self._list(spec, ns, selector, params))
            return _json_response(store.get(spec, ns, name))
        if method == "POST":
            if name is None:
                return _json_response(store.create(spec, ns, data), 201)
            if sub == "binding" and spec is PODS:
                assert ns is not None
                store.bind(ns, name, data)
                return _json_response(errors.status_body(201), 201)
            raise errors.api_error(405, "MethodNotAllowed", f"POST is not allowed on {raw.path}")
        if name is None:
            if method == "DELETE":
                return _json_response(self._delete_collection(spec, ns, params))
            raise errors.api_error(405, "MethodNotAllowed", f"{method} is not allowed on lists")
        status_only = sub == "status"
        if method == "PUT":
            return _json_response(store.replace(spec, ns, name, data, status_only=status_only))
        if method == "PATCH":
            content_type = raw.headers.get("Content-Type", JSON)
            return _json_response(
                store.patch(spec, ns, name, content_type, data, status_only=status_only)
            )
        if method == "DELETE" and sub is None:
            return _json_response(store.delete(spec, ns, name, data))
        raise errors.api_error(405, "MethodNotAllowed", f"{method} is not allowed on {raw.path}")

    def _list(
        self, spec: ResourceSpec, ns: str | None, selector: Selector, params: Any
    ) -> dict[str, Any]:
        matcher = compile_matcher(selector)
        rv = self.store.rv
        items = list(self.store.iter_objects(spec, ns, matcher))
        metadata: dict[str, Any] = {"resourceVersion": str(rv)}
        limit = int(params.get("limit") or 0)
        token = params.get("continue")
        if limit > 0 or token:
            items.sort(key=lambda o: (o["metadata"].get("namespace") or "", o["metadata"]["name"]))
            start = 0
            if token:
                try:
                    state = json.loads(base64.urlsafe_b64decode(token.encode()))
                    start, rv = int(state["start"]), int(state["rv"])
                except (ValueError, KeyError, TypeError) as exc:
                    raise errors.bad_request("invalid continue token") from exc
                metadata["resourceVersion"] = str(rv)
            end = start + limit if limit > 0 else len(items)
            if end < len(items):
                state_bytes = json.dumps({"start": end, "rv": rv}).encode()
                metadata["continue"] = base64.urlsafe_b64encode(state_bytes).decode()
                metadata["remainingItemCount"] = len(items) - end
            items = items[start:end]
        return {
            "kind": spec.list_kind,
            "apiVersion": spec.api_version,
            "metadata": metadata,
            "items": items,
        }

    def _delete_collection(self, spec: ResourceSpec, ns: str | None, params: Any) -> Obj:
        selector = Selector.parse(
            params.get("labelSelector"), params.get("fieldSelector"), spec.fields
        )
        matcher = compile_matcher(selector)
        doomed = list(self.store.iter_objects(spec, ns, matcher))
        items = [
            self.store.delete(spec, o["metadata"].get("namespace"), o["metadata"]["name"])
            for o in doomed
        ]
        return {
            "kind": spec.list_kind,
            "apiVersion": spec.api_version,
            "metadata": {"resourceVersion": str(self.store.rv)},
            "items": items,
        }

    # -- watching ----------------------------------------------------------------------------

    async def _stream_gone(
        self, raw: aiohttp.web.BaseRequest, message: str
    ) -> aiohttp.web.StreamResponse:
        response = aiohttp.web.StreamResponse(status=200, headers={"Content-Type": JSON})
        await response.prepare(raw)
        status = errors.status_body(410, "Expired", message)
        await response.write(_dumps({"type": "ERROR", "object": status}) + b"\n")
        await response.write_eof()
        return response

    @staticmethod
    def _line(type_: str, event: Event) -> bytes:
        return b'{"type":"' + type_.encode() + b'","object":' + event.raw_object() + b"}\n"

    @staticmethod
    def _translate(event: Event, ns: str | None, selector: Selector) -> str | None:
        """The event type this watch sees, or None; selector changes become ADDED/DELETED."""
        if ns is not None and event.namespace != ns:
            return None
        if not selector:
            return event.type
        if event.type == "ADDED":
            return "ADDED" if selector.matches(event.obj) else None
        if event.type == "DELETED":
            return "DELETED" if selector.matches(event.old or event.obj) else None
        now = selector.matches(event.obj)
        before = event.old is not None and selector.matches(event.old)
        if now and before:
            return "MODIFIED"
        if now:
            return "ADDED"
        if before:
            return "DELETED"
        return None

    def _bookmark(self, spec: ResourceSpec, initial_end: bool = False) -> bytes:
        metadata: dict[str, Any] = {"resourceVersion": str(self.store.rv)}
        if initial_end:
            metadata["annotations"] = {"k8s.io/initial-events-end": "true"}
        obj = {"kind": spec.kind, "apiVersion": spec.api_version, "metadata": metadata}
        return _dumps({"type": "BOOKMARK", "object": obj}) + b"\n"

    async def _watch(
        self,
        raw: aiohttp.web.BaseRequest,
        spec: ResourceSpec,
        ns: str | None,
        selector: Selector,
    ) -> aiohttp.web.StreamResponse:
        params = raw.query
        since = params.get("resourceVersion", "")
        bookmarks = params.get("allowWatchBookmarks", "") in TRUE
        send_initial = params.get("sendInitialEvents", "") in TRUE
        timeout: float | None = self.default_watch_timeout
        if params.get("timeoutSeconds"):
            try:
                timeout = float(params["timeoutSeconds"])
            except ValueError as exc:
                raise errors.bad_request("invalid timeoutSeconds") from exc
        matcher = compile_matcher(selector)

        # No awaits from the snapshot until the watcher is registered: nothing slips between.
        initial: list[bytes] = []
        if send_initial or since in ("", "0"):
            for obj in self.store.iter_objects(spec, ns, matcher):
                event = Event(int(obj["metadata"]["resourceVersion"]), spec.key, "ADDED", obj, None)
                initial.append(self._line("ADDED", event))
        else:
            try:
                since_rv = int(since)
            except ValueError as exc:
                raise errors.bad_request(f"invalid resourceVersion: {since!r}") from exc
            try:
                replay = self.store.events_since(spec.key, since_rv)
            except Gone as exc:
                return await self._stream_gone(raw, str(exc))
            for event in replay:
                type_ = self._translate(event, ns, selector)
                if type_ is not None:
                    initial.append(self._line(type_, event))
        if send_initial and bookmarks:
            initial.append(self._bookmark(spec, initial_end=True))
        watcher = self.store.add_watcher(spec.key)
        self._watches.add(watcher)
        try:
            response = aiohttp.web.StreamResponse(
                status=200, headers={"Content-Type": JSON, "Cache-Control": "no-cache"}
            )
            await response.prepare(raw)
            try:
                if initial:
                    await response.write(b"".join(initial))
                await self._pump(raw, response, watcher, spec, ns, selector, timeout, bookmarks)
            except (ConnectionError, RuntimeError):  # the client went away mid-write
                pass
            return response
        finally:
            self.store.remove_watcher(watcher)
            self._watches.discard(watcher)

    async def _pump(
        self,
        raw: aiohttp.web.BaseRequest,
        response: aiohttp.web.StreamResponse,
        watcher: Watcher,
        spec: ResourceSpec,
        ns: str | None,
        selector: Selector,
        timeout: float | None,
        bookmarks: bool,
    ) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout if timeout is not None else math.inf
        next_bookmark = loop.time() + self.bookmark_interval
        queue = watcher.queue
        while not self._stopping:
            now = loop.time()
            if now >= deadline:
                break
            if raw.transport is None or raw.transport.is_closing():
                return  # the client went away
            if bookmarks and now >= next_bookmark and queue.empty():
                await response.write(self._bookmark(spec))
                next_bookmark = now + self.bookmark_interval
            wait = min(deadline - now, 1.0)
            if bookmarks:
                wait = min(wait, max(next_bookmark - now, 0.0))
            item: Event | str
            if queue.empty():
                try:
                    item = await asyncio.wait_for(queue.get(), timeout=max(wait, 0.001))
                except TimeoutError:
                    continue
            else:
                item = queue.get_nowait()
            chunk: list[bytes] = []
            control: str | None = None
            while True:  # drain what is queued into one write
                if isinstance(item, str):
                    control = item
                    break
                type_ = self._translate(item, ns, selector)
                if type_ is not None:
                    chunk.append(self._line(type_, item))
                if queue.empty():
                    break
                item = queue.get_nowait()
            if chunk:
                await response.write(b"".join(chunk))
            if control == _ABORT:
                if raw.transport is not None:
                    raw.transport.abort()
                return
            if control == _EOF:
                break
        await response.write_eof()

    def drop_watches(self, *, abort: bool = False) -> int:
        """End every open watch stream now (cleanly, or by cutting the connection)."""
        for watcher in list(self._watches):
            watcher.close(abort=abort)
        return len(self._watches)

    def stop_watches(self) -> None:
        self._stopping = True
        self.drop_watches()

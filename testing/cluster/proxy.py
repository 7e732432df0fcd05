"""A fault-injecting reverse proxy on 127.0.0.1 between a client (the operator) and the real
kube-apiserver.

It speaks plain HTTP to its client and HTTPS to the API server, passing the client's bearer
token through, so what the server allows or refuses is exactly what it would for the client.
The rules are the emulator's (`testing.apiserver.faults`: failing answers with a v1
Status, added latency), plus what only a proxy in front of a real server can do:

- `lose(...)`: the request reaches the server and is applied, then the client's connection is
  cut before the answer (a bind committed after the client gave up);
- `drop(...)`: the connection is cut before the request is forwarded;
- `before(action, ...)`: ``action`` runs (it may write to the server itself) before the
  request is forwarded: another client's write landing between this client's read and its
  write, so that the server answers it with a real 409 Conflict;
- `drop_watches()` ends every open watch stream; `silence_watches()` keeps them open but
  forwards nothing more; `expire_watches()` makes every watch that resumes from an older
  resourceVersion get the real server's 410 ERROR event.

Everything runs on the proxy's own thread and event loop; the hooks are thread-safe. Requests
are counted and logged (`requests`) so a test can say what a client sent.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import ssl
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar
from urllib.parse import parse_qs, urlsplit

import aiohttp
from aiohttp import web

from testing.apiserver.faults import FaultRule, Faults

T = TypeVar("T")
HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailers",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
    "content-encoding",
}


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    watch: bool

    @property
    def name(self) -> str | None:
        """The object's name in the path (``p`` of ``…/namespaces/ns/pods/p/binding``)."""
        parts = urlsplit(self.path).path.strip("/").split("/")
        start = 2 if parts[:1] == ["api"] else 3  # /api/v1/… or /apis/group/version/…
        if parts[start : start + 1] == ["namespaces"] and len(parts) > start + 2:
            start += 2
        return parts[start + 1] if len(parts) > start + 1 else None


class ProxyFaults(Faults):
    """The emulator's rules plus connection cuts before (`drop`) or after (`lose`) the server."""

    def __init__(self) -> None:
        super().__init__()
        self._cuts: list[tuple[str, FaultRule]] = []
        self._actions: list[tuple[Callable[[], object], FaultRule]] = []

    def before(
        self,
        action: Callable[[], object],
        *,
        method: str | None = None,
        path: str | None = None,
        times: int | None = 1,
    ) -> FaultRule:
        """Run ``action`` (on a worker thread) when a matching request arrives, then forward
        the request."""
        rule = FaultRule(
            method=method.upper() if method else None,
            path=re.compile(path) if path else None,
            times=times,
        )
        with self._lock:
            self._actions.append((action, rule))
        return rule

    def take_action(self, method: str, target: str, is_watch: bool) -> Callable[[], object] | None:
        with self._lock:
            for action, rule in self._actions:
                if not rule.exhausted and rule.matches(method, target, is_watch):
                    rule.hits += 1
                    self._actions = [(a, r) for a, r in self._actions if not r.exhausted]
                    return action
        return None

    def lose(
        self, *, method: str | None = None, path: str | None = None, times: int | None = 1
    ) -> FaultRule:
        """Forward matching requests, let the server apply them, then cut the connection."""
        return self._cut("lose", method, path, times)

    def drop(
        self, *, method: str | None = None, path: str | None = None, times: int | None = 1
    ) -> FaultRule:
        """Cut matching requests' connections before anything reaches the server."""
        return self._cut("drop", method, path, times)

    def _cut(self, kind: str, method: str | None, path: str | None, times: int | None) -> FaultRule:
        rule = FaultRule(
            method=method.upper() if method else None,
            path=re.compile(path) if path else None,
            times=times,
        )
        with self._lock:
            self._cuts.append((kind, rule))
        return rule

    def take_cut(self, method: str, target: str, is_watch: bool) -> str | None:
        with self._lock:
            for kind, rule in self._cuts:
                if not rule.exhausted and rule.matches(method, target, is_watch):
                    rule.hits += 1
                    self._cuts = [(k, r) for k, r in self._cuts if not r.exhausted]
                    return kind
        return None

    def clear(self) -> None:
        super().clear()
        with self._lock:
            self._cuts.clear()
            self._actions.clear()


@dataclass(eq=False)
class _Watch:
    response: web.StreamResponse
    request: web.BaseRequest
    silenced: asyncio.Event = field(default_factory=asyncio.Event)
    ended: asyncio.Event = field(default_factory=asyncio.Event)


def _status_body(code: int, reason: str | None, message: str | None) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message or f"injected fault: {code}",
        "reason": reason or ("Expired" if code == 410 else "InternalError"),
        "code": code,
    }


def _is_watch(query: dict[str, list[str]]) -> bool:
    return query.get("watch", ["false"])[0] in ("true", "1")


class FaultProxy:
    """`FaultProxy(upstream, ca).start()`; `url`, `faults`, `requests`, `stop()`."""

    def __init__(self, upstream: str, ca: Path, *, seed: int | None = None) -> None:
        self.upstream = upstream.rstrip("/")
        self.ca = ca
        self.faults = ProxyFaults()
        self.random = random.Random(seed)
        self._requests: list[Request] = []
        self.forbidden: list[Request] = []
        """Requests the API server answered 403: RBAC refused the client something."""
        self._lock = threading.Lock()
        self._watches: set[_Watch] = set()
        self._expired_below = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stopping: asyncio.Event | None = None
        self._port = 0
        self._error: BaseException | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self, timeout: float = 10.0) -> Self:
        self._thread = threading.Thread(target=self._run, name="fault-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError("the fault proxy did not start")
        if self._error is not None:
            raise self._error
        return self

    def stop(self, timeout: float = 10.0) -> None:
        if self._loop is not None and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        if self._thread is not None:
            self._thread.join(timeout)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as error:
            self._error = error
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        context = ssl.create_default_context(cafile=str(self.ca))
        connector = aiohttp.TCPConnector(ssl=context, limit=0)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=5)
        # Nothing compressed upstream: a gzip-encoded watch would sit in the decompressor until
        # a block fills, holding small events back (a watch that looks silent).
        async with aiohttp.ClientSession(
            connector=connector,
            timeout=timeout,
            auto_decompress=True,
            skip_auto_headers=("Accept-Encoding",),
        ) as session:
            self._session = session
            server = web.Server(self._handle, access_log=None)
            runner = web.ServerRunner(server, handle_signals=False, shutdown_timeout=0.5)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            sockets = site._server.sockets if site._server else []  # type: ignore[union-attr]
            self._port = sockets[0].getsockname()[1]
            self._ready.set()
            await self._stopping.wait()
            for watch in list(self._watches):
                watch.ended.set()
            await runner.cleanup()

    # -- hooks (any thread) --------------------------------------------------------------------

    def call(self, fn: Callable[[], T | Awaitable[T]], timeout: float = 10.0) -> T:
        assert self._loop is not None

        async def run() -> T:
            result = fn()
            if asyncio.iscoroutine(result) or isinstance(result, Awaitable):
                return await result  # type: ignore[no-any-return]
            return result  # type: ignore[return-value]

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout)

    @property
    def request_count(self) -> int:
        with self._lock:
            return len(self._requests)

    def requests(self) -> list[Request]:
        with self._lock:
            return list(self._requests)

    def forget_requests(self) -> None:
        """Start the request log (and `request_count`) afresh."""
        with self._lock:
            self._requests.clear()

    @property
    def watch_count(self) -> int:
        return self.call(lambda: len(self._watches))

    def drop_watches(self, *, abort: bool = False) -> int:
        """End every open watch stream now (`abort`: cut the TCP connection instead)."""

        def drop() -> int:
            watches = list(self._watches)
            for watch in watches:
                transport = watch.request.transport
                if abort and transport is not None:
                    transport.abort()
                watch.ended.set()
            return len(watches)

        return self.call(drop)

    def silence_watches(self) -> int:
        """Keep every open watch stream open, but forward nothing more on it."""

        def silence() -> int:
            for watch in self._watches:
                watch.silenced.set()
            return len(self._watches)

        return self.call(silence)

    def expire_watches(self, resource_version: int, *, drop: bool = True) -> None:
        """Watches resuming from a resourceVersion below `resource_version` get 410 Gone."""
        self._expired_below = resource_version
        if drop:
            self.drop_watches()

    # -- the proxy -----------------------------------------------------------------------------

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        query = parse_qs(urlsplit(request.path_qs).query)
        watch = _is_watch(query)
        method = request.method.upper()
        target = request.path_qs
        try:
            body = await request.read()
        except (ConnectionError, aiohttp.ClientError, asyncio.IncompleteReadError):
            body = None
        announced = request.content_length
        if body is None or (announced is not None and len(body) < announced):
            # The client stopped before its body was whole (a fenced write ends so): nothing
            # a server could act on arrived, so nothing is forwarded or counted.
            return self._cut(request)
        with self._lock:
            self._requests.append(Request(method, target, watch))
        action = self.faults.take_action(method, target, watch)
        if action is not None:
            await asyncio.to_thread(action)
        delay, failure = self.faults.take(method, target, watch)
        if delay:
            await asyncio.sleep(delay)
        cut = self.faults.take_cut(method, target, watch)
        if cut == "drop":
            return self._cut(request)
        if failure is not None and failure.status is not None:
            return await self._fail(request, failure, watch)
        if watch and self._is_expired(query):
            return await self._expired(request)
        return await self._forward(request, body, watch, lose=cut == "lose")

    def _is_expired(self, query: dict[str, list[str]]) -> bool:
        version = query.get("resourceVersion", [""])[0]
        return version.isdigit() and 0 < int(version) < self._expired_below

    @staticmethod
    def _cut(request: web.BaseRequest) -> web.StreamResponse:
        if request.transport is not None:
            request.transport.abort()
        return web.Response(status=502)

    async def _fail(
        self, request: web.BaseRequest, rule: FaultRule, watch: bool
    ) -> web.StreamResponse:
        assert rule.status is not None
        if watch and rule.status == 410:
            return await self._expired(request)
        body = _status_body(rule.status, rule.reason, rule.message)
        return web.json_response(body, status=rule.status)

    @staticmethod
    async def _expired(request: web.BaseRequest) -> web.StreamResponse:
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        await response.prepare(request)
        event = {
            "type": "ERROR",
            "object": _status_body(410, "Expired", "too old resource version"),
        }
        await response.write(json.dumps(event).encode() + b"\n")
        await response.write_eof()
        return response

    async def _forward(
        self, request: web.BaseRequest, body: bytes, watch: bool, *, lose: bool
    ) -> web.StreamResponse:
        headers = {
            k: v
            for k, v in request.headers.items()
            if k.lower() not in HOP_BY_HOP and k.lower() != "accept-encoding"
        }
        async with self._session.request(
            request.method,
            self.upstream + request.path_qs,
            headers=headers,
            data=body or None,
            allow_redirects=False,
        ) as upstream:
            if upstream.status == 403:
                with self._lock:
                    self.forbidden.append(Request(request.method, request.path_qs, watch))
            if lose:
                await upstream.read()
                return self._cut(request)
            answer_headers = {
                k: v for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP
            }
            if not watch:
                payload = await upstream.read()
                return web.Response(status=upstream.status, body=payload, headers=answer_headers)
            return await self._stream(request, upstream, answer_headers)

    async def _stream(
        self,
        request: web.BaseRequest,
        upstream: aiohttp.ClientResponse,
        headers: dict[str, str],
    ) -> web.StreamResponse:
        response = web.StreamResponse(status=upstream.status, headers=headers)
        try:
            await response.prepare(request)
        except (ConnectionError, aiohttp.ClientError):
            return response  # the client went away before the answer began (it is stopping)
        watch = _Watch(response, request)
        self._watches.add(watch)
        try:
            await self._pump(upstream, watch)
            await response.write_eof()
        except (ConnectionError, aiohttp.ClientError):
            pass  # the client went away, or the stream was cut on purpose
        finally:
            self._watches.discard(watch)
        return response

    @staticmethod
    async def _pump(upstream: aiohttp.ClientResponse, watch: _Watch) -> None:
        ended = asyncio.ensure_future(watch.ended.wait())
        try:
            while True:
                chunk = asyncio.ensure_future(upstream.content.readany())
                done, _ = await asyncio.wait({chunk, ended}, return_when=asyncio.FIRST_COMPLETED)
                if ended in done:
                    chunk.cancel()
                    return
                data = chunk.result()
                if not data:
                    return
                if not watch.silenced.is_set():
                    await watch.response.write(data)
        finally:
            ended.cancel()

"""`ApiServer`: the emulator on 127.0.0.1, on a free port, in its own thread and event loop."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import copy
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

import aiohttp.test_utils
import aiohttp.web
import aiohttp.web_server
import kmock
import yaml
from kmock._internal import rendering

from .faults import Faults
from .handler import KubeApiHandler
from .resources import CRDS, OUR_CRDS, ResourceSpec, crd_manifest
from .store import Obj, Store

T = TypeVar("T")


class _LoopbackServer(kmock.Server):
    """kmock's Server without its DNS interceptor.

    The interceptor patches aiohttp's resolver process-wide and must be exited in LIFO
    order, which two emulators in different threads cannot promise; clients here always
    use the 127.0.0.1 URL, so nothing needs intercepting.
    """

    async def __aenter__(self) -> Self:
        if self._managed_server is not None or self._managed_client is not None:
            raise RuntimeError("The server can be started/entered only once.")
        self._managed_server = self._server_cls(self.handler, host=self._host, port=self._port)
        await self._managed_server.__aenter__()
        self._managed_client = self._client_fct(self._managed_server.make_url("/"))
        await self._managed_client.__aenter__()
        self.handler.servers.append(self)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.handler.servers.remove(self)
        client, server = self._managed_client, self._managed_server
        self._managed_client = self._managed_server = None
        try:
            if client is not None:
                await client.__aexit__(exc_type, exc, tb)
        finally:
            if server is not None:
                await server.__aexit__(exc_type, exc, tb)


class _QuietTestServer(aiohttp.test_utils.RawTestServer):
    """kmock's default server class without access logs and with a short shutdown."""

    async def _make_runner(self, debug: bool = True, **kwargs: Any) -> aiohttp.web.ServerRunner:
        server = aiohttp.web_server.Server(
            self._handler, loop=self._loop, debug=False, access_log=None, **kwargs
        )
        return aiohttp.web.ServerRunner(server, shutdown_timeout=2.0)


HOST = "127.0.0.1"
TOKEN = "emulator-token"


class ApiServer:
    """A Kubernetes API emulator for one test. Start it, point clients at `url`, `stop()` it.

    All state lives on the server's own loop; `call()` runs a function there from any
    thread. `faults` can be changed from any thread.
    """

    def __init__(
        self,
        *,
        history_size: int = 1000,
        event_log_size: int = 10_000,
        bookmark_interval: float = 5.0,
        default_watch_timeout: float | None = None,
        crds: bool = False,
        port: int = 0,
    ) -> None:
        self.port = port
        self.faults = Faults()
        self.store = Store(event_log_size=event_log_size)
        self.handler = KubeApiHandler(
            store=self.store,
            faults=self.faults,
            history_size=history_size,
            bookmark_interval=bookmark_interval,
            default_watch_timeout=default_watch_timeout,
        )
        self._install_crds = crds
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._url: str | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self, timeout: float = 10.0) -> Self:
        if self._thread is not None:
            raise RuntimeError("the emulator is already started")
        self._thread = threading.Thread(target=self._run, name="apiserver-emulator", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError("the API emulator did not start in time")
        if self._error is not None:
            raise RuntimeError("the API emulator failed to start") from self._error
        if self._install_crds:
            self.install_crds()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Close every watch, stop serving, join the thread. Idempotent."""
        loop, stop_event, thread = self._loop, self._stop_event, self._thread
        if thread is None or loop is None or stop_event is None:
            return
        if not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop has just closed
                loop.call_soon_threadsafe(stop_event.set)
        thread.join(timeout)
        if thread.is_alive():
            raise TimeoutError("the API emulator did not stop in time")
        self._thread = None
        if self._error is not None:
            raise RuntimeError("the API emulator failed while serving") from self._error

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        except BaseException as exc:
            self._error = exc
        finally:
            self._ready.set()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _serve(self) -> None:
        self._stop_event = asyncio.Event()
        async with (
            self.handler,
            _LoopbackServer(
                self.handler,
                host=HOST,
                port=self.port or None,
                server_cls=_QuietTestServer,
                user_agent="",
            ) as server,
        ):
            self._url = str(server.url).rstrip("/")
            self._ready.set()
            await self._stop_event.wait()
            self.handler.stop_watches()
            for _ in range(200):  # let the open watch streams end by themselves (≤ 2 s)
                if not self.handler._watches:
                    break
                await asyncio.sleep(0.01)

    @property
    def url(self) -> str:
        if self._url is None:
            raise RuntimeError("the API emulator is not started")
        return self._url

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # -- running code on the server's loop ---------------------------------------------------

    def call(self, fn: Callable[[], T | Awaitable[T]], timeout: float = 10.0) -> T:
        """Run `fn()` (sync, or returning an awaitable) on the server loop; return its result."""
        loop = self._loop
        if loop is None or not self.running:
            raise RuntimeError("the API emulator is not running")

        async def runner() -> T:
            result = fn()
            if isinstance(result, Awaitable):
                return await result
            return result

        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(runner(), loop)
        return future.result(timeout)

    # -- inspection --------------------------------------------------------------------------

    @property
    def failures(self) -> list[BaseException]:
        """Unexpected exceptions inside the emulator (should stay empty)."""
        return list(self.handler.failures)

    @property
    def request_count(self) -> int:
        """Requests served since start (the history keeps only the last `history_size`)."""
        return self.handler._count

    def requests(self) -> list[rendering.Request]:
        """A copy of the bounded request history (kmock Request objects), oldest first."""
        return self.call(lambda: list(self.handler._requests))

    def history_length(self) -> int:
        return self.call(lambda: len(self.handler._requests))

    @property
    def resource_version(self) -> int:
        return self.store.rv

    def objects(self, plural: str, group: str = "", namespace: str | None = None) -> list[Obj]:
        """Deep copies of the stored objects of one resource (all namespaces by default)."""

        def collect() -> list[Obj]:
            items = self.store.objects.get((group, plural), {})
            return [
                copy.deepcopy(obj)
                for (ns, _), obj in items.items()
                if namespace is None or ns == namespace
            ]

        return self.call(collect)

    def get_object(
        self, plural: str, name: str, namespace: str | None = None, group: str = ""
    ) -> Obj | None:
        def find() -> Obj | None:
            obj = self.store.objects.get((group, plural), {}).get((namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

        return self.call(find)

    def watch_count(self) -> int:
        return self.call(lambda: len(self.handler._watches))

    # -- fault injection ---------------------------------------------------------------------

    def drop_watches(self, *, abort: bool = False) -> int:
        """End all open watch streams now (abort=True cuts the TCP connection instead)."""
        return self.call(lambda: self.handler.drop_watches(abort=abort))

    def expire_watches(self, *, drop: bool = True) -> None:
        """Forget the event log: a watch from any older resourceVersion gets 410 Gone.

        With `drop`, open watches are also ended, so that their clients reconnect (and meet
        the 410 if they resume from their last resourceVersion).
        """

        def expire() -> None:
            self.store.expire()
            if drop:
                self.handler.drop_watches()

        self.call(expire)

    # -- setup helpers -----------------------------------------------------------------------

    def install_crds(self, specs: tuple[ResourceSpec, ...] = OUR_CRDS) -> list[Obj]:
        """Create the CRDs of `specs` (ours by default) so that they are served and discovered."""

        def create() -> list[Obj]:
            created = []
            for spec in specs:
                if self.store.find_spec(spec.group, spec.version, spec.plural) is None:
                    created.append(self.store.create(CRDS, None, crd_manifest(spec)))
            return created

        return self.call(create)

    def kubeconfig(self, namespace: str = "default") -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "emulator", "cluster": {"server": self.url}}],
            "users": [{"name": "emulator", "user": {"token": TOKEN}}],
            "contexts": [
                {
                    "name": "emulator",
                    "context": {"cluster": "emulator", "user": "emulator", "namespace": namespace},
                }
            ],
            "current-context": "emulator",
        }

    def write_kubeconfig(self, path: str | Path, namespace: str = "default") -> Path:
        path = Path(path)
        path.write_text(yaml.safe_dump(self.kubeconfig(namespace)))
        return path

    def register_kopf_login(self, registry: Any = None, namespace: str = "default") -> Any:
        """Register a `@kopf.on.login()` handler for this emulator (in `registry`, else
        Kopf's default registry); returns the handler."""
        import kopf

        def login(**_: Any) -> kopf.ConnectionInfo:
            info: kopf.ConnectionInfo = self.connection_info(namespace)
            return info

        if registry is None:
            return kopf.on.login()(login)
        return kopf.on.login(registry=registry)(login)

    def connection_info(self, namespace: str = "default") -> Any:
        """A `kopf.ConnectionInfo` for this emulator (for a `@kopf.on.login()` handler)."""
        import kopf

        return kopf.ConnectionInfo(
            server=self.url, scheme="Bearer", token=TOKEN, default_namespace=namespace
        )

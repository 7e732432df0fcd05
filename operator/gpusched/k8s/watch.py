"""The operator's watches: each kind listed, then watched from the list's resourceVersion,
forever, with every event handed to one handler in the order the server sent them.

Kopf runs the operator (start, stop, credentials, its liveness probe), but the watches are
ours, through kubernetes_asyncio's session. Kopf ends the whole operator when a watch fails
with an API error it does not retry itself (a 404 while a CRD is re-installed, a 403 while
RBAC is re-applied, a 5xx), and its per-object processing cost more than twice our handlers'
own work per pod event; none of it does anything for handlers that only take events in.

One `Watch` per kind:

1. **List**, page by page (`KubeClusterApi.pages`' paging: one page decoded at a time). Each
   object is handed over as an event of type ``None``: a list never says what was deleted
   meanwhile, which the scheduler reconciles (`gpusched.scheduler.resync`).
2. **Watch** from the list's resourceVersion, with bookmarks: a bookmark moves the
   resourceVersion on without an event, so a watch the server ends after `SERVER_TIMEOUT_SECONDS`
   (or a dropped connection) starts again from where it was, without a list.
3. **410 Gone** (the resourceVersion is older than the server keeps): list again, at once.
4. **Refused** (any other error status, on the list or the watch): the kind is down in
   `Readiness` (``/readyz`` answers 503 naming it), and the watch starts over from a list after
   a backoff (`BACKOFF_SECONDS`). It is up again when a watch request is answered 200.
5. **No answer** (a connection lost or timed out): the watch starts again from its
   resourceVersion after the same backoff, without counting the kind down.

A handler's error is logged and the event dropped; the watch goes on.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from kubernetes_asyncio import client

from gpusched.k8s.client import KubeClusterApi
from gpusched.scheduler.ports import ApiError

logger = logging.getLogger(__name__)

BACKOFF_SECONDS = (1.0, 30.0)
"""A failed watch starts over after the first delay, doubling up to the second, and back to
the first once a watch request is answered again."""
SERVER_TIMEOUT_SECONDS = 300
"""How long the server keeps one watch request open (``timeoutSeconds``); it then ends it and
the watch starts again from its resourceVersion."""
CLIENT_TIMEOUT_SECONDS = 330.0
"""How long a watch request may stay open on our side: past the server's timeout, a
connection that went silent is given up and started again."""
STREAK = 100
"""Events handled before the event loop runs something else: a burst read in one piece (a
list of 15,000 pods) must not hold the scheduling loop back."""

Event = Mapping[str, Any]
"""``{"type": "ADDED" | "MODIFIED" | "DELETED" | None, "object": body}``; None for an object
of a list."""
Handler = Callable[[Event], Awaitable[None]]


@dataclass(frozen=True)
class Kind:
    """A kind the operator watches cluster-wide."""

    group: str
    version: str
    plural: str
    kind: str

    @property
    def path(self) -> str:
        return f"{self.group_version}/{self.plural}"

    @property
    def group_version(self) -> str:
        """The discovery path of the kind's API group and version."""
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    @property
    def name(self) -> str:
        """``plural.group`` (``pods`` for the core group), as ``/readyz`` names it."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


@dataclass
class Readiness:
    """Which kinds' watches are down now, and why."""

    down: dict[str, str] = field(default_factory=dict)
    """Kind (``plural.group``) → the error its watch failed with."""

    @property
    def ready(self) -> bool:
        return not self.down

    def report(self) -> str:
        """One line for ``/readyz``."""
        if not self.down:
            return "ready: every watch is up"
        return "not ready: watch down: " + "; ".join(
            f"{name} ({error})" for name, error in sorted(self.down.items())
        )


async def served(api: KubeClusterApi, kinds: Sequence[Kind]) -> list[Kind]:
    """The kinds of ``kinds`` the server serves now: a cluster without DRA's or our CRDs'
    API is not watched for them, and not counted unready for ever (as Kopf left a resource
    it did not find unwatched). A kind served later is watched from then on
    (`gpusched.handlers.discovery`); one that goes away while watched is down on ``/readyz``
    until it is back."""
    paths = list(dict.fromkeys(kind.group_version for kind in kinds))
    # All at once: one round trip each, in sequence, was a visible part of start-up.
    plurals = dict(zip(paths, await asyncio.gather(*map(api.served, paths)), strict=True))
    found = [kind for kind in kinds if kind.plural in plurals[kind.group_version]]
    for kind in kinds:
        if kind not in found:
            logger.warning("the API server does not serve %s: not watched", kind.name)
    return found


class GoneError(Exception):
    """The watch's resourceVersion is older than the server keeps (410): list again."""


class DroppedError(Exception):
    """The watch's connection was lost or went silent: watch again from its resourceVersion."""


class Watch:
    """The list and watch of one kind, feeding ``handler`` (see the module's note)."""

    def __init__(
        self,
        api: KubeClusterApi,
        kind: Kind,
        handler: Handler,
        readiness: Readiness,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        backoff: tuple[float, float] = BACKOFF_SECONDS,
        server_timeout: int = SERVER_TIMEOUT_SECONDS,
        client_timeout: float = CLIENT_TIMEOUT_SECONDS,
    ) -> None:
        self.api = api
        self.kind = kind
        self.handler = handler
        self.readiness = readiness
        self.sleep = sleep
        self.backoff = backoff
        self.server_timeout = server_timeout
        self.client_timeout = client_timeout
        self.version = ""
        """The resourceVersion the next watch request starts from ("" before a list)."""
        self.lists = 0
        """Lists made so far (the first, and one after each 410 or refusal)."""
        self._streak = 0
        self._delay = backoff[0]

    async def run(self) -> None:
        """Lists and watches until cancelled."""
        while True:
            try:
                if not self.version:
                    await self._list()
                await self._watch()
                continue  # the server ended the watch: again from the resourceVersion
            except GoneError:
                logger.info("the watch of %s is too old (410): listing again", self.kind.name)
                self.version = ""
                continue
            except ApiError as error:
                if error.status:
                    self._refused(error)
                else:  # no answer from the server (a list's request)
                    self._dropped(error.message)
            except DroppedError as error:
                self._dropped(str(error))
            await self.sleep(self._delay)
            self._delay = min(self._delay * 2, self.backoff[1])

    def _refused(self, error: ApiError) -> None:
        self.version = ""
        self.readiness.down[self.kind.name] = f"{error.status}: {error.message}"
        logger.warning(
            "the watch of %s failed (%s: %s); starting it over in %.0f s",
            self.kind.name,
            error.status,
            error.message,
            self._delay,
        )

    def _dropped(self, why: str) -> None:
        logger.info(
            "the watch of %s was dropped (%s); again in %.0f s", self.kind.name, why, self._delay
        )

    async def _list(self) -> None:
        self.lists += 1
        version = ""
        async for listing in self.api.pages_of(self.kind.path):
            version = version or listing.version
            for body in listing.items:
                body.setdefault("kind", self.kind.kind)
                body.setdefault("apiVersion", self.kind.api_version)
                await self._hand({"type": None, "object": body})
        self.version = version

    async def _watch(self) -> None:
        query = (
            f"?watch=true&allowWatchBookmarks=true&resourceVersion={self.version}"
            f"&timeoutSeconds={self.server_timeout}"
        )
        async with self._open(self.kind.path + query) as lines:
            async for line in lines:
                await self.feed(line)

    async def feed(self, line: bytes) -> None:
        """Takes one line of the watch stream: an event handed over, a bookmark's
        resourceVersion kept, an ERROR raised (`GoneError` for 410, else `ApiError`)."""
        try:
            event = json.loads(line)
            kind, body = event["type"], event["object"]
        except (ValueError, KeyError, TypeError):
            raise DroppedError(f"unreadable watch event: {line[:200]!r}") from None
        if kind == "ERROR":
            status = int(body.get("code") or 0)
            if status == 410:
                raise GoneError
            raise ApiError(status or 500, str(body.get("message") or body))
        version = str((body.get("metadata") or {}).get("resourceVersion") or "")
        if version:
            self.version = version
        if kind != "BOOKMARK":
            await self._hand(event)

    async def _hand(self, event: Event) -> None:
        try:
            await self.handler(event)
        except Exception:
            logger.exception("handling a %s event of %s failed", event.get("type"), self.kind.name)
        self._streak += 1
        if self._streak >= STREAK:
            self._streak = 0
            await asyncio.sleep(0)

    def _open(self, path: str) -> _Stream:
        return _Stream(self, path)

    def answered(self) -> None:
        """A watch request was answered 200: the kind is up (again)."""
        self._delay = self.backoff[0]
        if self.readiness.down.pop(self.kind.name, None) is not None:
            logger.info("the watch of %s is up again", self.kind.name)


class _Stream:
    """One watch request's lines, read through the API client's session as they come."""

    def __init__(self, watch: Watch, path: str) -> None:
        self.watch = watch
        self.path = path
        self.response: aiohttp.ClientResponse | None = None

    async def __aenter__(self) -> AsyncIterator[bytes]:
        api_client = self.watch.api.api_client
        try:
            response = await api_client.call_api(
                self.path,
                "GET",
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=self.watch.client_timeout,
            )
        except (TimeoutError, aiohttp.ClientError, OSError) as error:
            raise DroppedError(f"{type(error).__name__}: {error}") from None
        except client.ApiException as error:
            raise ApiError(int(error.status or 0), str(error.reason)) from None
        self.response = response
        if response.status == 410:
            response.release()
            raise GoneError
        if response.status != 200:
            data = await response.read()
            response.release()
            try:
                message = json.loads(data).get("message")
            except (ValueError, AttributeError):
                message = None
            raise ApiError(int(response.status), str(message or data[:200].decode("replace")))
        self.watch.answered()
        return self._lines(response)

    async def __aexit__(self, *_: object) -> None:
        if self.response is not None:
            self.response.release()

    @staticmethod
    async def _lines(response: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
        """Whole lines, however the server's chunks cut them (a pod can exceed any line
        buffer's default size)."""
        rest = b""
        try:
            async for chunk in response.content.iter_any():
                rest += chunk
                *lines, rest = rest.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield line
        except (TimeoutError, aiohttp.ClientError, OSError) as error:
            raise DroppedError(f"{type(error).__name__}: {error}") from None

"""Kopf's resource watchers, kept alive through API errors, and the readiness they give.

Kopf (1.45) ends the whole operator when one resource's watch fails with an API error it does
not retry itself: a 404 while a CRD is re-installed, a 403 while RBAC is re-applied, a 5xx
past its retries, an ERROR event in the stream. Its orchestrator drops the finished watcher
and re-raises the error, and nothing restarts a watcher; no setting changes that. So the
watcher coroutine Kopf starts for each served resource is wrapped (`install`): on such an
error it logs, marks the resource down, waits (doubling up to `BACKOFF_SECONDS`' second
value) and starts over, with a fresh list that Kopf reports as upserts (``type: None``) and
that makes the scheduler reconcile its cache at once (`gpusched.scheduler.resync`). Pending
gangs are then scheduled as their groups are listed again.

A resource is down from its watcher's failure until the restarted watcher has run
`RECOVERED_SECONDS` without failing: a watch that is refused fails within one request.
`Readiness` says whether any is down (``/readyz`` beside ``/metrics``).

The resources with thousands of objects (pods, nodes) are watched by Kopf's stream but skip
its per-object processing (`streamed`): each event goes straight from the stream to the
handler. Kopf's processing of one event (a task per object, its memory, loggers, a diff-base
copy of the body, the handler invocation's bookkeeping) cost over twice our handler's own
work per pod event, and halved the operator's CPU per bound pod when dropped; none of it
does anything for ``on.event`` handlers like ours.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from kopf._cogs.clients import errors, watching
from kopf._core.reactor import queueing

logger = logging.getLogger(__name__)

BACKOFF_SECONDS = (1.0, 30.0)
"""A failed watcher starts over after the first delay, doubling up to the second, and back to
the first once it has recovered."""
RECOVERED_SECONDS = 5.0
"""A restarted watcher that runs this long without failing counts as up again."""
KOPF_OWN = frozenset({"customresourcedefinitions", "namespaces", "kopfpeerings"})
"""Kopf's own watches (of CRDs, namespaces, peers) keep Kopf's behaviour: it handles their
refusals itself, with a fallback."""

STREAK = 100
"""Events handled straight from a stream before the event loop runs something else: a burst
read in one piece (a list of 15,000 pods) must not hold the scheduling loop back."""

Watcher = Callable[..., Coroutine[Any, Any, None]]
Handler = Callable[..., Any]
"""An async ``on.event`` handler, called with ``event`` and ``memo`` (typed as Kopf's
decorator returns it)."""
SURVIVED = (errors.APIError, watching.WatchingError)


@dataclass
class Readiness:
    """Which resources' watches are down now, and why."""

    down: dict[str, str] = field(default_factory=dict)
    """Resource (``plural.group``) → the error its watcher failed with."""

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


readiness = Readiness()
"""The operator's one readiness: every process runs one operator."""


def _name(resource: Any) -> str:
    group = getattr(resource, "group", "")
    plural = str(getattr(resource, "plural", resource))
    return f"{plural}.{group}" if group else plural


_direct: dict[tuple[str, str], Handler] = {}
"""(API group, plural) → the handler its events go to straight from the stream."""

H = TypeVar("H", bound=Handler)


def direct(group: str, plural: str) -> Callable[[H], H]:
    """Marks the ``on.event`` handler of ``plural`` in ``group`` to be fed straight from the
    resource's watch stream (see the module's note); it stays registered with Kopf, which is
    what makes Kopf watch the resource. Stacked above ``kopf.on.event``."""

    def mark(handler: H) -> H:
        _direct[(group, plural)] = handler
        return handler

    return mark


async def streamed(
    handler: Handler,
    memo: Any,
    *,
    settings: Any,
    resource: Any,
    namespace: Any,
    operator_paused: Any = None,
    operator_indexed: Any = None,
    resource_indexed: Any = None,
    **_: Any,
) -> None:
    """Kopf's watch stream of ``resource`` (its list, then the watch from the list's
    resourceVersion, started over as Kopf does), each event handed to ``handler`` in the
    order the stream has them. A handler's error is logged and the event dropped, as Kopf
    does for an ``on.event`` handler."""
    events = watching.infinite_watch(
        settings=settings, resource=resource, namespace=namespace, operator_paused=operator_paused
    )
    streak = 0
    async for event in events:
        if event is watching.Bookmark.LISTED:
            if operator_indexed is not None and resource_indexed is not None:
                await operator_indexed.drop_toggle(resource_indexed)
            continue
        if isinstance(event, watching.Bookmark) or event.get("type") == "BOOKMARK":
            continue
        try:
            await handler(event=event, memo=memo)
        except Exception:
            logger.exception("handling a %s event of %s failed", event.get("type"), _name(resource))
        streak += 1
        if streak >= STREAK:
            streak = 0
            await asyncio.sleep(0)


def _streamed(handler: Handler, kwargs: Mapping[str, Any]) -> Watcher:
    """`streamed` into ``handler``, with the memo of the processor Kopf hands its watcher (a
    Kopf that no longer hands it fails here, at the watch's start, not silently)."""
    memo = kwargs["processor"].keywords["memobase"]

    async def run(**kwargs: Any) -> None:
        await streamed(handler, memo, **kwargs)

    return run


def kept_alive(
    watcher: Watcher,
    health: Readiness,
    sleep: Callable[[float], Any],
    recovered: float = RECOVERED_SECONDS,
    direct: Mapping[tuple[str, str], Handler] | None = None,
) -> Watcher:
    """``watcher`` (Kopf's ``queueing.watcher``), or `streamed` for a resource in
    ``direct`` ((group, plural) → handler), restarted after the errors it would end the
    operator with; ``recovered``: see `RECOVERED_SECONDS`."""

    async def keep(*, resource: Any, **kwargs: Any) -> None:
        if getattr(resource, "plural", None) in KOPF_OWN:
            await watcher(resource=resource, **kwargs)
            return
        name = _name(resource)
        first, longest = BACKOFF_SECONDS
        delay = first
        handler = (direct or {}).get((getattr(resource, "group", ""), str(resource.plural)))
        chosen = watcher if handler is None else _streamed(handler, kwargs)
        while True:
            run = asyncio.ensure_future(chosen(resource=resource, **kwargs))
            try:
                if name in health.down:
                    done, _ = await asyncio.wait({run}, timeout=recovered)
                    if not done:
                        logger.info("the watch of %s is up again", name)
                        health.down.pop(name, None)
                        delay = first
                await run
                return  # Kopf's watcher never ends by itself; if it does, so be it
            except SURVIVED as error:
                health.down[name] = _short(error)
                logger.warning(
                    "the watch of %s failed (%s); starting it over in %.0f s",
                    name,
                    _short(error),
                    delay,
                )
            finally:
                if not run.done():
                    run.cancel()  # this wrapper was cancelled: Kopf stops the watcher
            await sleep(delay)
            delay = min(delay * 2, longest)

    return keep


def _short(error: BaseException) -> str:
    status = getattr(error, "status", None)
    text = getattr(error, "message", None) or str(error)
    return f"{status}: {text}" if status else f"{type(error).__name__}: {text}"


_installed: Watcher | None = None


def install(health: Readiness = readiness) -> None:
    """Wraps Kopf's watcher for every resource the orchestrator starts (idempotent)."""
    global _installed
    if _installed is not None and queueing.watcher is _installed:
        return
    _installed = kept_alive(queueing.watcher, health, asyncio.sleep, direct=_direct)
    queueing.watcher = _installed

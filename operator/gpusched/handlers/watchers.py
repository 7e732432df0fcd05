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
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

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

Watcher = Callable[..., Coroutine[Any, Any, None]]
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


def kept_alive(
    watcher: Watcher,
    health: Readiness,
    sleep: Callable[[float], Any],
    recovered: float = RECOVERED_SECONDS,
) -> Watcher:
    """``watcher`` (Kopf's ``queueing.watcher``), restarted after the errors it would end
    the operator with; ``recovered``: see `RECOVERED_SECONDS`."""

    async def keep(*, resource: Any, **kwargs: Any) -> None:
        if getattr(resource, "plural", None) in KOPF_OWN:
            await watcher(resource=resource, **kwargs)
            return
        name = _name(resource)
        first, longest = BACKOFF_SECONDS
        delay = first
        while True:
            run = asyncio.ensure_future(watcher(resource=resource, **kwargs))
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
    _installed = kept_alive(queueing.watcher, health, asyncio.sleep)
    queueing.watcher = _installed

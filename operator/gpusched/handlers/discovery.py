"""Kinds the API server starts serving after the operator started: a CRD installed later (a
JobSet, Volcano's PodGroup, the NVIDIA DRA driver's ComputeDomain, the Workload API's next
version) is watched from then on, without a restart.

At start the operator watches what discovery shows (`gpusched.k8s.watch.served`,
`gpusched.handlers.foreign.served_kinds`). `LateKinds` then asks the API server's group list
(``/apis``, one request) every ``operator.discoveryIntervalSeconds`` while a kind is left
unwatched, and reads a group version's resources only once the list names it; a kind found
there gets its watch (`start_watch`). Until then, pods owned by such an object or naming such a
group wait with their reason, never placed alone; once its watch lists the objects they are
grouped again. A foreign group kind is read in the version chosen when it is first found (a
newer version served later is read after a restart); a kind served at start and removed later
is the watch's own business (``/readyz`` names it down)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from gpusched.api.foreign import (
    CANDIDATES,
    FOREIGN_PLURALS,
    Served,
    served_versions,
    with_chosen,
)
from gpusched.k8s.client import KubeClusterApi
from gpusched.k8s.watch import Kind
from gpusched.scheduler.ports import ApiError

logger = logging.getLogger(__name__)


class LateKinds:
    """The kinds left unwatched at start, looked for until each is served.

    ``plain``: kinds of one version (DRA's, our CRDs', the owners'); the foreign group kinds
    left are those ``served`` (the versions chosen at start) did not choose. ``on_served``:
    told the foreign versions chosen so far, each time a kind is added (a new leader lists
    what the watches watch)."""

    def __init__(
        self,
        *,
        api: KubeClusterApi,
        plain: Sequence[Kind],
        served: Served,
        start_watch: Callable[[Kind], None],
        on_served: Callable[[Served], None],
        interval: float,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.api = api
        self.plain = list(plain)
        self.served = served
        self.start_watch = start_watch
        self.on_served = on_served
        self.interval = interval
        self.sleep = sleep

    @property
    def foreign(self) -> list[tuple[str, tuple[str, ...], str]]:
        """The foreign group kinds (group, versions newest first, kind) not chosen yet."""
        chosen = {(api_version.partition("/")[0], kind) for api_version, kind in self.served.chosen}
        return [(g, versions, k) for g, versions, k in CANDIDATES if (g, k) not in chosen]

    @property
    def waiting(self) -> bool:
        return bool(self.plain or self.foreign)

    async def run(self) -> None:
        """Looks every interval until nothing is left to look for (or until cancelled)."""
        while self.waiting:
            await self.sleep(self.interval)
            try:
                await self.look()
            except ApiError as error:  # asked again at the next interval
                logger.info("discovery of kinds not yet served failed: %s", error.message)

    async def look(self) -> list[Kind]:
        """Watches each kind served since the last look; returns them."""
        listed = await self._group_versions()
        found = [k for k in self.plain if k.group_version in listed and await self._serves(k)]
        for kind in found:
            self.plain.remove(kind)
            logger.info("the API server now serves %s: watching it", kind.name)
            self.start_watch(kind)
        return found + await self._look_foreign(listed)

    async def _look_foreign(self, listed: set[str]) -> list[Kind]:
        wanted = {f"/apis/{g}/{v}" for g, versions, _ in self.foreign for v in versions}
        paths = sorted(wanted & listed)
        if not paths:
            return []
        documents = {path.removeprefix("/apis/"): await self.api.discovery(path) for path in paths}
        left = {(g, k) for g, _, k in self.foreign}
        chosen = [
            (api_version, kind)
            for api_version, kind in served_versions(documents).chosen
            if (api_version.partition("/")[0], kind) in left
        ]
        if not chosen:
            return []
        self.served = with_chosen([*self.served.chosen, *chosen])
        self.on_served(self.served)
        kinds = []
        for api_version, kind in chosen:
            group, _, version = api_version.partition("/")
            found = Kind(group, version, FOREIGN_PLURALS[kind], kind)
            logger.info("the API server now serves %s.%s as %s: watching it", kind, group, version)
            self.start_watch(found)
            kinds.append(found)
        return kinds

    async def _serves(self, kind: Kind) -> bool:
        return kind.plural in await self.api.served(kind.group_version)

    async def _group_versions(self) -> set[str]:
        """Every group version the server lists now (``/apis/g/v`` paths)."""
        document = await self.api.discovery("/apis") or {}
        return {
            f"/apis/{version.get('groupVersion')}"
            for group in document.get("groups") or []
            for version in group.get("versions") or []
        }

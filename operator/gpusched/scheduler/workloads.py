"""Workload materialisation: the PodGroups and CompositePodGroups a Workload's templates
describe are created when they do not exist yet (never updated or deleted: they are the
user's from then on)."""

from __future__ import annotations

import asyncio
import logging

from gpusched.scheduler.clock import Clock
from gpusched.scheduler.groups import Group
from gpusched.scheduler.ports import ApiError, ClusterApi
from gpusched.scheduler.tasks import Background
from gpusched.scheduler.views import WorkloadsView

logger = logging.getLogger(__name__)

CREATE_GRACE_SECONDS = 30.0
"""How long a group created for a Workload may take to show up in the watch before it is
created again (a 409 then says it exists after all)."""


class Materializer:
    """``retry_seconds``: how long after a failed create the loop looks again."""

    def __init__(
        self,
        *,
        state: WorkloadsView,
        api: ClusterApi,
        clock: Clock,
        background: Background,
        retry_seconds: float,
    ) -> None:
        self.state = state
        self.api = api
        self.clock = clock
        self.background = background
        self.retry_seconds = retry_seconds
        self._creating: dict[str, float] = {}
        """Groups created for a Workload, by when: not created again until the watch shows
        them (or, should it never, for ``CREATE_GRACE_SECONDS``)."""

    def materialize(self) -> None:
        """Creates the missing groups of every valid Workload (in the background)."""
        now = self.clock()
        for record in self.state.workloads.values():
            if record.workload is None:
                continue
            for group in record.groups:
                if group.key in self.state.groups:
                    self._creating.pop(group.key, None)
                    continue
                if (
                    now - self._creating.get(group.key, -CREATE_GRACE_SECONDS)
                    < CREATE_GRACE_SECONDS
                ):
                    continue
                self._creating[group.key] = now
                self.background.spawn(self._create(group))

    async def _create(self, group: Group) -> None:
        try:
            await self.api.create_custom(group.to_manifest())
        except ApiError as error:
            if error.status != 409:
                logger.warning("cannot create %s %s: %s", group.kind, group.key, error)
                self._creating.pop(group.key, None)
                asyncio.get_running_loop().call_later(self.retry_seconds, self.background.wake)

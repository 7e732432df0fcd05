"""`LateKinds`: kinds the API server starts serving after the operator started are watched
from then on, each once, with one request a look while nothing new is listed."""

from __future__ import annotations

from typing import Any, cast

import pytest

from gpusched.api.foreign import CANDIDATES, FOREIGN_PLURALS, served_versions
from gpusched.handlers.discovery import LateKinds
from gpusched.handlers.owners import OWNER_KINDS
from gpusched.k8s.client import KubeClusterApi
from gpusched.k8s.watch import Kind

JOBSET = next(kind for kind in OWNER_KINDS if kind.kind == "JobSet")
VOLCANO = "scheduling.volcano.sh/v1beta1"


class Discovery:
    """The API server's discovery: group versions served, and the plurals of each."""

    def __init__(self) -> None:
        self.resources: dict[str, set[str]] = {}
        self.asked: list[str] = []

    async def discovery(self, path: str) -> dict[str, Any] | None:
        self.asked.append(path)
        if path == "/apis":
            versions = [{"groupVersion": gv.removeprefix("/apis/")} for gv in self.resources]
            return {"groups": [{"versions": versions}]}
        plurals = self.resources.get(path)
        return None if plurals is None else {"resources": [{"name": p} for p in plurals]}

    async def served(self, group_version: str) -> set[str]:
        self.asked.append(group_version)
        return set(self.resources.get(group_version, set()))


def late(server: Discovery, started: list[Kind], told: list[Any]) -> LateKinds:
    return LateKinds(
        api=cast(KubeClusterApi, server),
        plain=[JOBSET],
        served=served_versions({}),
        start_watch=started.append,
        on_served=told.append,
        interval=30.0,
    )


@pytest.mark.asyncio
async def test_a_kind_is_watched_once_when_served_and_only_then() -> None:
    server, started, told = Discovery(), [], []  # type: ignore[var-annotated]
    kinds = late(server, started, told)
    assert await kinds.look() == []
    assert server.asked == ["/apis"]  # nothing listed: one request, no group read

    # The group is listed before its CRD is established: looked at, not watched yet.
    server.resources[JOBSET.group_version] = set()
    assert await kinds.look() == []
    server.resources[JOBSET.group_version] = {"jobsets", "jobsets/status"}
    assert await kinds.look() == [JOBSET]
    assert started == [JOBSET]
    assert kinds.plain == []
    assert await kinds.look() == []
    assert started == [JOBSET]  # never twice


@pytest.mark.asyncio
async def test_a_foreign_group_kind_found_later_joins_the_versions_a_new_leader_lists() -> None:
    server, started, told = Discovery(), [], []  # type: ignore[var-annotated]
    kinds = late(server, started, told)
    server.resources[f"/apis/{VOLCANO}"] = {"podgroups"}
    found = await kinds.look()
    assert [(k.api_version, k.kind) for k in found] == [(VOLCANO, "PodGroup")]
    assert started == found
    assert told[-1].chosen == ((VOLCANO, "PodGroup"),)
    assert not any(name.startswith("PodGroup.scheduling.volcano.sh") for name in told[-1].unserved)
    assert kinds.waiting  # the other foreign kinds and JobSet are still looked for
    assert await kinds.look() == []
    assert len(started) == 1


@pytest.mark.asyncio
async def test_it_stops_looking_once_everything_is_served() -> None:
    server = Discovery()
    server.resources[JOBSET.group_version] = {"jobsets"}
    started: list[Kind] = []
    kinds = LateKinds(
        api=cast(KubeClusterApi, server),
        plain=[JOBSET],
        served=served_versions({}),
        start_watch=started.append,
        on_served=lambda _: None,
        interval=30.0,
    )
    for group, versions, plural in _foreign():
        server.resources.setdefault(f"/apis/{group}/{versions[0]}", set()).add(plural)
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        assert len(slept) < 3, "still looking after everything was served"

    kinds.sleep = sleep
    await kinds.run()  # returns: nothing left to look for
    assert slept == [30.0]
    assert not kinds.waiting
    assert {k.kind for k in started} >= {"JobSet", "PodGroup", "CompositePodGroup"}


def _foreign() -> list[tuple[str, tuple[str, ...], str]]:
    return [(g, versions, FOREIGN_PLURALS[kind]) for g, versions, kind in CANDIDATES]

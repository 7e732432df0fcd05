"""Watch events of other projects' group objects into the scheduling service: the upstream
Workload API's PodGroups and CompositePodGroups, Volcano's and coscheduling's PodGroups
(`gpusched.api.foreign`). `WATCHED` is added to the operator's watches at start.

Only kinds the API server serves at start are watched (`gpusched.k8s.watch`): a kind that is
not served (no Volcano CRD, a cluster without the Workload API, or one serving another
version) is named once in the log and not watched; nothing fails. Pods naming a group of such
a kind wait, with a reason, and are never placed alone. A CRD installed later is watched after
the operator's next start."""

from __future__ import annotations

from gpusched.api.grouprefs import GroupSource
from gpusched.engine.groupsources import foreign_key
from gpusched.handlers.events import Adapter
from gpusched.k8s.client import FOREIGN_GROUPS, PLURALS
from gpusched.k8s.watch import Event, Kind
from gpusched.scheduler.service import Scheduler


async def foreign_group_event(scheduler: Scheduler, event: Event) -> None:
    body = event["object"]
    if event["type"] == "DELETED":
        metadata = body["metadata"]
        source = GroupSource(str(body.get("apiVersion", "")).partition("/")[0])
        namespace = metadata.get("namespace") or "default"
        scheduler.group_deleted(foreign_key(source, namespace, metadata["name"]))
    else:
        scheduler.foreign_group_changed(body)


WATCHED: tuple[tuple[Kind, Adapter], ...] = tuple(
    (
        Kind(
            api_version.partition("/")[0],
            api_version.partition("/")[2],
            PLURALS[kind],
            kind,
        ),
        foreign_group_event,
    )
    for api_version, kind in FOREIGN_GROUPS
)
"""Each foreign group kind watched, with its adapter."""

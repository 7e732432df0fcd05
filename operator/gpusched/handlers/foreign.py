"""Kopf handlers for other projects' group objects: the upstream Workload API's PodGroups and
CompositePodGroups, Volcano's and coscheduling's PodGroups (`gpusched.api.foreign`).

Kopf discovers what the API server serves when the operator starts: a kind that is not served
(no Volcano CRD, a cluster without the Workload API, or one serving another version) is named
once in the log ("Unresolved resources cannot be served") and not watched; nothing fails.
Pods naming a group of such a kind wait, with a reason, and are never placed alone. A CRD
installed later is watched after the operator's next start."""

from __future__ import annotations

from typing import Any

import kopf

from gpusched.api.grouprefs import GroupSource
from gpusched.engine.groupsources import foreign_key
from gpusched.handlers import _scheduler, registry
from gpusched.k8s.client import FOREIGN_GROUPS, PLURALS

WATCHED = tuple(
    (api_version.partition("/")[0], api_version.partition("/")[2], PLURALS[kind])
    for api_version, kind in FOREIGN_GROUPS
)
"""(API group, version, plural) of each foreign group kind watched."""


async def foreign_group_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    scheduler = _scheduler(memo)
    body = event["object"]
    if event["type"] == "DELETED":
        metadata = body["metadata"]
        source = GroupSource(str(body.get("apiVersion", "")).partition("/")[0])
        namespace = metadata.get("namespace") or "default"
        scheduler.group_deleted(foreign_key(source, namespace, metadata["name"]))
    else:
        scheduler.foreign_group_changed(body)


for _group, _version, _plural in WATCHED:
    kopf.on.event(_group, _version, _plural, registry=registry, id=f"{_plural}.{_group}")(
        foreign_group_event
    )

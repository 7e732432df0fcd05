"""Watch events of other projects' group objects into the scheduling service: the upstream
Workload API's PodGroups and CompositePodGroups, Volcano's and coscheduling's PodGroups
(`gpusched.api.foreign`).

Which versions are watched is read from the API server's discovery at start (`served_kinds`):
the newest served version of each kind (``scheduling.k8s.io/v1`` from 1.38, ``v1beta1`` on
1.37, ``v1alpha2`` on 1.36). A kind served in none of the versions gpusched reads (no Volcano
CRD, a cluster without the Workload API) is named once in the log and not watched; nothing
fails. Pods naming a group of such a kind wait, with a reason, and are never placed alone. A
CRD installed later is watched once discovery shows it (`gpusched.handlers.discovery`)."""

from __future__ import annotations

import logging

from gpusched.api.foreign import CANDIDATES, FOREIGN_PLURALS
from gpusched.api.grouprefs import GroupSource
from gpusched.engine.groupsources import foreign_key
from gpusched.handlers.events import Adapter
from gpusched.k8s.client import KubeClusterApi
from gpusched.k8s.watch import Event, Kind
from gpusched.scheduler.service import Scheduler

logger = logging.getLogger(__name__)


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
    (Kind(group, version, FOREIGN_PLURALS[kind], kind), foreign_group_event)
    for group, versions, kind in CANDIDATES
    for version in versions
)
"""Every version of each foreign group kind gpusched can read, with its adapter; the
operator watches one version of each (`served_kinds`)."""


async def served_kinds(api: KubeClusterApi) -> list[Kind]:
    """The one version of each foreign group kind to watch: its newest served. Logs once
    which are served in none of the versions gpusched reads."""
    served = await api.foreign_served()
    for missing in served.unserved:
        logger.warning(
            "the API server serves %s in none of these versions: not watched; pods naming "
            "such a group wait",
            missing,
        )
    kinds = []
    for api_version, kind in served.chosen:
        group, _, version = api_version.partition("/")
        logger.info("watching %s.%s as %s", kind, group, api_version)
        kinds.append(Kind(group, version, FOREIGN_PLURALS[kind], kind))
    return kinds

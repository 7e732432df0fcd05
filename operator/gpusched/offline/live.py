"""A live cluster, read-only, for ``explain``: its objects (GETs through
`gpusched.k8s.reader`, read leniently by `gpusched.inputs.objects`) and, when the config names
a Prometheus, its GPU telemetry as the operator reads it."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from pathlib import Path

from gpusched.api.config import SchedulerConfig
from gpusched.engine.health import GpuSample
from gpusched.inputs.objects import ClusterObjects, from_documents


class UnreachableError(Exception):
    """The live cluster could not be read; the message says why and what to pass instead."""


def read_cluster(kubeconfig: str | None) -> ClusterObjects:
    """Every object the engine reads, from the cluster of ``kubeconfig`` (None: in-cluster,
    ``$KUBECONFIG``, ``~/.kube/config``)."""
    _check_credentials(kubeconfig)
    from gpusched.k8s.reader import list_cluster
    from gpusched.scheduler.ports import ApiError

    try:
        documents = asyncio.run(list_cluster(kubeconfig))
    except ApiError as error:
        raise UnreachableError(str(error)) from None
    except Exception as error:  # a kubeconfig that cannot be read or used
        raise UnreachableError(f"{type(error).__name__}: {error}") from None
    return from_documents(documents)


def _check_credentials(kubeconfig: str | None) -> None:
    """Says plainly that there is no cluster to read, where the Kubernetes client would raise
    "ConfigException: Invalid kube-config file. No configuration found." (the same places
    `gpusched.k8s.client.load_configuration` looks, in its order)."""
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        return  # in a pod: the service account's credentials
    path = kubeconfig or os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    if any(Path(p).is_file() for p in path.split(os.pathsep) if p):
        return
    if kubeconfig:
        where = f"--kubeconfig {path} does not exist"
    elif os.environ.get("KUBECONFIG"):
        where = f"$KUBECONFIG names {path}, which does not exist"
    else:
        where = f"no --kubeconfig, no $KUBECONFIG, no {path}, and not running in a pod"
    raise UnreachableError(
        f"{where}; pass --kubeconfig FILE, or -f PATH to explain snapshot files instead"
    )


def read_prometheus(
    objects: ClusterObjects, config: SchedulerConfig
) -> Mapping[tuple[str, int], GpuSample] | None:
    """For a live cluster, telemetry as the operator reads it, when the config names a
    Prometheus (one query; a failed one leaves every GPU unknown, as in the operator)."""
    if not config.telemetry.prometheus.url:
        return None
    from gpusched.telemetry.cache import TelemetryCache

    known = {n.name for n in objects.nodes}
    cache = TelemetryCache(config.telemetry, known_nodes=lambda: known, registry=None)

    async def once() -> Mapping[tuple[str, int], GpuSample] | None:
        try:
            await cache.refresh()
            return cache.samples()
        finally:
            await cache.stop()

    return asyncio.run(once())

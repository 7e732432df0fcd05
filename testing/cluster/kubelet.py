"""The kubelet's part, played for Node objects that have no kubelet behind them.

A real kubelet does three things the tests rely on: it confirms the deletion of the pods bound
to its node (the API server only marks a bound pod terminating and waits for its kubelet to
delete it with grace period 0), it reports a pod Running once its containers start, and it
reports Succeeded or Failed when they end. `Kubelet` does the first on its own (watching pods)
and the other two when told (`run`, `finish`).

Before it confirms a deletion it reports the pod's terminal phase, Failed for a pod that had
not ended, as the kubelet does since Kubernetes 1.27 (KEP-3329): the Job controller waits for
that phase before it applies a ``podFailurePolicy`` (and before it replaces the pod of a Job
that has one), so without it a preempted Job's pods would hang terminating forever. The patch
is strategic, so the conditions already there (``DisruptionTarget``) stay.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Mapping
from typing import Any

import httpx

from testing.apiserver import STRATEGIC, ApiClient, ApiStatusError

LINGER = "gpusched.test/linger"
"""A finalizer that keeps an evicted pod terminating and still running (holding its GPUs, as
a pod in its grace period does) until a story lets it go: the kubelet reports no terminal
phase for a pod that carries it."""


class Kubelet:
    def __init__(self, url: str, token: str, ca: str) -> None:
        self.api = ApiClient(url, token=token, verify=ca)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="fake-kubelet", daemon=True)
        self.deleted = 0
        self.errors: list[BaseException] = []
        self.elsewhere: set[str] = set()
        """Nodes another kubelet serves (kwok's, testing/cluster/kwok.py): their pods are left
        to it."""

    def start(self) -> Kubelet:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(15)
        self.api.close()

    # -- told ----------------------------------------------------------------------------------

    def run(self, namespace: str, name: str) -> dict[str, Any]:
        """The pod's containers started: phase Running, Ready."""
        return self._report(namespace, name, "Running", ready=True)

    def finish(self, namespace: str, name: str, phase: str = "Succeeded") -> dict[str, Any]:
        """The pod's containers ended: `phase` Succeeded or Failed."""
        return self._report(namespace, name, phase, ready=False)

    def _report(self, namespace: str, name: str, phase: str, *, ready: bool) -> dict[str, Any]:
        status = "True" if ready else "False"
        return self.api.patch(
            "pods",
            name,
            {
                "status": {
                    "phase": phase,
                    "conditions": [
                        {"type": "Ready", "status": status},
                        {"type": "ContainersReady", "status": status},
                    ],
                }
            },
            namespace,
            subresource="status",
        )

    # -- on its own ----------------------------------------------------------------------------

    def _loop(self) -> None:
        version = ""
        while not self._stop.is_set():
            try:
                if not version:
                    version = self._relist()
                version = self._watch(version)
            except (httpx.HTTPError, ApiStatusError) as error:
                if isinstance(error, ApiStatusError) and error.status == 410:
                    version = ""
                elif not self._stop.is_set():
                    self.errors.append(error)
                    self._stop.wait(0.5)
                    version = ""

    def _relist(self) -> str:
        listing = self.api.list_raw("pods")
        for pod in listing["items"]:
            self._confirm_if_terminating(pod)
        version: str = listing["metadata"]["resourceVersion"]
        return version

    def _watch(self, version: str) -> str:
        for event in self.api.watch(
            "pods",
            timeout=10,
            resourceVersion=version,
            timeoutSeconds="5",
            allowWatchBookmarks="true",
        ):
            if event["type"] == "ERROR":
                return ""
            pod = event["object"]
            version = pod["metadata"].get("resourceVersion", version)
            if event["type"] in ("ADDED", "MODIFIED"):
                self._confirm_if_terminating(pod)
            if self._stop.is_set():
                break
        return version

    def _confirm_if_terminating(self, pod: Mapping[str, Any]) -> None:
        meta = pod["metadata"]
        node = pod.get("spec", {}).get("nodeName")
        if not meta.get("deletionTimestamp") or not node or node in self.elsewhere:
            return
        if LINGER in (meta.get("finalizers") or []):
            return  # its containers are still stopping: it holds what it holds until let go
        if pod.get("status", {}).get("phase") not in ("Succeeded", "Failed"):
            with contextlib.suppress(ApiStatusError):
                self.api.patch(
                    "pods",
                    meta["name"],
                    {"status": {"phase": "Failed"}},
                    meta["namespace"],
                    subresource="status",
                    content_type=STRATEGIC,
                )
        body = {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}}
        with contextlib.suppress(ApiStatusError):
            response = self.api.http.request(
                "DELETE", self.api.path("pods", meta["namespace"], meta["name"]), json=body
            )
            if response.status_code < 300:
                self.deleted += 1

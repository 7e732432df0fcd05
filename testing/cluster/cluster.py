"""The real control plane as the integration tests use it: one per test session, reset between
tests, with the operator's identity and RBAC exactly as the chart grants them, a fault proxy
in front of the API server for the operator, and the fake kubelet.

`RealCluster` offers the hooks the tests used on the API emulator (`faults`, `drop_watches`,
`expire_watches`, `request_count`, `requests`, `write_kubeconfig`), so one story reads the
same on either; only what a real server cannot do (faults inside one request, virtual time)
stays on the emulator.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

from testing.apiserver import ApiClient, ApiStatusError, ResourceSpec
from testing.cluster.controllers import WORKLOAD_CRDS, KubeRay, Kueue, apply_crds, go_build
from testing.cluster.controlplane import (
    FEATURE_GATES,
    JOB_CONTROLLERS,
    OPERATOR_NAMESPACE,
    ROOT,
    WORKLOAD_JOBS_OFF,
    ControlPlane,
    UnavailableError,
    find_binaries,
)
from testing.cluster.kubelet import Kubelet
from testing.cluster.proxy import FaultProxy, ProxyFaults, Request

RBAC_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
OUR_GROUP = "scheduling.gpusched.io"
DRA_GROUP = "resource.k8s.io"
UPSTREAM_GROUP = "scheduling.k8s.io"
NAMESPACED_RESETS = (
    # Jobs first, so that a running Job controller makes no new pods behind the reset.
    ("jobs", "batch"),
    ("workloads", UPSTREAM_GROUP),
    ("compositepodgroups", UPSTREAM_GROUP),
    ("podgroups", UPSTREAM_GROUP),
    ("workloads", OUR_GROUP),
    ("compositepodgroups", OUR_GROUP),
    ("podgroups", OUR_GROUP),
    ("pods", ""),
    ("events", ""),
)
KEEP_NAMESPACES = {"kube-system", "kube-public", "kube-node-lease"}
MORE_RESOURCES = (
    ResourceSpec("", "v1", "serviceaccounts", "ServiceAccount", namespaced=True),
    ResourceSpec("batch", "v1", "jobs", "Job", namespaced=True, status_subresource=True),
    ResourceSpec("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False),
    ResourceSpec("scheduling.k8s.io", "v1beta1", "workloads", "Workload", namespaced=True),
    ResourceSpec("scheduling.k8s.io", "v1beta1", "podgroups", "PodGroup", namespaced=True,
                 status_subresource=True),
    ResourceSpec("scheduling.k8s.io", "v1alpha3", "compositepodgroups", "CompositePodGroup",
                 namespaced=True, status_subresource=True),
    ResourceSpec("resource.k8s.io", "v1", "resourceslices", "ResourceSlice", namespaced=False),
    ResourceSpec("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", namespaced=False),
    ResourceSpec("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", namespaced=True,
                 status_subresource=True),
    ResourceSpec("resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate",
                 namespaced=True),
)  # fmt: skip
"""Resources the emulator does not serve that tests of the real server name."""

KUBERAY_KINDS = (
    ResourceSpec("ray.io", "v1", "rayclusters", "RayCluster", namespaced=True,
                 status_subresource=True),
    ResourceSpec("ray.io", "v1", "rayjobs", "RayJob", namespaced=True, status_subresource=True),
    ResourceSpec("scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup", namespaced=True,
                 status_subresource=True),
)  # fmt: skip
KUEUE_KINDS = (
    ResourceSpec("kueue.x-k8s.io", "v1beta2", "workloads", "Workload", namespaced=True,
                 status_subresource=True),
    ResourceSpec("kueue.x-k8s.io", "v1beta2", "localqueues", "LocalQueue", namespaced=True,
                 status_subresource=True),
)  # fmt: skip
WORKLOAD_KINDS = (
    ResourceSpec("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet", namespaced=True,
                 status_subresource=True),
    ResourceSpec("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "LeaderWorkerSet",
                 namespaced=True, status_subresource=True),
    ResourceSpec("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob", namespaced=True,
                 status_subresource=True),
    ResourceSpec("kubeflow.org", "v2beta1", "mpijobs", "MPIJob", namespaced=True,
                 status_subresource=True),
    ResourceSpec("trainer.kubeflow.org", "v1alpha1", "trainjobs", "TrainJob", namespaced=True,
                 status_subresource=True),
    ResourceSpec("resource.nvidia.com", "v1beta1", "computedomains", "ComputeDomain",
                 namespaced=True, status_subresource=True),
)  # fmt: skip
"""The kinds `kuberay()`, `kueue()` and `install_workload_crds()` install, reset like ours."""


def chart_rbac(namespace: str = OPERATOR_NAMESPACE) -> list[dict[str, Any]]:
    """The chart's ServiceAccount, (Cluster)Roles and bindings, rendered by a real helm."""
    from testing.helm import find_helm

    helm = find_helm()
    if helm is None:
        raise UnavailableError("the chart's RBAC is rendered by helm: run bash .ci/install-helm.sh")
    rendered = subprocess.run(
        [helm, "template", "gpusched", str(ROOT / "charts" / "gpusched"), "--namespace", namespace],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    return [d for d in yaml.safe_load_all(rendered) if d and d.get("kind") in RBAC_KINDS]


class RealCluster:
    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.proxy = FaultProxy(plane.url, plane.ca).start()
        self.kubelet = Kubelet(plane.url, plane.token("admin"), str(plane.ca)).start()
        self.extra_resets: list[ResourceSpec] = []
        """Kinds of CRDs installed later (KubeRay's, the workload CRDs): a reset deletes their
        objects first, before the pods their controllers would make again."""
        self.admin = self.client()
        self._apply_rbac()

    @classmethod
    @contextlib.contextmanager
    def running(
        cls,
        workdir: Path,
        *,
        apiserver_flags: Sequence[str] = (),
        controller_manager_flags: Sequence[str] = (),
    ) -> Iterator[RealCluster]:
        """A control plane for the block; the flags are appended to its servers' own."""
        plane = ControlPlane.start(
            find_binaries(),
            workdir,
            apiserver_flags=apiserver_flags,
            controller_manager_flags=controller_manager_flags,
        )
        cluster: RealCluster | None = None
        try:
            cluster = cls(plane)
            yield cluster
        finally:
            if cluster is not None:
                cluster.close()
            plane.stop()

    def close(self) -> None:
        self.kubelet.stop()
        self.proxy.stop()
        self.admin.close()

    # -- what tests use ------------------------------------------------------------------------

    def client(self, identity: str = "admin") -> ApiClient:
        """A client straight to the API server (no proxy, no faults), as `identity`."""
        client = ApiClient(
            self.plane.url, token=self.plane.token(identity), verify=str(self.plane.ca)
        )
        client.specs.extend(MORE_RESOURCES)
        client.specs.extend(self.extra_resets)
        return client

    @property
    def url(self) -> str:
        return self.plane.url

    @property
    def faults(self) -> ProxyFaults:
        return self.proxy.faults

    @property
    def request_count(self) -> int:
        return self.proxy.request_count

    def requests(self) -> list[Request]:
        return self.proxy.requests()

    @property
    def failures(self) -> list[BaseException]:
        try:
            self.plane.check()
        except RuntimeError as error:
            return [error, *self.kubelet.errors]
        return list(self.kubelet.errors)

    def drop_watches(self, *, abort: bool = False) -> int:
        return self.proxy.drop_watches(abort=abort)

    def expire_watches(self, *, drop: bool = True) -> None:
        """Every watch resuming from a resourceVersion older than now gets 410 Gone."""
        version = int(self.admin.list_raw("namespaces")["metadata"]["resourceVersion"])
        self.proxy.expire_watches(version + 1, drop=drop)

    def job_controller(self, *, workload_api: bool = True) -> None:
        """The real Job controller (and `JOB_CONTROLLERS`' other controllers) runs from now on,
        until the session ends. With `workload_api` it has WorkloadWithJob on, as the API server
        has: each new Job gets a Workload and a PodGroup (scheduling.k8s.io/v1beta1) from its
        `.spec.scheduling` (Basic scheduling when it has none) and pods whose
        `spec.schedulingGroup.podGroupName` names that PodGroup. Without, it is the Job
        controller 1.37 ships (the gate off): pods only. Asking for the other kind restarts it."""
        gates = FEATURE_GATES if workload_api else WORKLOAD_JOBS_OFF
        self.plane.start_controllers("jobs", JOB_CONTROLLERS, feature_gates=gates)

    def kuberay(self) -> KubeRay:
        """The real KubeRay operator with its scheduler-plugins batch scheduler, its CRDs and
        the coscheduling PodGroup CRD installed; built on first use (build-go.sh kuberay)."""
        ray = KubeRay.start(self.plane, go_build("kuberay"))
        self._reset_also(*KUBERAY_KINDS)
        return ray

    def kueue(self) -> Kueue:
        """Kueue's manager with its plain-pod integration and webhooks on 127.0.0.1, its CRDs,
        and the test ClusterQueue; built on first use (build-go.sh kueue). It manages pods only
        in namespaces made with `ensure_namespace(name, kueue=True)`."""
        kueue = Kueue.start(self.plane, go_build("kueue"))
        self._reset_also(*KUEUE_KINDS)
        return kueue

    def install_workload_crds(self) -> None:
        """JobSet, LeaderWorkerSet, PyTorchJob, MPIJob, TrainJob and the NVIDIA driver's
        ComputeDomain CRDs (testing/cluster/crds)."""
        apply_crds(self.plane, WORKLOAD_CRDS)
        self._reset_also(*WORKLOAD_KINDS)

    def _reset_also(self, *specs: ResourceSpec) -> None:
        for spec in specs:
            if spec not in self.extra_resets:
                self.extra_resets.append(spec)
                self.admin.specs.append(spec)

    def install_crds(self) -> list[dict[str, Any]]:
        """The CRDs are applied (server-side, by kubectl) when the control plane starts."""
        return []

    def write_kubeconfig(
        self, path: str | Path, namespace: str = "default", identity: str = "operator"
    ) -> Path:
        """A kubeconfig for the operator: its service account's identity, through the proxy."""
        path = Path(path)
        config = self.plane.kubeconfig(identity, server=self.proxy.url)
        config["contexts"][0]["context"]["namespace"] = namespace  # type: ignore[index]
        path.write_text(yaml.safe_dump(config))
        return path

    # -- set-up and reset ----------------------------------------------------------------------

    def _apply_rbac(self) -> None:
        self.ensure_namespace(OPERATOR_NAMESPACE)
        documents = chart_rbac()
        self.plane.kubectl("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(documents))

    def ensure_namespace(self, name: str, *, kueue: bool = False) -> None:
        """The namespace, with its default ServiceAccount; `kueue`: labelled for Kueue to manage
        its pods (`Kueue.NAMESPACE_LABEL`)."""
        metadata: dict[str, Any] = {"name": name}
        if kueue:
            metadata["labels"] = {Kueue.NAMESPACE_LABEL: "true"}
        with contextlib.suppress(ApiStatusError):
            self.admin.create({"apiVersion": "v1", "kind": "Namespace", "metadata": metadata})
        if kueue:
            self.admin.patch("namespaces", name, {"metadata": metadata})
        deadline = time.monotonic() + 30
        while self.admin.get_or_none("serviceaccounts", "default", name) is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no default ServiceAccount in namespace {name}")
            time.sleep(0.1)
        if kueue:
            self._wait_kueue_gates(name)

    def _wait_kueue_gates(self, namespace: str, timeout: float = 60) -> None:
        """Until Kueue's webhook gates a queued pod of ``namespace``: Kueue reads namespaces
        through its cache, and a pod made in a namespace it has not seen yet goes ungated and
        unmanaged. Asked with a dry-run create (the webhooks have no side effects): nothing
        is made, so no Workload is left behind."""
        probe = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "kueue-probe", "labels": {Kueue.QUEUE_LABEL: "queue"}},
            "spec": {"containers": [{"name": "probe", "image": "registry.example/probe:1"}]},
        }
        path = self.admin.path("pods", namespace)
        deadline = time.monotonic() + timeout
        while True:
            answer = self.admin.http.post(path, params={"dryRun": "All"}, json=probe)
            gates = (answer.json().get("spec") or {}).get("schedulingGates") or []
            if answer.status_code < 300 and {"name": Kueue.GATE} in gates:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"Kueue does not gate pods of {namespace}: {answer.text}")
            time.sleep(0.2)

    def reset(self, timeout: float = 60) -> None:
        """Back to an empty cluster: no pods, groups, Events, Leases or Nodes; no faults."""
        self.proxy.faults.clear()
        self.proxy.forget_requests()
        self.proxy.expire_watches(0, drop=False)
        namespaces = [
            n["metadata"]["name"]
            for n in self.admin.list("namespaces")
            if n["metadata"]["name"] not in KEEP_NAMESPACES
        ]
        self._unprotect_claims()
        for namespace in namespaces:
            for spec in self.extra_resets:
                self._delete_collection(spec.plural, spec.group, namespace)
            for plural, group in NAMESPACED_RESETS:
                self._delete_collection(plural, group, namespace)
            self._delete_collection("leases", "coordination.k8s.io", namespace)
            for plural in ("resourceclaims", "resourceclaimtemplates"):
                self._delete_collection(plural, DRA_GROUP, namespace)
        for plural in ("resourceslices", "deviceclasses"):
            self._delete_collection(plural, DRA_GROUP, None)
        self._delete_collection("nodes", "", None)
        self.kubelet.elsewhere.clear()
        deadline = time.monotonic() + timeout
        while self._leftovers(namespaces):
            if time.monotonic() > deadline:
                raise TimeoutError(f"reset left objects behind: {self._leftovers(namespaces)}")
            time.sleep(0.1)

    def _unprotect_claims(self) -> None:
        """ResourceClaims keep their delete-protection finalizer until their allocation is
        undone; a reset takes it off so that they go at once."""
        for claim in self.admin.list("resourceclaims", group=DRA_GROUP):
            meta = claim["metadata"]
            if meta.get("finalizers"):
                with contextlib.suppress(ApiStatusError):
                    self.admin.patch(
                        "resourceclaims",
                        meta["name"],
                        {"metadata": {"finalizers": None}},
                        meta["namespace"],
                        group=DRA_GROUP,
                    )

    def _delete_collection(self, plural: str, group: str, namespace: str | None) -> None:
        path = self.admin.path(plural, namespace, group=group or None)
        # Jobs orphan their pods unless told otherwise; the pods go in the same reset anyway.
        body = {"gracePeriodSeconds": 0, "propagationPolicy": "Background"}
        response = self.admin.http.request("DELETE", path, json=body)
        if response.status_code >= 400 and response.status_code != 404:
            raise RuntimeError(f"DELETE {path}: {response.status_code} {response.text[:300]}")

    def _leftovers(self, namespaces: list[str]) -> list[str]:
        left = [f"node/{n['metadata']['name']}" for n in self.admin.list("nodes")]
        extra = [(spec.plural, spec.group) for spec in self.extra_resets]
        for plural, group in (*extra, *NAMESPACED_RESETS[:-1], ("resourceclaims", DRA_GROUP)):
            for item in self.admin.list(plural, group=group or None):
                if item["metadata"]["namespace"] in namespaces:
                    left.append(
                        f"{plural}/{item['metadata']['namespace']}/{item['metadata']['name']}"
                    )
        return left


def env_for_operator() -> dict[str, str]:
    """The operator's environment as the chart's Deployment sets it."""
    return {**os.environ, "POD_NAMESPACE": OPERATOR_NAMESPACE}

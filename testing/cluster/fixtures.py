"""pytest fixtures for the real controllers beside the control plane, for the integration tests
(imported by tests/integration/conftest.py). Each starts what it names on the session's real
cluster the first time a test asks, keeps it for the session, and returns the `RealCluster`
(reset before each test like `apiserver`); a test on the emulator that asks for one fails.

- `workload_job_controller`: the real Job controller with WorkloadWithJob: a `batch/v1` Job
  makes a Workload, a PodGroup (scheduling.k8s.io/v1beta1) and pods whose
  `spec.schedulingGroup.podGroupName` names it.
  A Job whose controller owner is another object (a JobSet, say: the owner chain JobSet ->
  Job -> Pod) gets pods only: the Job controller leaves its Workload to the parent, unless the
  Job carries `scheduling.k8s.io/group-template-name` (then it makes only the PodGroup).
- `job_controller`: the Job controller as 1.37 ships it (WorkloadWithJob off): pods only.
- `kuberay`: the KubeRay operator with its scheduler-plugins batch scheduler (`KubeRay`, for its
  constants; the cluster is `apiserver`). Built from its Go module on first use: without Go
  the test skips, naming it (fails instead under GPUSCHED_REQUIRE_CONTROLPLANE=1, as in CI).
- `kueue`: Kueue's manager with its plain-pod integration and webhooks on 127.0.0.1 (`Kueue`,
  for its constants): pods in a namespace made by `ensure_namespace(name, kueue=True)` with a
  LocalQueue (`Kueue.local_queue(namespace)`) are gated, admitted and ungated by Kueue. Built
  from its Go module on first use, like `kuberay`.
- `karpenter`: Karpenter (v1.15.0) with its kwok provider, bound to 127.0.0.1
  (`testing/cluster/karpenter.py`), its CRDs and the KWOKNodeClass; it acts once a test
  creates a NodePool (`karpenter.node_pool`), and every NodePool is removed after the test,
  with the Nodes Karpenter made. Built from its Go module on first use, like `kuberay`.
- `kwok`: kwok (v0.8.0, `testing/cluster/kwok.py`) managing the Nodes a test makes with
  `kwok.create_nodes(api, [kwok_node(...)])`: Ready, Leases renewed every `KWOK_LEASE_SECONDS`
  / 4, bound pods Running, annotated pods completed, deleted pods removed; the harness kubelet
  leaves those Nodes' pods alone. Built from its Go module on first use, like `kuberay`.
- `workload_crds`: the JobSet, LeaderWorkerSet, PyTorchJob, MPIJob, TrainJob (and the NVIDIA
  driver's ComputeDomain) CRDs installed,
  for tests that create the objects those controllers make.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest

from testing.apiserver import ApiClient
from testing.cluster import karpenter as karpenter_kwok
from testing.cluster.cluster import RealCluster
from testing.cluster.controllers import KubeRay, Kueue, go_build
from testing.cluster.controlplane import UnavailableError
from testing.cluster.kwok import Kwok

T = TypeVar("T")
KWOK_LEASE_SECONDS = 8
"""The Node Leases' duration under the `kwok` fixture: renewed every 2 s, so that a test sees
renewals within its patience (kubelets default to 40)."""


def _real(apiserver: object) -> RealCluster:
    if not isinstance(apiserver, RealCluster):
        pytest.fail("the real controllers run only on the real control plane, not the emulator")
    return apiserver


@pytest.fixture
def workload_job_controller(apiserver: object) -> RealCluster:
    cluster = _real(apiserver)
    cluster.job_controller(workload_api=True)
    return cluster


@pytest.fixture
def job_controller(apiserver: object) -> RealCluster:
    cluster = _real(apiserver)
    cluster.job_controller(workload_api=False)
    return cluster


def _built(start: Callable[[], T]) -> T:
    try:
        return start()
    except UnavailableError as missing:
        if os.environ.get("GPUSCHED_REQUIRE_CONTROLPLANE") == "1":
            pytest.fail(str(missing))
        pytest.skip(str(missing))


@pytest.fixture
def kuberay(apiserver: object) -> KubeRay:
    return _built(_real(apiserver).kuberay)


@pytest.fixture
def kueue(apiserver: object) -> Kueue:
    return _built(_real(apiserver).kueue)


@pytest.fixture
def karpenter(apiserver: object, api: ApiClient) -> Iterator[karpenter_kwok.Karpenter]:
    cluster = _real(apiserver)
    running = _built(lambda: karpenter_kwok.Karpenter.start(cluster.plane, go_build("karpenter")))
    api.specs.extend(spec for spec in karpenter_kwok.SPECS if spec not in api.specs)
    yield running
    for pool in api.list("nodepools", group=karpenter_kwok.GROUP):
        running.remove_node_pool(api, pool["metadata"]["name"])


@pytest.fixture
def kwok(apiserver: object) -> Kwok:
    cluster = _real(apiserver)
    return _built(lambda: Kwok.start(cluster, lease_seconds=KWOK_LEASE_SECONDS))


@pytest.fixture
def workload_crds(apiserver: object) -> RealCluster:
    cluster = _real(apiserver)
    cluster.install_workload_crds()
    return cluster

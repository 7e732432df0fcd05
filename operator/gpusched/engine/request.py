"""What one pod asks for, reduced to the plain values the engine compares against nodes."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from gpusched.api.config import GPU_RESOURCE
from gpusched.api.crds import PreemptionPolicy
from gpusched.api.errors import InvalidObjectError
from gpusched.api.foreign import VOLCANO_TASK_ANNOTATION
from gpusched.api.k8s import GPU_MILLI_ANNOTATION, Pod
from gpusched.api.selectors import NodeSelectorTerm, Toleration
from gpusched.engine import wording
from gpusched.engine.claims import PodDevices
from gpusched.engine.devices import CHANNEL_RESOURCE
from gpusched.engine.groups import GroupKey
from gpusched.engine.shares import SHARE_RESOURCE

WHOLE_GPU_MILLI = 1000


@dataclass(frozen=True, slots=True, kw_only=True)
class PodRequest:
    """A pod as the engine sees it.

    ``resources`` holds every requested resource in canonical units (cpu in milli-cores, memory
    in bytes, ``pods`` = 1, extended resources as counts) except the GPU resource, which is
    ``gpus`` (whole GPUs) or ``gpu_milli`` (a share of one GPU, 1..999; 0 when not sharing).
    """

    key: str
    resources: Mapping[str, int] = field(default_factory=lambda: {"pods": 1})
    gpus: int = 0
    gpu_milli: int = 0
    node_selector: tuple[tuple[str, str], ...] = ()
    required_terms: tuple[NodeSelectorTerm, ...] | None = None
    tolerations: tuple[Toleration, ...] = ()
    priority: int = 0
    preemption_policy: PreemptionPolicy = PreemptionPolicy.PREEMPT_LOWER_PRIORITY
    """Whether the pod, when it has no group, may evict lower-priority pods to fit (a pod of
    a group preempts by its group's policy)."""
    group: str | None = None
    app: str | None = None
    task: str | None = None
    """The Volcano task the pod belongs to (its ``volcano.sh/task-spec`` annotation), for a
    group's per-task minimums (`GroupSpec.task_minimums`)."""
    created: float = 0.0
    """Creation time (seconds since the epoch); orders pods of equal priority, oldest first."""
    gates: tuple[str, ...] = ()
    """``spec.schedulingGates`` still on the pod. Kubernetes never schedules a gated pod: it
    waits until every gate is removed, and until then does not count toward its gang."""
    reserved_for: tuple[str, ...] | None = None
    """``None`` for a pod. Set on what holds GPUs without being a pod (a ResourceClaim's
    devices, GPUs a node does not publish): the keys of the pods whose eviction frees it, every
    one of them needed; empty when no pod's does (it is never a preemption victim)."""
    devices: PodDevices | None = None
    """The pod's DRA devices (its ResourceClaims, or ``nvidia.com/gpu`` served by a
    DeviceClass); None for a pod that asks for none. Set by `with_devices`."""
    group_key: str | None = field(init=False, repr=False, compare=False)
    """The key of the pod's PodGroup (same namespace), as `GroupSpec.key`; ``None`` without a
    group. Worked out once: planning reads it for every held pod, many times a cycle."""

    def __post_init__(self) -> None:
        key = str(GroupKey(self.namespace, self.group)) if self.group is not None else None
        object.__setattr__(self, "group_key", key)

    @property
    def namespace(self) -> str:
        return self.key.split("/", 1)[0]

    @property
    def gated(self) -> bool:
        return bool(self.gates)

    @property
    def wants_gpu(self) -> bool:
        return self.gpus > 0 or self.gpu_milli > 0

    @property
    def gpu_demand_milli(self) -> int:
        """Milli-GPUs this pod takes: 1000 per whole GPU, or its share."""
        return self.gpus * WHOLE_GPU_MILLI + self.gpu_milli

    @property
    def constraint_key(self) -> str:
        """Identifies the static node constraints (selector, affinity, tolerations) so that
        pods with equal constraints share one cached node mask."""
        if self.devices is not None:
            return repr(
                (self.node_selector, self.required_terms, self.tolerations, self.devices.signature)
            )
        return repr((self.node_selector, self.required_terms, self.tolerations))

    def with_devices(self, devices: PodDevices) -> PodRequest:
        """This pod asking for ``devices`` too: the GPUs of its claims (placed as whole GPUs of
        one node; where the shared claims it joins were allocated is a check of its own)."""
        if devices.refusal is not None or devices.extended is not None:
            return dataclasses.replace(self, devices=devices)
        resources = self.resources
        if devices.channels:  # the node's one IMEX channel, counted as a resource
            resources = {**resources, CHANNEL_RESOURCE: devices.channels}
        if devices.shared_memory:  # memory of shared devices, counted as a resource
            resources = {**resources, SHARE_RESOURCE: devices.shared_memory}
        return dataclasses.replace(
            self, devices=devices, gpus=self.gpus + devices.gpus, gpu_milli=0, resources=resources
        )

    @property
    def shape_key(self) -> tuple[object, ...]:
        """Pods with equal shape keys fit exactly the same nodes."""
        return (
            tuple(sorted(self.resources.items())),
            self.gpus,
            self.gpu_milli,
            self.constraint_key,
        )

    @staticmethod
    def from_pod(pod: Pod, gpu_resource: str = GPU_RESOURCE) -> PodRequest:
        """Reduces a parsed pod; raises `InvalidObjectError` for a contradictory GPU request."""
        requests = dict(pod.requests())
        gpus = requests.pop(gpu_resource, 0)
        share = pod.gpu_milli()
        gpu_milli = 0
        if share is not None:
            if gpus > 1:
                raise InvalidObjectError(
                    wording.pod_label(pod.key),
                    f"metadata.annotations[{GPU_MILLI_ANNOTATION}]",
                    wording.share_of_many(gpus, gpu_resource),
                )
            gpus, gpu_milli = 0, share
        created = pod.metadata.creation_timestamp
        ref = pod.group_ref()  # a pod naming two groups is refused, never placed alone
        return PodRequest(
            key=pod.key,
            resources=requests,
            gpus=gpus,
            gpu_milli=gpu_milli,
            node_selector=tuple(sorted(pod.spec.node_selector.items())),
            required_terms=pod.required_terms,
            tolerations=tuple(pod.spec.tolerations),
            priority=pod.spec.priority or 0,
            preemption_policy=pod.spec.preemption_policy or PreemptionPolicy.PREEMPT_LOWER_PRIORITY,
            group=ref.group_name if ref is not None else None,
            app=pod.app,
            task=pod.metadata.annotations.get(VOLCANO_TASK_ANNOTATION),
            created=created.timestamp() if created is not None else 0.0,
            gates=pod.scheduling_gates,
        )

"""The `ObjectRef` of each object the service binds, patches or writes Events about."""

from __future__ import annotations

from gpusched.api.crds import API_VERSION
from gpusched.api.grouprefs import split_group_name
from gpusched.scheduler.groups import GroupRecord, WorkloadRecord
from gpusched.scheduler.ports import ObjectRef
from gpusched.scheduler.records import PodRecord, Reservation


def pod_ref(record: PodRecord) -> ObjectRef:
    meta = record.pod.metadata
    return ObjectRef("v1", "Pod", meta.namespace, meta.name, record.uid)


def reserved_ref(key: str, reservation: Reservation) -> ObjectRef:
    namespace, name = key.split("/", 1)
    return ObjectRef("v1", "Pod", namespace, name, reservation.uid)


def group_ref(record: GroupRecord) -> ObjectRef:
    """Ours, or the foreign object itself (its own API version and name)."""
    namespace, name = record.spec.key.split("/", 1)
    if record.api_version != API_VERSION:
        name = split_group_name(name)[1]
    return ObjectRef(record.api_version, record.spec.kind.value, namespace, name, record.uid)


def workload_ref(record: WorkloadRecord) -> ObjectRef:
    namespace, name = record.key.split("/", 1)
    return ObjectRef(API_VERSION, "Workload", namespace, name, record.uid)

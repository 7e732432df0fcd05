"""The resources the emulator serves, and minimal CRD manifests for our own kinds."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

CRD_GROUP = "scheduling.gpusched.io"
CRD_VERSION = "v1alpha1"

#: verbs advertised in discovery for every resource
VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class ResourceSpec:
    """One served resource: where it lives, how it is named, how its status is treated."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    status_subresource: bool = False
    #: what happens to `status` on create: "keep", "drop", or a fixed initial status
    status_on_create: str | dict[str, Any] = "keep"
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    extra_subresources: tuple[str, ...] = ()
    #: field paths usable in fieldSelector beyond metadata.name / metadata.namespace
    fields: tuple[str, ...] = ()
    singular: str = field(default="")

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> tuple[str, str]:
        """Resources are keyed by (group, plural): we serve one version of each."""
        return (self.group, self.plural)

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def subresources(self) -> tuple[str, ...]:
        return (("status",) if self.status_subresource else ()) + self.extra_subresources

    def base_path(self, namespace: str | None = None) -> str:
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace is not None:
            return f"{root}/namespaces/{namespace}/{self.plural}"
        return f"{root}/{self.plural}"

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        base = self.base_path(namespace)
        return f"{base}/{name}" if name is not None else base


NAMESPACES = ResourceSpec(
    "", "v1", "namespaces", "Namespace", namespaced=False, status_subresource=True,
    status_on_create={"phase": "Active"}, short_names=("ns",), fields=("status.phase",),
)  # fmt: skip
NODES = ResourceSpec(
    "", "v1", "nodes", "Node", namespaced=False, status_subresource=True,
    short_names=("no",), fields=("spec.unschedulable",),
)  # fmt: skip
PODS = ResourceSpec(
    "", "v1", "pods", "Pod", namespaced=True, status_subresource=True,
    status_on_create={"phase": "Pending"}, short_names=("po",), categories=("all",),
    extra_subresources=("binding",),
    fields=("spec.nodeName", "spec.schedulerName", "status.phase", "spec.restartPolicy",
            "spec.serviceAccountName", "status.podIP", "status.nominatedNodeName"),
)  # fmt: skip
CORE_EVENTS = ResourceSpec(
    "", "v1", "events", "Event", namespaced=True, short_names=("ev",),
    fields=("involvedObject.kind", "involvedObject.name", "involvedObject.namespace",
            "involvedObject.uid", "reason", "type", "source"),
)  # fmt: skip
EVENTS = ResourceSpec(
    "events.k8s.io", "v1", "events", "Event", namespaced=True, short_names=("ev",),
    fields=("regarding.kind", "regarding.name", "regarding.namespace", "reason", "type"),
)  # fmt: skip
LEASES = ResourceSpec("coordination.k8s.io", "v1", "leases", "Lease", namespaced=True)
CRDS = ResourceSpec(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition",
    namespaced=False, status_subresource=True, short_names=("crd", "crds"),
)  # fmt: skip
PODGROUPS = ResourceSpec(
    CRD_GROUP, CRD_VERSION, "podgroups", "PodGroup", namespaced=True,
    status_subresource=True, status_on_create="drop", short_names=("pg",),
)  # fmt: skip
COMPOSITEPODGROUPS = ResourceSpec(
    CRD_GROUP, CRD_VERSION, "compositepodgroups", "CompositePodGroup", namespaced=True,
    status_subresource=True, status_on_create="drop", short_names=("cpg",),
)  # fmt: skip
WORKLOADS = ResourceSpec(
    CRD_GROUP, CRD_VERSION, "workloads", "Workload", namespaced=True,
    status_subresource=True, status_on_create="drop", short_names=("wl",),
)  # fmt: skip

BUILTIN_RESOURCES: tuple[ResourceSpec, ...] = (
    NAMESPACES,
    NODES,
    PODS,
    CORE_EVENTS,
    EVENTS,
    LEASES,
    CRDS,
)
OUR_CRDS: tuple[ResourceSpec, ...] = (PODGROUPS, COMPOSITEPODGROUPS, WORKLOADS)


def crd_manifest(spec: ResourceSpec) -> dict[str, Any]:
    """A minimal apiextensions.k8s.io/v1 CustomResourceDefinition for `spec`."""
    singular = spec.singular or spec.kind.lower()
    version: dict[str, Any] = {
        "name": spec.version,
        "served": True,
        "storage": True,
        "schema": {
            "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        },
    }
    if spec.status_subresource:
        version["subresources"] = {"status": {}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{spec.plural}.{spec.group}"},
        "spec": {
            "group": spec.group,
            "scope": "Namespaced" if spec.namespaced else "Cluster",
            "names": {
                "plural": spec.plural,
                "singular": singular,
                "kind": spec.kind,
                "listKind": spec.list_kind,
                "shortNames": list(spec.short_names),
            },
            "versions": [version],
        },
    }


def spec_from_crd(crd: dict[str, Any]) -> list[ResourceSpec]:
    """The resources a CustomResourceDefinition declares (one per served version)."""
    body = crd.get("spec", {})
    names = body.get("names", {})
    result: list[ResourceSpec] = []
    for version in body.get("versions", []):
        if not version.get("served", True):
            continue
        subresources = version.get("subresources") or {}
        result.append(
            ResourceSpec(
                group=body["group"],
                version=version["name"],
                plural=names["plural"],
                kind=names["kind"],
                namespaced=body.get("scope", "Namespaced") == "Namespaced",
                status_subresource="status" in subresources,
                status_on_create="drop" if "status" in subresources else "keep",
                short_names=tuple(names.get("shortNames") or ()),
                categories=tuple(names.get("categories") or ()),
                singular=names.get("singular", ""),
            )
        )
    return result

"""DRA for the offline tools: the objects read, handed to the engine's one builder
(`gpusched.engine.dra`) exactly as the operator hands its watched ones.

One step the operator leaves to kube-controller-manager is done here: a pending pod whose
``spec.resourceClaims`` names a ResourceClaimTemplate, and whose claim the snapshot does not
have yet, gets the claim the controller would make from the template (named
``<pod>-<entry>``; the controller adds a random suffix), so that ``simulate`` says where the
pod would go once it exists. A template that is not in the input makes no claim: the pod
waits for it, as it would in the cluster.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from gpusched.api.dra import Meta, OwnerReference, ResourceClaim, ResourceClaimStatus
from gpusched.api.k8s import Pod, PodResourceClaimStatus
from gpusched.engine.dra import DraObjects, DraPod
from gpusched.inputs.objects import DraRead


@dataclass(slots=True)
class OfflineDra:
    objects: DraObjects
    pods: dict[str, DraPod] = field(default_factory=dict)
    """Pending pods by key, with the claims made from their templates named in their status."""


def offline_dra(read: DraRead, pending: Iterable[Pod]) -> OfflineDra:
    claims = dict(read.claims)
    pods: dict[str, DraPod] = {}
    for pod in pending:
        made = _made_from_templates(pod, read, claims)
        uid = pod.metadata.uid or f"uid-of-{pod.key}"
        pods[pod.key] = DraPod(made, uid)
    objects = DraObjects(read.slices, read.classes, claims, compute_domains=read.compute_domains)
    return OfflineDra(objects, pods)


def _made_from_templates(pod: Pod, read: DraRead, claims: dict[str, ResourceClaim]) -> Pod:
    """The pod with the claims of its templates made (and added to ``claims``)."""
    named = {s.name for s in pod.status.resource_claim_statuses}
    namespace = pod.metadata.namespace or "default"
    statuses = list(pod.status.resource_claim_statuses)
    for entry in pod.spec.resource_claims:
        template_name = entry.resource_claim_template_name
        if not template_name or entry.name in named:
            continue
        template = read.templates.get(f"{namespace}/{template_name}")
        if template is None:
            continue
        name = f"{pod.metadata.name}-{entry.name}"
        owner = OwnerReference(kind="Pod", name=pod.metadata.name, uid=pod.metadata.uid or "")
        claims.setdefault(
            f"{namespace}/{name}",
            ResourceClaim(
                metadata=Meta(name=name, namespace=namespace, owner_references=(owner,)),
                spec=template.spec.spec,
                status=ResourceClaimStatus(),
            ),
        )
        statuses.append(PodResourceClaimStatus(name=entry.name, resourceClaimName=name))
    if len(statuses) == len(pod.status.resource_claim_statuses):
        return pod
    status = pod.status.model_copy(update={"resource_claim_statuses": statuses})
    return pod.model_copy(update={"status": status})

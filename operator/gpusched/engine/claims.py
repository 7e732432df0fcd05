"""What a pod's ResourceClaims ask of the engine (`PodDevices`), and the devices the engine
gives them once it has chosen the pod's GPUs (`ClaimAllocation`).

A pod's claims are an input to `gpusched.engine.schedule.schedule` like its resources: its
`PodRequest.devices`. Where a claim cannot be allocated exactly (a selector beyond what we
evaluate, a class of another driver, a claim not created yet) the pod carries the reason
(`Refusal`) and the engine reports it; nothing outside the engine rewrites its result.

Built by `pod_devices` from the API models (the pod, its claims, the DeviceClasses), the same
way for the operator and for ``simulate``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, replace

from pydantic import ValidationError

from gpusched.api.dra import DeviceClass, ResourceClaim
from gpusched.api.k8s import Pod
from gpusched.api.selectors import NodeSelectorTerm
from gpusched.engine import wording
from gpusched.engine.devices import (
    COMPUTE_DOMAIN_DRIVER,
    NVIDIA_DRIVER,
    Check,
    ClaimError,
    NodeDevices,
    RequestDemand,
    claim_demand,
    class_checks,
)
from gpusched.engine.extended import ExtendedClaim, extended_claim
from gpusched.engine.result import ClaimAllocation, DeviceChoice
from gpusched.engine.shares import SharedDevice, ShareProblem, amounts, pick


def with_shared_memory(devices: PodDevices, shares: Sequence[SharedDevice]) -> PodDevices:
    """``devices`` with the memory its share requests consume (`PodDevices.shared_memory`),
    as every one of ``shares`` (the cluster's shared devices) counts it; refused with the
    reason when they disagree or there are none."""
    if devices.refusal is not None or not devices.shares:
        return devices
    total = 0
    for claim in devices.claims:
        for demand in claim.demands:
            if not demand.share:
                continue
            found = amounts(shares, demand.memory)
            amount = found.pop() if len(found) == 1 else None
            if amount is None:
                too_big = not found and demand.memory is not None
                why = wording.share_amounts(claim.key, demand.request, len(shares), too_big)
                return PodDevices(refusal=Refusal(why), stale=devices.stale)
            total += amount
    return replace(devices, shared_memory=total)


@dataclass(frozen=True, slots=True)
class ClaimDemand:
    """A claim to allocate for a pod (its requests in order), or, ``joins``, a shared claim
    allocated already that the pod is only added to (its devices are held already)."""

    key: str
    demands: tuple[RequestDemand, ...]
    joins: bool = False


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a pod's claims cannot be allocated now. ``waiting``: not wrong, only not ready
    (the claim is being made, written or released): the pod waits without backing off."""

    message: str
    waiting: bool = False


@dataclass(frozen=True, slots=True)
class Stale:
    """An allocation a previous attempt wrote for this pod and never bound: the operator
    releases it (``version``: the claim's resourceVersion as seen)."""

    claim: str
    uid: str
    version: str


@dataclass(frozen=True, slots=True)
class PodDevices:
    """A pod's DRA devices as the engine places them."""

    claims: tuple[ClaimDemand, ...] = ()
    extended: ExtendedClaim | None = None
    """For a pod asking ``nvidia.com/gpu`` served by a DeviceClass: the claim to create when
    it lands on a DRA node (its one `ClaimDemand` keyed by `extended_key`). It may land on a
    device-plugin node as well, where nothing is written."""
    node_terms: tuple[NodeSelectorTerm, ...] | None = None
    """Where the shared claims it joins were allocated (None: anywhere)."""
    refusal: Refusal | None = None
    stale: tuple[Stale, ...] = ()
    _: KW_ONLY
    shared_memory: int = 0
    """Bytes its share requests consume of shared devices (`gpusched.engine.shares`), as
    every shared device counts them (`with_shared_memory`)."""

    @property
    def gpus(self) -> int:
        return sum(d.count for c in self.claims for d in c.demands)

    @property
    def checks(self) -> tuple[Check, ...]:
        """What every GPU device of the node must pass (channels are checked apart)."""
        return tuple(
            sorted({c for p in self.claims for d in p.demands if not d.channel for c in d.checks})
        )

    @property
    def gpu_claims(self) -> int:
        """The claims it allocates GPUs for (a Fabric Manager partition is one claim's)."""
        return sum(
            1
            for c in self.claims
            if not c.joins and any(d.count for d in c.demands if not d.channel)
        )

    @property
    def compute_domains(self) -> tuple[str, ...]:
        """The uids of the ComputeDomains its channels are of."""
        return tuple(
            sorted({d.domain for c in self.claims for d in c.demands if d.channel and d.domain})
        )

    @property
    def channels(self) -> int:
        """IMEX channels to allocate with the GPUs (0 or 1: a node has one for a pod)."""
        return sum(1 for c in self.claims for d in c.demands if d.channel)

    @property
    def signature(self) -> tuple[object, ...]:
        """What the nodes a pod may use depend on (pods alike share cached node masks)."""
        return (
            self.checks,
            self.extended is not None,
            self.refusal is not None,
            repr(self.node_terms),
            (self.gpus, self.gpu_claims),  # a Fabric Manager partition of that many, one claim
            self.compute_domains,
            self.shares > 0,
        )

    @property
    def shares(self) -> int:
        """Its requests for some memory of one shared device."""
        return sum(1 for c in self.claims for d in c.demands if d.share)

    @property
    def joined(self) -> tuple[str, ...]:
        """The shared claims, allocated already, that the pod joins."""
        return tuple(c.key for c in self.claims if c.joins)


# ----- which claims a pod has -------------------------------------------------------------------


def extended_key(pod: Pod) -> str:
    """Stands for the claim of ``pod``'s extended-resource requests until the API server has
    named it (not a valid claim name, so no real claim is ever mistaken for it)."""
    return f"{pod.metadata.namespace}/<extended-resources of {pod.metadata.name}>"


class ClaimWaitingError(ClaimError):
    """Not wrong, only not ready: the claim is being made, written or released."""


def claim_keys(pod: Pod) -> list[str]:
    """The ResourceClaims of the pod's ``spec.resourceClaims``, in order; raises
    `ClaimWaitingError` while one made from a template is not created yet."""
    made = {s.name: s.resource_claim_name for s in pod.status.resource_claim_statuses}
    keys: list[str] = []
    for entry in pod.spec.resource_claims:
        if entry.resource_claim_name:
            keys.append(f"{pod.metadata.namespace}/{entry.resource_claim_name}")
            continue
        if entry.name not in made:
            raise ClaimWaitingError(
                wording.template_claim_pending(entry.name, entry.resource_claim_template_name)
            )
        name = made[entry.name]
        if name:  # None: the template decided the pod needs no claim
            keys.append(f"{pod.metadata.namespace}/{name}")
    return keys


def held_claims(pod: Pod) -> list[str]:
    """The pod's claims that exist by name now (for releasing them)."""
    try:
        return claim_keys(pod)
    except ClaimError:
        return [
            f"{pod.metadata.namespace}/{s.resource_claim_name}"
            for s in pod.status.resource_claim_statuses
            if s.resource_claim_name
        ]


# ----- building a pod's devices from the API models ---------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimsSeen:
    """The DRA objects a pod's devices are built from, and what is in flight.

    ``busy``: claims being written by a running transaction (the operator's; none offline);
    ``releasing``: claims whose unfinished allocation is being undone."""

    claims: Mapping[str, ResourceClaim]
    classes: Mapping[str, DeviceClass]
    gpu_resource: str
    busy: Collection[str] = ()
    releasing: Collection[str] = ()
    extended_class: DeviceClass | None = None
    """The DeviceClass serving ``gpu_resource`` through DRA, if any (`serving_class`)."""
    extended_claims: Mapping[str, ResourceClaim] | None = None
    """Claims made for a pod's extended resources, by the pod's uid (`extended_claims`)."""
    compute_domains: Mapping[str, tuple[str, str]] | None = None
    """The NVIDIA driver's ComputeDomains seen, by uid: (namespace, name)."""


def serving_class(classes: Mapping[str, DeviceClass], resource: str) -> DeviceClass | None:
    """The DeviceClass serving ``resource`` through DRA (the first by name, should several)."""
    serving = sorted(
        (c for c in classes.values() if c.spec.extended_resource_name == resource),
        key=lambda c: c.metadata.name,
    )
    return serving[0] if serving else None


def extended_claims(claims: Mapping[str, ResourceClaim]) -> dict[str, ResourceClaim]:
    """The claims made for pods' extended resources, by the pod's uid."""
    return {
        owner.uid: claim
        for claim in claims.values()
        for owner in claim.metadata.owner_references
        if owner.kind == "Pod" and owner.controller and claim.extended_for_pod(owner.uid)
    }


def pod_devices(
    pod: Pod,
    uid: str,
    gpus: int,
    gpu_milli: int,
    group_key: str | None,
    seen: ClaimsSeen,
    allocating: dict[str, tuple[str, str | None]],
) -> PodDevices | None:
    """The pod's DRA devices; None for a pod that asks for none (no claims, and no GPUs served
    by a DeviceClass). ``gpus``/``gpu_milli``: the pod's own ``nvidia.com/gpu`` request.
    ``allocating``: per claim not allocated yet, the first pod (and its gang) planning it this
    cycle, to tell pods of one gang sharing one; filled as pods are built, in queue order."""
    by_template = bool(pod.spec.resource_claims)
    whole = gpus > 0 and gpu_milli == 0
    if not by_template and not (seen.extended_class is not None and whole):
        return None
    stale: list[Stale] = []
    try:
        if by_template and (gpus > 0 or gpu_milli > 0):
            raise ClaimError(wording.gpus_besides_claims(seen.gpu_resource))
        if by_template:
            return _claimed(pod, uid, group_key, seen, stale, allocating)
        assert seen.extended_class is not None
        return _extended(pod, uid, gpus, seen, stale)
    except ClaimError as why:
        refusal = Refusal(str(why), isinstance(why, ClaimWaitingError))
        return PodDevices(refusal=refusal, stale=tuple(stale))


def _claimed(
    pod: Pod,
    uid: str,
    group_key: str | None,
    seen: ClaimsSeen,
    stale: list[Stale],
    allocating: dict[str, tuple[str, str | None]],
) -> PodDevices:
    """The pod's claims: to allocate, or (a shared claim allocated already) to join, on its
    allocation's node. Pods of different gangs may all plan to allocate one shared claim; the
    first whose bind goes out does, and the others are refused by the operator's allocator and
    join it next time, as kube-scheduler's in-flight allocations work."""
    claims: list[ClaimDemand] = []
    terms: tuple[NodeSelectorTerm, ...] | None = None
    for key in claim_keys(pod):
        claim = seen.claims.get(key)
        if claim is None:
            raise ClaimWaitingError(wording.claim_missing(key))
        if claim.metadata.deletion_timestamp is not None:
            raise ClaimError(wording.claim_deleting(key))
        if key in seen.releasing:
            raise ClaimWaitingError(wording.claim_releasing(key))
        if claim.reserved_for_pod(uid) and key not in seen.busy:
            stale.append(Stale(key, uid, claim.metadata.resource_version))
            raise ClaimWaitingError(wording.claim_reserved_unbound(key))
        if key in seen.busy:
            raise ClaimWaitingError(wording.claim_allocating(key))
        if claim.status.allocation is not None:
            claims.append(ClaimDemand(key, (), joins=True))
            terms = and_terms(terms, _allocation_terms(claim))
            continue
        first, first_group = allocating.setdefault(key, (pod.key, group_key))
        if first != pod.key and group_key is not None and group_key == first_group:
            raise ClaimError(wording.claim_shared_in_gang(key, first))
        claims.append(ClaimDemand(key, claim_demand(claim, seen.classes, seen.compute_domains)))
    return PodDevices(tuple(claims), node_terms=terms)


def _extended(pod: Pod, uid: str, gpus: int, seen: ClaimsSeen, stale: list[Stale]) -> PodDevices:
    """The claim to create should the pod land on a DRA node. A claim made for it by an
    attempt that never bound it is deleted first, as kube-scheduler does: its devices may not
    be the ones this decision picks."""
    device_class = seen.extended_class
    assert device_class is not None
    found = (seen.extended_claims or {}).get(uid)
    if found is not None:
        if found.key in seen.busy:
            raise ClaimWaitingError(wording.claim_allocating(found.key))
        if found.metadata.deletion_timestamp is None:
            stale.append(Stale(found.key, uid, found.metadata.resource_version))
        raise ClaimWaitingError(wording.extended_claim_unbound(found.key, seen.gpu_resource))
    name = device_class.metadata.name
    claim = extended_claim(pod, uid, seen.gpu_resource, name)
    if claim.count != gpus:
        raise ClaimError(wording.extended_count_mismatch(seen.gpu_resource, claim.count, gpus))
    checks = tuple(sorted(set(class_checks(device_class))))
    key = extended_key(pod)
    demands = tuple(
        RequestDemand(
            claim=key, request=request_name, count=count, checks=checks, device_class=name
        )
        for request_name, count in claim.requests
    )
    return PodDevices((ClaimDemand(key, demands),), claim)


def _allocation_terms(claim: ResourceClaim) -> tuple[NodeSelectorTerm, ...] | None:
    """The nodes an allocated claim can be used on (None: any node)."""
    allocation = claim.status.allocation
    selector = allocation.node_selector if allocation is not None else None
    if selector is None:
        return None
    try:
        return tuple(
            NodeSelectorTerm.model_validate(term)
            for term in selector.get("nodeSelectorTerms") or []
        )
    except ValidationError as error:
        raise ClaimError(wording.allocation_selector_unreadable(claim.key, error)) from None


def and_terms(
    left: tuple[NodeSelectorTerm, ...] | None, right: tuple[NodeSelectorTerm, ...] | None
) -> tuple[NodeSelectorTerm, ...] | None:
    """Nodes both selectors allow: each term of one ANDed with each term of the other."""
    if left is None or right is None:
        return right if left is None else left
    return tuple(
        a.model_copy(
            update={
                "match_expressions": [*a.match_expressions, *b.match_expressions],
                "match_fields": [*a.match_fields, *b.match_fields],
            }
        )
        for a in left
        for b in right
    )


# ----- the devices of a placement ---------------------------------------------------------------


def choose_devices(
    devices: PodDevices,
    node: NodeDevices | None,
    gpus: Sequence[int],
    used: Mapping[tuple[str, str], int] | None = None,
) -> tuple[ClaimAllocation, ...] | str:
    """The devices of GPUs ``gpus`` (in that order) given to the pod's claims, request by
    request; or why they cannot be (a GPU the node does not publish as a device). On a
    device-plugin node an extended-resource pod gets none: the kubelet gives it its GPUs.
    A share request takes the first shared device with room, ``used``: what is consumed of
    each (pool, device) already."""
    used = dict(used or {})
    if node is None:
        if devices.extended is not None:
            return ()
        return wording.no_devices_published(NVIDIA_DRIVER)
    chosen = [node.devices.get(i) for i in gpus]
    queue = [d for d in chosen if d is not None]
    if len(queue) != len(chosen) or len(queue) != devices.gpus:
        return wording.gpus_not_published(gpus, node.node)
    found: list[ClaimAllocation] = []
    for claim in devices.claims:
        if claim.joins:
            found.append(ClaimAllocation(claim.key, joins=True))
            continue
        results: list[DeviceChoice] = []
        for demand in claim.demands:
            if demand.channel:
                channel = node.channel(demand.checks)
                if channel is None:
                    return wording.no_channel_for(node.node, COMPUTE_DOMAIN_DRIVER, claim.key)
                results.append(
                    DeviceChoice(demand.request, COMPUTE_DOMAIN_DRIVER, channel[0], channel[1])
                )
                continue
            if demand.share:
                picked = pick(node.shares, demand.memory, used)
                if isinstance(picked, ShareProblem):
                    return wording.device_share_short(
                        picked.device, picked.wanted, picked.free, picked.outside
                    )
                share, amount = picked
                key = (share.pool, share.device)
                used = {**used, key: used.get(key, 0) + amount}
                results.append(
                    DeviceChoice(demand.request, NVIDIA_DRIVER, share.pool, share.device, amount)
                )
                continue
            for _ in range(demand.count):
                gpu = queue.pop(0)
                results.append(DeviceChoice(demand.request, gpu.driver, gpu.pool, gpu.device))
        found.append(ClaimAllocation(claim.key, tuple(results)))
    return tuple(found)

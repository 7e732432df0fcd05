"""The DRA transaction: a gang's ResourceClaims are all written before any of its pods is
bound (see `gpusched.scheduler.dra`)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpusched.api.dra import DELETE_PROTECTION_FINALIZER, ResourceClaim, parse_resource_claim
from gpusched.api.quantity import parse_bytes
from gpusched.engine.claims import choose_devices
from gpusched.engine.devices import COMPUTE_DOMAIN_DRIVER, NVIDIA_DRIVER, RequestDemand
from gpusched.engine.extended import ExtendedClaim
from gpusched.engine.holdings import Busy
from gpusched.engine.result import Binding
from gpusched.engine.shares import MEMORY
from gpusched.scheduler.dra.book import ClaimApi, ClaimBook
from gpusched.scheduler.dra.release import WRITE_ATTEMPTS, ClaimReleaser, RefusedError
from gpusched.scheduler.dra.view import DraView, View
from gpusched.scheduler.ports import ApiError, Fence, FencedError

logger = logging.getLogger(__name__)

WRITE_CONCURRENCY = 16
"""Claims of one gang written at the same time (each claim's own writes stay in order)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimWrite:
    """The allocation of one claim for one pod."""

    key: str
    pod: str
    uid: str
    node: str
    pool: str
    results: tuple[tuple[str, str], ...]
    """(request, device) pairs, in request order (joining: as the claim was seen allocated)."""
    demands: tuple[RequestDemand, ...]
    extended: ExtendedClaim | None = None
    """The claim to create first, for the pod's extended resources (``key`` stands for it
    until the API server names it)."""
    joins: bool = False
    """A shared claim allocated already: the pod is only added to its reservedFor."""
    consumed: tuple[tuple[str, int], ...] = ()
    """(request, bytes of memory) of its requests on devices shared by capacity."""

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(device for _, device in self.results)

    @property
    def shared_memory(self) -> int:
        return sum(amount for _, amount in self.consumed)


@dataclass(slots=True)
class _Done:
    write: ClaimWrite
    created: str | None = None
    """The key of the claim created for this write."""
    finalizer: bool = False
    allocated: bool = False

    @property
    def key(self) -> str:
        return self.created or self.write.key

    @property
    def touched(self) -> bool:
        return self.created is not None or self.finalizer or self.allocated


def _never_fenced() -> bool:
    return True


class ClaimAllocator:
    """Writes a gang's claims for the scheduler; see the module docstring."""

    def __init__(
        self,
        book: ClaimBook,
        view: DraView,
        releaser: ClaimReleaser,
        api: ClaimApi | None,
    ) -> None:
        self.book = book
        self.view = view
        self.releaser = releaser
        self.api = api
        self.writes: dict[str, ClaimWrite] = {}
        """Claims being written, by claim key: they hold their devices until done."""
        self.named: dict[str, str] = {}
        """Claims created for extended resources: the key that stood for each → its own."""
        self.allocation_seconds = 0.0
        self.contested: dict[str, object] = {}
        """Claims whose write met another writer's (allocated, or being deleted, meanwhile;
        or a 409 Conflict on every try), with what the decision saw of them (`_others`): a
        group refused for them tries again once the claim's watch shows another writer
        changed it (`contest_seen`, `contested_state`)."""
        """Total time spent writing claims (for the figures of the closing note)."""

    def contested_state(self, key: str) -> object:
        """What the watch shows others wrote on ``key``, if its last write met another
        writer's (None otherwise)."""
        return _others(self.book.claims.get(key)) if key in self.contested else None

    def contest_seen(self, writes: Iterable[ClaimWrite]) -> bool:
        """Whether the watch shows already what another writer did to a claim of ``writes``
        that it contested: a decision made now would see it."""
        for write in writes:
            key = self.named.get(write.key, write.key)
            if key in self.contested and _others(self.book.claims.get(key)) != self.contested[key]:
                return True
        return False

    @property
    def busy(self) -> dict[str, Busy]:
        return {
            self.named.get(key, key): (w.pool, w.devices, w.shared_memory)
            if w.consumed
            else (w.pool, w.devices)
            for key, w in self.writes.items()
        }

    async def resync(self) -> None:
        """Lists slices, classes and claims afresh (a new leader's first step): holdings
        come from what the API server has, never from what a previous leader remembered."""
        if self.api is None:
            self.book.listed = True
            return
        try:
            slices = await self.api.list_resource_slices()
            classes = await self.api.list_device_classes()
            claims = await self.api.list_resource_claims()
        except ApiError as error:
            if error.status != 404:
                raise
            logger.info("the API server serves no resource.k8s.io/v1: no DRA devices")
            slices, classes, claims = [], [], []
        self.book.replace_all(slices, classes, claims)

    def plan(self, binding: Binding, view: View | None) -> list[ClaimWrite] | str:
        """The claim writes placing ``binding``'s pod on the devices the engine chose
        (`Binding.devices`; a bind decided earlier, a nomination's, gets them from the same
        engine function), held from now on; or why they cannot be made (the devices' state
        changed since the view was built)."""
        found = view.pod_devices(binding.pod) if view is not None else None
        if found is None or view is None:
            return []
        uid, devices = found
        pod, node = binding.pod, binding.node
        node_devices = view.devices.get(node)
        if node_devices is None and devices.extended is not None:
            return []  # a device-plugin node: the kubelet gives the pod its nvidia.com/gpu
        chosen = binding.devices or choose_devices(devices, node_devices, binding.gpus)
        if devices.shares and node_devices is not None:
            # Memory of shared devices: chosen against every write and allocation now.
            chosen = choose_devices(devices, node_devices, binding.gpus, self._consumed())
        if isinstance(chosen, str):
            return f"node {node}: {chosen}"
        taken = self._taken()
        writes: list[ClaimWrite] = []
        for claim, allocation in zip(devices.claims, chosen, strict=True):
            if claim.joins:
                writes.append(self._join_write(claim.key, pod, uid, node))
                continue
            other = self.writes.get(claim.key)
            if other is not None:
                return (
                    f"ResourceClaim {claim.key} (shared) is being allocated for {other.pod}; "
                    "this pod joins it once that is done"
                )
            for device in allocation.devices:
                if not device.consumed and (device.pool, device.device) in taken:
                    return f"device {device.device} of {node} is held by another claim"
            results = tuple((d.request, d.device) for d in allocation.devices)
            pool = allocation.devices[0].pool if allocation.devices else node
            writes.append(
                ClaimWrite(
                    key=claim.key,
                    pod=pod,
                    uid=uid,
                    node=node,
                    pool=pool,
                    results=results,
                    demands=claim.demands,
                    extended=devices.extended,
                    consumed=tuple(
                        (d.request, d.consumed) for d in allocation.devices if d.consumed
                    ),
                )
            )
        for write in writes:
            if not write.joins:  # a joined claim's devices are held by the claim already
                self.writes[write.key] = write
        return writes

    def _join_write(self, key: str, pod: str, uid: str, node: str) -> ClaimWrite:
        """Joining a shared claim as allocated now (its results, to check at the write)."""
        claim = self.book.claims.get(key)
        allocation = claim.status.allocation if claim is not None else None
        results = tuple(
            (r.request, r.device) for r in (allocation.devices.results if allocation else ())
        )
        return ClaimWrite(
            key=key, pod=pod, uid=uid, node=node, pool="", results=results, demands=(), joins=True
        )

    def _taken(self) -> set[tuple[str, str]]:
        taken = {(w.pool, d) for w in self.writes.values() for d in w.devices}
        for claim in self.book.claims.values():
            if claim.status.allocation is not None:
                taken |= {(r.pool, r.device) for r in claim.status.allocation.devices.results}
        return taken

    def _consumed(self) -> dict[tuple[str, str], int]:
        """Bytes of memory consumed of each shared (pool, device): by allocated claims (as
        their ``consumedCapacity`` records) and by claims being written."""
        used: dict[tuple[str, str], int] = {}
        for claim in self.book.claims.values():
            allocation = claim.status.allocation
            for result in allocation.devices.results if allocation is not None else ():
                memory = (result.consumed_capacity or {}).get(MEMORY)
                if memory is not None:
                    key = (result.pool, result.device)
                    used[key] = used.get(key, 0) + _bytes(memory)
        for write in self.writes.values():
            consumed = dict(write.consumed)
            for request, device in write.results:
                if request in consumed:
                    key = (write.pool, device)
                    used[key] = used.get(key, 0) + consumed[request]
        return used

    def drop(self, writes: Iterable[ClaimWrite]) -> None:
        for write in writes:
            if self.writes.get(write.key) is write:
                del self.writes[write.key]
                self.named.pop(write.key, None)

    async def allocate(
        self, writes: Sequence[ClaimWrite], fence: Fence = _never_fenced
    ) -> str | None:
        """Writes every claim of a gang (each claim's writes in order, claims side by side, as
        kube-scheduler's PreBind runs per pod); on any failure releases every claim the gang's
        writes touched and returns why. Done, the writes stop holding devices through
        `writes`: the claims hold them.

        Every write is fenced like a bind (``fence``: this decision's term, within the renew
        deadline): once it says no nothing more is written, releases included. What was
        written stays on the claims, which the next leader lists and gives back."""
        if not writes:
            return None
        loop = asyncio.get_running_loop()
        started = loop.time()
        slots = asyncio.Semaphore(WRITE_CONCURRENCY)
        steps = [_Done(write) for write in writes]

        async def write_one(step: _Done) -> None:
            async with slots:
                await self._write(step, fence)

        try:
            outcomes = await asyncio.gather(
                *(write_one(step) for step in steps), return_exceptions=True
            )
            failed = [(s, o) for s, o in zip(steps, outcomes, strict=True) if o is not None]
            if failed:
                touched = [(s.key, s.write.uid) for s in steps if s.touched]
                await self.releaser.release_all(touched, fence)
                step, error = failed[0]
                if not isinstance(error, ApiError | RefusedError):
                    raise error
                return f"allocating ResourceClaim {step.key} failed: {error}"
        finally:
            self.drop(writes)
            self.allocation_seconds += loop.time() - started
        return None

    async def _write(self, step: _Done, fence: Fence) -> None:
        assert self.api is not None
        write = step.write
        if write.extended is not None:
            await self._create(step, write.extended, fence)
        namespace, name = step.key.split("/", 1)
        decided = _others(self.book.claims.get(step.key))
        for attempt in range(WRITE_ATTEMPTS):
            body = self.book.raw_claims.get(step.key) if attempt == 0 else None
            if body is None:
                body = await self.api.get_claim(namespace, name)
                if body is None:
                    raise RefusedError(f"ResourceClaim {step.key} is gone")
            try:
                await self._write_once(step, body, fence)
                break
            except RefusedError:
                self.contested[step.key] = decided
                raise
            except ApiError as error:
                if error.status != 409 or attempt == WRITE_ATTEMPTS - 1:
                    if error.status == 409:
                        self.contested[step.key] = decided
                    raise
        self.contested.pop(step.key, None)
        if write.extended is not None:
            # The kubelet finds the claim, and each container's requests, through this.
            _check(fence, f"the extendedResourceClaimStatus of {write.pod}")
            pod_namespace, pod = write.pod.split("/", 1)
            await self.api.patch_pod_status(
                pod_namespace, pod, write.extended.pod_status(name), fence
            )

    async def _create(self, step: _Done, extended: ExtendedClaim, fence: Fence) -> None:
        """Creates the claim for the pod's extended resources (not yet allocated: the same
        writes as every claim's follow)."""
        assert self.api is not None
        write = step.write
        namespace = write.pod.split("/", 1)[0]
        _check(fence, f"creating the ResourceClaim of {write.pod}'s extended resources")
        created = await self.api.create_claim(extended.body(namespace), fence)
        step.created = f"{namespace}/{created['metadata']['name']}"
        self.named[write.key] = step.created
        self.book.upsert_claim(created)

    async def _write_once(self, step: _Done, body: Mapping[str, Any], fence: Fence) -> None:
        assert self.api is not None
        write = step.write
        claim = parse_resource_claim(body)
        if claim.metadata.deletion_timestamp is not None:
            raise RefusedError(f"ResourceClaim {step.key} is being deleted")
        if write.joins:
            await self._join(step, body, claim, fence)
            return
        if claim.status.allocation is not None:
            raise RefusedError(f"ResourceClaim {step.key} got allocated elsewhere meanwhile")
        current = dict(body)
        if DELETE_PROTECTION_FINALIZER not in claim.metadata.finalizers:
            metadata = dict(current["metadata"])
            metadata["finalizers"] = [*claim.metadata.finalizers, DELETE_PROTECTION_FINALIZER]
            _check(fence, f"the finalizer of ResourceClaim {step.key}")
            current = await self.api.update_claim({**current, "metadata": metadata}, fence)
            step.finalizer = True
            self.book.upsert_claim(current)
        status = dict(current.get("status") or {})
        status["allocation"] = self._allocation(write, claim)
        status["reservedFor"] = [*(status.get("reservedFor") or []), self._consumer(write)]
        _check(fence, f"the allocation of ResourceClaim {step.key}")
        updated = await self.api.update_claim_status({**current, "status": status}, fence)
        step.allocated = True
        self.book.upsert_claim(updated)

    async def _join(
        self, step: _Done, body: Mapping[str, Any], claim: ResourceClaim, fence: Fence
    ) -> None:
        """Adds the pod to a shared claim's reservedFor, as kube-scheduler does for a claim
        allocated already: its allocation stays as it is."""
        assert self.api is not None
        write = step.write
        allocation = claim.status.allocation
        now = tuple((r.request, r.device) for r in allocation.devices.results) if allocation else ()
        if allocation is None or now != write.results:
            raise RefusedError(f"ResourceClaim {step.key} was allocated afresh meanwhile")
        status = dict(body.get("status") or {})
        status["reservedFor"] = [*(status.get("reservedFor") or []), self._consumer(write)]
        _check(fence, f"the reservedFor of ResourceClaim {step.key}")
        updated = await self.api.update_claim_status({**body, "status": status}, fence)
        step.allocated = True
        self.book.upsert_claim(updated)

    @staticmethod
    def _consumer(write: ClaimWrite) -> dict[str, str]:
        return {"resource": "pods", "name": write.pod.split("/", 1)[1], "uid": write.uid}

    def _allocation(self, write: ClaimWrite, claim: ResourceClaim) -> dict[str, Any]:
        # An IMEX channel request is the ComputeDomain driver's; every other is a GPU.
        channels = {d.request for d in write.demands if d.channel}
        consumed = dict(write.consumed)
        results: list[dict[str, Any]] = []
        for request, device in write.results:
            result: dict[str, Any] = {
                "request": request,
                "driver": COMPUTE_DOMAIN_DRIVER if request in channels else NVIDIA_DRIVER,
                "pool": write.pool,
                "device": device,
            }
            if request in consumed:  # a device shared by capacity: what this claim takes
                result["shareID"] = str(uuid.uuid4())
                result["consumedCapacity"] = {MEMORY: _quantity(consumed[request])}
            results.append(result)
        config: list[dict[str, Any]] = []
        for demand in write.demands:
            device_class = self.book.classes.get(demand.device_class)
            for item in device_class.spec.config if device_class is not None else ():
                if item.opaque is not None:
                    config.append(
                        {
                            "source": "FromClass",
                            "requests": [demand.request],
                            "opaque": item.opaque.model_dump(exclude_none=True),
                        }
                    )
        for own in claim.spec.devices.config:
            if own.opaque is not None:
                entry: dict[str, Any] = {
                    "source": "FromClaim",
                    "opaque": own.opaque.model_dump(exclude_none=True),
                }
                if own.requests:
                    entry["requests"] = list(own.requests)
                config.append(entry)
        allocation: dict[str, Any] = {
            "devices": {"results": results},
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": [write.node]}
                        ]
                    }
                ]
            },
        }
        if config:
            allocation["devices"]["config"] = config
        return allocation


def _quantity(amount: int) -> str:
    """Bytes as a binary quantity, the way the API server writes it back (``30000Mi``)."""
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = 1024 ** ("KMGTPE".index(suffix[0]) + 1)
        if amount and amount % unit == 0:
            return f"{amount // unit}{suffix}"
    return str(amount)


def _bytes(memory: str | int) -> int:
    """A recorded ``consumedCapacity`` memory; one that cannot be read counts as none (the
    API server validates it as a quantity)."""
    try:
        return parse_bytes(memory)
    except ValueError:
        return 0


def _check(fence: Fence, what: str) -> None:
    """The early answer (the client asks the fence again as the request goes out)."""
    if not fence():
        raise FencedError(what)


def _others(claim: ResourceClaim | None) -> object:
    """What of ``claim`` another writer's conflicting write changes: its allocation, whom it
    is reserved for, its deletion; not the finalizer, which our own writes add and take
    back (a claim whose write failed changes only there by our hand)."""
    if claim is None:
        return None
    status = claim.status
    deleting = claim.metadata.deletion_timestamp is not None
    return (claim.metadata.uid, status.allocation, status.reserved_for, deleting)

"""Giving ResourceClaims back: after a failed transaction, a refused bind, or an allocation
a previous leader wrote and never bound."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gpusched.api.dra import DELETE_PROTECTION_FINALIZER, parse_resource_claim
from gpusched.scheduler.dra.book import ClaimApi, ClaimBook
from gpusched.scheduler.ports import ApiError, Fence

logger = logging.getLogger(__name__)

WRITE_ATTEMPTS = 3
"""Tries of one claim write that met a conflict (someone else updated the claim meanwhile)."""


class ClaimReleaser:
    """Releases claims gpusched allocated (see the module docstring)."""

    def __init__(self, book: ClaimBook, api: ClaimApi | None) -> None:
        self.book = book
        self.api = api

    async def release_all(
        self, touched: Sequence[tuple[str, str]], fence: Fence | None = None
    ) -> None:
        """Releases each (claim, pod uid) a failed transaction wrote, the last written first,
        under the transaction's fence."""
        for key, uid in reversed(touched):
            try:
                await self.release(key, uid, clear=True, fence=fence)
            except ApiError as error:
                logger.warning("cannot release ResourceClaim %s: %s", key, error)

    async def release(self, key: str, uid: str, *, clear: bool, fence: Fence | None = None) -> None:
        """Removes pod ``uid`` from the claim's reservedFor and, with ``clear`` and nobody
        else reserving it, its allocation and our finalizer (the claim is free again)."""
        if self.api is None:
            return
        namespace, name = key.split("/", 1)
        for attempt in range(WRITE_ATTEMPTS):
            body = await self.api.get_claim(namespace, name)
            if body is None:
                return
            try:
                await self._release_once(body, uid, clear=clear, fence=fence)
                return
            except ApiError as error:
                if error.status != 409 or attempt == WRITE_ATTEMPTS - 1:
                    raise

    async def _release_once(
        self, body: Mapping[str, Any], uid: str, *, clear: bool, fence: Fence | None = None
    ) -> None:
        """Gives the claim back; one made for pod ``uid``'s extended resources is deleted
        besides, as kube-scheduler's Unreserve deletes it (the next attempt makes its own)."""
        assert self.api is not None
        current = dict(body)
        if clear and parse_resource_claim(body).extended_for_pod(uid):
            await self._delete(current, fence)
            return
        status = dict(current.get("status") or {})
        reserved = [r for r in status.get("reservedFor") or [] if r.get("uid") != uid]
        changed = len(reserved) != len(status.get("reservedFor") or [])
        if reserved:
            status["reservedFor"] = reserved
        else:
            status.pop("reservedFor", None)
            if clear and status.get("allocation") is not None:
                status.pop("allocation")
                changed = True
        if changed:
            current = await self.api.update_claim_status({**current, "status": status}, fence)
            self.book.upsert_claim(current)
        finalizers = list((current.get("metadata") or {}).get("finalizers") or [])
        if clear and not reserved and DELETE_PROTECTION_FINALIZER in finalizers:
            metadata = dict(current["metadata"])
            metadata["finalizers"] = [f for f in finalizers if f != DELETE_PROTECTION_FINALIZER]
            current = await self.api.update_claim({**current, "metadata": metadata}, fence)
            self.book.upsert_claim(current)

    async def _delete(self, body: dict[str, Any], fence: Fence | None) -> None:
        """Our finalizer off (the allocation goes with the claim), then the claim deleted,
        only if it is still the one seen (its uid)."""
        assert self.api is not None
        metadata = dict(body["metadata"])
        finalizers = list(metadata.get("finalizers") or [])
        if DELETE_PROTECTION_FINALIZER in finalizers:
            metadata["finalizers"] = [f for f in finalizers if f != DELETE_PROTECTION_FINALIZER]
            body = await self.api.update_claim({**body, "metadata": metadata}, fence)
            self.book.upsert_claim(body)
        await self.api.delete_claim(metadata["namespace"], metadata["name"], metadata["uid"], fence)
        self.book.delete_claim(f"{metadata['namespace']}/{metadata['name']}")

    async def release_stale(self, key: str, uid: str, version: str) -> None:
        """Undoes an allocation a scheduler wrote for pod ``uid`` and never bound, if the
        claim is still exactly as it was seen (``version``): a claim that changed since may
        have been allocated afresh, and must not lose that allocation."""
        if self.api is None or key in self.book.releasing:
            return
        self.book.releasing.add(key)
        try:
            namespace, name = key.split("/", 1)
            body = await self.api.get_claim(namespace, name)
            seen = ((body or {}).get("metadata") or {}).get("resourceVersion")
            if body is not None and seen == version:
                await self._release_once(body, uid, clear=True)
        except ApiError as error:
            logger.warning("cannot release the unfinished allocation of %s: %s", key, error)
        finally:
            self.book.releasing.discard(key)

    async def release_pod(self, pod: str, uid: str, keys: Iterable[str]) -> None:
        """After a refused bind: the pod's claims (``keys``, and the one made for its extended
        resources) are released as kube-scheduler's Unreserve does, so that the devices go
        back to the pool."""
        extended = [k for k, c in self.book.claims.items() if c.extended_for_pod(uid)]
        for key in [*keys, *extended]:
            claim = self.book.claims.get(key)
            if claim is not None and claim.reserved_for_pod(uid):
                try:
                    await self.release(key, uid, clear=True)
                except ApiError as error:
                    logger.warning("cannot release ResourceClaim %s of %s: %s", key, pod, error)


class RefusedError(Exception):
    """A claim cannot be written as planned (gone, deleted, allocated meanwhile)."""

"""``PodScheduled=False`` on the pods gpusched cannot place, written as kube-scheduler writes it.

Cluster autoscalers take up a pending pod only when it carries ``PodScheduled`` with status
``False`` and reason ``Unschedulable`` (Karpenter's ``FailedToSchedule`` in
``pkg/utils/pod/scheduling.go``, cluster-autoscaler's ``UnschedulablePodLister.List`` in
``utils/kubernetes/listers.go``), and so do kube-state-metrics' ``kube_pod_status_unschedulable``
and most "stuck pending" alerts. The reasons:

- ``Unschedulable``: no node (or no domain) takes the pod now: a new node could help. The
  message is the group's reason, as its status and Events say it.
- ``WaitingForPods``: its gang has fewer pods than its ``minCount`` (or a composite fewer
  child groups): no node would help, so autoscalers leave it alone.
- ``WaitingForPodGroup``: the group the pod names does not exist (yet).
- ``Invalid``: the pod's group is invalid: a user's fix, not a node, is needed.
- ``SchedulingGated`` is the API server's own (it writes it while gates are left).

On bind the API server itself sets ``PodScheduled=True`` (atomically with ``spec.nodeName``),
which clears ours. A patch carries the ``resourceVersion`` the decision saw: a pod bound or
changed since is refused (409) rather than marked unschedulable after its bind.

Writes are fenced like binds (the API client asks the leadership at the moment the body goes
out), coalesced per pod (the newest wanted condition replaces a queued one), made only when
they change what the pod shows, and paced: at most `WRITES_PER_SECOND`, `CONCURRENCY` in flight,
and a change of message alone (a gang's count of pods, the free GPUs it names) at most every
`MESSAGE_REFRESH_SECONDS` per pod. 5,000 pods left pending are written once each, then not
again while their reason stays the same.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from gpusched.api.k8s import POD_SCHEDULED, PodCondition
from gpusched.scheduler.clock import Clock
from gpusched.scheduler.ports import ApiError, ClusterApi, FencedError, ObjectRef

logger = logging.getLogger(__name__)

UNSCHEDULABLE = "Unschedulable"
"""``corev1.PodReasonUnschedulable``: the reason autoscalers look for."""
WAITING_FOR_POD_GROUP = "WaitingForPodGroup"

WRITES_PER_SECOND = 50.0
"""Condition patches sent per second at most, all pods together (kube-scheduler's own client
is held to 50 queries a second by default). 5,000 newly pending pods are marked within about
100 s, the first of them at once; binds never wait behind them (they use other requests)."""
CONCURRENCY = 4
"""Condition patches in flight at once."""
MESSAGE_REFRESH_SECONDS = 30.0
"""A pod's condition whose status and reason stay but whose message changes is rewritten at
most this often (in seconds): the message names counts that move with every pod created."""
MAX_MESSAGE = 1024
"""Condition messages are cut here, as Events' are."""


@dataclass(frozen=True, slots=True)
class Wanted:
    """The ``PodScheduled=False`` condition a pending pod should show."""

    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class _Write:
    ref: ObjectRef
    version: str
    wanted: Wanted


class PodConditions:
    def __init__(
        self,
        *,
        api: ClusterApi,
        clock: Clock,
        pending: Callable[[str], bool],
        writes_per_second: float = WRITES_PER_SECOND,
    ) -> None:
        """``pending(key)``: whether the pod is still ours to mark (not reserved, not bound),
        asked again just before each write goes out."""
        self.api = api
        self.clock = clock
        self.pending = pending
        self.interval = 1.0 / writes_per_second
        self._queue: dict[str, _Write] = {}
        self._sent: dict[str, tuple[Wanted, float]] = {}
        """Pod uid → what we last wrote and when (our clock)."""
        self._wake = asyncio.Event()
        self._slots = asyncio.Semaphore(CONCURRENCY)
        self._next_at = float("-inf")
        self._epoch = 0
        self.written = 0
        """Patches sent, for the figures and the tests."""

    def want(
        self, ref: ObjectRef, version: str, shown: PodCondition | None, wanted: Wanted
    ) -> bool:
        """Queues ``wanted`` for the pod unless it shows it already (or our last write said
        it, moments ago). Returns whether the reason changed: the pod's Event is posted then."""
        wanted = Wanted(wanted.reason, wanted.message[:MAX_MESSAGE])
        sent = self._sent.get(ref.uid)
        before = sent[0] if sent is not None else _as_wanted(shown)
        if before == wanted or _as_wanted(shown) == wanted:
            self._queue.pop(ref.key, None)  # it says so already (or will, once watched)
            return False
        changed = before is None or before.reason != wanted.reason
        since = sent[1] if sent is not None else float("-inf")
        if not changed and self.clock() - since < MESSAGE_REFRESH_SECONDS:
            return False  # only the message moved, and it was written just now
        self._queue[ref.key] = _Write(ref, version, wanted)
        self._wake.set()
        return changed

    def forget(self, uid: str, key: str | None = None) -> None:
        self._sent.pop(uid, None)
        if key is not None:
            self._queue.pop(key, None)

    def reset(self) -> None:
        """Leadership was lost: what waits is for nobody now, and what we wrote says nothing
        of what the pods show when we lead again (they are read afresh then)."""
        self._queue.clear()
        self._sent.clear()
        self._epoch += 1

    @property
    def idle(self) -> bool:
        return not self._queue

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            await self._drain(paced=True)

    async def flush(self) -> None:
        """Sends everything queued now, unpaced (tests and shutdown)."""
        await self._drain(paced=False)

    async def _drain(self, *, paced: bool) -> None:
        self._wake.clear()
        tasks: set[asyncio.Task[None]] = set()
        while self._queue:
            key = next(iter(self._queue))
            write = self._queue.pop(key)
            if not self.pending(key):
                continue  # bound or reserved since: the bind sets PodScheduled=True
            if paced:
                wait = self._next_at - self.clock()
                if wait > 0:
                    await self.clock.sleep(wait)
                self._next_at = max(self._next_at, self.clock() - self.interval) + self.interval
            await self._slots.acquire()
            task = asyncio.create_task(self._send(write, self._epoch))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.gather(*tasks)

    async def _send(self, write: _Write, epoch: int) -> None:
        condition = {
            "type": POD_SCHEDULED,
            "status": "False",
            "reason": write.wanted.reason,
            "message": write.wanted.message,
            "lastProbeTime": None,
        }
        try:
            await self.api.patch_pod_status(
                write.ref, {"conditions": [condition]}, version=write.version
            )
        except FencedError:
            return
        except ApiError as error:
            if error.status not in (404, 409):  # gone, or changed since: decided afresh
                logger.warning("cannot set PodScheduled on pod %s: %s", write.ref.key, error)
            return
        finally:
            self._slots.release()
        if epoch == self._epoch:
            self._sent[write.ref.uid] = (write.wanted, self.clock())
            self.written += 1


def _as_wanted(shown: PodCondition | None) -> Wanted | None:
    if shown is None or shown.status != "False":
        return None
    return Wanted(shown.reason or "", shown.message or "")

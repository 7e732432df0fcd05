"""An API server in memory, watches that lag, faults on demand, and operator replicas on top.

`World` is the truth: nodes, pods (``spec.nodeName`` and the ``gpusched.io/gpus`` annotation
set by a bind, atomically, as the real server does) and groups with their status. Every change
is published to each replica's `Watch`, which delivers it some driver steps later, in order,
as Kopf would: a dropped watch loses what was queued and relists every object as an upsert
(Kopf synthesises no deletions on a relist). `ChaosApi` is one replica's `ClusterApi` on the
world; `Faults` says which call fails how. A replica is the real `ClusterState` and
`Scheduler`, fed like `gpusched.handlers` feeds them.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import random
from collections import Counter, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from gpusched.api.config import SchedulerConfig
from gpusched.api.k8s import GPUS_ANNOTATION
from gpusched.engine.groups import GroupKind
from gpusched.scheduler.clock import Clock
from gpusched.scheduler.decider import Telemetry
from gpusched.scheduler.factory import build_scheduler
from gpusched.scheduler.ports import ApiError, Fence, FencedError, Listing, ObjectRef
from gpusched.scheduler.service import Scheduler
from gpusched.scheduler.state import ClusterState

Body = dict[str, Any]
RESYNC_SECONDS = 5.0
"""The scheduler's periodic resync of pods and nodes: twice as often as the operator's, so
that a run's few minutes of fake time see many of them, in every interleaving."""
KINDS = {"PodGroup": GroupKind.POD_GROUP, "CompositePodGroup": GroupKind.COMPOSITE}
LATE_COMMIT_SECONDS = 4.0
EPOCH = datetime(2026, 11, 30, tzinfo=UTC)
"""The world's clock reads seconds since this instant (creation timestamps)."""
"""How long after a bind the server may still commit it, the client having given up at
once: up to the bind timeout. The Lease's gap (leaseDuration − renewDeadline, longer than
the bind timeout by configuration) is what keeps another leader from acting before."""


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch, as the API server applies ``application/merge-patch+json``."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


@dataclass
class World:
    """The API server's objects. Keys: node name; ``namespace/name`` for the rest."""

    nodes: dict[str, Body] = field(default_factory=dict)
    pods: dict[str, Body] = field(default_factory=dict)
    groups: dict[str, Body] = field(default_factory=dict)
    watches: list[Watch] = field(default_factory=list)
    version: int = 0
    uids: int = 0
    binds: int = 0
    satisfied: set[str] = field(default_factory=set)
    """Gangs (PodGroup keys) that had ``minCount`` pods bound at some moment."""
    observers: list[Callable[[str, str | None, Body], None]] = field(default_factory=list)
    """Told every change as it happens, before any watch delivers it (the runner's trace)."""
    authority: Callable[[str], bool] = lambda writer: True
    """Whether replica ``writer`` holds the Lease within its renew deadline now: the
    runner's own account of the Lease, not the replica's."""
    late_writes: list[str] = field(default_factory=list)
    """Writes that reached the server from a replica without that authority, and binds
    that put a node over its GPUs although the replica knew every pod on it."""
    late_binds: list[tuple[float, ObjectRef, str, dict[str, str]]] = field(default_factory=list)
    """Binds the server took but commits only later, by the clock (after the client gave
    up): within `LATE_COMMIT_SECONDS`, as a real server's write reaches etcd or fails
    within its own deadline."""
    now: Callable[[], float] = lambda: 0.0
    step: int = 0
    bound_at: dict[str, int] = field(default_factory=dict)
    """The version at which each pod got its node."""

    def authorise(self, writer: str, what: str) -> None:
        if writer and not self.authority(writer):
            self.late_writes.append(f"{writer} wrote after its renew deadline: {what}")

    def commit_late_binds(self, everything: bool = False) -> None:
        due = [b for b in self.late_binds if everything or b[0] <= self.now()]
        self.late_binds = [b for b in self.late_binds if b not in due]
        for _, ref, node, extra in due:
            with contextlib.suppress(ApiError):  # the pod was bound, replaced or deleted since
                self.bind(ref, node, extra)

    def publish(self, kind: str, type_: str | None, body: Body) -> None:
        self.version += 1
        body.setdefault("metadata", {})["resourceVersion"] = str(self.version)
        for observer in self.observers:
            observer(kind, type_, body)
        for watch in self.watches:
            watch.push(kind, type_, copy.deepcopy(body))

    def new_uid(self) -> str:
        self.uids += 1
        return f"uid-{self.uids}"

    def stamp(self, body: Body) -> None:
        """A new object's uid and creationTimestamp, as the API server sets them on create
        (whole seconds, from the world's clock): the scheduler orders work by age, and equal
        stamps fall back to names."""
        metadata = body["metadata"]
        metadata["uid"] = self.new_uid()
        created = EPOCH + timedelta(seconds=int(self.now()))
        metadata["creationTimestamp"] = created.strftime("%Y-%m-%dT%H:%M:%SZ")

    # ----- writes ----------------------------------------------------------------------------

    def put_node(self, body: Body) -> None:
        name = body["metadata"]["name"]
        self.nodes[name] = body
        self.publish("Node", "ADDED", body)

    def delete_node(self, name: str) -> None:
        body = self.nodes.pop(name, None)
        if body is not None:
            self.publish("Node", "DELETED", body)

    def create_pod(self, body: Body) -> None:
        self.stamp(body)
        key = _key(body)
        assert key not in self.pods, key
        self.pods[key] = body
        self.publish("Pod", "ADDED", body)
        if body["spec"].get("nodeName"):
            self.bound_at[key] = self.version
        self._note_gang(body)

    def modify_pod(self, key: str, change: Callable[[Body], None]) -> None:
        body = self.pods.get(key)
        if body is not None:
            change(body)
            self.publish("Pod", "MODIFIED", body)

    def delete_pod(self, key: str) -> None:
        body = self.pods.pop(key, None)
        if body is not None:
            self.publish("Pod", "DELETED", body)

    def bind(self, ref: ObjectRef, node: str, annotations: Mapping[str, str]) -> None:
        body = self.pods.get(ref.key)
        if body is None:
            raise ApiError(404, f'pods "{ref.name}" not found')
        if ref.uid and body["metadata"]["uid"] != ref.uid:
            raise ApiError(409, "Precondition failed: UID in precondition does not match")
        if body["spec"].get("nodeName"):
            raise ApiError(409, f"pod {ref.name} is already assigned to a node")
        body["spec"]["nodeName"] = node
        body["metadata"].setdefault("annotations", {}).update(annotations)
        self.binds += 1
        self.publish("Pod", "MODIFIED", body)
        self.bound_at[ref.key] = self.version
        self._note_gang(body)

    def put_group(self, body: Body) -> None:
        self.stamp(body)
        body["metadata"]["generation"] = 1
        self.groups[_key(body)] = body
        self.publish(body["kind"], "ADDED", body)

    def patch_status(self, ref: ObjectRef, status: Mapping[str, Any]) -> None:
        body = self.groups.get(ref.key)
        if body is None or body["kind"] != ref.kind:
            raise ApiError(404, f"{ref.kind} {ref.key} not found")
        body["status"] = merge_patch(body.get("status") or {}, status)
        self.publish(body["kind"], "MODIFIED", body)

    # ----- reads -----------------------------------------------------------------------------

    def live_pods(self) -> list[Body]:
        return [p for p in self.pods.values() if not _finished(p)]

    def members(self, group: str) -> list[Body]:
        namespace, name = group.split("/", 1)
        return [
            p
            for p in self.pods.values()
            if p["metadata"]["namespace"] == namespace
            and (p["metadata"].get("labels") or {}).get(GROUP_LABEL) == name
        ]

    def _note_gang(self, pod: Body) -> None:
        group = (pod["metadata"].get("labels") or {}).get(GROUP_LABEL)
        if not group:
            return
        key = f"{pod['metadata']['namespace']}/{group}"
        body = self.groups.get(key)
        if body is None or body["kind"] != "PodGroup":
            return
        minimum = body["spec"]["schedulingPolicy"].get("gang", {}).get("minCount", 1)
        bound = [p for p in self.members(key) if p["spec"].get("nodeName")]
        if len(bound) >= minimum:
            self.satisfied.add(key)


GROUP_LABEL = "scheduling.gpusched.io/pod-group"


def _key(body: Mapping[str, Any]) -> str:
    return f"{body['metadata'].get('namespace', 'default')}/{body['metadata']['name']}"


def _gpu_request(pod: Mapping[str, Any]) -> int:
    return sum(
        int(c.get("resources", {}).get("requests", {}).get("nvidia.com/gpu", 0))
        for c in pod["spec"].get("containers") or []
    )


def _finished(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


# ----- watches ---------------------------------------------------------------------------------


@dataclass(eq=False)
class Watch:
    """One replica's watch of everything: events in order, each due some steps later."""

    world: World
    max_lag: int
    rng: random.Random
    queue: deque[tuple[int, str, str | None, Body]] = field(default_factory=deque)
    step: int = 0
    lost_node_deletions: int = 0
    """Nodes deleted while this watch was cut, never told (see `relist`)."""
    down_until: int | None = None
    """While set, the watch is down until this step (see `cut`)."""
    failed: bool = True
    """How it is down: failed (what happens meanwhile is lost; it is started over with a
    fresh list) or silent (nothing arrives; then it resumes from its resourceVersion and
    delivers what it held back, late)."""
    version: str = ""
    """The resourceVersion it has delivered everything up to (`gpusched.scheduler.resync.
    WatchMark`: a new leader acts before its lists are in once this passes theirs)."""
    lists: int = 1
    """Lists it has made: the first, and one after each start over (`relist`)."""

    def push(self, kind: str, type_: str | None, body: Body) -> None:
        if self.down_until is not None and self.failed:
            return  # nobody hears it: only the fresh list shows what it changed
        due = self.step + self.rng.randint(0, self.max_lag)
        if self.down_until is not None:
            due = max(due, self.down_until)  # silent: held back until it resumes
        if self.queue:
            due = max(due, self.queue[-1][0])  # in order: nothing overtakes
        self.queue.append((due, kind, type_, body))

    def due(self, everything: bool = False) -> list[tuple[str, str | None, Body]]:
        out = []
        while self.queue and (everything or self.queue[0][0] <= self.step):
            _, kind, type_, body = self.queue.popleft()
            out.append((kind, type_, body))
            self.version = max(self.version, body["metadata"]["resourceVersion"], key=_number)
        return out

    def cut(self, steps: int, failed: bool) -> None:
        """The watch goes down for ``steps`` driver steps. Failed (as with a 404 while a CRD
        is re-installed): what was queued and what happens meanwhile is lost, and it is
        started over with a fresh list. Silent (a connection that stopped carrying events):
        what happens meanwhile arrives only once it resumes."""
        if self.down_until is not None:
            # Down already: a failed watch stays failed (it is started over with a list),
            # whatever befalls it meanwhile.
            failed = failed or self.failed
        if failed:
            self.lost_node_deletions += sum(
                1 for _, kind, t, _ in self.queue if kind == "Node" and t == "DELETED"
            )
            self.queue.clear()
        self.down_until = max(self.down_until or 0, self.step + steps)
        self.failed = failed

    def back_if_due(self, everything: bool = False) -> None:
        if self.down_until is None or (self.step < self.down_until and not everything):
            return
        self.down_until = None
        if self.failed:
            self.relist()

    def relist(self) -> None:
        """The watch was cut and its resourceVersion expired (410): what was queued is lost,
        and a fresh list arrives as upserts (Kopf's ``type: None``), deletions unseen."""
        self.lists += 1
        lost = [kind for _, kind, t, _ in self.queue if t == "DELETED"]
        self.lost_node_deletions += lost.count("Node")
        self.queue.clear()
        for node in self.world.nodes.values():
            self.push("Node", None, copy.deepcopy(node))
        for pod in self.world.pods.values():
            self.push("Pod", None, copy.deepcopy(pod))
        for group in self.world.groups.values():
            self.push(group["kind"], None, copy.deepcopy(group))


# ----- faults ----------------------------------------------------------------------------------

BIND_FAULTS = (
    "bind-409",
    "bind-500",
    "bind-410",
    "bind-0-lost",
    "bind-0-applied",
    "bind-0-commits-later",
)
STATUS_FAULTS = ("status-500", "status-0-applied", "status-0-lost")


@dataclass
class Faults:
    """How likely each call fails, and what was injected (by kind)."""

    rng: random.Random
    bind_rate: float = 0.0
    status_rate: float = 0.0
    other_rate: float = 0.0
    max_latency: int = 0
    """A call yields to the event loop up to this many times (other tasks run meanwhile)."""
    injected: Counter[str] = field(default_factory=Counter)

    def pick(self, kinds: tuple[str, ...], rate: float) -> str | None:
        if rate and self.rng.random() < rate:
            kind = self.rng.choice(kinds)
            self.injected[kind] += 1
            return kind
        return None

    async def latency(self) -> None:
        if self.max_latency:
            turns = self.rng.randint(0, self.max_latency)
            if turns:
                self.injected["latency"] += 1
            for _ in range(turns):
                await _yield()

    def calm(self) -> None:
        self.bind_rate = self.status_rate = self.other_rate = 0.0
        self.max_latency = 0


async def _yield() -> None:
    await asyncio.sleep(0)


async def inline_to_thread(func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """Stands in for `asyncio.to_thread` during a run: the engine runs on the loop's thread,
    so that how far other tasks get meanwhile depends on the seed alone, not on a thread's
    timing — a seed always replays the same run."""
    await asyncio.sleep(0)
    return func(*args, **kwargs)


def _status_error(kind: str) -> ApiError:
    status = int(kind.rsplit("-", 1)[-1]) if kind[-1].isdigit() else 0
    messages = {409: "Operation cannot be fulfilled", 500: "etcdserver: request timed out"}
    messages[410] = "the resource version is too old"
    return ApiError(status, messages.get(status, "connection reset by peer"))


def _always() -> bool:
    return True


@dataclass(eq=False)
class ChaosApi:
    """One replica's `ClusterApi` on the world.

    Like `gpusched.k8s.client.KubeClusterApi`, every write asks ``fence`` (and a bind its
    own) right before it reaches the world, with no await in between. A stopped process
    (`stop`, as SIGSTOP) sits in whatever call it was in, before that check, until `resume`."""

    world: World
    faults: Faults
    alive: bool = True
    events: int = 0
    name: str = ""
    fence: Fence = _always
    stopped: bool = False
    stop_at_bind: int | None = None
    """Stop the process as its bind number ``stop_at_bind`` (counted from 1) is written."""
    binds_tried: int = 0
    knows: Callable[[str], str | None] = lambda key: None
    """Where the replica's cache has pod ``key`` (None: unbound or unknown)."""
    _resumed: asyncio.Event | None = None

    def _check(self) -> None:
        if not self.alive:
            raise asyncio.CancelledError  # the process is gone; nothing it sends arrives

    on_stop: asyncio.Event | None = None
    """Set when the process stops (for `Replica.settle`)."""

    def stop(self) -> None:
        self.stopped = True
        if self.on_stop is not None:
            self.on_stop.set()

    def resume(self) -> None:
        self.stopped = False
        if self._resumed is not None:
            self._resumed.set()
            self._resumed = None

    async def _gate(self) -> None:
        while self.stopped:
            if self._resumed is None:
                self._resumed = asyncio.Event()
            await self._resumed.wait()
        self._check()

    def _judge_count(self, key: str, node: str, decided: int, known: set[str]) -> None:
        """A bind that would put ``node`` over its GPUs is a violation when every pod the
        node holds was there before the bind was decided and the replica's cache had them
        there then (``known``): it had what it needed to see the node was full. (Another
        scheduler's pod
        landing unseen, or while the bind was on its way, is a race any two schedulers
        have, counted by `invariants.overcommitted`.)"""
        body = self.world.nodes.get(node)
        pod = self.world.pods.get(key)
        if body is None or pod is None or not _gpu_request(pod):
            return
        capacity = int(body["status"]["allocatable"]["nvidia.com/gpu"])
        others = [
            p
            for p in self.world.live_pods()
            if p["spec"].get("nodeName") == node and _key(p) != key
        ]
        used = sum(_gpu_request(p) for p in others) + _gpu_request(pod)
        seen = all(
            _key(p) in known and self.world.bound_at.get(_key(p), 0) <= decided for p in others
        )
        if used > capacity and seen:
            self.world.late_writes.append(
                f"{self.name} bound {key} onto {node}: {used} GPUs of {capacity}, "
                "every pod there known"
            )

    def _write(self, what: str, fence: Fence | None = None) -> None:
        """The last moment before a write lands: fenced, then authorised by the world."""
        if not (self.fence() and (fence is None or fence())):
            raise FencedError(what)
        self.world.authorise(self.name, what)

    async def bind(
        self,
        pod: ObjectRef,
        node: str,
        annotations: Mapping[str, str],
        fence: Fence | None = None,
    ) -> None:
        # What the world was, and what the cache knew of it, when the scheduler chose this.
        decided = self.world.version
        known = {k for k in self.world.pods if self.knows(k) == node}
        await self.faults.latency()
        self._check()
        self.binds_tried += 1
        if self.binds_tried == self.stop_at_bind:
            self.stop()
        await self._gate()
        fault = self.faults.pick(BIND_FAULTS, self.faults.bind_rate)
        if fault in ("bind-409", "bind-500", "bind-410", "bind-0-lost"):
            raise _status_error(fault.replace("-lost", ""))
        self._write(f"bind {pod.key} to {node}", fence)
        self._judge_count(pod.key, node, decided, known)
        if fault == "bind-0-commits-later":
            later = self.world.now() + self.faults.rng.uniform(0.0, LATE_COMMIT_SECONDS)
            self.world.late_binds.append((later, pod, node, dict(annotations)))
            raise ApiError(0, "TimeoutError: the client gave up; the server commits later")
        self.world.bind(pod, node, annotations)
        await self.faults.latency()
        if fault == "bind-0-applied":
            raise ApiError(0, "connection reset by peer (after the bind was applied)")

    async def get_pod(self, pod: ObjectRef) -> Mapping[str, Any] | None:
        await self.faults.latency()
        await self._gate()
        if self.faults.pick(("get-0",), self.faults.other_rate):
            raise ApiError(0, "timeout")
        body = self.world.pods.get(pod.key)
        return copy.deepcopy(body) if body is not None else None

    async def patch_status(self, obj: ObjectRef, status: Mapping[str, Any]) -> None:
        await self.faults.latency()
        await self._gate()
        fault = self.faults.pick(STATUS_FAULTS, self.faults.status_rate)
        if fault in ("status-500", "status-0-lost"):
            raise _status_error(fault.replace("-lost", ""))
        self._write(f"status of {obj.kind} {obj.key}")
        self.world.patch_status(obj, status)
        if fault == "status-0-applied":
            raise ApiError(0, "connection reset by peer (after the patch was applied)")

    async def patch_pod_status(
        self,
        pod: ObjectRef,
        status: Mapping[str, Any],
        fence: Fence | None = None,
        *,
        version: str = "",
    ) -> None:
        """Conditions only (``PodScheduled=False``): information the world does not keep."""
        await self._gate()
        self._write(f"status of pod {pod.key}")

    async def get_job(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return None  # the world has no Jobs

    async def create_event(self, body: Mapping[str, Any]) -> str:
        await self.faults.latency()
        await self._gate()
        if self.faults.pick(("event-500",), self.faults.other_rate):
            raise ApiError(500, "etcdserver: leader changed")
        self._write(f"event {body.get('reason')} on {body['involvedObject']['name']}")
        self.events += 1
        return f"event-{self.events}"

    async def patch_event(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        await self._gate()
        self._write(f"event {name}")

    async def list_pods(self) -> list[dict[str, Any]]:
        await self.faults.latency()
        await self._gate()
        if self.faults.pick(("list-0",), self.faults.other_rate):
            raise ApiError(0, "timeout")
        return fresh_pod_list(self.world)

    async def list_nodes(self) -> list[dict[str, Any]]:
        await self.faults.latency()
        await self._gate()
        if self.faults.pick(("list-0",), self.faults.other_rate):
            raise ApiError(0, "timeout")
        return [copy.deepcopy(b) for b in self.world.nodes.values()]

    async def list_groups(self) -> list[dict[str, Any]]:
        await self.faults.latency()
        await self._gate()
        if self.faults.pick(("list-0",), self.faults.other_rate):
            raise ApiError(0, "timeout")
        return [copy.deepcopy(b) for b in self.world.groups.values()]

    async def pages(
        self, plural: str, *, cached: bool = False, size: int = 4
    ) -> AsyncIterator[Listing]:
        """A list, consistent or from the watch cache alike: the world as it is when the
        first page is asked for, in pages of ``size``, each a request of its own (latency,
        and a timeout that may cut the list short)."""
        items = await (self.list_pods() if plural == "pods" else self.list_nodes())
        version = str(self.world.version)
        for start in range(0, max(len(items), 1), size):
            if start:
                await self.faults.latency()
                await self._gate()
                if self.faults.pick(("list-0",), self.faults.other_rate):
                    raise ApiError(0, "timeout")
            yield Listing(items[start : start + size], version)

    async def create_custom(self, body: Mapping[str, Any]) -> None:
        await self._gate()
        self._write(f"create {body['kind']} {_key(body)}")
        if _key(body) in self.world.groups:
            raise ApiError(409, "already exists")
        self.world.put_group(copy.deepcopy(dict(body)))


# ----- replicas --------------------------------------------------------------------------------


@dataclass(eq=False)
class Replica:
    """One operator process: its watch, its state, its scheduler, its view of the Lease."""

    name: str
    world: World
    watch: Watch
    api: ChaosApi
    state: ClusterState
    scheduler: Scheduler
    leader: bool = False
    background: set[asyncio.Future[None]] = field(default_factory=set)
    """Work of the runner's on this process, left to finish after a stop."""
    valid_until: float = float("-inf")
    """The replica's renew deadline, on the shared clock: it may act only before it."""
    clock: Callable[[], float] = lambda: 0.0

    @staticmethod
    def start(
        name: str,
        world: World,
        faults: Faults,
        config: SchedulerConfig,
        clock: Clock,
        telemetry: Telemetry,
        rng: random.Random,
        max_lag: int,
    ) -> Replica:
        """A fresh process: its watches start with a full list of every object."""
        watch = Watch(world, max_lag, rng)
        world.watches.append(watch)
        api = ChaosApi(world, faults, name=name)
        state = ClusterState()
        holder: list[Replica] = []
        scheduler = build_scheduler(
            config,
            state,
            api,
            telemetry=telemetry,
            clock=clock,
            leading=lambda: holder[0].leading(),
            resync_seconds=RESYNC_SECONDS,
        )
        api.fence = scheduler.may_write  # as `gpusched.handlers` wires the real client
        api.knows = lambda key: state.pods[key].node if key in state.pods else None
        replica = Replica(name, world, watch, api, state, scheduler, clock=clock)
        holder.append(replica)
        for kind, type_, body in _listing(world):
            replica.feed(kind, type_, body)
        watch.version = str(world.version)
        for plural in ("pods", "nodes"):  # as `gpusched.handlers.startup` tells the watches
            scheduler.resync.watching(plural, watch)
        return replica

    def leading(self) -> bool:
        """What the replica's elector says: it holds the Lease and its renew deadline has
        not passed on its clock."""
        return self.leader and self.api.alive and self.clock() < self.valid_until

    @property
    def stopped(self) -> bool:
        return self.api.stopped

    async def settle(self) -> None:
        """`Scheduler.settle`, unless the process stops meanwhile (its tasks then wait)."""
        await self.unless_stopped(self.scheduler.settle())

    async def unless_stopped(self, work: Awaitable[None]) -> None:
        """Awaits ``work`` of this process, or until the process stops; what still runs of
        ``work`` then goes on after the resume (cancelling it would cancel what it awaits,
        which a SIGSTOP never does)."""
        task = asyncio.ensure_future(work)
        self.api.on_stop = asyncio.Event()
        stopping = asyncio.ensure_future(self.api.on_stop.wait())
        if not self.stopped:
            await asyncio.wait([task, stopping], return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if not task.done():
            self.background.add(task)
            task.add_done_callback(self.background.discard)

    def feed(self, kind: str, type_: str | None, body: Body) -> None:
        """What `gpusched.handlers` does with one watch event."""
        scheduler = self.scheduler
        if kind == "Node":
            if type_ == "DELETED":
                scheduler.node_deleted(body["metadata"]["name"])
            else:
                scheduler.node_changed(body)
        elif kind == "Pod":
            if type_ == "DELETED":
                scheduler.pod_deleted(_key(body), str(body["metadata"].get("uid") or "") or None)
            else:
                scheduler.pod_changed(body, listed=type_ is None)
        elif type_ == "DELETED":
            scheduler.group_deleted(_key(body))
        else:
            scheduler.group_changed(KINDS[kind], body)

    def deliver(self, everything: bool = False) -> None:
        for kind, type_, body in self.watch.due(everything):
            self.feed(kind, type_, body)

    def crash(self) -> None:
        """The process dies: in-flight requests stop where they are; its watch ends."""
        self.api.alive = False
        self.leader = False
        for task in [*self.scheduler.background.running, *self.background]:
            task.cancel()
        if self.watch in self.world.watches:
            self.world.watches.remove(self.watch)


def _number(version: str) -> int:
    return int(version or 0)


def _listing(world: World) -> list[tuple[str, str | None, Body]]:
    return [
        *(("Node", None, copy.deepcopy(b)) for b in world.nodes.values()),
        *(("Pod", None, copy.deepcopy(b)) for b in world.pods.values()),
        *((b["kind"], None, copy.deepcopy(b)) for b in world.groups.values()),
    ]


def fresh_pod_list(world: World) -> list[Body]:
    return [copy.deepcopy(b) for b in world.pods.values()]


async def pod_pages(world: World, size: int = 4) -> AsyncIterator[Listing]:
    """The pods as a new leader lists them, without faults: one snapshot, read when the
    first page is asked for, in pages of ``size``."""
    pods, version = fresh_pod_list(world), str(world.version)
    for start in range(0, max(len(pods), 1), size):
        yield Listing(pods[start : start + size], version)


__all__ = [
    "BIND_FAULTS",
    "GPUS_ANNOTATION",
    "GROUP_LABEL",
    "STATUS_FAULTS",
    "ChaosApi",
    "Faults",
    "Replica",
    "Watch",
    "World",
    "fresh_pod_list",
    "inline_to_thread",
    "merge_patch",
    "pod_pages",
]

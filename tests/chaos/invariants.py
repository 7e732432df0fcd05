"""What must hold after (and, for GPUs, during) every chaos run. Each check returns the
violations it found as one-line messages; an empty list is a pass."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from gpusched.api.status import GroupPhase
from gpusched.scheduler.status import Counts, pod_group_phase
from tests.chaos.sim import GPUS_ANNOTATION, GROUP_LABEL, Body, Replica, World, _finished, _key

RACK = "topology.example.com/rack"
SCHEDULED_PHASES = {"Scheduled", "Running", "Succeeded"}
WAITING_PHASES = {"Pending", "Unschedulable"}


def no_gpu_shared(world: World) -> list[str]:
    """No GPU index of a node belongs to two live pods, and none is beyond the node's GPUs."""
    owners: dict[tuple[str, int], str] = {}
    found = []
    for pod in world.live_pods():
        node = pod["spec"].get("nodeName")
        raw = (pod["metadata"].get("annotations") or {}).get(GPUS_ANNOTATION)
        if not node or not raw:
            continue
        for gpu in (int(g) for g in raw.split(",")):
            other = owners.setdefault((node, gpu), _key(pod))
            if other != _key(pod):
                found.append(f"GPU {gpu} of {node} held by both {other} and {_key(pod)}")
            capacity = _gpus(world, node)
            if capacity is not None and gpu >= capacity:
                found.append(f"{_key(pod)} holds GPU {gpu} of {node}, which has {capacity}")
    return found


def gangs_whole_and_in_one_domain(world: World) -> tuple[list[str], int]:
    """(violations, partial gangs whose status says truthfully that they wait).

    A gang never satisfied may be partly bound only when a bind of it was rejected and the
    room for the rest is gone since; then its status must not claim it was scheduled."""
    found, partial = [], 0
    for key, group in world.groups.items():
        pods = _tree_pods(world, key)
        # Finished pods hold nothing: a later member may go elsewhere.
        live = [p for p in pods if p["spec"].get("nodeName") and not _finished(p)]
        racks = {_rack(world, p) for p in live} - {None}
        if _topology(group) == RACK and len(racks) > 1:
            found.append(f"{group['kind']} {key} spread over racks {sorted(racks)}")  # type: ignore[type-var]
        if group["kind"] != "PodGroup" or "gang" not in group["spec"]["schedulingPolicy"]:
            continue
        minimum = group["spec"]["schedulingPolicy"]["gang"]["minCount"]
        # Finished pods were bound too: the gang got its minCount even if one ended early.
        bound = [p for p in world.members(key) if p["spec"].get("nodeName")]
        if 0 < len(bound) < minimum and key not in world.satisfied:
            status = group.get("status") or {}
            phase = status.get("phase")
            if phase not in WAITING_PHASES | {"Failed"}:  # Failed: see status_agrees
                found.append(f"gang {key}: {len(bound)}/{minimum} bound but phase is {phase}")
            reason = next(iter(status.get("conditions") or []), {}).get("reason")
            if phase in WAITING_PHASES and reason not in ("Binding", "Degraded"):
                found.append(f"gang {key}: {len(bound)}/{minimum} bound but reason is {reason}")
            partial += 1
    return found, partial


def partial_gangs_alone_in_their_rack(world: World) -> list[str]:
    """Gangs bound below their minCount with no other such gang in their rack."""
    partial: dict[str, set[str | None]] = {}
    for key, group in world.groups.items():
        policy = group["spec"]["schedulingPolicy"]
        if group["kind"] != "PodGroup" or "gang" not in policy:
            continue
        bound = [p for p in world.members(key) if p["spec"].get("nodeName")]
        if 0 < len(bound) < policy["gang"]["minCount"]:
            partial[key] = {_rack(world, p) for p in bound}
    return sorted(
        key
        for key, racks in partial.items()
        if not any(racks & other for k, other in partial.items() if k != key)
    )


def status_agrees_with_pods(world: World) -> list[str]:
    """Every group's status counts its pods as they are, and its phase follows from them."""
    found = []
    for key, group in world.groups.items():
        status = group.get("status") or {}
        pods = _tree_pods(world, key)
        counts = Counts(
            scheduled=sum(1 for p in pods if p["spec"].get("nodeName")),
            running=sum(1 for p in pods if _phase(p) == "Running"),
            succeeded=sum(1 for p in pods if _phase(p) == "Succeeded"),
            failed=sum(1 for p in pods if _phase(p) == "Failed"),
        )
        said = (status.get("scheduled"), status.get("running"), status.get("succeeded"))
        if said != (counts.scheduled, counts.running, counts.succeeded):
            found.append(f"{group['kind']} {key}: status counts {said}, pods show {counts}")
        if group["kind"] == "PodGroup":
            policy = group["spec"]["schedulingPolicy"]
            minimum = policy["gang"]["minCount"] if "gang" in policy else 0
            want = pod_group_phase(minimum, counts, False).value
            phase = status.get("phase")
            if phase != want and not {phase, want} <= WAITING_PHASES:
                found.append(f"PodGroup {key}: phase {phase}, pods say {want}")
        condition = next(iter(status.get("conditions") or []), {})
        scheduled = status.get("phase") in SCHEDULED_PHASES
        if (condition.get("status") == "True") != scheduled:
            found.append(f"{key}: condition {condition.get('status')} with phase {status}")
    return found


def ledger_and_cache_agree(world: World, replicas: Iterable[Replica]) -> list[str]:
    """After a quiet spell: no replica holds a reservation (a standby may keep the one of an
    uncertain bind of its last term: it holds its GPUs meanwhile and is read back as soon as
    the standby leads again), and the leader's cache is the truth: no pod or node the API
    server does not have, every pod where the API server has it. A standby's cache may keep
    ghosts: it acts on nothing until it leads, and then it lists every pod afresh first."""
    found = []
    for replica in replicas:
        state = replica.state
        for key, reservation in state.ledger.reservations.items():
            if not replica.leader and replica.scheduler.unknown.retrying(key):
                continue  # an uncertain bind of its last term, read back once it leads
            pod = world.pods.get(key)
            if pod is None or pod["metadata"]["uid"] != reservation.uid:
                found.append(f"{replica.name}: reservation of {key} has no live pod")
            else:
                found.append(f"{replica.name}: reservation of {key} left after a quiet spell")
        if not replica.leader:
            continue
        ghosts = set(state.pods) - set(world.pods)
        if ghosts:
            found.append(f"{replica.name}: pods the API server does not have: {sorted(ghosts)}")
        for key, record in state.pods.items():
            pod = world.pods.get(key)
            if pod is not None and record.node != (pod["spec"].get("nodeName") or None):
                found.append(f"{replica.name}: {key} on {record.node}, really on {_node(pod)}")
        stale_nodes = set(state.nodes) - set(world.nodes)
        if stale_nodes:
            found.append(f"{replica.name}: nodes that are gone: {sorted(stale_nodes)}")
    return found


def overcommitted(world: World) -> Counter[str]:
    """Nodes whose live pods request more GPUs than they have (our binds race the default
    scheduler's, as with any two schedulers; counted, not a violation)."""
    used: Counter[str] = Counter()
    for pod in world.live_pods():
        node = pod["spec"].get("nodeName")
        if node:
            used[node] += _requested(pod)
    return Counter(
        {n: c for n, c in used.items() if (cap := _gpus(world, n)) is not None and c > cap}
    )


def _requested(pod: Body) -> int:
    total = 0
    for container in pod["spec"].get("containers") or []:
        total += int(container.get("resources", {}).get("requests", {}).get("nvidia.com/gpu", 0))
    return total


def _gpus(world: World, node: str) -> int | None:
    body = world.nodes.get(node)
    if body is None:
        return None
    return int(body["status"]["allocatable"]["nvidia.com/gpu"])


def _rack(world: World, pod: Body) -> str | None:
    node = world.nodes.get(pod["spec"].get("nodeName") or "")
    return None if node is None else node["metadata"]["labels"].get(RACK)


def _topology(group: Body) -> str | None:
    entries = (group["spec"].get("schedulingConstraints") or {}).get("topology") or []
    return entries[0]["key"] if entries else None


def _tree_pods(world: World, key: str) -> list[Body]:
    """The live pods of group ``key`` and of the groups under it."""
    namespace = key.split("/", 1)[0]
    keys, frontier = {key}, [key]
    while frontier:
        parent = frontier.pop().split("/", 1)[1]
        for child_key, body in world.groups.items():
            if (
                body["spec"].get("parentCompositePodGroupName") == parent
                and child_key not in keys
                and child_key.startswith(f"{namespace}/")
            ):
                keys.add(child_key)
                frontier.append(child_key)
    return [
        p
        for p in world.pods.values()
        if f"{p['metadata']['namespace']}/{(p['metadata'].get('labels') or {}).get(GROUP_LABEL)}"
        in keys
    ]


def _phase(pod: Body) -> str | None:
    phase: str | None = (pod.get("status") or {}).get("phase")
    return phase


def _node(pod: Body) -> str | None:
    return pod["spec"].get("nodeName") or None


__all__ = [
    "GroupPhase",
    "gangs_whole_and_in_one_domain",
    "ledger_and_cache_agree",
    "no_gpu_shared",
    "overcommitted",
    "status_agrees_with_pods",
]

"""What one pod watch event costs the operator, in CPU, from the line the API server sends
to our state: the operator's own watch (`gpusched.k8s.watch.Watch.feed`) and the state's
upsert.

    python bench/watch_events.py               # 3,000 events of each kind
    python bench/watch_events.py --events 20000

Four figures, each in microseconds of process CPU per event, on bound pods with a body as the
API server writes it (managed fields, a status with conditions):

1. The watch taking one line of the stream (JSON decoded, resourceVersion kept, the event
   handed over) to a handler that does nothing: all the watch itself costs an event.
2. The same handler awaited straight with an event already decoded: the baseline.
3. Our state's upsert of a status heartbeat (nothing the scheduler reads changed): no parse.
4. Our state's upsert of a pod whose labels changed: parsed.

Until the operator owned its watches, Kopf's per-object processing (its ``process_resource_
event`` around a handler doing nothing) cost 326 µs an event here, 13.6x a heartbeat's upsert.

Benchmarks are not tests: nothing here asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpusched.k8s.watch import Event, Kind, Readiness, Watch
from gpusched.scheduler.state import ClusterState
from testing.manifests import node, pod

PODS = Kind("", "v1", "pods", "Pod")


def bound_pods(count: int) -> list[dict[str, Any]]:
    bodies = []
    for i in range(count):
        body = pod(f"p-{i}", 1 + i % 4, node="n-1", at=list(range(1 + i % 4)), uid=f"u-{i}")
        body["metadata"]["resourceVersion"] = str(1000 + i)
        body["metadata"]["managedFields"] = [
            {
                "manager": "kubectl",
                "operation": "Update",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {"f:containers": {'k:{"name":"main"}': {"f:image": {}}}}},
            }
        ]
        body["status"] = {
            "phase": "Running",
            "podIP": f"10.0.{i // 250}.{i % 250}",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "10:00"}],
        }
        bodies.append(body)
    return bodies


def changed(bodies: list[dict[str, Any]], change: Callable[[dict[str, Any]], None]) -> list[Any]:
    out = []
    for body in bodies:
        copied = copy.deepcopy(body)
        metadata = copied["metadata"]
        metadata["resourceVersion"] = str(int(metadata["resourceVersion"]) + len(bodies))
        change(copied)
        out.append(copied)
    return out


def heartbeat(body: dict[str, Any]) -> None:
    body["status"]["conditions"][0]["lastTransitionTime"] = "11:00"


def relabel(body: dict[str, Any]) -> None:
    body["metadata"]["labels"]["team"] = "vision"


async def per_event(events: list[Any], handle: Callable[[Any], Awaitable[None]]) -> float:
    started = time.process_time()
    for event in events:
        await handle(event)
    return 1e6 * (time.process_time() - started) / len(events)


async def watch_figures(bodies: list[dict[str, Any]]) -> tuple[float, float]:
    async def nothing(event: Event) -> None:
        """A handler that does nothing: what is left is the watch's."""

    watch = Watch(api=None, kind=PODS, handler=nothing, readiness=Readiness())  # type: ignore[arg-type]
    events = [{"type": "MODIFIED", "object": b} for b in changed(bodies, heartbeat)]
    lines = [json.dumps(event).encode() for event in events]
    fed = await per_event(lines, watch.feed)
    straight = await per_event(events, nothing)
    return fed, straight


async def state_figures(bodies: list[dict[str, Any]]) -> tuple[float, float]:
    state = ClusterState()
    state.upsert_node(node("n-1"))
    for body in bodies:
        state.upsert_pod(body)

    async def upsert(body: Any) -> None:
        state.upsert_pod(body)

    beats = await per_event(changed(bodies, heartbeat), upsert)
    relabelled = await per_event(changed(bodies, relabel), upsert)
    return beats, relabelled


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--events", type=int, default=3000, help="events of each kind (3,000)")
    args = parser.parse_args()
    bodies = bound_pods(args.events)
    fed, straight = asyncio.run(watch_figures(bodies))
    beats, parsed = asyncio.run(state_figures(bodies))
    print(f"pod watch events, {args.events} of each kind, µs of CPU per event")
    print(f"{'figure':<58}{'µs':>8}")
    print(f"{'our watch: one line of the stream, handler doing nothing':<58}{fed:>8.1f}")
    print(f"{'  the handler awaited straight (baseline)':<58}{straight:>8.1f}")
    print(f"{'our state: a status heartbeat (no parse)':<58}{beats:>8.1f}")
    print(f"{'our state: labels changed (parsed)':<58}{parsed:>8.1f}")
    print(f"the watch is {fed / beats:.2f}x our handling of a heartbeat")


if __name__ == "__main__":
    main()

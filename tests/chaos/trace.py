"""The steps of one chaos run, printed as they happen (``runner --seed N --trace``).

A violation names what ended wrong; the trace shows how it got there: the actions each step
drew, every change of the API server's objects (created, bound, status phase, deleted, in the
order the server made them, before any watch delivers them), and each decision of the engine
that differs from the one before for the same group. A group's decision is printed once per
change, so a run of 36 steps stays a few hundred lines.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from gpusched.engine.result import ScheduleResult
from tests.chaos.sim import GPUS_ANNOTATION, GROUP_LABEL, Body, World

RACK = "topology.example.com/rack"


class Tracer:
    def __init__(self, world: World, write: Callable[[str], None]) -> None:
        self.world = world
        self.write = write
        self._nodes: dict[str, str | None] = {}
        """Pod → the node it was last seen bound to."""
        self._phases: dict[str, str | None] = {}
        """Pod or group → the status phase last seen."""
        self._decisions: dict[str, tuple[str, str, str]] = {}
        world.observers.append(self.observe)

    def step(self, step: int, now: float) -> None:
        self.write(f"step {step} (t={now:.1f} s)")

    def action(self, name: str) -> None:
        self.write(f"  {name}")

    def note(self, line: str) -> None:
        self.write(f"  {line}")

    # ----- the API server's objects ---------------------------------------------------------

    def observe(self, kind: str, type_: str | None, body: Body) -> None:
        key = _key(body)
        if kind == "Node":
            self._node(type_, body)
        elif kind == "Pod":
            self._pod(key, type_, body)
        else:
            self._group(kind, key, type_, body)

    def _node(self, type_: str | None, body: Body) -> None:
        name = body["metadata"]["name"]
        if type_ == "DELETED":
            self.note(f"- Node {name}")
        elif type_ == "ADDED":
            gpus = body["status"]["allocatable"].get("nvidia.com/gpu")
            self.note(f"+ Node {name} in {_label(body, RACK)}, {gpus} GPUs")

    def _pod(self, key: str, type_: str | None, body: Body) -> None:
        if type_ == "DELETED":
            self._nodes.pop(key, None)
            self._phases.pop(key, None)
            self.note(f"- Pod {key}")
            return
        node = body["spec"].get("nodeName")
        if type_ == "ADDED":
            self.note(f"+ Pod {key}{_pod_facts(body)}")
        elif node and node != self._nodes.get(key):
            gpus = (body["metadata"].get("annotations") or {}).get(GPUS_ANNOTATION, "")
            rack = _label(self.world.nodes.get(node, {}), RACK)
            self.note(f"bind {key} → {node} ({rack}) GPUs {gpus or '-'}")
        self._nodes[key] = node
        phase = (body.get("status") or {}).get("phase")
        if phase != self._phases.get(key):
            self._phases[key] = phase
            self.note(f"Pod {key} is {phase}")

    def _group(self, kind: str, key: str, type_: str | None, body: Body) -> None:
        if type_ == "ADDED":
            self.note(f"+ {kind} {key}{_group_facts(body['spec'])}")
            return
        phase = (body.get("status") or {}).get("phase")
        if phase != self._phases.get(key):
            self._phases[key] = phase
            self.note(f"status {kind} {key}: {phase}")

    # ----- the engine's decisions -----------------------------------------------------------

    def decided(self, result: ScheduleResult) -> None:
        for decision in result.groups:
            where = "/".join(decision.placement.values())
            now = (decision.phase.value, where, decision.message)
            if self._decisions.get(decision.name) != now:
                self._decisions[decision.name] = now
                place = f" in {where}" if where else ""
                self.note(f"decide {decision.name}: {now[0]}{place} ({decision.message})")

    def wrap(self, schedule: Callable[..., ScheduleResult]) -> Callable[..., ScheduleResult]:
        """``schedule`` that also traces what it decided."""

        def traced(*args: Any, **kwargs: Any) -> ScheduleResult:
            result = schedule(*args, **kwargs)
            self.decided(result)
            return result

        return traced


def _key(body: Mapping[str, Any]) -> str:
    metadata = body["metadata"]
    return f"{metadata.get('namespace', 'default')}/{metadata['name']}"


def _label(body: Mapping[str, Any], key: str) -> str:
    return str(((body.get("metadata") or {}).get("labels") or {}).get(key, "?"))


def _pod_facts(body: Body) -> str:
    group = (body["metadata"].get("labels") or {}).get(GROUP_LABEL)
    gpus = sum(
        int(c.get("resources", {}).get("requests", {}).get("nvidia.com/gpu", 0))
        for c in body["spec"].get("containers") or []
    )
    facts = [f"{gpus} GPU(s)"]
    if group:
        facts.append(f"group {group}")
    if body["spec"].get("schedulerName") != "gpusched":
        facts.append(f"scheduler {body['spec'].get('schedulerName')}")
    if body["spec"].get("nodeName"):
        facts.append(f"on {body['spec']['nodeName']}")
    return ": " + ", ".join(facts)


def _group_facts(spec: Mapping[str, Any]) -> str:
    policy = spec.get("schedulingPolicy") or {}
    gang = policy.get("gang") or {}
    facts = []
    if "minCount" in gang:
        facts.append(f"minCount {gang['minCount']}")
    elif "minGroupCount" in gang:
        facts.append(f"minGroupCount {gang['minGroupCount']}")
    else:
        facts.append("basic")
    topology = (spec.get("schedulingConstraints") or {}).get("topology") or []
    if topology:
        facts.append(f"topology {topology[0]['key']}")
    if spec.get("parentCompositePodGroupName"):
        facts.append(f"parent {spec['parentCompositePodGroupName']}")
    return ": " + ", ".join(facts)

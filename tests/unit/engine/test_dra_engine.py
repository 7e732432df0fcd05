"""DRA decided inside the engine: devices, claims and their reasons are engine inputs and
outputs (`gpusched.engine.dra`, `PodRequest.devices`, `Binding.devices`), with no operator in
the way. Every story builds its inputs from API objects, as the operator and ``simulate`` do."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpusched.api.config import GPU_RESOURCE
from gpusched.api.dra import parse_device_class, parse_resource_claim, parse_resource_slice
from gpusched.api.k8s import parse_node, parse_pod
from gpusched.engine.build import build_snapshot, topology_problem
from gpusched.engine.dra import DraCache, DraObjects, DraPod, dra_inputs
from gpusched.engine.groups import GroupSpec
from gpusched.engine.holdings import Busy
from gpusched.engine.policy import Policy
from gpusched.engine.request import PodRequest
from gpusched.engine.result import ClaimAllocation, DeviceChoice, Phase, Reason, ScheduleResult
from gpusched.engine.schedule import schedule
from testing import dra
from testing.engine import gang

NS = "ml"


@dataclass
class World:
    nodes: list[dict[str, Any]] = field(default_factory=list)
    slices: list[dict[str, Any]] = field(default_factory=list)
    classes: list[dict[str, Any]] = field(default_factory=lambda: [dra.device_class()])
    claims: list[dict[str, Any]] = field(default_factory=list)
    pods: list[dict[str, Any]] = field(default_factory=list)
    groups: list[GroupSpec] = field(default_factory=list)

    def dra_node(self, name: str, **slice_args: Any) -> None:
        self.nodes.append(dra.node(name))
        self.slices.append(dra.resource_slice(name, **slice_args))

    def claim_pod(self, name: str, count: int, *, group: str | None = None, **kw: Any) -> None:
        """A pod with its own claim ``<name>-gpus`` of ``count`` GPUs, created already."""
        self.claims.append(dra.claim(f"{name}-gpus", NS, count, **kw))
        body = dra.pod(name, NS, template="gpus", group=group)
        body["metadata"].update(uid=f"uid-{name}", creationTimestamp="2026-12-01T10:00:00Z")
        body["status"] = {
            "resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": f"{name}-gpus"}]
        }
        self.pods.append(body)

    def run(self, busy: Mapping[str, Busy] | None = None) -> ScheduleResult:
        """The engine's decision on this world; ``busy``: claims our allocator is writing."""
        nodes = [parse_node(n) for n in self.nodes]
        objects = DraObjects(
            {s["metadata"]["name"]: parse_resource_slice(s) for s in self.slices},
            {c["metadata"]["name"]: parse_device_class(c) for c in self.classes},
            {
                f"{c['metadata']['namespace']}/{c['metadata']['name']}": parse_resource_claim(c)
                for c in self.claims
            },
        )
        pods = [parse_pod(p) for p in self.pods]
        ready = [PodRequest.from_pod(p) for p in pods]
        sources = {p.key: DraPod(p, p.metadata.uid or "") for p in pods}
        inputs = DraCache().build(
            {n.name: n for n in nodes},
            objects,
            ready,
            sources,
            gpu_resource=GPU_RESOURCE,
            busy=busy,
        )
        snapshot = build_snapshot(nodes, inputs.held, devices=inputs.devices)
        return schedule(snapshot, inputs.ready, self.groups, Policy())


def _messages(result: ScheduleResult) -> dict[str, str]:
    return {f.pod: f.message for f in result.unschedulable}


def test_a_claims_pod_is_bound_with_the_devices_of_the_gpus_the_engine_chose() -> None:
    world = World()
    world.dra_node("n1")
    world.claim_pod("a", 2)
    result = world.run()
    (binding,) = result.bindings
    assert binding.node == "n1"
    assert len(binding.gpus) == 2
    (allocation,) = binding.devices
    assert allocation.claim == f"{NS}/a-gpus"
    assert not allocation.joins
    assert [dra.index_of_device(d.device) for d in allocation.devices] == list(binding.gpus)
    assert {(d.request, d.driver, d.pool) for d in allocation.devices} == {
        ("gpus", "gpu.nvidia.com", "n1")
    }
    assert binding.to_dict()["devices"] == [allocation.to_dict()]


def test_a_pod_asking_nvidia_gpu_is_told_why_a_dra_node_does_not_take_it() -> None:
    world = World()
    world.dra_node("n1")
    body = dra.pod("plain", NS, gpus=1)
    body["metadata"]["uid"] = "uid-plain"
    world.pods.append(body)
    result = world.run()
    assert result.bindings == []
    message = _messages(result)[f"{NS}/plain"]
    assert "its GPUs are gpu.nvidia.com devices (ResourceSlices)" in message, message
    assert "dra.gpusched.io" not in message


def test_a_claims_pod_short_of_devices_is_told_of_devices_not_of_nvidia_gpu() -> None:
    world = World()
    world.dra_node("n1")
    world.claim_pod("a", 6)
    world.claim_pod("b", 6)
    result = world.run()
    assert [b.pod for b in result.bindings] == [f"{NS}/a"]
    message = _messages(result)[f"{NS}/b"]
    assert "insufficient free gpu.nvidia.com devices" in message, message
    assert "nvidia.com/gpu" not in message.replace("gpu.nvidia.com", "")


def test_a_claim_larger_than_every_node_names_its_devices() -> None:
    world = World()
    world.dra_node("n1")
    world.claim_pod("a", 9)
    message = _messages(world.run())[f"{NS}/a"]
    assert message == (
        "its ResourceClaims ask for 9 gpu.nvidia.com devices; the largest node has 8"
    )


def test_a_selector_some_device_fails_rules_the_node_out_with_the_check_named() -> None:
    world = World()
    world.dra_node("n1")
    world.claim_pod("a", 1, selectors=("device.attributes['gpu.nvidia.com'].minor == 3",))
    result = world.run()
    assert result.bindings == []
    message = _messages(result)[f"{NS}/a"]
    assert "not every device passes the claims' selector" in message, message
    assert "minor == 3" in message, message


def test_a_gang_whose_claim_is_not_made_yet_waits_naming_the_pod() -> None:
    world = World()
    world.dra_node("n1")
    world.groups = [gang("train", 2, namespace=NS)]
    world.claim_pod("w0", 1, group="train")
    waiting = dra.pod("w1", NS, template="gpus", group="train")
    waiting["metadata"]["uid"] = "uid-w1"
    world.pods.append(waiting)
    result = world.run()
    assert result.bindings == []
    (decision,) = result.groups
    assert (decision.phase, decision.reason) == (Phase.PENDING, Reason.WAITING_FOR_PODS)
    assert decision.message == (
        f"{NS}/w1: waiting for the ResourceClaim of gpus (from ResourceClaimTemplate gpus) "
        "to be created"
    )
    by_pod = {f.pod: f.reason for f in result.unschedulable}
    assert by_pod[f"{NS}/w1"] is Reason.WAITING_FOR_PODS


def test_an_incomplete_pool_is_not_used_until_all_its_slices_are_published() -> None:
    # The pool says two slices; one is published: kube-scheduler would not allocate from it.
    world = World()
    world.dra_node("n1")
    world.slices[0]["spec"]["pool"]["resourceSliceCount"] = 2
    world.claim_pod("a", 1)
    result = world.run()
    assert result.bindings == []
    message = _messages(result)[f"{NS}/a"]
    assert "pool n1 has 1 of 2 ResourceSlices of its newest generation published" in message


def test_slices_that_disagree_on_generation_count_only_once_the_newest_is_complete() -> None:
    # Generation 2 is on its way (two slices, one published): generation 1 no longer counts
    # and generation 2 not yet; once its second slice is in, the pool is used again.
    world = World()
    world.dra_node("n1", generation=1)
    newer = dra.resource_slice("n1", generation=2)
    newer["metadata"]["name"] = "n1-gen2-a"
    newer["spec"]["pool"]["resourceSliceCount"] = 2
    newer["spec"]["devices"] = newer["spec"]["devices"][:4]
    world.slices.append(newer)
    world.claim_pod("a", 1)
    assert world.run().bindings == []
    rest = dra.resource_slice("n1", generation=2)
    rest["metadata"]["name"] = "n1-gen2-b"
    rest["spec"]["pool"]["resourceSliceCount"] = 2
    rest["spec"]["devices"] = rest["spec"]["devices"][4:]
    world.slices.append(rest)
    (binding,) = world.run().bindings
    assert binding.devices[0].devices[0].pool == "n1"


def test_a_dra_node_is_judged_by_its_devices_not_by_nvidia_gpu() -> None:
    node = parse_node(dra.node("n1"))
    found = World()
    found.dra_node("n1")
    objects = DraObjects({"s": parse_resource_slice(found.slices[0])})
    inputs = dra_inputs([node], objects, [], {}, GPU_RESOURCE)
    devices = inputs.devices["n1"]
    # Judged as a device-plugin node it would describe 8 GPUs but advertise none; before its
    # slices are seen it is not judged by its count at all.
    assert topology_problem(node) is None
    assert topology_problem(node, devices) is None
    plugin = dra.node("n2", plugin_gpus=4)
    assert "describes 8 GPUs but the node advertises 4" in str(topology_problem(parse_node(plugin)))
    snapshot = build_snapshot([node], devices=inputs.devices)
    assert snapshot.nodes[0].gpu_count == 8
    assert snapshot.nodes[0].topology_error is None
    # A device whose UUID is not in the topology is a real mismatch: still reported.
    wrong = parse_resource_slice(dra.resource_slice("n1", replace={3: "GPU-elsewhere"}))
    inputs = dra_inputs([node], DraObjects({"s": wrong}), [], {}, GPU_RESOURCE)
    problem = topology_problem(node, inputs.devices["n1"])
    assert "GPU-elsewhere" in str(problem)


def test_devices_of_two_requests_follow_the_claims_request_order() -> None:
    world = World()
    world.dra_node("n1")
    claim = dra.claim("a-gpus", NS, 1)
    second = {"name": "more", "exactly": {"deviceClassName": dra.CLASS, "count": 2}}
    claim["spec"]["devices"]["requests"].append(second)
    world.claims.append(claim)
    body = dra.pod("a", NS, template="gpus")
    body["metadata"]["uid"] = "uid-a"
    body["status"] = {"resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": "a-gpus"}]}
    world.pods.append(body)
    (binding,) = world.run().bindings
    (allocation,) = binding.devices
    assert [d.request for d in allocation.devices] == ["gpus", "more", "more"]
    assert allocation == ClaimAllocation(
        f"{NS}/a-gpus",
        tuple(
            DeviceChoice(request, "gpu.nvidia.com", "n1", f"gpu-{dra.gpus()[g][2]}")
            for request, g in zip(("gpus", "more", "more"), binding.gpus, strict=True)
        ),
    )


def test_a_gang_whose_claim_is_refused_says_so_as_data_too() -> None:
    world = World()
    world.dra_node("n1")
    world.groups = [gang("train", 2, namespace=NS)]
    world.claim_pod("w0", 1, group="train")
    world.claim_pod("w1", 1, group="train", device_class_name="no-such-class")
    (decision,) = world.run().groups
    assert (decision.phase, decision.reason) == (Phase.UNSCHEDULABLE, Reason.UNSCHEDULABLE)
    (attempt,) = decision.tried
    assert attempt.domain is None
    assert attempt.note == (
        f"{NS}/w1: ResourceClaim {NS}/w1-gpus: request gpus: DeviceClass no-such-class does "
        "not exist"
    )
    assert decision.message == attempt.note
    assert decision.attempts == (attempt.note,)

"""The NVIDIA driver's ComputeDomain rules decided before binding (its Prepare enforces them
on the node after the bind, where a violating pod binds and never starts): a channel claim
must be in its ComputeDomain's namespace, and a node serves one ComputeDomain at a time (the
plugin's node label ``resource.nvidia.com/computeDomain``)."""

from __future__ import annotations

from gpusched.api.config import GPU_RESOURCE
from gpusched.api.dra import parse_device_class, parse_resource_claim, parse_resource_slice
from gpusched.api.k8s import parse_node, parse_pod
from gpusched.engine.build import build_snapshot
from gpusched.engine.dra import DraObjects, DraPod, dra_inputs
from gpusched.engine.policy import Policy
from gpusched.engine.request import PodRequest
from gpusched.engine.result import ScheduleResult
from gpusched.engine.schedule import schedule
from tests.unit.engine.test_dra_engine import NS, World
from tests.unit.engine.test_imex_channels import channel_pod, imex_world

LABEL = "resource.nvidia.com/computeDomain"


def run(world: World, domains: dict[str, tuple[str, str]]) -> ScheduleResult:
    """`World.run` with the ComputeDomains seen."""
    nodes = [parse_node(n) for n in world.nodes]
    objects = DraObjects(
        {s["metadata"]["name"]: parse_resource_slice(s) for s in world.slices},
        {c["metadata"]["name"]: parse_device_class(c) for c in world.classes},
        {
            f"{c['metadata']['namespace']}/{c['metadata']['name']}": parse_resource_claim(c)
            for c in world.claims
        },
        compute_domains=domains,
    )
    pods = [parse_pod(p) for p in world.pods]
    sources = {p.key: DraPod(p, p.metadata.uid or "") for p in pods}
    ready = [PodRequest.from_pod(p) for p in pods]
    inputs = dra_inputs(nodes, objects, ready, sources, GPU_RESOURCE)
    snapshot = build_snapshot(nodes, inputs.held, devices=inputs.devices)
    return schedule(snapshot, inputs.ready, world.groups, Policy())


def test_a_channel_claim_in_another_namespace_than_its_compute_domain_is_refused() -> None:
    world = imex_world(1)
    channel_pod(world, "solo", 1)
    result = run(world, {"uid-cd-1": ("training", "cd")})
    assert result.bindings == []
    (failure,) = result.unschedulable
    assert "spec.devices.config[0].opaque.parameters.domainID" in failure.message
    assert "ComputeDomain training/cd" in failure.message, failure.message
    assert "only for a claim in its ComputeDomain's namespace" in failure.message, failure.message


def test_a_channel_claim_in_its_compute_domains_namespace_is_placed() -> None:
    world = imex_world(1)
    channel_pod(world, "solo", 1)
    result = run(world, {"uid-cd-1": (NS, "cd")})
    assert [b.node for b in result.bindings] == ["n0"]


def test_a_node_serving_another_compute_domain_is_not_used() -> None:
    world = imex_world(2)
    world.nodes[0]["metadata"]["labels"][LABEL] = "uid-cd-2"
    world.nodes[1]["metadata"]["labels"][LABEL] = "uid-cd-1"  # its own: fine
    channel_pod(world, "solo", 1)
    result = run(world, {})
    assert [b.node for b in result.bindings] == ["n1"]


def test_no_node_free_of_another_compute_domain_leaves_the_pod_pending_saying_why() -> None:
    world = imex_world(1)
    world.nodes[0]["metadata"]["labels"][LABEL] = "uid-cd-2"
    channel_pod(world, "solo", 1)
    result = run(world, {})
    assert result.bindings == []
    (failure,) = result.unschedulable
    assert "serves ComputeDomain uid-cd-2" in failure.message, failure.message
    assert "lets a node serve one ComputeDomain at a time" in failure.message, failure.message

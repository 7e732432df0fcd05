"""Devices the NVIDIA DRA driver publishes with ``allowMultipleAllocations`` (its
``ConsumableShares`` gate; DRAConsumableCapacity upstream): several claims share such a device
by its capacity. gpusched allocates whole GPUs only, so a shared device is never counted as a
whole free GPU (nor twice, for the several claims sharing it), a claim asking for a capacity
share is refused naming the field, and the node's problems say why its devices are left out."""

from __future__ import annotations

from typing import Any

from gpusched.api.dra import parse_resource_slice
from gpusched.api.k8s import parse_node
from gpusched.api.topology import TOPOLOGY_ANNOTATION, parse_topology_annotation
from gpusched.engine.build import topology_problem
from gpusched.engine.devices import node_devices
from testing import dra
from tests.unit.engine.test_dra_engine import NS, World

MINOR = {index: minor for index, _, minor in dra.gpus()}


def sharing(world: World, name: str, index: int) -> None:
    """A claim kube-scheduler allocated a share of GPU ``index`` of n1 to."""
    claim: dict[str, Any] = dra.claim(name, NS, 1)
    result = {
        "request": "gpus",
        "driver": dra.DRIVER,
        "pool": "n1",
        "device": f"gpu-{MINOR[index]}",
        "shareID": f"00000000-0000-0000-0000-00000000000{len(world.claims)}",
        "consumedCapacity": {"memory": "10Gi"},
    }
    claim["status"] = {
        "allocation": {"devices": {"results": [result]}},
        "reservedFor": [{"resource": "pods", "name": f"{name}-pod", "uid": f"uid-{name}"}],
    }
    world.claims.append(claim)


def _world() -> World:
    world = World()
    world.dra_node("n1", shared=(0, 1))
    sharing(world, "share-a", 0)
    sharing(world, "share-b", 0)
    return world


def test_shared_devices_are_never_free_whole_gpus_and_the_rest_are() -> None:
    world = _world()
    world.claim_pod("six", 6)
    (binding,) = world.run().bindings
    assert sorted(binding.gpus) == [2, 3, 4, 5, 6, 7]


def test_a_pod_needing_a_shared_device_as_a_whole_gpu_is_refused_saying_why() -> None:
    world = _world()
    world.claim_pod("seven", 7)
    result = world.run()
    assert result.bindings == []
    (failure,) = result.unschedulable
    assert "allow multiple allocations" in failure.message, failure.message
    shared = sorted(f"gpu-{MINOR[i]}" for i in (0, 1))
    assert f"devices {', '.join(shared)} allow" in failure.message, failure.message


def test_shared_devices_are_no_topology_problem_of_the_node() -> None:
    """The node's Warning Event is for topology that lies; shared devices are not that."""
    world = _world()
    node = parse_node(world.nodes[0])
    slices = [parse_resource_slice(s) for s in world.slices]
    topology = parse_topology_annotation(node.name, node.annotations[TOPOLOGY_ANNOTATION])
    found = node_devices(node.name, slices, topology)
    assert found is not None
    assert found.shared
    assert topology_problem(node, found) is None


def test_a_claim_for_a_capacity_share_is_refused_naming_the_field() -> None:
    world = World()
    world.dra_node("n1", shared=(0, 1))
    world.claim_pod("share", 1)
    world.claims[-1]["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {
        "requests": {"memory": "10Gi"}
    }
    result = world.run()
    assert result.bindings == []
    (failure,) = result.unschedulable
    assert "request gpus: capacity" in failure.message, failure.message

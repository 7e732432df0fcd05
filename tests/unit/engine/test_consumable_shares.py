"""Devices the NVIDIA DRA driver publishes with ``allowMultipleAllocations`` (its
``ConsumableShares`` gate; DRAConsumableCapacity upstream): several claims share such a device
by its memory capacity. A shared device is never counted as a whole free GPU (nor twice, for
the several claims sharing it); a claim naming ``capacity`` takes memory of one shared device
(its request, or the ``requestPolicy`` default, rounded up to the step) while the device has
room, counting what allocated claims, claims being written and pods placed beside it consume;
one that does not fit gets a reason saying how much is left."""

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


MI = 2**20
DEVICE_MI = 81559
"""The memory capacity `dra.consumable_shares` publishes per shared device, in Mi."""


def share_pod(world: World, name: str, memory: str | None) -> None:
    """A pod whose claim asks for ``memory`` of one shared device (None: names no memory)."""
    world.claim_pod(name, 1)
    requests = {"memory": memory} if memory is not None else {}
    world.claims[-1]["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {
        "requests": requests
    }


def _one_shared() -> World:
    world = World()
    world.dra_node("n1", shared=(0,))
    return world


def test_two_claims_share_one_device_and_a_third_over_its_capacity_does_not_fit() -> None:
    world = _one_shared()
    for name in ("a", "b", "c"):
        share_pod(world, name, "30000Mi")
    result = world.run()
    placed = {b.pod: b for b in result.bindings}
    assert len(placed) == 2, result
    shared = f"gpu-{MINOR[0]}"
    for binding in placed.values():
        assert binding.gpus == ()
        (allocation,) = binding.devices
        (device,) = allocation.devices
        assert (device.device, device.consumed) == (shared, 30000 * MI)
    (failure,) = result.unschedulable
    assert failure.pod not in placed
    # 21559Mi is left of the device, too little for a third: none of it is offered
    assert "have 0Mi of memory left in pieces its claims fit, the pod's claims consume 30000Mi" in (
        failure.message
    ), failure.message


def test_what_allocated_claims_consumed_is_not_free() -> None:
    world = _one_shared()
    sharing(world, "share-a", 0)
    sharing(world, "share-b", 0)
    left = DEVICE_MI - 2 * 10240
    share_pod(world, "over", f"{left + 1}Mi")
    result = world.run()
    assert result.bindings == []
    (failure,) = result.unschedulable
    assert "have 0Mi of memory left in pieces" in failure.message, failure.message
    world.pods.pop()
    world.claims.pop()
    share_pod(world, "exact", f"{left}Mi")
    (binding,) = world.run().bindings
    assert binding.devices[0].devices[0].consumed == left * MI


def test_a_claim_naming_no_memory_consumes_the_request_policy_default() -> None:
    """The driver's default is the whole device: a second claim, however small, waits."""
    world = _one_shared()
    share_pod(world, "whole", None)
    (binding,) = world.run().bindings
    assert binding.devices[0].devices[0].consumed == DEVICE_MI * MI
    world = _one_shared()
    share_pod(world, "small", "1Mi")
    share_pod(world, "whole", None)
    result = world.run()
    assert [b.pod for b in result.bindings] == ["ml/small"]
    (failure,) = result.unschedulable
    assert f"the pod's claims consume {DEVICE_MI}Mi" in failure.message, failure.message


def test_a_request_is_rounded_up_to_the_policy_step() -> None:
    world = _one_shared()
    share_pod(world, "odd", "1500Ki")  # 1.46Mi: the driver's step is 1Mi
    (binding,) = world.run().bindings
    assert binding.devices[0].devices[0].consumed == 2 * MI


def test_a_capacity_request_of_several_devices_is_refused_naming_the_field() -> None:
    world = _one_shared()
    share_pod(world, "two", "10Gi")
    world.claims[-1]["spec"]["devices"]["requests"][0]["exactly"]["count"] = 2
    result = world.run()
    assert result.bindings == []
    (failure,) = result.unschedulable
    assert "request gpus: capacity requests memory of 2 devices" in failure.message


def test_a_claim_being_written_holds_its_memory() -> None:
    """Our own in-flight write (the allocator's ``busy``: pool, devices, bytes) is not free."""
    world = _one_shared()
    share_pod(world, "next", "30000Mi")
    result = world.run(busy={f"{NS}/elsewhere": ("n1", (f"gpu-{MINOR[0]}",), 60000 * MI)})
    assert result.bindings == []
    (failure,) = result.unschedulable
    assert "have 0Mi of memory left in pieces" in failure.message, failure.message
    assert len(world.run().bindings) == 1


def test_a_request_over_one_device_is_refused_though_the_node_has_more_in_all() -> None:
    world = World()
    world.dra_node("n1", shared=(0, 1))
    share_pod(world, "big", f"{DEVICE_MI + 1}Mi")
    result = world.run()
    assert result.bindings == []
    (failure,) = result.unschedulable
    assert "request gpus asks for more memory than any of the 2 shared devices" in (
        failure.message
    ), failure.message


def test_memory_spread_over_two_devices_is_not_promised_to_a_claim_no_one_device_fits() -> None:
    """Two shared devices of 81559Mi: three claims of 50000Mi add up to less than the node's
    163118Mi, but each device holds one; the third does not fit, rather than be placed and
    refused at its write, decision after decision."""
    world = World()
    world.dra_node("n1", shared=(0, 1))
    for name in ("a", "b", "c"):
        share_pod(world, name, "50000Mi")
    result = world.run()
    assert len(result.bindings) == 2, result
    (failure,) = result.unschedulable
    assert "have 0Mi of memory left in pieces its claims fit, the pod's claims consume 50000Mi" in (
        failure.message
    ), failure.message


def test_what_allocated_claims_leave_on_each_device_counts_for_claims_of_one_size() -> None:
    """One 50000Mi claim allocated on each device (31559Mi left on each, 63118Mi in all): a
    claim of 40000Mi fits nowhere, one of 30000Mi fits twice."""
    world = World()
    world.dra_node("n1", shared=(0, 1))
    for index in (0, 1):
        sharing(world, f"held-{index}", index)
        result = world.claims[-1]["status"]["allocation"]["devices"]["results"][0]
        result["consumedCapacity"] = {"memory": "50000Mi"}
    share_pod(world, "big", "40000Mi")
    assert world.run().bindings == []
    world.pods.pop()
    world.claims.pop()
    for name in ("x", "y", "z"):
        share_pod(world, name, "30000Mi")
    result = world.run()
    assert len(result.bindings) == 2, result
    assert len(result.unschedulable) == 1, result

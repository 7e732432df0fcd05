"""Fabric Manager partitions (the NVIDIA DRA driver's ``FabricManagerPartitioning`` gate):
on a node whose GPUs publish ``partitionN``, the driver prepares a claim only when its GPUs
are exactly one partition of their count, so the engine gives a pod a whole free partition
or does not place it there, with a reason. Slices in the driver's published format."""

from __future__ import annotations

from typing import Any

from gpusched.engine.result import Phase
from testing import dra
from testing.engine import gang
from tests.unit.engine.test_dra_engine import NS, World

MINOR = {index: minor for index, _, minor in dra.gpus()}
PAIRS = {frozenset({i, i + 1}) for i in range(0, 8, 2)}
QUADS = {frozenset(range(0, 4)), frozenset(range(4, 8))}


def held(world: World, node: str, indices: tuple[int, ...]) -> None:
    """GPUs ``indices`` of ``node`` held by a claim allocated to a running pod."""
    claim: dict[str, Any] = dra.claim(f"held-{node}", NS, len(indices))
    claim["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {
                        "request": "gpus",
                        "driver": dra.DRIVER,
                        "pool": node,
                        "device": f"gpu-{MINOR[i]}",
                    }
                    for i in indices
                ]
            }
        },
        "reservedFor": [{"resource": "pods", "name": "other", "uid": f"uid-other-{node}"}],
    }
    world.claims.append(claim)


def _world(partitioned: bool = True) -> World:
    world = World()
    world.dra_node("n1", partitioned=partitioned)
    return world


def test_a_pods_gpus_are_one_free_partition_of_their_count() -> None:
    world = _world()
    held(world, "n1", (0, 3))  # the best-linked free pair is no partition now
    world.claim_pod("pair", 2)
    (binding,) = world.run().bindings
    assert frozenset(binding.gpus) in PAIRS
    assert not frozenset(binding.gpus) & {0, 3}
    (allocation,) = binding.devices
    assert sorted(dra.index_of_device(d.device) for d in allocation.devices) == sorted(binding.gpus)


def test_without_partitions_the_same_pod_may_get_any_set() -> None:
    """The rule above is the partitions' doing: unpartitioned, the engine picks a set that is
    no partition (the pair its topology ranks best)."""
    world = _world(partitioned=False)
    held(world, "n1", (0, 3))
    world.claim_pod("pair", 2)
    (binding,) = world.run().bindings
    assert frozenset(binding.gpus) not in PAIRS


def test_a_count_no_partition_has_is_refused_naming_the_sizes() -> None:
    world = _world()
    world.claim_pod("three", 3)
    result = world.run()
    assert result.bindings == []
    (failure,) = result.unschedulable
    assert "Fabric Manager partitions of 1, 2, 4, 8 GPUs" in failure.message
    assert "none has 3" in failure.message


def test_a_node_without_a_free_partition_of_the_count_is_passed_over() -> None:
    # n1 has 6 free GPUs but both 4-GPU partitions have a GPU in use; bin packing would pick
    # it over the empty n2.
    world = _world()
    world.dra_node("n2", partitioned=True)
    held(world, "n1", (1, 5))
    world.claim_pod("quad", 4)
    (binding,) = world.run().bindings
    assert binding.node == "n2"
    assert frozenset(binding.gpus) in QUADS


def test_no_free_partition_keeps_a_gang_pending_with_the_reason() -> None:
    world = _world()
    held(world, "n1", (1, 5))
    world.groups.append(gang("g", 1, namespace=NS))
    world.claim_pod("quad", 4, group="g")
    result = world.run()
    assert result.bindings == []
    (decision,) = [g for g in result.groups if g.name == f"{NS}/g"]
    assert decision.phase is Phase.UNSCHEDULABLE
    assert "no free Fabric Manager partition of 4" in decision.message, decision.message


def test_gpus_in_two_claims_cannot_each_be_a_partition_here() -> None:
    world = _world()
    world.claim_pod("two", 2)
    body = world.pods[-1]
    body["spec"]["resourceClaims"].append({"name": "more", "resourceClaimTemplateName": "gpus"})
    body["status"]["resourceClaimStatuses"].append(
        {"name": "more", "resourceClaimName": "two-more"}
    )
    world.claims.append(dra.claim("two-more", NS, 2))
    result = world.run()
    assert result.bindings == []
    (failure,) = result.unschedulable
    assert "2 GPU claims would each need a partition" in failure.message

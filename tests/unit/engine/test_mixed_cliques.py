"""A node whose GPUs name different NVLink cliques is in no ``nvidia.com/gpu.clique`` domain:
nothing of a clique-constrained group lands there, and the group's reason names it. The NVIDIA
DRA driver publishes no per-device clique (only GPU Feature Discovery's node label, and its
ComputeDomain plugin refuses to start on such a node); the node agent reads each GPU's clique
from NVML's fabric info into the ``gpusched.io/gpu-topology`` annotation, where it is seen."""

from __future__ import annotations

from gpusched.engine.result import Phase
from testing import dra
from testing.engine import gang
from testing.manifests import TOPOLOGY
from tests.unit.engine.test_dra_engine import NS, World

CLIQUE = "nvidia.com/gpu.clique"
UUID = "0b5f0ad2-6a8e-4a51-9a9c-1f2b3c4d5e6f"


def _world(*, n1_devices: tuple[str, str]) -> World:
    """n1 and n2 labelled clique ``<uuid>.1``; the agent read ``n1_devices[0]`` for n1's GPUs
    0-3 and ``n1_devices[1]`` for 4-7, the label's for all of n2's."""
    world = World()
    label = f"{UUID}.1"
    for name in ("n1", "n2"):
        body = dra.node(name, {CLIQUE: label})
        topology = dra.topology()
        gpus = tuple(
            g.model_copy(update={"clique": n1_devices[g.index // 4] if name == "n1" else label})
            for g in topology.gpus
        )
        annotation = topology.model_copy(update={"gpus": gpus}).to_annotation()
        body["metadata"]["annotations"][TOPOLOGY] = annotation
        world.nodes.append(body)
        world.slices.append(dra.resource_slice(name))
    return world


def _gang(world: World, name: str, size: int, gpus: int) -> None:
    world.groups.append(gang(name, size, namespace=NS, topology=CLIQUE))
    for i in range(size):
        world.claim_pod(f"{name}-{i}", gpus, group=name)


def test_nothing_of_a_clique_constrained_gang_lands_on_a_node_of_mixed_cliques() -> None:
    world = _world(n1_devices=(f"{UUID}.1", f"{UUID}.2"))
    _gang(world, "g", 2, 4)
    result = world.run()
    assert sorted(b.node for b in result.bindings) == ["n2", "n2"]


def test_a_gang_that_needs_that_node_stays_pending_naming_it_and_its_cliques() -> None:
    world = _world(n1_devices=(f"{UUID}.1", f"{UUID}.2"))
    _gang(world, "g", 2, 8)
    result = world.run()
    assert result.bindings == []
    (decision,) = [g for g in result.groups if g.name == f"{NS}/g"]
    assert decision.phase is Phase.UNSCHEDULABLE
    assert "1 node's GPUs name different cliques (n1: " in decision.message, decision.message
    assert f"{UUID}.2" in decision.message


def test_a_node_whose_gpus_agree_with_its_label_is_in_its_domain() -> None:
    world = _world(n1_devices=(f"{UUID}.1", f"{UUID}.1"))
    _gang(world, "g", 2, 8)
    result = world.run()
    assert sorted(b.node for b in result.bindings) == ["n1", "n2"]

"""IMEX channel claims (NVIDIA DRA driver, ``compute-domain.nvidia.com``) decided with the
pod's GPU claims: each pod of a ComputeDomain gets its node's ``channel-0`` beside its GPUs,
in one decision; the driver prepares a node's channel for one pod (of one ComputeDomain) at a
time, so a node whose channel is taken is not a place for another channel pod. Slices,
DeviceClass and claims are in the driver's published format."""

from __future__ import annotations

from typing import Any

from gpusched.engine.channels import ChannelRule
from gpusched.engine.result import Phase
from testing import dra
from testing.engine import gang
from tests.unit.engine.test_dra_engine import NS, World

CD_DRIVER = "compute-domain.nvidia.com"
CHANNEL_CLASS = "compute-domain-default-channel.nvidia.com"
CHANNEL_CEL = (
    f"device.driver == '{CD_DRIVER}' && device.attributes['{CD_DRIVER}'].type == 'channel' "
    f"&& device.attributes['{CD_DRIVER}'].id == 0"
)


def channel_slice(node: str) -> dict[str, Any]:
    """The ComputeDomain kubelet plugin's pool on ``node``: a channel and a daemon device."""

    def device(kind: str) -> dict[str, Any]:
        return {
            "name": f"{kind}-0",
            "attributes": {"type": {"string": kind}, "id": {"int": 0}},
        }

    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{CD_DRIVER}-x"},
        "spec": {
            "driver": CD_DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [device("channel"), device("daemon")],
        },
    }


def channel_claim(name: str, domain: str = "uid-cd-1") -> dict[str, Any]:
    """A claim made from the ComputeDomain's ResourceClaimTemplate."""
    parameters = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomainChannelConfig",
        "domainID": domain,
        "allocationMode": "Single",
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "channel", "exactly": {"deviceClassName": CHANNEL_CLASS, "count": 1}}
                ],
                "config": [
                    {
                        "requests": ["channel"],
                        "opaque": {"driver": CD_DRIVER, "parameters": parameters},
                    }
                ],
            }
        },
    }


def imex_world(nodes: int) -> World:
    world = World()
    world.classes.append(dra.device_class(CHANNEL_CLASS, CHANNEL_CEL))
    for i in range(nodes):
        world.dra_node(f"n{i}")
        world.slices.append(channel_slice(f"n{i}"))
    return world


def channel_pod(world: World, name: str, gpus: int, group: str | None = None) -> None:
    """A workload pod of the ComputeDomain: its GPUs and its channel, claims made already."""
    world.claim_pod(name, gpus, group=group)
    body = world.pods[-1]
    body["spec"]["resourceClaims"].append(
        {"name": "channel", "resourceClaimTemplateName": "cd-channel"}
    )
    body["spec"]["containers"][0]["resources"]["claims"].append({"name": "channel"})
    body["status"]["resourceClaimStatuses"].append(
        {"name": "channel", "resourceClaimName": f"{name}-channel"}
    )
    world.claims.append(channel_claim(f"{name}-channel"))


def test_each_pod_gets_its_nodes_channel_with_its_gpus_one_channel_pod_a_node() -> None:
    world = imex_world(2)
    world.groups.append(gang("w", 2, namespace=NS))
    for i in range(2):
        channel_pod(world, f"w-{i}", 4, group="w")
    result = world.run()
    nodes = {b.pod: b.node for b in result.bindings}
    assert sorted(nodes.values()) == ["n0", "n1"], "two channel pods never share a node"
    for binding in result.bindings:
        name = binding.pod.removeprefix(f"{NS}/")
        by_claim = {a.claim: a.devices for a in binding.devices}
        (channel,) = by_claim[f"{NS}/{name}-channel"]
        assert (channel.driver, channel.pool, channel.device) == (
            CD_DRIVER,
            binding.node,
            "channel-0",
        )
        assert len(by_claim[f"{NS}/{name}-gpus"]) == 4


def test_a_gang_needing_more_channel_pods_than_nodes_stays_pending() -> None:
    # Two nodes of 8 GPUs have GPUs for three 2-GPU pods, but one channel each.
    world = imex_world(2)
    world.groups.append(gang("w", 3, namespace=NS))
    for i in range(3):
        channel_pod(world, f"w-{i}", 2, group="w")
    result = world.run()
    assert result.bindings == []
    (decision,) = [g for g in result.groups if g.name == f"{NS}/w"]
    assert decision.phase is Phase.UNSCHEDULABLE
    (attempt,) = decision.tried
    # GPUs would take four such pods a node; the channel takes one.
    assert (attempt.fit, attempt.needed) == (2, 3)
    assert attempt.nodes is not None
    assert attempt.nodes.fitting_examples == ("n0 ×1", "n1 ×1"), decision.message
    # Why one each is the driver's rule, kept as data and named in the message.
    assert attempt.nodes.limits == (ChannelRule.ONE_POD_PER_NODE,)
    assert (
        "one pod each: the NVIDIA driver prepares a node's IMEX channel for one pod at a time"
        in (decision.message)
    ), decision.message


def hold_channel_of_n0(world: World) -> None:
    """Another ComputeDomain's pod holds n0's IMEX channel (an allocated, reserved claim)."""
    held = channel_claim("other-channel", domain="uid-cd-2")
    held["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "channel", "driver": CD_DRIVER, "pool": "n0", "device": "channel-0"}
                ]
            }
        },
        "reservedFor": [{"resource": "pods", "name": "other", "uid": "uid-other"}],
    }
    world.claims.append(held)


def test_a_node_whose_channel_another_compute_domain_holds_is_skipped() -> None:
    world = imex_world(2)
    hold_channel_of_n0(world)
    channel_pod(world, "solo", 1)
    result = world.run()
    assert [(b.pod, b.node) for b in result.bindings] == [(f"{NS}/solo", "n1")]


def test_a_channel_pod_whose_only_node_has_its_channel_held_says_which_rule_keeps_it_off() -> None:
    world = imex_world(1)
    hold_channel_of_n0(world)
    channel_pod(world, "solo", 1)
    result = world.run()
    assert result.bindings == []
    (failure,) = result.unschedulable
    assert "1 IMEX channel taken: n0 (held by another pod; the NVIDIA driver prepares a node's" in (
        failure.message
    ), failure.message


def test_a_channel_claim_being_written_holds_its_nodes_channel() -> None:
    world = imex_world(2)
    channel_pod(world, "solo", 1)
    result = world.run(busy={f"{NS}/earlier-channel": ("n0", ("channel-0",))})
    assert [(b.pod, b.node) for b in result.bindings] == [(f"{NS}/solo", "n1")]

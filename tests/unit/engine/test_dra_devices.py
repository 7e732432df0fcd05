"""DRA devices as inventory, and claims as GPU demand (`gpusched.engine.devices`)."""

from __future__ import annotations

from typing import Any

import pytest

from gpusched.api.dra import parse_device_class, parse_resource_claim, parse_resource_slice
from gpusched.engine.devices import (
    NVIDIA_DRIVER,
    Check,
    ClaimError,
    claim_demand,
    node_devices,
    parse_selector,
)
from testing import dra

UUIDS = [uuid for _, uuid, _ in dra.gpus()]


def _slice(**kwargs: Any) -> Any:
    return parse_resource_slice(dra.resource_slice("n1", **kwargs))


def test_devices_join_the_topology_by_uuid_not_by_name() -> None:
    # Devices named after minors 7..0 while their UUIDs say GPUs 0..7: the UUID decides.
    body = dra.resource_slice("n1")
    for position, device in enumerate(body["spec"]["devices"]):
        device["name"] = f"gpu-{7 - position}"
    found = node_devices("n1", [parse_resource_slice(body)], dra.topology())
    assert found is not None
    assert {i: (g.device, g.uuid) for i, g in found.devices.items()} == {
        i: (f"gpu-{7 - i}", UUIDS[i]) for i in range(8)
    }
    assert found.problems == ()
    assert found.unusable == ()


def test_a_device_whose_uuid_matches_no_gpu_is_reported_and_its_gpu_not_used() -> None:
    found = node_devices("n1", [_slice(replace={3: "GPU-not-on-this-node"})], dra.topology())
    assert found is not None
    assert sorted(found.devices) == [0, 1, 2, 4, 5, 6, 7]
    assert found.unusable == (3,)
    assert found.problems == (
        "device gpu-3 (uuid GPU-not-on-this-node) matches no GPU in its gpusched.io/gpu-topology "
        "annotation; it is not allocated",
        f"GPU 3 ({UUIDS[3]}) of its gpusched.io/gpu-topology annotation is missing from its "
        "gpu.nvidia.com ResourceSlices; it is not used",
    )


def test_devices_without_a_topology_annotation_are_not_guessed_at() -> None:
    found = node_devices("n1", [_slice()], None)
    assert found is not None
    assert found.devices == {}
    assert found.problems == (
        "its gpu.nvidia.com devices cannot be matched to GPUs by UUID: it has no "
        "gpusched.io/gpu-topology annotation",
    )


def test_only_the_newest_pool_generation_counts_and_other_nodes_and_drivers_are_ignored() -> None:
    old = _slice(replace={0: "GPU-old"}, generation=1)
    new = parse_resource_slice(
        {**dra.resource_slice("n1", generation=2), "metadata": {"name": "n1-new"}}
    )
    other_node = parse_resource_slice(dra.resource_slice("n2"))
    other_driver_body = dra.resource_slice("n1")
    other_driver_body["spec"]["driver"] = "nic.example.com"
    other_driver_body["metadata"]["name"] = "n1-nic"
    slices = [old, new, other_node, parse_resource_slice(other_driver_body)]
    found = node_devices("n1", slices, dra.topology())
    assert found is not None
    assert found.problems == ()
    assert len(found.devices) == 8
    assert node_devices("n3", slices, dra.topology()) is None


@pytest.mark.parametrize(
    ("expression", "want"),
    [
        ("device.driver == 'gpu.nvidia.com'", (Check(NVIDIA_DRIVER, "", NVIDIA_DRIVER),)),
        (
            'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"',
            (Check(NVIDIA_DRIVER, "productName", "NVIDIA H100 80GB HBM3"),),
        ),
        (
            "device.attributes['gpu.nvidia.com']['uuid'] == 'GPU-1' && "
            "device.attributes['gpu.nvidia.com'].minor == 3",
            (Check(NVIDIA_DRIVER, "uuid", "GPU-1"), Check(NVIDIA_DRIVER, "minor", 3)),
        ),
        (
            "(device.attributes['gpu.nvidia.com'].migEnabled == false)",
            (Check(NVIDIA_DRIVER, "migEnabled", False),),
        ),
    ],
)
def test_selectors_gpusched_evaluates(expression: str, want: tuple[Check, ...]) -> None:
    assert parse_selector(expression) == want


@pytest.mark.parametrize(
    "expression",
    [
        "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0",
        "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA')",
        "device.driver == 'gpu.nvidia.com' || device.driver == 'x'",
    ],
)
def test_other_cel_is_refused_not_guessed(expression: str) -> None:
    with pytest.raises(ClaimError, match="beyond what gpusched evaluates"):
        parse_selector(expression)


MIG_CEL = "device.attributes['gpu.nvidia.com'].type == 'mig'"
"""The NVIDIA DRA driver's DeviceClass ``mig.nvidia.com`` selects MIG slices by this."""
CLASSES = {
    "gpu.nvidia.com": parse_device_class(dra.device_class()),
    "nic": parse_device_class(dra.device_class("nic", "device.driver == 'nic.example.com'")),
    "mig.nvidia.com": parse_device_class(dra.device_class("mig.nvidia.com", MIG_CEL)),
}


def _claim(count: int = 2, **kwargs: Any) -> Any:
    return parse_resource_claim(dra.claim("c", "ml", count, **kwargs))


def test_a_claim_becomes_a_gpu_count_with_its_class_and_request_checks() -> None:
    product = f"device.attributes['gpu.nvidia.com'].productName == '{dra.PRODUCT}'"
    (demand,) = claim_demand(_claim(4, selectors=(product,)), CLASSES)
    assert (demand.claim, demand.request, demand.count) == ("ml/c", "gpus", 4)
    assert demand.checks == tuple(
        sorted(
            {
                Check(NVIDIA_DRIVER, "", NVIDIA_DRIVER),
                Check(NVIDIA_DRIVER, "type", "gpu"),
                Check(NVIDIA_DRIVER, "productName", dra.PRODUCT),
            }
        )
    )


@pytest.mark.parametrize(
    ("claim", "why"),
    [
        (
            dra.claim("c", "ml", 1, device_class_name="nic"),
            "DeviceClass nic selects nic.example.com; gpusched allocates only gpu.nvidia.com GPUs",
        ),
        (
            dra.claim("c", "ml", 1, device_class_name="missing"),
            "request gpus: DeviceClass missing does not exist",
        ),
        (
            dra.claim("c", "ml", 1, selectors=("device.attributes['gpu.nvidia.com'].x > 1",)),
            "beyond what gpusched evaluates",
        ),
        (
            dra.claim("c", "ml", 1, device_class_name="mig.nvidia.com"),
            "request gpus: DeviceClass mig.nvidia.com selects gpu.nvidia.com devices of type "
            "'mig'; gpusched allocates whole GPUs",
        ),
        (
            dra.claim("c", "ml", 1, device_class_name="gpu.nvidia.com", selectors=(MIG_CEL,)),
            "of type 'mig'",
        ),
    ],
    ids=["another driver", "a missing class", "CEL we cannot evaluate", "MIG", "MIG selector"],
)
def test_claims_gpusched_cannot_allocate_exactly_say_why(claim: dict[str, Any], why: str) -> None:
    with pytest.raises(ClaimError, match=why.replace("(", r"\(")):
        claim_demand(parse_resource_claim(claim), CLASSES)


def test_first_available_and_all_mode_are_refused() -> None:
    body = dra.claim("c", "ml", 1)
    body["spec"]["devices"]["requests"][0] = {"name": "gpus", "firstAvailable": [{"name": "a"}]}
    with pytest.raises(ClaimError, match="firstAvailable"):
        claim_demand(parse_resource_claim(body), CLASSES)
    body = dra.claim("c", "ml", 1)
    body["spec"]["devices"]["requests"][0]["exactly"]["allocationMode"] = "All"
    with pytest.raises(ClaimError, match="allocationMode All"):
        claim_demand(parse_resource_claim(body), CLASSES)


def test_list_typed_attributes_are_read_and_an_equality_never_takes_a_list_for_a_scalar() -> None:
    # DRAListTypeAttributes: a list is not equal to one of its members (CEL's == on a list
    # and a scalar does not select the device either).
    body = dra.resource_slice("n1")
    device = body["spec"]["devices"][0]
    device["attributes"]["channels"] = {"ints": [0, 1]}
    device["attributes"]["cliqueIDs"] = {"strings": ["a.1", "a.2"]}
    found = parse_resource_slice(body).spec.devices[0]
    assert found.attribute(NVIDIA_DRIVER, "channels") == (0, 1)
    assert found.attribute(NVIDIA_DRIVER, "cliqueIDs") == ("a.1", "a.2")
    assert not Check(NVIDIA_DRIVER, "channels", 0).passes(NVIDIA_DRIVER, found)
    assert Check(NVIDIA_DRIVER, "type", "gpu").passes(NVIDIA_DRIVER, found)

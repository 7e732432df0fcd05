"""DRA objects as the NVIDIA DRA driver and the resource-claim controller make them, for tests.

One 8-GPU machine shape: the GPU UUIDs and minor numbers of a real HGX H100 (the
``nvidia-smi -q`` capture in tests/data/gpu-topology) on the NVLink hybrid cube mesh of a DGX-1
(its ``nvidia-smi topo -m`` capture), so that which 2 or 4 GPUs a pod gets matters: some pairs
have two NVLinks, some one, some none. The driver names a device ``gpu-<minor>``, and a GPU's
minor number is not its nvidia-smi index, so devices join the topology only by UUID.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

from gpusched.api.nvsmi import parse_topo_matrix
from gpusched.api.topology import GpuInfo, GpuTopology
from testing import manifests

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "gpu-topology"
DRIVER = "gpu.nvidia.com"
PRODUCT = "NVIDIA H100 80GB HBM3"
CLASS = "gpu.nvidia.com"


@cache
def gpus() -> tuple[tuple[int, str, int], ...]:
    """(nvidia-smi index, UUID, minor number) of the captured machine, by index."""
    text = (DATA / "hgx-h100-sxm-8gpu.nvidia-smi-q.txt").read_text()
    uuids = re.findall(r"GPU UUID\s*:\s*(\S+)", text)
    minors = [int(m) for m in re.findall(r"Minor Number\s*:\s*(\d+)", text)]
    return tuple(
        (index, uuid, minor) for index, (uuid, minor) in enumerate(zip(uuids, minors, strict=True))
    )


@cache
def topology() -> GpuTopology:
    matrix = parse_topo_matrix((DATA / "dgx1-v100-8gpu-hybridcubemesh-1nic.topo.txt").read_text())
    by_index = {index: uuid for index, uuid, _ in gpus()}
    infos = tuple(
        GpuInfo(index=g.index, uuid=by_index[g.index], numa=g.numa, model=PRODUCT, memory_mib=81559)
        for g in matrix.topology.gpus
    )
    return GpuTopology(gpus=infos, links=matrix.topology.links)


def node(
    name: str, labels: dict[str, str] | None = None, *, plugin_gpus: int = 0
) -> dict[str, Any]:
    """A node of the captured shape, its GPUs published by the DRA driver (no device plugin
    unless ``plugin_gpus``)."""
    return manifests.node(
        name,
        None,
        None,
        kind=None,
        gpus=plugin_gpus,
        labels=labels,
        annotations={manifests.TOPOLOGY: topology().to_annotation()},
        cpu="128",
        memory="1Ti",
        capacity=True,
    )


def device(
    minor: int, uuid: str, numa: int | None = None, numa_list: bool = False
) -> dict[str, Any]:
    """One whole GPU as the NVIDIA DRA driver publishes it; ``numa``: its
    ``resource.kubernetes.io/numaNode``, an int, or with ``numa_list`` (the driver's
    ``DRAListTypeAttributes`` gate) a one-element list ``ints: [n]``."""
    found: dict[str, Any] = {
        "name": f"gpu-{minor}",
        "attributes": {
            "type": {"string": "gpu"},
            "uuid": {"string": uuid},
            "minor": {"int": minor},
            "productName": {"string": PRODUCT},
            "brand": {"string": "NVIDIA"},
            "architecture": {"string": "Hopper"},
            "cudaComputeCapability": {"version": "9.0.0"},
            "driverVersion": {"version": "550.54.15"},
            "cudaDriverVersion": {"version": "12.4.0"},
            "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{minor // 4:02x}"},
        },
        "capacity": {"memory": {"value": "81559Mi"}},
    }
    if numa is not None:
        value = {"ints": [numa]} if numa_list else {"int": numa}
        found["attributes"]["resource.kubernetes.io/numaNode"] = value
    return found


def fm_partitions(index: int) -> dict[str, Any]:
    """The Fabric Manager attributes the driver publishes for GPU ``index`` under its
    ``FabricManagerPartitioning`` gate: ``gpuModuleID`` (here index + 1) and per partition
    size N an int ``partitionN``, its partition's id. The ids are those of the Fabric Manager
    user guide's HGX 8-GPU table: 0 (all 8), 1-2 (4 each), 3-6 (pairs), 7-14 (one each)."""
    return {
        "gpuModuleID": {"int": index + 1},
        "partition8": {"int": 0},
        "partition4": {"int": 1 + index // 4},
        "partition2": {"int": 3 + index // 2},
        "partition1": {"int": 7 + index},
    }


def consumable_shares() -> dict[str, Any]:
    """What the driver adds to a GPU under its ``ConsumableShares`` gate (``--consumable-
    shares=memory``): the device may be allocated to several claims, each consuming some of
    its ``memory`` (1Mi steps, the whole by default)."""
    return {
        "allowMultipleAllocations": True,
        "capacity": {
            "memory": {
                "value": "81559Mi",
                "requestPolicy": {
                    "default": "81559Mi",
                    "validRange": {"min": "1Mi", "max": "81559Mi", "step": "1Mi"},
                },
            }
        },
    }


def resource_slice(
    node_name: str,
    *,
    replace: dict[int, str] | None = None,
    generation: int = 1,
    numa_list: bool | None = None,
    partitioned: bool = False,
    shared: tuple[int, ...] = (),
) -> dict[str, Any]:
    """The node's pool, one slice; ``replace`` gives some minors another UUID; ``numa_list``
    (not None) publishes each GPU's NUMA node, as a list when True: the capture's own where it
    names one, else GPUs 0-3 on node 0 and 4-7 on node 1, as on a two-socket HGX;
    ``partitioned``: its Fabric Manager partitions too (`fm_partitions`); ``shared``: GPUs
    (by index) published as shared devices (`consumable_shares`)."""
    numa = {g.index: g.numa if g.numa is not None else g.index // 4 for g in topology().gpus}
    devices = [
        device(
            minor,
            (replace or {}).get(minor, uuid),
            numa[index] if numa_list is not None else None,
            bool(numa_list),
        )
        for index, uuid, minor in gpus()
    ]
    for (index, _, _), found in zip(gpus(), devices, strict=True):
        if partitioned:
            found["attributes"].update(fm_partitions(index))
        if index in shared:
            found.update(consumable_shares())
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node_name}-{DRIVER}-slice"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": generation, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def device_class(
    name: str = CLASS, expression: str | None = None, extended: str | None = None
) -> dict[str, Any]:
    """The driver's DeviceClass (``extended``: also serves that extended resource, KEP-5004)."""
    cel = (
        expression or f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'gpu'"
    )
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": cel}}]}
    if extended:
        spec["extendedResourceName"] = extended
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": spec,
    }


def claim_spec(
    count: int,
    *,
    device_class_name: str = CLASS,
    selectors: tuple[str, ...] = (),
    memory: str | None = None,
) -> dict[str, Any]:
    """``memory``: the request asks for that much of one shared device (DRA consumable
    capacity, ``capacity.requests.memory``)."""
    exactly: dict[str, Any] = {"deviceClassName": device_class_name, "count": count}
    if memory is not None:
        exactly["capacity"] = {"requests": {"memory": memory}}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    return {"devices": {"requests": [{"name": "gpus", "exactly": exactly}]}}


def claim_template(name: str, namespace: str, count: int, **kwargs: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": claim_spec(count, **kwargs)},
    }


def claim(name: str, namespace: str, count: int, **kwargs: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": claim_spec(count, **kwargs),
    }


def pod(
    name: str,
    namespace: str,
    *,
    template: str | None = None,
    claim_name: str | None = None,
    group: str | None = None,
    gpus: int = 0,
) -> dict[str, Any]:
    """A pod of ours taking GPUs through a claim template, a named claim, or (``gpus``)
    ``nvidia.com/gpu``."""
    body = manifests.pod(name, gpus, group=group, namespace=namespace)
    if template or claim_name:
        entry: dict[str, Any] = {"name": "gpus"}
        if template:
            entry["resourceClaimTemplateName"] = template
        else:
            entry["resourceClaimName"] = claim_name
        body["spec"]["resourceClaims"] = [entry]
        body["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
    return body


def pod_group(name: str, namespace: str, min_count: int) -> dict[str, Any]:
    return manifests.pod_group(name, min_count, key=None, namespace=namespace)


def index_of_device(name: str) -> int:
    """The topology index of device ``gpu-<minor>``."""
    minor = int(name.removeprefix("gpu-"))
    return next(index for index, _, m in gpus() if m == minor)

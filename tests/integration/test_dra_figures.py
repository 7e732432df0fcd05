"""Figures for DRA on the real control plane, measured in one run (printed, not asserted:
they depend on the machine): a 64-pod gang's created→all-bound time with device-plugin GPUs,
with claims from templates allocated by gpusched, and with ``nvidia.com/gpu`` served by a
DeviceClass (KEP-5004: gpusched creates the claims), and the share of DRA pods whose
allocated devices are the set the engine picks for the same pods asking ``nvidia.com/gpu``.

    python bench/dra.py      (runs this file with GPUSCHED_FIGURES=1; the suite leaves it out)
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import pytest

from testing import dra
from testing.apiserver import ApiClient, ApiStatusError, wait_for
from testing.cluster.cluster import RealCluster
from testing.harness import ensure_namespace, gpu_pod, running_operator
from tests.integration.test_dra import (
    NS,
    _all_bound,
    _assert_no_device_twice,
    _claim_of,
    _claims,
    _clean,
    _devices,
    _engine_choice,
    _gang,
)

pytestmark = [pytest.mark.figures, pytest.mark.usefixtures("real_cluster")]
DRA_NODES = [f"dra-{i}" for i in range(8)]
EXTENDED_NODES = [f"dra-ext-{i}" for i in range(8)]
PLUGIN_NODES = [f"plugin-{i}" for i in range(8)]


def _bound_after(api: ApiClient, members: list[str], started: float) -> float:
    wait_for(lambda: _all_bound(api, members), timeout=120, message="the gang bound")
    return time.monotonic() - started


def test_figures(apiserver: RealCluster, api: ApiClient, kubeconfig: Path) -> None:
    ensure_namespace(api, NS)
    _clean(api)
    api.create(dra.device_class())
    for name in [*DRA_NODES, *EXTENDED_NODES]:
        api.create(dra.node(name))
        api.create(dra.resource_slice(name))
    for name in PLUGIN_NODES:
        api.create(dra.node(name, plugin_gpus=8))
    try:
        with running_operator(kubeconfig) as runtime:
            # Device-plugin GPUs: 64 pods of one nvidia.com/gpu (they avoid the DRA nodes).
            api.create(dra.pod_group("plain", NS, 64))
            started = time.monotonic()
            plain = [f"plain-{i}" for i in range(64)]
            for name in plain:
                api.create(gpu_pod(name, 1, group="plain", namespace=NS))
            plain_seconds = _bound_after(api, plain, started)
            # The same gang through claim templates (the claim controller creates 64 claims).
            started = time.monotonic()
            members = _gang(api, "claimed", 64, 1)
            wait_for(lambda: len(_claims(api)) == 64, timeout=60, message="64 claims made")
            claims_made = time.monotonic() - started
            dra_seconds = _bound_after(api, members, started)
            writing = runtime.scheduler.claims.allocation_seconds
            # nvidia.com/gpu served by a DeviceClass: the device-plugin GPUs are all taken,
            # so the gang lands on DRA nodes and gpusched creates its 64 claims.
            api.create(dra.device_class("gpu-extended", extended="nvidia.com/gpu"))
            api.create(dra.pod_group("extended", NS, 64))
            started = time.monotonic()
            extended = [f"extended-{i}" for i in range(64)]
            for name in extended:
                api.create(dra.pod(name, NS, gpus=1, group="extended"))
            extended_seconds = _bound_after(api, extended, started)
            extended_writing = runtime.scheduler.claims.allocation_seconds - writing
            assert len(_claims(api)) == 128
            _assert_no_device_twice(api)
        print(
            f"\n64-pod gang, created→all bound: device plugin {plain_seconds:.2f} s, "
            f"DRA {dra_seconds:.2f} s (+{dra_seconds - plain_seconds:.2f} s); of which the "
            f"claim controller making the 64 claims {claims_made:.2f} s, gpusched writing them "
            f"(finalizer, then allocation with reservedFor) {writing:.2f} s"
        )
        print(
            f"64-pod gang asking nvidia.com/gpu served by a DeviceClass: {extended_seconds:.2f} s "
            f"(+{extended_seconds - plain_seconds:.2f} s over the device plugin); gpusched "
            f"creating and writing the 64 claims and the pods' extendedResourceClaimStatus "
            f"{extended_writing:.2f} s"
        )
        for name in [*plain, *extended]:
            with contextlib.suppress(ApiStatusError):
                api.delete("pods", name, NS)
        _clean(api)
        api.create(dra.device_class())
        for name in DRA_NODES:
            api.create(dra.resource_slice(name))
        # Which GPUs: 16 pods of 4 GPUs on the 8 DRA nodes (NVLink cube mesh: it matters).
        with running_operator(kubeconfig):
            members = _gang(api, "quad", 16, 4)
            wait_for(lambda: _all_bound(api, members), timeout=60, message="quads bound")
            found = {m: _devices(_claim_of(api, api.get("pods", m, NS)) or {}) for m in members}
        want = _engine_choice(DRA_NODES, 16, 4)
        got = sorted(d for d in found.values() if d is not None)
        equal = sum(1 for d in got if d in want)
        print(f"DRA pods whose devices are the engine's choice: {equal}/{len(members)}")
        assert got == want
    finally:
        _clean(api)

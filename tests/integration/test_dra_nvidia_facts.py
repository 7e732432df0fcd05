"""The NVIDIA DRA driver as it publishes devices, on the real control plane: what gpusched
does not place (MIG slices) is refused with a reason naming it, and the rest is scheduled."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cluster.cluster import RealCluster
from tests.integration.apiserver import ApiClient, wait_for
from tests.integration.harness import events_for, running_operator
from tests.integration.test_dra import NS, _all_bound, _claims, _gang, dra_nodes  # noqa: F401
from tests.support import dra

pytestmark = pytest.mark.usefixtures("real_cluster")

MIG_CLASS = "mig.nvidia.com"
MIG_SELECTOR = "device.attributes['gpu.nvidia.com'].type == 'mig'"
"""The driver's DeviceClass for MIG slices selects them by the ``type`` attribute."""


def test_a_claim_for_mig_slices_is_refused_naming_them_and_the_rest_is_scheduled(
    apiserver: RealCluster,
    api: ApiClient,
    kubeconfig: Path,
    dra_nodes: list[str],  # noqa: F811
) -> None:
    api.create(dra.device_class(MIG_CLASS, MIG_SELECTOR))
    api.create(dra.claim_template("slice", NS, 1, device_class_name=MIG_CLASS))
    api.create(dra.pod("wants-mig", NS, template="slice"))
    with running_operator(kubeconfig):
        members = _gang(api, "whole", 2, 4)
        wait_for(lambda: _all_bound(api, members), timeout=90, message="the whole-GPU gang bound")

        def reason() -> str:
            return " ".join(
                e["message"]
                for e in events_for(api, "wants-mig", NS)
                if e["reason"] == "FailedScheduling"
            )

        assert wait_for(
            lambda: "devices of type 'mig'; gpusched allocates whole GPUs" in reason(),
            message=reason,
        )
    mig_claims = [
        c
        for c in _claims(api)
        if c["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == MIG_CLASS
    ]
    assert mig_claims, "the resource-claim controller made the pod's claim"
    assert all(not (c.get("status") or {}).get("allocation") for c in mig_claims), mig_claims

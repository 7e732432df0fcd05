"""The running operator's ``/metrics`` carries the placement-quality gauges of what it sees
(the loop measures them through `gpusched.scheduler.quality_metrics.update`)."""

from __future__ import annotations

from pathlib import Path

from testing.apiserver import ApiClient, ApiServer, wait_for
from testing.harness import RACK, gang, gpu_node, gpu_pod, running_operator
from tests.integration.test_operator_resilience import _free_port, _samples


def test_the_operator_exports_free_gpus_per_rack_after_a_gang_lands(
    apiserver: ApiServer, api: ApiClient, kubeconfig: Path
) -> None:
    #       zone-a
    #     /       \
    #  rack-1    rack-2
    #  n1  n2      n3          8 GPUs each; a gang of two 4-GPU pods lands in one rack
    for name, rack in (("n1", "rack-1"), ("n2", "rack-1"), ("n3", "rack-2")):
        api.create(gpu_node(name, "zone-a", rack))
    port = _free_port()
    with running_operator(kubeconfig, metrics_port=port):
        api.create(gang("g", 2))
        for i in range(2):
            api.create(gpu_pod(f"g-{i}", 4, group="g"))

        def value(name: str, level: str, domain: str) -> float | None:
            return _samples(port).get((name, (("domain", domain), ("level", level))))

        def racks() -> list[float]:
            free = "gpusched_domain_free_gpus"
            return sorted(value(free, RACK, f"zone-a/rack-{r}") or 0.0 for r in (1, 2))

        # rack-2 (one node, 8 GPUs: the tightest fit) or rack-1, either way 8 GPUs fewer;
        # an 8-GPU pod then fits on every node the gang left whole.
        wait_for(lambda: racks() in ([0.0, 16.0], [8.0, 8.0]), message="gauges after the bind")
        assert value("gpusched_domain_gpus", "cluster", "cluster") == 24
        assert value("gpusched_domain_free_gpus", "cluster", "cluster") == 16
        whole = 1 if racks() == [8.0, 8.0] else 2
        key = (("domain", "cluster"), ("gpus_per_pod", "8"), ("level", "cluster"))
        assert _samples(port)[("gpusched_domain_largest_gang", key)] == whole

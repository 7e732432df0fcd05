"""Which pending pods Karpenter would provision nodes for, read as Karpenter v1.15.0 reads them,
for tests of what gpusched writes on pods it cannot place. Karpenter itself does not run here:

- `sigs.k8s.io/karpenter` v1.15.0 requires Go >= 1.26.9 (its go.mod); this machine has Go 1.26.8
  with GOTOOLCHAIN=local, and no toolchain is downloaded here, so the module cannot be built
  (`go get sigs.k8s.io/karpenter@v1.15.0`: "requires go >= 1.26.9 (running go 1.26.8;
  GOTOOLCHAIN=local)"). Its kwok provider (`sigs.k8s.io/karpenter/kwok`) is in the same module.
- Its operator binds its metrics and health-probe servers on every address
  (`pkg/operator/operator.go`: `BindAddress: fmt.Sprintf(":%d", ...)`, no flag for the host),
  where every server of these tests must bind 127.0.0.1 only.

Karpenter's provisioner takes a pod when `IsProvisionable` (pkg/utils/pod/scheduling.go) holds:
`FailedToSchedule` (a `PodScheduled` condition with reason `Unschedulable`; its status is not
read), not bound (`spec.nodeName` empty), not nominated (`status.nominatedNodeName` empty: a pod
waiting for a preemption is left alone), and owned by neither a DaemonSet (apps/v1) nor a Node
(v1, a static pod). `provisionable` answers the same question of a pod as the API returns it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

IGNORED_OWNERS = {("apps/v1", "DaemonSet"), ("v1", "Node")}


def failed_to_schedule(pod: Mapping[str, Any]) -> bool:
    """A PodScheduled condition with reason Unschedulable (`FailedToSchedule`)."""
    return any(
        c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
        for c in pod.get("status", {}).get("conditions", [])
    )


def provisionable(pod: Mapping[str, Any]) -> bool:
    """Whether Karpenter v1.15.0 would provision capacity for `pod` (`IsProvisionable`)."""
    owners = {
        (o.get("apiVersion"), o.get("kind")) for o in pod["metadata"].get("ownerReferences", [])
    }
    return (
        failed_to_schedule(pod)
        and not pod.get("spec", {}).get("nodeName")
        and not pod.get("status", {}).get("nominatedNodeName")
        and not owners & IGNORED_OWNERS
    )

"""``explain pod/NAME`` for a pod left pending beside its placed gang names the pod's own
reason (its group's decision is Scheduled and says nothing about it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpusched.cli import main

CLUSTER = """
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {topology.example.com/rack: r1}}
status: {allocatable: {cpu: "64", memory: 512Gi, pods: "110", nvidia.com/gpu: "8"}}
---
apiVersion: scheduling.gpusched.io/v1alpha1
kind: PodGroup
metadata: {name: g, namespace: ml}
spec: {schedulingPolicy: {gang: {minCount: 2}}}
"""
POD = """
---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: ml, labels: {{scheduling.gpusched.io/pod-group: g}}}}
spec:
  schedulerName: gpusched
  {node}
  containers:
  - name: m
    image: x
    resources: {{requests: {{nvidia.com/gpu: "4"}}, limits: {{nvidia.com/gpu: "4"}}}}
"""


def test_a_pod_waiting_beside_its_bound_gang_gets_its_own_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pods = [POD.format(name=f"g-{i}", node="nodeName: n1" if i < 2 else "") for i in range(3)]
    path = tmp_path / "cluster.yaml"
    path.write_text(CLUSTER + "".join(pods))
    assert main(["explain", "pod/g-2", "-n", "ml", "-f", str(path)]) == 0
    out = capsys.readouterr().out
    assert "Pod ml/g-2: Unschedulable" in out, out
    assert (
        "message: 0/1 nodes are available beside its group's other pods: "
        "1 Insufficient nvidia.com/gpu: n1 (0 free usable GPUs, needs 4)"
    ) in out, out

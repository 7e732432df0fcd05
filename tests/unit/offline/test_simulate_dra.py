"""``gpusched simulate`` on a DRA cluster: ResourceSlices, DeviceClasses, ResourceClaims and
their templates are read and given to the engine as the operator gives them, so the devices
it prints are the ones the operator would allocate."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpusched.cli import main
from gpusched.commands import EXIT_BAD_INPUT, EXIT_OK
from testing import dra

NS = "ml"


def _write(tmp_path: Path, documents: list[dict[str, Any]]) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(documents))
    return path


def _template_pod(name: str, template: str) -> dict[str, Any]:
    body = dra.pod(name, NS, template=template)
    body["spec"]["schedulerName"] = "gpusched"
    return body


def _run(capsys: pytest.CaptureFixture[str], path: Path) -> dict[str, Any]:
    code = main(["simulate", str(path), "-o", "json"])
    out = capsys.readouterr()
    assert code == EXIT_OK, out.err
    found: dict[str, Any] = json.loads(out.out)
    return found


def test_a_template_pod_is_placed_on_devices_named_in_the_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    documents = [
        dra.node("n1"),
        dra.resource_slice("n1"),
        dra.device_class(),
        dra.claim_template("two", NS, 2),
        _template_pod("train", "two"),
    ]
    document = _run(capsys, _write(tmp_path, documents))
    (binding,) = document["bindings"]
    assert binding["node"] == "n1"
    (claim,) = binding["devices"]
    # The claim kube-controller-manager would make from the template, named without its suffix.
    assert claim["claim"] == f"{NS}/train-gpus"
    devices = [d["device"] for d in claim["devices"]]
    assert [dra.index_of_device(d) for d in devices] == binding["gpus"]
    assert {d["pool"] for d in claim["devices"]} == {"n1"}


def test_devices_a_claim_holds_already_are_not_given_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Six of the node's eight GPUs are allocated to a claim: a pod asking three does not fit.
    held = dra.claim("held", NS, 6)
    held["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpus", "driver": dra.DRIVER, "pool": "n1", "device": f"gpu-{m}"}
                    for m in range(6)
                ]
            }
        }
    }
    documents = [
        dra.node("n1"),
        dra.resource_slice("n1"),
        dra.device_class(),
        held,
        dra.claim_template("three", NS, 3),
        _template_pod("late", "three"),
        dra.claim_template("two", NS, 2),
        _template_pod("small", "two"),
    ]
    document = _run(capsys, _write(tmp_path, documents))
    (binding,) = document["bindings"]
    assert binding["pod"] == f"{NS}/small"
    devices = {d["device"] for d in binding["devices"][0]["devices"]}
    assert devices == {"gpu-6", "gpu-7"}
    (late,) = document["unschedulable"]
    assert late["pod"] == f"{NS}/late"
    assert "insufficient free gpu.nvidia.com devices" in late["message"], late


def test_a_pod_whose_template_is_missing_waits_for_its_claim(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    documents = [dra.node("n1"), dra.resource_slice("n1"), dra.device_class()]
    documents.append(_template_pod("orphan", "nowhere"))
    document = _run(capsys, _write(tmp_path, documents))
    assert document["bindings"] == []
    (waiting,) = document["unschedulable"]
    assert waiting["reason"] == "WaitingForPods"
    assert "waiting for the ResourceClaim of gpus" in waiting["message"]


def test_a_resource_slice_that_cannot_be_read_is_refused_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = dra.resource_slice("n1")
    del broken["spec"]["driver"]
    path = _write(tmp_path, [dra.node("n1"), broken])
    code = main(["simulate", str(path), "-o", "json"])
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT
    assert "ResourceSlice n1-gpu.nvidia.com-slice" in err, err
    assert "spec.driver" in err, err


def test_simulate_refuses_a_channel_claim_of_a_compute_domain_in_another_namespace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """ComputeDomains in the input are read as the operator watches them: a channel claim
    whose domainID names one in another namespace is refused naming the field."""
    from tests.unit.engine.test_imex_channels import (
        CHANNEL_CEL,
        CHANNEL_CLASS,
        channel_claim,
        channel_slice,
    )

    compute_domain = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": "cd", "namespace": "training", "uid": "uid-cd-1"},
        "spec": {"channel": {"resourceClaimTemplate": {"name": "cd"}}},
    }
    template = channel_claim("cd-channel")  # domainID uid-cd-1, in namespace ml
    pod = _template_pod("worker", "one")
    pod["spec"]["resourceClaims"].append({"name": "channel", "resourceClaimTemplateName": "cd"})
    pod["spec"]["containers"][0]["resources"]["claims"].append({"name": "channel"})
    documents = [
        dra.node("n1"),
        dra.resource_slice("n1"),
        channel_slice("n1"),
        dra.device_class(),
        dra.device_class(CHANNEL_CLASS, CHANNEL_CEL),
        dra.claim_template("one", NS, 1),
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "cd", "namespace": NS},
            "spec": {"spec": template["spec"]},
        },
        compute_domain,
        pod,
    ]
    document = _run(capsys, _write(tmp_path, documents))
    assert document["bindings"] == []
    (failure,) = document["unschedulable"]
    assert "spec.devices.config[0].opaque.parameters.domainID" in failure["message"]
    assert "ComputeDomain training/cd" in failure["message"]
    # In its ComputeDomain's namespace, the same pod is placed.
    compute_domain["metadata"]["namespace"] = NS
    document = _run(capsys, _write(tmp_path, documents))
    assert [b["node"] for b in document["bindings"]] == ["n1"]

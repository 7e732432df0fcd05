"""`gpusched explain` against a live API server (the emulator): the same objects give the same
report as from files, read with GETs only."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml

from gpusched.cli import main
from gpusched.commands import EXIT_OK
from gpusched.commands.explain import EXIT_UNREACHABLE
from gpusched.k8s.reader import list_cluster
from testing.apiserver import ApiClient, ApiServer
from testing.harness import EXAMPLES, apply_yaml, wait_nodes_ready

SAMPLE = sorted((EXAMPLES / "clusters" / "sample").glob("*.yaml")) + sorted(
    p
    for p in (EXAMPLES / "workloads").rglob("*.yaml")
    if "kind: Job" not in p.read_text()  # a Job makes no pods here (no Job controller)
)


def explain(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["explain", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("target", ["pg/pretrain", "wl/train", "pod/finetune-0"])
def test_a_live_cluster_explains_like_a_dump_of_it_with_gets_only(
    target: str,
    api: ApiClient,
    apiserver: ApiServer,
    kubeconfig: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The reader's documents, dumped to a file, explain exactly as the live cluster does
    (creation times included: they order the queue), having sent GETs only."""
    apply_yaml(api, *SAMPLE)
    wait_nodes_ready(api)
    before = apiserver.request_count
    namespace = "research" if target.startswith("pod/") else "ml"
    live = explain(capsys, target, "-n", namespace, "--kubeconfig", str(kubeconfig))
    served = apiserver.requests()[before - apiserver.request_count :]
    methods = {str(r.method).upper().removeprefix("METHOD.") for r in served}
    documents = asyncio.run(list_cluster(str(kubeconfig)))
    (tmp_path / "dump.yaml").write_text(yaml.safe_dump_all(documents))
    dumped = explain(capsys, target, "-n", namespace, "-f", str(tmp_path / "dump.yaml"))
    assert live == dumped
    assert live[0] == EXIT_OK
    assert methods == {"GET"}, methods
    kinds = {d["kind"] for d in documents}
    assert kinds == {"Node", "Pod", "PodGroup", "Workload"}


def test_an_unreachable_cluster_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
        "users: [{name: u, user: {}}]\n"
    )
    code, out, err = explain(capsys, "pg/x", "--kubeconfig", str(config))
    assert (code, out) == (EXIT_UNREACHABLE, "")
    assert "cannot read the cluster" in err


@pytest.mark.parametrize(
    ("kubeconfig_variable", "flag", "want"),
    [
        (None, None, "no --kubeconfig, no $KUBECONFIG, no {home}/.kube/config"),
        ("{tmp}/missing", None, "$KUBECONFIG names {tmp}/missing, which does not exist"),
        (None, "{tmp}/gone", "--kubeconfig {tmp}/gone does not exist"),
    ],
    ids=["nothing anywhere", "$KUBECONFIG names no file", "--kubeconfig names no file"],
)
def test_without_a_kubeconfig_explain_says_so_not_config_exception(
    kubeconfig_variable: str | None,
    flag: str | None,
    want: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    if kubeconfig_variable is not None:
        monkeypatch.setenv("KUBECONFIG", kubeconfig_variable.format(tmp=tmp_path))
    args = ["pg/x"] + (["--kubeconfig", flag.format(tmp=tmp_path)] if flag else [])
    code, out, err = explain(capsys, *args)
    assert (code, out) == (EXIT_UNREACHABLE, "")
    assert want.format(home=home, tmp=tmp_path) in err, err
    assert "-f PATH" in err, err
    assert "ConfigException" not in err, err


def test_a_live_cluster_reads_the_configured_prometheus_like_the_operator(
    api: ApiClient, kubeconfig: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Prometheus that does not answer leaves every GPU unknown; with ``stale: unusable``
    the engine then uses none, and explain says why."""
    apply_yaml(api, *SAMPLE)
    wait_nodes_ready(api)
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {"telemetry": {"stale": "unusable", "prometheus": {"url": "http://127.0.0.1:9"}}}
        )
    )
    args = ("-n", "research", "--kubeconfig", str(kubeconfig), "--config", str(config))
    code, out, err = explain(capsys, "pod/finetune-0", *args)
    assert (code, err) == (EXIT_OK, "")
    assert "0 free usable GPUs, needs 4; excluded: GPU 0 no telemetry" in out

"""`gpusched run` refuses bad options before it starts the operator."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import gpusched
from gpusched.cli import main
from gpusched.commands import EXIT_BAD_INPUT
from gpusched.handlers import quiet_kopf
from gpusched.options import OptionsError, from_environment, parse


def test_an_invalid_config_file_exits_2_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("operator:\n  maxBackoffSeconds: -1\n")
    assert main(["run", "--config", str(config)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "operator.maxBackoffSeconds" in err
    assert str(config) in err


def test_a_metrics_address_without_a_port_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--metrics-address", "localhost"]) == EXIT_BAD_INPUT
    assert "--metrics-address" in capsys.readouterr().err


def test_a_bad_tracemalloc_frame_count_exits_2_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GPUSCHED_TRACEMALLOC", "all")
    assert main(["run"]) == EXIT_BAD_INPUT
    assert "GPUSCHED_TRACEMALLOC='all'" in capsys.readouterr().err


# ----- one way to set the operator's options ---------------------------------------------------


def test_kopf_run_takes_gpusched_runs_flags_from_gpusched_run_args() -> None:
    options = from_environment(
        {"GPUSCHED_RUN_ARGS": "--metrics-address 127.0.0.1:0 --kubeconfig /k --verbose"}
    )
    assert (options.metrics_address, options.metrics_port) == ("127.0.0.1", 0)
    assert (options.kubeconfig, options.verbose) == ("/k", True)


def test_kopf_run_without_gpusched_run_args_has_gpusched_runs_defaults() -> None:
    assert from_environment({}) == parse([])
    assert (parse([]).metrics_address, parse([]).metrics_port) == ("0.0.0.0", 9402)


@pytest.mark.parametrize(
    ("environ", "want"),
    [
        ({"GPUSCHED_METRICS_PORT": "0"}, "GPUSCHED_METRICS_PORT (use --metrics-address"),
        ({"GPUSCHED_CONFIG": "/c.yaml"}, "GPUSCHED_CONFIG (use --config"),
        ({"GPUSCHED_RUN_ARGS": "--metrics-address nowhere"}, "--metrics-address: 'nowhere'"),
        ({"GPUSCHED_RUN_ARGS": "--colour"}, "GPUSCHED_RUN_ARGS: unrecognized arguments: --colour"),
    ],
    ids=["retired port variable", "retired config variable", "bad address", "unknown flag"],
)
def test_kopf_run_refuses_what_it_would_otherwise_ignore(
    environ: dict[str, str], want: str
) -> None:
    with pytest.raises(OptionsError) as raised:
        from_environment(environ)
    assert want in str(raised.value)


# ----- logging --------------------------------------------------------------------------------


def kopf_record(message: str, level: int = logging.INFO) -> logging.LogRecord:
    return logging.LogRecord("kopf.objects", level, __file__, 1, message, None, None)


@pytest.mark.parametrize("verbose", [False, True])
def test_kopfs_line_per_handled_event_is_dropped_unless_verbose(verbose: bool) -> None:
    objects = logging.getLogger("kopf.objects")
    try:
        quiet_kopf(verbose)
        assert objects.filter(kopf_record("Handler 'pod_event' succeeded.")) is verbose
        assert objects.filter(kopf_record("Handler 'pod_event' failed: boom", logging.ERROR))
        assert objects.filter(kopf_record("Activity 'startup' succeeded."))
    finally:
        quiet_kopf(True)


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"gpusched {gpusched.__version__}"

"""`gpusched run` refuses bad options before it starts the operator."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpusched.cli import main
from gpusched.commands import EXIT_BAD_INPUT


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

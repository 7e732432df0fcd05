"""A bad configuration stops the operator at once with one line naming every error, with
"did you mean" for misspelt fields: under ``gpusched run`` and under plain ``kopf run`` alike
(Kopf would otherwise retry its failing startup handler every 60 s, with a traceback)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpusched.api.config import load_config
from gpusched.api.errors import InvalidObjectError

BAD = "operator:\n  batchWindowSecond: 1\n  initialBackoffSeconds: -3\nscheduler: gpusched\n"


def test_every_error_is_named_at_once_with_did_you_mean() -> None:
    import yaml

    with pytest.raises(InvalidObjectError) as caught:
        load_config(yaml.safe_load(BAD), source="c.yaml")
    message = str(caught.value)
    assert message.startswith(
        "c.yaml: operator.batchWindowSecond: unknown field (did you mean batchWindowSeconds?); "
    ), message
    assert message.endswith(" (3 errors)"), message
    assert "operator.initialBackoffSeconds: " in message
    assert "scheduler: unknown field (did you mean schedulerName?)" in message


def test_kopf_run_with_a_bad_config_exits_2_with_one_line(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(BAD)
    kopf = Path(sys.executable).parent / "kopf"
    if not kopf.exists():
        pytest.skip(f"no kopf script beside {sys.executable}")
    env = {**os.environ, "GPUSCHED_RUN_ARGS": f"--config {config}"}
    done = subprocess.run(
        [str(kopf), "run", "-m", "gpusched.handlers.plain", "--standalone", "--all-namespaces"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,  # a bound on a hang, not a wait: it exits as soon as startup runs
        check=False,
    )
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert done.returncode == 2, lines
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"gpusched: {config}: operator.batchWindowSecond: "), lines
    assert lines[0].endswith(" (3 errors)"), lines

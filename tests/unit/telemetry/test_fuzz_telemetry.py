"""Fuzzed telemetry answers: Prometheus query answers (`read_answer`) and saved ``/metrics``
scrapes (`parse_exposition`). A bad answer is a `TelemetryError`; a bad line or series is
skipped and counted; nothing else may escape."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from gpusched.api.config import TelemetryConfig
from gpusched.telemetry.exposition import parse_exposition
from gpusched.telemetry.prometheus import TelemetryError, read_answer
from gpusched.telemetry.series import METRICS, SeriesIndex
from testing.fuzz import fuzz_settings, mutants

CONFIG = TelemetryConfig()
ANSWER = {
    "status": "success",
    "data": {
        "resultType": "vector",
        "result": [
            {"metric": {"Hostname": "node-a", "gpu": "0"}, "value": [1764460800.5, "55"]},
            {"metric": {"hostname": "node-b", "gpu": "7", "UUID": "GPU-1"}, "value": [1, "1e3"]},
        ],
    },
}
SCRAPE = """# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).
# TYPE DCGM_FI_DEV_GPU_TEMP gauge
DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-a",Hostname="node-a"} 41
DCGM_FI_DEV_FB_FREE{gpu="0",Hostname="node-a"} 80000 1764460800000
DCGM_FI_DEV_XID_ERRORS{gpu="1",Hostname="node-a",err_code="0"} 0
"""
line_parts = st.sampled_from(
    [
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_FB_USED",
        "{",
        "}",
        '"',
        "=",
        ",",
        "\\",
        " ",
        "\n",
        'gpu="0"',
        'Hostname="n"',
        "NaN",
        "+Inf",
        "-1",
        "1e400",
        "12",
        "#",
        "\t",
        "é",
    ]
)


@fuzz_settings(1500)
@given(data=st.data())
def test_any_prometheus_answer_is_read_or_refused_as_a_telemetry_error(
    data: st.DataObject,
) -> None:
    choice = data.draw(st.integers(0, 2))
    if choice == 0:
        body = json.dumps(data.draw(mutants([ANSWER])))
    elif choice == 1:
        body = json.dumps(ANSWER)
        cut = data.draw(st.integers(0, len(body)))
        body = body[:cut] + data.draw(st.text(max_size=20)) + body[cut:]
    else:
        body = data.draw(st.text(max_size=300))
    index = SeriesIndex(CONFIG, known_nodes=None)
    try:
        read_answer(data.draw(st.integers(0, len(METRICS) - 1)), body, index)
    except TelemetryError:
        return
    index.build()


@fuzz_settings(1000)
@given(
    lines=st.lists(st.lists(line_parts, max_size=12).map("".join), max_size=8),
    noise=st.text(max_size=200),
)
def test_any_scrape_is_parsed_skipping_what_is_malformed(lines: list[str], noise: str) -> None:
    text = SCRAPE + "\n".join(lines) + noise
    data = parse_exposition(text, CONFIG, known_nodes=None)
    assert data is not None

"""Series → (node, GPU) → `GpuSample`: the mapping both telemetry sources share.

Stories are saved scrapes (``tests/data/dcgm``) and small text scrapes written here. Bad input
must be skipped with a counted reason, never crash, and never make a GPU look healthier than
its data says.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusched.api.config import SchedulerConfig, TelemetryConfig, load_config
from gpusched.engine.health import GpuSample, gpu_verdict
from gpusched.telemetry.exposition import parse_exposition
from gpusched.telemetry.series import METRICS, SeriesIndex, SkipReason, TelemetryData

DCGM = Path(__file__).resolve().parents[2] / "data" / "dcgm"
TEMP, FREE, USED, UTIL, XID = METRICS


def line(metric: str, value: str, stamp: int | None = None, **labels: str) -> str:
    text = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return f"{metric}{{{text}}} {value}" + (f" {stamp}" if stamp is not None else "")


def healthy(node: str, gpu: int, stamp: int | None = None, **overrides: str) -> list[str]:
    """The five metrics of one GPU; ``overrides`` replace values by metric suffix."""
    values = {TEMP: "40", FREE: "70000", USED: "10000", UTIL: "0", XID: "0"}
    for suffix, value in overrides.items():
        values[f"DCGM_FI_DEV_{suffix}"] = value
    return [line(m, v, stamp, gpu=str(gpu), Hostname=node) for m, v in values.items()]


def parse(lines: list[str], **config: object) -> TelemetryData:
    return parse_exposition("\n".join(lines) + "\n", TelemetryConfig.model_validate(config))


@dataclass(frozen=True)
class BadCase:
    lines: list[str]
    want_skipped: dict[SkipReason, int]
    want_gpus: set[tuple[str, int]] = field(default_factory=lambda: {("a", 0)})
    config: dict[str, object] = field(default_factory=dict)


BAD_INPUT = [
    pytest.param(
        BadCase([*healthy("a", 0), line(TEMP, "90", gpu="1")], {SkipReason.MISSING_NODE_LABEL: 1}),
        id="a series without Hostname is skipped",
    ),
    pytest.param(
        BadCase(
            [*healthy("a", 0), line(TEMP, "90", Hostname="a")], {SkipReason.MISSING_GPU_LABEL: 1}
        ),
        id="a series without gpu is skipped",
    ),
    pytest.param(
        BadCase(
            [
                *healthy("a", 0),
                *(line(TEMP, "1", gpu=g, Hostname="a") for g in ("x", "64", "-1", "٣")),
            ],
            {SkipReason.BAD_GPU_LABEL: 4},
        ),
        id="gpu labels that are not an index 0..63 are skipped",
    ),
    pytest.param(
        BadCase(
            [*healthy("a", 0), *healthy("a", 1, GPU_TEMP="NaN"), *healthy("a", 2, FB_FREE="+Inf")],
            {SkipReason.NOT_FINITE: 2, SkipReason.INCOMPLETE: 2},
        ),
        id="NaN temperature, infinite free memory: the value is skipped, so the GPU is unknown",
    ),
    pytest.param(
        BadCase(
            [*healthy("a", 0), *healthy("a", 1, GPU_TEMP="hot"), *healthy("a", 2, FB_FREE="-5")],
            {SkipReason.BAD_VALUE: 2, SkipReason.INCOMPLETE: 2},
        ),
        id="a word or a negative value is skipped, so the GPU is unknown",
    ),
    pytest.param(
        BadCase([*healthy("a", 0), *healthy("zzz", 0)], {SkipReason.UNKNOWN_NODE: 5}),
        id="series of a node not in the cluster are counted as unknown",
    ),
    pytest.param(
        BadCase(
            [*healthy("a", 0), TEMP + '{gpu="1",Hostname="a"', f"{TEMP} 5 6 7"],
            {SkipReason.MALFORMED: 2},
        ),
        id="a line cut short and a line with extra fields are malformed",
    ),
    pytest.param(
        BadCase(
            [*healthy("a", 0), line(TEMP, "30", gpu="0", Hostname="a")], {SkipReason.DUPLICATE: 1}
        ),
        id="a duplicate series is merged and counted",
    ),
    pytest.param(
        BadCase(
            [*healthy("a", 0), *healthy("a", 1)[:2]],
            {SkipReason.INCOMPLETE: 1},
        ),
        id="a GPU missing metrics that other GPUs of its node report is unknown",
    ),
    pytest.param(
        BadCase(
            [*healthy("a", 0), *healthy("b", 0)[:4], *healthy("b", 1)[:4]],
            {},
            {("a", 0), ("b", 0), ("b", 1)},
        ),
        id="a node whose exporter has no XID metric at all keeps its GPUs, XID unknown",
    ),
    pytest.param(
        BadCase(
            [
                line(TEMP, "40", gpu="0", hostname="a"),
                line(TEMP, "40", gpu="1", Hostname="a"),
                line(TEMP, "40", gpu="2", Hostname="", hostname="a"),
            ],
            {},
            {("a", 0), ("a", 1), ("a", 2)},
        ),
        id="Hostname or hostname name the node; an empty one is passed over",
    ),
    pytest.param(
        BadCase(
            [line(TEMP, "40", gpu="0", Hostname="dcgm-exporter-lcxpl")],
            {},
            config={"nodeMapping": {"dcgm-exporter-lcxpl": "a"}},
        ),
        id="a pod name as Hostname is mapped to its node",
    ),
    pytest.param(
        BadCase(
            [line(TEMP, "40", gpu="0", Hostname="pod-x", kubernetes_node="a")],
            {},
            config={"nodeLabels": ["kubernetes_node", "Hostname"]},
        ),
        id="configured node labels are tried in order",
    ),
]


@pytest.mark.parametrize("case", BAD_INPUT)
def test_bad_series_are_skipped_with_counted_reasons(case: BadCase) -> None:
    data = parse_exposition(
        "\n".join(case.lines), TelemetryConfig.model_validate(case.config), known_nodes={"a", "b"}
    )
    assert dict(data.skipped) == case.want_skipped, data.examples
    assert set(data.values) == case.want_gpus, data.values
    assert set(data.examples) == set(case.want_skipped), "every reason keeps an example"


def test_duplicates_keep_the_worse_value_of_each_metric() -> None:
    data = parse(
        [
            *healthy("a", 0),
            *healthy("a", 0, GPU_TEMP="85", FB_FREE="1000", FB_USED="79000", GPU_UTIL="99"),
            *healthy("a", 0, XID_ERRORS="79"),
        ]
    )
    assert data.view(0)["a", 0] == GpuSample(
        temperature_c=85.0,
        fb_free_mib=1000.0,
        fb_used_mib=79000.0,
        utilization=99.0,
        xid_errors=79.0,
        age_seconds=0.0,
    )
    assert data.skipped == {SkipReason.DUPLICATE: 10}


def test_age_is_that_of_the_oldest_value_of_the_node() -> None:
    # Temperature scraped at t=100 s, the rest at t=160 s.
    lines = [*healthy("a", 0, 160_000), *healthy("a", 1, 160_000)]
    lines = [ln.replace(" 160000", " 100000") if ln.startswith(TEMP) else ln for ln in lines]
    data = parse(lines)
    view = data.view(170.0)
    assert (view["a", 0].age_seconds, view["a", 1].age_seconds) == (70.0, 70.0)
    verdict = gpu_verdict(SchedulerConfig(), view["a", 0], 80000.0)
    assert verdict == (True, "telemetry stale (70 s > 60 s)"), verdict


def test_a_scrape_without_timestamps_is_as_of_its_newest_line() -> None:
    data = parse([*healthy("a", 0), *healthy("a", 1, 5_000)])
    assert data.node_time == {"a": 5.0}, "lines without a timestamp are as of t=5 s"
    assert data.view(5.0)["a", 0].age_seconds == 0.0


@given(
    st.lists(
        st.tuples(
            st.floats(0, 120), st.floats(0, 80000), st.floats(0, 80000), st.sampled_from([0, 0, 79])
        ),
        min_size=1,
        max_size=4,
    )
)
@settings(max_examples=60, deadline=None)
def test_merged_duplicates_never_look_healthier_than_any_of_them(
    reports: list[tuple[float, float, float, int]],
) -> None:
    config = SchedulerConfig()
    lines = []
    for temp, free, used, xid in reports:
        lines += healthy("a", 0, GPU_TEMP=repr(temp), FB_FREE=repr(free), FB_USED=repr(used))
        lines[-1] = line(XID, str(xid), gpu="0", Hostname="a")
    merged = parse(lines).view(0)["a", 0]
    alone = [
        parse(
            healthy("a", 0, GPU_TEMP=repr(t), FB_FREE=repr(f), FB_USED=repr(u), XID_ERRORS=str(x))
        ).view(0)["a", 0]
        for t, f, u, x in reports
    ]
    if any(gpu_verdict(config, sample, 80000.0) is not None for sample in alone):
        assert gpu_verdict(config, merged, 80000.0) is not None, (merged, alone)


# ----- saved scrapes ---------------------------------------------------------------------------


def test_complete_single_gpu_scrape() -> None:
    text = (DCGM / "dcgm-exporter-lke-rtx4000ada-1gpu-k8s-pod.metrics.txt").read_text()
    data = parse_exposition(text, TelemetryConfig())
    node = "lke529760-766837-0a634ab30000"
    assert data.view(0)[node, 0] == GpuSample(
        temperature_c=48.0,
        fb_free_mib=20015.0,
        fb_used_mib=1.0,
        utilization=0.0,
        xid_errors=0.0,
        age_seconds=0.0,
    )
    assert (data.metrics, dict(data.skipped)) == (METRICS, {})


def test_sampled_h100_scrape_has_temperature_and_utilisation_only() -> None:
    text = (DCGM / "dcgm-exporter-dgx-h100-8gpu-k8s-sampled.metrics.txt").read_text()
    data = parse_exposition(text, TelemetryConfig())
    temps = {gpu: data.view(0)[node, gpu].temperature_c for node, gpu in data.values}
    assert temps == {0: 30, 1: 29, 2: 26, 3: 29, 4: 28, 5: 26, 6: 28, 7: 26}
    assert data.metrics == (TEMP, UTIL), "memory metrics absent from the whole scrape are None"
    assert all(data.view(0)[k].fb_free_mib is None for k in data.values)


def test_scrape_cut_mid_line_does_not_crash() -> None:
    text = (DCGM / "dcgm-exporter-titanv-multigpu-empty-pod-labels.metrics.partial.txt").read_text()
    data = parse_exposition(text, TelemetryConfig())
    assert (len(data.values), dict(data.skipped)) == (0, {}), "no dcgm metric of ours in it"
    cut = text + "\n" + line(TEMP, "40", gpu="0", Hostname="a")[:30]
    assert parse_exposition(cut, TelemetryConfig()).skipped == {SkipReason.MALFORMED: 1}


def test_label_values_with_escapes_and_odd_spacing() -> None:
    text = f'{TEMP}{{ gpu = "0" , Hostname="a\\\\b\\"c", x="}}{{" , }}  40\n'
    data = parse_exposition(text, TelemetryConfig())
    assert list(data.values) == [('a\\b"c', 0)], data.skipped


def test_json_answer_without_sample_times_is_not_trusted() -> None:
    """The saved answer is a plain query: with no sample times, its values are unknown."""
    from gpusched.telemetry.prometheus import read_answer

    body = (DCGM / "prometheus-api-query-DCGM_FI_DEV_FB_USED-h100-2nodes.json").read_text()
    index = SeriesIndex(load_config({}).telemetry)
    read_answer(METRICS.index(USED), body, index)
    data = index.build()
    assert len(data.values) == 0
    assert data.skipped == {SkipReason.NO_SAMPLE_TIME: 16}, data.examples


def test_xid_unknown_for_a_node_without_the_metric() -> None:
    data = parse([*healthy("a", 0), *healthy("b", 0)[:4]])
    assert data.view(0)["b", 0].xid_errors is None
    assert data.view(0)["a", 0].xid_errors == 0.0

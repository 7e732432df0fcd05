"""Which nodes and GPUs a pod may get (`gpusched.engine.fit`, telemetry verdicts of
`gpusched.engine.health`, GPU choice through `schedule`).

Coverage (node × request × telemetry):

| node                    | 1 GPU             | 2-4 GPUs               | share    | telemetry    |
|-------------------------|-------------------|------------------------|----------|--------------|
| DGX A100, 5 of 8 busy   | the healthy one   | refused: hot, low mem. | healthy  | limits moved |
| DGX A100, 3 of 8 busy   |                   | NUMA: single/best/none |          |              |
| DGX A100, 7 of 8 busy   | stale, none, XID  |                        |          | both ways    |
| two DGX A100            | whole node out    |                        |          | excludeWhole |
| PCIe RTX 4090 (all SYS) |                   | lowest indices, SYS    |          |              |
| no topology annotation  | placed            | placed, UNKNOWN        |          |              |
| malformed, wrong count  | placed            | refused, names it      |          |              |
| GPUs bound by others    |                   | highest assumed taken  | best fit | hot skipped  |
| taints, selector, …     | filtered          | H100 by product label  |          |              |
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from gpusched.api.config import SchedulerConfig
from gpusched.api.selectors import NodeSelectorTerm, Toleration
from gpusched.engine.health import GpuSample
from gpusched.engine.policy import Policy
from gpusched.engine.request import PodRequest
from gpusched.engine.result import ScheduleResult
from gpusched.engine.schedule import schedule
from gpusched.engine.snapshot import BoundPod, Snapshot
from testing.engine import PRODUCT, bound, cluster, messages, node, pod, topology_annotation

TOPOLOGY = "gpusched.io/gpu-topology"
A100_MIB = 81920


def config(**raw: Any) -> SchedulerConfig:
    """A config from the config file's words, e.g. ``config(numaPolicy="none")``."""
    return SchedulerConfig.model_validate(raw)


def gpu(free_mib: float = 80000, temperature: float = 40, **more: Any) -> GpuSample:
    """A fresh dcgm sample of an 80 GB GPU."""
    return GpuSample(
        temperature_c=temperature, fb_free_mib=free_mib, fb_used_mib=A100_MIB - free_mib, **more
    )


def healthy(*nodes: str, count: int = 8) -> dict[tuple[str, int], GpuSample]:
    return {(n, i): gpu() for n in nodes for i in range(count)}


Outcome = tuple[str, tuple[int, ...], tuple[str, ...]] | str
"""(node, GPUs, notes) of the one binding, or the message of the one pending pod."""


def outcome(result: ScheduleResult) -> Outcome:
    """The fate of the single pod scheduled: bound somewhere, or pending with a message."""
    assert len(result.bindings) + len(result.unschedulable) == 1, result
    if result.bindings:
        b = result.bindings[0]
        return (b.node, b.gpus, b.notes)
    return result.unschedulable[0].message


def one_node(gpus: str, extra: str) -> str:
    """The message of a pod that found no node on a one-node cluster."""
    return f"0/1 nodes are available: 1 {gpus}: node-a ({extra})"


# ----- one busy 8 × A100 node: two pods, a hot GPU, a GPU short of memory -------------------
#
#   GPU  0  1  2 | 3  4 | 5        6         7
#        training| serv.| free     free      free
#                |      | healthy  86 °C     16000 of 81920 MiB free (20 %)


def seed_node(settings: SchedulerConfig) -> Snapshot:
    telemetry = {
        **{("node-a", i): gpu(free_mib=36920, temperature=70) for i in (0, 1, 2)},
        **{("node-a", i): gpu(free_mib=51920, temperature=60) for i in (3, 4)},
        ("node-a", 5): gpu(),
        ("node-a", 6): gpu(temperature=86),
        ("node-a", 7): gpu(free_mib=16000),
    }
    return cluster(
        nodes=[node("node-a")],
        bound=[
            bound(pod("training", gpus=3), "node-a", [0, 1, 2]),
            bound(pod("serving", gpus=2), "node-a", [3, 4]),
        ],
        telemetry=telemetry,
        config=settings,
    )


@dataclass(frozen=True)
class Case:
    id: str
    pod: PodRequest
    want: Outcome
    config: SchedulerConfig = field(default_factory=SchedulerConfig)


SEED_CASES = [
    Case("a 1-GPU pod gets the only healthy free GPU, 5", pod("p", gpus=1), ("node-a", (5,), ())),
    Case(
        "a 2-GPU pod does not fit, and the message names the hot GPU and the low-memory GPU",
        pod("p", gpus=2),
        one_node(
            "Insufficient nvidia.com/gpu",
            "1 free usable GPUs, needs 2; excluded: GPU 6 86 °C > 80 °C, "
            "GPU 7 free memory 20% < 30% (16000 MiB free)",
        ),
    ),
    Case("a GPU share also goes to GPU 5", pod("p", milli=500), ("node-a", (5,), ())),
    Case(
        "with temperatureLimitC 90 the hot GPU is usable again",
        pod("p", gpus=2),
        ("node-a", (5, 6), ()),
        config(telemetry={"temperatureLimitC": 90}),
    ),
    Case(
        "with minFreeMemoryRatio 0.1 the low-memory GPU is usable again",
        pod("p", gpus=2),
        ("node-a", (5, 7), ()),
        config(telemetry={"minFreeMemoryRatio": 0.1}),
    ),
]


@pytest.mark.parametrize("case", SEED_CASES, ids=lambda c: c.id)
def test_busy_a100_node(case: Case) -> None:
    assert outcome(schedule(seed_node(case.config), [case.pod], (), Policy())) == case.want


# ----- telemetry: stale, missing, XID, whole-node exclusion -------------------------------------
#
# GPUs 1..7 of node-a are held by a 7-GPU pod, so GPU 0 is the only candidate.


def last_gpu_free(sample: GpuSample | None, settings: SchedulerConfig) -> Snapshot:
    telemetry = healthy("node-a")
    del telemetry[("node-a", 0)]
    if sample is not None:
        telemetry[("node-a", 0)] = sample
    return cluster(
        nodes=[node("node-a")],
        bound=[bound(pod("big", gpus=7), "node-a", range(1, 8))],
        telemetry=telemetry,
        config=settings,
    )


@dataclass(frozen=True)
class TelemetryCase:
    id: str
    sample: GpuSample | None
    want: Outcome
    config: SchedulerConfig = field(default_factory=SchedulerConfig)


TELEMETRY_CASES = [
    TelemetryCase("fresh and healthy: used, nothing to note", gpu(), ("node-a", (0,), ())),
    TelemetryCase(
        "stale telemetry is usable by default, and the binding says so",
        gpu(age_seconds=120),
        ("node-a", (0,), ("GPU 0: telemetry stale (120 s > 60 s)",)),
    ),
    TelemetryCase(
        "stale telemetry is unusable when the config says so",
        gpu(age_seconds=120),
        one_node(
            "Insufficient nvidia.com/gpu",
            "0 free usable GPUs, needs 1; excluded: GPU 0 telemetry stale (120 s > 60 s)",
        ),
        config(telemetry={"stale": "unusable"}),
    ),
    TelemetryCase(
        "stale data is never healthy: a stale sample of a hot GPU is only stale",
        gpu(temperature=95, age_seconds=120),
        ("node-a", (0,), ("GPU 0: telemetry stale (120 s > 60 s)",)),
    ),
    TelemetryCase(
        "a longer maxAgeSeconds makes the same sample fresh",
        gpu(age_seconds=120),
        ("node-a", (0,), ()),
        config(telemetry={"maxAgeSeconds": 300}),
    ),
    TelemetryCase(
        "no telemetry at all is usable by default and reported",
        None,
        ("node-a", (0,), ("GPU 0: no telemetry",)),
    ),
    TelemetryCase(
        "no telemetry at all is unusable when stale GPUs are",
        None,
        one_node(
            "Insufficient nvidia.com/gpu",
            "0 free usable GPUs, needs 1; excluded: GPU 0 no telemetry",
        ),
        config(telemetry={"stale": "unusable"}),
    ),
    TelemetryCase(
        "an XID error excludes the GPU",
        gpu(xid_errors=79),
        one_node(
            "Insufficient nvidia.com/gpu",
            "0 free usable GPUs, needs 1; excluded: GPU 0 XID error 79",
        ),
    ),
    TelemetryCase(
        "excludeXidErrors false keeps a GPU with XID errors",
        gpu(xid_errors=79),
        ("node-a", (0,), ()),
        config(telemetry={"excludeXidErrors": False}),
    ),
]


@pytest.mark.parametrize("case", TELEMETRY_CASES, ids=lambda c: c.id)
def test_telemetry_verdicts(case: TelemetryCase) -> None:
    snapshot = last_gpu_free(case.sample, case.config)
    assert outcome(schedule(snapshot, [pod("p", gpus=1)], (), Policy())) == case.want


def test_stale_free_memory_does_not_win_over_fresh_telemetry() -> None:
    # GPU 0's last sample, ten minutes old, showed more free memory than the fresh samples of
    # the others. Stale data is unknown, never healthy, so it must not make GPU 0 look best.
    telemetry = healthy("node-a") | {("node-a", 0): gpu(free_mib=81000, age_seconds=600)}
    snapshot = cluster(nodes=[node("node-a")], telemetry=telemetry)
    assert outcome(schedule(snapshot, [pod("p", gpus=1)], (), Policy())) == ("node-a", (1,), ())


@pytest.mark.parametrize(
    ("settings", "want"),
    [
        # GPU 3 is out, so pair 2-3 (one NUMA node) is already broken: GPU 2 keeps the other
        # three NUMA pairs whole (step 3 of gpuset: NUMA concentration).
        pytest.param(config(), ("node-a", (2,), ()), id="by default only the hot GPU is excluded"),
        pytest.param(
            config(telemetry={"excludeWholeNode": True}),
            ("node-b", (0,), ()),
            id="excludeWholeNode takes node-a out for one hot GPU",
        ),
    ],
)
def test_exclude_whole_node(settings: SchedulerConfig, want: Outcome) -> None:
    telemetry = healthy("node-a", "node-b") | {("node-a", 3): gpu(temperature=90)}
    snapshot = cluster(nodes=[node("node-a"), node("node-b")], telemetry=telemetry, config=settings)
    assert outcome(schedule(snapshot, [pod("p", gpus=1)], (), Policy())) == want


def test_exclude_whole_node_explains_itself_when_nothing_is_left() -> None:
    telemetry = healthy("node-a") | {("node-a", 3): gpu(temperature=90)}
    settings = config(telemetry={"excludeWholeNode": True})
    snapshot = cluster(nodes=[node("node-a")], telemetry=telemetry, config=settings)
    message = outcome(schedule(snapshot, [pod("p", gpus=1)], (), Policy()))
    assert isinstance(message, str), message
    assert message.startswith(one_node("Insufficient nvidia.com/gpu", "0 free usable GPUs")[:-1])
    assert "GPU 3 90 °C > 80 °C" in message, message


# ----- NUMA on a DGX A100 -----------------------------------------------------------------------
#
#   GPU    0  1 | 2  3 | 4  5 | 6  7        all pairs NV12 (NVSwitch)
#   NUMA   3  3 | 1  1 | 7  7 | 5  5
#   busy   x    | x    | x    |
#
# Free: 1 (NUMA 3), 3 (NUMA 1), 5 (NUMA 7), 6 and 7 (NUMA 5).


@dataclass(frozen=True)
class NumaCase:
    id: str
    policy: str
    gpus: int
    want: tuple[int, ...] | str
    """The GPUs the pod gets on node-a, or the pending pod's message."""


NUMA_CASES = [
    NumaCase("single-numa-node, 2 GPUs: the only NUMA pair", "single-numa-node", 2, (6, 7)),
    NumaCase("best-effort, 2 GPUs: the NUMA pair too", "best-effort", 2, (6, 7)),
    NumaCase("none, 2 GPUs: NUMA ignored, lowest indices", "none", 2, (1, 3)),
    NumaCase(
        "single-numa-node, 4 GPUs: no NUMA node has 4 free",
        "single-numa-node",
        4,
        one_node("Insufficient nvidia.com/gpu", "2 free usable GPUs in one NUMA node, needs 4"),
    ),
    NumaCase(
        "best-effort, 4 GPUs: the pair plus two, 3 NUMA nodes", "best-effort", 4, (1, 3, 6, 7)
    ),
    NumaCase("none, 4 GPUs: lowest indices", "none", 4, (1, 3, 5, 6)),
]


@pytest.mark.parametrize("case", NUMA_CASES, ids=lambda c: c.id)
def test_numa_policy_on_dgx_a100(case: NumaCase) -> None:
    snapshot = cluster(
        nodes=[node("node-a")],
        bound=[bound(pod(f"busy-{i}", gpus=1), "node-a", [i]) for i in (0, 2, 4)],
        telemetry=healthy("node-a"),
    )
    policy = Policy.of(config(numaPolicy=case.policy))
    got = outcome(schedule(snapshot, [pod("p", gpus=case.gpus)], (), policy))
    want = case.want if isinstance(case.want, str) else ("node-a", case.want, ())
    assert got == want


# ----- GPU topology of the node: PCIe, unknown, malformed ---------------------------------------

MALFORMED = {TOPOLOGY: "{not json"}
WRONG_COUNT = {TOPOLOGY: topology_annotation("h100x4") or ""}


@dataclass(frozen=True)
class TopologyCase:
    id: str
    kind: str
    gpus: int
    want: tuple[str, tuple[int, ...], str | None, str | None] | str
    """(node, GPUs, link tier, best tier) of the binding, or the pending pod's message."""
    annotations: Mapping[str, str] = field(default_factory=dict)


TOPOLOGY_CASES = [
    TopologyCase(
        "PCIe-only node (all SYS): 2 GPUs get the lowest indices, SYS reported",
        "pcie4090x8",
        2,
        ("node-a", (0, 1), "SYS", "SYS"),
    ),
    TopologyCase(
        "PCIe-only node: 4 GPUs get the lowest indices",
        "pcie4090x8",
        4,
        ("node-a", (0, 1, 2, 3), "SYS", "SYS"),
    ),
    TopologyCase(
        "DGX A100: 2 GPUs over NVLink, the best the node offers",
        "a100x8",
        2,
        ("node-a", (0, 1), "NVLINK", "NVLINK"),
    ),
    TopologyCase(
        "no topology annotation: a single GPU is fine", "gpu8", 1, ("node-a", (0,), None, None)
    ),
    TopologyCase(
        "no topology annotation: 2 GPUs placed, link tier UNKNOWN reported",
        "gpu8",
        2,
        ("node-a", (0, 1), "UNKNOWN", "UNKNOWN"),
    ),
    TopologyCase(
        "malformed annotation: a single GPU is fine",
        "a100x8",
        1,
        ("node-a", (0,), None, None),
        MALFORMED,
    ),
    TopologyCase(
        "malformed annotation: 2 GPUs refused, the reason names the annotation",
        "a100x8",
        2,
        one_node(
            "invalid GPU topology annotation: single-GPU pods only",
            "Node node-a: metadata.annotations[gpusched.io/gpu-topology]: "
            "not JSON: Expecting property name enclosed in double quotes at char 1",
        ),
        MALFORMED,
    ),
    TopologyCase(
        "an annotation describing 4 GPUs on an 8-GPU node: 2 GPUs refused, saying so",
        "a100x8",
        2,
        one_node(
            "invalid GPU topology annotation: single-GPU pods only",
            "Node node-a: metadata.annotations[gpusched.io/gpu-topology]: "
            "describes 4 GPUs but the node advertises 8 nvidia.com/gpu",
        ),
        WRONG_COUNT,
    ),
]


@pytest.mark.parametrize("case", TOPOLOGY_CASES, ids=lambda c: c.id)
def test_node_gpu_topology(case: TopologyCase) -> None:
    snapshot = cluster(
        nodes=[node("node-a", case.kind, annotations=case.annotations)],
        telemetry=healthy("node-a"),
    )
    result = schedule(snapshot, [pod("p", gpus=case.gpus)], (), Policy())
    got: Any = [(b.node, b.gpus, b.link_tier, b.best_tier) for b in result.bindings]
    got = got[0] if got else messages(result).get("p")
    assert got == case.want


# ----- node filters: taints, selectors, affinity, cordon, readiness -----------------------------

NO_SCHEDULE = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}


def term(key: str, operator: str, *values: str) -> NodeSelectorTerm:
    raw = {"matchExpressions": [{"key": key, "operator": operator, "values": list(values)}]}
    return NodeSelectorTerm.model_validate(raw)


def toleration(**raw: Any) -> Toleration:
    return Toleration.model_validate(raw)


def refused(why: str) -> str:
    return f"0/1 nodes are available: 1 {why}: node-a"


@dataclass(frozen=True)
class FilterCase:
    id: str
    node: Any
    pod: PodRequest
    want: Outcome


FILTER_CASES = [
    FilterCase(
        "a NoSchedule taint keeps a pod without toleration off",
        node("node-a", taints=[NO_SCHEDULE]),
        pod("p", gpus=1),
        refused("untolerated taint dedicated=ml:NoSchedule"),
    ),
    FilterCase(
        "an Equal toleration of the taint lets the pod on",
        node("node-a", taints=[NO_SCHEDULE]),
        pod(
            "p",
            gpus=1,
            tolerations=[toleration(key="dedicated", value="ml", effect="NoSchedule")],
        ),
        ("node-a", (0,), ()),
    ),
    FilterCase(
        "an Exists toleration of the key lets the pod on",
        node("node-a", taints=[NO_SCHEDULE]),
        pod("p", gpus=1, tolerations=[toleration(key="dedicated", operator="Exists")]),
        ("node-a", (0,), ()),
    ),
    FilterCase(
        "a toleration of another value does not",
        node("node-a", taints=[NO_SCHEDULE]),
        pod("p", gpus=1, tolerations=[toleration(key="dedicated", value="web")]),
        refused("untolerated taint dedicated=ml:NoSchedule"),
    ),
    FilterCase(
        "a NoExecute taint keeps the pod off too",
        node("node-a", taints=[{**NO_SCHEDULE, "effect": "NoExecute"}]),
        pod("p", gpus=1),
        refused("untolerated taint dedicated=ml:NoExecute"),
    ),
    FilterCase(
        "a PreferNoSchedule taint does not keep anyone off",
        node("node-a", taints=[{**NO_SCHEDULE, "effect": "PreferNoSchedule"}]),
        pod("p", gpus=1),
        ("node-a", (0,), ()),
    ),
    FilterCase(
        "a matching nodeSelector",
        node("node-a", labels={"pool": "ml"}),
        pod("p", gpus=1, selector={"pool": "ml"}),
        ("node-a", (0,), ()),
    ),
    FilterCase(
        "a nodeSelector the node does not match",
        node("node-a", labels={"pool": "web"}),
        pod("p", gpus=1, selector={"pool": "ml"}),
        refused("nodeSelector pool=ml does not match"),
    ),
    FilterCase(
        "node affinity on the GPU product label: an A100 asked for, an A100 node",
        node("node-a"),
        pod("p", gpus=1, terms=[term(PRODUCT, "In", "NVIDIA-A100-SXM4-80GB")]),
        ("node-a", (0,), ()),
    ),
    FilterCase(
        "node affinity on the GPU product label: an H100 asked for, an A100 node",
        node("node-a"),
        pod("p", gpus=1, terms=[term(PRODUCT, "In", "NVIDIA-H100-80GB-HBM3")]),
        refused("required node affinity does not match"),
    ),
    FilterCase(
        "a cordoned node takes nothing",
        node("node-a", unschedulable=True),
        pod("p", gpus=1),
        refused("node is cordoned"),
    ),
    FilterCase(
        "a NotReady node takes nothing",
        node("node-a", ready=False),
        pod("p", gpus=1),
        refused("node is NotReady"),
    ),
]


@pytest.mark.parametrize("case", FILTER_CASES, ids=lambda c: c.id)
def test_node_filters(case: FilterCase) -> None:
    snapshot = cluster(nodes=[case.node], telemetry=healthy("node-a"))
    assert outcome(schedule(snapshot, [case.pod], (), Policy())) == case.want


def test_node_affinity_picks_the_gpu_model_among_nodes() -> None:
    # node-a (A100) sorts first and would win a tie; the pod asks for an H100.
    snapshot = cluster(
        nodes=[node("node-a"), node("node-b", "h100x4")],
        telemetry=healthy("node-a") | healthy("node-b", count=4),
    )
    wanted = pod("p", gpus=2, terms=[term(PRODUCT, "In", "NVIDIA-H100-80GB-HBM3")])
    assert outcome(schedule(snapshot, [wanted], (), Policy())) == ("node-b", (0, 1), ())


# ----- GPU shares (gpusched.io/gpu-milli) -------------------------------------------------------
#
#   GPU   0            1            2..7
#   used  600 (app x)  300 (app llm) free


def share(name: str, milli: int, app: str | None = None) -> PodRequest:
    return pod(name, cpu=0, memory=0, milli=milli, app=app)


SHARED = [
    bound(share("x-0", 600, app="x"), "node-a", [0]),
    bound(share("llm-0", 300, app="llm"), "node-a", [1]),
]


@dataclass(frozen=True)
class ShareCase:
    id: str
    pod: PodRequest
    want_gpu: int
    bound: Sequence[BoundPod] = tuple(SHARED)
    telemetry: Mapping[tuple[str, int], GpuSample] = field(
        default_factory=lambda: healthy("node-a")
    )


SHARE_CASES = [
    ShareCase("300 milli fit best on GPU 0 (100 left)", share("p", 300), 0),
    ShareCase("500 milli fit best on GPU 1 (200 left); GPU 0 has 400", share("p", 500), 1),
    ShareCase("800 milli fit no shared GPU: the first whole free one, 2", share("p", 800), 2),
    ShareCase(
        "equal fit: the GPU already running the same app",
        share("p", 400, app="llm"),
        1,
        bound=[
            bound(share("x-0", 600, app="x"), "node-a", [0]),
            bound(share("llm-0", 600, app="llm"), "node-a", [1]),
        ],
    ),
    ShareCase(
        "the best fit is hot: the next best, GPU 1",
        share("p", 300),
        1,
        telemetry=healthy("node-a") | {("node-a", 0): gpu(temperature=90)},
    ),
]


@pytest.mark.parametrize("case", SHARE_CASES, ids=lambda c: c.id)
def test_gpu_share_best_fit(case: ShareCase) -> None:
    snapshot = cluster(nodes=[node("node-a")], bound=case.bound, telemetry=case.telemetry)
    assert outcome(schedule(snapshot, [case.pod], (), Policy())) == ("node-a", (case.want_gpu,), ())


# ----- pods bound by someone else ---------------------------------------------------------------


@dataclass(frozen=True)
class ForeignCase:
    id: str
    gpus: tuple[int, ...] | None
    """The bound pod's gpusched.io/gpus annotation (None: absent)."""
    want: tuple[int, ...]
    want_note: bool


FOREIGN_CASES = [
    ForeignCase(
        "without the gpus annotation a 2-GPU pod is assumed on the highest GPUs, 6 and 7",
        None,
        (0, 1, 2, 3, 4, 5),
        want_note=True,
    ),
    ForeignCase(
        "an annotation naming the wrong number of GPUs is not trusted either",
        (0,),
        (0, 1, 2, 3, 4, 5),
        want_note=True,
    ),
    ForeignCase(
        "an annotation naming GPUs the node lacks is not trusted",
        (8, 9),
        (0, 1, 2, 3, 4, 5),
        want_note=True,
    ),
    ForeignCase("a valid annotation is believed", (0, 1), (2, 3, 4, 5, 6, 7), want_note=False),
]


@pytest.mark.parametrize("case", FOREIGN_CASES, ids=lambda c: c.id)
def test_pods_bound_by_others(case: ForeignCase) -> None:
    snapshot = cluster(
        nodes=[node("node-a")],
        bound=[bound(pod("legacy", gpus=2), "node-a", case.gpus)],
        telemetry=healthy("node-a"),
    )
    assert outcome(schedule(snapshot, [pod("p", gpus=6)], (), Policy())) == (
        "node-a",
        case.want,
        (),
    )
    note = (
        "default/legacy holds 2 GPU(s) without a valid gpusched.io/gpus annotation; "
        "assumed GPU(s) 6,7"
    )
    assert snapshot.node_notes.get(0, []) == ([note] if case.want_note else [])


# ----- a node whose annotation and allocatable disagree: offered the smaller count -------------


def test_a_node_whose_annotation_describes_fewer_gpus_is_offered_only_that_many() -> None:
    """8 advertised, 4 described: four single-GPU pods fit, the fifth waits, saying so."""
    snapshot = cluster(
        nodes=[node("node-a", "a100x8", annotations=WRONG_COUNT)], telemetry=healthy("node-a")
    )
    result = schedule(snapshot, [pod(f"p{i}", gpus=1) for i in range(5)], (), Policy())
    assert sorted(b.gpus[0] for b in result.bindings) == [0, 1, 2, 3]
    assert "p4" in messages(result), messages(result)


def test_a_node_whose_annotation_describes_more_gpus_is_offered_what_it_advertises() -> None:
    """4 advertised, 8 described: only four GPUs are ever offered, whatever the annotation."""
    annotations = {TOPOLOGY: topology_annotation("a100x8") or ""}
    snapshot = cluster(
        nodes=[node("node-a", "h100x4", annotations=annotations)], telemetry=healthy("node-a")
    )
    result = schedule(snapshot, [pod(f"p{i}", gpus=1) for i in range(6)], (), Policy())
    assert sorted(b.gpus[0] for b in result.bindings) == [0, 1, 2, 3]
    assert set(messages(result)) == {"p4", "p5"}


def test_a_request_only_a_lying_node_advertises_waits_rather_than_being_invalid() -> None:
    """The one 8-GPU node describes 4: an 8-GPU pod is unschedulable there for its annotation
    (mend it and the pod fits), not impossible for a cluster whose largest node has 4."""
    snapshot = cluster(
        nodes=[node("node-a", "a100x8", annotations=WRONG_COUNT)], telemetry=healthy("node-a")
    )
    result = schedule(snapshot, [pod("p", gpus=8)], (), Policy())
    message = messages(result)["p"]
    assert "largest node" not in message, message
    assert "describes 4 GPUs but the node advertises 8" in message, message

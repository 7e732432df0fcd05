"""GPU topology × request × telemetry stories through `schedule`: one pod, one node.

These close cells of ``tests/unit/TESTS.md`` that no other file checked. Every expected GPU set
is worked out by hand from the node's capture in ``tests/data/gpu-topology`` (NUMA pairs,
NVLink quads, link tiers) and the ranking documented in `gpusched.engine.gpuset`, never by
running the engine:

1. NUMA (``best-effort``: fewest NUMA nodes; ``single-numa-node``: one or nothing),
2. fewest slow links, then more bonded NVLinks,
3. what is left: the largest free all-NVLink set, then the largest free NVLink block, then NUMA
   concentration (Σ of free GPUs² per NUMA node: take from a broken node, keep whole ones whole),
4. most free memory from fresh telemetry (stale or missing counts as none),
5. lowest indices.

A GPU share goes to the usable GPU it fits best (least left over), then the lowest index.

Coverage (node × request × telemetry):

| node          | 1 GPU        | 2-4 GPUs                                | 8 GPUs       | share    |
|---------------|--------------|-----------------------------------------|--------------|----------|
| HGX A100      | broken pair  | NUMA pairs, a gang; hot, low memory,    | fits/refused | best fit |
|               |              | XID, stale both ways, missing; refusals |              |          |
| DGX A100      |              | XID, stale both ways, missing           | same         |          |
| DGX-1 V100    | keeps a quad | hot in a quad, in both, NV2 pairs       |              |          |
| PCIe all-SYS  | lowest       | lowest, hot; single-numa-node refused   | SYS          | best fit |
| 4 × H100 VM   | first        | one NUMA node: single-numa-node fits    | Invalid      | best fit |
| unknown       |              | UNKNOWN tier; single-numa-node refused  | UNKNOWN      | first    |
| malformed     |              | refused, naming the annotation          | refused      | accepted |
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

import pytest

from gpusched.api.config import SchedulerConfig
from gpusched.engine.health import GpuSample
from gpusched.engine.policy import Policy
from gpusched.engine.result import ScheduleResult
from gpusched.engine.schedule import schedule
from gpusched.engine.snapshot import Snapshot
from testing.engine import (
    KINDS,
    RACK,
    bound,
    cluster,
    gang,
    members,
    node,
    outcomes,
    placements,
    pod,
    topology_annotation,
)

# ----- how a story is told ----------------------------------------------------------------------

NV, SYS, UNKNOWN = "NVLINK", "SYS", "UNKNOWN"
ALL8 = (0, 1, 2, 3, 4, 5, 6, 7)
SINGLE = "single-numa-node"
STALE_UNUSABLE: Mapping[str, Any] = {"stale": "unusable"}

Telemetry = Mapping[int, GpuSample | None]
"""Per GPU of node-a, a sample that replaces the healthy one; ``None`` removes it (missing)."""

HEALTHY: Telemetry = {}
HOT = GpuSample(temperature_c=86)
LOW_MEMORY = GpuSample(temperature_c=40, fb_free_mib=4000)
XID = GpuSample(temperature_c=40, xid_errors=79)
STALE = GpuSample(temperature_c=40, fb_free_mib=81000, age_seconds=120)
"""Two minutes old (limit 60 s). Its plentiful free memory must not count: stale is unknown."""
MISSING = None


@dataclass(frozen=True)
class Bound:
    """The pod is bound: its GPUs, the worst link among them and the best worst link a set of
    that size could have on the node (both ``None`` under 2 GPUs), and the binding's notes."""

    gpus: tuple[int, ...]
    tier: str | None = None
    best: str | None = None
    notes: tuple[str, ...] = ()
    node: str = "node-a"


@dataclass(frozen=True)
class Refused:
    """The pod stays pending with this message and reason."""

    message: str
    reason: str = "Unschedulable"


def no_gpus(detail: str) -> Refused:
    """The message of a pod that found too few usable GPUs on the one node, node-a."""
    return Refused(f"0/1 nodes are available: 1 Insufficient nvidia.com/gpu: node-a ({detail})")


@dataclass(frozen=True)
class Story:
    id: str
    _: KW_ONLY
    want: Bound | Refused
    gpus: int = 0
    milli: int = 0
    busy: tuple[int, ...] = ()
    """GPUs of node-a each held by a bound 1-GPU pod."""
    shared: Mapping[int, int] = field(default_factory=dict)
    """GPU → milli-GPU held there by a bound share."""
    telemetry: Telemetry | None = None
    """``None``: no telemetry source at all. Otherwise every GPU is healthy but these."""
    policy: str = "best-effort"
    settings: Mapping[str, Any] = field(default_factory=dict)
    """The config's ``telemetry`` section, in the config file's words."""
    annotations: Mapping[str, str] = field(default_factory=dict)


def both(id: str, **fields: Any) -> list[Story]:
    """The same story without a telemetry source and with every GPU healthy: healthy
    telemetry must change nothing (equal free memory everywhere)."""
    return [
        Story(f"{id} (no telemetry source)", telemetry=None, **fields),
        Story(f"{id} (all GPUs healthy)", telemetry=HEALTHY, **fields),
    ]


def samples(kind: str, overrides: Telemetry) -> dict[tuple[str, int], GpuSample]:
    _, count, _, memory, _, _ = KINDS[kind]
    healthy = GpuSample(temperature_c=40, fb_free_mib=0.75 * memory, fb_used_mib=0.25 * memory)
    per_gpu = dict.fromkeys(range(count), healthy) | dict(overrides)
    return {("node-a", gpu): s for gpu, s in per_gpu.items() if s is not None}


def snapshot(kind: str, story: Story) -> Snapshot:
    held = [bound(pod(f"busy-{g}", gpus=1), "node-a", [g]) for g in story.busy]
    held += [bound(pod(f"share-{g}", milli=m), "node-a", [g]) for g, m in story.shared.items()]
    telemetry = samples(kind, story.telemetry) if story.telemetry is not None else None
    settings = SchedulerConfig.model_validate({"telemetry": dict(story.settings)})
    return cluster(
        nodes=[node("node-a", kind, annotations=story.annotations)],
        bound=held,
        telemetry=telemetry,
        config=settings,
    )


def fate(result: ScheduleResult) -> Bound | Refused:
    """What became of the one pod scheduled: the whole binding, or the whole failure."""
    assert not result.groups, f"a pod without a group made group decisions: {result.groups}"
    fates = len(result.bindings) + len(result.unschedulable)
    assert fates == 1, f"want exactly one binding or failure, got {result}"
    if result.bindings:
        b = result.bindings[0]
        return Bound(b.gpus, b.link_tier, b.best_tier, b.notes, node=b.node)
    failure = result.unschedulable[0]
    return Refused(failure.message, failure.reason.value)


def check(kind: str, story: Story) -> None:
    request = pod("p", gpus=story.gpus, milli=story.milli)
    policy = Policy.of(SchedulerConfig.model_validate({"numaPolicy": story.policy}))
    got = fate(schedule(snapshot(kind, story), [request], (), policy))
    assert got == story.want, f"{kind}: {story.id}\n  got:  {got}\n  want: {story.want}"


# ----- HGX A100: NV12 over NVSwitch, NUMA pairs -------------------------------------------------
#
#   GPU    0  1 | 2  3 | 4  5 | 6  7      every pair NV12 (NVSwitch), so links never decide:
#   NUMA   0  0 | 1  1 | 2  2 | 3  3      NUMA, what is left, free memory and indices do
#
# (hgx-a100-8gpu-3nic-4numa.topo.txt: NUMA column 0,0,1,1,2,2,3,3, unlike the DGX A100's
# 3,3,1,1,7,7,5,5; the three NICs play no part in choosing GPUs.)

HGX_STORIES = [
    # Taking GPU 0 or 1 would leave no NUMA node with 2 free GPUs; 2, 4 and 6 each leave pair
    # 0-1 whole (step 3), and 2 is the lowest of them.
    *both(
        "GPUs 3, 5, 7 busy: a single GPU comes from a broken pair, 2, keeping pair 0-1 whole",
        gpus=1,
        busy=(3, 5, 7),
        want=Bound((2,)),
    ),
    # Free: 0 1 | 3 | 5 | 6 7. Taking 3 or 5, each the last free GPU of its NUMA node, keeps both
    # whole pairs (Σ free² per NUMA node 4 + 1 + 4 = 9); taking 0, 1, 6 or 7 breaks one (7). 3 is
    # the lower.
    *both(
        "GPUs 2, 4 busy: a single GPU comes from a broken pair, 3, keeping pairs 0-1 and 6-7 whole",
        gpus=1,
        busy=(2, 4),
        want=Bound((3,)),
    ),
    # 6-7 is the only NUMA node with both GPUs free.
    *both(
        "GPUs 0, 2, 4 busy: 2 GPUs take the one whole NUMA pair, 6-7",
        gpus=2,
        busy=(0, 2, 4),
        want=Bound((6, 7), NV, NV),
    ),
    # Two NUMA nodes cannot hold 4 (only 6-7 is whole), so 3 nodes: pair 6-7 and two single
    # GPUs from different nodes; every such set leaves one GPU, so the lowest singles, 1 and 3.
    *both(
        "GPUs 0, 2, 4 busy: 4 GPUs (best-effort) take pair 6-7 plus 1 and 3, 3 NUMA nodes",
        gpus=4,
        busy=(0, 2, 4),
        want=Bound((1, 3, 6, 7), NV, NV),
    ),
    # NUMA ignored, all links NV12, every set leaves one GPU: the lowest free indices.
    *both(
        "GPUs 0, 2, 4 busy: 4 GPUs under numaPolicy none take the lowest free, 1 3 5 6",
        gpus=4,
        busy=(0, 2, 4),
        policy="none",
        want=Bound((1, 3, 5, 6), NV, NV),
    ),
    # 3 GPUs need 2 NUMA nodes at least: a whole pair plus one. Each such set leaves a whole
    # pair somewhere (2 free in one NUMA node), so the lowest: pair 0-1 and GPU 2.
    *both(
        "3 GPUs: a whole pair plus one, 0 1 2 (2 NUMA nodes)",
        gpus=3,
        want=Bound((0, 1, 2), NV, NV),
    ),
    *both("an empty node: 8 GPUs take all of it, over NVLink", gpus=8, want=Bound(ALL8, NV, NV)),
    *both(
        "GPU 0 busy: 8 GPUs do not fit, and the message counts the 7",
        gpus=8,
        busy=(0,),
        want=no_gpus("7 free usable GPUs, needs 8"),
    ),
    *both(
        "single-numa-node, GPUs 0, 2, 4 busy: 2 GPUs take pair 6-7, the one NUMA node with 2",
        gpus=2,
        busy=(0, 2, 4),
        policy=SINGLE,
        want=Bound((6, 7), NV, NV),
    ),
    *both(
        "single-numa-node: 8 GPUs never fit, a NUMA node holds 2",
        gpus=8,
        policy=SINGLE,
        want=no_gpus("2 free usable GPUs in one NUMA node, needs 8"),
    ),
    # Best fit: GPU 5 has 400 milli left, so 300 leave 100 there rather than 700 elsewhere.
    *both(
        "GPU 5 shared at 600 milli: a 300-milli share fits best there",
        milli=300,
        shared={5: 600},
        want=Bound((5,)),
    ),
]


@pytest.mark.parametrize("story", HGX_STORIES, ids=lambda s: s.id)
def test_hgx_a100(story: Story) -> None:
    check("hgxa100x8", story)


def test_single_numa_node_gang_fills_every_numa_pair_of_one_hgx_a100() -> None:
    # Four NUMA nodes of 2 GPUs hold four 2-GPU pods under single-numa-node, one pair each:
    # each pod takes the lowest whole pair left (every whole pair leaves another whole).
    snapshot = cluster(
        zones={"z1": {"r1": ["hgxa100x8"]}},
    )
    group = gang("pairs", 4, topology=RACK)
    policy = Policy.of(SchedulerConfig.model_validate({"numaPolicy": SINGLE}))
    result = schedule(snapshot, members("w", 4, gpus=2, group="pairs"), [group], policy)
    got = (placements(result), outcomes(result))
    want = (
        {f"w-{i}": ("node-a", (2 * i, 2 * i + 1)) for i in range(4)},
        {"pairs": ("Scheduled", "z1/r1", "Scheduled")},
    )
    attempts = [d.attempts for d in result.groups]
    assert got == want, f"got {got}, want {want}; attempts: {attempts}"


# ----- HGX A100 with telemetry: the best set loses a GPU ----------------------------------------
#
#   GPU    0  1 | 2  3 | 4  5 | 6  7
#   NUMA   0  0 | 1  1 | 2  2 | 3  3
#   busy        | x    | x    |           whole pairs left: 0-1 and 6-7; single GPUs 3 and 5
#
# GPU 1 is the one with bad, old or no telemetry.
# - 2 GPUs, all healthy: pairs 0-1 and 6-7 tie (one NUMA node each, each leaves the other
#   whole, equal free memory), so 0-1. GPU 1 excluded: 6-7 is the only pair left. GPU 1 stale
#   or missing but usable: still a tie up to step 3, but GPU 1's free memory is unknown and
#   counts as none, so 6-7 (more free memory) wins; nothing to note, GPU 1 is not used.
# - 4 GPUs, all healthy: both whole pairs, 0 1 6 7 (2 NUMA nodes). GPU 1 excluded: no 2-node
#   set is left; pair 6-7 plus two singles of 0, 3, 5 (3 nodes), the lowest being 0 and 3.
#   GPU 1 usable but unknown: 0 1 6 7 is still the only 2-node set, and NUMA comes before
#   memory, so it is taken and the binding says what it relied on.

TWO_PAIRS = (2, 4)
STALE_NOTE = "GPU 1: telemetry stale (120 s > 60 s)"
MISSING_NOTE = "GPU 1: no telemetry"

HGX_TELEMETRY_STORIES = [
    Story(
        "all healthy: 2 GPUs take the lower whole pair, 0-1",
        gpus=2,
        busy=TWO_PAIRS,
        telemetry=HEALTHY,
        want=Bound((0, 1), NV, NV),
    ),
    Story(
        "all healthy: 4 GPUs take both whole pairs, 0 1 6 7",
        gpus=4,
        busy=TWO_PAIRS,
        telemetry=HEALTHY,
        want=Bound((0, 1, 6, 7), NV, NV),
    ),
    Story(
        "GPU 1 hot: 2 GPUs take the other whole pair, 6-7",
        gpus=2,
        busy=TWO_PAIRS,
        telemetry={1: HOT},
        want=Bound((6, 7), NV, NV),
    ),
    Story(
        "GPU 1 hot: 4 GPUs take pair 6-7 plus 0 and 3",
        gpus=4,
        busy=TWO_PAIRS,
        telemetry={1: HOT},
        want=Bound((0, 3, 6, 7), NV, NV),
    ),
    Story(
        "GPU 1 low on memory: 2 GPUs take the other whole pair, 6-7",
        gpus=2,
        busy=TWO_PAIRS,
        telemetry={1: LOW_MEMORY},
        want=Bound((6, 7), NV, NV),
    ),
    Story(
        "GPU 1 low on memory: 4 GPUs take pair 6-7 plus 0 and 3",
        gpus=4,
        busy=TWO_PAIRS,
        telemetry={1: LOW_MEMORY},
        want=Bound((0, 3, 6, 7), NV, NV),
    ),
    Story(
        "GPU 1 with an XID error: 2 GPUs take the other whole pair, 6-7",
        gpus=2,
        busy=TWO_PAIRS,
        telemetry={1: XID},
        want=Bound((6, 7), NV, NV),
    ),
    Story(
        "GPU 1 with an XID error: 4 GPUs take pair 6-7 plus 0 and 3",
        gpus=4,
        busy=TWO_PAIRS,
        telemetry={1: XID},
        want=Bound((0, 3, 6, 7), NV, NV),
    ),
    Story(
        "GPU 1 stale, usable: 2 GPUs take pair 6-7, whose free memory is known",
        gpus=2,
        busy=TWO_PAIRS,
        telemetry={1: STALE},
        want=Bound((6, 7), NV, NV),
    ),
    Story(
        "GPU 1 stale, usable: 4 GPUs still take both whole pairs, and the binding says so",
        gpus=4,
        busy=TWO_PAIRS,
        telemetry={1: STALE},
        want=Bound((0, 1, 6, 7), NV, NV, (STALE_NOTE,)),
    ),
    Story(
        "GPU 1 stale, unusable by config: 2 GPUs take pair 6-7",
        gpus=2,
        busy=TWO_PAIRS,
        telemetry={1: STALE},
        settings=STALE_UNUSABLE,
        want=Bound((6, 7), NV, NV),
    ),
    Story(
        "GPU 1 stale, unusable by config: 4 GPUs take pair 6-7 plus 0 and 3",
        gpus=4,
        busy=TWO_PAIRS,
        telemetry={1: STALE},
        settings=STALE_UNUSABLE,
        want=Bound((0, 3, 6, 7), NV, NV),
    ),
    Story(
        "GPU 1 without a sample, usable: 2 GPUs take pair 6-7, whose free memory is known",
        gpus=2,
        busy=TWO_PAIRS,
        telemetry={1: MISSING},
        want=Bound((6, 7), NV, NV),
    ),
    Story(
        "GPU 1 without a sample, usable: 4 GPUs take both whole pairs, and the binding says so",
        gpus=4,
        busy=TWO_PAIRS,
        telemetry={1: MISSING},
        want=Bound((0, 1, 6, 7), NV, NV, (MISSING_NOTE,)),
    ),
    Story(
        "GPU 1 without a sample, unusable by config: 2 GPUs take pair 6-7",
        gpus=2,
        busy=TWO_PAIRS,
        telemetry={1: MISSING},
        settings=STALE_UNUSABLE,
        want=Bound((6, 7), NV, NV),
    ),
    Story(
        "GPU 1 without a sample, unusable by config: 4 GPUs take pair 6-7 plus 0 and 3",
        gpus=4,
        busy=TWO_PAIRS,
        telemetry={1: MISSING},
        settings=STALE_UNUSABLE,
        want=Bound((0, 3, 6, 7), NV, NV),
    ),
    # Usable and free: 0, 3, 5, 7, one per NUMA node.
    Story(
        "single-numa-node, GPU 1 hot and GPU 6 with an XID error: no pair is left for 2 GPUs",
        gpus=2,
        busy=TWO_PAIRS,
        telemetry={1: HOT, 6: XID},
        policy=SINGLE,
        want=no_gpus(
            "1 free usable GPUs in one NUMA node, needs 2; "
            "excluded: GPU 1 86 °C > 80 °C, GPU 6 XID error 79"
        ),
    ),
    # Usable and free: 0, 3, 5. LOW_MEMORY's 4000 MiB of 81920 is 4.9 %.
    Story(
        "GPU 1 stale and GPU 6 without a sample (both unusable), GPU 7 low on memory: "
        "3 GPUs left for 4, each exclusion named",
        gpus=4,
        busy=TWO_PAIRS,
        telemetry={1: STALE, 6: MISSING, 7: LOW_MEMORY},
        settings=STALE_UNUSABLE,
        want=no_gpus(
            "3 free usable GPUs, needs 4; excluded: GPU 1 telemetry stale (120 s > 60 s), "
            "GPU 6 no telemetry, GPU 7 free memory 5% < 30% (4000 MiB free)"
        ),
    ),
]


@pytest.mark.parametrize("story", HGX_TELEMETRY_STORIES, ids=lambda s: s.id)
def test_hgx_a100_telemetry(story: Story) -> None:
    check("hgxa100x8", story)


# ----- DGX A100 with telemetry: XID, stale, missing for 2, 4 and 8 GPUs -------------------------
#
#   GPU    0  1 | 2  3 | 4  5 | 6  7      every pair NV12 (NVSwitch)
#   NUMA   3  3 | 1  1 | 7  7 | 5  5      (dgx-a100-8gpu-10nic capture)
#   busy        | x    | x    |           2 and 4 GPUs: whole pairs 0-1 (NUMA 3) and 6-7 (NUMA 5)
#
# GPU 0 has an XID error, stale telemetry or none; 8-GPU stories start from an empty node. The
# reasoning is the HGX one above with GPU 0 in GPU 1's place: 2 GPUs move to 6-7 whether GPU 0
# is excluded or merely unknown; 4 GPUs take 0 1 6 7 (noting GPU 0) while GPU 0 is usable, and
# pair 6-7 plus the lowest singles, 1 and 3, once it is not; 8 GPUs need GPU 0.

DGX_NOTE_STALE = "GPU 0: telemetry stale (120 s > 60 s)"
DGX_NOTE_MISSING = "GPU 0: no telemetry"

DGX_TELEMETRY_STORIES = [
    Story(
        "GPU 0 with an XID error: 2 GPUs take pair 6-7",
        gpus=2,
        busy=TWO_PAIRS,
        telemetry={0: XID},
        want=Bound((6, 7), NV, NV),
    ),
    Story(
        "GPU 0 with an XID error: 4 GPUs take pair 6-7 plus 1 and 3",
        gpus=4,
        busy=TWO_PAIRS,
        telemetry={0: XID},
        want=Bound((1, 3, 6, 7), NV, NV),
    ),
    Story(
        "GPU 0 with an XID error: 8 GPUs do not fit, and the message says why",
        gpus=8,
        telemetry={0: XID},
        want=no_gpus("7 free usable GPUs, needs 8; excluded: GPU 0 XID error 79"),
    ),
    Story(
        "GPU 0 stale, usable: 2 GPUs take pair 6-7, whose free memory is known",
        gpus=2,
        busy=TWO_PAIRS,
        telemetry={0: STALE},
        want=Bound((6, 7), NV, NV),
    ),
    Story(
        "GPU 0 stale, usable: 4 GPUs take both whole pairs, and the binding says so",
        gpus=4,
        busy=TWO_PAIRS,
        telemetry={0: STALE},
        want=Bound((0, 1, 6, 7), NV, NV, (DGX_NOTE_STALE,)),
    ),
    Story(
        "GPU 0 stale, usable: 8 GPUs take the node, and the binding says so",
        gpus=8,
        telemetry={0: STALE},
        want=Bound(ALL8, NV, NV, (DGX_NOTE_STALE,)),
    ),
    Story(
        "GPU 0 stale, unusable by config: 2 GPUs take pair 6-7",
        gpus=2,
        busy=TWO_PAIRS,
        telemetry={0: STALE},
        settings=STALE_UNUSABLE,
        want=Bound((6, 7), NV, NV),
    ),
    Story(
        "GPU 0 stale, unusable by config: 4 GPUs take pair 6-7 plus 1 and 3",
        gpus=4,
        busy=TWO_PAIRS,
        telemetry={0: STALE},
        settings=STALE_UNUSABLE,
        want=Bound((1, 3, 6, 7), NV, NV),
    ),
    Story(
        "GPU 0 stale, unusable by config: 8 GPUs do not fit, and the message says why",
        gpus=8,
        telemetry={0: STALE},
        settings=STALE_UNUSABLE,
        want=no_gpus("7 free usable GPUs, needs 8; excluded: GPU 0 telemetry stale (120 s > 60 s)"),
    ),
    Story(
        "GPU 0 without a sample, usable: 2 GPUs take pair 6-7, whose free memory is known",
        gpus=2,
        busy=TWO_PAIRS,
        telemetry={0: MISSING},
        want=Bound((6, 7), NV, NV),
    ),
    Story(
        "GPU 0 without a sample, usable: 4 GPUs take both whole pairs, and the binding says so",
        gpus=4,
        busy=TWO_PAIRS,
        telemetry={0: MISSING},
        want=Bound((0, 1, 6, 7), NV, NV, (DGX_NOTE_MISSING,)),
    ),
    Story(
        "GPU 0 without a sample, usable: 8 GPUs take the node, and the binding says so",
        gpus=8,
        telemetry={0: MISSING},
        want=Bound(ALL8, NV, NV, (DGX_NOTE_MISSING,)),
    ),
    Story(
        "GPU 0 without a sample, unusable by config: 2 GPUs take pair 6-7",
        gpus=2,
        busy=TWO_PAIRS,
        telemetry={0: MISSING},
        settings=STALE_UNUSABLE,
        want=Bound((6, 7), NV, NV),
    ),
    Story(
        "GPU 0 without a sample, unusable by config: 4 GPUs take pair 6-7 plus 1 and 3",
        gpus=4,
        busy=TWO_PAIRS,
        telemetry={0: MISSING},
        settings=STALE_UNUSABLE,
        want=Bound((1, 3, 6, 7), NV, NV),
    ),
    Story(
        "GPU 0 without a sample, unusable by config: 8 GPUs do not fit, and the message says why",
        gpus=8,
        telemetry={0: MISSING},
        settings=STALE_UNUSABLE,
        want=no_gpus("7 free usable GPUs, needs 8; excluded: GPU 0 no telemetry"),
    ),
]


@pytest.mark.parametrize("story", DGX_TELEMETRY_STORIES, ids=lambda s: s.id)
def test_dgx_a100_telemetry(story: Story) -> None:
    check("a100x8", story)


# ----- DGX-1 V100: hybrid cube-mesh -------------------------------------------------------------
#
#   GPU   inside its quad            its one link across
#   0     1 NV1, 2 NV1, 3 NV2        4 NV2
#   1     0 NV1, 2 NV2, 3 NV1        5 NV2
#   2     0 NV1, 1 NV2, 3 NV2        6 NV1
#   3     0 NV2, 1 NV1, 2 NV2        7 NV1
#   4     5 NV1, 6 NV1, 7 NV2        0 NV2
#   5     4 NV1, 6 NV2, 7 NV1        1 NV2
#   6     4 NV1, 5 NV2, 7 NV2        2 NV1
#   7     4 NV2, 5 NV1, 6 NV2        3 NV1
#
# Every other pair is SYS. Quads 0-3 and 4-7 are the only all-NVLink sets of 4 (a GPU has one
# link across, so no mixed set of 4 is all NVLink). The NV2 pairs form one ring:
# 0-3-2-1-5-6-7-4-0. The capture has no NUMA column, so NUMA is unknown and every set of the
# same size spans as many NUMA nodes: NUMA never decides here.

DGX1_STORIES = [
    # Quad 4-7 is already broken by GPU 5. Taking 4, 6 or 7 keeps quad 0-3, the only all-NVLink
    # set of 4 left, whole for a later 4-GPU pod; taking any of 0-3 leaves no such set.
    Story(
        "GPU 5 busy: a single GPU comes from the broken quad, 4, keeping quad 0-3 whole",
        gpus=1,
        busy=(5,),
        want=Bound((4,)),
    ),
    # Usable GPUs with no SYS pair among them: quad 4-7 only.
    Story(
        "GPU 1 hot inside the first quad: 4 GPUs take the other quad, 4-7",
        gpus=4,
        telemetry={1: HOT},
        want=Bound((4, 5, 6, 7), NV, NV),
    ),
    Story(
        "GPU 2 low on memory inside the first quad: 4 GPUs take the other quad, 4-7",
        gpus=4,
        telemetry={2: LOW_MEMORY},
        want=Bound((4, 5, 6, 7), NV, NV),
    ),
    Story(
        "GPU 6 with an XID error inside the second quad: 4 GPUs take quad 0-3",
        gpus=4,
        telemetry={6: XID},
        want=Bound((0, 1, 2, 3), NV, NV),
    ),
    # Usable: 0 2 3 | 4 5 7. Every set of 4 has at least 2 SYS pairs (a GPU of one side links
    # to at most one of the other, and only 0-4 and 3-7 of the cross links are left). With 2
    # SYS pairs, the most NVLinks (7) are in triangle 0-2-3 (NV1+NV2+NV2) plus 4 (NV2 to 0),
    # and in 0-3-4-7 (NV2, NV2, NV2, NV1). They tie; 0 2 3 4 leaves 5-7 (NV1) linked while
    # 0 3 4 7 leaves 2 and 5 (SYS), so 0 2 3 4. SYS is reported against a best of NVLINK.
    Story(
        "a hot GPU in each quad (1 hot, 6 low on memory): 4 GPUs must cross over SYS, "
        "triangle 0-2-3 plus 4",
        gpus=4,
        telemetry={1: HOT, 6: LOW_MEMORY},
        want=Bound((0, 2, 3, 4), SYS, NV),
    ),
    # NV2 pairs tie (one pair of 2 NVLinks, and the other 6 GPUs stay NVLink-connected); the
    # lowest is 0-3.
    Story(
        "all healthy: 2 GPUs take the lowest NV2 pair, 0-3",
        gpus=2,
        telemetry=HEALTHY,
        want=Bound((0, 3), NV, NV),
    ),
    # Excluding 0, 2, 5, 7 (every other GPU of the NV2 ring) breaks every NV2 pair. Left: 1 3 4
    # 6, whose only NVLink pairs are 1-3 and 4-6 (NV1 each; the rest SYS). Each leaves the other
    # NV1 pair, so the lowest, 1-3.
    Story(
        "one GPU of every NV2 pair excluded (0 and 7 hot, 2 XID, 5 low on memory): "
        "2 GPUs settle for the NV1 pair 1-3",
        gpus=2,
        telemetry={0: HOT, 2: XID, 5: LOW_MEMORY, 7: HOT},
        want=Bound((1, 3), NV, NV),
    ),
]


@pytest.mark.parametrize("story", DGX1_STORIES, ids=lambda s: s.id)
def test_dgx1_v100(story: Story) -> None:
    check("v100x8", story)


# ----- PCIe all-SYS: 8 × RTX 4090, one GPU per NUMA node ----------------------------------------
#
#   GPU    0  1  2  3  4  5  6  7      every pair SYS, one GPU per NUMA node: every set of a
#   NUMA   3  2  1  0  7  6  5  4      size is as good as any other, so the lowest indices

PCIE_STORIES = [
    Story("a single GPU: GPU 0", gpus=1, want=Bound((0,))),
    Story("4 GPUs: the lowest, over SYS", gpus=4, want=Bound((0, 1, 2, 3), SYS, SYS)),
    Story("8 GPUs: the whole node, over SYS", gpus=8, want=Bound(ALL8, SYS, SYS)),
    Story(
        "GPU 0 hot: 4 GPUs take the next lowest, 1-4",
        gpus=4,
        telemetry={0: HOT},
        want=Bound((1, 2, 3, 4), SYS, SYS),
    ),
    # Best fit: GPU 3 has 400 milli left, so 300 leave 100 there rather than 700 elsewhere.
    Story(
        "GPU 3 shared at 600 milli: a 300-milli share fits best there",
        milli=300,
        shared={3: 600},
        want=Bound((3,)),
    ),
    Story(
        "single-numa-node: 2 GPUs never fit, each NUMA node has one GPU",
        gpus=2,
        policy=SINGLE,
        want=no_gpus("1 free usable GPUs in one NUMA node, needs 2"),
    ),
    Story(
        "single-numa-node: a single GPU still fits, GPU 0", gpus=1, policy=SINGLE, want=Bound((0,))
    ),
]


@pytest.mark.parametrize("story", PCIE_STORIES, ids=lambda s: s.id)
def test_pcie_all_sys(story: Story) -> None:
    check("pcie4090x8", story)


# ----- 4 × H100 SXM VM --------------------------------------------------------------------------
#
#   GPU    0  1  2  3      every pair NV18; NUMA Affinity 0 for all four (GPU NUMA ID N/A);
#   NUMA   0  0  0  0      the eight NICs are PHB to every GPU and play no part
#
# (h100-sxm-4gpu-vm-8nic-phb.topo.txt) All four GPUs are alike: the lowest indices win.

H100_STORIES = [
    Story("a single GPU: GPU 0", gpus=1, want=Bound((0,))),
    Story("4 GPUs: the whole VM, over NV18", gpus=4, want=Bound((0, 1, 2, 3), NV, NV)),
    # Unlike a DGX A100, where no NUMA node holds more than 2 GPUs.
    Story(
        "single-numa-node: 4 GPUs fit, all four share NUMA node 0",
        gpus=4,
        policy=SINGLE,
        want=Bound((0, 1, 2, 3), NV, NV),
    ),
    # Best fit: GPU 2 has 750 milli left, so 500 leave 250 there rather than 500 elsewhere.
    Story(
        "GPU 2 shared at 250 milli: a 500-milli share fits best there",
        milli=500,
        shared={2: 250},
        want=Bound((2,)),
    ),
    Story(
        "8 GPUs on a cluster of one 4-GPU VM are Invalid, not merely Unschedulable",
        gpus=8,
        want=Refused("requests 8 nvidia.com/gpu; the largest node has 4", "Invalid"),
    ),
]


@pytest.mark.parametrize("story", H100_STORIES, ids=lambda s: s.id)
def test_h100_vm(story: Story) -> None:
    check("h100x4", story)


# ----- unknown topology: no gpusched.io/gpu-topology annotation ---------------------------------
#
# Every pair is UNKNOWN and so is every GPU's NUMA node; a GPU of unknown NUMA node counts as a
# NUMA node of its own (gpuset), so best-effort sees every set of a size alike and
# single-numa-node can verify no set of 2 or more.

UNKNOWN_STORIES = [
    Story(
        "4 GPUs: the lowest, link tier UNKNOWN", gpus=4, want=Bound((0, 1, 2, 3), UNKNOWN, UNKNOWN)
    ),
    Story("8 GPUs: the whole node, link tier UNKNOWN", gpus=8, want=Bound(ALL8, UNKNOWN, UNKNOWN)),
    Story(
        "GPU 0 hot: 4 GPUs take the next lowest, 1-4",
        gpus=4,
        telemetry={0: HOT},
        want=Bound((1, 2, 3, 4), UNKNOWN, UNKNOWN),
    ),
    Story("a 250-milli share: GPU 0", milli=250, want=Bound((0,))),
    # Each GPU is alone in its (unknown) NUMA node, so at most 1 GPU in one NUMA node.
    Story(
        "single-numa-node: 4 GPUs refused, no NUMA node is known to hold them",
        gpus=4,
        policy=SINGLE,
        want=no_gpus("1 free usable GPUs in one NUMA node, needs 4"),
    ),
]


@pytest.mark.parametrize("story", UNKNOWN_STORIES, ids=lambda s: s.id)
def test_unknown_topology(story: Story) -> None:
    check("gpu8", story)


# ----- malformed annotation: single GPUs and shares only ----------------------------------------

TOPOLOGY = "gpusched.io/gpu-topology"
MALFORMED = {TOPOLOGY: "{not json"}
WRONG_COUNT = {TOPOLOGY: topology_annotation("h100x4") or ""}
NOT_JSON = (
    f"Node node-a: metadata.annotations[{TOPOLOGY}]: "
    "not JSON: Expecting property name enclosed in double quotes at char 1"
)
FOUR_OF_EIGHT = (
    f"Node node-a: metadata.annotations[{TOPOLOGY}]: "
    "describes 4 GPUs but the node advertises 8 nvidia.com/gpu"
)


def bad_annotation(error: str) -> Refused:
    why = "invalid GPU topology annotation: single-GPU pods only"
    return Refused(f"0/1 nodes are available: 1 {why}: node-a ({error})")


MALFORMED_STORIES = [
    Story(
        "not JSON: 4 GPUs refused, naming the annotation",
        gpus=4,
        annotations=MALFORMED,
        want=bad_annotation(NOT_JSON),
    ),
    Story(
        "not JSON: 8 GPUs refused, naming the annotation",
        gpus=8,
        annotations=MALFORMED,
        want=bad_annotation(NOT_JSON),
    ),
    Story(
        "not JSON: 3 GPUs refused, naming the annotation",
        gpus=3,
        annotations=MALFORMED,
        want=bad_annotation(NOT_JSON),
    ),
    Story(
        "4 GPUs described on an 8-GPU node: 8 GPUs refused, saying so",
        gpus=8,
        annotations=WRONG_COUNT,
        want=bad_annotation(FOUR_OF_EIGHT),
    ),
    # A share needs one GPU and no links. Best fit: GPU 5 has exactly 500 milli left.
    Story(
        "not JSON: a 500-milli share is accepted, on GPU 5 where it fits exactly",
        milli=500,
        shared={5: 500},
        annotations=MALFORMED,
        want=Bound((5,)),
    ),
    Story(
        "4 GPUs described on an 8-GPU node: a 300-milli share is accepted, GPU 0",
        milli=300,
        annotations=WRONG_COUNT,
        want=Bound((0,)),
    ),
]


@pytest.mark.parametrize("story", MALFORMED_STORIES, ids=lambda s: s.id)
def test_malformed_annotation(story: Story) -> None:
    check("a100x8", story)

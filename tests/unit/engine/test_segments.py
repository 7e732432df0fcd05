"""Segments (`gpusched.engine.segments`): a gang larger than one NVLink domain, split into
segments of ``segmentSize`` pods that each land inside one domain, the segments as close as
the next level up allows, all or nothing across segments.

Four simulated NVL72 racks cut down to 4 trays of 4 GPUs each, two racks per block:

    #                 zone-a
    #          /                 \\
    #      block-00            block-01
    #     d0      d1          d2      d3        (each rack = one NVLink domain)
    #   4 trays 4 trays     4 trays 4 trays
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from gpusched.api.config import SchedulerConfig
from gpusched.api.crds import parse_pod_group
from gpusched.api.errors import InvalidObjectError
from gpusched.engine import wording
from gpusched.engine.build import build_snapshot
from gpusched.engine.groups import GroupSpec
from gpusched.engine.policy import Policy
from gpusched.engine.schedule import schedule
from gpusched.engine.snapshot import BoundPod
from gpusched.offline.nvlink import BLOCK, CLIQUE_LABEL, RACK, ZONE, clique, nvl72_nodes
from testing.engine import bound, composite, decision, gang, members, placements, pod

TRAYS = 4


def busy(domain: int, tray: int = 0) -> BoundPod:
    return bound(pod(f"busy-{domain}-{tray}", gpus=4), f"nvl-{domain:02d}-{tray:02d}", (0, 1, 2, 3))


def segmented(name: str, min_count: int, size: int) -> GroupSpec:
    spec = gang(name, min_count, topology=CLIQUE_LABEL)
    return GroupSpec(**{**{f: getattr(spec, f) for f in spec.__slots__}, "segment_size": size})


@dataclass(frozen=True)
class Story:
    id: str
    busy: Sequence[BoundPod]
    want_placement: dict[str, str]
    want_segments: tuple[int, ...]
    """The NVLink domains the segments land in, in order; () when the gang stays pending."""
    pods: int = 8
    size: int = 4
    want_message: str = ""
    config: SchedulerConfig = field(default_factory=SchedulerConfig)


STORIES = [
    Story(
        "two segments land in two whole domains of one block",
        busy=[],
        want_placement={ZONE: "zone-a", BLOCK: "block-00"},
        want_segments=(0, 1),
    ),
    Story(
        "block-00 has one domain partly used, so both segments go to block-01",
        busy=[busy(0)],
        want_placement={ZONE: "zone-a", BLOCK: "block-01"},
        want_segments=(2, 3),
    ),
    Story(
        "no block has two free domains: the segments span the zone, one per block",
        busy=[busy(0), busy(2)],
        want_placement={ZONE: "zone-a"},
        want_segments=(1, 3),
    ),
    Story(
        "a lone segment fills a partly used domain before a whole one (tightest first)",
        busy=[busy(1, t) for t in range(2)],
        pods=2,
        size=2,
        want_placement={ZONE: "zone-a", BLOCK: "block-00", RACK: "rack-01"},
        want_segments=(1,),
    ),
    Story(
        "only one free domain is left: all or nothing, so no segment is placed",
        busy=[busy(0), busy(1), busy(2)],
        want_placement={},
        want_segments=(),
        want_message="cluster: 1 of 2 segments of 4 pods fit, each in one "
        "nvidia.com/gpu.clique domain",
    ),
]


@pytest.mark.parametrize("story", STORIES, ids=lambda s: s.id)
def test_segments(story: Story) -> None:
    snapshot = build_snapshot(
        nvl72_nodes(4, domains_per_block=2, trays=TRAYS), story.busy, None, story.config
    )
    pods = members("w", story.pods, gpus=4, group="g")
    result = schedule(
        snapshot, pods, [segmented("g", story.pods, story.size)], Policy.of(story.config)
    )
    found = decision(result, "g")
    assert found.placement == story.want_placement, found.message
    cliques = [s.domain.rsplit("/", 1)[-1] for s in found.segments]
    assert cliques == [clique(d) for d in story.want_segments]
    where = placements(result)
    for segment in found.segments:
        domain = int(segment.domain.rsplit(".", 1)[1])
        assert segment.domain.startswith("/".join(found.placement.values()))
        nodes = {where[p.removeprefix("default/")][0] for p in segment.pods}
        assert all(n.startswith(f"nvl-{domain:02d}-") for n in nodes), (segment, nodes)
        assert len(segment.pods) == story.size
    if not story.want_segments:
        assert where == {}
        assert [a.split(": ")[:2] for a in found.attempts] == [story.want_message.split(": ")]
    else:
        assert len(where) == story.pods
        assert found.message.endswith(wording.segments_placed(found.segments))


def test_a_gang_with_a_bound_segment_adds_a_whole_new_segment() -> None:
    # Segment one (4 pods) is bound in d3; the other 4 pods arrive: a new whole domain.
    held = [
        bound(pod(f"w-{i}", gpus=4, group="g"), f"nvl-03-{i:02d}", (0, 1, 2, 3)) for i in range(4)
    ]
    snapshot = build_snapshot(
        nvl72_nodes(4, domains_per_block=2, trays=TRAYS), held, None, SchedulerConfig()
    )
    pods = [pod(f"w-{i}", gpus=4, group="g") for i in range(4, 8)]
    result = schedule(snapshot, pods, [segmented("g", 8, 4)], Policy())
    found = decision(result, "g")
    assert [s.domain for s in found.segments] == [clique(0)]
    assert {node[:6] for node, _ in placements(result).values()} == {"nvl-00"}


def test_a_re_created_pod_goes_back_to_its_segments_domain() -> None:
    # Two segments bound in d1 and d2, one pod of d2's segment gone and re-created.
    held = [
        bound(pod(f"w-{i}", gpus=4, group="g"), f"nvl-01-{i:02d}", (0, 1, 2, 3)) for i in range(4)
    ]
    held += [
        bound(pod(f"w-{i}", gpus=4, group="g"), f"nvl-02-{i - 4:02d}", (0, 1, 2, 3))
        for i in range(4, 7)
    ]
    snapshot = build_snapshot(
        nvl72_nodes(4, domains_per_block=2, trays=TRAYS), held, None, SchedulerConfig()
    )
    result = schedule(snapshot, [pod("w-7", gpus=4, group="g")], [segmented("g", 8, 4)], Policy())
    assert placements(result) == {"w-7": ("nvl-02-03", (0, 1, 2, 3))}


# ----- the API: field, annotation, bad input ---------------------------------------------------


def pod_group(min_count: int, *, size: int | None = None, annotation: str | None = None) -> dict:  # type: ignore[type-arg]
    topology: dict[str, object] = {"key": CLIQUE_LABEL}
    if size is not None:
        topology["segmentSize"] = size
    metadata: dict[str, object] = {"name": "train", "namespace": "ml"}
    if annotation is not None:
        metadata["annotations"] = {"scheduling.gpusched.io/segment-size": annotation}
    return {
        "apiVersion": "scheduling.gpusched.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": metadata,
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": min_count}},
            "schedulingConstraints": {"topology": [topology]},
        },
    }


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        pytest.param(pod_group(36, size=18), 18, id="the field"),
        pytest.param(pod_group(36, annotation="18"), 18, id="the annotation"),
        pytest.param(pod_group(36, size=18, annotation="18"), 18, id="both, agreeing"),
        pytest.param(pod_group(36), None, id="neither"),
    ],
)
def test_the_segment_size_is_read_from_the_field_or_the_annotation(
    raw: dict,
    want: int | None,  # type: ignore[type-arg]
) -> None:
    assert GroupSpec.from_pod_group(parse_pod_group(raw)).segment_size == want


@pytest.mark.parametrize(
    ("raw", "field", "words"),
    [
        pytest.param(
            pod_group(36, size=5),
            "spec.schedulingConstraints.topology[0].segmentSize",
            "5 does not divide minCount 36",
            id="a size that does not divide the gang",
        ),
        pytest.param(
            pod_group(36, annotation="5"),
            "metadata.annotations[scheduling.gpusched.io/segment-size]",
            "5 does not divide minCount 36",
            id="an annotation that does not divide the gang",
        ),
        pytest.param(
            pod_group(36, annotation="eighteen"),
            "metadata.annotations[scheduling.gpusched.io/segment-size]",
            "must be a positive integer",
            id="an annotation that is not a number",
        ),
        pytest.param(
            pod_group(36, size=18, annotation="12"),
            "metadata.annotations[scheduling.gpusched.io/segment-size]",
            "contradicts spec.schedulingConstraints.topology[0].segmentSize 18",
            id="an annotation contradicting the field",
        ),
        pytest.param(
            pod_group(36, size=0),
            "spec.schedulingConstraints.topology[0].segmentSize",
            "greater than or equal to 1",
            id="a size of zero",
        ),
    ],
)
def test_a_bad_segment_size_is_refused_naming_the_field(
    raw: dict,
    field: str,
    words: str,  # type: ignore[type-arg]
) -> None:
    with pytest.raises(InvalidObjectError) as caught:
        parse_pod_group(raw)
    assert (caught.value.obj, caught.value.field) == ("PodGroup ml/train", field)
    assert words in caught.value.message


def test_a_segmented_child_of_a_composite_is_placed_inside_the_composites_domain() -> None:
    # The composite wants one block; its segmented child needs two whole domains there.
    snapshot = build_snapshot(
        nvl72_nodes(4, domains_per_block=2, trays=TRAYS), [busy(0)], None, SchedulerConfig()
    )
    parent = composite("job", 1, topology=BLOCK)
    child = segmented("g", 8, 4)
    child = GroupSpec(
        **{**{f: getattr(child, f) for f in child.__slots__}, "parent": "default/job"}
    )
    pods = members("w", 8, gpus=4, group="g")
    result = schedule(snapshot, pods, [parent, child], Policy())
    assert decision(result, "job").placement == {ZONE: "zone-a", BLOCK: "block-01"}
    assert len(decision(result, "g").segments) == 2
    assert len(placements(result)) == 8

"""Segments: a gang larger than one domain of its topology key, split into segments of
``segmentSize`` pods that each land inside one domain of that key (KAI's segments, Kueue's
slices, Slurm's ``--segment``). Upstream's Workload API has no such field, so it is asked for

- on our PodGroup (and a Workload's PodGroup template) as
  ``spec.schedulingConstraints.topology[0].segmentSize``;
- on any other group object (an upstream or Volcano PodGroup, …) by the annotation
  `SEGMENT_SIZE_ANNOTATION`, whose segments land in domains of the group's topology key.

A segment size must divide the gang's ``minCount`` (all or nothing across whole segments) and
needs a gang and a topology key; anything else is refused naming the field."""

from __future__ import annotations

from collections.abc import Mapping

SEGMENT_SIZE_ANNOTATION = "scheduling.gpusched.io/segment-size"
"""Pods per segment, a positive integer as text (``"18"``)."""


def segment_size_annotation(annotations: Mapping[str, str] | None) -> int | None:
    """The annotation's segment size; None without it. Raises `ValueError` saying what is
    wrong with its value."""
    text = (annotations or {}).get(SEGMENT_SIZE_ANNOTATION)
    if text is None:
        return None
    if not text.strip().isdigit() or int(text) < 1:
        raise ValueError(f"must be a positive integer (pods per segment), got {text!r}")
    return int(text)


def segment_problem(size: int, min_count: int | None, topology_key: str | None) -> str | None:
    """Why ``size`` cannot segment a group with this gang ``min_count`` (None: not a gang)
    and ``topology_key``; None when it can."""
    if min_count is None:
        return "segments need a gang (schedulingPolicy.gang)"
    if topology_key is None:
        return "segments need a topology key (schedulingConstraints.topology[0].key)"
    if min_count % size:
        return f"{size} does not divide minCount {min_count}: segments are placed whole"
    return None

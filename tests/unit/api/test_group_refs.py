"""The one place a pod's group is read from (`gpusched.api.grouprefs`), and other projects'
group objects read as ours (`gpusched.api.foreign`)."""

from __future__ import annotations

from typing import Any

import pytest

from gpusched.api.errors import InvalidObjectError
from gpusched.api.foreign import parse_foreign
from gpusched.api.grouprefs import GroupRef, GroupSource, resolve_group, split_group_name
from gpusched.api.owners import owner_key, top_owner
from testing.gangs import upstream_pod_group, volcano_pod_group

KUEUE = {"kueue.x-k8s.io/pod-group-name": "batch"}
COUNT = {"kueue.x-k8s.io/pod-group-total-count": "4"}


@pytest.mark.parametrize(
    ("story", "labels", "annotations", "scheduling_group", "want"),
    [
        ("no group at all", {}, {}, None, None),
        (
            "our label",
            {"scheduling.gpusched.io/pod-group": "g"},
            {},
            None,
            ("scheduling.gpusched.io", "g", "g"),
        ),
        ("upstream's schedulingGroup", {}, {}, "g", ("scheduling.k8s.io", "g", "k8s:g")),
        (
            "Volcano's annotation",
            {},
            {"scheduling.k8s.io/group-name": "g"},
            None,
            ("scheduling.volcano.sh", "g", "volcano:g"),
        ),
        (
            "coscheduling's label",
            {"scheduling.x-k8s.io/pod-group": "g"},
            {},
            None,
            ("scheduling.x-k8s.io", "g", "coscheduling:g"),
        ),
        ("Kueue's label and count", KUEUE, COUNT, None, ("kueue.x-k8s.io", "batch", "kueue:batch")),
    ],
)
def test_every_source_names_its_group(
    story: str,
    labels: dict[str, str],
    annotations: dict[str, str],
    scheduling_group: str | None,
    want: tuple[str, str, str] | None,
) -> None:
    ref = resolve_group("Pod ml/p", labels, annotations, scheduling_group)
    got = None if ref is None else (ref.source.value, ref.name, ref.group_name)
    assert got == want, story


def test_the_engine_name_reads_back_to_its_source() -> None:
    for source in GroupSource:
        ref = GroupRef(source, "train", "field")
        assert split_group_name(ref.group_name) == (source, "train")


@pytest.mark.parametrize(
    ("story", "labels", "annotations", "scheduling_group", "fields"),
    [
        (
            "our label and upstream's schedulingGroup",
            {"scheduling.gpusched.io/pod-group": "a"},
            {},
            "b",
            (
                "spec.schedulingGroup.podGroupName",
                "metadata.labels[scheduling.gpusched.io/pod-group]",
            ),
        ),
        (
            "Volcano's annotation and coscheduling's label",
            {"scheduling.x-k8s.io/pod-group": "a"},
            {"scheduling.k8s.io/group-name": "a"},
            None,
            ("metadata.labels[scheduling.x-k8s.io/pod-group]", "scheduling.k8s.io/group-name"),
        ),
        (
            "a Kueue group without its size",
            KUEUE,
            {},
            None,
            ("metadata.annotations[kueue.x-k8s.io/pod-group-total-count]", "missing"),
        ),
        (
            "a Kueue group of size zero",
            KUEUE,
            {"kueue.x-k8s.io/pod-group-total-count": "0"},
            None,
            ("kueue.x-k8s.io/pod-group-total-count", "'0'"),
        ),
    ],
)
def test_a_pod_naming_two_groups_or_an_unreadable_one_is_refused_naming_the_fields(
    story: str,
    labels: dict[str, str],
    annotations: dict[str, str],
    scheduling_group: str | None,
    fields: tuple[str, str],
) -> None:
    with pytest.raises(InvalidObjectError) as caught:
        resolve_group("Pod ml/p", labels, annotations, scheduling_group)
    assert str(caught.value).startswith("Pod ml/p: "), story
    for field in fields:
        assert field in str(caught.value), story


def test_the_same_group_named_twice_by_one_source_is_one_group() -> None:
    labels = {"scheduling.gpusched.io/pod-group": "a"}
    ref = resolve_group("Pod ml/p", labels, {}, None)
    assert ref is not None
    assert ref.source is GroupSource.GPUSCHED


def test_an_upstream_pod_group_reads_as_ours_with_its_disruption_mode() -> None:
    body: dict[str, Any] = upstream_pod_group("train", 4, disruption="all")
    body["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "t"}]
    found = parse_foreign(body)
    assert found.source is GroupSource.UPSTREAM
    spec = found.group.spec
    assert spec.disruption_mode is not None
    assert spec.disruption_mode.value == "All"
    assert found.unhonoured == ("spec.resourceClaims",)


@pytest.mark.parametrize(
    ("story", "body", "field"),
    [
        ("minMember zero", volcano_pod_group("v", 0), "spec.minMember"),
        ("minMember a string", volcano_pod_group("v", "4"), "spec.minMember"),
        (
            "a topology key that is no label key",
            volcano_pod_group("v", 2, key="not a key!"),
            "metadata.annotations[scheduling.gpusched.io/topology-key]",
        ),
        (
            "a minResources quantity that is none",
            volcano_pod_group("v", 2, minResources={"nvidia.com/gpu": "eight"}),
            "spec.minResources[nvidia.com/gpu]",
        ),
        (
            "minResources that is no map",
            volcano_pod_group("v", 2, minResources=["cpu"]),
            "spec.minResources",
        ),
    ],
)
def test_a_bad_volcano_pod_group_is_named_with_its_own_field(
    story: str, body: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidObjectError) as caught:
        parse_foreign(body)
    assert caught.value.obj == "PodGroup.scheduling.volcano.sh default/v", story
    assert caught.value.field == field, story


@pytest.mark.parametrize(
    ("story", "kind", "spec", "annotations", "want"),
    [
        ("a Job of parallelism 4", "Job", {"parallelism": 4}, {}, 4),
        ("a Job with fewer completions", "Job", {"parallelism": 4, "completions": 2}, {}, 2),
        ("a Job without parallelism", "Job", {}, {}, 1),
        (
            "a JobSet: replicas × parallelism",
            "JobSet",
            {"replicatedJobs": [{"replicas": 3, "template": {"spec": {"parallelism": 2}}}]},
            {},
            6,
        ),
        (
            "a LeaderWorkerSet group",
            "LeaderWorkerSet",
            {"leaderWorkerTemplate": {"size": 4}},
            {},
            4,
        ),
        (
            "a PyTorchJob: master and workers",
            "PyTorchJob",
            {"pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 3}}},
            {},
            4,
        ),
        (
            "an MPIJob: launcher and workers",
            "MPIJob",
            {"mpiReplicaSpecs": {"Launcher": {"replicas": 1}, "Worker": {"replicas": 8}}},
            {},
            9,
        ),
        (
            "a RayCluster: head and workers",
            "RayCluster",
            {"workerGroupSpecs": [{"replicas": 2}, {"minReplicas": 3}]},
            {},
            6,
        ),
        (
            "min members from the owner's annotation",
            "Job",
            {"parallelism": 8},
            {"scheduling.gpusched.io/min-members": "6"},
            6,
        ),
    ],
)
def test_a_top_owner_sizes_its_gang_as_its_controller_sizes_its_pods(
    story: str, kind: str, spec: dict[str, Any], annotations: dict[str, str], want: int
) -> None:
    owner = {"metadata": {"name": "o", "annotations": annotations}, "spec": spec}
    pod_meta = {"ownerReferences": [{"apiVersion": "x/v1", "kind": kind, "name": "o"}]}
    top = top_owner("Pod ml/p", "ml", pod_meta, {owner_key("x/v1", kind, "ml", "o"): owner})
    assert top is not None, story
    assert (top.size, top.known) == (want, True), story

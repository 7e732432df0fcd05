"""The API emulator behaves like the real API server where a Kopf operator can tell."""

from __future__ import annotations

import asyncio
import json
import re
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from testing.apiserver import (
    JSON_PATCH,
    STRATEGIC,
    ApiClient,
    ApiServer,
    ApiServerProcess,
    ApiStatusError,
    wait_for,
)

pytestmark = pytest.mark.emulator  # the emulator's own behaviour

GROUP = "scheduling.gpusched.io"
API_VERSION = f"{GROUP}/v1alpha1"


def node(name: str, labels: dict[str, str] | None = None, gpus: int = 8) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels or {}},
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}},
    }


def pod(
    name: str,
    namespace: str = "default",
    labels: dict[str, str] | None = None,
    scheduler: str = "gpusched",
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {"schedulerName": scheduler, "containers": [{"name": "c", "image": "x"}]},
    }


def podgroup(name: str, namespace: str = "default", min_count: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minCount": min_count},
    }


def rv(obj: dict[str, Any]) -> int:
    return int(obj["metadata"]["resourceVersion"])


def names(items: list[dict[str, Any]]) -> set[str]:
    return {item["metadata"]["name"] for item in items}


# -- object metadata ---------------------------------------------------------------------------


def test_create_sets_server_metadata(api: ApiClient) -> None:
    first = api.create(node("n1"))
    second = api.create(pod("p1"))
    for obj in (first, second):
        meta = obj["metadata"]
        assert re.fullmatch(r"[0-9a-f-]{36}", meta["uid"])
        assert isinstance(meta["resourceVersion"], str)
        assert meta["generation"] == 1
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", meta["creationTimestamp"])
    assert first["metadata"]["uid"] != second["metadata"]["uid"]
    assert rv(second) > rv(first)
    assert second["kind"] == "Pod"
    assert second["apiVersion"] == "v1"
    assert api.get("pods", "p1") == second


def test_generate_name_gives_unique_names(api: ApiClient) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": "kopf-event-"},
        "reason": "Test",
    }
    created = [api.create(body) for _ in range(30)]
    got = names(created)
    assert len(got) == 30
    assert all(name.startswith("kopf-event-") and len(name) > len("kopf-event-") for name in got)


def test_create_of_an_existing_name_is_409_already_exists(api: ApiClient) -> None:
    api.create(pod("p1"))
    with pytest.raises(ApiStatusError) as info:
        api.create(pod("p1"))
    assert info.value.status == 409
    assert info.value.body["kind"] == "Status"
    assert info.value.body["reason"] == "AlreadyExists"
    api.create(pod("p1", namespace="other"))  # the same name in another namespace is fine


def test_generation_bumps_on_spec_changes_only(api: ApiClient) -> None:
    created = api.create(podgroup("g"))
    labelled = api.patch("podgroups", "g", {"metadata": {"labels": {"a": "b"}}})
    assert labelled["metadata"]["generation"] == 1
    assert rv(labelled) > rv(created)
    status = api.patch_status("podgroups", "g", {"phase": "Pending"})
    assert status["metadata"]["generation"] == 1
    assert rv(status) > rv(labelled)
    changed = api.patch("podgroups", "g", {"spec": {"minCount": 3}})
    assert changed["metadata"]["generation"] == 2
    same = api.patch("podgroups", "g", {"spec": {"minCount": 3}})
    assert same["metadata"]["generation"] == 2
    assert rv(same) == rv(changed)  # a no-op patch changes nothing


def test_resource_versions_are_one_cluster_wide_counter(api: ApiClient) -> None:
    versions = [
        rv(api.create(node("n1"))),
        rv(api.create(pod("p1"))),
        rv(api.create(podgroup("g"))),
        rv(api.patch("nodes", "n1", {"metadata": {"labels": {"x": "y"}}})),
    ]
    assert versions == sorted(versions)
    assert len(set(versions)) == 4


# -- verbs -------------------------------------------------------------------------------------


def test_get_missing_is_404_status(api: ApiClient) -> None:
    with pytest.raises(ApiStatusError) as info:
        api.get("pods", "nope")
    assert info.value.status == 404
    assert info.value.body["reason"] == "NotFound"
    assert info.value.body["status"] == "Failure"


def test_list_has_kind_api_version_and_resource_version(api: ApiClient) -> None:
    api.create(pod("a", "ns1"))
    api.create(pod("b", "ns2"))
    api.create(podgroup("g"))
    pods = api.list_raw("pods")
    assert pods["kind"] == "PodList"
    assert pods["apiVersion"] == "v1"
    assert int(pods["metadata"]["resourceVersion"]) >= max(rv(p) for p in pods["items"])
    assert names(pods["items"]) == {"a", "b"}  # all namespaces: /api/v1/pods
    assert names(api.list("pods", "ns1")) == {"a"}
    groups = api.list_raw("podgroups")
    assert groups["kind"] == "PodGroupList"
    assert groups["apiVersion"] == API_VERSION
    nodes = api.list_raw("nodes")
    assert nodes["kind"] == "NodeList"
    assert nodes["items"] == []


def test_list_pagination_with_limit_and_continue(api: ApiClient) -> None:
    for index in range(7):
        api.create(node(f"n{index}"))
    first = api.list_raw("nodes", limit="3")
    assert len(first["items"]) == 3
    assert first["metadata"]["remainingItemCount"] == 4
    seen = names(first["items"])
    token = first["metadata"]["continue"]
    while token:
        page = api.list_raw("nodes", limit="3", **{"continue": token})
        seen |= names(page["items"])
        assert page["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
        token = page["metadata"].get("continue")
    assert seen == {f"n{i}" for i in range(7)}


def test_put_replaces_and_rejects_a_stale_resource_version(api: ApiClient) -> None:
    created = api.create(podgroup("g"))
    body = {**created, "spec": {"minCount": 5}}
    replaced = api.replace(body)
    assert replaced["spec"] == {"minCount": 5}
    assert replaced["metadata"]["generation"] == 2
    with pytest.raises(ApiStatusError) as info:
        api.replace({**created, "spec": {"minCount": 6}})  # created's resourceVersion is stale
    assert info.value.status == 409
    assert info.value.body["reason"] == "Conflict"
    assert api.get("podgroups", "g")["spec"] == {"minCount": 5}


def test_merge_patch_merges_dicts_and_null_deletes(api: ApiClient) -> None:
    api.create({**pod("p"), "metadata": {"name": "p", "labels": {"a": "1", "b": "2"}}})
    patched = api.patch("pods", "p", {"metadata": {"labels": {"a": None, "c": "3"}}})
    assert patched["metadata"]["labels"] == {"b": "2", "c": "3"}


def test_strategic_merge_patch_replaces_lists_whole(api: ApiClient) -> None:
    api.create(pod("p"))
    conditions = [{"type": "Ready", "status": "False"}, {"type": "X", "status": "True"}]
    api.patch("pods", "p", {"status": {"conditions": conditions}}, subresource="status")
    patched = api.patch(
        "pods",
        "p",
        {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
        subresource="status",
        content_type=STRATEGIC,
    )
    assert patched["status"]["conditions"] == [{"type": "Ready", "status": "True"}]
    assert patched["status"]["phase"] == "Pending"  # dicts still merge


def test_json_patch_with_kopfs_finalizer_test_op(api: ApiClient) -> None:
    created = api.create(podgroup("g"))
    ops = [
        {
            "op": "test",
            "path": "/metadata/resourceVersion",
            "value": created["metadata"]["resourceVersion"],
        },
        {
            "op": "add",
            "path": "/metadata/finalizers",
            "value": ["kopf.zalando.org/KopfFinalizerMarker"],
        },
    ]
    patched = api.patch("podgroups", "g", ops, content_type=JSON_PATCH)
    assert patched["metadata"]["finalizers"] == ["kopf.zalando.org/KopfFinalizerMarker"]
    # The same patch again: the resourceVersion moved on, the test op fails -> 422.
    with pytest.raises(ApiStatusError) as info:
        api.patch("podgroups", "g", ops, content_type=JSON_PATCH)
    assert info.value.status == 422
    assert info.value.body["reason"] == "Invalid"
    more = [
        {"op": "replace", "path": "/spec/minCount", "value": 4},
        {"op": "add", "path": "/metadata/finalizers/-", "value": "x"},
        {"op": "remove", "path": "/metadata/finalizers/0"},
        {"op": "copy", "from": "/spec/minCount", "path": "/spec/copied"},
        {"op": "move", "from": "/spec/copied", "path": "/spec/moved"},
    ]
    result = api.patch("podgroups", "g", more, content_type=JSON_PATCH)
    assert result["spec"] == {"minCount": 4, "moved": 4}
    assert result["metadata"]["finalizers"] == ["x"]
    with pytest.raises(ApiStatusError) as missing:
        api.patch(
            "podgroups", "g", [{"op": "remove", "path": "/spec/nope"}], content_type=JSON_PATCH
        )
    assert missing.value.status == 422


def test_merge_patch_with_a_stale_resource_version_is_409(api: ApiClient) -> None:
    created = api.create(podgroup("g"))
    api.patch("podgroups", "g", {"spec": {"minCount": 3}})
    with pytest.raises(ApiStatusError) as info:
        api.patch(
            "podgroups",
            "g",
            {
                "metadata": {"resourceVersion": created["metadata"]["resourceVersion"]},
                "spec": {"minCount": 4},
            },
        )
    assert info.value.status == 409


def test_delete_without_finalizers_removes_the_object(api: ApiClient) -> None:
    api.create(pod("p"))
    deleted = api.delete("pods", "p")
    assert deleted is not None
    assert deleted["metadata"]["name"] == "p"
    assert api.get_or_none("pods", "p") is None
    with pytest.raises(ApiStatusError) as info:
        api.delete("pods", "p")
    assert info.value.status == 404


def test_delete_with_finalizers_waits_for_them(api: ApiClient) -> None:
    body = podgroup("g")
    body["metadata"]["finalizers"] = ["a", "b"]
    api.create(body)
    deleting = api.delete("podgroups", "g")
    assert deleting is not None
    assert deleting["metadata"]["deletionTimestamp"]
    assert api.get("podgroups", "g")["metadata"]["deletionTimestamp"]
    with pytest.raises(ApiStatusError) as info:  # no new finalizers on a dying object
        api.patch("podgroups", "g", {"metadata": {"finalizers": ["a", "b", "c"]}})
    assert info.value.status == 422
    api.patch("podgroups", "g", {"metadata": {"finalizers": ["b"]}})
    assert api.get("podgroups", "g")["metadata"]["finalizers"] == ["b"]
    api.patch("podgroups", "g", {"metadata": {"finalizers": None}})
    assert api.get_or_none("podgroups", "g") is None


# -- the status subresource --------------------------------------------------------------------


def test_status_subresource_changes_only_status(api: ApiClient) -> None:
    api.create(podgroup("g"))
    patched = api.patch(
        "podgroups",
        "g",
        {
            "spec": {"minCount": 9},
            "metadata": {"labels": {"x": "y"}},
            "status": {"phase": "Running"},
        },
        subresource="status",
    )
    assert patched["status"] == {"phase": "Running"}
    assert patched["spec"] == {"minCount": 2}
    assert "labels" not in patched["metadata"]
    current = api.get("podgroups", "g")
    replaced = api.replace(
        {**current, "spec": {"minCount": 7}, "status": {"phase": "Failed"}}, subresource="status"
    )
    assert replaced["status"] == {"phase": "Failed"}
    assert replaced["spec"] == {"minCount": 2}


def test_main_resource_ignores_status(api: ApiClient) -> None:
    api.create(podgroup("g"))
    api.patch_status("podgroups", "g", {"phase": "Pending"})
    patched = api.patch("podgroups", "g", {"spec": {"minCount": 3}, "status": {"phase": "Running"}})
    assert patched["spec"] == {"minCount": 3}
    assert patched["status"] == {"phase": "Pending"}
    current = api.get("podgroups", "g")
    replaced = api.replace({**current, "status": {"phase": "Failed"}})
    assert replaced["status"] == {"phase": "Pending"}


def test_status_on_create_pods_reset_crds_dropped_nodes_kept(api: ApiClient) -> None:
    body = pod("p")
    body["status"] = {"phase": "Running"}
    assert api.create(body, with_status=False)["status"] == {"phase": "Pending"}
    assert api.create({**body, "metadata": {"name": "q"}})["status"]["phase"] == "Running"
    group = podgroup("g")
    group["status"] = {"phase": "Running"}
    assert "status" not in api.create(group, with_status=False)
    assert api.create(node("n1"))["status"] == {"allocatable": {"nvidia.com/gpu": "8"}}


# -- binding -----------------------------------------------------------------------------------


def test_binding_assigns_the_pod_with_annotations(api: ApiClient) -> None:
    api.create(node("n1"))
    created = api.create(pod("p"))
    status = api.bind("p", "n1", annotations={"gpusched.io/gpus": "0,1"})
    assert status == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "code": 201,
    }
    bound = api.get("pods", "p")
    assert bound["spec"]["nodeName"] == "n1"
    assert bound["metadata"]["annotations"] == {"gpusched.io/gpus": "0,1"}
    conditions = {c["type"]: c["status"] for c in bound["status"]["conditions"]}
    assert conditions == {"PodScheduled": "True"}
    assert rv(bound) > rv(created)


def test_binding_an_already_bound_pod_is_409_and_a_missing_pod_404(api: ApiClient) -> None:
    api.create(pod("p"))
    api.bind("p", "n1")
    with pytest.raises(ApiStatusError) as bound:
        api.bind("p", "n2")
    assert bound.value.status == 409
    assert api.get("pods", "p")["spec"]["nodeName"] == "n1"
    with pytest.raises(ApiStatusError) as missing:
        api.bind("ghost", "n1")
    assert missing.value.status == 404


def test_the_older_bindings_resource_and_wrong_verbs(api: ApiClient) -> None:
    api.create(pod("p"))
    response = api.request(
        "POST",
        "/api/v1/namespaces/default/bindings",
        json={"metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n1"}},
    )
    assert response.status_code == 201
    assert api.get("pods", "p")["spec"]["nodeName"] == "n1"
    assert api.request("GET", api.path("pods", "default", "p", "binding")).status_code == 405
    assert api.request("POST", api.path("pods", "default", "p", "status")).status_code == 405


def test_binding_with_a_wrong_uid_is_409(api: ApiClient) -> None:
    api.create(pod("p"))
    response = api.request(
        "POST",
        api.path("pods", "default", "p", "binding"),
        json={"metadata": {"name": "p", "uid": "not-the-uid"}, "target": {"name": "n1"}},
    )
    assert response.status_code == 409


# -- events ------------------------------------------------------------------------------------


def test_events_core_and_events_k8s_io(api: ApiClient) -> None:
    core = api.create(
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": "p.", "namespace": "ns"},
            "involvedObject": {"kind": "Pod", "name": "p", "namespace": "ns"},
            "reason": "Scheduled",
            "message": "Successfully assigned ns/p to n1",
            "type": "Normal",
        }
    )
    new = api.create(
        {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"generateName": "p.", "namespace": "ns"},
            "regarding": {"kind": "Pod", "name": "p", "namespace": "ns"},
            "reason": "Scheduled",
            "note": "Successfully assigned",
            "type": "Normal",
            "action": "Binding",
            "reportingController": "gpusched",
            "reportingInstance": "gpusched-0",
            "eventTime": "2026-01-01T00:00:00.000000Z",
        }
    )
    assert core["metadata"]["namespace"] == "ns"
    assert new["apiVersion"] == "events.k8s.io/v1"
    assert names(api.list("events", "ns")) == {core["metadata"]["name"]}
    assert names(api.list("events", "ns", group="events.k8s.io")) == {new["metadata"]["name"]}
    assert names(api.list("events", fields="involvedObject.name=p,reason=Scheduled")) == {
        core["metadata"]["name"]
    }


# -- selectors ---------------------------------------------------------------------------------


def test_label_selectors_on_list(api: ApiClient) -> None:
    api.create(pod("a", labels={"app": "x", "tier": "1"}))
    api.create(pod("b", labels={"app": "y"}))
    api.create(pod("c", labels={}))
    cases = {
        "app=x": {"a"},
        "app==x": {"a"},
        "app!=x": {"b", "c"},
        "app in (x, y)": {"a", "b"},
        "app notin (x)": {"b", "c"},
        "app": {"a", "b"},
        "!app": {"c"},
        "app,tier=1": {"a"},
        "app in (x,y),!tier": {"b"},
    }
    for selector, expected in cases.items():
        assert names(api.list("pods", labels=selector)) == expected, selector


def test_field_selectors_on_list(api: ApiClient) -> None:
    api.create(pod("a", "ns1"))
    api.create(pod("b", "ns2", scheduler="default-scheduler"))
    api.create(pod("c", "ns1"))
    api.bind("a", "n1", "ns1")
    api.patch_status("pods", "c", {"phase": "Succeeded"}, "ns1")
    cases = {
        "spec.nodeName=n1": {"a"},
        "spec.nodeName==n1": {"a"},
        "spec.nodeName=": {"b", "c"},
        "spec.nodeName!=": {"a"},
        "spec.schedulerName=gpusched": {"a", "c"},
        "status.phase!=Succeeded": {"a", "b"},
        "metadata.name=b": {"b"},
        "metadata.namespace=ns1": {"a", "c"},
        "metadata.namespace=ns1,spec.nodeName=": {"c"},
    }
    for selector, expected in cases.items():
        assert names(api.list("pods", fields=selector)) == expected, selector
    with pytest.raises(ApiStatusError) as info:
        api.list("podgroups", fields="spec.minCount=2")
    assert info.value.status == 400


# -- watches -----------------------------------------------------------------------------------


@pytest.mark.parametrize("flag", ["true", "1", "True"])
def test_watch_flag_spellings(api: ApiClient, flag: str) -> None:
    api.create(pod("p"))
    events = list(api.watch("pods", "default", timeoutSeconds="1", watch=flag))
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "p")]


def test_watch_timeout_seconds_ends_the_stream(api: ApiClient) -> None:
    started = time.monotonic()
    events = list(api.watch("pods", timeoutSeconds="1"))
    elapsed = time.monotonic() - started
    assert events == []
    assert 0.9 <= elapsed < 3.0


def test_watch_sees_live_changes_and_deletions(api: ApiClient) -> None:
    listed = api.list_raw("pods")
    with api.watch_in_background(
        "pods", resourceVersion=listed["metadata"]["resourceVersion"]
    ) as watch:
        api.create(pod("p"))
        api.patch("pods", "p", {"metadata": {"labels": {"a": "b"}}})
        api.delete("pods", "p")
        events = watch.wait_for(lambda events: len(events) >= 3)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "p"),
        ("MODIFIED", "p"),
        ("DELETED", "p"),
    ]
    assert rv(events[0]["object"]) < rv(events[1]["object"]) < rv(events[2]["object"])


def test_watch_field_selector_turns_unmatching_into_deleted(api: ApiClient) -> None:
    api.create(pod("p"))
    api.create(pod("q"))
    # kube-scheduler's watch of unassigned pods: a bound pod leaves it as DELETED.
    with (
        api.watch_in_background("pods", fieldSelector="spec.nodeName=") as unassigned,
        api.watch_in_background("pods", fieldSelector="spec.nodeName=n1") as on_n1,
    ):
        unassigned.wait_for(lambda events: len(events) == 2)  # the initial ADDED events
        api.bind("p", "n1")
        api.patch("pods", "q", {"metadata": {"labels": {"x": "y"}}})
        unassigned.wait_for(lambda events: len(events) == 4)
        on_n1.wait_for(lambda events: len(events) == 1)
    assert unassigned.summary() == [
        ("ADDED", "p"),
        ("ADDED", "q"),
        ("DELETED", "p"),
        ("MODIFIED", "q"),
    ]
    assert unassigned.events[2]["object"]["spec"]["nodeName"] == "n1"
    assert on_n1.summary() == [("ADDED", "p")]


def test_watch_label_selector_transitions(api: ApiClient) -> None:
    api.create(pod("p", labels={"team": "a"}))
    start = api.list_raw("pods")["metadata"]["resourceVersion"]
    api.patch("pods", "p", {"metadata": {"labels": {"team": "b"}}})
    api.patch("pods", "p", {"metadata": {"labels": {"team": "a"}}})
    api.patch("pods", "p", {"metadata": {"labels": {"team": "a", "x": "1"}}})
    api.delete("pods", "p")
    events = list(
        api.watch("pods", labelSelector="team=a", resourceVersion=start, timeoutSeconds="1")
    )
    assert [e["type"] for e in events] == ["DELETED", "ADDED", "MODIFIED", "DELETED"]


def test_watch_replays_from_resource_version(api: ApiClient) -> None:
    api.create(pod("p1"))
    middle = api.list_raw("pods")["metadata"]["resourceVersion"]
    api.create(pod("p2"))
    api.create(node("n1"))  # another resource: not in the pods' stream
    api.delete("pods", "p1")
    events = list(api.watch("pods", resourceVersion=middle, timeoutSeconds="1"))
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "p2"),
        ("DELETED", "p1"),
    ]


def test_watch_from_a_too_old_resource_version_is_410() -> None:
    with ApiServer(event_log_size=5, crds=True) as server, ApiClient(server.url) as api:
        start = api.list_raw("pods")["metadata"]["resourceVersion"]
        for index in range(10):
            api.create(pod(f"p{index}"))
        events = list(api.watch("pods", resourceVersion=start, timeoutSeconds="1"))
        assert len(events) == 1
        assert events[0]["type"] == "ERROR"
        assert events[0]["object"]["code"] == 410
        assert events[0]["object"]["kind"] == "Status"
        recent = api.list_raw("pods")["metadata"]["resourceVersion"]
        assert list(api.watch("pods", resourceVersion=recent, timeoutSeconds="1")) == []
        assert not server.failures


def test_expire_watches_makes_old_resource_versions_gone(
    apiserver: ApiServer, api: ApiClient
) -> None:
    api.create(pod("p"))
    start = api.list_raw("pods")["metadata"]["resourceVersion"]
    api.create(pod("q"))
    apiserver.expire_watches()
    events = list(api.watch("pods", resourceVersion=start, timeoutSeconds="1"))
    assert [e["type"] for e in events] == ["ERROR"]
    assert events[0]["object"]["code"] == 410


def test_watch_bookmarks_carry_the_current_resource_version(
    apiserver: ApiServer, api: ApiClient
) -> None:
    api.create(pod("p"))
    with api.watch_in_background("pods", resourceVersion=str(apiserver.resource_version)) as watch:
        api.create(node("n1"))  # moves the resourceVersion; not a pod
        wait_for(lambda: len(watch.bookmarks) >= 2, timeout=5)
    bookmark = watch.bookmarks[-1]["object"]
    assert bookmark["kind"] == "Pod"
    assert bookmark["apiVersion"] == "v1"
    assert int(bookmark["metadata"]["resourceVersion"]) == apiserver.resource_version
    assert watch.events == []


def test_watch_initial_events(api: ApiClient) -> None:
    api.create(pod("p"))
    events = list(api.watch("pods", resourceVersion="0", timeoutSeconds="1"))
    assert [e["type"] for e in events] == ["ADDED"]
    streamed = list(
        api.watch(
            "pods",
            sendInitialEvents="true",
            resourceVersionMatch="NotOlderThan",
            allowWatchBookmarks="true",
            timeoutSeconds="1",
        )
    )
    assert streamed[0]["type"] == "ADDED"
    assert streamed[1]["type"] == "BOOKMARK"
    assert streamed[1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


@pytest.mark.parametrize("abort", [False, True])
def test_drop_watches(apiserver: ApiServer, api: ApiClient, abort: bool) -> None:
    with api.watch_in_background("pods") as watch:
        wait_for(lambda: apiserver.watch_count() == 1)
        assert apiserver.drop_watches(abort=abort) == 1
        assert watch.ended.wait(5)
    wait_for(lambda: apiserver.watch_count() == 0)


# -- resources and discovery -------------------------------------------------------------------


def test_cluster_scoped_and_namespaced_resources(api: ApiClient) -> None:
    namespace = api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}})
    assert namespace["status"] == {"phase": "Active"}
    assert "namespace" not in namespace["metadata"]
    assert api.get("namespaces", "ns")["metadata"]["name"] == "ns"
    api.create(node("n1"))
    assert api.request("GET", "/api/v1/namespaces/ns/nodes/n1").status_code == 404
    lease = api.create(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "gpusched", "namespace": "ns"},
            "spec": {"holderIdentity": "me", "leaseDurationSeconds": 15},
        }
    )
    assert lease["metadata"]["namespace"] == "ns"
    assert names(api.list("leases", "ns")) == {"gpusched"}
    crds = api.list("customresourcedefinitions")
    assert names(crds) == {
        "podgroups.scheduling.gpusched.io",
        "compositepodgroups.scheduling.gpusched.io",
        "workloads.scheduling.gpusched.io",
    }
    for plural, kind in (("compositepodgroups", "CompositePodGroup"), ("workloads", "Workload")):
        obj = api.create({"apiVersion": API_VERSION, "kind": kind, "metadata": {"name": "x"}})
        assert obj["metadata"]["namespace"] == "default"
        assert api.patch_status(plural, "x", {"phase": "Running"})["status"]["phase"] == "Running"


def test_namespace_mismatch_between_path_and_body_is_400(api: ApiClient) -> None:
    response = api.request("POST", "/api/v1/namespaces/a/pods", json=pod("p", namespace="b"))
    assert response.status_code == 400
    assert response.json()["kind"] == "Status"


def test_discovery_documents(api: ApiClient) -> None:
    assert api.request("GET", "/api").json()["versions"] == ["v1"]
    assert api.request("GET", "/version").json()["major"] == "1"
    core = api.request("GET", "/api/v1").json()
    core_names = {r["name"]: r for r in core["resources"]}
    assert {"pods", "pods/status", "pods/binding", "nodes", "namespaces", "events"} <= set(
        core_names
    )
    assert core_names["pods"]["namespaced"] is True
    assert core_names["nodes"]["namespaced"] is False
    groups = {g["name"]: g for g in api.request("GET", "/apis").json()["groups"]}
    assert {GROUP, "events.k8s.io", "coordination.k8s.io", "apiextensions.k8s.io"} <= set(groups)
    assert groups[GROUP]["preferredVersion"]["version"] == "v1alpha1"
    ours = api.request("GET", f"/apis/{GROUP}/v1alpha1").json()
    ours_names = {r["name"]: r for r in ours["resources"]}
    assert set(ours_names) == {
        "podgroups",
        "podgroups/status",
        "compositepodgroups",
        "compositepodgroups/status",
        "workloads",
        "workloads/status",
    }
    assert ours_names["podgroups"]["kind"] == "PodGroup"
    assert api.request("GET", f"/apis/{GROUP}").json()["name"] == GROUP
    assert api.request("GET", "/apis/nothing.example.com/v1").status_code == 404
    assert api.request("GET", "/api/v1/nothings").status_code == 404


def test_crds_are_served_once_created_and_gone_once_deleted(apiserver: ApiServer) -> None:
    with ApiClient(apiserver.url) as api:
        path = f"/apis/{GROUP}/v1alpha1/namespaces/default/podgroups"
        assert api.request("GET", path).status_code == 404
        apiserver.install_crds()
        assert api.request("GET", path).json()["items"] == []
        api.delete("customresourcedefinitions", f"podgroups.{GROUP}")
        assert api.request("GET", path).status_code == 404
        groups = api.request("GET", f"/apis/{GROUP}/v1alpha1").json()["resources"]
        assert "podgroups" not in {r["name"] for r in groups}


def test_delete_collection_with_a_selector(api: ApiClient) -> None:
    api.create(pod("a", labels={"x": "1"}))
    api.create(pod("b", labels={"x": "2"}))
    response = api.request(
        "DELETE", "/api/v1/namespaces/default/pods", params={"labelSelector": "x=1"}
    )
    assert response.status_code == 200
    assert names(api.list("pods")) == {"b"}


# -- fault injection ---------------------------------------------------------------------------


def test_fault_next_requests_answer_a_status(apiserver: ApiServer, api: ApiClient) -> None:
    api.create(pod("p"))
    api.create(pod("q"))
    rule = apiserver.faults.fail(500, method="POST", path=r"/pods/p/binding$", times=2)
    for _ in range(2):
        with pytest.raises(ApiStatusError) as info:
            api.bind("p", "n1")
        assert info.value.status == 500
        assert info.value.body["kind"] == "Status"
    api.bind("q", "n1")  # another path: not affected
    api.bind("p", "n1")  # the rule is used up
    assert rule.hits == 2
    assert api.get("pods", "p")["spec"]["nodeName"] == "n1"
    assert apiserver.faults.rules == []


@pytest.mark.parametrize("status", [409, 410, 422, 429, 503])
def test_fault_statuses(apiserver: ApiServer, api: ApiClient, status: int) -> None:
    api.create(podgroup("g"))
    apiserver.faults.fail(status, method="PATCH", reason="Injected", message="boom")
    response = api.request(
        "PATCH",
        api.path("podgroups", "default", "g"),
        json={"spec": {"minCount": 9}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert response.status_code == status
    assert response.json()["reason"] == "Injected"
    assert response.json()["message"] == "boom"
    assert api.get("podgroups", "g")["spec"] == {"minCount": 2}  # nothing happened


def test_fault_410_on_a_watch_is_an_error_event(apiserver: ApiServer, api: ApiClient) -> None:
    apiserver.faults.fail(410, watch=True, path=r"/pods")
    events = list(api.watch("pods", timeoutSeconds="1"))
    assert [e["type"] for e in events] == ["ERROR"]
    assert events[0]["object"]["code"] == 410
    assert list(api.watch("pods", timeoutSeconds="1")) == []


def test_fault_latency(apiserver: ApiServer, api: ApiClient) -> None:
    rule = apiserver.faults.delay(0.3, method="GET", path=r"/nodes$", times=1)
    started = time.monotonic()
    api.list("nodes")
    slow = time.monotonic() - started
    started = time.monotonic()
    api.list("nodes")
    fast = time.monotonic() - started
    assert slow >= 0.3
    assert fast < 0.3
    assert rule.hits == 1


def test_kmock_dsl_reactions_still_work(apiserver: ApiServer, api: ApiClient) -> None:
    apiserver.handler["get /healthz"] << {"custom": True}
    assert api.request("GET", "/healthz").json() == {"custom": True}
    assert api.request("GET", "/api/v1/pods").json()["kind"] == "PodList"


# -- bounded history and speed -----------------------------------------------------------------


def test_request_history_is_bounded_and_gets_stay_fast(apiserver: ApiServer) -> None:
    with ApiClient(apiserver.url) as api:
        api.create(pod("p"))
        for index in range(3000):
            if index % 3 == 0:
                api.patch("pods", "p", {"metadata": {"labels": {"i": str(index)}}})
            else:
                api.get("pods", "p")
        assert apiserver.request_count >= 3001
        assert apiserver.history_length() == 1000
        timings = []
        for _ in range(50):
            started = time.perf_counter()
            api.get("pods", "p")
            timings.append(time.perf_counter() - started)
    assert statistics.median(timings) < 0.05
    recent = apiserver.requests()
    assert len(recent) == 1000
    assert recent[-1].method == "GET"
    assert recent[-1].name == "p"


def test_throughput_of_simple_requests(apiserver: ApiServer) -> None:
    """Concurrent GETs and binds through aiohttp; the figure is printed, the bound generous."""
    count = 600
    with ApiClient(apiserver.url) as api:
        for index in range(count):
            api.create(pod(f"p{index}"))

    async def run() -> tuple[float, float]:
        async with aiohttp.ClientSession(apiserver.url) as session:
            semaphore = asyncio.Semaphore(16)

            async def get(index: int) -> None:
                async with semaphore, session.get(f"/api/v1/namespaces/default/pods/p{index}") as r:
                    assert r.status == 200
                    await r.read()

            async def bind(index: int) -> None:
                body = {
                    "metadata": {"annotations": {"gpusched.io/gpus": "0"}},
                    "target": {"name": "n1"},
                }
                path = f"/api/v1/namespaces/default/pods/p{index}/binding"
                async with semaphore, session.post(path, json=body) as r:
                    assert r.status == 201
                    await r.read()

            started = time.perf_counter()
            await asyncio.gather(*(get(i) for i in range(count)))
            gets = count / (time.perf_counter() - started)
            started = time.perf_counter()
            await asyncio.gather(*(bind(i) for i in range(count)))
            binds = count / (time.perf_counter() - started)
            return gets, binds

    gets, binds = asyncio.run(run())
    print(
        f"emulator throughput (client in the same process): {gets:.0f} GET/s, {binds:.0f} binds/s"
    )
    assert gets > 200
    assert binds > 200


# -- kubernetes_asyncio ------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_kubernetes_asyncio_client(
    api: ApiClient, kube_configuration: Callable[[], Awaitable[Any]]
) -> None:
    from kubernetes_asyncio import client, watch

    api.create(pod("p", labels={"app": "x"}))
    api.create(pod("q", labels={"app": "y"}))
    api.create(podgroup("g"))
    configuration = await kube_configuration()
    async with client.ApiClient(configuration) as api_client:
        core = client.CoreV1Api(api_client)
        custom = client.CustomObjectsApi(api_client)
        listed = await core.list_namespaced_pod("default", label_selector="app=x")
        assert [p.metadata.name for p in listed.items] == ["p"]
        assert listed.metadata.resource_version
        everywhere = await core.list_pod_for_all_namespaces(field_selector="spec.nodeName=")
        assert {p.metadata.name for p in everywhere.items} == {"p", "q"}

        patched = await core.patch_namespaced_pod(
            "p", "default", {"metadata": {"labels": {"z": "1"}}}
        )
        assert patched.metadata.labels == {"app": "x", "z": "1"}

        binding = client.V1Binding(
            metadata=client.V1ObjectMeta(
                name="p", annotations={"gpusched.io/gpus": "2,3"}, uid=patched.metadata.uid
            ),
            target=client.V1ObjectReference(kind="Node", name="n1", api_version="v1"),
        )
        response: Any = await core.create_namespaced_pod_binding(
            "p", "default", binding, _preload_content=False
        )
        assert response.status == 201
        assert json.loads(await response.read())["status"] == "Success"
        bound = await core.read_namespaced_pod("p", "default")
        assert bound.spec.node_name == "n1"
        assert bound.metadata.annotations == {"gpusched.io/gpus": "2,3"}
        assert [(c.type, c.status) for c in bound.status.conditions] == [("PodScheduled", "True")]

        status = await custom.patch_namespaced_custom_object_status(  # type: ignore[call-arg]
            GROUP, "v1alpha1", "default", "podgroups", "g",
            {"status": {"phase": "Scheduled"}},
            _content_type="application/merge-patch+json",
        )  # fmt: skip
        assert status["status"] == {"phase": "Scheduled"}

        event = await core.create_namespaced_event(
            "default",
            client.CoreV1Event(
                metadata=client.V1ObjectMeta(generate_name="p."),
                involved_object=client.V1ObjectReference(kind="Pod", name="p", namespace="default"),
                reason="Scheduled",
                message="Successfully assigned default/p to n1, GPUs 2,3",
                type="Normal",
            ),
        )
        assert event.metadata.name.startswith("p.")

        seen = []
        async with watch.Watch() as stream:
            async for item in stream.stream(
                core.list_namespaced_pod,
                "default",
                field_selector="spec.nodeName=n1",
                timeout_seconds=1,
            ):
                seen.append((item["type"], item["object"].metadata.name))
        assert seen == [("ADDED", "p")]


# -- a real Kopf operator ----------------------------------------------------------------------


def test_a_kopf_operator_against_the_emulator(apiserver: ApiServer, api: ApiClient) -> None:
    import kopf
    from kopf.testing import KopfRunner

    registry = kopf.OperatorRegistry()
    deleted: list[str] = []

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.watching.server_timeout = 5
        settings.posting.level = 0

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        info: kopf.ConnectionInfo = apiserver.connection_info()
        return info

    @kopf.on.create(GROUP, "v1alpha1", "podgroups", registry=registry)
    def created(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
        patch.status["phase"] = "Seen"
        kopf.info(body, reason="Seen", message=f"min {body['spec']['minCount']}")

    @kopf.on.update(GROUP, "v1alpha1", "podgroups", field="spec.minCount", registry=registry)
    def updated(new: Any, patch: kopf.Patch, **_: Any) -> None:
        patch.status["minSeen"] = new

    @kopf.on.delete(GROUP, "v1alpha1", "podgroups", registry=registry)
    def removed(name: str, **_: Any) -> None:
        deleted.append(name)

    args = ["run", "--standalone", "--all-namespaces", "--verbose"]
    with KopfRunner(args, registry=registry, timeout=30) as runner:
        api.create(podgroup("g", min_count=3))
        seen = api.wait_for_object(
            "podgroups",
            "g",
            lambda o: (
                (o.get("status") or {}).get("phase") == "Seen" and o["metadata"].get("finalizers")
            ),
            timeout=20,
        )
        assert seen["metadata"]["finalizers"] == ["kopf.zalando.org/KopfFinalizerMarker"]
        wait_for(lambda: [e for e in api.list("events") if e["reason"] == "Seen"], timeout=20)
        api.patch("podgroups", "g", {"spec": {"minCount": 5}})
        api.wait_for_object("podgroups", "g", lambda o: o["status"].get("minSeen") == 5, timeout=20)
        api.delete("podgroups", "g")
        wait_for(lambda: api.get_or_none("podgroups", "g") is None, timeout=20)
        assert deleted == ["g"]
    assert runner.exit_code == 0
    assert runner.exception is None
    problems = [
        line for line in runner.output.splitlines()
        if "[ERROR" in line or "Traceback" in line
        or ("[WARNING" in line and "OS signals are ignored" not in line)
    ]  # fmt: skip
    assert problems == [], runner.output[-5000:]
    (event,) = [e for e in api.list("events") if e["reason"] == "Seen"]
    assert event["involvedObject"]["name"] == "g"
    assert event["message"] == "min 3"


def test_garbage_collection_by_owner_references(api: ApiClient) -> None:
    workload = api.create(
        {"apiVersion": API_VERSION, "kind": "Workload", "metadata": {"name": "w"}}
    )
    owner = {
        "apiVersion": API_VERSION,
        "kind": "Workload",
        "name": "w",
        "uid": workload["metadata"]["uid"],
        "controller": True,
    }
    group = podgroup("w-workers")
    group["metadata"]["ownerReferences"] = [owner]
    group["metadata"]["finalizers"] = ["gpusched.io/test"]
    created = api.create(group)
    child = pod("w-workers-0")
    child["metadata"]["ownerReferences"] = [
        {
            "apiVersion": API_VERSION,
            "kind": "PodGroup",
            "name": "w-workers",
            "uid": created["metadata"]["uid"],
        }
    ]
    api.create(child)
    api.create(pod("unrelated"))
    api.delete("workloads", "w")
    dying = api.get("podgroups", "w-workers")
    assert dying["metadata"]["deletionTimestamp"]  # its finalizer holds it
    assert names(api.list("pods")) == {"w-workers-0", "unrelated"}
    api.patch("podgroups", "w-workers", {"metadata": {"finalizers": None}})
    assert api.list("podgroups") == []
    assert names(api.list("pods")) == {"unrelated"}


def test_kopf_survives_dropped_and_expired_watches_and_errors(
    apiserver: ApiServer, api: ApiClient
) -> None:
    import kopf
    from kopf.testing import KopfRunner

    registry = kopf.OperatorRegistry()

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.networking.error_backoffs = [0.1, 0.2, 0.5]
        settings.posting.enabled = False

    apiserver.register_kopf_login(registry)

    @kopf.on.create(GROUP, "v1alpha1", "podgroups", registry=registry)
    def created(patch: kopf.Patch, **_: Any) -> None:
        patch.status["phase"] = "Seen"

    def seen(name: str) -> None:
        api.wait_for_object(
            "podgroups", name, lambda o: (o.get("status") or {}).get("phase") == "Seen", timeout=20
        )

    args = ["run", "--standalone", "--all-namespaces", "--verbose"]
    with KopfRunner(args, registry=registry, timeout=30) as runner:
        api.create(podgroup("a"))
        seen("a")
        assert apiserver.drop_watches() >= 1  # a clean end of stream: Kopf resumes from its rv
        api.create(podgroup("b"))
        seen("b")
        wait_for(lambda: apiserver.watch_count() >= 2)
        apiserver.drop_watches(abort=True)  # a cut connection
        api.create(podgroup("c"))
        seen("c")
        wait_for(lambda: apiserver.watch_count() >= 2)
        apiserver.expire_watches()  # the resumed watch gets 410 Gone: Kopf lists again
        api.create(podgroup("d"))
        seen("d")
        rule = apiserver.faults.fail(500, method="PATCH", path=r"/podgroups/e/status$")
        api.create(podgroup("e"))
        seen("e")
        assert rule.hits == 1
    assert runner.exit_code == 0
    assert runner.exception is None
    assert "Restarting the watch-stream" in runner.output  # the 410 was seen and handled


def test_two_emulators_stop_in_any_order() -> None:
    first = ApiServer().start()
    second = ApiServer().start()
    with ApiClient(first.url) as one, ApiClient(second.url) as two:
        one.create(node("a"))
        assert names(two.list("nodes")) == set()
        first.stop()  # not in LIFO order
        two.create(node("b"))
        assert names(two.list("nodes")) == {"b"}
    second.stop()
    assert not first.running
    assert not second.running


def test_the_emulator_in_a_child_process() -> None:
    with ApiServerProcess(crds=True) as server, ApiClient(server.url) as api:
        api.create(pod("p"))
        server.fail(500, method="POST", path=r"/binding$", times=1)
        with pytest.raises(ApiStatusError) as info:
            api.bind("p", "n1")
        assert info.value.status == 500
        api.bind("p", "n1")
        api.create(podgroup("g"))
        server.delay(0.2, method="GET", path=r"/podgroups/g$", times=1)
        started = time.monotonic()
        api.get("podgroups", "g")
        assert time.monotonic() - started >= 0.2
        assert server.drop_watches() == 0
        start = api.list_raw("pods")["metadata"]["resourceVersion"]
        api.create(pod("q"))
        server.expire_watches()
        events = list(api.watch("pods", resourceVersion=start, timeoutSeconds="1"))
        assert events[0]["object"]["code"] == 410
        stats = server.stats()
        assert stats["failures"] == []
        assert stats["requests"] >= 7
    assert server._process is None

"""Whole-cluster lists as the state takes them: read in pages, and slimmed to what the
scheduler reads (`gpusched.k8s.client.slim_pod`), a listed pod is taken exactly as its whole
body would be, and a relisted unchanged one is not parsed again."""

from __future__ import annotations

from typing import Any

import pytest

from gpusched.k8s.client import KubeClusterApi, slim_pod
from gpusched.scheduler.records import pod_fingerprint
from gpusched.scheduler.state import ClusterState
from testing.manifests import pod


def whole(name: str, version: str, **kind: Any) -> dict[str, Any]:
    """A pod body as the API server lists it: managed fields, and the kubelet's status."""
    body = pod(name, 2, **kind)
    body["metadata"]["resourceVersion"] = version
    body["metadata"]["managedFields"] = [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]
    body["status"] = {
        "phase": "Running" if "node" in kind else "Pending",
        "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": [{"name": "main", "ready": True, "restartCount": 0}],
        "resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": "p-gpus"}],
    }
    return body


@pytest.mark.parametrize(
    ("story", "kind"),
    [
        ("a pending pod of ours", {}),
        ("a bound pod that names its GPUs", {"node": "a", "at": [0, 1]}),
    ],
)
def test_a_slimmed_pod_is_taken_as_its_whole_body(story: str, kind: dict[str, Any]) -> None:
    body = whole("p", "5", **kind)
    slim = slim_pod(whole("p", "5", **kind))
    assert "managedFields" not in slim["metadata"], story
    assert set(slim["status"]) == {"phase", "resourceClaimStatuses", "conditions"}, story
    assert slim["status"]["conditions"] == [], story  # the kubelet's Ready is not read
    assert pod_fingerprint(slim) == pod_fingerprint(body), story
    from_whole, from_slim = ClusterState(), ClusterState()
    from_whole.upsert_pod(body)
    from_slim.upsert_pod(slim)
    assert from_slim.pods == from_whole.pods, story


def test_a_relisted_slim_pod_is_not_parsed_again() -> None:
    state = ClusterState()
    state.upsert_pod(whole("p", "5", node="a", at=[0, 1]))
    held = state.pods["default/p"]
    state.upsert_pod(slim_pod(whole("p", "9", node="a", at=[0, 1])))  # a heartbeat since
    assert state.pods["default/p"].pod is held.pod
    assert state.pods["default/p"].version == "9"


class PagedApi(KubeClusterApi):
    """Answers list requests from ``answers``, one per request, and records the queries."""

    def __init__(self, answers: list[dict[str, Any]]) -> None:
        self.answers = answers
        self.asked: list[str] = []

    async def _request(self, method: str, path: str, *_: Any, **__: Any) -> dict[str, Any]:
        self.asked.append(path)
        return self.answers.pop(0)


@pytest.mark.asyncio
async def test_pods_are_listed_in_pages_following_the_continue_token() -> None:
    api = PagedApi(
        [
            {"items": [whole("p", "1")], "metadata": {"continue": "next+page"}},
            {"items": [whole("q", "2")], "metadata": {}},
        ]
    )
    listed = [pod async for page in api.pages("pods") for pod in page.items]
    assert [p["metadata"]["name"] for p in listed] == ["p", "q"]
    assert all("managedFields" not in p["metadata"] for p in listed)
    assert api.asked == ["/api/v1/pods?limit=500", "/api/v1/pods?limit=500&continue=next%2Bpage"]

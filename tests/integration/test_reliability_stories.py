"""Stories over HTTP, judged from the API server's objects: no GPU given twice and no gang left
half-bound, under a replica that may no longer write, binds the server commits after the
client gave up, and bind failures while newcomers arrive.

    #   zone-a / rack-1
    #   n1 (8 GPUs)           every story runs on this one node unless it says otherwise
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes_asyncio import client

from gpusched.k8s import client as kube
from gpusched.k8s.client import KubeClusterApi, load_configuration
from gpusched.scheduler.ports import FencedError, ObjectRef
from testing.apiserver import ApiClient, ApiServer, wait_for
from testing.harness import (
    assert_no_gpu_shared,
    dump,
    events_for,
    gang,
    gpu_node,
    gpu_pod,
    placement_of,
    pods,
    running_operator,
)


def _gpus_in_use(api: ApiClient, node: str) -> int:
    used = 0
    for body in pods(api).values():
        if body["spec"].get("nodeName") == node:
            requests = body["spec"]["containers"][0]["resources"]["requests"]
            used += int(requests.get("nvidia.com/gpu", 0))
    return used


def _failed_scheduling(api: ApiClient, name: str) -> bool:
    return any(e["reason"] == "FailedScheduling" for e in events_for(api, name))


# ----- item 1: the fence sits at the write ----------------------------------------------------


async def _bind_with(kubeconfig: Path, answers: list[bool]) -> BaseException | None:
    """Binds default/p to n1 with a fence that gives ``answers`` in turn (then the last)."""
    calls: list[bool] = []

    def fence() -> bool:
        answer = answers[min(len(calls), len(answers) - 1)]
        calls.append(answer)
        return answer

    api = KubeClusterApi(client.ApiClient(await load_configuration(str(kubeconfig))), fence)
    try:
        await api.bind(ObjectRef("v1", "Pod", "default", "p"), "n1", {"gpusched.io/gpus": "0"})
    except FencedError as error:
        return error
    finally:
        await api.close()
    return None


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("story", "answers", "want_bound"),
    [
        ("a replica that may write binds", [True], True),
        ("a replica past its renew deadline sends nothing", [False], False),
        (
            # The fence is asked once more as the body goes out: a process stopped after
            # the first answer (SIGSTOP anywhere in between) asks again when it resumes.
            "the deadline passing between the first check and the write stops the bind",
            [True, False],
            False,
        ),
    ],
)
async def test_the_fence_is_asked_as_the_bind_is_written(
    story: str,
    answers: list[bool],
    want_bound: bool,
    apiserver: ApiServer,
    api: ApiClient,
    kubeconfig: Path,
) -> None:
    api.create(gpu_node("n1", "zone-a", "rack-1"))
    api.create(gpu_pod("p", 1))
    refused = await _bind_with(kubeconfig, answers)
    bound = placement_of(pods(api)["default/p"]) is not None
    assert (bound, refused is None) == (want_bound, want_bound), story
    binds = [r for r in apiserver.requests() if r.method == "POST" and r.name == "p"]
    assert len(binds) == (1 if want_bound else 0), story


# ----- item 2: a bind the server commits after the client gave up -----------------------------


def test_a_bind_committed_after_the_client_gave_up_keeps_its_gpus(
    apiserver: ApiServer, api: ApiClient, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The client gives up on a bind after 0.2 s; the server answers big-0's after 1 s, and
    # commits it. big-1 wants the same 8 GPUs meanwhile: it must wait, saying why.
    monkeypatch.setattr(kube, "BIND_TIMEOUT_SECONDS", 0.2)
    api.create(gpu_node("n1", "zone-a", "rack-1"))
    slow = apiserver.faults.delay(1.0, method="POST", path=r"/pods/big-0/binding$", times=1)
    with running_operator(kubeconfig):
        api.create(gpu_pod("big-0", 8))
        wait_for(lambda: slow.hits == 1, message="big-0's bind sent")
        api.create(gpu_pod("big-1", 8))
        wait_for(lambda: placement_of(pods(api)["default/big-0"]), message="the late commit")
        wait_for(lambda: _failed_scheduling(api, "big-1"), message=lambda: dump(pods(api)))
        assert placement_of(pods(api)["default/big-1"]) is None, dump(pods(api))
        assert _gpus_in_use(api, "n1") == 8
        assert_no_gpu_shared(api)


# ----- item 4: a gang that has started binding owns its room ---------------------------------


def test_one_500_on_a_gang_bind_while_newcomers_arrive_still_completes_the_gang(
    apiserver: ApiServer, api: ApiClient, kubeconfig: Path
) -> None:
    # An 8-pod gang of 1-GPU pods fills n1. The bind of w-5 fails once; two loose pods
    # arrive while it backs off. They must not take w-5's GPU: the gang ends 8 of 8.
    api.create(gpu_node("n1", "zone-a", "rack-1"))
    failed = apiserver.faults.fail(500, method="POST", path=r"/pods/w-5/binding$", times=1)
    with running_operator(kubeconfig):
        api.create(gang("w", 8))
        for i in range(8):
            api.create(gpu_pod(f"w-{i}", 1, group="w"))
        wait_for(lambda: failed.hits == 1, message="the 500 on w-5")
        api.create(gpu_pod("new-0", 1))
        api.create(gpu_pod("new-1", 1))
        members = [f"default/w-{i}" for i in range(8)]
        wait_for(
            lambda: all(placement_of(pods(api)[m]) for m in members),
            message=lambda: f"the gang whole: {dump(pods(api))}",
        )
        wait_for(lambda: _failed_scheduling(api, "new-0") and _failed_scheduling(api, "new-1"))
        everything = pods(api)
        assert [k for k in ("default/new-0", "default/new-1") if placement_of(everything[k])] == []
        assert_no_gpu_shared(api)

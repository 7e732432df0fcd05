"""gpusched and kube-scheduler 1.37, side by side: the same stories on identical Nodes of one
real control plane, one scheduler at a time (the cluster is reset between the halves).

gpusched gets our CRDs (scheduling.gpusched.io); kube-scheduler, started only for its half at
its defaults with the Workload API's gates, gets the same groups as scheduling.k8s.io objects
and the same pods naming their group in `spec.schedulingGroup` (testing/upstream.py).
Each story asserts what each scheduler really did; where they differ, the test says so.

With GPUSCHED_VERSUS_TABLE=FILE the side-by-side table (who placed what, where, and how long
from the first pod created to all bound, polled every 20 ms) is written to FILE as Markdown.
Those timings are for the README's table only: no test asserts on them.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from testing.apiserver import ApiClient, wait_for
from testing.cluster.cluster import RealCluster
from testing.harness import (
    EXAMPLES,
    GPUS,
    GROUP_LABEL,
    RACK,
    ZONE,
    assert_no_gpu_shared,
    condition,
    dump,
    ensure_namespace,
    events_for,
    gang,
    gpu_node,
    gpu_pod,
    group_status,
    running_operator,
)
from testing.upstream import (
    UPSTREAM_GROUP,
    clear_upstream,
    kube_scheduler,
    upstream_condition,
    upstream_pod,
    upstream_pod_group,
    upstream_workload,
)

SAMPLE = EXAMPLES / "clusters" / "sample"
TRAINING = EXAMPLES / "workloads" / "01-zone-rack-training"
GPUSCHED = "gpusched"
UPSTREAM = "kube-scheduler"
Obj = dict[str, Any]


# -- the stories' inputs -------------------------------------------------------------------------


@dataclass
class Story:
    """Nodes and pods already running, then groups and the pods that belong to them, all in
    gpusched's form; `Run.submit` translates them for kube-scheduler."""

    name: str
    nodes: list[Obj]
    running: list[Obj] = field(default_factory=list)
    groups: list[Obj] = field(default_factory=list)
    pods: list[Obj] = field(default_factory=list)

    def build(self, api: ApiClient) -> None:
        for node in self.nodes:
            api.create(node)
        for namespace in self.namespaces:
            ensure_namespace(api, namespace)
        for pod in self.running:
            api.create(pod)

    @property
    def namespaces(self) -> list[str]:
        return sorted({_namespace(o) for o in [*self.running, *self.groups, *self.pods]})

    def keys(self, prefix: str = "") -> list[str]:
        return [_key(p) for p in self.pods if p["metadata"]["name"].startswith(prefix)]


def _namespace(body: Mapping[str, Any]) -> str:
    return str(body["metadata"].get("namespace") or "default")


def _key(pod: Mapping[str, Any]) -> str:
    return f"{_namespace(pod)}/{pod['metadata']['name']}"


def racks(layout: Mapping[str, Mapping[str, int]]) -> list[Obj]:
    """8-GPU DGX A100 nodes: `{"zone-a": {"rack-1": 2}}` makes a1-1 and a1-2 (zone letter,
    rack number, node number)."""
    return [
        gpu_node(f"{zone[-1]}{rack.split('-')[-1]}-{i}", zone, rack)
        for zone, by_rack in layout.items()
        for rack, count in by_rack.items()
        for i in range(1, count + 1)
    ]


def blocker(node: str, gpus: int) -> Obj:
    """Another scheduler's pod, already bound, holding `gpus` GPUs of `node`."""
    return gpu_pod(f"blocker-{node}", gpus, scheduler="other", node=node)


# -- one half of a story: one scheduler at work --------------------------------------------------


class Run:
    """What one scheduler did with a story: submits its objects, waits, and reads the result."""

    def __init__(self, scheduler: str, api: ApiClient, story: Story) -> None:
        self.scheduler = scheduler
        self.api = api
        self.story = story
        self.started = 0.0
        self.seconds: float | None = None
        self.note = ""

    @property
    def upstream(self) -> bool:
        return self.scheduler == UPSTREAM

    def submit(self) -> None:
        for group in self.story.groups:
            for body in self.translate_group(group):
                self.api.create(body)
        self.started = time.monotonic()
        for pod in self.story.pods:
            self.create_pod(pod)

    def translate_group(self, group: Obj) -> list[Obj]:
        if not self.upstream:
            return [group]
        if group["kind"] == "Workload":
            return upstream_workload(group)
        return [upstream_pod_group(group)]

    def create_pod(self, pod: Obj) -> Obj:
        return self.api.create(upstream_pod(pod) if self.upstream else pod)

    # -- reading the cluster ---------------------------------------------------------------

    def pods(self) -> dict[str, Obj]:
        found: dict[str, Obj] = {}
        for namespace in self.story.namespaces:
            for pod in self.api.list("pods", namespace=namespace):
                found[_key(pod)] = pod
        return found

    def node_of(self, key: str) -> str | None:
        pod = self.pods().get(key)
        node = (pod or {}).get("spec", {}).get("nodeName")
        return str(node) if node else None

    def bound(self, keys: Sequence[str] | None = None) -> dict[str, str]:
        wanted = set(keys if keys is not None else self.story.keys())
        return {
            k: p["spec"]["nodeName"]
            for k, p in self.pods().items()
            if k in wanted and p.get("spec", {}).get("nodeName")
        }

    def wait_bound(
        self, keys: Sequence[str] | None = None, timeout: float = 60, since: float | None = None
    ) -> float:
        """Until every pod of `keys` (default: the story's) is bound; returns the seconds since
        `since` (default: the first pod's creation), kept as the story's time for all pods."""
        wanted = list(keys if keys is not None else self.story.keys())
        wait_for(
            lambda: len(self.bound(wanted)) == len(wanted),
            timeout=timeout,
            message=lambda: f"{self.scheduler} to bind {len(wanted)} pods: {self.bound(wanted)}",
        )
        seconds = time.monotonic() - (self.started if since is None else since)
        if keys is None:
            self.seconds = seconds
        return seconds

    def wait_unschedulable(self, key: str) -> str:
        """Until the scheduler says why pod `key` waits; returns what it says: kube-scheduler in
        the pod's PodScheduled condition, gpusched in a FailedScheduling Event."""
        if self.upstream:
            cond = wait_for(
                lambda: (
                    c if (c := self.pod_condition(key)).get("reason") == "Unschedulable" else None
                ),
                timeout=30,
                message=lambda: dump(self.pods().get(key)),
            )
            return str(cond["message"])
        namespace, name = key.split("/")
        failures = wait_for(
            lambda: [
                e
                for e in events_for(self.api, name, namespace)
                if e["reason"] == "FailedScheduling"
            ],
            timeout=30,
            message=lambda: dump(events_for(self.api, name, namespace)),
        )
        return str(failures[-1]["message"])

    def pod_condition(self, key: str, type_: str = "PodScheduled") -> Obj:
        pod = self.pods().get(key) or {}
        for item in pod.get("status", {}).get("conditions") or []:
            if item.get("type") == type_:
                return dict(item)
        return {}

    def wait_upstream_condition(
        self, plural: str, name: str, namespace: str = "default", timeout: float = 30
    ) -> Obj:
        """Until kube-scheduler has written its PodGroupInitiallyScheduled condition."""
        return wait_for(
            lambda: upstream_condition(self.api, plural, name, namespace),
            timeout=timeout,
            message=f"kube-scheduler's condition on {plural}/{name}",
        )

    def domain(self, node: str, key: str = RACK) -> str:
        labels = self.api.get("nodes", node)["metadata"]["labels"]
        return f"{labels[ZONE]}/{labels[RACK]}" if key == RACK else str(labels[ZONE])

    def domains(self, keys: Sequence[str], key: str = RACK) -> set[str]:
        placed = self.bound(keys)
        return {self.domain(node, key) for node in placed.values()}

    def summary(self) -> str:
        """Per group: how many of its pods are bound, in which racks."""
        by_group: dict[str, list[str]] = {}
        for pod in self.story.pods:
            group = pod["metadata"].get("labels", {}).get(GROUP_LABEL, "(none)")
            by_group.setdefault(group, []).append(_key(pod))
        parts = []
        for group, keys in by_group.items():
            placed = self.bound(keys)
            where = sorted({self.domain(n) for n in placed.values()})
            parts.append(
                f"{group} {len(placed)}/{len(keys)}" + (f" in {', '.join(where)}" if where else "")
            )
        return "; ".join(parts)


# -- the table -----------------------------------------------------------------------------------


@dataclass
class Row:
    story: str
    scheduler: str
    placed: str
    seconds: str


TABLE: list[Row] = []


@pytest.fixture(scope="module", autouse=True)
def versus_table() -> Iterator[None]:
    yield
    target = os.environ.get("GPUSCHED_VERSUS_TABLE")
    if target and TABLE:
        lines = [
            "| story | scheduler | placed what, where | first created → all bound |",
            "|---|---|---|---|",
            *(f"| {r.story} | {r.scheduler} | {r.placed} | {r.seconds} |" for r in TABLE),
        ]
        Path(target).write_text("\n".join(lines) + "\n", encoding="utf-8")


def record(run: Run) -> None:
    seconds = f"{run.seconds:.2f} s" if run.seconds is not None else "never"
    TABLE.append(
        Row(
            run.story.name,
            run.scheduler,
            run.summary(),
            seconds + (f" ({run.note})" * bool(run.note)),
        )
    )


# -- running a half ------------------------------------------------------------------------------


@pytest.fixture
def halves(
    apiserver: RealCluster, api: ApiClient, kubeconfig: Path
) -> Callable[[Story, str], contextlib.AbstractContextManager[Run]]:
    """`with halves(story, GPUSCHED) as run:` — an empty cluster, the story's nodes and running
    pods, and that one scheduler running for the block (kube-scheduler stopped after it)."""
    if not isinstance(apiserver, RealCluster):
        pytest.skip("side by side with kube-scheduler needs the real control plane")

    @contextlib.contextmanager
    def half(story: Story, scheduler: str) -> Iterator[Run]:
        apiserver.reset()
        clear_upstream(api, story.namespaces)
        story.build(api)
        run = Run(scheduler, api, story)
        if scheduler == GPUSCHED:
            with running_operator(kubeconfig) as runtime:
                wait_for(
                    lambda: len(runtime.scheduler.state.nodes) == len(story.nodes),
                    timeout=30,
                    message="gpusched to see every node",
                )
                yield run
        else:
            with kube_scheduler(apiserver):
                yield run
        record(run)
        clear_upstream(api, story.namespaces)

    return half


Halves = Callable[[Story, str], contextlib.AbstractContextManager[Run]]


def _documents(path: Path) -> list[Obj]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


# -- the stories ---------------------------------------------------------------------------------


def test_the_seed_workload_is_written_as_a_workload_controller_would_for_kube_scheduler() -> None:
    """No cluster needed: the translation alone, object by object."""
    story = zone_rack_training()
    objects = upstream_workload(story.groups[0])
    assert [(o["apiVersion"], o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("scheduling.k8s.io/v1beta1", "Workload", "train"),
        ("scheduling.k8s.io/v1alpha3", "CompositePodGroup", "train-zone"),
        ("scheduling.k8s.io/v1beta1", "PodGroup", "train-workers"),
        ("scheduling.k8s.io/v1beta1", "PodGroup", "train-driver"),
    ]
    workers = objects[2]["spec"]
    assert workers == {
        "workloadRef": {"workloadName": "train", "templateName": "workers"},
        "schedulingPolicy": {"gang": {"minCount": 8}},
        "schedulingConstraints": {"topology": [{"key": RACK}]},
        "parentCompositePodGroupName": "train-zone",
    }
    assert objects[1]["spec"]["schedulingConstraints"] == {"topology": [{"key": ZONE}]}
    pod = upstream_pod(story.pods[0])
    assert pod["spec"]["schedulerName"] == "default-scheduler"
    assert pod["spec"]["schedulingGroup"] == {"podGroupName": "train-workers"}
    assert GROUP_LABEL not in pod["metadata"]["labels"]
    assert GROUP_LABEL in story.pods[0]["metadata"]["labels"], "the original is untouched"


def zone_rack_training() -> Story:
    #           zone-a                     zone-b
    #      rack-1      rack-2         rack-1          rack-2 (RTX 4090)
    #   dgx-a1-1 a1-2  a2-1 a2-2   b1-1 (2 busy)  b1-2 (1 busy)   pcie-b2-1 b2-2
    # 8 workers × 2 A100s must share a rack: only zone-a's racks have 16 free A100s.
    return Story(
        "zone→rack Workload (examples/workloads/01)",
        nodes=[d for d in _documents(SAMPLE / "nodes.yaml") if d["kind"] == "Node"],
        running=_documents(SAMPLE / "running-pods.yaml"),
        groups=_documents(TRAINING / "1-workload.yaml"),
        pods=_documents(TRAINING / "2-pods.yaml"),
    )


def test_the_zone_rack_workload_lands_in_zone_a_with_both_schedulers(halves: Halves) -> None:
    story = zone_rack_training()
    workers = story.keys("train-worker")
    driver = story.keys("train-driver")
    for scheduler in (GPUSCHED, UPSTREAM):
        with halves(story, scheduler) as run:
            run.submit()
            run.wait_bound()
            placed = run.bound()
            assert run.domains(workers, ZONE) == {"zone-a"}, run.summary()
            assert run.domains(driver, ZONE) == {"zone-a"}, run.summary()
            assert len(run.domains(workers)) == 1, run.summary()
            pods = run.pods()
            if run.upstream:
                # kube-scheduler counts nvidia.com/gpu; which GPUs is the device plugin's
                # business: no indices, NVLink and NUMA unseen.
                assert not any(
                    GPUS in (pods[k]["metadata"].get("annotations") or {}) for k in placed
                )
                cond = run.wait_upstream_condition("podgroups", "train-workers", "ml")
                assert cond["status"] == "True", cond
                assert cond["reason"] == "Scheduled", cond
            else:
                # gpusched puts the driver beside the workers and picks two NVLink GPUs each.
                assert run.domains(driver) == run.domains(workers) == {"zone-a/rack-1"}
                for key in workers:
                    gpus = pods[key]["metadata"]["annotations"][GPUS].split(",")
                    assert len(gpus) == 2, dump(pods[key]["metadata"])
                assert_no_gpu_shared(run.api)


def test_a_gang_that_fits_only_in_rack_2_lands_there_with_both_schedulers(halves: Halves) -> None:
    #             zone-a
    #    rack-1     rack-2     rack-3
    #   a1-1 a1-2  a2-1 a2-2  a3-1 a3-2     racks 1 and 3: 4 of 8 GPUs busy on every node
    # 4 pods × 4 GPUs in one rack: racks 1 and 3 hold 2 each, so only rack-2 holds all 4
    # (without the rack constraint, racks 1 + 3 would have done).
    nodes = racks({"zone-a": {"rack-1": 2, "rack-2": 2, "rack-3": 2}})
    story = Story(
        "gang that fits only in one rack (4 × 4 GPUs)",
        nodes=nodes,
        running=[blocker(n, 4) for n in ("a1-1", "a1-2", "a3-1", "a3-2")],
        groups=[gang("w", 4)],
        pods=[gpu_pod(f"w-{i}", 4, group="w") for i in range(4)],
    )
    for scheduler in (GPUSCHED, UPSTREAM):
        with halves(story, scheduler) as run:
            run.submit()
            run.wait_bound()
            assert run.domains(story.keys()) == {"zone-a/rack-2"}, run.summary()


def test_a_gang_that_fits_nowhere_binds_nothing_until_room_is_freed(halves: Halves) -> None:
    #        zone-a
    #    rack-1     rack-2        every node: 6 of 8 GPUs busy; 4 pods × 4 GPUs fit nowhere
    #   a1-1 a1-2  a2-1 a2-2
    story = Story(
        "gang that fits nowhere (4 × 4 GPUs), then rack-1 is freed",
        nodes=racks({"zone-a": {"rack-1": 2, "rack-2": 2}}),
        running=[blocker(n, 6) for n in ("a1-1", "a1-2", "a2-1", "a2-2")],
        groups=[gang("big", 4)],
        pods=[gpu_pod(f"big-{i}", 4, group="big") for i in range(4)],
    )
    for scheduler in (GPUSCHED, UPSTREAM):
        with halves(story, scheduler) as run:
            run.submit()
            if run.upstream:
                cond = run.wait_upstream_condition("podgroups", "big")
                assert (cond["status"], cond["reason"]) == ("False", "Unschedulable"), cond
            else:
                status = _gpusched_verdict(run, "big")
                assert condition(status)["reason"] == "Unschedulable", dump(status)
                lines = status["lastAttempt"]["domains"]
                assert [line.split(":")[0] for line in lines] == [
                    "zone-a/rack-1",
                    "zone-a/rack-2",
                ], dump(status)
            assert run.bound() == {}, run.summary()
            # Room in rack-1: both bind the whole gang there, and only there.
            run.api.delete("pods", "blocker-a1-1", "default")
            run.api.delete("pods", "blocker-a1-2", "default")
            run.started = time.monotonic()
            run.note = "timed from freeing rack-1"
            run.wait_bound()
            assert run.domains(story.keys()) == {"zone-a/rack-1"}, run.summary()


def test_a_recreated_member_returns_to_its_gangs_rack_or_waits_there(halves: Halves) -> None:
    #        zone-a
    #    rack-1     rack-2        the gang (4 × 4 GPUs) fills one rack; the other stays empty
    #   a1-1 a1-2  a2-1 a2-2
    story = Story(
        "re-created gang member (4 × 4 GPUs)",
        nodes=racks({"zone-a": {"rack-1": 2, "rack-2": 2}}),
        groups=[gang("w", 4)],
        pods=[gpu_pod(f"w-{i}", 4, group="w") for i in range(4)],
    )
    for scheduler in (GPUSCHED, UPSTREAM):
        with halves(story, scheduler) as run:
            run.submit()
            run.wait_bound()
            (rack,) = run.domains(story.keys())
            # Deleted and re-created, as a Job controller would: back into the same rack.
            since = _recreate(run, "w-0")
            seconds = run.wait_bound(["default/w-0"], since=since)
            assert run.domains(["default/w-0"]) == {rack}, run.summary()
            run.note = f"re-created w-0 back in its rack in {seconds:.2f} s"
            # Its place taken by another scheduler's pod, the next one re-created must wait:
            # the empty rack beside it is no place for one member of this gang.
            node = run.node_of("default/w-1")
            assert node is not None
            run.api.create(gpu_pod("intruder", 4, scheduler="other", node=node))
            _recreate(run, "w-1")
            if run.upstream:
                # kube-scheduler keeps the rack too: the domain of the gang's scheduled pods is
                # required, so it tries only that rack's 2 nodes.
                message = run.wait_unschedulable("default/w-1")
                assert message.startswith("0/2 nodes are available"), message
                assert "Insufficient nvidia.com/gpu" in message, message
            else:
                status = _gpusched_verdict(run, "w")
                assert [line.split(":")[0] for line in status["lastAttempt"]["domains"]] == [
                    rack
                ], dump(status)
            assert run.node_of("default/w-1") is None, run.summary()
            run.note += "; w-1 re-created with its node taken waits for that rack"


def _gpusched_verdict(run: Run, group: str) -> Obj:
    """The status of gpusched's PodGroup `group` once its last attempt found no room."""
    return wait_for(
        lambda: (
            s
            if (s := group_status(run.api, group)).get("lastAttempt", {}).get("reason")
            == "Unschedulable"
            else None
        ),
        timeout=30,
        message=lambda: f"gpusched's verdict on {group}: {dump(group_status(run.api, group))}",
    )


def _recreate(run: Run, name: str) -> float:
    """Deletes pod `name` of gang w, waits until it is gone, creates it again; returns when."""
    run.api.delete("pods", name, "default")
    wait_for(lambda: f"default/{name}" not in run.pods(), message=f"{name} gone")
    since = time.monotonic()
    run.create_pod(gpu_pod(name, 4, group="w"))
    return since


def test_basic_policy_binds_what_fits_and_leaves_the_rest_pending(halves: Halves) -> None:
    #        zone-a
    #    rack-1  rack-2          one 8-GPU node a rack; a basic group of 3 pods × 4 GPUs,
    #    a1-1    a2-1            topology rack: no all-or-nothing
    basic = gang("b", 1)
    basic["spec"]["schedulingPolicy"] = {"basic": {}}
    story = Story(
        "basic policy with a rack constraint (3 × 4 GPUs, room for 2 a rack)",
        nodes=racks({"zone-a": {"rack-1": 1, "rack-2": 1}}),
        groups=[basic],
        pods=[gpu_pod(f"b-{i}", 4, group="b") for i in range(3)],
    )
    for scheduler in (GPUSCHED, UPSTREAM):
        with halves(story, scheduler) as run:
            run.submit()
            wait_for(lambda: len(run.bound()) >= 2, timeout=30, message=run.summary)
            run.seconds = time.monotonic() - run.started
            # Basic is not all-or-nothing, but the rack constraint holds for the whole group:
            # both put two pods in one rack and keep the third waiting for room there, though
            # the other rack is empty.
            (waiting,) = set(story.keys()) - set(run.bound())
            message = run.wait_unschedulable(waiting)
            if run.upstream:
                # It tries only the node of the rack its group's pods are in.
                assert message.startswith("0/1 nodes are available"), message
                assert "Insufficient nvidia.com/gpu" in message, message
            else:
                # It names the rack it must stay in, and why it does not fit there.
                assert "beside its group's other pods" in message, message
                assert "Insufficient nvidia.com/gpu" in message, message
            (rack,) = run.domains(story.keys())
            assert len(run.bound()) == 2, run.summary()
            run.note = f"2 of 3; {waiting.split('/')[1]} waits for room in {rack}"


def test_a_two_level_gang_of_64_pods_fills_the_one_zone_that_holds_it(halves: Halves) -> None:
    #                zone-a                                zone-b
    #   rack-1  rack-2  rack-3  rack-4        rack-1  rack-2  rack-3  rack-4
    #   4 nodes each (a1-1 … a4-4), a1-1 has 1 GPU busy    4 nodes each, empty
    # A zone CompositePodGroup (minGroupCount 4) of 4 rack PodGroups × 16 pods × 2 GPUs: each
    # PodGroup fills a rack (32 GPUs), the gang fills a zone, and zone-a lacks one GPU.
    layout = {z: {f"rack-{r}": 4 for r in range(1, 5)} for z in ("zone-a", "zone-b")}
    parts = [f"part-{p}" for p in range(4)]
    workload = {
        "apiVersion": "scheduling.gpusched.io/v1alpha1",
        "kind": "Workload",
        "metadata": {"name": "big", "namespace": "default"},
        "spec": {
            "compositePodGroupTemplates": [
                {
                    "name": "zone",
                    "schedulingPolicy": {"gang": {"minGroupCount": 4}},
                    "schedulingConstraints": {"topology": [{"key": ZONE}]},
                    "podGroupTemplates": [
                        {
                            "name": part,
                            "schedulingPolicy": {"gang": {"minCount": 16}},
                            "schedulingConstraints": {"topology": [{"key": RACK}]},
                        }
                        for part in parts
                    ],
                }
            ]
        },
    }
    story = Story(
        "2-level gang: zone of 4 rack gangs, 64 pods × 2 GPUs",
        nodes=racks(layout),
        running=[blocker("a1-1", 1)],
        groups=[workload],
        pods=[gpu_pod(f"{part}-{i}", 2, group=f"big-{part}") for part in parts for i in range(16)],
    )
    for scheduler in (GPUSCHED, UPSTREAM):
        with halves(story, scheduler) as run:
            run.submit()
            run.wait_bound(timeout=120)
            assert run.domains(story.keys(), ZONE) == {"zone-b"}, run.summary()
            part_racks = [run.domains(story.keys(part)) for part in parts]
            assert all(len(r) == 1 for r in part_racks), run.summary()
            assert len(set().union(*part_racks)) == 4, run.summary()
            if run.upstream:
                for part in parts:
                    cond = run.wait_upstream_condition("podgroups", f"big-{part}")
                    assert (cond["status"], cond["reason"]) == ("True", "Scheduled"), cond
                # It reports on PodGroups only: the CompositePodGroup gets no condition.
                cpg = run.api.get("compositepodgroups", "big-zone", "default", group=UPSTREAM_GROUP)
                assert not (cpg.get("status") or {}).get("conditions"), dump(cpg)
            else:
                zone = wait_for(
                    lambda: (
                        s
                        if (
                            s := group_status(run.api, "big-zone", plural="compositepodgroups")
                        ).get("placement")
                        else None
                    )
                )
                assert zone["placement"] == {ZONE: "zone-b"}, dump(zone)
                assert_no_gpu_shared(run.api)

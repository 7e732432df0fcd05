"""gpusched and kube-scheduler 1.37, side by side: the same stories on identical Nodes of one
real control plane, one scheduler at a time (the cluster is reset between the halves).

Both get the same objects, the Workload API's (`scheduling.k8s.io` v1beta1 Workload and
PodGroup, v1alpha3 CompositePodGroup, testing/upstream.py) and pods naming their group in
`spec.schedulingGroup`; only the pods' `schedulerName` differs (`gpusched` or
`default-scheduler`). gpusched reads them natively; kube-scheduler runs only for its half, at
its defaults with the Workload API's gates. Each story asserts what each scheduler really did;
where they differ, the test says so, and where kube-scheduler cannot do what a story shows,
the story's docstring says what.

With GPUSCHED_VERSUS_TABLE=FILE the side-by-side table (story × kube-scheduler × gpusched:
who placed what, where, and how long from the first pod created to all bound, polled every
20 ms) is written to FILE as Markdown. Those timings are for the README's table only: no test
asserts on them.
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
from testing.gangs import upstream_member, upstream_pod_group
from testing.harness import (
    EXAMPLES,
    GPUS,
    RACK,
    ZONE,
    assert_no_gpu_shared,
    dump,
    ensure_namespace,
    gpu_node,
    gpu_pod,
    running_operator,
)
from testing.upstream import (
    COMPOSITE_API,
    KUBE_SCHEDULER,
    UPSTREAM_GROUP,
    WORKLOAD_API,
    clear_upstream,
    for_scheduler,
    kube_scheduler,
    workload_objects,
)

SAMPLE = EXAMPLES / "clusters" / "sample"
GPUSCHED = "gpusched"
UPSTREAM = "kube-scheduler"
SCHEDULER_NAMES = {GPUSCHED: "gpusched", UPSTREAM: KUBE_SCHEDULER}
A100 = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
Obj = dict[str, Any]


# -- the stories' inputs -------------------------------------------------------------------------


@dataclass
class Story:
    """Nodes and pods already running, then the Workload API's objects and the pods naming
    their group in `spec.schedulingGroup`: the same for both schedulers, `Run.submit` sets only
    the pods' `schedulerName`."""

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


def _group_of(pod: Mapping[str, Any]) -> str:
    return str((pod["spec"].get("schedulingGroup") or {}).get("podGroupName", "(none)"))


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


def member(name: str, gpus: int, group: str, **kw: Any) -> Obj:
    """A pod naming upstream PodGroup `group` in `spec.schedulingGroup`."""
    return upstream_member(name, gpus, group, **kw)


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
            self.api.create(group)
        self.started = time.monotonic()
        for pod in self.story.pods:
            self.create_pod(pod)

    def create_pod(self, pod: Obj) -> Obj:
        return self.api.create(for_scheduler(pod, SCHEDULER_NAMES[self.scheduler]))

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
        """Until the scheduler says why pod `key` waits; returns what it says. Both write it
        where kube-scheduler does: the pod's `PodScheduled=False`, reason `Unschedulable` (a
        pod whose group gpusched has not read yet says `WaitingForPodGroup` instead)."""
        cond = wait_for(
            lambda: c if (c := self.pod_condition(key)).get("reason") == "Unschedulable" else {},
            timeout=30,
            message=lambda: dump(self.pods().get(key)),
        )
        return str(cond["message"])

    def pod_condition(self, key: str, type_: str = "PodScheduled") -> Obj:
        pod = self.pods().get(key) or {}
        for item in pod.get("status", {}).get("conditions") or []:
            if item.get("type") == type_:
                return dict(item)
        return {}

    def group_condition(
        self, name: str, namespace: str = "default", composite: bool = False
    ) -> Obj:
        """The `PodGroupInitiallyScheduled` (`CompositePodGroupInitiallyScheduled`) condition
        on upstream group `name`, written by whichever scheduler runs ({} if none)."""
        plural, type_ = (
            ("compositepodgroups", "CompositePodGroupInitiallyScheduled")
            if composite
            else ("podgroups", "PodGroupInitiallyScheduled")
        )
        body = self.api.get(plural, name, namespace, group=UPSTREAM_GROUP)
        for item in (body.get("status") or {}).get("conditions") or []:
            if item.get("type") == type_:
                return dict(item)
        return {}

    def wait_group_condition(
        self,
        name: str,
        namespace: str = "default",
        *,
        status: str,
        says: str = "",
        composite: bool = False,
    ) -> Obj:
        """Until the group's condition has `status` and a message containing `says`."""
        return wait_for(
            lambda: (
                c
                if (c := self.group_condition(name, namespace, composite)).get("status") == status
                and says in str(c.get("message", ""))
                else {}
            ),
            timeout=30,
            message=lambda: (
                f"{self.scheduler}'s condition on {name} to be {status} saying {says!r}: "
                f"{self.group_condition(name, namespace, composite)}"
            ),
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
            by_group.setdefault(_group_of(pod), []).append(_key(pod))
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
class Cell:
    placed: str
    seconds: str


TABLE: dict[str, dict[str, Cell]] = {}


@pytest.fixture(scope="module", autouse=True)
def versus_table() -> Iterator[None]:
    yield
    target = os.environ.get("GPUSCHED_VERSUS_TABLE")
    if target and TABLE:
        lines = [
            "| story | kube-scheduler 1.37 | gpusched |",
            "|---|---|---|",
            *(
                f"| {story} | {_cell(cells.get(UPSTREAM))} | {_cell(cells.get(GPUSCHED))} |"
                for story, cells in TABLE.items()
            ),
        ]
        Path(target).write_text("\n".join(lines) + "\n", encoding="utf-8")


def _cell(cell: Cell | None) -> str:
    return "(not run)" if cell is None else f"{cell.placed} ({cell.seconds})"


def record(run: Run) -> None:
    seconds = f"{run.seconds:.2f} s" if run.seconds is not None else "never"
    TABLE.setdefault(run.story.name, {})[run.scheduler] = Cell(
        run.summary(), seconds + (f"; {run.note}" * bool(run.note))
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


def zone_rack_training() -> Story:
    """examples/workloads/01 as the Workload API writes it: a Workload whose zone
    CompositePodGroup (minGroupCount 2) holds a rack gang of 8 workers × 2 A100s and a rack
    gang of one driver (no GPU)."""
    #           zone-a                     zone-b
    #      rack-1      rack-2         rack-1          rack-2 (RTX 4090)
    #   dgx-a1-1 a1-2  a2-1 a2-2   b1-1 (2 busy)  b1-2 (1 busy)   pcie-b2-1 b2-2
    # 8 workers × 2 A100s must share a rack: only zone-a's racks have 16 free A100s.
    rack = {"topology": [{"key": RACK}]}
    workload = {
        "apiVersion": WORKLOAD_API,
        "kind": "Workload",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {
            "compositePodGroupTemplates": [
                {
                    "name": "zone",
                    "schedulingPolicy": {"gang": {"minGroupCount": 2}},
                    "schedulingConstraints": {"topology": [{"key": ZONE}]},
                    "podGroupTemplates": [
                        {
                            "name": "workers",
                            "schedulingPolicy": {"gang": {"minCount": 8}},
                            "schedulingConstraints": rack,
                        },
                        {
                            "name": "driver",
                            "schedulingPolicy": {"gang": {"minCount": 1}},
                            "schedulingConstraints": rack,
                        },
                    ],
                }
            ]
        },
    }
    workers = [
        member(
            f"train-worker-{i}",
            2,
            "train-workers",
            namespace="ml",
            cpu="16",
            memory="128Gi",
            selector=A100,
        )
        for i in range(8)
    ]
    return Story(
        "zone→rack Workload (examples/workloads/01)",
        nodes=[d for d in _documents(SAMPLE / "nodes.yaml") if d["kind"] == "Node"],
        running=_documents(SAMPLE / "running-pods.yaml"),
        groups=workload_objects(workload),
        pods=[*workers, member("train-driver-0", 0, "train-driver", namespace="ml")],
    )


def rack_2_only() -> Story:
    #             zone-a
    #    rack-1     rack-2     rack-3
    #   a1-1 a1-2  a2-1 a2-2  a3-1 a3-2     racks 1 and 3: 4 of 8 GPUs busy on every node
    # 4 pods × 4 GPUs in one rack: racks 1 and 3 hold 2 each, so only rack-2 holds all 4
    # (without the rack constraint, racks 1 + 3 would have done).
    return Story(
        "gang that fits only in one rack (4 × 4 GPUs)",
        nodes=racks({"zone-a": {"rack-1": 2, "rack-2": 2, "rack-3": 2}}),
        running=[blocker(n, 4) for n in ("a1-1", "a1-2", "a3-1", "a3-2")],
        groups=[upstream_pod_group("w", 4)],
        pods=[member(f"w-{i}", 4, "w") for i in range(4)],
    )


def test_both_schedulers_get_the_same_upstream_objects_only_the_scheduler_name_differs() -> None:
    """No cluster needed: what each half creates, object by object."""
    stories = (zone_rack_training, rack_2_only, fits_nowhere, one_rack_gang, basic_rack_group)
    for make in (*stories, two_level):
        story = make()
        kinds = {(o["apiVersion"], o["kind"]) for o in story.groups}
        assert kinds <= {
            (WORKLOAD_API, "Workload"),
            (WORKLOAD_API, "PodGroup"),
            (COMPOSITE_API, "CompositePodGroup"),
        }, (story.name, kinds)
        groups = {o["metadata"]["name"] for o in story.groups if o["kind"] == "PodGroup"}
        for pod in story.pods:
            assert _group_of(pod) in groups, (story.name, dump(pod))
            assert not pod["metadata"].get("labels"), "no label of ours names the group"
            ours, theirs = (for_scheduler(pod, SCHEDULER_NAMES[s]) for s in (GPUSCHED, UPSTREAM))
            assert (ours["spec"].pop("schedulerName"), theirs["spec"].pop("schedulerName")) == (
                "gpusched",
                "default-scheduler",
            )
            assert ours == theirs
    objects = zone_rack_training().groups
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("Workload", "train"),
        ("CompositePodGroup", "train-zone"),
        ("PodGroup", "train-workers"),
        ("PodGroup", "train-driver"),
    ]
    assert objects[2]["spec"] == {
        "workloadRef": {"workloadName": "train", "templateName": "workers"},
        "schedulingPolicy": {"gang": {"minCount": 8}},
        "schedulingConstraints": {"topology": [{"key": RACK}]},
        "parentCompositePodGroupName": "train-zone",
    }
    assert objects[1]["spec"]["schedulingConstraints"] == {"topology": [{"key": ZONE}]}


def test_the_zone_rack_workload_lands_in_zone_a_with_both_schedulers(halves: Halves) -> None:
    """Both keep the workers in one rack of zone-a and the driver in zone-a, and write
    `PodGroupInitiallyScheduled=True` on both PodGroups. What kube-scheduler does not do: pick
    the GPUs (it counts `nvidia.com/gpu`; the device plugin chooses, NVLink and NUMA unseen) or
    report on the CompositePodGroup. gpusched puts the driver in its workers' rack; nothing in
    these objects asks kube-scheduler to, so only zone-a is asserted for its driver."""
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
            for group in ("train-workers", "train-driver"):
                cond = run.wait_group_condition(group, "ml", status="True")
                assert cond["reason"] == "Scheduled", cond
            pods = run.pods()
            if run.upstream:
                assert not any(
                    GPUS in (pods[k]["metadata"].get("annotations") or {}) for k in placed
                )
                assert run.group_condition("train-zone", "ml", composite=True) == {}
            else:
                assert run.domains(driver) == run.domains(workers) == {"zone-a/rack-1"}
                for key in workers:
                    gpus = pods[key]["metadata"]["annotations"][GPUS].split(",")
                    assert len(gpus) == 2, dump(pods[key]["metadata"])
                assert_no_gpu_shared(run.api)
                run.wait_group_condition("train-zone", "ml", status="True", composite=True)


def test_a_gang_that_fits_only_in_rack_2_lands_there_with_both_schedulers(halves: Halves) -> None:
    """The same: all 4 in rack-2, `PodGroupInitiallyScheduled=True`/`Scheduled` (gpusched's
    message names the rack; kube-scheduler's condition says nothing of where)."""
    story = rack_2_only()
    for scheduler in (GPUSCHED, UPSTREAM):
        with halves(story, scheduler) as run:
            run.submit()
            run.wait_bound()
            assert run.domains(story.keys()) == {"zone-a/rack-2"}, run.summary()
            says = "" if run.upstream else "rack-2"
            cond = run.wait_group_condition("w", status="True", says=says)
            assert cond["reason"] == "Scheduled", cond


def fits_nowhere() -> Story:
    #        zone-a
    #    rack-1     rack-2        every node: 6 of 8 GPUs busy; 4 pods × 4 GPUs fit nowhere
    #   a1-1 a1-2  a2-1 a2-2
    return Story(
        "gang that fits nowhere (4 × 4 GPUs), then rack-1 is freed",
        nodes=racks({"zone-a": {"rack-1": 2, "rack-2": 2}}),
        running=[blocker(n, 6) for n in ("a1-1", "a1-2", "a2-1", "a2-2")],
        groups=[upstream_pod_group("big", 4)],
        pods=[member(f"big-{i}", 4, "big") for i in range(4)],
    )


def test_a_gang_that_fits_nowhere_binds_nothing_until_room_is_freed(halves: Halves) -> None:
    """Both bind nothing and write `PodGroupInitiallyScheduled=False`/`Unschedulable`;
    gpusched's message says why each rack failed. Once rack-1 is freed both bind the whole
    gang there (kube-scheduler after its backoff, gpusched on the freed capacity)."""
    story = fits_nowhere()
    for scheduler in (GPUSCHED, UPSTREAM):
        with halves(story, scheduler) as run:
            run.submit()
            says = "" if run.upstream else "zone-a/rack-2"
            cond = run.wait_group_condition("big", status="False", says=says)
            assert cond["reason"] == "Unschedulable", cond
            if not run.upstream:
                assert "zone-a/rack-1" in cond["message"], cond
            assert run.bound() == {}, run.summary()
            run.api.delete("pods", "blocker-a1-1", "default")
            run.api.delete("pods", "blocker-a1-2", "default")
            run.started = time.monotonic()
            run.note = "timed from freeing rack-1"
            run.wait_bound()
            assert run.domains(story.keys()) == {"zone-a/rack-1"}, run.summary()
            run.wait_group_condition("big", status="True")


def one_rack_gang() -> Story:
    #        zone-a
    #    rack-1     rack-2        the gang (4 × 4 GPUs) fills one rack; the other stays empty
    #   a1-1 a1-2  a2-1 a2-2
    return Story(
        "re-created gang member (4 × 4 GPUs)",
        nodes=racks({"zone-a": {"rack-1": 2, "rack-2": 2}}),
        groups=[upstream_pod_group("w", 4)],
        pods=[member(f"w-{i}", 4, "w") for i in range(4)],
    )


def test_a_recreated_member_returns_to_its_gangs_rack_or_waits_there(halves: Halves) -> None:
    """Both send a re-created member back to its gang's rack, and keep one whose place was
    taken waiting there though the other rack is empty."""
    story = one_rack_gang()
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
            message = run.wait_unschedulable("default/w-1")
            if run.upstream:
                # The domain of the gang's scheduled pods is required: it tries only that
                # rack's 2 nodes.
                assert message.startswith("0/2 nodes are available"), message
                assert "Insufficient nvidia.com/gpu" in message, message
            else:
                assert rack.split("/")[1] in message, message
            assert run.node_of("default/w-1") is None, run.summary()
            run.note += "; w-1 re-created with its node taken waits for that rack"


def _recreate(run: Run, name: str) -> float:
    """Deletes pod `name` of gang w, waits until it is gone, creates it again; returns when."""
    run.api.delete("pods", name, "default")
    wait_for(lambda: f"default/{name}" not in run.pods(), message=f"{name} gone")
    since = time.monotonic()
    run.create_pod(member(name, 4, "w"))
    return since


def basic_rack_group() -> Story:
    #        zone-a
    #    rack-1  rack-2          one 8-GPU node a rack; a basic group of 3 pods × 4 GPUs,
    #    a1-1    a2-1            topology rack: no all-or-nothing
    return Story(
        "basic policy with a rack constraint (3 × 4 GPUs, room for 2 a rack)",
        nodes=racks({"zone-a": {"rack-1": 1, "rack-2": 1}}),
        groups=[upstream_pod_group("b", 1, basic=True)],
        pods=[member(f"b-{i}", 4, "b") for i in range(3)],
    )


def test_basic_policy_binds_what_fits_and_leaves_the_rest_pending(halves: Halves) -> None:
    """Basic is not all-or-nothing, but the rack constraint holds for the whole group: both put
    two pods in one rack and keep the third waiting for room there, though the other rack is
    empty."""
    story = basic_rack_group()
    for scheduler in (GPUSCHED, UPSTREAM):
        with halves(story, scheduler) as run:
            run.submit()
            wait_for(lambda: len(run.bound()) >= 2, timeout=30, message=run.summary)
            run.seconds = time.monotonic() - run.started
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


PARTS = [f"part-{p}" for p in range(4)]


def two_level() -> Story:
    #                zone-a                                zone-b
    #   rack-1  rack-2  rack-3  rack-4        rack-1  rack-2  rack-3  rack-4
    #   4 nodes each (a1-1 … a4-4), a1-1 has 1 GPU busy    4 nodes each, empty
    # A zone CompositePodGroup (minGroupCount 4) of 4 rack PodGroups × 16 pods × 2 GPUs: each
    # PodGroup fills a rack (32 GPUs), the gang fills a zone, and zone-a lacks one GPU.
    layout = {z: {f"rack-{r}": 4 for r in range(1, 5)} for z in ("zone-a", "zone-b")}
    workload = {
        "apiVersion": WORKLOAD_API,
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
                        for part in PARTS
                    ],
                }
            ]
        },
    }
    return Story(
        "2-level gang: zone of 4 rack gangs, 64 pods × 2 GPUs",
        nodes=racks(layout),
        running=[blocker("a1-1", 1)],
        groups=workload_objects(workload),
        pods=[member(f"{part}-{i}", 2, f"big-{part}") for part in PARTS for i in range(16)],
    )


def test_a_two_level_gang_of_64_pods_fills_the_one_zone_that_holds_it(halves: Halves) -> None:
    """Both fill zone-b, one rack per part, and write `PodGroupInitiallyScheduled=True` on the
    4 PodGroups; only gpusched writes `CompositePodGroupInitiallyScheduled` on the zone group
    (kube-scheduler 1.37 reports on PodGroups only)."""
    story = two_level()
    for scheduler in (GPUSCHED, UPSTREAM):
        with halves(story, scheduler) as run:
            run.submit()
            run.wait_bound(timeout=120)
            assert run.domains(story.keys(), ZONE) == {"zone-b"}, run.summary()
            part_racks = [run.domains(story.keys(part)) for part in PARTS]
            assert all(len(r) == 1 for r in part_racks), run.summary()
            assert len(set().union(*part_racks)) == 4, run.summary()
            for part in PARTS:
                cond = run.wait_group_condition(f"big-{part}", status="True")
                assert cond["reason"] == "Scheduled", cond
            if run.upstream:
                assert run.group_condition("big-zone", composite=True) == {}
            else:
                zone = run.wait_group_condition(
                    "big-zone", status="True", says="zone-b", composite=True
                )
                assert zone["reason"] == "Scheduled", zone
                assert_no_gpu_shared(run.api)

"""The Helm chart: lints strictly, renders valid manifests, grants exactly what the operator
calls, mirrors `SchedulerConfig` key for key, and refuses values it does not know."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gpusched.api.config import SchedulerConfig, load_config
from gpusched.cli import _parser
from testing.helm import CHART, ROOT, find, helm, render, template_args
from tests.chart.values_schema import VALUES_SCHEMA, config_schema

KUBERNETES_VERSION = "1.30"
GROUP = "scheduling.gpusched.io"
EVERYTHING_ON = (
    "agent.enabled=true",
    "metrics.serviceMonitor.enabled=true",
    "dashboards.enabled=true",
)


def defaults() -> dict[str, Any]:
    return SchedulerConfig().model_dump(mode="json", by_alias=True)


# --- lint and render --------------------------------------------------------------------------


@pytest.mark.parametrize("sets", [(), EVERYTHING_ON], ids=["defaults", "everything on"])
def test_helm_lint_strict_passes(sets: tuple[str, ...]) -> None:
    args = ["lint", "--strict", str(CHART)]
    for item in sets:
        args += ["--set", item]
    result = helm(*args)
    assert result.returncode == 0, result.stdout + result.stderr


def _kinds(docs: list[dict[str, Any]]) -> list[str]:
    return sorted(f"{d['kind']}/{d['metadata']['name']}" for d in docs)


def test_defaults_render_the_operator_and_nothing_optional() -> None:
    assert _kinds(render()) == [
        "ClusterRole/gpusched",
        "ClusterRoleBinding/gpusched",
        "ConfigMap/gpusched-config",
        "Deployment/gpusched",
        "PodDisruptionBudget/gpusched",
        "Role/gpusched-leader-election",
        "RoleBinding/gpusched-leader-election",
        "Service/gpusched-metrics",
        "ServiceAccount/gpusched",
    ]


def test_optional_parts_render_when_enabled() -> None:
    extra = set(_kinds(render(*EVERYTHING_ON))) - set(_kinds(render()))
    assert extra == {
        "ClusterRole/gpusched-agent",
        "ClusterRoleBinding/gpusched-agent",
        "ConfigMap/gpusched-dashboards",
        "DaemonSet/gpusched-agent",
        "ServiceAccount/gpusched-agent",
        "ServiceMonitor/gpusched",
    }


@pytest.mark.parametrize("sets", [(), EVERYTHING_ON], ids=["defaults", "everything on"])
def test_rendered_manifests_are_valid_kubernetes_objects(sets: tuple[str, ...]) -> None:
    """Against Kubernetes' own schemas, strictly (unknown fields are errors). The
    ServiceMonitor's CRD is not Kubernetes', so only its shape is checked."""
    for doc in render(*sets):
        if doc["kind"] == "ServiceMonitor":
            assert doc["apiVersion"] == "monitoring.coreos.com/v1"
            assert doc["spec"]["endpoints"][0]["port"] == "metrics"
            continue
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_every_object_is_labelled_and_namespaced() -> None:
    for doc in render(*EVERYTHING_ON):
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/instance"] == "gpusched", doc["kind"]
        if not doc["kind"].startswith("Cluster"):
            assert doc["metadata"]["namespace"] == "gpusched-system", doc["kind"]


# --- values that are not the chart's ----------------------------------------------------------


@pytest.mark.parametrize(
    ("story", "value", "want"),
    [
        ("an unknown top-level key", "replicas=2", "'replicas' not allowed"),
        ("a typo in a config key", "config.telemetry.temperatureLimitc=70", "temperatureLimitc"),
        ("an unknown config section", "config.scheduler.name=x", "'scheduler' not allowed"),
        ("a NUMA policy that does not exist", "config.numaPolicy=strict", "/config/numaPolicy"),
        ("a ratio above 1", "config.telemetry.minFreeMemoryRatio=1.5", "minFreeMemoryRatio"),
        ("a string for a number", "replicaCount=two", "/replicaCount"),
        ("zero bind concurrency", "config.operator.bindConcurrency=0", "bindConcurrency"),
        ("a typo in the agent's keys", "agent.enable=true", "'enable' not allowed"),
        ("an unknown pull policy", "image.pullPolicy=Sometimes", "/image/pullPolicy"),
    ],
)
def test_helm_template_refuses_values_it_does_not_know(story: str, value: str, want: str) -> None:
    result = helm(*template_args(value))
    assert result.returncode != 0, f"{story}: rendered anyway"
    assert want in result.stderr, result.stderr


def test_values_schema_config_is_the_models_schema() -> None:
    """Regenerate with ``python -m tests.chart.values_schema`` after changing the model."""
    values_schema = json.loads(VALUES_SCHEMA.read_text(encoding="utf-8"))
    assert values_schema["properties"]["config"] == config_schema()


def test_values_schema_is_closed_wherever_it_lists_keys() -> None:
    values_schema = json.loads(VALUES_SCHEMA.read_text(encoding="utf-8"))
    node_at: dict[str, Any] = {}

    def walk(schema: dict[str, Any], path: str) -> None:
        if "properties" in schema:
            node_at[path] = schema
            for name, sub in schema["properties"].items():
                walk(sub, f"{path}.{name}")

    walk(values_schema, "")
    open_ones = [
        p or "<root>" for p, s in node_at.items() if s.get("additionalProperties") is not False
    ]
    assert open_ones == []


# --- the configuration ------------------------------------------------------------------------


def _config_map(docs: list[dict[str, Any]]) -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load(
        find(docs, "ConfigMap", "-config")["data"]["config.yaml"]
    )
    return config


def test_values_yaml_mirrors_the_config_model_and_its_defaults() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    assert values["config"] == defaults()


def test_the_rendered_config_is_the_models_defaults() -> None:
    rendered = _config_map(render())
    assert rendered == defaults()
    load_config(rendered)


def test_settings_reach_the_config_map_unchanged() -> None:
    """Including a large integer, which a YAML-to-float round trip would turn into 1e+18."""
    rendered = _config_map(
        render(
            "config.numaPolicy=single-numa-node",
            "config.telemetry.stale=unusable",
            "config.scoring.tieBreak.seed=1000000000000000000",
        )
    )
    config = load_config(rendered)
    assert (config.numa_policy.value, config.telemetry.stale.value) == (
        "single-numa-node",
        "unusable",
    )
    assert config.scoring.tie_break.seed == 10**18


def _config_lines() -> Iterator[tuple[int, str, str]]:
    """(line number, key, the line above) of every key under ``config:`` in values.yaml."""
    lines = (CHART / "values.yaml").read_text(encoding="utf-8").splitlines()
    start = lines.index("config:")
    for number in range(start + 1, len(lines)):
        line = lines[number]
        if line and not line.startswith(" "):
            return
        match = re.match(r"^\s+([A-Za-z][\w./-]*):", line)
        if match:
            yield number + 1, match.group(1), lines[number - 1]


def test_every_config_setting_is_documented_in_values_yaml() -> None:
    """Each key carries a comment right above it (keys of user maps, such as the resource
    names under binpack.resources, are values, not settings)."""
    undocumented = [
        f"values.yaml:{number}: {key}"
        for number, key, above in _config_lines()
        if not above.strip().startswith("#") and key != "nvidia.com/gpu"
    ]
    assert undocumented == []


# --- the operator's pods ----------------------------------------------------------------------


def _container(docs: list[dict[str, Any]], kind: str = "Deployment") -> dict[str, Any]:
    containers: list[dict[str, Any]] = find(docs, kind)["spec"]["template"]["spec"]["containers"]
    (container,) = containers
    return container


def test_two_replicas_one_lease_and_a_disruption_budget() -> None:
    docs = render()
    assert find(docs, "Deployment")["spec"]["replicas"] == 2
    assert find(docs, "PodDisruptionBudget")["spec"]["minAvailable"] == 1
    env = {e["name"]: e.get("valueFrom", {}) for e in _container(docs)["env"]}
    assert env["POD_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}


def test_the_command_line_is_one_gpusched_accepts() -> None:
    container = _container(render())
    assert container["command"] == ["gpusched"]
    args = _parser().parse_args(container["args"])
    assert (args.config.as_posix(), args.metrics_address) == (
        "/etc/gpusched/config.yaml",
        "0.0.0.0:9402",
    )
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert mounts["/etc/gpusched"] == "config"
    assert args.liveness == "http://0.0.0.0:8080/healthz"


def test_liveness_is_kopfs_endpoint_and_readiness_the_watches() -> None:
    container = _container(render())
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 9402, "healthz": 8080}
    for probe in ("startupProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "healthz"}, probe
    # A watch that is down makes the pod unready, not restarted (gpusched.k8s.watch).
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}


@pytest.mark.parametrize(
    ("kind", "more", "root"),
    [
        ("Deployment", (), False),
        # The kubelet's PodResources socket is root's alone: the agent reading it runs as root.
        ("DaemonSet", (), True),
        ("DaemonSet", ("agent.podResourcesSocket=",), False),
    ],
)
def test_pods_run_read_only_without_capabilities_and_root_only_for_the_kubelet_socket(
    kind: str, more: tuple[str, ...], root: bool
) -> None:
    docs = render(*EVERYTHING_ON, *more)
    pod = find(docs, kind)["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is not root
    assert (pod["securityContext"]["runAsUser"] == 0) is root
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    container = _container(docs, kind)
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
    }
    assert container["resources"]["requests"]
    assert container["resources"]["limits"]["memory"]


def test_a_config_change_rolls_the_pods() -> None:
    def checksum(*sets: str) -> str:
        annotations = find(render(*sets), "Deployment")["spec"]["template"]["metadata"]
        return str(annotations["annotations"]["checksum/config"])

    assert checksum() != checksum("config.backtrackingBudget=0")


def test_the_metrics_service_selects_the_operator() -> None:
    docs = render()
    service = find(docs, "Service", "-metrics")
    labels = find(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 9402, "targetPort": "metrics", "protocol": "TCP"}
    ]


# --- RBAC: exactly what the code calls ---------------------------------------------------------

OPERATOR_GRANTS = {
    # The operator's watches and the cluster state: every pod and node (handlers/events.py), a pod
    # re-read before its bind (KubeClusterApi.get_pod). test_rbac_calls.py derives the same
    # from the code; this table is what a reviewer reads.
    ("", "pods"): {"get", "list", "watch", "patch", "delete"},
    ("", "nodes"): {"list", "watch"},
    # Preemption (KubeClusterApi.annotate_pod, evict, delete_pod, patch_pod_status): victims
    # annotated, then evicted, or marked DisruptionTarget and deleted; the preemptor's
    # nominatedNodeName. PriorityClasses and PodDisruptionBudgets watched.
    ("", "pods/eviction"): {"create"},
    ("", "pods/status"): {"patch"},
    ("scheduling.k8s.io", "priorityclasses"): {"list", "watch"},
    ("policy", "poddisruptionbudgets"): {"list", "watch"},
    # Other projects' groups (handlers/foreign.py), their status in their own fields.
    **{
        (api_group, resource): {"list", "watch"}
        for api_group, resource in (
            ("scheduling.k8s.io", "podgroups"),
            ("scheduling.k8s.io", "compositepodgroups"),
            ("scheduling.x-k8s.io", "podgroups"),
        )
    },
    # Owners of pods, for ownerGroups (handlers/owners.py): a LeaderWorkerSet's StatefulSets,
    # and Namespaces for their owner-groups label.
    **{
        (api_group, resource): {"list", "watch"}
        for api_group, resource in (
            ("apps", "statefulsets"),
            ("", "namespaces"),
            ("jobset.x-k8s.io", "jobsets"),
            ("leaderworkerset.x-k8s.io", "leaderworkersets"),
            ("kubeflow.org", "pytorchjobs"),
            ("kubeflow.org", "mpijobs"),
            ("ray.io", "rayclusters"),
        )
    },
    # The NVIDIA DRA driver's ComputeDomains (handlers/dra.py): a channel claim's namespace.
    ("resource.nvidia.com", "computedomains"): {"list", "watch"},
    # Volcano's PodGroup has no status subresource: patched whole.
    ("scheduling.volcano.sh", "podgroups"): {"list", "watch", "patch"},
    **{
        (api_group, resource): {"patch"}
        for api_group, resource in (
            ("scheduling.k8s.io", "podgroups/status"),
            ("scheduling.k8s.io", "compositepodgroups/status"),
            ("scheduling.x-k8s.io", "podgroups/status"),
        )
    },
    # KubeClusterApi.bind: POST pods/{name}/binding.
    ("", "pods/binding"): {"create"},
    # KubeClusterApi.create_event / patch_event: aggregated Scheduled / FailedScheduling.
    ("", "events"): {"create", "patch"},
    # Watched; PodGroups and CompositePodGroups created from Workload templates.
    (GROUP, "podgroups"): {"list", "watch", "create"},
    (GROUP, "compositepodgroups"): {"list", "watch", "create"},
    (GROUP, "workloads"): {"list", "watch"},
    # KubeClusterApi.patch_status: merge patches of the status subresource.
    (GROUP, "podgroups/status"): {"patch"},
    (GROUP, "compositepodgroups/status"): {"patch"},
    (GROUP, "workloads/status"): {"patch"},
    # ownerReferences with blockOwnerDeletion on what a Workload creates.
    (GROUP, "workloads/finalizers"): {"update"},
    # DRA: devices and classes watched; claims allocated (KubeClaimApi) and watched, created
    # for extended resources and deleted when that attempt fails.
    # Jobs: owners of pods for ownerGroups (listed, watched), and a preempted pod's Job, read to
    # warn when its podFailurePolicy would count the preemption.
    ("batch", "jobs"): {"get", "list", "watch"},
    ("resource.k8s.io", "resourceslices"): {"list", "watch"},
    ("resource.k8s.io", "deviceclasses"): {"list", "watch"},
    ("resource.k8s.io", "resourceclaims"): {"get", "list", "watch", "create", "update", "delete"},
    ("resource.k8s.io", "resourceclaims/status"): {"update"},
    # Checked by the API server before a status update may change allocation or reservedFor.
    ("resource.k8s.io", "resourceclaims/binding"): {"update"},
}
LEASE_GRANTS = {
    # LeaderElector: create the Lease once, then read and replace it (PUT) by name.
    ("coordination.k8s.io", "leases", ""): {"create"},
    ("coordination.k8s.io", "leases", "gpusched"): {"get", "update"},
}
AGENT_GRANTS = {("", "nodes"): {"get", "patch"}}


def _grants(role: dict[str, Any], by_name: bool = False) -> dict[tuple[str, ...], set[str]]:
    grants: dict[tuple[str, ...], set[str]] = {}
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], rule
        names = rule.get("resourceNames", [""])
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for name in names:
                    key = (group, resource, name) if by_name else (group, resource)
                    grants.setdefault(key, set()).update(rule["verbs"])
    return grants


def test_the_operators_cluster_role_is_exactly_what_it_calls() -> None:
    assert _grants(find(render(), "ClusterRole")) == OPERATOR_GRANTS


def test_the_lease_is_granted_by_name_in_one_namespace() -> None:
    docs = render()
    role = find(docs, "Role", "-leader-election")
    assert role["metadata"]["namespace"] == "gpusched-system"
    assert _grants(role, by_name=True) == LEASE_GRANTS
    binding = find(docs, "RoleBinding", "-leader-election")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "gpusched", "namespace": "gpusched-system"}
    ]


def test_the_lease_role_follows_the_configured_lease() -> None:
    docs = render(
        "config.operator.leaderElection.leaseNamespace=kube-system",
        "config.operator.leaderElection.leaseName=gpu-leader",
    )
    role = find(docs, "Role", "-leader-election")
    assert role["metadata"]["namespace"] == "kube-system"
    assert ("coordination.k8s.io", "leases", "gpu-leader") in _grants(role, by_name=True)


@pytest.mark.parametrize("replicas", [None, "2", "3"], ids=["default replicas", "2", "3"])
def test_two_replicas_without_leader_election_are_refused_with_a_message(
    replicas: str | None,
) -> None:
    """Every replica of an operator without leader election schedules: two schedulers."""
    sets = ["config.operator.leaderElection.enabled=false"]
    if replicas is not None:
        sets.append(f"replicaCount={replicas}")
    result = helm(*template_args(*sets))
    assert result.returncode != 0, "rendered two active schedulers"
    assert "config.operator.leaderElection.enabled is false" in result.stderr, result.stderr
    assert "Set replicaCount=1" in result.stderr, result.stderr


def test_without_leader_election_no_lease_is_granted() -> None:
    docs = render("config.operator.leaderElection.enabled=false", "replicaCount=1")
    assert [d for d in docs if d["kind"] in ("Role", "RoleBinding")] == []


def test_the_agent_may_only_read_and_patch_nodes() -> None:
    docs = render("agent.enabled=true")
    assert _grants(find(docs, "ClusterRole", "-agent")) == AGENT_GRANTS
    daemonset = find(docs, "DaemonSet", "-agent")
    assert daemonset["spec"]["template"]["spec"]["serviceAccountName"] == "gpusched-agent"


# --- the node agent and the dashboards ---------------------------------------------------------


def test_the_agent_runs_on_gpu_nodes_only_and_knows_its_node() -> None:
    docs = render("agent.enabled=true")
    pod = find(docs, "DaemonSet")["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    container = _container(docs, "DaemonSet")
    args = _parser().parse_args(container["args"])
    assert (container["command"], args.interval, args.source) == (["gpusched"], 60.0, "auto")
    env = {e["name"]: e.get("valueFrom") for e in container["env"]}
    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert "nvidia.com/gpu" not in json.dumps(container["resources"]), "must not take a GPU"


def test_the_agent_reads_the_kubelets_pod_resources_socket_read_only() -> None:
    docs = render("agent.enabled=true")
    container = _container(docs, "DaemonSet")
    args = _parser().parse_args(container["args"])
    assert args.pod_resources_socket == "/var/lib/kubelet/pod-resources/kubelet.sock"
    mount = next(m for m in container["volumeMounts"] if m["name"] == "pod-resources")
    assert mount == {
        "name": "pod-resources",
        "mountPath": "/var/lib/kubelet/pod-resources",
        "readOnly": True,
    }
    volumes = find(docs, "DaemonSet")["spec"]["template"]["spec"]["volumes"]
    volume = next(v for v in volumes if v["name"] == "pod-resources")
    assert volume["hostPath"] == {"path": "/var/lib/kubelet/pod-resources", "type": "Directory"}
    off = _container(render("agent.enabled=true", "agent.podResourcesSocket="), "DaemonSet")
    assert _parser().parse_args(off["args"]).pod_resources_socket == ""
    assert all(m["name"] != "pod-resources" for m in off["volumeMounts"])


def test_the_dashboards_config_map_holds_every_dashboard_file() -> None:
    data = find(render("dashboards.enabled=true"), "ConfigMap", "-dashboards").get("data") or {}
    files = sorted(p.name for p in (CHART / "dashboards").glob("*.json"))
    assert sorted(data) == files
    for name, text in data.items():
        assert isinstance(json.loads(text), dict), f"{name} is not a dashboard"


# --- CRDs -------------------------------------------------------------------------------------


def test_the_charts_crds_are_the_top_level_crds() -> None:
    top = {p.name: p.read_bytes() for p in (ROOT / "crds").glob("*.yaml")}
    chart = {p.name: p.read_bytes() for p in (CHART / "crds").glob("*.yaml")}
    assert sorted(chart) == sorted(top)
    differ = [name for name in top if top[name] != chart[name]]
    assert differ == [], f"copy crds/ to charts/gpusched/crds/: {differ} differ"


def test_helm_installs_the_crds() -> None:
    result = helm(*template_args(), "--include-crds")
    assert result.returncode == 0, result.stderr
    crds = [d for d in yaml.safe_load_all(result.stdout) if d and d["kind"].endswith("Definition")]
    assert sorted(d["metadata"]["name"] for d in crds) == [
        f"compositepodgroups.{GROUP}",
        f"podgroups.{GROUP}",
        f"workloads.{GROUP}",
    ]


def test_the_chart_version_files_agree() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    version = re.search(r'^version = "([^"]+)"', pyproject, re.MULTILINE)
    assert version is not None
    assert chart["appVersion"] == version.group(1)

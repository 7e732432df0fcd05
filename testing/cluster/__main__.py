"""`python -m testing.cluster` (`make cluster`): a real control plane for a person to try.

Starts etcd, kube-apiserver and kube-controller-manager on 127.0.0.1 (built on first use), the
fake kubelet, the chart's RBAC, our CRDs and the sample cluster's Nodes, prints the two
kubeconfigs and the commands to try, and runs until Ctrl-C (then removes everything).

kube-controller-manager runs what a user's Job needs: the Job controller (with WorkloadWithJob,
so a Job also gets a Workload and PodGroup, scheduling.k8s.io/v1beta1, from its
`.spec.scheduling`; `--no-workload-jobs` turns that off), the TTL-after-finished and CronJob
controllers, the garbage collector and pod GC. The fake kubelet does not run containers: a pod
stays Pending until it is bound, then Running only when a test says so.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import threading
from pathlib import Path

import yaml

from testing.cluster.cluster import RealCluster
from testing.cluster.controlplane import OPERATOR_NAMESPACE, ROOT, UnavailableError

SAMPLE_NODES = ROOT / "examples" / "clusters" / "sample" / "nodes.yaml"


def _nodes(path: Path) -> list[dict[str, object]]:
    documents = yaml.safe_load_all(path.read_text(encoding="utf-8"))
    return [d for d in documents if d and d.get("kind") == "Node"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testing.cluster", description=__doc__)
    parser.add_argument("--nodes", type=Path, default=SAMPLE_NODES, help="YAML with Node objects")
    parser.add_argument("--workdir", type=Path, default=None, help="default: a temporary folder")
    parser.add_argument(
        "--no-workload-jobs",
        action="store_true",
        help="run the Job controller with WorkloadWithJob off (a Job makes pods only)",
    )
    args = parser.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="gpusched-cluster-"))
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        with RealCluster.running(workdir) as cluster:
            for node in _nodes(args.nodes):
                cluster.admin.create(node)
            cluster.job_controller(workload_api=not args.no_workload_jobs)
            operator = cluster.write_kubeconfig(workdir / "gpusched.kubeconfig")
            admin = cluster.plane.kubeconfig_admin
            print(
                f"control plane at {cluster.url}\n"
                f"  you (cluster admin):     export KUBECONFIG={admin}\n"
                f"  gpusched's identity:     {operator}  (through the fault proxy)\n\n"
                f"  POD_NAMESPACE={OPERATOR_NAMESPACE} gpusched run --kubeconfig {operator}\n"
                f"  kubectl create namespace ml\n"
                f"  kubectl apply -f examples/workloads/01-zone-rack-training/\n"
                f"  kubectl -n ml get gspg\n\n"
                "Ctrl-C stops it and removes everything.",
                flush=True,
            )
            stop.wait()
    except UnavailableError as missing:
        print(f"make cluster: {missing}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())

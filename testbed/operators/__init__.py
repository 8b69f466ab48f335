"""Real training operators as local processes beside a `LocalCluster` (see docs/operators.md).

``build.sh`` compiles each operator from the Go module proxy and copies its project's own CRDs,
webhook manifests and examples next to the binary; `build` runs it and returns a `Build`. An
`Operator` starts one as a child process on 127.0.0.1 against the cluster's admin kubeconfig::

    with LocalCluster(bin_dir, work_dir) as cluster:
        cluster.create_fake_nodes(ZONES)
        with start(cluster, "trainingoperator", work_dir / "training-operator") as operator:
            cluster.apply(pytorchjob)        # the operator creates the pods

Leader election is off where the operator allows it, metrics and health probes listen on free
127.0.0.1 ports, and the operator's own admission webhooks are served by the process itself:
the runner writes the serving certificate (and, for the operators that run a cert rotator, the
cert Secret it expects) and registers the project's own webhook configurations, rendered from
its ``config/webhook`` kustomization, with ``clientConfig.url`` pointing at
``https://127.0.0.1:<port>``. `Operator.stop` deletes those configurations again, so a stopped
operator leaves no webhook behind that would refuse its kind with ``failurePolicy: Fail``.

Nothing here imports podium itself: this harness proves what the real controllers create.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import ctypes
import datetime
import fcntl
import ipaddress
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, Self

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ..cluster import ApiError, LocalCluster

__all__ = [
    "BUILD_SCRIPT",
    "NAMES",
    "OPERATORS",
    "Build",
    "Operator",
    "OperatorError",
    "OperatorPool",
    "WebhookCerts",
    "build",
    "controlplane_bin_dir",
    "fresh_namespace",
    "issue_webhook_certs",
    "render_webhook_configurations",
    "start",
]

HOST = "127.0.0.1"
HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = HERE / "build.sh"
#: Every operator build.sh knows, in the order it builds them without arguments.
NAMES: tuple[str, ...] = (
    "trainingoperator",
    "mpioperator",
    "jobset",
    "trainer",
    "lws",
    "kuberay",
    "volcano",
)
_LOG_TAIL_LINES = 40
_PR_SET_PDEATHSIG = 1
# Longer than the 90-day look-ahead of open-policy-agent/cert-controller's rotator, which
# replaces any CA or serving cert that expires sooner (and its own would lack 127.0.0.1).
_CA_LIFETIME = datetime.timedelta(days=3650)
_LEAF_LIFETIME = datetime.timedelta(days=1825)
_WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
_WEBHOOK_API = "/apis/admissionregistration.k8s.io/v1"


class OperatorError(RuntimeError):
    """An operator failed to build, to start, or exited."""


# --- builds -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Build:
    """What ``build.sh NAME`` left in its output directory."""

    name: str
    module: str
    version: str
    directory: Path
    binary: Path
    build_seconds: int

    @classmethod
    def load(cls, directory: Path | str) -> Build:
        directory = Path(directory)
        meta = json.loads((directory / "operator.json").read_text())
        return cls(
            name=meta["name"],
            module=meta["module"],
            version=meta["version"],
            directory=directory,
            binary=directory / meta["binary"],
            build_seconds=int(meta.get("build_seconds", 0)),
        )

    @property
    def crd_dir(self) -> Path:
        return self.directory / "crds"

    @property
    def webhooks_dir(self) -> Path:
        return self.directory / "webhooks"

    @property
    def examples_dir(self) -> Path:
        return self.directory / "examples"

    def crd_files(self) -> list[Path]:
        return sorted(self.crd_dir.glob("*.yaml"))

    def example(self, relative: str) -> list[dict[str, Any]]:
        """The YAML documents of one file under ``examples/`` (its path in the repository)."""
        text = (self.examples_dir / relative).read_text()
        return [d for d in yaml.safe_load_all(text) if d]


def build(name: str) -> Build:
    """Build (or find cached) one operator with build.sh and return what it made.

    Progress goes to this process's stderr; raises `OperatorError` when the build fails.
    """
    if name not in NAMES:
        raise OperatorError(f"unknown operator {name!r}; known: {', '.join(NAMES)}")
    result = subprocess.run(
        ["bash", str(BUILD_SCRIPT), name], stdout=subprocess.PIPE, text=True, check=False
    )
    if result.returncode != 0:
        raise OperatorError(f"build.sh {name} exited with {result.returncode}")
    return Build.load(result.stdout.strip().splitlines()[-1])


# --- certificates -----------------------------------------------------------------------------


def _pem_key(key: rsa.RSAPrivateKey) -> bytes:
    # PKCS#1: cert-controller's rotator reads the CA key with x509.ParsePKCS1PrivateKey.
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


@dataclass(frozen=True)
class WebhookCerts:
    """A CA and a serving certificate it signed, PEM-encoded."""

    ca_cert: bytes
    ca_key: bytes
    cert: bytes
    key: bytes

    @property
    def ca_bundle(self) -> str:
        """The CA as ``clientConfig.caBundle`` wants it (base64 PEM)."""
        return base64.b64encode(self.ca_cert).decode()

    def write(self, directory: Path, cert_name: str = "tls.crt", key_name: str = "tls.key") -> Path:
        """Write the serving pair (and ``ca.crt``) into ``directory`` as a mounted Secret would."""
        directory.mkdir(parents=True, exist_ok=True)
        (directory / cert_name).write_bytes(self.cert)
        (directory / key_name).write_bytes(self.key)
        (directory / key_name).chmod(0o600)
        (directory / "ca.crt").write_bytes(self.ca_cert)
        return directory

    def secret(self, name: str, namespace: str) -> dict[str, Any]:
        """The cert Secret in the layout of open-policy-agent/cert-controller's rotator."""
        data = {
            "ca.crt": self.ca_cert,
            "ca.key": self.ca_key,
            "tls.crt": self.cert,
            "tls.key": self.key,
        }
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace},
            "type": "Opaque",
            "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
        }


def issue_webhook_certs(ca_name: str, dns_names: Sequence[str]) -> WebhookCerts:
    """A CA named ``ca_name`` and a serving cert for ``dns_names``, localhost and 127.0.0.1.

    The CA carries its own name as a DNS SAN and both outlive the rotator's 90-day look-ahead,
    so cert-controller's rotator (which checks exactly that) keeps them instead of making its
    own, whose serving cert would not name 127.0.0.1.
    """
    now = datetime.datetime.now(datetime.UTC)
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, ca_name),
            x509.NameAttribute(NameOID.COMMON_NAME, ca_name),
        ]
    )
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_subject)
        .issuer_name(ca_subject)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + _CA_LIFETIME)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_encipherment=True,
                content_commitment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(ca_name)]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    names = [*dns_names, "localhost"]
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in names]
    sans.append(x509.IPAddress(ipaddress.ip_address(HOST)))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(ca_subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + _LEAF_LIFETIME)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return WebhookCerts(
        ca_cert=ca_cert.public_bytes(serialization.Encoding.PEM),
        ca_key=_pem_key(ca_key),
        cert=cert.public_bytes(serialization.Encoding.PEM),
        key=_pem_key(key),
    )


# --- webhook configurations -------------------------------------------------------------------


def _pointer(path: str) -> list[str]:
    return [p.replace("~1", "/").replace("~0", "~") for p in path.split("/")[1:]]


def _apply_json_patch(document: Any, operations: Sequence[Mapping[str, Any]]) -> Any:
    """RFC 6902 add/replace/remove: the operations kustomize patches of webhooks use."""
    for operation in operations:
        op = operation["op"]
        *parents, last = _pointer(operation["path"])
        target = document
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        value = copy.deepcopy(operation.get("value"))
        if isinstance(target, list):
            index = len(target) if last == "-" else int(last)
            if op == "add":
                target.insert(index, value)
            elif op == "replace":
                target[index] = value
            elif op == "remove":
                del target[index]
            else:
                raise OperatorError(f"unsupported JSON patch op {op!r}")
        elif op in ("add", "replace"):
            target[last] = value
        elif op == "remove":
            del target[last]
        else:
            raise OperatorError(f"unsupported JSON patch op {op!r}")
    return document


def _matches(document: Mapping[str, Any], target: Mapping[str, Any]) -> bool:
    if "kind" in target and document.get("kind") != target["kind"]:
        return False
    return "name" not in target or document["metadata"]["name"] == target["name"]


def render_webhook_configurations(
    kustomize_dir: Path,
    *,
    url: str,
    ca_bundle: str,
    name_prefix: str = "",
) -> list[dict[str, Any]]:
    """The webhook configurations of a project's webhook kustomization, pointed at ``url``.

    Reads the ``resources`` of ``kustomize_dir/kustomization.yaml``, keeps the
    Mutating/ValidatingWebhookConfigurations, applies its JSON6902 ``patches`` (from a file or
    inline) to their targets, prefixes the names (``name_prefix`` stands for the enclosing
    overlay's ``namePrefix``), and turns every ``clientConfig.service`` into
    ``url + service.path`` with ``caBundle``.
    """
    kustomization = yaml.safe_load((kustomize_dir / "kustomization.yaml").read_text())
    documents: list[dict[str, Any]] = []
    for resource in kustomization.get("resources", []):
        for document in yaml.safe_load_all((kustomize_dir / resource).read_text()):
            if document and document.get("kind") in _WEBHOOK_KINDS:
                documents.append(document)
    for patch in kustomization.get("patches", []):
        if "path" in patch:
            operations = yaml.safe_load((kustomize_dir / patch["path"]).read_text())
        else:
            operations = yaml.safe_load(patch["patch"])
        for document in documents:
            if _matches(document, patch.get("target", {})):
                _apply_json_patch(document, operations)
    prefix = name_prefix + kustomization.get("namePrefix", "")
    for document in documents:
        document["metadata"] = {"name": prefix + document["metadata"]["name"]}
        for hook in document.get("webhooks", []):
            path = hook.get("clientConfig", {}).get("service", {}).get("path", "")
            hook["clientConfig"] = {"url": f"{url}{path}", "caBundle": ca_bundle}
    return documents


# --- processes --------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Go's listeners do
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return False
        return True


def _die_with_parent() -> None:
    """Runs in the child before exec: get SIGKILL when the parent dies, even by SIGKILL."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


@contextlib.contextmanager
def _machine_lock(name: str, timeout: float) -> Iterator[None]:
    """An exclusive lock shared by every process on this machine (for fixed ports and paths)."""
    path = Path("/tmp") / f"podium-operators-{name}.lock"
    with path.open("a") as handle:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise OperatorError(f"{path} is held by another process") from None
                time.sleep(0.5)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class Operator:
    """One operator process against a `LocalCluster`; subclasses say how to run each one.

    Ports and paths are known after construction; `start` prepares the cluster (namespace, CRDs,
    cert Secret, webhook configurations), starts the process and waits until its health probe
    answers 200; `stop` ends it and deletes what `start` registered that would outlive it.
    """

    #: The name build.sh knows the operator by.
    name: ClassVar[str]
    #: The namespace the operator runs in (leases, cert Secret, events).
    namespace: ClassVar[str]
    #: The readiness path on the health port.
    health_path: ClassVar[str] = "/readyz"

    def __init__(self, cluster: LocalCluster, build: Build, work_dir: Path | str) -> None:
        if build.name != self.name:
            raise OperatorError(f"{type(self).__name__} cannot run a {build.name} build")
        self.cluster = cluster
        self.build = build
        self.work_dir = Path(work_dir).resolve()
        self.log_file = self.work_dir / f"{self.name}.log"
        # The Go runtime's temp dir: controller-runtime's default webhook cert dir lies under it.
        self.tmp_dir = self.work_dir / "tmp"
        self.cert_dir = self.work_dir / "certs"
        self.metrics_port = free_port()
        self.health_port = free_port()
        self.webhook_port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.certs: WebhookCerts | None = None
        self.registered_webhooks: list[dict[str, Any]] = []
        self._stack = contextlib.ExitStack()

    # --- what subclasses define -----------------------------------------------------------

    def args(self) -> list[str]:
        """Command-line arguments after the binary."""
        raise NotImplementedError

    def env(self) -> dict[str, str]:
        return {}

    def crd_files(self) -> list[Path]:
        """The CRD files `start` installs: by default all the project ships."""
        return self.build.crd_files()

    def webhook_configurations(self) -> list[dict[str, Any]]:
        """The webhook configurations to register, pointed at this process."""
        return []

    def prepare(self) -> None:
        """Cluster objects and files the process needs before it starts."""

    @property
    def webhook_url(self) -> str:
        return f"https://{HOST}:{self.webhook_port}"

    @property
    def health_url(self) -> str:
        return f"http://{HOST}:{self.health_port}{self.health_path}"

    # --- lifecycle ------------------------------------------------------------------------

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

    def start(self, *, timeout: float = 180.0, install_crds: bool = True) -> None:
        """Install the CRDs, prepare, start the process, register webhooks, wait until ready."""
        if self.process is not None:
            raise OperatorError(f"{self.name} already started")
        for directory in (self.work_dir, self.tmp_dir, self.cert_dir):
            directory.mkdir(parents=True, exist_ok=True)
        try:
            if install_crds:
                crds = self.crd_files()
                if not crds:
                    raise OperatorError(f"no CRD files in {self.build.crd_dir}")
                self.cluster.install_crds(crds)
            self.ensure_namespace(self.namespace)
            self.prepare()
            self._spawn()
            self._register_webhooks()
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise

    def stop(self, timeout: float = 15.0) -> None:
        """Delete the registered webhook configurations, then SIGTERM (and SIGKILL) the process."""
        for config in reversed(self.registered_webhooks):
            resource = config["kind"].lower() + "s"
            with contextlib.suppress(ApiError, OSError):
                self.cluster.request(
                    "DELETE", f"{_WEBHOOK_API}/{resource}/{config['metadata']['name']}"
                )
        self.registered_webhooks = []
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        self._stack.close()

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        try:
            text = self.log_file.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    # --- helpers for subclasses -----------------------------------------------------------

    def ensure_namespace(self, name: str) -> None:
        try:
            self.cluster.create_namespace(name)
        except ApiError as error:
            if error.status != 409:
                raise

    def issue_certs(self, ca_name: str, dns_names: Sequence[str]) -> WebhookCerts:
        self.certs = issue_webhook_certs(ca_name, dns_names)
        self.certs.write(self.cert_dir)
        return self.certs

    def default_webhook_cert_dir(self) -> Path:
        """controller-runtime's default webhook cert dir under this process's TMPDIR."""
        return self.tmp_dir / "k8s-webhook-server" / "serving-certs"

    def config_file(self, name: str, content: Mapping[str, Any]) -> Path:
        path = self.work_dir / name
        path.write_text(yaml.safe_dump(dict(content), sort_keys=False))
        return path

    # --- internals ------------------------------------------------------------------------

    def _spawn(self) -> None:
        env = {
            **os.environ,
            "KUBECONFIG": str(self.cluster.kubeconfig),
            "TMPDIR": str(self.tmp_dir),
            "NO_PROXY": f"{HOST},localhost",
            "no_proxy": f"{HOST},localhost",
            **self.env(),
        }
        for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
            env.pop(var, None)
        args = [str(self.build.binary), *self.args()]
        (self.work_dir / "command.txt").write_text(" ".join(args) + "\n")
        with self.log_file.open("ab") as log:
            self.process = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.work_dir,
                env=env,
                start_new_session=True,
                # Only async-signal-safe work in the child (one prctl call).
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,  # noqa: PLW1509
            )

    def _register_webhooks(self) -> None:
        for config in self.webhook_configurations():
            resource = config["kind"].lower() + "s"
            name = config["metadata"]["name"]
            with contextlib.suppress(ApiError):
                self.cluster.request("DELETE", f"{_WEBHOOK_API}/{resource}/{name}")
            self.cluster.request("POST", f"{_WEBHOOK_API}/{resource}", config)
            self.registered_webhooks.append(config)

    def _failure(self, message: str) -> OperatorError:
        return OperatorError(
            f"{self.name} {self.build.version}: {message}\n"
            f"--- last lines of {self.log_file} ---\n{self.log_tail()}"
        )

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.process is None or self.process.poll() is not None:
                code = None if self.process is None else self.process.returncode
                raise self._failure(f"exited with code {code}")
            try:
                with urllib.request.urlopen(self.health_url, timeout=2) as response:
                    if response.status == 200:
                        return
            except (OSError, urllib.error.URLError):
                pass
            if time.monotonic() > deadline:
                raise self._failure(f"{self.health_url} not ready after {timeout}s")
            time.sleep(0.25)


# --- the operators ----------------------------------------------------------------------------


class TrainingOperator(Operator):
    """Kubeflow training-operator v1 (``cmd/training-operator.v1``).

    It always runs cert-controller's rotator on the Secret ``training-operator-webhook-cert``
    (namespace ``kubeflow``, or ``$MY_POD_NAMESPACE``) for ``training-operator.kubeflow.svc``,
    injects the CA into ``validator.training-operator.kubeflow.org`` and only reports ready (and
    only starts its controllers) once the rotator sees ``tls.crt`` in the hard-coded
    ``/tmp/k8s-webhook-server/serving-certs``. Its webhook server itself reads
    ``$TMPDIR/k8s-webhook-server/serving-certs`` and listens on every interface (no host flag).
    """

    name = "trainingoperator"
    namespace = "kubeflow"
    secret_name = "training-operator-webhook-cert"
    #: The schemes to run. MPIJob v1 is left out: its CRD has the name of mpi-operator's v2beta1.
    schemes: ClassVar[tuple[str, ...]] = (
        "TFJob",
        "PyTorchJob",
        "XGBoostJob",
        "PaddleJob",
        "JAXJob",
    )
    rotator_cert_dir = Path("/tmp/k8s-webhook-server/serving-certs")

    def crd_files(self) -> list[Path]:
        return [p for p in super().crd_files() if p.name != "kubeflow.org_mpijobs.yaml"]

    def args(self) -> list[str]:
        return [
            f"--metrics-bind-address={HOST}:{self.metrics_port}",
            f"--health-probe-bind-address={HOST}:{self.health_port}",
            f"--webhook-server-port={self.webhook_port}",
            "--leader-elect=false",
            *(f"--enable-scheme={s}" for s in self.schemes),
        ]

    def env(self) -> dict[str, str]:
        return {"MY_POD_NAMESPACE": self.namespace}

    def prepare(self) -> None:
        certs = self.issue_certs(
            "training-operator-ca", [f"training-operator.{self.namespace}.svc"]
        )
        self.cluster.apply(certs.secret(self.secret_name, self.namespace))
        certs.write(self.default_webhook_cert_dir())
        # The rotator only checks that tls.crt exists there; the server never reads it.
        if not (self.rotator_cert_dir / "tls.crt").exists():
            certs.write(self.rotator_cert_dir)

    def webhook_configurations(self) -> list[dict[str, Any]]:
        assert self.certs is not None
        return render_webhook_configurations(
            self.build.webhooks_dir / "manifests/base/webhook",
            url=self.webhook_url,
            ca_bundle=self.certs.ca_bundle,
        )


class MPIOperator(Operator):
    """kubeflow/mpi-operator (MPIJob ``kubeflow.org/v2beta1``); no webhooks.

    Leader election cannot be turned off (the lease lives in ``--lock-namespace``), and the
    health server listens on the hard-coded ``:8080`` on every interface, so only one
    mpi-operator runs per machine: `start` takes a machine-wide lock and waits for the port.
    """

    name = "mpioperator"
    namespace = "mpi-operator"
    health_path = "/healthz"
    health_port_fixed = 8080

    def __init__(self, cluster: LocalCluster, build: Build, work_dir: Path | str) -> None:
        super().__init__(cluster, build, work_dir)
        self.health_port = self.health_port_fixed

    def args(self) -> list[str]:
        return [
            f"--kubeConfig={self.cluster.kubeconfig}",
            f"--lock-namespace={self.namespace}",
            "--monitoring-port=0",
            "--threadiness=2",
        ]

    def prepare(self) -> None:
        self._stack.enter_context(_machine_lock("mpi-operator-8080", timeout=600))
        deadline = time.monotonic() + 60
        while not _port_free(self.health_port_fixed):
            if time.monotonic() > deadline:
                raise OperatorError(f"port {self.health_port_fixed} stays in use")
            time.sleep(0.5)


class _ConfigFileOperator(Operator):
    """controller-runtime managers configured by a ``Configuration`` file (JobSet, LWS, Trainer)
    with their internal cert management off: the runner supplies the serving cert."""

    config_api: ClassVar[str]
    webhook_dir: ClassVar[str]
    webhook_name_prefix: ClassVar[str] = ""
    service_dns: ClassVar[str]

    def configuration(self) -> dict[str, Any]:
        return {
            "apiVersion": self.config_api,
            "kind": "Configuration",
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "webhook": {"port": self.webhook_port, "host": HOST, "certDir": str(self.cert_dir)},
            "metrics": {"bindAddress": f"{HOST}:{self.metrics_port}"},
            "health": {"healthProbeBindAddress": f"{HOST}:{self.health_port}"},
        }

    def args(self) -> list[str]:
        return [f"--config={self.config_file('config.yaml', self.configuration())}"]

    def prepare(self) -> None:
        self.issue_certs(f"{self.name}-ca", [self.service_dns])

    def webhook_configurations(self) -> list[dict[str, Any]]:
        assert self.certs is not None
        return render_webhook_configurations(
            self.build.webhooks_dir / self.webhook_dir,
            url=self.webhook_url,
            ca_bundle=self.certs.ca_bundle,
            name_prefix=self.webhook_name_prefix,
        )


class JobSet(_ConfigFileOperator):
    """kubernetes-sigs/jobset: JobSet webhooks plus its pod webhooks (mutating and validating,
    for pods labelled ``jobset.sigs.k8s.io/jobset-name``)."""

    name = "jobset"
    namespace = "jobset-system"
    config_api = "config.jobset.x-k8s.io/v1alpha1"
    webhook_dir = "config/components/webhook"
    webhook_name_prefix = "jobset-"
    service_dns = "jobset-webhook-service.jobset-system.svc"

    def configuration(self) -> dict[str, Any]:
        config = super().configuration()
        # Metrics are served over TLS; give them the same serving pair.
        config["metrics"]["certDir"] = str(self.cert_dir)
        return config


class LeaderWorkerSet(_ConfigFileOperator):
    """kubernetes-sigs/lws: LWS webhooks plus pod webhooks (for pods labelled
    ``leaderworkerset.sigs.k8s.io/name``; the mutating one injects the LWS_* env)."""

    name = "lws"
    namespace = "lws-system"
    config_api = "config.lws.x-k8s.io/v1alpha1"
    webhook_dir = "config/webhook"
    webhook_name_prefix = "lws-"
    service_dns = "lws-webhook-service.lws-system.svc"


class Trainer(_ConfigFileOperator):
    """Kubeflow Trainer v2 (``cmd/trainer-controller-manager``): TrainJob → JobSet, so the JobSet
    operator must run too. Its webhook cert dir is not configurable: controller-runtime's
    default under ``$TMPDIR``."""

    name = "trainer"
    namespace = "kubeflow-system"
    config_api = "config.trainer.kubeflow.org/v1alpha1"
    webhook_dir = "manifests/base/webhook"
    service_dns = "kubeflow-trainer-controller-manager.kubeflow-system.svc"

    def configuration(self) -> dict[str, Any]:
        return {
            "apiVersion": self.config_api,
            "kind": "Configuration",
            "leaderElection": {"leaderElect": False},
            "certManagement": {"enable": False},
            "webhook": {"port": self.webhook_port, "host": HOST},
            "metrics": {"bindAddress": f"{HOST}:{self.metrics_port}", "secureServing": False},
            "health": {"healthProbeBindAddress": f"{HOST}:{self.health_port}"},
            "statusServer": {"port": free_port()},
        }

    def prepare(self) -> None:
        super().prepare()
        assert self.certs is not None
        self.certs.write(self.default_webhook_cert_dir())


class KubeRay(Operator):
    """ray-project/kuberay ray-operator. Its RayCluster webhook runs only with
    ``ENABLE_WEBHOOKS=true``; the runner leaves it off (the default)."""

    name = "kuberay"
    namespace = "ray-system"

    def args(self) -> list[str]:
        return [
            f"--metrics-addr={HOST}:{self.metrics_port}",
            f"--health-probe-bind-address={HOST}:{self.health_port}",
            "--enable-leader-election=false",
            "--log-stdout-encoder=console",
        ]


class Volcano(Operator):
    """volcano.sh vc-controller-manager only (Job, PodGroup, Queue, ... controllers).

    Two things the rest of Volcano normally does, done here: the ``default`` Queue exists (the
    scheduler creates it), and PodGroups move from Pending to Inqueue (the scheduler's enqueue
    action) — the job controller creates no pod before that. `enqueue` runs in a thread while
    the operator runs. Without the webhook-manager nothing defaults ``schedulerName``, so jobs
    that leave it empty are bound by kube-scheduler.
    """

    name = "volcano"
    namespace = "volcano-system"
    health_path = "/healthz"

    def __init__(self, cluster: LocalCluster, build: Build, work_dir: Path | str) -> None:
        super().__init__(cluster, build, work_dir)
        self._stop_enqueue = threading.Event()
        self._enqueuer: threading.Thread | None = None
        self.enqueued: list[str] = []

    def args(self) -> list[str]:
        return [
            f"--kubeconfig={self.cluster.kubeconfig}",
            "--leader-elect=false",
            "--enable-healthz=true",
            f"--healthz-address={HOST}:{self.health_port}",
            "--worker-threads=2",
        ]

    def prepare(self) -> None:
        queue = {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "Queue",
            "metadata": {"name": "default"},
            "spec": {"reclaimable": True, "weight": 1},
        }
        with contextlib.suppress(ApiError):
            self.cluster.request("POST", "/apis/scheduling.volcano.sh/v1beta1/queues", queue)
        self._stop_enqueue.clear()
        self._enqueuer = threading.Thread(target=self._enqueue_loop, daemon=True)
        self._enqueuer.start()
        self._stack.callback(self._stop_enqueue.set)

    def enqueue(self) -> list[str]:
        """Move every Pending PodGroup to Inqueue; return their namespace/name."""
        moved: list[str] = []
        groups = self.cluster.request("GET", "/apis/scheduling.volcano.sh/v1beta1/podgroups")
        for group in groups.get("items", []):
            if (group.get("status") or {}).get("phase", "Pending") != "Pending":
                continue
            meta = group["metadata"]
            path = (
                f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{meta['namespace']}"
                f"/podgroups/{meta['name']}"
            )
            with contextlib.suppress(ApiError):
                self.cluster.request(
                    "PATCH",
                    path,
                    {"status": {"phase": "Inqueue"}},
                    content_type="application/merge-patch+json",
                )
                moved.append(f"{meta['namespace']}/{meta['name']}")
        self.enqueued.extend(moved)
        return moved

    def _enqueue_loop(self) -> None:
        while not self._stop_enqueue.wait(0.5):
            with contextlib.suppress(ApiError, OSError):
                self.enqueue()


OPERATORS: dict[str, type[Operator]] = {
    cls.name: cls
    for cls in (TrainingOperator, MPIOperator, JobSet, Trainer, LeaderWorkerSet, KubeRay, Volcano)
}


def start(
    cluster: LocalCluster,
    name: str,
    work_dir: Path | str,
    *,
    timeout: float = 180.0,
    install_crds: bool = True,
) -> Operator:
    """Build (or take from the cache) and start operator ``name``; the caller stops it."""
    operator = OPERATORS[name](cluster, build(name), work_dir)
    operator.start(timeout=timeout, install_crds=install_crds)
    return operator


class OperatorPool:
    """Operators started on demand against one cluster and stopped together (in reverse)."""

    def __init__(self, cluster: LocalCluster, work_dir: Path | str) -> None:
        self.cluster = cluster
        self.work_dir = Path(work_dir)
        self.running: dict[str, Operator] = {}
        self.builds: dict[str, Build] = {}

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def ensure(self, names: Sequence[str], *, timeout: float = 180.0) -> list[Operator]:
        """Build and start each of ``names`` not yet running, in order; return them all."""
        for name in names:
            operator = self.running.get(name)
            if operator is not None and operator.running():
                continue
            if operator is not None:
                raise OperatorError(f"{name} exited:\n{operator.log_tail()}")
            self.builds[name] = build(name)
            operator = OPERATORS[name](self.cluster, self.builds[name], self.work_dir / name)
            operator.start(timeout=timeout)
            self.running[name] = operator
        return [self.running[n] for n in names]

    def stop(self) -> None:
        for name in reversed(list(self.running)):
            self.running.pop(name).stop()


def controlplane_bin_dir() -> Path:
    """$PODIUM_CONTROLPLANE_BIN, else the bin dir tests/e2e/controlplane/build.sh prints."""
    if from_env := os.environ.get("PODIUM_CONTROLPLANE_BIN"):
        return Path(from_env)
    script = HERE.parent / "controlplane" / "build.sh"
    result = subprocess.run(["bash", str(script)], stdout=subprocess.PIPE, text=True, check=True)
    return Path(result.stdout.strip().splitlines()[-1])


@contextlib.contextmanager
def fresh_namespace(
    cluster: LocalCluster, name: str, *, wait_deleted: float = 120.0
) -> Iterator[str]:
    """A new namespace, deleted afterwards; waits (up to ``wait_deleted`` s) until it is gone,
    so the fake GPUs its pods held are free for the next one."""
    cluster.create_namespace(name)
    try:
        yield name
    finally:
        cluster.delete_namespace(name, timeout=wait_deleted)

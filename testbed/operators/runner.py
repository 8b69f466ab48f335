"""Running one real operator as a local process beside a `LocalCluster` (docs/operators.md).

`testbed.build` compiles each operator from the Go module proxy and copies its project's own
CRDs, webhook manifests and examples next to the binary; `build` returns that as a `Build`. An
`Operator` starts one as a child process on 127.0.0.1 against the cluster's admin kubeconfig.

Leader election is off where the operator allows it, metrics and health probes listen on free
127.0.0.1 ports, and the operator's own admission webhooks are served by the process itself:
the runner writes the serving certificate (and, for the operators that run a cert rotator, the
cert Secret it expects) and registers the project's own webhook configurations, rendered from
its ``config/webhook`` kustomization, with ``clientConfig.url`` pointing at
``https://127.0.0.1:<port>``. `Operator.stop` deletes those configurations again, so a stopped
operator leaves no webhook behind that would refuse its kind with ``failurePolicy: Fail``.

Nothing here imports podium's serving code: this harness proves what the real controllers create.
"""

from __future__ import annotations

import contextlib
import json
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import yaml

from testbed import build as builder
from testbed.controlplane import ApiError, LocalCluster
from testbed.operators.webhooks import (
    WEBHOOK_API,
    WebhookCerts,
    issue_webhook_certs,
    render_webhook_configurations,
)
from testbed.processes import HOST, LOG_TAIL_LINES, Process, StartStop, free_port, tail

__all__ = ["Build", "ConfigFileOperator", "Operator", "OperatorError", "build"]


class OperatorError(RuntimeError):
    """An operator failed to build, to start, or exited."""


@dataclass(frozen=True)
class Build:
    """What `testbed.build.build_operator` left in its output directory."""

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
    """Build (or find cached) one operator and return what it made.

    Progress goes to this process's stderr; raises `OperatorError` when the build fails.
    """
    if name not in builder.OPERATORS:
        raise OperatorError(f"unknown operator {name!r}; known: {', '.join(builder.OPERATORS)}")
    try:
        return Build.load(builder.build_operator(name))
    except builder.BuildError as error:
        raise OperatorError(f"building {name} failed: {error}") from error


class Operator(StartStop):
    """One operator process against a `LocalCluster`; subclasses say how to run each one.

    Ports and paths are known after construction; `start` prepares the cluster (namespace, CRDs,
    cert Secret, webhook configurations), starts the process and waits until its health probe
    answers 200; `stop` ends it and deletes what `start` registered that would outlive it.
    """

    #: The name the builder knows the operator by.
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
        self.process: Process | None = None
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
            self.process = self._spawn()
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
                    "DELETE", f"{WEBHOOK_API}/{resource}/{config['metadata']['name']}"
                )
        self.registered_webhooks = []
        process, self.process = self.process, None
        if process is not None:
            process.stop(timeout)
        self._stack.close()

    def running(self) -> bool:
        return self.process is not None and self.process.running()

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return tail(self.log_file, lines)

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

    def _spawn(self) -> Process:
        env = {"KUBECONFIG": str(self.cluster.kubeconfig), "TMPDIR": str(self.tmp_dir)}
        args = [str(self.build.binary), *self.args()]
        (self.work_dir / "command.txt").write_text(" ".join(args) + "\n")
        return Process.spawn(
            f"{self.name} {self.build.version}",
            args,
            log_path=self.log_file,
            cwd=self.work_dir,
            env={**env, **self.env()},
        )

    def _register_webhooks(self) -> None:
        for config in self.webhook_configurations():
            resource = config["kind"].lower() + "s"
            name = config["metadata"]["name"]
            with contextlib.suppress(ApiError):
                self.cluster.request("DELETE", f"{WEBHOOK_API}/{resource}/{name}")
            self.cluster.request("POST", f"{WEBHOOK_API}/{resource}", config)
            self.registered_webhooks.append(config)

    def _wait_ready(self, timeout: float) -> None:
        def healthy() -> bool:
            with urllib.request.urlopen(self.health_url, timeout=2) as response:
                return bool(response.status == 200)

        assert self.process is not None
        transient = (OSError, urllib.error.URLError)
        self.process.wait_ready(healthy, timeout=timeout, error=OperatorError, transient=transient)


class ConfigFileOperator(Operator):
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

"""``podium serve`` as a real process beside the local control plane, registered with the same
MutatingWebhookConfiguration users install (its service reference rewritten to a 127.0.0.1 URL)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

from testbed import rbac
from testbed.controlplane import ApiError, LocalCluster
from testbed.paths import REPO
from testbed.processes import free_port, tail

WEBHOOK_MANIFEST = REPO / "manifests" / "base" / "mutatingwebhookconfiguration.yaml"
#: podium's own namespace (its Lease and its ServiceAccount).
NAMESPACE = "podium-system"


def _namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def _server(kubeconfig: Path) -> str:
    """The apiserver URL of a kubeconfig's (only) cluster."""
    (entry,) = yaml.safe_load(kubeconfig.read_text())["clusters"]
    return str(entry["cluster"]["server"])


#: The settings of the e2e tests about pinning at admission (``zone-chooser: pin``); podium's
#: default, which every other test runs under, is ``hold``.
PIN = "zone-chooser: pin\n"


class Podium:
    def __init__(
        self,
        cluster: LocalCluster,
        work_dir: Path,
        *,
        config: str | None = None,
        stdout: int = subprocess.DEVNULL,
        chart_rbac: Sequence[str] | None = (),
        token_seconds: int = rbac.TOKEN_SECONDS,
    ) -> None:
        """``stdout``: where podium's audit lines go; ``subprocess.PIPE`` to read them.
        ``chart_rbac``: podium runs as the chart's ServiceAccount with exactly the chart's RBAC,
        rendered with these ``--set`` values (none: the chart's defaults), applied, and a token
        minted for it (`testbed.rbac`), as ``helm install`` would run it; a write the chart does
        not grant is refused by the apiserver, so every test that starts podium also proves the
        chart grants enough. ``None``: podium uses ``cluster.kubeconfig`` as it is (the cluster's
        admin, or the user a test's stand-in cluster names).
        The token reaches the apiserver at the server ``cluster.kubeconfig`` names, so a cluster
        seen through a fault proxy stays behind it, and lives ``token_seconds`` (`renew_token`
        mints the next one)."""
        self.cluster = cluster
        self.stdout = stdout
        self.work_dir = work_dir
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.audit_file = work_dir / "audit.jsonl"
        self.log_file = work_dir / "podium.log"
        self.config = config
        self.kubeconfig = cluster.kubeconfig
        self.chart_rbac = chart_rbac
        self.token_seconds = token_seconds
        #: When podium's token was minted (``time.time()``); None: it runs as the cluster's user.
        self.token_minted: float | None = None
        if chart_rbac is not None:
            cluster.apply(_namespace(NAMESPACE))
            self.token_minted = time.time()
            self.kubeconfig = rbac.as_installed(
                cluster,
                work_dir,
                namespace=NAMESPACE,
                values=chart_rbac,
                server=_server(cluster.kubeconfig),
                token_seconds=token_seconds,
            )
        self.process: subprocess.Popen[bytes] | None = None
        self._log: Any = None
        self.cert, self.key = cluster.issue_certificate(
            "podium",
            common_name="podium",
            dns_names=["localhost"],
            ip_addresses=["127.0.0.1"],
            server=True,
            directory=work_dir,
        )

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> None:
        """`launch`, then `wait_ready`."""
        self.launch()
        self.wait_ready(timeout)

    #: What `wait_ready` calls the process when it fails to start.
    name = "podium serve"

    def command(self) -> list[str]:
        """The command line `launch` runs (``podium serve`` on this cluster's files)."""
        args = [
            sys.executable,
            "-m",
            "webhook.ops.cli",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--cert-file",
            str(self.cert),
            "--key-file",
            str(self.key),
            "--kubeconfig",
            str(self.kubeconfig),
            "--audit-file",
            str(self.audit_file),
            "--namespace",
            NAMESPACE,
        ]
        if self.config:
            (self.work_dir / "podium.yaml").write_text(self.config)
            args += ["--config", str(self.work_dir / "podium.yaml")]
        return args

    def launch(self) -> None:
        """Start `command` without waiting for it (`wait_ready`): several replicas start side by
        side."""
        self._log = self.log_file.open("ab")
        self.process = subprocess.Popen(
            self.command(),
            stdout=self.stdout,
            stderr=self._log,
            cwd=REPO,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Wait until the launched process answers ``/readyz``; stop it and raise if it exits or
        ``timeout`` passes first."""
        assert self.process is not None, "launch() first"
        deadline = time.monotonic() + timeout
        while not self.ready():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{self.name} did not become ready:\n{self.log_tail()}")
            time.sleep(0.1)

    def ready(self) -> bool:
        context = ssl.create_default_context(cafile=str(self.cluster.ca_file))
        try:
            with urllib.request.urlopen(f"{self.url}/readyz", context=context, timeout=2) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    def get(self, path: str) -> str:
        context = ssl.create_default_context(cafile=str(self.cluster.ca_file))
        with urllib.request.urlopen(f"{self.url}{path}", context=context, timeout=5) as resp:
            return str(resp.read().decode())

    def stop(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()
        self.process = None

    def renew_token(self) -> None:
        """Mint podium's next token into its kubeconfig (the running process keeps the one it
        read: restart it, `stop` then `start`, to use it)."""
        if self.chart_rbac is None:
            return
        self.token_minted = time.time()
        self.kubeconfig = rbac.as_installed(
            self.cluster,
            self.work_dir,
            namespace=NAMESPACE,
            values=self.chart_rbac,
            server=_server(self.cluster.kubeconfig),
            token_seconds=self.token_seconds,
        )

    def log_tail(self, lines: int = 40) -> str:
        return tail(self.log_file, lines)

    def webhook_configuration(self) -> dict[str, Any]:
        """The shipped MutatingWebhookConfiguration, pointed at this process."""
        config: dict[str, Any] = yaml.safe_load(WEBHOOK_MANIFEST.read_text())
        for hook in config["webhooks"]:
            hook["clientConfig"] = {"url": f"{self.url}/mutate", "caBundle": self.cluster.ca_bundle}
        return config

    def wait_until_called(self, timeout: float = 60.0) -> None:
        """The apiserver picks up a new webhook configuration asynchronously: in an opted-in
        namespace of its own, wait until podium is called and sees the namespace
        (``wait_until_sees``)."""
        cluster = self.cluster
        namespace = f"podium-probe-{uuid.uuid4().hex[:6]}"
        cluster.create_namespace(namespace, {"podium.dev/enabled": "true"})
        try:
            self.wait_until_sees(namespace, timeout=timeout)
        finally:
            cluster.request("DELETE", f"/api/v1/namespaces/{namespace}")

    def wait_until_sees(self, namespace: str, timeout: float = 60.0) -> None:
        """Dry-run a pod in the opted-in ``namespace`` until podium audits it as a pod there:
        called, its watch cache synced, and the namespace with its opt-in label in its view (not
        ``cache-not-synced``, not ``namespace-not-enabled``) — so that a test's first pod is
        decided, not let through because the namespace's watch event is still on its way. The
        pod's controller is a kind no adapter knows, so no adapter (nor any CRD) is involved: a
        broken adapter fails the test that uses it, not this."""
        cluster = self.cluster
        probe = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": "probe-",
                "namespace": namespace,
                # The webhook's matchConditions pass only pods with a controller.
                "ownerReferences": [
                    {
                        "apiVersion": "probe.podium.dev/v1",
                        "kind": "Probe",
                        "name": "probe",
                        "uid": "00000000-0000-4000-8000-000000000000",
                        "controller": True,
                    }
                ],
            },
            "spec": {"containers": [{"name": "main", "image": "probe:1"}]},
        }
        unseen = {"cache-not-synced", "namespace-not-enabled"}

        def seen() -> bool:
            cluster.request(
                "POST", f"/api/v1/namespaces/{namespace}/pods", probe, query={"dryRun": "All"}
            )
            return any(
                r.get("namespace") == namespace and r.get("reason") not in unseen
                for r in self.audit_records()
            )

        cluster.wait_for(f"podium to see namespace {namespace}", seen, timeout=timeout)

    def register(self) -> dict[str, Any]:
        config = self.webhook_configuration()
        name = config["metadata"]["name"]
        with contextlib.suppress(ApiError):
            self.cluster.request(
                "DELETE",
                f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{name}",
            )
        created: dict[str, Any] = self.cluster.request(
            "POST", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", config
        )
        return created

    def audit_records(self) -> list[dict[str, Any]]:
        if not self.audit_file.exists():
            return []
        return [
            json.loads(line) for line in self.audit_file.read_text().splitlines() if line.strip()
        ]


@contextlib.contextmanager
def serving(server: Podium, *, unregister: bool = False) -> Iterator[Podium]:
    """Start podium, register the shipped webhook configuration, wait until it is called; stop it
    afterwards and, with ``unregister``, delete the configuration, so that no webhook is left
    pointing at a podium that is gone (a cluster other modules go on using)."""
    server.start()
    try:
        name = server.register()["metadata"]["name"]
        server.wait_until_called()
        yield server
    finally:
        server.stop()
        if unregister:
            with contextlib.suppress(ApiError):
                server.cluster.request(
                    "DELETE",
                    f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{name}",
                )


@contextlib.contextmanager
def opted_in_namespace(
    cluster: LocalCluster, prefix: str, *, seen_by: Podium | None = None
) -> Iterator[str]:
    """A namespace with podium enabled — once ``seen_by`` (a running podium) has it in its view
    (``Podium.wait_until_sees``) — deleted afterwards, emptied and waited for, so the GPUs its
    pods held are free again for the next test and nothing of it is left in podium's view (the
    empty namespace goes a few seconds later)."""
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    cluster.request(
        "POST",
        "/api/v1/namespaces",
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name, "labels": {"podium.dev/enabled": "true"}},
        },
    )
    try:
        if seen_by is not None:
            seen_by.wait_until_sees(name)
        yield name
    finally:
        cluster.delete_namespace(name, gone=False)


def doctor(cluster: LocalCluster, *args: str) -> tuple[int, dict[str, Any], str]:
    """``podium doctor ARGS -o json`` as a user runs it: exit code, report and stderr."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "webhook.ops.cli",
            "doctor",
            "--kubeconfig",
            str(cluster.kubeconfig),
            *args,
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    assert result.returncode in (0, 1), result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    return result.returncode, report, result.stderr


def run_doctor(cluster: LocalCluster, namespace: str) -> tuple[int, dict[str, Any]]:
    """``podium doctor -n NAMESPACE -o json`` as a user runs it: exit code and report."""
    code, report, _ = doctor(cluster, "-n", namespace)
    return code, report

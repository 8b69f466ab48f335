"""A real Kubernetes control plane on 127.0.0.1 for end-to-end tests.

`LocalCluster` runs etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok
(built by `testbed.build`) as child processes on free loopback ports::

    with LocalCluster(bin_dir, work_dir) as cluster:
        cluster.create_fake_nodes({"zone-a": [8], "zone-b": [8, 8]})
        cluster.request("GET", "/api/v1/nodes")

There are no kubelets: kwok plays the nodes annotated ``kwok.x-k8s.io/node=fake`` (heartbeats,
and pods bound to them become Running), while the real scheduler binds pods to them.

Everything the cluster writes (certificates, kubeconfig, etcd data, audit log, one log file per
component) lives in ``work_dir``. Tear-down stops the components in reverse order, SIGTERM then
SIGKILL, and also runs when start-up fails midway; a component that fails to start raises
`ControlPlaneError` with the last lines of its log.

The parts: `flags` (command lines, feature gates), `pki` (certificates and kubeconfig, from
`webhook.certs`), `api` (the apiserver client: the official ``kubernetes`` client),
`objects` (namespaces, fake nodes, CRDs), `layout` (where the files go).
"""

from __future__ import annotations

import atexit
import base64
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s

from testbed.controlplane import flags, kubectl, objects, pki
from testbed.controlplane.api import Api, ApiError, ControlPlaneError
from testbed.controlplane.components import Components
from testbed.controlplane.flags import (
    DEFAULT_CONTROLLERS,
    FAKE_NODE_ANNOTATION,
    PODGROUP_PROTECTION_CONTROLLER,
    SCHEDULER_GANG_GATES,
    SCHEDULER_GANG_RUNTIME_CONFIG,
    ZONES,
)
from testbed.controlplane.layout import Layout
from testbed.paths import CRD_DIR, crd_files
from testbed.processes import LOG_TAIL_LINES, StartStop, tail
from webhook import certs

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


#: `LocalCluster.wait_for`'s first and longest pause between two polls, in seconds.
_FIRST_POLL, _POLL = 0.01, 0.25


class LocalCluster(StartStop):
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
        self.layout = Layout(Path(bin_dir).resolve(), Path(work_dir).resolve())
        self.bin_dir, self.work_dir = self.layout.bin_dir, self.layout.work_dir
        self.feature_gates: dict[str, bool] = dict(feature_gates or {})
        self.runtime_config: dict[str, str] = dict(runtime_config or {})
        self.controllers = flags.controllers_for(controllers, self.feature_gates)
        self._kubectl_path = Path(kubectl_path) if kubectl_path else None

        layout = self.layout
        self.pki_dir, self.logs_dir = layout.pki_dir, layout.logs_dir
        self.ca_file, self.ca_key_file = layout.ca_file, layout.ca_key_file
        self.admin_cert_file, self.admin_key_file = layout.admin_cert_file, layout.admin_key_file
        self.kubeconfig = layout.kubeconfig
        self.audit_log, self.audit_policy_file = layout.audit_log, layout.audit_policy_file

        self.components = Components(
            layout,
            startup_timeout=startup_timeout,
            controllers=self.controllers,
            feature_gates=self.feature_gates,
            runtime_config=self.runtime_config,
            extra_apiserver_args=extra_apiserver_args,
        )
        # name -> process, kept after stop() (all have a returncode then).
        self.processes = self.components.processes
        self._ca: certs.KeyPair | None = None
        self._api: Api | None = None
        self._started = False

    @property
    def apiserver_port(self) -> int:
        return self.components.apiserver_port

    @property
    def server(self) -> str:
        """The apiserver's URL (after `start`)."""
        return self.components.server

    # --- lifecycle ---------------------------------------------------------------------------

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
        self.components.stop(timeout)
        if self._api is not None:
            self._api.close()
            self._api = None
        atexit.unregister(self.stop)

    def _start(self) -> None:
        self.components.prepare()
        self._ca = pki.write_pki(self.layout)
        pki.write_kubeconfig(self.layout, self.server)
        self.audit_policy_file.write_text(yaml.safe_dump(flags.AUDIT_POLICY, sort_keys=False))
        self.components.start(lambda: self.api)

    def log_tail(self, name: str, lines: int = LOG_TAIL_LINES) -> str:
        """The last lines of a component's log ("etcd", "kube-apiserver", "kwok", ...)."""
        return tail(self.logs_dir / f"{name}.log", lines)

    # --- certificates ------------------------------------------------------------------------

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
        pair = pki.issue(
            self._ca,
            common_name=common_name,
            organizations=organizations,
            dns_names=dns_names,
            ip_addresses=ip_addresses,
            server=server,
            client=client,
        )
        return pki.write_pair(directory or self.pki_dir, name, pair)

    @property
    def ca_bundle(self) -> str:
        """The cluster CA, base64 PEM, as a webhook's clientConfig.caBundle wants it."""
        return base64.b64encode(self.ca_file.read_bytes()).decode()

    # --- talking to the apiserver ------------------------------------------------------------

    @property
    def api(self) -> Api:
        """The apiserver client (after `start`), as the admin."""
        if self._api is None:
            if not self.kubeconfig.exists():
                raise ControlPlaneError("the kubeconfig exists only after start()")
            self._api = Api.from_kubeconfig(self.kubeconfig)
        return self._api

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
        return self.api.request(
            method,
            path,
            body,
            query=query,
            content_type=content_type,
            parse=parse,
            timeout=timeout,
        )

    def apply(self, obj: Mapping[str, Any], *, subresource: str = "") -> Any:
        """Server-side apply one object (created if missing) with force; return the result."""
        return self.api.apply(obj, subresource=subresource)

    def metrics(self, component: str = "kube-apiserver", *, timeout: float = 30.0) -> str:
        """The Prometheus text of a component's ``/metrics``, fetched as the admin.

        ``component``: "kube-apiserver", "kube-scheduler" or "kube-controller-manager". The
        latter two serve on their own self-signed certificates (not verified here) and authorize
        the admin's client certificate through the apiserver (delegated authn/authz).
        """
        if component == "kube-apiserver":
            text: str = self.request("GET", "/metrics", parse=False, timeout=timeout)
            return text
        return self.components.metrics(self.api, component, timeout=timeout)

    def wait_for(self, what: str, predicate: Callable[[], bool], *, timeout: float = 60.0) -> None:
        """Poll ``predicate`` until true, first every 10 ms, then less often, at least every
        0.25 s (most waits end within a fraction of a second); on timeout raise with the
        component logs' tails."""
        deadline = time.monotonic() + timeout
        pause = _FIRST_POLL
        while not predicate():
            if time.monotonic() > deadline:
                tails = self.components.tails(15)
                raise ControlPlaneError(f"timed out after {timeout}s waiting for {what}\n{tails}")
            time.sleep(pause)
            pause = min(2 * pause, _POLL)

    def kubectl(
        self,
        *args: str,
        input: str | None = None,
        check: bool = True,
        timeout: float = 120.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this cluster (text mode); raise on failure unless check=False.
        Only for tests about kubectl itself: the harness talks through `request`."""
        return kubectl.run(
            self.kubeconfig,
            *args,
            kubectl=self._kubectl_path,
            input=input,
            check=check,
            timeout=timeout,
        )

    def api_client(self) -> k8s.ApiClient:
        """A new `kubernetes.client.ApiClient` for this cluster, the caller's to close."""
        return Api.from_kubeconfig(self.kubeconfig).client

    # --- objects -----------------------------------------------------------------------------

    def create_namespace(self, name: str, labels: Mapping[str, str] | None = None) -> None:
        """Create a namespace and wait until pods can be made in it."""
        objects.create_namespace(self.api, self.wait_for, name, labels)

    def delete_namespace(self, name: str, *, timeout: float = 120.0, gone: bool = True) -> None:
        """Delete a namespace (one already gone is fine), empty it and wait until it is empty
        and, with ``gone``, gone (`objects.delete_namespaces`)."""
        objects.delete_namespace(self.api, self.wait_for, name, timeout=timeout, gone=gone)

    def delete_namespaces(
        self, names: Sequence[str], *, timeout: float = 120.0, gone: bool = True
    ) -> None:
        """`delete_namespace` for several, side by side."""
        objects.delete_namespaces(self.api, self.wait_for, names, timeout=timeout, gone=gone)

    def create_fake_nodes(
        self,
        zones: Mapping[str, Sequence[int]],
        *,
        wait_ready: bool = True,
        timeout: float = 120.0,
    ) -> list[str]:
        """One kwok Node per GPU count, per zone (`objects.fake_node`); return their names."""
        return objects.create_fake_nodes(
            self.api, self.wait_for, zones, wait_ready=wait_ready, timeout=timeout
        )

    def node_ready(self, name: str) -> bool:
        return objects.node_ready(self.api, name)

    def install_crds(self, paths: Iterable[Path | str], *, timeout: float = 180.0) -> list[str]:
        """Create (or server-side apply) the CRDs in the YAML files; wait until Established."""
        return objects.install_crds(self.api, self.wait_for, paths, timeout=timeout)

    def crd_established(self, name: str) -> bool:
        return objects.crd_established(self.api, name)

    def audit_events(self) -> list[dict[str, Any]]:
        """The audit log so far, one dict per event."""
        return objects.audit_events(self.audit_log)

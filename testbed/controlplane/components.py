"""The five processes of a control plane: started in order, each waited for, stopped in reverse."""

from __future__ import annotations

import os
import shutil
import subprocess
import urllib.request
from collections.abc import Callable, Mapping, Sequence

from testbed.build import CONTROLPLANE_BINARIES
from testbed.controlplane import flags
from testbed.controlplane.api import Api, ApiError, ControlPlaneError
from testbed.controlplane.layout import Layout
from testbed.processes import HOST, Process, free_port

__all__ = ["Components"]

# A component's health endpoint may refuse or error while it starts.
_TRANSIENT = (OSError, ApiError)


class Components:
    """etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok as `Process`es.

    Ports are chosen by `start`; `api` gives the apiserver client once the kubeconfig exists.
    """

    def __init__(
        self,
        layout: Layout,
        *,
        startup_timeout: float,
        controllers: Sequence[str],
        feature_gates: Mapping[str, bool],
        runtime_config: Mapping[str, str],
        extra_apiserver_args: Sequence[str],
    ) -> None:
        self.layout = layout
        self.startup_timeout = startup_timeout
        self.controllers = tuple(controllers)
        self.feature_gates = dict(feature_gates)
        self.runtime_config = dict(runtime_config)
        self.extra_apiserver_args = tuple(extra_apiserver_args)
        self.etcd_port = self.apiserver_port = 0
        self.controller_manager_port = self.scheduler_port = 0
        #: Running (or failed) components, in start order.
        self.running: list[Process] = []
        #: name -> process, kept after `stop` (all have a returncode then).
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def etcd_url(self) -> str:
        return f"http://{HOST}:{self.etcd_port}" if self.etcd_port else ""

    @property
    def server(self) -> str:
        return f"https://{HOST}:{self.apiserver_port}" if self.apiserver_port else ""

    def prepare(self) -> None:
        """Check the binaries, make the directories, forget an old etcd, choose the ports."""
        for binary in CONTROLPLANE_BINARIES:
            if not os.access(self.layout.bin_dir / binary, os.X_OK):
                raise ControlPlaneError(
                    f"{self.layout.bin_dir / binary} is missing"
                    " (run python -m testbed.build controlplane)"
                )
        self.layout.make_dirs()
        # Every start is a new cluster: etcd's old data would not match the new ports and keys.
        shutil.rmtree(self.layout.etcd_data, ignore_errors=True)
        self.etcd_port, self.apiserver_port = free_port(), free_port()
        self.controller_manager_port, self.scheduler_port = free_port(), free_port()

    def start(self, api: Callable[[], Api]) -> None:
        """Start them in order and wait until each is healthy (the caller stops them on error)."""
        layout, gates = self.layout, self.feature_gates
        etcd = self._spawn(
            "etcd", flags.etcd_args(layout, client_url=self.etcd_url, peer_port=free_port())
        )
        self._wait(etcd, lambda: _plain_http_ok(f"{self.etcd_url}/health"))
        apiserver = self._spawn(
            "kube-apiserver",
            flags.apiserver_args(
                layout,
                etcd_url=self.etcd_url,
                port=self.apiserver_port,
                feature_gates=gates,
                runtime_config=self.runtime_config,
                extra=self.extra_apiserver_args,
            ),
        )
        self._wait(apiserver, lambda: bool(api().request("GET", "/readyz", parse=False)))
        manager = self._spawn(
            "kube-controller-manager",
            flags.controller_manager_args(
                layout,
                port=self.controller_manager_port,
                controllers=self.controllers,
                feature_gates=gates,
            ),
        )
        scheduler = self._spawn(
            "kube-scheduler",
            flags.scheduler_args(layout, port=self.scheduler_port, feature_gates=gates),
        )
        kwok = self._spawn("kwok", flags.kwok_args(layout), env={"HOME": str(layout.kwok_home)})
        self._wait(manager, lambda: self._healthy(api(), self.controller_manager_port))
        self._wait(scheduler, lambda: self._healthy(api(), self.scheduler_port))
        # Pods are rejected until the serviceaccount controller has made the namespace's
        # "default" ServiceAccount, so wait for it: afterwards the cluster is usable.
        default_account = "/api/v1/namespaces/default/serviceaccounts/default"
        self._wait(manager, lambda: api().exists(default_account))
        if not kwok.running():
            raise ControlPlaneError(kwok.failure(f"exited with code {kwok.returncode}"))

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM, then SIGKILL, in reverse start order."""
        while self.running:
            self.running.pop().stop(timeout)

    def tails(self, lines: int) -> str:
        return "\n".join(
            f"--- last lines of {c.log_path} ---\n{c.tail(lines)}" for c in self.running
        )

    def metrics(self, api: Api, component: str, *, timeout: float) -> str:
        """``/metrics`` of kube-scheduler or kube-controller-manager, fetched as the admin."""
        port = {
            "kube-scheduler": self.scheduler_port,
            "kube-controller-manager": self.controller_manager_port,
        }[component]
        try:
            return self._get(api, port, "/metrics", timeout=timeout)
        except ApiError as error:
            raise ApiError("GET", f"{component}/metrics", error.status, error.body) from None

    def _healthy(self, api: Api, port: int) -> bool:
        self._get(api, port, "/healthz")
        return True

    @staticmethod
    def _get(api: Api, port: int, path: str, *, timeout: float = 5.0) -> str:
        """A GET to kube-scheduler or kube-controller-manager: they serve on self-signed
        certificates made in memory (not verified) and authorize the admin's client certificate
        through the apiserver (delegated authn/authz)."""
        component = api.unverified(port)
        try:
            text: str = component.request("GET", path, parse=False, timeout=timeout)
        finally:
            component.close()
        return text

    def _spawn(self, name: str, args: list[str], env: Mapping[str, str] | None = None) -> Process:
        process = Process.spawn(
            name,
            [str(self.layout.bin_dir / name), *args],
            log_path=self.layout.logs_dir / f"{name}.log",
            cwd=self.layout.work_dir,
            env=env,
        )
        self.running.append(process)
        assert process.popen is not None
        self.processes[name] = process.popen
        return process

    def _wait(self, process: Process, ready: Callable[[], bool]) -> None:
        process.wait_ready(
            ready, timeout=self.startup_timeout, error=ControlPlaneError, transient=_TRANSIENT
        )


def _plain_http_ok(url: str) -> bool:
    """etcd's plain-HTTP health endpoint answers 200."""
    with urllib.request.urlopen(url, timeout=5) as response:
        return bool(response.status == 200)

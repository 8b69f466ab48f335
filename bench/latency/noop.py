"""The burst's no-op arm: a webhook that answers every review ``allowed`` with no patch
(``python -m bench.throughput.servers noop``, the bare ASGI app on podium's uvicorn and TLS
settings), set up exactly as ``testbed.podium.Podium`` sets up podium — a serving certificate from
the cluster CA for 127.0.0.1, the shipped MutatingWebhookConfiguration (same rules, namespace
selector, match conditions, timeout, failure policy) pointed at it, the same readiness and
"is it called yet" probes — so that the only difference in the apiserver's histogram is what
podium does with a review."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from testbed.controlplane import LocalCluster
from testbed.paths import REPO
from testbed.podium import Podium


class NoOpWebhook(Podium):
    """`Podium`'s set-up and registration around the no-op server instead of ``podium serve``;
    `audit_records` are the reviews it answered (namespace, uid, outcome ``allowed``)."""

    def __init__(self, cluster: LocalCluster, work_dir: Path) -> None:
        # chart_rbac=None: the no-op reads nothing from the cluster, so it needs no account.
        super().__init__(cluster, work_dir, chart_rbac=None)
        # The server takes a directory holding tls.crt and tls.key.
        self.certs_dir = work_dir / "tls"
        self.certs_dir.mkdir(exist_ok=True)
        for name, issued in (("tls.crt", self.cert), ("tls.key", self.key)):
            link = self.certs_dir / name
            link.unlink(missing_ok=True)
            link.symlink_to(issued.resolve())

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "bench.throughput.servers",
            "noop",
            "--port",
            str(self.port),
            "--certs",
            str(self.certs_dir),
        ]

    def start(self, timeout: float = 60.0) -> None:
        self._log = self.log_file.open("ab")
        self.process = subprocess.Popen(
            self.command(),
            stdout=subprocess.DEVNULL,
            stderr=self._log,
            cwd=REPO,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        deadline = time.monotonic() + timeout
        while not self.ready():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the no-op webhook did not become ready:\n{self.log_tail()}")
            time.sleep(0.2)

    def audit_records(self) -> list[dict[str, Any]]:
        answered: list[dict[str, Any]] = json.loads(self.get("/answered"))
        return [{**line, "outcome": "allowed"} for line in answered]

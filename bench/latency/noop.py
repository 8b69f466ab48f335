"""The burst's no-op arm: a webhook that answers every review ``allowed`` with no patch
(``python -m bench.throughput.servers noop``, the bare ASGI app on podium's uvicorn and TLS
settings), set up exactly as ``testbed.podium.Podium`` sets up podium — a serving certificate from
the cluster CA for 127.0.0.1, the shipped MutatingWebhookConfiguration (same rules, namespace
selector, match conditions, timeout, failure policy) pointed at it, the same readiness and
"is it called yet" probes — so that the only difference in the apiserver's histogram is what
podium does with a review."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from testbed.controlplane import LocalCluster
from testbed.podium import Podium


class NoOpWebhook(Podium):
    """`Podium`'s set-up and registration around the no-op server instead of ``podium serve``;
    `audit_records` are the reviews it answered (namespace, uid, outcome ``allowed``)."""

    name = "the no-op webhook"

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

    def audit_records(self) -> list[dict[str, Any]]:
        answered: list[dict[str, Any]] = json.loads(self.get("/answered"))
        return [{**line, "outcome": "allowed"} for line in answered]

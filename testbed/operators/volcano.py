"""Volcano's job controller, with the two things the rest of Volcano would do done here."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

from testbed.controlplane import ApiError, LocalCluster
from testbed.operators.runner import Build, Operator
from testbed.processes import HOST

__all__ = ["Volcano"]


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

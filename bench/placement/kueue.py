"""The ``kueue-tas`` arm: Kueue's Topology Aware Scheduling places each gang, as a plain-pod group.

Kueue (``sigs.k8s.io/kueue``, built by ``python -m testbed.build kueue``) runs as a local process
beside the study's cluster (`testbed.operators.kueue.Kueue`: its webhooks on 127.0.0.1, the
plain-pod integration only), with one ResourceFlavor on a zone → hostname `Topology`, a
ClusterQueue whose GPU quota is the cluster's 200 GPUs and a LocalQueue in the study's namespace
(`testbed.operators.kueue.tas_objects`). Each attempt of a job is one pod group: the operator's
pods as the harness makes them, plus the group's name (``<job>-<attempt>``), its size, the queue
and a *required* zone topology (`testbed.operators.kueue.pod_group`). Nothing else is emulated:
Kueue gates the pods at admission, builds the Workload once the group is complete, admits it when
one zone has room on its nodes, and ungates the pods onto the nodes it assigned.

The arm watches the Workloads and keeps, per Workload, when it was first seen created, with quota
reserved (``QuotaReserved``), admitted (``Admitted``), finished or evicted — in the run's real
seconds, as the pod watch sees pods — in the run's record (``observed.workloads``). The pods' gate
removal is in the pod rows (``ungated_s``) like every arm's.

kube-scheduler's gang gates are off for this arm (`Arm.gang_gates`): Kueue does not need them,
and it is the alternative for clusters without them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bench.placement import trace
from bench.placement.arms import ATTEMPT_LABEL, JOB_NAME_LABEL, ZONE_LABEL, Arm, RunContext
from bench.placement.runner import Watch
from bench.placement.trace import TraceJob
from testbed.controlplane import LocalCluster
from testbed.operators import kueue

#: The LocalQueue (and ClusterQueue) the study's pods go to.
QUEUE = "study"
#: The Workload conditions whose first True the arm records.
CONDITIONS = ("QuotaReserved", "Admitted", "Finished", "Evicted", "PodsReady")
#: The apiserver's name for Kueue's mutating pod webhook (its latency histogram's label).
POD_WEBHOOK = "mpod.kb.io"


def group_name(job: TraceJob, pod: Mapping[str, Any]) -> str:
    """One pod group per attempt of a job: a retry's pods form a new group."""
    return f"{job.name}-{pod['metadata']['labels'].get(ATTEMPT_LABEL, '0')}"


class WorkloadWatch(Watch):
    """When each Workload of the namespace was first seen, and first seen with each of
    `CONDITIONS` True."""

    def __init__(self, cluster: LocalCluster, namespace: str, t0: float) -> None:
        path = f"/apis/{kueue.API}/namespaces/{namespace}/workloads"
        super().__init__(cluster, path, t0, name="workload-watch")
        self.seen: dict[str, dict[str, Any]] = {}

    def observe(self, kind: str, obj: Mapping[str, Any]) -> None:
        now, name = self.now(), obj["metadata"]["name"]
        with self.lock:
            row = self.seen.setdefault(name, {"name": name, "created_s": round(now, 3)})
            if kind == "DELETED":
                row.setdefault("deleted_s", round(now, 3))
                return
            for condition in (obj.get("status") or {}).get("conditions") or []:
                key = f"{condition['type']}_s"
                if condition["type"] in CONDITIONS and condition.get("status") == "True":
                    row.setdefault(key, round(now, 3))

    def rows(self) -> list[dict[str, Any]]:
        with self.lock:
            return [dict(row) for _, row in sorted(self.seen.items())]


class KueueTas(Arm):
    """Kueue TAS with plain-pod groups, each gang required to land in one zone."""

    name = "kueue-tas"
    webhook: str | None = POD_WEBHOOK
    gang_gates = False

    def __init__(self) -> None:
        self.manager: kueue.Kueue | None = None
        self.watch: WorkloadWatch | None = None

    def start(self, ctx: RunContext) -> None:
        self.manager = kueue.Kueue(ctx.cluster, kueue.build_kueue(), ctx.work_dir / "kueue")
        self.manager.start()
        for obj in kueue.tas_objects(
            gpus=trace.capacity(),
            node_labels={"type": "kwok"},
            zone_label=ZONE_LABEL,
            queue=QUEUE,
            namespace=ctx.namespace,
        ):
            ctx.cluster.apply(obj)

    def replay_started(self, ctx: RunContext, t0: float) -> None:
        self.watch = WorkloadWatch(ctx.cluster, ctx.namespace, t0)
        self.watch.start()

    def pod(self, job: TraceJob, pod: dict[str, Any]) -> dict[str, Any]:
        return kueue.pod_group(
            pod, group=group_name(job, pod), size=job.pods, queue=QUEUE, topology=ZONE_LABEL
        )

    def ending(self, ctx: RunContext, job: TraceJob, attempt: int, *, succeeded: bool) -> None:
        """The kubelet's part, which KWOK does not play: an attempt that ran its course has
        Succeeded, one that failed has Failed, before its pods are deleted. Kueue counts a pod
        group finished (and releases its quota) when its pods are terminated; a deleted pod that
        stays Running keeps Kueue's finalizer and its quota."""
        selector = f"{JOB_NAME_LABEL}={job.name},{ATTEMPT_LABEL}={attempt}"
        pods = ctx.cluster.request(
            "GET", f"/api/v1/namespaces/{ctx.namespace}/pods", query={"labelSelector": selector}
        )["items"]
        phase = "Succeeded" if succeeded else "Failed"
        for pod in pods:
            ctx.cluster.request(
                "PATCH",
                f"/api/v1/namespaces/{ctx.namespace}/pods/{pod['metadata']['name']}/status",
                {"status": {"phase": phase}},
                content_type="application/merge-patch+json",
            )

    def observations(self) -> dict[str, Any] | None:
        if self.watch is None:
            return None
        error = self.watch.error
        return {"workloads": self.watch.rows(), "error": None if error is None else repr(error)}

    def stop(self) -> None:
        if self.watch is not None:
            self.watch.stopping.set()
            self.watch.join(timeout=10)
            self.watch = None
        if self.manager is not None:
            self.manager.stop()
            self.manager = None

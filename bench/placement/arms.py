"""The arms of the study: what places a job's pods.

An arm gets three hooks on the same replay (`runner.run_arm`): `Arm.start` once the cluster is up
(start a webhook, register it), `Arm.before_pods` after the job object exists and before its pods
are created (create a PodGroup), and `Arm.pod` for each pod the "operator" creates (add affinity,
a scheduling group). Everything else — the cluster, the trace, the job objects and pods, when a job
finishes — is the runner's and identical for every arm.

* ``default`` — kube-scheduler alone;
* ``self-affinity`` — each pod requires podAffinity to its own job's pods on the zone key;
* ``podium`` — ``podium serve`` pinning at admission (``zone-chooser: pin``): podium picks the
  zone and pins it (its reservation window compressed like the trace);
* ``podium-hold`` — ``podium serve`` holding each gang behind its scheduling gate until one zone
  has room for all of it (``zone-chooser: hold``), on a cluster *without* the scheduler's gang
  gates (`Arm.gang_gates`): the mode meant for clusters that lack them;
* ``podium-uncompressed`` — the same with every setting at its default (not a default arm);
* ``scheduler`` — kube-scheduler's PodGroup gang + topology placement, with the *harness*
  creating the PodGroup and setting ``spec.schedulingGroup.podGroupName``, as podium's scheduler
  mode will at admission;
* ``podium-scheduler`` — ``podium serve`` in that scheduler mode (``zone-chooser: scheduler``,
  `PODIUM_SCHEDULER_CONFIG`): podium makes the PodGroup and sets the pods' scheduling group at
  admission;
* ``kueue-tas`` — Kueue's Topology Aware Scheduling on plain-pod groups (`bench.placement.kueue`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.placement.trace import SIM_MINUTES_PER_SECOND, TraceJob
from testbed.controlplane import ApiError, LocalCluster
from testbed.podium import Podium

ZONE_LABEL = "topology.kubernetes.io/zone"
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
#: Which attempt of its job a pod belongs to (0 first, then one per retry; set by the runner).
ATTEMPT_LABEL = "bench.podium.dev/attempt"
#: The webhook name of podium's shipped MutatingWebhookConfiguration (the apiserver's metric
#: labels its latency with it).
PODIUM_WEBHOOK = "pods.podium.dev"

#: The ``podium serve --config`` YAML that turns on podium's scheduler placement mode (podium
#: creates the PodGroup and sets ``spec.schedulingGroup``; kube-scheduler picks the zone).
PODIUM_SCHEDULER_CONFIG: str | None = "zone-chooser: scheduler\n"
#: podium's immediate pin, named explicitly (``pin``, also read as its older name ``podium``), so
#: the arm stays what it is whatever podium's default mode.
PODIUM_PIN_CONFIG = "zone-chooser: pin\n"

#: podium's one setting that is a span of *job* time, compressed like the trace: a decided gang's
#: demand that its pods have not yet bound, finished or left counts as taken for at most
#: ``reservation-seconds`` (default 600 s, ten minutes), so in the study 600 simulated seconds.
#: Left at 600 real seconds it would hold for 600 simulated minutes — the whole run (the
#: ``podium-uncompressed`` arm shows what that does).
PODIUM_RESERVATION_SIM_SECONDS = 600.0
PODIUM_STUDY_CONFIG = (
    f"reservation-seconds: {PODIUM_RESERVATION_SIM_SECONDS / (60 * SIM_MINUTES_PER_SECOND):g}\n"
)
#: podium's hold with its defaults: a gang waits until one zone has room for all of it. The
#: releaser's period (``release-interval-seconds``, 2 s) is not compressed: podium also passes
#: 0.2 s (12 simulated seconds) after each pod that ends or goes and each held pod that comes,
#: the lag that counts; the study's room → last bind metric shows what it costs.
PODIUM_HOLD_CONFIG = "zone-chooser: hold\n"
#: The hold's timeout as a cluster with an autoscaler would set it, a span of job time compressed
#: like the reservations: a held gang that still fits no zone after 30 simulated minutes (30 real
#: seconds here) is released pinned to the roomiest zone, whether or not it has room.
PODIUM_HOLD_TIMEOUT_SIM_SECONDS = 1800.0
PODIUM_HOLD_TIMEOUT_CONFIG = (
    f"hold-timeout-seconds: {PODIUM_HOLD_TIMEOUT_SIM_SECONDS / (60 * SIM_MINUTES_PER_SECOND):g}\n"
)
#: The hold without its order rule: every gang that fits goes, none keeps a zone draining for it.
PODIUM_FIT_FIRST_CONFIG = "hold-order: fit-first\n"


@dataclass
class RunContext:
    cluster: LocalCluster
    namespace: str
    work_dir: Path


class Arm:
    """kube-scheduler alone: the pods as the operator makes them."""

    name = "default"
    #: Labels of the namespace the jobs run in (podium's opt-in, for podium's arms).
    namespace_labels: Mapping[str, str] = {}
    #: The webhook whose admission latency the apiserver reports, if the arm has one.
    webhook: str | None = None
    #: Whether the cluster runs with kube-scheduler's gang gates (GenericWorkload,
    #: TopologyAwareWorkloadScheduling) on: every arm but the ones made for clusters without them.
    gang_gates: bool = True

    def start(self, ctx: RunContext) -> None:
        """Once per run, after the cluster is up and before the first job."""

    def stop(self) -> None:
        """After the run (also on failure)."""

    def replay_started(self, ctx: RunContext, t0: float) -> None:
        """When the replay's clock starts (``time.monotonic()`` = ``t0``), before the first job."""

    def observations(self) -> dict[str, Any] | None:
        """What the arm itself saw during the replay, kept in the run's record (``observed``)."""
        return None

    def before_pods(self, ctx: RunContext, job: TraceJob, job_obj: Mapping[str, Any]) -> None:
        """After the job object is created, before its pods are."""

    def pod(self, job: TraceJob, pod: dict[str, Any]) -> dict[str, Any]:
        """The pod the operator creates, as this arm wants it; returns it (may modify it)."""
        return pod

    def ending(self, ctx: RunContext, job: TraceJob, attempt: int, *, succeeded: bool) -> None:
        """Before the runner deletes an attempt's pods: it ran its course (``succeeded``) or
        failed (timed out, split)."""


class SelfAffinity(Arm):
    """The JobSet/Kyverno-style recipe: required podAffinity to the job's own pods on the zone
    key. The first pod scheduled picks a zone (its own selector matches itself, so it may go
    anywhere), whether or not the rest of the gang fits there."""

    name = "self-affinity"

    def pod(self, job: TraceJob, pod: dict[str, Any]) -> dict[str, Any]:
        pod["spec"]["affinity"] = {
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": {JOB_NAME_LABEL: job.name}},
                        "topologyKey": ZONE_LABEL,
                    }
                ]
            }
        }
        return pod


def podgroup(
    name: str, namespace: str, min_count: int, owner: Mapping[str, Any], zone_label: str
) -> dict[str, Any]:
    """A gang PodGroup that keeps the whole group in one domain of ``zone_label``, owned by the
    job (the API shape observed on kube-apiserver v1.37.2, docs/benchmarks/placement.md)."""
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace, "ownerReferences": [dict(owner)]},
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": min_count}},
            "schedulingConstraints": {"topology": [{"key": zone_label}]},
        },
    }


class SchedulerGang(Arm):
    """kube-scheduler's own gang + topology placement (gates GenericWorkload and
    TopologyAwareWorkloadScheduling): one PodGroup per job with ``gang.minCount`` = the gang's
    size and a zone topology constraint, and every pod naming it in
    ``spec.schedulingGroup.podGroupName``. The harness does what podium's scheduler mode will do
    at admission, so this arm runs today."""

    name = "scheduler"

    def before_pods(self, ctx: RunContext, job: TraceJob, job_obj: Mapping[str, Any]) -> None:
        meta = job_obj["metadata"]
        owner = {
            "apiVersion": job_obj["apiVersion"],
            "kind": job_obj["kind"],
            "name": meta["name"],
            "uid": meta["uid"],
        }
        ctx.cluster.request(
            "POST",
            f"/apis/scheduling.k8s.io/v1beta1/namespaces/{ctx.namespace}/podgroups",
            podgroup(job.name, ctx.namespace, job.pods, owner, ZONE_LABEL),
        )

    def pod(self, job: TraceJob, pod: dict[str, Any]) -> dict[str, Any]:
        pod["spec"]["schedulingGroup"] = {"podGroupName": job.name}
        return pod


class PodiumArm(Arm):
    """``podium serve`` as a process beside the cluster (as the e2e tests run it), with the shipped
    webhook configuration pointed at it and the jobs' namespace opted in. Its settings
    (``config``, podium.yaml text) are the defaults with the reservation window compressed like
    the trace (`PODIUM_STUDY_CONFIG`)."""

    namespace_labels: Mapping[str, str] = {"podium.dev/enabled": "true"}
    webhook: str | None = PODIUM_WEBHOOK

    def __init__(
        self,
        name: str = "podium",
        config: str | None = PODIUM_STUDY_CONFIG + PODIUM_PIN_CONFIG,
        *,
        gang_gates: bool = True,
    ) -> None:
        self.name = name
        self.config = config
        self.gang_gates = gang_gates
        self.server: Podium | None = None

    def start(self, ctx: RunContext) -> None:
        ensure_namespace(ctx.cluster, "podium-system")  # its reconciler's Lease lives there
        self.server = Podium(ctx.cluster, ctx.work_dir / "podium", config=self.config)
        self.server.start()
        self.server.register()
        self.server.wait_until_called()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None


def podium_scheduler() -> Arm:
    if PODIUM_SCHEDULER_CONFIG is None:
        raise SystemExit(
            "the podium-scheduler arm needs podium's scheduler placement mode: set "
            "bench.placement.arms.PODIUM_SCHEDULER_CONFIG to the podium.yaml that enables it"
        )
    return PodiumArm(name="podium-scheduler", config=PODIUM_STUDY_CONFIG + PODIUM_SCHEDULER_CONFIG)


def podium_uncompressed() -> Arm:
    """podium's pin with all other settings at their defaults: its 600 s reservation window left
    in real seconds."""
    return PodiumArm(name="podium-uncompressed", config=PODIUM_PIN_CONFIG)


def podium_hold() -> Arm:
    """podium's hold, its settings at their defaults, on a cluster without the scheduler's gang
    gates: nothing but podium keeps a gang from binding partially."""
    return PodiumArm(
        name="podium-hold", config=PODIUM_STUDY_CONFIG + PODIUM_HOLD_CONFIG, gang_gates=False
    )


def podium_hold_timeout() -> Arm:
    """The hold with a 30-minute timeout, as for an autoscaler (``--arms``)."""
    return PodiumArm(
        name="podium-hold-timeout",
        config=PODIUM_STUDY_CONFIG + PODIUM_HOLD_CONFIG + PODIUM_HOLD_TIMEOUT_CONFIG,
        gang_gates=False,
    )


def podium_hold_fit_first() -> Arm:
    """The hold with ``hold-order: fit-first`` (``--arms``)."""
    return PodiumArm(
        name="podium-hold-fit-first",
        config=PODIUM_STUDY_CONFIG + PODIUM_HOLD_CONFIG + PODIUM_FIT_FIRST_CONFIG,
        gang_gates=False,
    )


def kueue_tas() -> Arm:
    """Kueue's Topology Aware Scheduling (`bench.placement.kueue`, which builds on this module)."""
    from bench.placement.kueue import KueueTas  # noqa: PLC0415 (it imports this module)

    return KueueTas()


ARMS: dict[str, Callable[[], Arm]] = {
    "default": Arm,
    "self-affinity": SelfAffinity,
    "podium": PodiumArm,
    "podium-hold": podium_hold,
    "podium-hold-timeout": podium_hold_timeout,
    "podium-hold-fit-first": podium_hold_fit_first,
    "scheduler": SchedulerGang,
    "podium-scheduler": podium_scheduler,
    "podium-uncompressed": podium_uncompressed,
    "kueue-tas": kueue_tas,
}
#: The arms `python -m bench placement` runs unless told otherwise (~100 minutes for three
#: seeds); the others run with ``--arms`` and are merged into the same results.
DEFAULT_ARMS = (
    "default",
    "self-affinity",
    "podium",
    "podium-hold",
    "scheduler",
    "podium-scheduler",
    "kueue-tas",
)


def ensure_namespace(cluster: LocalCluster, name: str) -> None:
    try:
        cluster.create_namespace(name)
    except ApiError as error:
        if error.status != 409:
            raise

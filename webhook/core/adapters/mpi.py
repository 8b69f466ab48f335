"""mpi-operator v2 MPIJobs (``kubeflow.org/v2beta1``).

Workers are pods the MPIJob controls directly (``<job>-worker-<i>``). The launcher, which runs
``mpirun`` and is the coordinator, is the pod of a ``batch/v1`` Job ``<job>-launcher`` that the
MPIJob controls; mpi-operator creates it last (or only once the workers are ready), so it usually
finds its workers already placed. The labels ``training.kubeflow.org/{operator-name,job-name,
job-role}`` only narrow searches: the job's identity comes from the controller chain.

``kubeflow.org/v1`` MPIJobs belong to the training-operator adapter; this one takes only v2beta1.

Source: kubeflow/mpi-operator ``pkg/controller/mpi_job_controller.go`` (newWorker,
newLauncherJob, defaultLabels) and ``pkg/apis/kubeflow/v2beta1/default.go`` (replicas default to 1
for the Launcher and to 0 for Workers).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from webhook.core.adapters import base
from webhook.core.objects import Obj, annotations_of, as_mapping, labels_of, uid_of

if TYPE_CHECKING:
    from webhook.core.view import View

GROUP = "kubeflow.org"
API_VERSION = "kubeflow.org/v2beta1"
KIND = "MPIJob"
JOB_NAME = "training.kubeflow.org/job-name"
JOB_ROLE = "training.kubeflow.org/job-role"
LAUNCHER_SUFFIX = "-launcher"
#: replica type → replicas when unset (mpi-operator defaults them itself, not the apiserver).
DEFAULT_REPLICAS: Mapping[str, int] = {"Launcher": 1, "Worker": 0}
WAIT_FOR_WORKERS = "WaitForWorkersReady"


class MPIOperatorAdapter:
    name = "mpi-operator"
    reads = base.Reads(
        kinds=(base.Kind(API_VERSION, KIND, "mpijobs"), base.BATCH_JOB),
        pod_prefixes=("training.kubeflow.org/",),
        member_labels=frozenset({JOB_NAME}),
    )

    def recognise(self, pod: Obj, namespace: str, view: View) -> base.Gang | None:
        ref = base.controller(pod, GROUP, (KIND,))
        if ref is not None:
            if ref.get("apiVersion") != API_VERSION:
                return None
            role = "worker"
            owner = base.OwnerRef.from_reference(ref)
            job = base.verified(view, ref, namespace)
        else:
            launcher_job = base.controller(pod, "batch", ("Job",))
            found = _launcher_owner(pod, launcher_job, namespace, view) if launcher_job else None
            if found is None:
                return None
            role = "launcher"
            owner, job = found
        demand, source = base.demand_or_fallback(base.job_groups(view, job, _groups), pod)
        pod_labels = labels_of(pod)
        return base.Gang(
            framework="mpijob",
            owner=owner,
            key=owner.uid,
            role=role,
            coordinator=role == "launcher",
            demand=demand,
            demand_source=source,
            member_labels={JOB_NAME: owner.name} if pod_labels.get(JOB_NAME) == owner.name else {},
            job_annotations=annotations_of(job),
        )


def _launcher_owner(
    pod: Obj, launcher_job: Mapping[str, Any], namespace: str, view: View
) -> tuple[base.OwnerRef, Obj | None] | None:
    """The MPIJob behind a launcher pod's batch Job, and the MPIJob object if the view has it."""
    batch_job = base.verified(view, launcher_job, namespace)
    if batch_job is not None:
        ref = base.controller(batch_job, GROUP, (KIND,))
        if ref is None or ref.get("apiVersion") != API_VERSION:
            return None
        if launcher_job["name"] != f"{ref['name']}{LAUNCHER_SUFFIX}":
            return None
        return base.OwnerRef.from_reference(ref), base.verified(view, ref, namespace)
    # The batch Job is not in the view yet (it was created moments ago). The labels name the
    # MPIJob; accept them only if the naming agrees and the MPIJob itself, with its UID, is known.
    pod_labels = labels_of(pod)
    name = pod_labels.get(JOB_NAME)
    if not name or pod_labels.get(JOB_ROLE) != "launcher":
        return None
    if launcher_job["name"] != f"{name}{LAUNCHER_SUFFIX}":
        return None
    mpijob = view.get(API_VERSION, KIND, namespace, name)
    if mpijob is None or mpijob.get("apiVersion") != API_VERSION:
        return None
    if not base.is_label_value(uid_of(mpijob)):
        return None
    return base.OwnerRef.from_object(mpijob), mpijob


def first_stage(job: Obj) -> base.Stage | None:
    """With ``launcherCreationPolicy: WaitForWorkersReady`` mpi-operator creates the launcher only
    once every worker is ready: the workers are the pods to wait for. None for any other job."""
    if job.get("apiVersion") != API_VERSION or job.get("kind") != KIND:
        return None
    spec = as_mapping(job.get("spec"))
    if spec.get("launcherCreationPolicy") != WAIT_FOR_WORKERS:
        return None
    worker = as_mapping(as_mapping(spec.get("mpiReplicaSpecs")).get("Worker"))
    workers = base.parse_count(worker.get("replicas"), DEFAULT_REPLICAS["Worker"])
    if not workers:
        return None
    return base.Stage(
        workers, f"launcherCreationPolicy {WAIT_FOR_WORKERS}: the launcher follows its workers"
    )


def _groups(job: Obj) -> tuple[base.PodGroup | None, ...]:
    specs = as_mapping(as_mapping(job.get("spec")).get("mpiReplicaSpecs"))
    return tuple(_group(specs.get(rtype), default) for rtype, default in DEFAULT_REPLICAS.items())


def _group(spec: object, default_replicas: int) -> base.PodGroup | None:
    spec = as_mapping(spec)
    replicas = base.parse_count(spec.get("replicas"), default_replicas)
    return None if replicas is None else base.template_group(spec.get("template"), replicas)

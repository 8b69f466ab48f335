"""JobSet (``jobset.x-k8s.io/v1alpha2``), and so Kubeflow Trainer v2 TrainJob, which owns one.

Chain: pod → (controller) ``batch/v1`` Job ``<jobset>-<replicatedJob>-<jobIndex>`` → (controller)
JobSet → (controller, for Trainer v2) TrainJob. The gang is the JobSet: its UID is the key and it
owns podium's objects (a TrainJob's JobSet goes when the TrainJob does); ``framework`` says
``trainjob`` when the view holds the controlling TrainJob. If the batch Job is not in
the view yet, the ``jobset-name``/``jobset-uid`` labels are taken only from a pod whose controller
is a batch Job named ``<jobset-name>-…``.

Coordinator, with the JobSet in the view: the pod ``spec.coordinator`` names; else, for a JobSet a
TrainJob controls (whether or not the TrainJob is in the view), job 0 pod 0 of ``launcher`` (MPI
runtimes) or else of ``node`` (the initializer jobs come first in the list but do not coordinate);
else job 0 pod 0 of the first replicated job.
Without the JobSet, judged from the pod alone and deliberately conservative (a missed coordinator
only means the gang's zone is chosen for the whole gang; two coordinators could split it): the
``jobset.sigs.k8s.io/coordinator`` endpoint the controller writes when ``spec.coordinator`` is set;
else a literal ``PET_MASTER_ADDR``/``MASTER_ADDR`` naming the pod's own hostname (Trainer v2
torch: ``<trainjob>-node-0-0.<trainjob>``); else job 0 pod 0 of a replicated job named like a
coordinator (``launcher``, ``leader``, ``master``, ``driver``, ``coordinator``).

Source: kubernetes-sigs/jobset ``api/jobset/v1alpha2/jobset_types.go`` (label keys, Coordinator,
replicas default 1) and ``pkg/controllers/jobset_controller.go`` (labelAndAnnotateObject,
coordinatorEndpoint); kubeflow/trainer ``pkg/constants/constants.go`` (``node``, ``launcher``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from webhook.core.adapters import base
from webhook.core.objects import Obj, annotations_of, as_list, as_mapping, labels_of

if TYPE_CHECKING:
    from webhook.core.view import View

GROUP = "jobset.x-k8s.io"
API_VERSION = "jobset.x-k8s.io/v1alpha2"
KIND = "JobSet"
TRAINJOB_API_VERSION = "trainer.kubeflow.org/v1alpha1"
TRAINJOB_GROUP = "trainer.kubeflow.org"
TRAINJOB_KIND = "TrainJob"
NAME = "jobset.sigs.k8s.io/jobset-name"
UID = "jobset.sigs.k8s.io/jobset-uid"
REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
#: The number of child Jobs (not pods) in the JobSet.
GLOBAL_REPLICAS = "jobset.sigs.k8s.io/global-replicas"
COORDINATOR = "jobset.sigs.k8s.io/coordinator"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
COORDINATOR_NAMES = frozenset({"launcher", "leader", "master", "driver", "coordinator"})
MASTER_ENV = ("PET_MASTER_ADDR", "MASTER_ADDR")

Position = tuple[str | None, str | None, str | None]  # (replicated job, job index, pod index)


class JobSetAdapter:
    name = "jobset"
    reads = base.Reads(
        kinds=(
            base.Kind(API_VERSION, KIND, "jobsets"),
            base.BATCH_JOB,
            base.Kind(TRAINJOB_API_VERSION, TRAINJOB_KIND, "trainjobs"),
        ),
        pod_prefixes=("jobset.sigs.k8s.io/",),
        pod_keys=frozenset({COMPLETION_INDEX}),
        pod_env=frozenset(MASTER_ENV),
        member_labels=frozenset({NAME}),
    )

    def recognise(self, pod: Obj, namespace: str, view: View) -> base.Gang | None:
        batch_job = base.controller(pod, "batch", ("Job",))
        ref = _jobset_ref(pod, batch_job, namespace, view) if batch_job else None
        if ref is None:
            return None
        owner = base.OwnerRef.from_reference(ref)
        jobset = base.verified(view, ref, namespace)
        pod_labels = labels_of(pod)
        index = annotations_of(pod).get(COMPLETION_INDEX) or pod_labels.get(COMPLETION_INDEX)
        position = (pod_labels.get(REPLICATED_JOB), pod_labels.get(JOB_INDEX), index)
        trainjob = base.controller(jobset, TRAINJOB_GROUP, (TRAINJOB_KIND,)) if jobset else None
        spec = as_mapping((jobset or {}).get("spec"))
        if jobset is not None:
            coordinator = position == _coordinator_of(spec, trainjob=trainjob is not None)
        else:
            coordinator = _looks_like_coordinator(pod, owner.name, position)
        demand, source = _demand(base.job_groups(view, jobset, _groups), pod, pod_labels)
        in_trainjob = trainjob is not None and base.verified(view, trainjob, namespace) is not None
        return base.Gang(
            framework="trainjob" if in_trainjob else "jobset",
            owner=owner,
            key=owner.uid,
            role=position[0] or "unknown",
            coordinator=coordinator,
            demand=demand,
            demand_source=source,
            member_labels={NAME: owner.name} if pod_labels.get(NAME) == owner.name else {},
            job_annotations=annotations_of(jobset),
            shown=base.OwnerRef.from_reference(trainjob) if in_trainjob and trainjob else None,
        )


def _jobset_ref(
    pod: Obj, batch_job: Mapping[str, Any], namespace: str, view: View
) -> Mapping[str, Any] | None:
    job = base.verified(view, batch_job, namespace)
    if job is not None:
        return base.controller(job, GROUP, (KIND,))
    pod_labels = labels_of(pod)
    name, uid = pod_labels.get(NAME), pod_labels.get(UID)
    if not name or not base.is_label_value(uid) or not batch_job["name"].startswith(f"{name}-"):
        return None
    return {"apiVersion": API_VERSION, "kind": KIND, "name": name, "uid": uid}


def _coordinator_of(spec: Mapping[str, Any], *, trainjob: bool) -> Position:
    chosen = as_mapping(spec.get("coordinator"))
    if isinstance(chosen.get("replicatedJob"), str):
        job_index = base.parse_count(chosen.get("jobIndex"), 0)
        pod_index = base.parse_count(chosen.get("podIndex"), 0)
        return chosen["replicatedJob"], _str(job_index), _str(pod_index)
    names = [
        name
        for rjob in as_list(spec.get("replicatedJobs"))
        if isinstance(name := as_mapping(rjob).get("name"), str)
    ]
    preferred = [n for n in ("launcher", "node") if n in names] if trainjob else []
    first = next(iter(preferred or names), None)
    return (first, "0", "0") if first else (None, None, None)


def _looks_like_coordinator(pod: Obj, jobset_name: str, position: Position) -> bool:
    rjob, job_index, pod_index = position
    if not (rjob and job_index and pod_index):
        return False
    hostname = f"{jobset_name}-{rjob}-{job_index}-{pod_index}"
    endpoint = annotations_of(pod).get(COORDINATOR) or labels_of(pod).get(COORDINATOR)
    if endpoint:
        return endpoint.split(".", 1)[0] == hostname
    for name in MASTER_ENV:
        value = base.env_value(pod, name)
        if value and value.split(".", 1)[0] == hostname:
            return True
    return rjob in COORDINATOR_NAMES and job_index == "0" and pod_index == "0"


def first_stage(jobset: Obj) -> base.Stage | None:
    """The replicated jobs JobSet starts first when it starts them in stages: the first one with
    ``startupPolicy.startupPolicyOrder: InOrder`` (each starts once the one before is ready), or
    those without ``dependsOn`` (the others wait for one of them to be ready or complete). None
    for any other job, and for a JobSet that starts all at once."""
    if jobset.get("apiVersion") != API_VERSION or jobset.get("kind") != KIND:
        return None
    spec = as_mapping(jobset.get("spec"))
    rjobs = [as_mapping(r) for r in as_list(spec.get("replicatedJobs"))]
    if as_mapping(spec.get("startupPolicy")).get("startupPolicyOrder") == "InOrder":
        first, why = rjobs[:1], "startupPolicyOrder InOrder"
    else:
        first, why = [r for r in rjobs if not r.get("dependsOn")], "dependsOn"
    counts = [_pods(r) for r in first]
    if len(first) == len(rjobs) or None in counts:
        return None
    named = ", ".join(str(r.get("name")) for r in first)
    return base.Stage(sum(n for n in counts if n is not None), f"{why}: {named} start(s) first")


def _pods(rjob: Mapping[str, Any]) -> int | None:
    """How many pods a replicated job runs at once: ``replicas`` Jobs of ``parallelism`` pods."""
    job_spec = as_mapping(as_mapping(rjob.get("template")).get("spec"))
    replicas = base.parse_count(rjob.get("replicas"), 1)
    parallelism = base.parse_count(job_spec.get("parallelism"), 1)
    return None if replicas is None or parallelism is None else replicas * parallelism


def _groups(jobset: Obj) -> tuple[base.PodGroup | None, ...]:
    groups = []
    for item in as_list(as_mapping(jobset.get("spec")).get("replicatedJobs")):
        rjob = as_mapping(item)
        job_spec = as_mapping(as_mapping(rjob.get("template")).get("spec"))
        if (pods := _pods(rjob)) is not None:
            groups.append(base.template_group(job_spec.get("template"), pods))
    return tuple(groups)


def _demand(
    groups: Sequence[base.PodGroup | None], pod: Obj, pod_labels: Mapping[str, str]
) -> tuple[tuple[base.PodGroup, ...], base.DemandSource]:
    usable = tuple(g for g in groups if g is not None and g.count)
    if usable:
        return usable, "job"
    # global-replicas counts child Jobs, not pods (a Job may run several): where the env's world
    # size (Trainer v2 sets PET_NNODES) is larger, it is the better estimate.
    jobs = base.parse_count(pod_labels.get(GLOBAL_REPLICAS)) or 0
    (env_demand, source) = base.fallback_demand(pod)
    if jobs > env_demand[0].count:
        return (base.PodGroup(jobs, env_demand[0].requests),), "labels"
    return env_demand, source


def _str(value: int | None) -> str | None:
    return None if value is None else str(value)

"""Kubeflow training-operator v1 jobs (``kubeflow.org/v1``): PyTorch, TF, MPI, XGBoost, Paddle, JAX.

Pods are owned by the job itself (``controller: true``) and labelled by the operator with
``training.kubeflow.org/{job-name,replica-type,replica-index}``; ``job-role=master`` marks the
coordinator. The operator creates all replica types in one pass, so the coordinator is not first.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from webhook.core.adapters import base
from webhook.core.objects import Obj, annotations_of, as_mapping, labels_of

if TYPE_CHECKING:
    from webhook.core.view import View

GROUP = "kubeflow.org"
API_VERSION = "kubeflow.org/v1"
JOB_NAME = "training.kubeflow.org/job-name"
REPLICA_TYPE = "training.kubeflow.org/replica-type"
REPLICA_INDEX = "training.kubeflow.org/replica-index"
JOB_ROLE = "training.kubeflow.org/job-role"

#: kind → (replica-specs field, replica types that are the coordinator, in order of preference)
KINDS: Mapping[str, tuple[str, tuple[str, ...]]] = {
    "PyTorchJob": ("pytorchReplicaSpecs", ("master",)),
    "TFJob": ("tfReplicaSpecs", ("chief", "master")),
    "MPIJob": ("mpiReplicaSpecs", ("launcher",)),
    "XGBoostJob": ("xgbReplicaSpecs", ("master",)),
    "PaddleJob": ("paddleReplicaSpecs", ("master",)),
    "JAXJob": ("jaxReplicaSpecs", ()),
}

_KIND_NAMES = tuple(KINDS)


class TrainingOperatorAdapter:
    name = "training-operator"
    reads = base.Reads(
        kinds=tuple(base.Kind(API_VERSION, kind, kind.lower() + "s") for kind in KINDS),
        pod_prefixes=("training.kubeflow.org/",),
        member_labels=frozenset({JOB_NAME}),
    )

    def recognise(self, pod: Obj, namespace: str, view: View) -> base.Gang | None:
        ref = base.controller(pod, GROUP, _KIND_NAMES)
        if ref is None or ref.get("apiVersion") != API_VERSION:
            return None
        kind = str(ref["kind"])
        labels = labels_of(pod)
        owner = base.OwnerRef.from_reference(ref)
        job = base.verified(view, ref, namespace)  # None for a newer job reusing the name
        _, coordinator_types = KINDS[kind]
        present = view.derived(job, _replica_types) if job is not None else frozenset()
        role = str(labels.get(REPLICA_TYPE) or "").lower()
        demand, source = base.demand_or_fallback(base.job_groups(view, job, _groups), pod)
        return base.Gang(
            framework=kind.lower(),
            owner=owner,
            key=owner.uid,
            role=role or "unknown",
            coordinator=_is_coordinator(labels, role, coordinator_types, present),
            demand=demand,
            demand_source=source,
            member_labels={JOB_NAME: owner.name} if labels.get(JOB_NAME) == owner.name else {},
            job_annotations=annotations_of(job),
        )


def first_stage(job: Obj) -> base.Stage | None:
    """An elastic PyTorchJob runs once ``elasticPolicy.minReplicas`` workers are there, beside its
    other replicas: the pods the releaser waits for. The bounds as the operator defaults them
    (``setElasticPolicy``: a missing one takes the other's value, both missing take
    ``Worker.replicas``), never more than ``Worker.replicas``. None for any other job."""
    if job.get("apiVersion") != API_VERSION or job.get("kind") != "PyTorchJob":
        return None
    elastic = as_mapping(job.get("spec")).get("elasticPolicy")
    if not isinstance(elastic, Mapping):
        return None
    replicas = {
        str(rtype).lower(): base.parse_count(as_mapping(spec).get("replicas"), 1)
        for rtype, spec in _specs(job).items()
    }
    workers = replicas.pop("worker", None)
    if workers is None or None in replicas.values():
        return None
    low = base.parse_count(elastic.get("minReplicas"))
    high = base.parse_count(elastic.get("maxReplicas"))
    least = min(workers, next((n for n in (low, high) if n is not None), workers))
    others = sum(n for n in replicas.values() if n is not None)
    return base.Stage(
        max(1, others + least), f"elastic: runs with elasticPolicy.minReplicas {least} workers"
    )


def _specs(job: Obj) -> Mapping[str, Any]:
    field = KINDS.get(str(job.get("kind")), ("",))[0]
    return as_mapping(as_mapping(job.get("spec")).get(field))


def _replica_types(job: Obj) -> frozenset[str]:
    """The job's replica types, lowercased as the operator writes them into pod labels."""
    return frozenset(str(t).lower() for t in _specs(job))


def _groups(job: Obj) -> tuple[base.PodGroup | None, ...]:
    specs = _specs(job)
    return tuple(
        base.template_group(spec.get("template"), spec.get("replicas"))
        for spec in specs.values()
        if isinstance(spec, Mapping)
    )


def _is_coordinator(
    labels: Mapping[str, str],
    role: str,
    coordinator_types: tuple[str, ...],
    present: frozenset[str],
) -> bool:
    if labels.get(JOB_ROLE) == "master":
        return True
    for rtype in coordinator_types:
        if not present or rtype in present:
            return role == rtype
    # No coordinator replica type in this job: worker 0 coordinates (PyTorch/TF/JAX convention).
    return role == "worker" and labels.get(REPLICA_INDEX) == "0"

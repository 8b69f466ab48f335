"""One adapter per job framework; ``recognise`` asks them in order and returns the first answer.

The adapters' claims do not overlap: each starts from a different controller ownerReference
(training-operator: a ``kubeflow.org/v1`` job; mpi-operator: a ``kubeflow.org/v2beta1`` MPIJob, or
a batch Job that one controls; JobSet: a batch Job that a JobSet controls; LWS: a StatefulSet;
Volcano: a ``batch.volcano.sh`` Job; KubeRay: a RayCluster), so the order only decides who looks
first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from webhook.core.adapters import jobset, kuberay, lws, mpi, trainingoperator, volcano
from webhook.core.adapters.base import (
    WORLD_SIZE_ENV,
    Adapter,
    Gang,
    Kind,
    Stage,
    is_label_value,
)
from webhook.core.objects import Obj, is_mapping
from webhook.core.view import Kept, View

ADAPTERS: Sequence[Adapter] = (
    trainingoperator.TrainingOperatorAdapter(),
    mpi.MPIOperatorAdapter(),
    jobset.JobSetAdapter(),
    lws.LeaderWorkerSetAdapter(),
    volcano.VolcanoAdapter(),
    kuberay.KubeRayAdapter(),
)

# What all the adapters read (``base.Reads``), for the watch cache and the view.
#: Every kind, once, in the adapters' order.
KINDS: tuple[Kind, ...] = tuple(dict.fromkeys(k for a in ADAPTERS for k in a.reads.kinds))
#: What the view keeps of other pods: every framework label, annotation and env value an adapter
#: reads from a pod, and the labels that name a gang's members, indexed.
KEPT = Kept(
    prefixes=tuple(dict.fromkeys(p for a in ADAPTERS for p in a.reads.pod_prefixes)),
    keys=frozenset().union(*(a.reads.pod_keys for a in ADAPTERS)),
    env=frozenset(WORLD_SIZE_ENV).union(*(a.reads.pod_env for a in ADAPTERS)),
    indexed_labels=frozenset().union(*(a.reads.member_labels for a in ADAPTERS)),
)


#: Each framework's staged or elastic start (``base.Stage``), asked in turn about a job object.
FIRST_STAGES: Sequence[Callable[[Obj], Stage | None]] = (
    trainingoperator.first_stage,
    mpi.first_stage,
    jobset.first_stage,
    lws.first_stage,
)


def first_stage(job: Obj) -> Stage | None:
    """The pods of ``job``'s gang its operator creates first, when it does not create them all at
    once or the job is elastic; None when it does (or the job is none an adapter knows)."""
    for stage_of in FIRST_STAGES:
        if (stage := stage_of(job)) is not None:
            return stage
    return None


def recognise(pod: Obj, namespace: str, view: View) -> Gang | None:
    if not is_mapping(pod):
        return None
    for adapter in ADAPTERS:
        gang = adapter.recognise(pod, namespace, view)
        # The key becomes a label value on every member; an adapter bug must not make it invalid.
        if gang is not None and is_label_value(gang.key):
            return gang
    return None

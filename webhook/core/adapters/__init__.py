"""One adapter per job framework; ``recognise`` asks them in order and returns the first answer.

The adapters' claims do not overlap: each starts from a different controller ownerReference
(training-operator: a ``kubeflow.org/v1`` job; mpi-operator: a ``kubeflow.org/v2beta1`` MPIJob, or
a batch Job that one controls; JobSet: a batch Job that a JobSet controls; LWS: a StatefulSet;
Volcano: a ``batch.volcano.sh`` Job; KubeRay: a RayCluster), so the order only decides who looks
first.
"""

from __future__ import annotations

from collections.abc import Sequence

from webhook.core.adapters import jobset, kuberay, lws, mpi, trainingoperator, volcano
from webhook.core.adapters.base import Adapter, Gang, is_label_value
from webhook.core.objects import Obj, is_mapping
from webhook.core.view import ClusterView

ADAPTERS: Sequence[Adapter] = (
    trainingoperator.TrainingOperatorAdapter(),
    mpi.MPIOperatorAdapter(),
    jobset.JobSetAdapter(),
    lws.LeaderWorkerSetAdapter(),
    volcano.VolcanoAdapter(),
    kuberay.KubeRayAdapter(),
)


def recognise(pod: Obj, namespace: str, view: ClusterView) -> Gang | None:
    if not is_mapping(pod):
        return None
    for adapter in ADAPTERS:
        gang = adapter.recognise(pod, namespace, view)
        # The key becomes a label value on every member; an adapter bug must not make it invalid.
        if gang is not None and is_label_value(gang.key):
            return gang
    return None

"""KubeRay RayClusters (``ray.io/v1``), including those a RayJob or RayService creates.

The KubeRay operator creates the head and worker pods itself, controlled by the RayCluster and
labelled ``ray.io/cluster``, ``ray.io/node-type=head|worker`` and ``ray.io/group``. The head (GCS
on 6379) is the coordinator: every worker dials it.

Demand mirrors KubeRay's own count (``GetWorkerGroupDesiredReplicas``): the head, plus per worker
group ``replicas`` clamped to ``[minReplicas, maxReplicas]`` (unset: ``minReplicas``, unset: 0),
times ``numOfHosts`` (default 1); a suspended group counts 0.

Source: ray-project/kuberay ``ray-operator/controllers/ray/utils/constant.go`` and ``util.go``,
``ray-operator/apis/ray/v1/raycluster_types.go``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from webhook.core.adapters import base
from webhook.core.objects import Obj, annotations_of, as_list, as_mapping, labels_of

if TYPE_CHECKING:
    from webhook.core.view import View

GROUP = "ray.io"
API_VERSION = "ray.io/v1"
KIND = "RayCluster"
CLUSTER = "ray.io/cluster"
NODE_TYPE = "ray.io/node-type"
MAX_REPLICAS = 2**31 - 1


class KubeRayAdapter:
    name = "kuberay"
    reads = base.Reads(
        kinds=(base.Kind(API_VERSION, KIND, "rayclusters"),),
        pod_prefixes=("ray.io/",),
        member_labels=frozenset({CLUSTER}),
    )

    def recognise(self, pod: Obj, namespace: str, view: View) -> base.Gang | None:
        ref = base.controller(pod, GROUP, (KIND,))
        if ref is None:
            return None
        owner = base.OwnerRef.from_reference(ref)
        cluster = base.verified(view, ref, namespace)
        demand, source = base.demand_or_fallback(base.job_groups(view, cluster, _groups), pod)
        pod_labels = labels_of(pod)
        node_type = pod_labels.get(NODE_TYPE)
        return base.Gang(
            framework="raycluster",
            owner=owner,
            key=owner.uid,
            role=node_type or "unknown",
            coordinator=node_type == "head",
            demand=demand,
            demand_source=source,
            member_labels={CLUSTER: owner.name} if pod_labels.get(CLUSTER) == owner.name else {},
            job_annotations=annotations_of(cluster),
        )


def _groups(cluster: Obj) -> tuple[base.PodGroup | None, ...]:
    spec = as_mapping(cluster.get("spec"))
    head = as_mapping(spec.get("headGroupSpec"))
    head_group = base.template_group(head.get("template"), 1) if head else None
    return (head_group, *(_workers(g) for g in as_list(spec.get("workerGroupSpecs"))))


def _workers(group: Any) -> base.PodGroup | None:
    group = as_mapping(group)
    low = base.parse_count(group.get("minReplicas"), 0)
    high = base.parse_count(group.get("maxReplicas"), MAX_REPLICAS)
    hosts = base.parse_count(group.get("numOfHosts"), 1)
    wanted = base.parse_count(group.get("replicas"), low)
    if low is None or high is None or hosts is None or wanted is None:
        return None
    replicas = 0 if group.get("suspend") is True else min(max(wanted, low), high)
    return base.template_group(group.get("template"), replicas * hosts)

"""LeaderWorkerSet (``leaderworkerset.x-k8s.io/v1``): every group is a gang of its own.

An LWS with N replicas runs N independent groups of ``size`` pods: the leader ``<lws>-<g>`` from
the leader StatefulSet ``<lws>`` (controlled by the LWS) and the workers ``<lws>-<g>-<w>`` from a
StatefulSet ``<lws>-<g>`` controlled by the leader pod. A group is one model replica, so it must
share a zone, while different groups need not: the gang key is ``<lws uid>-g<group>``. LWS's own
pod webhook writes the labels (``leaderworkerset.sigs.k8s.io/{name,group-index,worker-index}``),
so podium must run after it (``reinvocationPolicy: IfNeeded`` sees them).

Identity: the pod's controller must be a StatefulSet named ``<lws>`` or ``<lws>-…``, and the LWS
must be in the view, since no label or reference on the pod carries its UID. Where the view holds
the StatefulSet chain (worker set → leader pod → leader set → LWS), it must lead to that LWS's UID,
or the pod belongs to an older LWS of the same name.

Source: kubernetes-sigs/lws ``api/leaderworkerset/v1/leaderworkerset_types.go``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from webhook.core.adapters import base
from webhook.core.objects import Obj, annotations_of, as_mapping, labels_of, uid_of

if TYPE_CHECKING:
    from webhook.core.view import View

GROUP = "leaderworkerset.x-k8s.io"
API_VERSION = "leaderworkerset.x-k8s.io/v1"
KIND = "LeaderWorkerSet"
NAME = "leaderworkerset.sigs.k8s.io/name"
GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
#: Env LWS injects into every container: the number of pods in the group.
GROUP_SIZE_ENV = "LWS_GROUP_SIZE"
LEADER_READY = "LeaderReady"
STATEFUL_SET = base.Kind("apps/v1", "StatefulSet", "statefulsets")


class LeaderWorkerSetAdapter:
    name = "leaderworkerset"
    reads = base.Reads(
        # The chain also passes through the leader pod, which the view always holds.
        kinds=(base.Kind(API_VERSION, KIND, "leaderworkersets"), STATEFUL_SET),
        pod_prefixes=("leaderworkerset.sigs.k8s.io/",),
        pod_env=frozenset({GROUP_SIZE_ENV}),
        member_labels=frozenset({NAME}),
    )

    def recognise(self, pod: Obj, namespace: str, view: View) -> base.Gang | None:
        sts = base.controller(pod, "apps", ("StatefulSet",))
        pod_labels = labels_of(pod)
        name, group = pod_labels.get(NAME), pod_labels.get(GROUP_INDEX)
        if sts is None or not name or group is None or base.parse_count(group) is None:
            return None
        if sts["name"] != name and not sts["name"].startswith(f"{name}-"):
            return None
        lws = view.get(API_VERSION, KIND, namespace, name)
        uid = uid_of(lws)
        if lws is None or uid is None or not _chain_agrees(view, sts, namespace, uid):
            return None
        key = base.group_gang_key(uid, group)
        if not base.is_label_value(key):
            return None
        worker = pod_labels.get(WORKER_INDEX)
        demand, source = _demand(as_mapping(lws.get("spec")), pod)
        return base.Gang(
            framework="leaderworkerset",
            owner=base.OwnerRef.from_object(lws),
            key=key,
            role={None: "unknown", "0": "leader"}.get(worker, "worker"),
            coordinator=worker == "0",
            demand=demand,
            demand_source=source,
            member_labels={NAME: name, GROUP_INDEX: str(group)},
            job_annotations=annotations_of(lws),
        )


def first_stage(lws: Obj) -> base.Stage | None:
    """With ``startupPolicy: LeaderReady`` the workers of a group are created only once its leader
    is ready: the leader is the pod to wait for (per group: each group is a gang). None for any
    other job, and for groups of one pod."""
    if lws.get("apiVersion") != API_VERSION or lws.get("kind") != KIND:
        return None
    spec = as_mapping(lws.get("spec"))
    size = base.parse_count(as_mapping(spec.get("leaderWorkerTemplate")).get("size"), 1)
    if spec.get("startupPolicy") != LEADER_READY or not size or size < 2:
        return None
    return base.Stage(1, f"startupPolicy {LEADER_READY}: the workers follow their leader")


def _chain_agrees(view: View, ref: Mapping[str, Any], namespace: str, lws_uid: str) -> bool:
    """Whether the controller chain from the pod's StatefulSet leads to this LWS, as far as the
    view holds it (an object not in the view yet contradicts nothing; one that was replaced by a
    namesake does)."""
    for _ in range(3):  # worker set → leader pod → leader set → LWS
        obj = view.get(ref["apiVersion"], ref["kind"], namespace, ref["name"])
        if obj is None:
            return True
        if uid_of(obj) != ref["uid"]:
            return False  # replaced since: the pod is a leftover of an older incarnation
        lws = base.controller(obj, GROUP, (KIND,))
        if lws is not None:
            return bool(lws["uid"] == lws_uid)
        step = base.controller(obj, "apps", ("StatefulSet",)) or base.controller(obj, "", ("Pod",))
        if step is None:
            return False
        ref = step
    return False


def _demand(
    spec: Mapping[str, Any], pod: Obj
) -> tuple[tuple[base.PodGroup, ...], base.DemandSource]:
    """One group: the leader (its own template, else the worker one) and ``size - 1`` workers."""
    lwt = as_mapping(spec.get("leaderWorkerTemplate"))
    size = base.parse_count(lwt.get("size"), 1)
    worker = lwt.get("workerTemplate")
    if size:
        groups = [
            base.template_group(lwt.get("leaderTemplate") or worker, 1),
            base.template_group(worker, size - 1),
        ]
        if groups[0] is not None:
            return base.demand_or_fallback(groups, pod)
    n = base.env_world(pod, (GROUP_SIZE_ENV,))
    if n:
        return (base.PodGroup(n, base.requests_of(pod.get("spec"))),), "env"
    return base.fallback_demand(pod)

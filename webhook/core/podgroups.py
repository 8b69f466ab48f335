"""kube-scheduler's own gang and topology placement, for ``zone-chooser: scheduler``. Pure.

Instead of choosing a zone and pinning every pod to it, podium hands the choice to the scheduler:
on a gang's pods it creates one ``PodGroup`` with a gang policy (``minCount`` = the gang's pod
count: no pod binds until all of them fit) and a topology constraint on the zone label (all of
them in one domain), and names that PodGroup in each pod's ``spec.schedulingGroup``. The
scheduler's ``GangScheduling`` and ``TopologyPlacementGenerator`` plugins then place the whole
gang in one zone at once.

Shapes, from k8s v1.37.2 ``staging/src/k8s.io/api/scheduling/v1beta1/types.go`` (``PodGroup``,
``PodGroupSpec.schedulingPolicy.gang.minCount`` — int32 ≥ 1, mutable;
``PodGroupSpec.schedulingConstraints.topology[].key`` — at most one, immutable, dropped by the
apiserver when ``TopologyAwareWorkloadScheduling`` is off) and ``core/v1/types.go``
(``PodSpec.schedulingGroup.podGroupName``: gate ``GenericWorkload``, immutable, so settable only
at creation; the PodGroup may be created after the pod).

A gang goes to the scheduler only when ``minCount`` is exactly right (``unfit`` says why not);
otherwise podium chooses its zone as in ``podium`` mode.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jsonpointer import escape

from webhook.core import labels
from webhook.core.adapters.base import Gang
from webhook.core.objects import Obj, as_mapping, uid_of

Manifest = dict[str, Any]

API_VERSION = "scheduling.k8s.io/v1beta1"
KIND = "PodGroup"
PLURAL = "podgroups"
DEFAULT_SCHEDULER = "default-scheduler"
#: ``minCount`` is an int32.
MAX_COUNT = 2**31 - 1
#: The record's ``reason`` for a gang whose zone the scheduler chooses.
REASON = "scheduler-chooses"


def name_of(gang: Gang) -> str:
    """The PodGroup's name: the same as the gang's record and policy."""
    return labels.object_name(gang.owner.kind, gang.owner.name, gang.key)


def size_of(gang: Gang) -> int:
    """How many pods the gang has: the ``minCount`` of its PodGroup."""
    return sum(group.count for group in gang.demand)


def build_podgroup(*, gang: Gang, namespace: str, zone_label: str) -> Manifest:
    """The gang's PodGroup: owned by the job (the garbage collector removes it with the job),
    all ``size_of(gang)`` pods placed together or none, all in one domain of ``zone_label``."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": name_of(gang),
            "namespace": namespace,
            "labels": {
                labels.MANAGED_BY: labels.MANAGER,
                labels.COMPONENT: "podgroup",
                labels.JOB: gang.key,
            },
            "ownerReferences": [gang.owner.as_owner_reference()],
        },
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": size_of(gang)}},
            "schedulingConstraints": {"topology": [{"key": zone_label}]},
        },
    }


def probe(namespace: str, zone_label: str) -> Manifest:
    """A PodGroup to create with ``dryRun=All``: whether the apiserver serves PodGroups (else
    404) and keeps a topology constraint (the field is dropped where the gate is off)."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": "podium-probe", "namespace": namespace},
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": 1}},
            "schedulingConstraints": {"topology": [{"key": zone_label}]},
        },
    }


def keeps_topology(created: Obj) -> bool:
    """Whether a PodGroup as the apiserver returned it still has its topology constraint."""
    spec = as_mapping(created.get("spec"))
    return bool(as_mapping(spec.get("schedulingConstraints")).get("topology"))


def group_of_pod(pod: Obj) -> str | None:
    """The PodGroup a pod names in ``spec.schedulingGroup``, if any."""
    group = as_mapping(as_mapping(pod.get("spec")).get("schedulingGroup"))
    value = group.get("podGroupName")
    return value if isinstance(value, str) and value else None


def join(pod: Obj, name: str) -> tuple[Obj, list[dict[str, Any]]]:
    """``pod`` with ``spec.schedulingGroup.podGroupName = name`` and the JSON Patch that adds it;
    no operation when the pod already names it (a reinvocation). ``pod`` is not changed."""
    if group_of_pod(pod) == name:
        return pod, []
    spec = pod.get("spec")
    value = {"podGroupName": name}
    if not isinstance(spec, Mapping):
        return {**pod, "spec": {"schedulingGroup": value}}, [
            {"op": "add", "path": "/spec", "value": {"schedulingGroup": value}}
        ]
    op = "replace" if "schedulingGroup" in spec else "add"
    path = f"/spec/{escape('schedulingGroup')}"
    return {**pod, "spec": {**spec, "schedulingGroup": value}}, [
        {"op": op, "path": path, "value": value}
    ]


def unfit(gang: Gang, pod: Obj, job: Obj | None) -> str | None:
    """Why kube-scheduler's gang cannot hold this gang, or None when it can.

    ``minCount`` must be exactly the number of pods that will exist together: too high and the
    gang never schedules, too low and it may bind partly or split. So a gang stays with podium
    when its size is guessed (not read from the job), when it is elastic (min < max), when some
    members are created only after others run (ordered startup), when its pods are not the
    default scheduler's, or when the pod already names another scheduling group."""
    if gang.demand_source != "job":
        return f"its size is guessed from the {gang.demand_source}, not read from the job"
    size = size_of(gang)
    if not 1 <= size <= MAX_COUNT:
        return f"its size {size} is no valid minCount"
    spec = as_mapping(pod.get("spec"))
    scheduler = spec.get("schedulerName")
    if scheduler not in (None, "", DEFAULT_SCHEDULER):
        return f"its pods are scheduled by {scheduler}"
    named = group_of_pod(pod)
    if named is not None and named != name_of(gang):
        return f"the pod already names PodGroup {named}"
    if job is None or uid_of(job) != gang.owner.uid:
        return None
    return _staged_or_elastic(gang.framework, as_mapping(job.get("spec")))


def _staged_or_elastic(framework: str, spec: Mapping[str, Any]) -> str | None:
    if framework in ("pytorchjob", "tfjob", "xgboostjob", "paddlejob", "jaxjob"):
        elastic = as_mapping(spec.get("elasticPolicy"))
        low, high = elastic.get("minReplicas"), elastic.get("maxReplicas")
        if elastic and (low is None or high is None or low != high):
            return "it is elastic (elasticPolicy minReplicas < maxReplicas)"
    if framework == "mpijob" and spec.get("launcherCreationPolicy") == "WaitForWorkersReady":
        return "its launcher is created only when the workers are ready"
    if framework in ("jobset", "trainjob"):
        order = as_mapping(spec.get("startupPolicy")).get("startupPolicyOrder")
        if order == "InOrder":
            return "its replicated jobs start in order (startupPolicyOrder: InOrder)"
    if framework == "leaderworkerset" and spec.get("startupPolicy") == "LeaderReady":
        return "its workers are created only when the leader is ready (startupPolicy: LeaderReady)"
    if framework == "raycluster" and spec.get("enableInTreeAutoscaling"):
        return "it autoscales (enableInTreeAutoscaling)"
    if framework == "volcanojob":
        return "Volcano jobs are gang-scheduled by Volcano"
    return None

"""Volcano Jobs (``batch.volcano.sh/v1alpha1``).

The Volcano job controller creates every pod itself, named ``<job>-<task>-<index>`` and controlled
by the Volcano Job. It labels them ``volcano.sh/{job-name,job-namespace,queue-name}`` and the task
``volcano.sh/task-spec`` (older releases: annotation only); newer releases also write
``volcano.sh/task-index``, and the pod name carries the index for the others.

Coordinator: by convention the first of ``master``, ``chief``, ``launcher``, ``leader``, ``head``
present in ``spec.tasks`` (Volcano's pytorch plugin points ``MASTER_ADDR`` at ``master``), else
the first task; index 0 of it. Without the job object a pod coordinates only if its own task has
one of those names (two such tasks in one job are rare; a missed coordinator is harmless).

Source: volcano-sh/volcano ``pkg/controllers/job/job_controller_util.go`` (createJobPod),
volcano-sh/apis ``pkg/apis/batch/v1alpha1/labels.go``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from webhook.core.adapters import base
from webhook.core.objects import Obj, annotations_of, as_list, as_mapping, labels_of, metadata_of

if TYPE_CHECKING:
    from webhook.core.view import View

GROUP = "batch.volcano.sh"
API_VERSION = "batch.volcano.sh/v1alpha1"
KIND = "Job"
JOB_NAME = "volcano.sh/job-name"
TASK_SPEC = "volcano.sh/task-spec"
TASK_INDEX = "volcano.sh/task-index"
COORDINATOR_TASKS = ("master", "chief", "launcher", "leader", "head")


class VolcanoAdapter:
    name = "volcano"
    reads = base.Reads(
        kinds=(base.Kind(API_VERSION, KIND, "jobs"),),
        pod_prefixes=("volcano.sh/",),
        member_labels=frozenset({JOB_NAME}),
    )

    def recognise(self, pod: Obj, namespace: str, view: View) -> base.Gang | None:
        ref = base.controller(pod, GROUP, (KIND,))
        if ref is None:
            return None
        owner = base.OwnerRef.from_reference(ref)
        job = base.verified(view, ref, namespace)
        pod_labels, pod_annotations = labels_of(pod), annotations_of(pod)
        task = pod_labels.get(TASK_SPEC) or pod_annotations.get(TASK_SPEC)
        index = pod_labels.get(TASK_INDEX) or pod_annotations.get(TASK_INDEX)
        if index is None and task:
            index = _index_from_name(pod, f"{owner.name}-{task}-")
        spec = as_mapping((job or {}).get("spec"))
        tasks = [as_mapping(t) for t in as_list(spec.get("tasks"))]
        if job is not None:
            coordinator_task = _coordinator_task(tasks)
        else:
            coordinator_task = task if task in COORDINATOR_TASKS else None
        demand, source = base.demand_or_fallback(base.job_groups(view, job, _groups), pod)
        return base.Gang(
            framework="volcanojob",
            owner=owner,
            key=owner.uid,
            role=task or "unknown",
            coordinator=task is not None and task == coordinator_task and index == "0",
            demand=demand,
            demand_source=source,
            member_labels={JOB_NAME: owner.name} if pod_labels.get(JOB_NAME) == owner.name else {},
            job_annotations=annotations_of(job),
        )


def _index_from_name(pod: Obj, prefix: str) -> str | None:
    name = metadata_of(pod).get("name")
    if not isinstance(name, str) or not name.startswith(prefix):
        return None
    index = base.parse_count(name[len(prefix) :])
    return None if index is None else str(index)


def _coordinator_task(tasks: Sequence[Mapping[str, Any]]) -> str | None:
    names = [name for t in tasks if isinstance(name := t.get("name"), str)]
    preferred = [n for n in COORDINATOR_TASKS if n in names]
    return next(iter(preferred or names), None)


def _groups(job: Obj) -> tuple[base.PodGroup | None, ...]:
    tasks = as_list(as_mapping(job.get("spec")).get("tasks"))
    return tuple(_group(as_mapping(t)) for t in tasks)


def _group(task: Mapping[str, Any]) -> base.PodGroup | None:
    replicas = base.parse_count(task.get("replicas"), 0)  # an unset int32: no pods
    return None if replicas is None else base.template_group(task.get("template"), replicas)

"""The real label and owner shapes each framework's controller gives its pods.

As the controllers write them: kubeflow/trainer v1.9 ``pkg/controller.v1/common/job_controller.go``
(GenLabels, GenOwnerReference); kubeflow/mpi-operator ``pkg/controller/mpi_job_controller.go``
(newWorker, newLauncherJob) and ``pkg/apis/kubeflow/v2beta1/constants.go``; kubeflow/trainer v2
``pkg/runtime/framework/plugins/jobset/jobset.go``; kubernetes-sigs/jobset
``pkg/controllers/jobset_controller.go`` (labelAndAnnotateObject); kubernetes-sigs/lws
``api/leaderworkerset/v1/leaderworkerset_types.go``; volcano-sh/volcano
``pkg/controllers/job/job_controller_util.go``; ray-project/kuberay
``ray-operator/controllers/ray/utils/constant.go``.

Every builder here reproduces what the upstream controller writes, so that the adapter tests read
"this pod, as mpi-operator creates it, plus this view → this gang". UIDs are fixed so the expected
gangs in the tables are plain literals. ``SAMPLES`` holds one typical pod per framework (with and
without its job in the view) for the cross-checks: every adapter must refuse every other
framework's pods.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

from tests.builders import ZONE, JobBuilder, PodBuilder, template
from webhook.core import adapters, resources
from webhook.core.view import ClusterView

NS = "team-a"
Obj = dict[str, Any]


def view(*objects: Obj) -> ClusterView:
    return ClusterView.from_objects(objects, zone_label=ZONE, kept=adapters.KEPT)


def gpus(n: int) -> resources.Resources:
    """What one pod of ``template(n)`` or ``PodBuilder().gpus(n)`` requests."""
    return {"nvidia.com/gpu": n, resources.PODS: 1}


def cpus(n: int) -> resources.Resources:
    return {resources.CPU: n * 1000, resources.PODS: 1}


ONE_POD: resources.Resources = {resources.PODS: 1}


def cpu_template(cpu: str = "1") -> Obj:
    return {"spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": cpu}}}]}}


def without_controller(pod: Obj) -> Obj:
    """The same pod with its ownerReferences no longer marked ``controller: true``."""
    for ref in pod["metadata"].get("ownerReferences", []):
        ref["controller"] = False
    return pod


def without_owners(pod: Obj) -> Obj:
    """The same labels and spec, as anyone could create them, without any ownerReference."""
    pod["metadata"].pop("ownerReferences", None)
    return pod


def annotated(built: JobBuilder, annotations: dict[str, str] | None) -> Obj:
    for key, value in (annotations or {}).items():
        built.annotate(key, value)
    return built.obj()


def uid(n: int) -> str:
    return f"00000000-0000-4000-8000-{n:012d}"


# -- training-operator v1 -----------------------------------------------------------------------

KF = "training.kubeflow.org/"


def kubeflow_job(
    kind: str,
    name: str,
    specs: dict[str, tuple[int, Obj]],
    *,
    uid: str,
    annotations: dict[str, str] | None = None,
) -> Obj:
    field = {
        "PyTorchJob": "pytorchReplicaSpecs",
        "TFJob": "tfReplicaSpecs",
        "JAXJob": "jaxReplicaSpecs",
        "MPIJob": "mpiReplicaSpecs",
    }[kind]
    replica_specs = {rtype: {"replicas": n, "template": tpl} for rtype, (n, tpl) in specs.items()}
    built = JobBuilder("kubeflow.org/v1", kind, name, NS).uid(uid).spec(**{field: replica_specs})
    return annotated(built, annotations)


def kubeflow_pod(
    kf_job: Obj, rtype: str, index: int, *, operator: str = "pytorchjob-controller", gpu: int = 8
) -> PodBuilder:
    """A training-operator pod: named ``<job>-<type>-<i>``, ``job-role=master`` on the master."""
    name = kf_job["metadata"]["name"]
    pod = (
        PodBuilder(NS, name=f"{name}-{rtype}-{index}")
        .label(KF + "operator-name", operator)
        .label(KF + "job-name", name)
        .label(KF + "replica-type", rtype)
        .label(KF + "replica-index", str(index))
        .owner(kf_job["apiVersion"], kf_job["kind"], name, kf_job["metadata"]["uid"])
        .gpus(gpu)
    )
    return pod.label(KF + "job-role", "master") if rtype == "master" else pod


# -- mpi-operator v2beta1 -----------------------------------------------------------------------


def mpijob(
    name: str = "allreduce",
    workers: int | None = 2,
    *,
    uid: str,
    annotations: dict[str, str] | None = None,
) -> Obj:
    worker: Obj = {"template": template(8)}
    if workers is not None:
        worker["replicas"] = workers
    specs = {"Launcher": {"replicas": 1, "template": cpu_template()}, "Worker": worker}
    built = JobBuilder("kubeflow.org/v2beta1", "MPIJob", name, NS).uid(uid)
    return annotated(built.spec(slotsPerWorker=8, mpiReplicaSpecs=specs), annotations)


def launcher_job(mj: Obj, *, uid: str, name: str | None = None) -> Obj:
    """The ``batch/v1`` Job ``<mpijob>-launcher`` that mpi-operator creates, controlled by it."""
    job_name = name or f"{mj['metadata']['name']}-launcher"
    built = JobBuilder("batch/v1", "Job", job_name, NS).uid(uid).owned_by(mj)
    return built.spec(template=cpu_template()).obj()


def mpi_worker_pod(mj: Obj, index: int) -> PodBuilder:
    name = mj["metadata"]["name"]
    return (
        PodBuilder(NS, name=f"{name}-worker-{index}")
        .label(KF + "operator-name", "mpi-operator")
        .label(KF + "job-name", name)
        .label(KF + "job-role", "worker")
        .label(KF + "replica-index", str(index))
        .owner(mj["apiVersion"], "MPIJob", name, mj["metadata"]["uid"])
        .gpus(8)
    )


def mpi_launcher_pod(mj: Obj, batch_job: Obj) -> PodBuilder:
    """The launcher: generateName only, controlled by the batch Job, labelled by both."""
    name, job_name = mj["metadata"]["name"], batch_job["metadata"]["name"]
    job_uid = batch_job["metadata"]["uid"]
    return (
        PodBuilder(NS, generate_name=f"{job_name}-")
        .label(KF + "operator-name", "mpi-operator")
        .label(KF + "job-name", name)
        .label(KF + "job-role", "launcher")
        .label("batch.kubernetes.io/controller-uid", job_uid)
        .label("batch.kubernetes.io/job-name", job_name)
        .owner("batch/v1", "Job", job_name, job_uid)
        .requests(cpu="1")
    )


# -- JobSet and Trainer v2 ----------------------------------------------------------------------

JS = "jobset.sigs.k8s.io/"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


def jobset(
    name: str,
    rjobs: Iterable[tuple[str, int, int, Obj]],
    *,
    uid: str,
    coordinator: Obj | None = None,
    owner: Obj | None = None,
    annotations: dict[str, str] | None = None,
) -> Obj:
    """``rjobs``: (name, replicas, parallelism, pod template) per replicated job, in order;
    ``owner``: the object that controls the JobSet (a TrainJob)."""
    spec: Obj = {
        "replicatedJobs": [
            {
                "name": rname,
                "replicas": replicas,
                "template": {
                    "spec": {
                        "parallelism": parallelism,
                        "completions": parallelism,
                        "completionMode": "Indexed",
                        "template": tpl,
                    }
                },
            }
            for rname, replicas, parallelism, tpl in rjobs
        ],
        "network": {"enableDNSHostnames": True},
    }
    if coordinator is not None:
        spec["coordinator"] = coordinator
    built = JobBuilder("jobset.x-k8s.io/v1alpha2", "JobSet", name, NS).uid(uid).spec(**spec)
    if owner is not None:
        built.owned_by(owner)
    return annotated(built, annotations)


def trainjob(name: str, *, uid: str) -> Obj:
    built = JobBuilder("trainer.kubeflow.org/v1alpha1", "TrainJob", name, NS).uid(uid)
    return built.spec(runtimeRef={"name": "torch-distributed"}, trainer={"numNodes": 4}).obj()


def child_job(js: Obj, rjob: str, index: int, *, uid: str) -> Obj:
    """The batch Job ``<jobset>-<rjob>-<index>`` the JobSet controller creates."""
    name = f"{js['metadata']['name']}-{rjob}-{index}"
    return JobBuilder("batch/v1", "Job", name, NS).uid(uid).owned_by(js).obj()


def jobset_pod(
    js: Obj, child: Obj, rjob: str, job_index: int, pod_index: int, *, gpu: int = 8
) -> PodBuilder:
    """A pod of an Indexed child Job, with every label and annotation JobSet copies onto it."""
    name, js_uid = js["metadata"]["name"], js["metadata"]["uid"]
    replicas = {r["name"]: r["replicas"] for r in js["spec"]["replicatedJobs"]}
    child_name = child["metadata"]["name"]
    pod = PodBuilder(NS, generate_name=f"{child_name}-{pod_index}-")
    for key, value in {
        JS + "jobset-name": name,
        JS + "jobset-uid": js_uid,
        JS + "replicatedjob-name": rjob,
        JS + "replicatedjob-replicas": str(replicas.get(rjob, 1)),
        JS + "global-replicas": str(sum(replicas.values())),
        JS + "job-index": str(job_index),
        JS + "job-key": hashlib.sha1(f"{NS}/{child_name}".encode()).hexdigest(),
        JS + "restart-attempt": "0",
        COMPLETION_INDEX: str(pod_index),
    }.items():
        pod.label(key, value).annotate(key, value)
    pod.spec(hostname=f"{child_name}-{pod_index}", subdomain=name)
    return pod.owner("batch/v1", "Job", child_name, child["metadata"]["uid"]).gpus(gpu)


# -- LeaderWorkerSet ----------------------------------------------------------------------------

LWS = "leaderworkerset.sigs.k8s.io/"


def leaderworkerset(
    name: str = "vllm", *, size: int = 4, uid: str, leader: Obj | None = None
) -> Obj:
    lwt: Obj = {"size": size, "workerTemplate": template(8)}
    if leader is not None:
        lwt["leaderTemplate"] = leader
    built = JobBuilder("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", name, NS).uid(uid)
    return built.spec(replicas=2, leaderWorkerTemplate=lwt).obj()


def statefulset(name: str, owner: Obj, *, uid: str) -> Obj:
    built = JobBuilder("apps/v1", "StatefulSet", name, NS).uid(uid).owned_by(owner)
    return built.spec(serviceName=name).obj()


def lws_pod(lws: Obj, sts: Obj, group: int, worker: int) -> PodBuilder:
    """A leader (``<lws>-<g>``, worker 0) or worker (``<lws>-<g>-<w>``) pod, labelled by LWS."""
    name = lws["metadata"]["name"]
    pod_name = f"{name}-{group}" if worker == 0 else f"{name}-{group}-{worker}"
    sts_name, sts_uid = sts["metadata"]["name"], sts["metadata"]["uid"]
    return (
        PodBuilder(NS, name=pod_name)
        .label(LWS + "name", name)
        .label(LWS + "group-index", str(group))
        .label(LWS + "worker-index", str(worker))
        .label(LWS + "group-key", hashlib.sha1(f"{NS}/{name}-{group}".encode()).hexdigest())
        .label("statefulset.kubernetes.io/pod-name", pod_name)
        .annotate(LWS + "size", str(lws["spec"]["leaderWorkerTemplate"]["size"]))
        .owner("apps/v1", "StatefulSet", sts_name, sts_uid)
        .env("LWS_GROUP_SIZE", str(lws["spec"]["leaderWorkerTemplate"]["size"]))
        .gpus(8)
    )


# -- Volcano ------------------------------------------------------------------------------------

VC = "volcano.sh/"


def volcano_job(
    name: str,
    tasks: Iterable[tuple[str, int, Obj]],
    *,
    uid: str,
    annotations: dict[str, str] | None = None,
) -> Obj:
    spec = {
        "schedulerName": "volcano",
        "minAvailable": 1,
        "queue": "default",
        "tasks": [{"name": t, "replicas": n, "template": tpl} for t, n, tpl in tasks],
    }
    built = JobBuilder("batch.volcano.sh/v1alpha1", "Job", name, NS).uid(uid).spec(**spec)
    return annotated(built, annotations)


def volcano_pod(
    vj: Obj, task: str, index: int, *, index_label: bool = True, task_label: bool = True
) -> PodBuilder:
    """``<job>-<task>-<index>``; older Volcano writes the task as an annotation only, no index."""
    name = vj["metadata"]["name"]
    pod = (
        PodBuilder(NS, name=f"{name}-{task}-{index}")
        .label(VC + "job-name", name)
        .label(VC + "job-namespace", NS)
        .label(VC + "queue-name", "default")
        .annotate(VC + "job-name", name)
        .annotate(VC + "task-spec", task)
        .annotate(VC + "job-version", "0")
        .annotate("scheduling.k8s.io/group-name", name)
        .owner("batch.volcano.sh/v1alpha1", "Job", name, vj["metadata"]["uid"])
        .gpus(8)
    )
    if task_label:
        pod.label(VC + "task-spec", task)
    if index_label:
        pod.label(VC + "task-index", str(index)).annotate(VC + "task-index", str(index))
    return pod


# -- KubeRay ------------------------------------------------------------------------------------

RAY = "ray.io/"


def raycluster(name: str, workers: Iterable[Obj], *, uid: str) -> Obj:
    """``workers``: workerGroupSpecs entries without their template (each gets ``template(8)``)."""
    spec = {
        "headGroupSpec": {"rayStartParams": {}, "template": cpu_template("4")},
        "workerGroupSpecs": [{"rayStartParams": {}, "template": template(8), **w} for w in workers],
    }
    return JobBuilder("ray.io/v1", "RayCluster", name, NS).uid(uid).spec(**spec).obj()


def ray_pod(rc: Obj, group: str | None = None) -> PodBuilder:
    """The head (``group=None``) or a worker of ``group``: generateName only, as KubeRay does."""
    name = rc["metadata"]["name"]
    node_type = "head" if group is None else "worker"
    pod = (
        PodBuilder(
            NS, generate_name=f"{name}-head-" if group is None else f"{name}-{group}-worker-"
        )
        .label(RAY + "cluster", name)
        .label(RAY + "node-type", node_type)
        .label(RAY + "group", group or "headgroup")
        .label(RAY + "is-ray-node", "yes")
        .label(RAY + "identifier", f"{name}-{node_type}")
        .label("app.kubernetes.io/created-by", "kuberay-operator")
        .owner("ray.io/v1", "RayCluster", name, rc["metadata"]["uid"])
    )
    return pod.requests(cpu="4") if group is None else pod.gpus(8)


# -- one typical pod per framework, for the cross-checks ----------------------------------------


def _samples() -> list[tuple[str, str, Obj, list[Obj]]]:
    """(adapter name, case id, pod, view objects): each framework, job in view and not."""
    pj = kubeflow_job(
        "PyTorchJob",
        "llama",
        {"Master": (1, template(8)), "Worker": (3, template(8))},
        uid=uid(101),
    )
    mj = mpijob(uid=uid(201))
    mj_launcher = launcher_job(mj, uid=uid(202))
    js = jobset("sweep", [("node", 2, 2, template(8))], uid=uid(301))
    js_child = child_job(js, "node", 0, uid=uid(302))
    tj = trainjob("tune", uid=uid(311))
    tjs = jobset("tune", [("node", 1, 4, template(8))], uid=uid(312), owner=tj)
    tjs_child = child_job(tjs, "node", 0, uid=uid(313))
    lws = leaderworkerset(uid=uid(401))
    leader_sts = statefulset("vllm", lws, uid=uid(402))
    vj = volcano_job(
        "mnist", [("master", 1, template(8)), ("worker", 2, template(8))], uid=uid(501)
    )
    rc = raycluster(
        "ray",
        [{"groupName": "gpu", "replicas": 2, "minReplicas": 0, "maxReplicas": 4}],
        uid=uid(601),
    )
    out: list[tuple[str, str, Obj, list[Obj]]] = []
    for in_view in (True, False):

        def objs(*o: Obj, in_view: bool = in_view) -> list[Obj]:
            return list(o) if in_view else []

        tag = "in-view" if in_view else "not-in-view"
        out += [
            (
                "training-operator",
                f"pytorch-master-{tag}",
                kubeflow_pod(pj, "master", 0).obj(),
                objs(pj),
            ),
            (
                "training-operator",
                f"pytorch-worker-{tag}",
                kubeflow_pod(pj, "worker", 1).obj(),
                objs(pj),
            ),
            ("mpi-operator", f"mpi-worker-{tag}", mpi_worker_pod(mj, 0).obj(), objs(mj)),
            (
                "mpi-operator",
                f"mpi-launcher-{tag}",
                mpi_launcher_pod(mj, mj_launcher).obj(),
                [mj, *objs(mj_launcher)],
            ),
            (
                "jobset",
                f"jobset-node-{tag}",
                jobset_pod(js, js_child, "node", 0, 1).obj(),
                objs(js, js_child),
            ),
            (
                "jobset",
                f"trainjob-node-{tag}",
                jobset_pod(tjs, tjs_child, "node", 0, 0).obj(),
                objs(tj, tjs, tjs_child),
            ),
            (
                "leaderworkerset",
                f"lws-leader-{tag}",
                lws_pod(lws, leader_sts, 0, 0).obj(),
                [lws, *objs(leader_sts)],
            ),
            ("volcano", f"volcano-master-{tag}", volcano_pod(vj, "master", 0).obj(), objs(vj)),
            ("kuberay", f"ray-head-{tag}", ray_pod(rc).obj(), objs(rc)),
            ("kuberay", f"ray-worker-{tag}", ray_pod(rc, "gpu").obj(), objs(rc)),
        ]
    return out


SAMPLES = _samples()

"""The frameworks the real operators run: each one's upstream example, adapted to fake GPUs.

A `Framework` names the operator that creates its pods (and the ones that must run first), the
example file in the operator's repository (as testbed.build copied it), how it was adapted, and how
many pods the operator should create. The smoke tests and the capture command share these, so a
golden file in ``tests/fixtures/operators/`` records exactly what the smoke test checks.

Adaptations, the same everywhere: no ``metadata.namespace`` (each run has its own namespace);
one ``nvidia.com/gpu`` limit per training container (kwok nodes advertise fake GPUs); replica
counts made small. Images stay as upstream wrote them: kwok pulls nothing.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from testbed.operators.runner import Build

__all__ = ["FRAMEWORKS", "Framework"]

GPU = "nvidia.com/gpu"

Object = dict[str, Any]


@dataclass(frozen=True)
class Framework:
    """One framework: what to submit and what the operator should make of it."""

    #: Stem of the golden file: ``<name>-<operator version>.yaml``.
    name: str
    #: The operator (its testbed.build name) that creates the pods.
    operator: str
    #: The example in the operator's repository this comes from.
    source: str
    #: The objects to submit, in order, built from the operator's build; the last is the job.
    make: Callable[[dict[str, Build]], list[Object]]
    #: How many pods the operator creates for it.
    pods: int
    #: Operators that must run too, started first (Trainer needs JobSet).
    needs: tuple[str, ...] = ()
    #: What was changed from the upstream example.
    adaptations: tuple[str, ...] = ()
    #: Kinds (apiVersion, kind) the operators create between the job and its pods, to capture.
    intermediates: tuple[tuple[str, str], ...] = ()
    #: Labels the operator puts on every pod it creates.
    pod_labels: tuple[str, ...] = ()

    @property
    def operators(self) -> tuple[str, ...]:
        """Every operator to run, in start order."""
        return (*self.needs, self.operator)


# --- adapting examples -----------------------------------------------------------------------


def _load(build: Build, relative: str) -> list[Object]:
    documents = build.example(relative)
    for document in documents:
        document["metadata"].pop("namespace", None)
    return documents


def _containers(template: Object) -> Iterator[Object]:
    yield from template.setdefault("spec", {}).get("containers", [])


def _one_gpu(template: Object) -> None:
    """Every container of the pod template asks for exactly one fake GPU."""
    for container in _containers(template):
        resources = container.setdefault("resources", {})
        resources.setdefault("limits", {})[GPU] = 1
        if GPU in resources.get("requests", {}):
            resources["requests"][GPU] = 1


def _kubeflow_v1(relative: str, specs_key: str, replicas: dict[str, int]) -> Callable[..., Any]:
    def make(builds: dict[str, Build]) -> list[Object]:
        (job,) = _load(builds["trainingoperator"], relative)
        for replica_type, spec in job["spec"][specs_key].items():
            if replica_type in replicas:
                spec["replicas"] = replicas[replica_type]
            _one_gpu(spec["template"])
        return [job]

    return make


def _elastic_pytorchjob(builds: dict[str, Build]) -> list[Object]:
    (job,) = _load(builds["trainingoperator"], "examples/pytorch/elastic/echo/echo.yaml")
    job["spec"]["elasticPolicy"]["maxReplicas"] = 4
    _one_gpu(job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"])
    return [job]


def _mpijob(run_launcher_as_worker: bool) -> Callable[..., Any]:
    def make(builds: dict[str, Build]) -> list[Object]:
        (job,) = _load(builds["mpioperator"], "examples/v2beta1/pi/pi.yaml")
        _one_gpu(job["spec"]["mpiReplicaSpecs"]["Worker"]["template"])
        if run_launcher_as_worker:
            job["metadata"]["name"] = "pi-launcher-as-worker"
            job["spec"]["runLauncherAsWorker"] = True
            _one_gpu(job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"])
        return [job]

    return make


# Not in the Go module (site/ is a module of its own): kubernetes-sigs/jobset
# site/static/examples/pytorch/cnn-mnist/mnist.yaml, as served there in v1alpha2 form.
_JOBSET_PYTORCH_MNIST: Object = {
    "apiVersion": "jobset.x-k8s.io/v1alpha2",
    "kind": "JobSet",
    "metadata": {"name": "pytorch"},
    "spec": {
        "replicatedJobs": [
            {
                "name": "workers",
                "template": {
                    "spec": {
                        "parallelism": 4,
                        "completions": 4,
                        "backoffLimit": 0,
                        "template": {
                            "spec": {
                                "containers": [
                                    {
                                        "name": "pytorch",
                                        "image": "gcr.io/k8s-staging-jobset/pytorch-mnist:latest",
                                        "ports": [{"containerPort": 3389}],
                                        "env": [
                                            {
                                                "name": "MASTER_ADDR",
                                                "value": "pytorch-workers-0-0.pytorch",
                                            },
                                            {"name": "MASTER_PORT", "value": "3389"},
                                            {
                                                "name": "RANK",
                                                "valueFrom": {
                                                    "fieldRef": {
                                                        "fieldPath": "metadata.annotations"
                                                        "['batch.kubernetes.io/job-completion-index']"
                                                    }
                                                },
                                            },
                                            {"name": "PYTHONUNBUFFERED", "value": "0"},
                                        ],
                                        "command": [
                                            "bash",
                                            "-xc",
                                            "torchrun --rdzv_id=123 --nnodes=4 --nproc_per_node=1"
                                            " --master_addr=$MASTER_ADDR"
                                            " --master_port=$MASTER_PORT --node_rank=$RANK"
                                            " mnist.py --epochs=1 --log-interval=1",
                                        ],
                                    }
                                ]
                            }
                        },
                    }
                },
            }
        ]
    },
}


def _jobset(builds: dict[str, Build]) -> list[Object]:
    jobset = copy.deepcopy(_JOBSET_PYTORCH_MNIST)
    for replicated in jobset["spec"]["replicatedJobs"]:
        _one_gpu(replicated["template"]["spec"]["template"])
    return [jobset]


def _trainjob(builds: dict[str, Build]) -> list[Object]:
    trainer = builds["trainer"]
    (runtime,) = _load(trainer, "manifests/base/runtimes/torch_distributed.yaml")
    (job,) = _load(trainer, "examples/yaml/01-multi-node.yaml")
    job["spec"]["trainer"]["resourcesPerNode"] = {"limits": {GPU: 1}}
    return [runtime, job]


def _leaderworkerset(builds: dict[str, Build]) -> list[Object]:
    (lws,) = _load(builds["lws"], "docs/examples/sample/lws.yaml")
    lws["spec"]["replicas"] = 2
    lws["spec"]["leaderWorkerTemplate"]["size"] = 3
    _one_gpu(lws["spec"]["leaderWorkerTemplate"]["workerTemplate"])
    return [lws]


def _raycluster(builds: dict[str, Build]) -> list[Object]:
    (cluster,) = _load(builds["kuberay"], "config/samples/ray-cluster.sample.yaml")
    (group,) = cluster["spec"]["workerGroupSpecs"]
    _one_gpu(group["template"])
    second = copy.deepcopy(group)
    second["groupName"] = "gpu-group"
    second["replicas"] = 2
    cluster["spec"]["workerGroupSpecs"].append(second)
    return [cluster]


def _volcanojob(builds: dict[str, Build]) -> list[Object]:
    (job,) = _load(builds["volcano"], "example/integrations/mpi/mpi-example.yaml")
    job["spec"].pop("schedulerName", None)
    # What vc-webhook-manager's defaulting adds (it does not run here); the job controller
    # refuses a job whose queue does not exist.
    job["spec"].setdefault("queue", "default")
    for task in job["spec"]["tasks"]:
        _one_gpu(task["template"])
    return [job]


_KUBEFLOW_V1_LABELS = (
    "training.kubeflow.org/operator-name",
    "training.kubeflow.org/job-name",
    "training.kubeflow.org/replica-type",
    "training.kubeflow.org/replica-index",
)
_JOBSET_LABELS = (
    "jobset.sigs.k8s.io/jobset-name",
    "jobset.sigs.k8s.io/replicatedjob-name",
    "jobset.sigs.k8s.io/job-index",
)

FRAMEWORKS: dict[str, Framework] = {
    f.name: f
    for f in (
        Framework(
            name="pytorchjob",
            operator="trainingoperator",
            source="examples/pytorch/simple.yaml",
            make=_kubeflow_v1("examples/pytorch/simple.yaml", "pytorchReplicaSpecs", {"Worker": 2}),
            pods=3,
            adaptations=("Worker replicas 1 -> 2", "one nvidia.com/gpu per container"),
            pod_labels=_KUBEFLOW_V1_LABELS,
        ),
        Framework(
            name="pytorchjob-elastic",
            operator="trainingoperator",
            source="examples/pytorch/elastic/echo/echo.yaml",
            make=_elastic_pytorchjob,
            pods=2,
            adaptations=("elasticPolicy.maxReplicas 2 -> 4", "one nvidia.com/gpu per container"),
            pod_labels=_KUBEFLOW_V1_LABELS,
        ),
        Framework(
            name="tfjob",
            operator="trainingoperator",
            source="examples/tensorflow/simple.yaml",
            make=_kubeflow_v1("examples/tensorflow/simple.yaml", "tfReplicaSpecs", {}),
            pods=2,
            adaptations=("one nvidia.com/gpu per container",),
            pod_labels=_KUBEFLOW_V1_LABELS,
        ),
        Framework(
            name="xgboostjob",
            operator="trainingoperator",
            source="examples/xgboost/xgboostjob.yaml",
            make=_kubeflow_v1("examples/xgboost/xgboostjob.yaml", "xgbReplicaSpecs", {}),
            pods=3,
            adaptations=("one nvidia.com/gpu per container",),
            pod_labels=_KUBEFLOW_V1_LABELS,
        ),
        Framework(
            name="paddlejob",
            operator="trainingoperator",
            source="examples/paddlepaddle/simple-gpu.yaml",
            make=_kubeflow_v1("examples/paddlepaddle/simple-gpu.yaml", "paddleReplicaSpecs", {}),
            pods=2,
            adaptations=("nvidia.com/gpu 2 -> 1 per container",),
            pod_labels=_KUBEFLOW_V1_LABELS,
        ),
        Framework(
            name="jaxjob",
            operator="trainingoperator",
            source="examples/jax/cpu-demo/demo.yaml",
            make=_kubeflow_v1("examples/jax/cpu-demo/demo.yaml", "jaxReplicaSpecs", {}),
            pods=2,
            adaptations=("one nvidia.com/gpu per container",),
            pod_labels=_KUBEFLOW_V1_LABELS,
        ),
        Framework(
            name="mpijob",
            operator="mpioperator",
            source="examples/v2beta1/pi/pi.yaml",
            make=_mpijob(run_launcher_as_worker=False),
            pods=3,
            adaptations=("one nvidia.com/gpu per worker container",),
            intermediates=(("batch/v1", "Job"), ("v1", "ConfigMap")),
            pod_labels=(
                "training.kubeflow.org/operator-name",
                "training.kubeflow.org/job-name",
                "training.kubeflow.org/job-role",
            ),
        ),
        Framework(
            name="mpijob-launcher-as-worker",
            operator="mpioperator",
            source="examples/v2beta1/pi/pi.yaml",
            make=_mpijob(run_launcher_as_worker=True),
            pods=3,
            adaptations=(
                "name pi -> pi-launcher-as-worker",
                "runLauncherAsWorker: true",
                "one nvidia.com/gpu per container (launcher too: it is a worker)",
            ),
            intermediates=(("batch/v1", "Job"), ("v1", "ConfigMap")),
            pod_labels=(
                "training.kubeflow.org/operator-name",
                "training.kubeflow.org/job-name",
                "training.kubeflow.org/job-role",
            ),
        ),
        Framework(
            name="jobset",
            operator="jobset",
            source="site/static/examples/pytorch/cnn-mnist/mnist.yaml (kubernetes-sigs/jobset)",
            make=_jobset,
            pods=4,
            adaptations=(
                "apiVersion jobset.x-k8s.io/v1 -> v1alpha2 (what v0.12.0 serves)",
                "one nvidia.com/gpu per container",
            ),
            intermediates=(("batch/v1", "Job"),),
            pod_labels=_JOBSET_LABELS,
        ),
        Framework(
            name="trainjob",
            operator="trainer",
            needs=("jobset",),
            source=(
                "examples/yaml/01-multi-node.yaml + manifests/base/runtimes/torch_distributed.yaml"
            ),
            make=_trainjob,
            pods=3,
            adaptations=("trainer.resourcesPerNode.limits nvidia.com/gpu: 1",),
            intermediates=(("jobset.x-k8s.io/v1alpha2", "JobSet"), ("batch/v1", "Job")),
            pod_labels=_JOBSET_LABELS,
        ),
        Framework(
            name="leaderworkerset",
            operator="lws",
            source="docs/examples/sample/lws.yaml",
            make=_leaderworkerset,
            pods=6,
            adaptations=("replicas 3 -> 2", "size 4 -> 3", "one nvidia.com/gpu per container"),
            intermediates=(("apps/v1", "StatefulSet"),),
            pod_labels=(
                "leaderworkerset.sigs.k8s.io/name",
                "leaderworkerset.sigs.k8s.io/group-index",
                "leaderworkerset.sigs.k8s.io/worker-index",
                "leaderworkerset.sigs.k8s.io/group-key",
            ),
        ),
        Framework(
            name="raycluster",
            operator="kuberay",
            source="config/samples/ray-cluster.sample.yaml",
            make=_raycluster,
            pods=4,
            adaptations=(
                "a second worker group gpu-group (copy of workergroup, replicas 2)",
                "one nvidia.com/gpu per worker container",
            ),
            pod_labels=("ray.io/cluster", "ray.io/node-type", "ray.io/group"),
        ),
        Framework(
            name="volcanojob",
            operator="volcano",
            source="example/integrations/mpi/mpi-example.yaml",
            make=_volcanojob,
            pods=3,
            adaptations=(
                "schedulerName volcano removed (no vc-scheduler: kube-scheduler binds)",
                "queue: default (vc-webhook-manager's default; it does not run here)",
                "one nvidia.com/gpu per container",
            ),
            intermediates=(
                ("scheduling.volcano.sh/v1beta1", "PodGroup"),
                ("networking.k8s.io/v1", "NetworkPolicy"),
            ),
            pod_labels=("volcano.sh/job-name", "volcano.sh/task-spec"),
        ),
    )
}

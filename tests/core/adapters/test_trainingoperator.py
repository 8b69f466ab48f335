"""training-operator v1 jobs: input pod + view → the whole gang."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import template
from tests.core.adapters import (
    KF,
    NS,
    SAMPLES,
    gpus,
    kubeflow_job,
    kubeflow_pod,
    mpi_worker_pod,
    mpijob,
    uid,
    view,
    without_controller,
    without_owners,
)
from webhook.core.adapters.base import Gang, OwnerRef, PodGroup
from webhook.core.adapters.trainingoperator import TrainingOperatorAdapter

ADAPTER = TrainingOperatorAdapter()

PJ = kubeflow_job(
    "PyTorchJob",
    "llama",
    {"Master": (1, template(8)), "Worker": (3, template(8))},
    uid=uid(1),
    annotations={"team": "nlp"},
)
PJ_NEWER = kubeflow_job("PyTorchJob", "llama", {"Worker": (9, template(8))}, uid=uid(2))
TF = kubeflow_job(
    "TFJob", "resnet", {"PS": (2, template(0)), "Worker": (4, template(8))}, uid=uid(3)
)
JAX = kubeflow_job("JAXJob", "gemma", {"Worker": (2, template(8))}, uid=uid(4))


def gang(
    job: dict[str, Any], role: str, coordinator: bool, demand: Any, source: Any, **kw: Any
) -> Gang:
    meta = job["metadata"]
    return Gang(
        framework=job["kind"].lower(),
        owner=OwnerRef("kubeflow.org/v1", job["kind"], meta["name"], meta["uid"]),
        key=meta["uid"],
        role=role,
        coordinator=coordinator,
        demand=demand,
        demand_source=source,
        member_labels={KF + "job-name": meta["name"]},
        **kw,
    )


PJ_DEMAND = (PodGroup(1, gpus(8)), PodGroup(3, gpus(8)))
NOTED = {"job_annotations": {"team": "nlp"}}

CASES = [
    pytest.param(
        kubeflow_pod(PJ, "master", 0),
        [PJ],
        gang(PJ, "master", True, PJ_DEMAND, "job", **NOTED),
        id="pytorch-master-job-in-view",
    ),
    pytest.param(
        kubeflow_pod(PJ, "worker", 0),
        [PJ],
        gang(PJ, "worker", False, PJ_DEMAND, "job", **NOTED),
        id="pytorch-worker-0-is-not-coordinator",
    ),
    pytest.param(
        kubeflow_pod(PJ, "master", 0),
        [],
        gang(PJ, "master", True, (PodGroup(1, gpus(8)),), "pod"),
        id="pytorch-master-job-not-in-view",
    ),
    pytest.param(
        kubeflow_pod(PJ, "worker", 2).env("WORLD_SIZE", "4"),
        [],
        gang(PJ, "worker", False, (PodGroup(4, gpus(8)),), "env"),
        id="world-size-env-without-job",
    ),
    pytest.param(
        kubeflow_pod(PJ, "worker", 2),
        [PJ_NEWER],
        gang(PJ, "worker", False, (PodGroup(1, gpus(8)),), "pod"),
        id="newer-job-same-name-ignored",
    ),
    pytest.param(
        kubeflow_pod(TF, "worker", 0, operator="tfjob-controller"),
        [TF],
        gang(
            TF,
            "worker",
            True,
            (PodGroup(2, {"nvidia.com/gpu": 0, "pods": 1}), PodGroup(4, gpus(8))),
            "job",
        ),
        id="tfjob-without-chief-worker-0-coordinates",
    ),
    pytest.param(
        kubeflow_pod(TF, "ps", 0, operator="tfjob-controller", gpu=0),
        [TF],
        gang(
            TF,
            "ps",
            False,
            (PodGroup(2, {"nvidia.com/gpu": 0, "pods": 1}), PodGroup(4, gpus(8))),
            "job",
        ),
        id="tfjob-ps-0-is-not-coordinator",
    ),
    pytest.param(
        kubeflow_pod(JAX, "worker", 0, operator="jaxjob-controller"),
        [JAX],
        gang(JAX, "worker", True, (PodGroup(2, gpus(8)),), "job"),
        id="jax-worker-0-coordinates",
    ),
]


@pytest.mark.parametrize(("pod", "objects", "expected"), CASES)
@pytest.mark.parametrize("generate_name_only", [False, True], ids=["named", "generate-name"])
def test_recognise(pod: Any, objects: list[Any], expected: Gang, generate_name_only: bool) -> None:
    obj = pod.obj()
    if generate_name_only:  # as a review sees it before the apiserver names the pod
        obj["metadata"].pop("name")
        obj["metadata"].pop("uid", None)
        obj["metadata"]["generateName"] = "x-"
    assert ADAPTER.recognise(obj, NS, view(*objects)) == expected


@pytest.mark.parametrize(
    "pod",
    [
        pytest.param(without_owners(kubeflow_pod(PJ, "master", 0).obj()), id="labels-no-owner"),
        pytest.param(without_controller(kubeflow_pod(PJ, "master", 0).obj()), id="not-controller"),
        pytest.param(mpi_worker_pod(mpijob(uid=uid(9)), 0).obj(), id="mpijob-v2beta1-is-not-ours"),
    ],
)
@pytest.mark.parametrize("in_view", [True, False])
def test_not_ours(pod: Any, in_view: bool) -> None:
    assert ADAPTER.recognise(pod, NS, view(*([PJ] if in_view else []))) is None


def test_demand_ignores_unusable_replica_specs() -> None:
    broken = kubeflow_job("PyTorchJob", "llama", {"Master": (1, template(8))}, uid=uid(1))
    broken["spec"]["pytorchReplicaSpecs"]["Worker"] = "three"
    broken["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = "one"
    got = ADAPTER.recognise(kubeflow_pod(broken, "master", 0).obj(), NS, view(broken))
    assert got == gang(broken, "master", True, (PodGroup(1, gpus(8)),), "pod")


@pytest.mark.parametrize(
    ("framework", "pod", "objects"),
    [pytest.param(f, p, o, id=i) for f, i, p, o in SAMPLES if f != ADAPTER.name],
)
def test_other_frameworks_pods_are_not_ours(framework: str, pod: Any, objects: Any) -> None:
    assert ADAPTER.recognise(pod, NS, view(*objects)) is None

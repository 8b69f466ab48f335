"""mpi-operator v2beta1 MPIJobs: input pod + view → the whole gang."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import JobBuilder, PodBuilder, template
from tests.core.adapters import (
    KF,
    NS,
    SAMPLES,
    cpus,
    gpus,
    kubeflow_job,
    kubeflow_pod,
    launcher_job,
    mpi_launcher_pod,
    mpi_worker_pod,
    mpijob,
    uid,
    view,
    without_controller,
    without_owners,
)
from webhook.core.adapters.base import Gang, OwnerRef, PodGroup
from webhook.core.adapters.mpi import MPIOperatorAdapter

ADAPTER = MPIOperatorAdapter()

MJ = mpijob("allreduce", workers=2, uid=uid(1), annotations={"podium.dev/skip": "true"})
MJ_NEWER = mpijob("allreduce", workers=5, uid=uid(2))
LAUNCHER_JOB = launcher_job(MJ, uid=uid(3))
LAUNCHER_JOB_OLDER = JobBuilder("batch/v1", "Job", "allreduce-launcher", NS).uid(uid(4)).obj()
#: A batch Job that some other MPIJob controls, with a name that does not fit the convention.
ODD_JOB = launcher_job(MJ, uid=uid(5), name="allreduce-driver")
#: A kubeflow.org/v1 MPIJob of the same name: training-operator's, not ours.
MJ_V1 = kubeflow_job("MPIJob", "allreduce", {"Worker": (2, template(8))}, uid=uid(6))

DEFAULTS = mpijob("defaults", workers=None, uid=uid(7))
DEMAND = (PodGroup(1, cpus(1)), PodGroup(2, gpus(8)))
SKIP = {"podium.dev/skip": "true"}


def worker() -> PodBuilder:
    return mpi_worker_pod(MJ, 1)


def launcher() -> PodBuilder:
    return mpi_launcher_pod(MJ, LAUNCHER_JOB)


def gang(role: str, demand: Any, source: Any, *, mpijob: dict[str, Any] = MJ, **kw: Any) -> Gang:
    meta = mpijob["metadata"]
    return Gang(
        framework="mpijob",
        owner=OwnerRef("kubeflow.org/v2beta1", "MPIJob", meta["name"], meta["uid"]),
        key=meta["uid"],
        role=role,
        coordinator=role == "launcher",
        demand=demand,
        demand_source=source,
        member_labels={KF + "job-name": meta["name"]},
        **kw,
    )


CASES = [
    pytest.param(
        worker(), [MJ], gang("worker", DEMAND, "job", job_annotations=SKIP), id="worker-job-in-view"
    ),
    pytest.param(worker(), [], gang("worker", (PodGroup(1, gpus(8)),), "pod"), id="worker-alone"),
    pytest.param(
        worker(),
        [MJ_NEWER],
        gang("worker", (PodGroup(1, gpus(8)),), "pod"),
        id="worker-newer-mpijob-same-name-ignored",
    ),
    pytest.param(
        launcher(),
        [MJ, LAUNCHER_JOB],
        gang("launcher", DEMAND, "job", job_annotations=SKIP),
        id="launcher-through-batch-job",
    ),
    pytest.param(
        launcher(),
        [LAUNCHER_JOB],
        gang("launcher", (PodGroup(1, cpus(1)),), "pod"),
        id="launcher-batch-job-in-view-mpijob-not",
    ),
    pytest.param(
        launcher(),
        [MJ],
        gang("launcher", DEMAND, "job", job_annotations=SKIP),
        id="launcher-batch-job-not-in-view-labels-and-mpijob-agree",
    ),
    pytest.param(
        launcher(),
        [MJ, LAUNCHER_JOB_OLDER],
        gang("launcher", DEMAND, "job", job_annotations=SKIP),
        id="launcher-older-batch-job-same-name-ignored",
    ),
    pytest.param(
        launcher().env("WORLD_SIZE", "3"),
        [LAUNCHER_JOB],
        gang("launcher", (PodGroup(3, cpus(1)),), "env"),
        id="launcher-world-size-env",
    ),
    pytest.param(
        mpi_worker_pod(DEFAULTS, 0),
        [DEFAULTS],
        gang("worker", (PodGroup(1, cpus(1)),), "job", mpijob=DEFAULTS),
        id="worker-replicas-default-to-zero",
    ),
]


@pytest.mark.parametrize(("pod", "objects", "expected"), CASES)
def test_recognise(pod: Any, objects: list[Any], expected: Gang) -> None:
    assert ADAPTER.recognise(pod.obj(), NS, view(*objects)) == expected


@pytest.mark.parametrize(
    ("pod", "objects"),
    [
        pytest.param(launcher().obj(), [], id="launcher-nothing-in-view"),
        pytest.param(launcher().obj(), [MJ_V1], id="launcher-label-names-a-v1-mpijob"),
        pytest.param(
            mpi_launcher_pod(MJ, ODD_JOB).obj(), [MJ, ODD_JOB], id="batch-job-not-named-launcher"
        ),
        pytest.param(
            mpi_launcher_pod(MJ, ODD_JOB).obj(), [MJ], id="labels-disagree-with-batch-job-name"
        ),
        pytest.param(
            mpi_launcher_pod(MJ, LAUNCHER_JOB).label(KF + "job-role", "worker").obj(),
            [MJ],
            id="launcher-labelled-worker-without-batch-job",
        ),
        pytest.param(
            mpi_launcher_pod(MJ, LAUNCHER_JOB).obj(),
            [MJ, JobBuilder("batch/v1", "Job", "allreduce-launcher", NS).uid(uid(3)).obj()],
            id="batch-job-controlled-by-nothing",
        ),
        pytest.param(without_owners(worker().obj()), [MJ], id="worker-labels-no-owner"),
        pytest.param(without_controller(worker().obj()), [MJ], id="worker-not-controller"),
        pytest.param(without_owners(launcher().obj()), [MJ, LAUNCHER_JOB], id="launcher-no-owner"),
        pytest.param(kubeflow_pod(MJ_V1, "worker", 0).obj(), [MJ_V1], id="mpijob-v1-worker"),
    ],
)
def test_not_ours(pod: Any, objects: list[Any]) -> None:
    assert ADAPTER.recognise(pod, NS, view(*objects)) is None


def test_launcher_and_workers_share_one_gang_key() -> None:
    snapshot = view(MJ, LAUNCHER_JOB)
    keys = {
        gang.key
        for pod in (launcher().obj(), worker().obj(), mpi_worker_pod(MJ, 0).obj())
        if (gang := ADAPTER.recognise(pod, NS, snapshot)) is not None
    }
    assert keys == {MJ["metadata"]["uid"]}


@pytest.mark.parametrize(
    ("framework", "pod", "objects"),
    [pytest.param(f, p, o, id=i) for f, i, p, o in SAMPLES if f != ADAPTER.name],
)
def test_other_frameworks_pods_are_not_ours(framework: str, pod: Any, objects: Any) -> None:
    assert ADAPTER.recognise(pod, NS, view(*objects)) is None

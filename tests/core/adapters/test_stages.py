"""``adapters.first_stage``: job → the pods its operator creates first (elastic and staged
starts), read from the job object; None when it creates them all at once."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.builders import JobBuilder, template
from tests.core.adapters import (
    NS,
    cpu_template,
    jobset,
    kubeflow_job,
    leaderworkerset,
    mpijob,
    uid,
)
from webhook.core import adapters
from webhook.core.adapters.base import Stage


def elastic(workers: int, master: int = 0, **policy: int) -> dict[str, Any]:
    """A PyTorchJob with ``workers`` workers (and ``master`` masters) and ``elasticPolicy``."""
    specs = {"Worker": (workers, template(8))}
    if master:
        specs["Master"] = (master, template(8))
    job = kubeflow_job("PyTorchJob", "elastic", specs, uid=uid(1))
    job["spec"]["elasticPolicy"] = {"rdzvBackend": "c10d", **policy}
    return job


def mpi(policy: str | None, workers: int | None = 4, api: str = "") -> dict[str, Any]:
    job = mpijob("pi", workers=workers, uid=uid(2))
    if policy is not None:
        job["spec"]["launcherCreationPolicy"] = policy
    if api:
        job["apiVersion"] = api
    return job


INIT = ("initializer", 1, 1, cpu_template())
NODE = ("node", 1, 4, template(8))
WORKERS = ("workers", 2, 2, template(8))


def staged(*rjobs: tuple[str, int, int, Any], order: str = "", **depends: str) -> dict[str, Any]:
    """A JobSet of ``rjobs``; ``order``: its startupPolicyOrder; ``depends``: replicated job →
    the one it depends on (status Ready)."""
    js = jobset("staged", rjobs, uid=uid(3))
    if order:
        js["spec"]["startupPolicy"] = {"startupPolicyOrder": order}
    for rjob in js["spec"]["replicatedJobs"]:
        if rjob["name"] in depends:
            rjob["dependsOn"] = [{"name": depends[rjob["name"]], "status": "Ready"}]
    return js


def lws(policy: str | None, size: int = 3) -> dict[str, Any]:
    obj = leaderworkerset("vllm", size=size, uid=uid(4))
    if policy is not None:
        obj["spec"]["startupPolicy"] = policy
    return obj


ELASTIC = "elastic: runs with elasticPolicy.minReplicas {} workers"
MPI_WHY = "launcherCreationPolicy WaitForWorkersReady: the launcher follows its workers"
LWS_WHY = "startupPolicy LeaderReady: the workers follow their leader"

CASES = [
    # Elastic PyTorchJobs: minReplicas workers (defaulted as the operator does) + the others.
    pytest.param(elastic(2, minReplicas=2, maxReplicas=4), Stage(2, ELASTIC.format(2)), id="2-4"),
    pytest.param(
        elastic(4, minReplicas=2, maxReplicas=4), Stage(2, ELASTIC.format(2)), id="4-of-2"
    ),
    pytest.param(
        elastic(4, master=1, minReplicas=2, maxReplicas=4),
        Stage(3, ELASTIC.format(2)),
        id="master-plus-min",
    ),
    pytest.param(elastic(4, maxReplicas=3), Stage(3, ELASTIC.format(3)), id="min-from-max"),
    pytest.param(elastic(4, minReplicas=3), Stage(3, ELASTIC.format(3)), id="min-only"),
    pytest.param(elastic(4), Stage(4, ELASTIC.format(4)), id="no-bounds-all-workers"),
    pytest.param(elastic(2, minReplicas=6), Stage(2, ELASTIC.format(2)), id="min-above-replicas"),
    pytest.param(
        kubeflow_job("PyTorchJob", "plain", {"Worker": (4, template(8))}, uid=uid(5)),
        None,
        id="not-elastic",
    ),
    pytest.param(
        kubeflow_job("TFJob", "tf", {"Worker": (4, template(8))}, uid=uid(6))
        | {"spec": {"tfReplicaSpecs": {}, "elasticPolicy": {"minReplicas": 1}}},
        None,
        id="tfjob-has-no-elastic-start",
    ),
    # MPIJob v2beta1: the workers before the launcher.
    pytest.param(mpi("WaitForWorkersReady"), Stage(4, MPI_WHY), id="mpi-wait"),
    pytest.param(mpi("AtStartup"), None, id="mpi-at-startup"),
    pytest.param(mpi(None), None, id="mpi-default"),
    pytest.param(mpi("WaitForWorkersReady", workers=None), None, id="mpi-no-workers"),
    pytest.param(mpi("WaitForWorkersReady", api="kubeflow.org/v1"), None, id="mpi-v1"),
    # JobSet: the first replicated job in order, or those that depend on none.
    pytest.param(
        staged(WORKERS, NODE, order="InOrder"),
        Stage(4, "startupPolicyOrder InOrder: workers start(s) first"),
        id="jobset-in-order",
    ),
    pytest.param(staged(NODE, order="InOrder"), None, id="jobset-in-order-one-job"),
    pytest.param(staged(WORKERS, NODE, order="AnyOrder"), None, id="jobset-any-order"),
    pytest.param(
        staged(INIT, NODE, node="initializer"),
        Stage(1, "dependsOn: initializer start(s) first"),
        id="jobset-depends-on",
    ),
    pytest.param(
        staged(INIT, WORKERS, NODE, node="initializer"),
        Stage(5, "dependsOn: initializer, workers start(s) first"),
        id="jobset-two-without-depends-on",
    ),
    pytest.param(staged(INIT, NODE), None, id="jobset-all-at-once"),
    # LeaderWorkerSet: per group, the leader before the workers.
    pytest.param(lws("LeaderReady"), Stage(1, LWS_WHY), id="lws-leader-ready"),
    pytest.param(lws("LeaderCreated"), None, id="lws-leader-created"),
    pytest.param(lws(None), None, id="lws-default"),
    pytest.param(lws("LeaderReady", size=1), None, id="lws-group-of-one"),
    # Anything else.
    pytest.param(JobBuilder("batch/v1", "Job", "plain", NS).obj(), None, id="batch-job"),
    pytest.param({}, None, id="empty"),
]


@pytest.mark.parametrize(("job", "expected"), CASES)
def test_first_stage(job: dict[str, Any], expected: Stage | None) -> None:
    assert adapters.first_stage(job) == expected


@pytest.mark.parametrize(
    "job",
    [
        elastic(2, minReplicas=2),
        mpi("WaitForWorkersReady"),
        staged(INIT, NODE, node="initializer"),
        lws("LeaderReady"),
    ],
)
@pytest.mark.parametrize(
    "damage",
    [
        lambda j: j["spec"].update(elasticPolicy="two", mpiReplicaSpecs=[], replicatedJobs=7),
        lambda j: j["spec"].update(leaderWorkerTemplate={"size": "many"}),
        lambda j: j.update(spec=None),
    ],
)
def test_ill_typed_jobs_are_no_error(job: dict[str, Any], damage: Any) -> None:
    damaged = copy.deepcopy(job)
    damage(damaged)
    stage = adapters.first_stage(damaged)
    assert stage is None or stage.pods >= 1

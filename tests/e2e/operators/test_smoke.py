"""Each real operator, run as a local process, creates the pods of its own example.

No podium here: this proves the harness (build, start, webhooks, CRDs) and pins down the shape
of what each operator creates — names, labels, owner chains, the env podium reads. Opt-in with
``PODIUM_E2E_OPERATORS=all`` (or a comma list of build names); see docs/operators.md.
"""

from __future__ import annotations

import fnmatch
import uuid
from collections import Counter
from dataclasses import dataclass

import pytest

from testbed.controlplane import LocalCluster
from testbed.observe import observe, summarize
from testbed.operators import OperatorPool, fresh_namespace
from testbed.operators.frameworks import FRAMEWORKS

from .conftest import framework_params

pytestmark = pytest.mark.e2e

KF = "training.kubeflow.org"


@dataclass(frozen=True)
class Expected:
    """What the operator makes of the example."""

    #: owner kinds, nearest first -> number of pods with that chain
    chains: dict[tuple[str, ...], int]
    #: the label that tells the pods' roles apart, and role -> number of pods
    role_label: str
    roles: dict[str, int]
    #: env (after admission) on every pod's first container
    env: tuple[str, ...] = ()
    #: the pods' names, as fnmatch patterns (one per pod; ``*`` for a generated suffix)
    names: tuple[str, ...] = ()


EXPECTED: dict[str, Expected] = {
    "pytorchjob": Expected(
        chains={("PyTorchJob",): 3},
        role_label=f"{KF}/replica-type",
        roles={"master": 1, "worker": 2},
        env=("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"),
        names=(
            "pytorch-simple-master-0",
            "pytorch-simple-worker-0",
            "pytorch-simple-worker-1",
        ),
    ),
    "pytorchjob-elastic": Expected(
        chains={("PyTorchJob",): 2},
        role_label=f"{KF}/replica-type",
        roles={"worker": 2},
        names=(
            "elastic-example-echo-worker-0",
            "elastic-example-echo-worker-1",
        ),
    ),
    "tfjob": Expected(
        chains={("TFJob",): 2},
        role_label=f"{KF}/replica-type",
        roles={"worker": 2},
        names=(
            "tfjob-simple-worker-0",
            "tfjob-simple-worker-1",
        ),
    ),
    "xgboostjob": Expected(
        chains={("XGBoostJob",): 3},
        role_label=f"{KF}/replica-type",
        roles={"master": 1, "worker": 2},
        names=(
            "xgboost-dist-iris-test-train-master-0",
            "xgboost-dist-iris-test-train-worker-0",
            "xgboost-dist-iris-test-train-worker-1",
        ),
    ),
    "paddlejob": Expected(
        chains={("PaddleJob",): 2},
        role_label=f"{KF}/replica-type",
        roles={"worker": 2},
        names=("paddle-simple-gpu-worker-0", "paddle-simple-gpu-worker-1"),
    ),
    "jaxjob": Expected(
        chains={("JAXJob",): 2},
        role_label=f"{KF}/replica-type",
        roles={"worker": 2},
        names=("jaxjob-simple-worker-0", "jaxjob-simple-worker-1"),
    ),
    "mpijob": Expected(
        chains={("MPIJob",): 2, ("Job", "MPIJob"): 1},
        role_label=f"{KF}/job-role",
        roles={"launcher": 1, "worker": 2},
        names=("pi-worker-0", "pi-worker-1", "pi-launcher-*"),
    ),
    "mpijob-launcher-as-worker": Expected(
        chains={("MPIJob",): 2, ("Job", "MPIJob"): 1},
        role_label=f"{KF}/job-role",
        roles={"launcher": 1, "worker": 2},
        names=(
            "pi-launcher-as-worker-worker-0",
            "pi-launcher-as-worker-worker-1",
            "pi-launcher-as-worker-launcher-*",
        ),
    ),
    "jobset": Expected(
        chains={("Job", "JobSet"): 4},
        role_label="jobset.sigs.k8s.io/replicatedjob-name",
        roles={"workers": 4},
        env=("MASTER_ADDR",),
        names=(
            "pytorch-workers-0-0-*",
            "pytorch-workers-0-1-*",
            "pytorch-workers-0-2-*",
            "pytorch-workers-0-3-*",
        ),
    ),
    "trainjob": Expected(
        chains={("Job", "JobSet", "TrainJob"): 3},
        role_label="jobset.sigs.k8s.io/replicatedjob-name",
        roles={"node": 3},
        env=("PET_NNODES", "PET_MASTER_ADDR"),
        names=(
            "multi-node-example-node-0-0-*",
            "multi-node-example-node-0-1-*",
            "multi-node-example-node-0-2-*",
        ),
    ),
    "leaderworkerset": Expected(
        chains={
            ("StatefulSet", "LeaderWorkerSet"): 2,
            ("StatefulSet", "Pod", "StatefulSet", "LeaderWorkerSet"): 4,
        },
        role_label="leaderworkerset.sigs.k8s.io/worker-index",
        roles={"0": 2, "1": 2, "2": 2},
        env=("LWS_GROUP_SIZE", "LWS_LEADER_ADDRESS", "LWS_WORKER_INDEX"),
        names=(
            "leaderworkerset-sample-0",
            "leaderworkerset-sample-0-1",
            "leaderworkerset-sample-0-2",
            "leaderworkerset-sample-1",
            "leaderworkerset-sample-1-1",
            "leaderworkerset-sample-1-2",
        ),
    ),
    "raycluster": Expected(
        chains={("RayCluster",): 4},
        role_label="ray.io/node-type",
        roles={"head": 1, "worker": 3},
        names=(
            "raycluster-kuberay-head-*",
            "raycluster-kuberay-workergroup-worker-*",
            "raycluster-kuberay-gpu-group-worker-*",
            "raycluster-kuberay-gpu-group-worker-*",
        ),
    ),
    "volcanojob": Expected(
        chains={("Job",): 3},
        role_label="volcano.sh/task-spec",
        roles={"mpimaster": 1, "mpiworker": 2},
        names=("lm-mpi-job-mpimaster-0", "lm-mpi-job-mpiworker-0", "lm-mpi-job-mpiworker-1"),
    ),
}


def test_every_framework_has_expectations() -> None:
    assert set(EXPECTED) == set(FRAMEWORKS)


@pytest.mark.parametrize("name", framework_params(FRAMEWORKS))
def test_real_operator_creates_the_pods(
    name: str, operator_cluster: LocalCluster, operator_pool: OperatorPool
) -> None:
    framework = FRAMEWORKS[name]
    expected = EXPECTED[name]
    operator_pool.ensure(framework.operators)
    with fresh_namespace(operator_cluster, f"smoke-{name}-{uuid.uuid4().hex[:6]}") as namespace:
        seen = observe(operator_cluster, framework, operator_pool.builds, namespace)
    print("\n".join(summarize(seen)))

    job = seen.job
    assert len(seen.pods) == framework.pods
    if expected.names:
        matched = Counter(
            next((n for n in expected.names if fnmatch.fnmatchcase(p["metadata"]["name"], n)), None)
            for p in seen.pods
        )
        assert matched == Counter(expected.names), [p["metadata"]["name"] for p in seen.pods]
    chains = Counter(tuple(seen.owner_kinds(p["metadata"]["name"])) for p in seen.pods)
    assert chains == Counter(expected.chains)
    roles = Counter(p["metadata"]["labels"].get(expected.role_label) for p in seen.pods)
    assert roles == Counter(expected.roles)
    for pod in seen.pods:
        name_ = pod["metadata"]["name"]
        labels = pod["metadata"]["labels"]
        assert set(framework.pod_labels) <= set(labels), name_
        chain = seen.owners[name_]
        # The pod's own controller reference is the first link; the job is the last.
        assert chain[0]["controller"] is True
        assert (chain[-1]["kind"], chain[-1]["name"], chain[-1]["uid"]) == (
            job["kind"],
            job["metadata"]["name"],
            job["metadata"]["uid"],
        )
        env = {e["name"] for e in pod["spec"]["containers"][0].get("env", [])}
        assert set(expected.env) <= env, (name_, sorted(env))
        # The operator's create request was seen in the audit log.
        assert name_ in seen.created, name_

"""``zone-chooser: hold`` beside the real operators (issue 20, item 9).

The operator creates the pods; podium admits each one behind its gate and the releaser lets the
gang go whole into one zone once there is room. The operator cluster's zones hold 8, 16 and 64
GPUs; "other work" is plain pods (no training job: podium leaves them alone) filling zone-c, so a
job of 4 × 8 GPUs fits nowhere until they go. While it waits: no pod of the job has a node (0 GPUs
held), every pod shows SchedulingGated, and the job has a ``GangHeld`` Event saying why. Once
zone-c is free again all its pods bind there, and the apiserver's resourceVersions show the job's
policy was written before any of its pods was ungated. Opt-in like the other operator tests:
``PODIUM_E2E_OPERATORS=trainingoperator,mpioperator,jobset`` (or ``all``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from testbed.controlplane import ApiError, LocalCluster, crd_files
from testbed.observe import api_path
from testbed.operators import OperatorPool
from testbed.podium import Podium, opted_in_namespace, serving

from ..test_hold import (
    Ungatings,
    assert_held,
    delete_pods,
    gated,
    pods_of,
    policy_and_record_revisions,
)
from ..test_podium import container, create_concurrently, listed, wait_bound
from .conftest import needs

pytestmark = pytest.mark.e2e

GPUS = 8
REASON = "podium.dev/reason"
ZONE = "podium.dev/zone"


def _template(gpus: int, *, name: str = "main", **spec: Any) -> dict[str, Any]:
    """A pod template of one container asking for ``gpus``, named as the operator wants."""
    return {"spec": {"containers": [{**container(gpus), "name": name}], **spec}}


def pytorchjob(name: str, *, workers: int = 3) -> dict[str, Any]:
    """A PyTorchJob of 8-GPU pods: one master and ``workers`` (4 × 8 GPUs by default)."""
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {
            "pytorchReplicaSpecs": {
                role: {
                    "replicas": replicas,
                    "restartPolicy": "OnFailure",
                    "template": _template(GPUS, name="pytorch"),
                }
                for role, replicas in (("Master", 1), ("Worker", workers))
            }
        },
    }


def mpijob(name: str) -> dict[str, Any]:
    """An MPIJob (v2beta1) of 4 × 8-GPU workers and a CPU launcher that mpi-operator creates
    only once the workers are ready (``WaitForWorkersReady``): after the gang was released, so
    it must follow the recorded zone, ungated."""
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": name},
        "spec": {
            "slotsPerWorker": 1,
            "launcherCreationPolicy": "WaitForWorkersReady",
            "runPolicy": {"cleanPodPolicy": "Running"},
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": _template(0)},
                "Worker": {"replicas": 4, "template": _template(GPUS)},
            },
        },
    }


def jobset(name: str) -> dict[str, Any]:
    """A JobSet of one replicated Job of 4 × 8-GPU pods."""
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "parallelism": 4,
                            "completions": 4,
                            "backoffLimit": 0,
                            "template": _template(GPUS, restartPolicy="Never"),
                        }
                    },
                }
            ]
        },
    }


@dataclass(frozen=True)
class Case:
    operators: tuple[str, ...]
    make: Callable[[str], dict[str, Any]]
    #: the gang: pods holding GPUs, all created before any is released
    gpu_pods: int = 4
    #: pods the operator creates only once the gang runs (MPI's launcher)
    later: int = 0


CASES = {
    "pytorchjob": Case(("trainingoperator",), pytorchjob),
    "jobset": Case(("jobset",), jobset),
    "mpijob": Case(("mpioperator",), mpijob, later=1),
}


def _params() -> list[Any]:
    return [pytest.param(n, id=n, marks=needs(*c.operators)) for n, c in CASES.items()]


@pytest.fixture(scope="module")
def holding_podium(
    operator_cluster: LocalCluster,
    operator_pool: OperatorPool,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Podium]:
    """podium with ``zone-chooser: hold`` (release every second) for ``operator_cluster``."""
    operator_cluster.install_crds(p for p in crd_files() if p.name.startswith("cilium.io_"))
    with contextlib.suppress(ApiError):
        operator_cluster.create_namespace("podium-system")
    config = "zone-chooser: hold\nrelease-interval-seconds: 1\n"
    with serving(
        Podium(operator_cluster, tmp_path_factory.mktemp("hold-operators"), config=config),
        unregister=True,
    ) as server:
        yield server


def _live_pods(cluster: LocalCluster, ns: str) -> list[dict[str, Any]]:
    return [
        p for p in listed(cluster, "v1", "Pod", ns) if not p["metadata"].get("deletionTimestamp")
    ]


def _requests_gpu(pod: dict[str, Any]) -> bool:
    return any(
        "nvidia.com/gpu" in ((c.get("resources") or {}).get("limits") or {})
        for c in pod["spec"]["containers"]
    )


def fill_zone_c(cluster: LocalCluster, ns: str) -> list[str]:
    """Other work (plain pods) on all of zone-c's 64 GPUs; their names."""
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"other-{i}", "namespace": ns},
            "spec": {
                "containers": [container(GPUS)],
                "nodeSelector": {"topology.kubernetes.io/zone": "zone-c"},
            },
        }
        for i in range(8)
    ]
    names = [p["metadata"]["name"] for p in create_concurrently(cluster, pods)]
    wait_bound(cluster, ns, names)
    return names


def gang_held_events(cluster: LocalCluster, ns: str) -> list[dict[str, Any]]:
    return [
        e
        for e in cluster.request("GET", f"/api/v1/namespaces/{ns}/events")["items"]
        if e.get("reason") == "GangHeld"
    ]


def submit(cluster: LocalCluster, ns: str, job: dict[str, Any]) -> dict[str, Any]:
    created: dict[str, Any] = cluster.request(
        "POST", api_path(job["apiVersion"], job["kind"], ns), job
    )
    return created


@pytest.mark.parametrize("name", _params())
def test_a_job_the_operator_creates_waits_held_then_binds_whole_in_one_zone(
    name: str,
    operator_cluster: LocalCluster,
    operator_pool: OperatorPool,
    holding_podium: Podium,
) -> None:
    case = CASES[name]
    operator_pool.ensure(case.operators)
    cluster = operator_cluster
    with opted_in_namespace(cluster, f"hold-{name}") as ns:
        other = fill_zone_c(cluster, ns)
        job = submit(cluster, ns, case.make(f"wide-{name}"))
        job_name = job["metadata"]["name"]

        def gang() -> list[dict[str, Any]]:
            return [p for p in _live_pods(cluster, ns) if p["metadata"]["name"] not in other]

        cluster.wait_for(
            f"the operator to create {case.gpu_pods} GPU pods",
            lambda: len([p for p in gang() if _requests_gpu(p)]) >= case.gpu_pods,
            timeout=120,
        )
        time.sleep(3)  # whatever else the operator creates before the gang runs (a launcher)
        names = sorted(p["metadata"]["name"] for p in gang())
        created = pods_of(cluster, ns, names)
        print("held:", [(p["metadata"]["name"], _requests_gpu(p)) for p in created])
        assert len([p for p in created if _requests_gpu(p)]) == case.gpu_pods, names
        reasons = {p["metadata"]["annotations"].get(REASON) for p in created}
        assert reasons == {"held"}, [p["metadata"].get("annotations") for p in created]
        assert_held(cluster, ns, names)
        assert not [p["metadata"]["name"] for p in gang() if p["spec"].get("nodeName")]
        cluster.wait_for(
            "a GangHeld event", lambda: bool(gang_held_events(cluster, ns)), timeout=30
        )
        for event in gang_held_events(cluster, ns):
            involved = event["involvedObject"]
            print("GangHeld on", involved.get("kind"), involved.get("name"), ":", event["message"])

        ungatings = Ungatings(cluster, ns)
        try:
            room_free = time.monotonic()
            delete_pods(cluster, ns, other)
            zones = wait_bound(cluster, ns, names, timeout=120)
            took = time.monotonic() - room_free
            cluster.wait_for(
                "the watch to see every release",
                lambda: set(names) <= set(ungatings.seen),
                timeout=30,
            )
        finally:
            ungatings.stop()
        assert set(zones.values()) == {"zone-c"}, zones
        policy_rv, record_rv = policy_and_record_revisions(cluster, ns, job_name)
        first_release = min(ungatings.seen[n] for n in names)
        assert record_rv < policy_rv < first_release, (record_rv, policy_rv, ungatings.seen)
        print(
            f"hold with {name}: held {len(names)} pods, 0 bound; room free → all bound in "
            f"{sorted(set(zones.values()))} in {took:.1f}s; record rv {record_rv} < policy rv "
            f"{policy_rv} < first ungating rv {first_release}"
        )
        if case.later:
            cluster.wait_for(
                "the operator's later pods",
                lambda: (
                    len([p for p in _live_pods(cluster, ns) if p["metadata"]["name"] not in names])
                    >= case.later
                ),
                timeout=120,
            )
            later = [p for p in _live_pods(cluster, ns) if p["metadata"]["name"] not in names]
            for pod in later:
                pod_name = pod["metadata"]["name"]
                annotations = pod["metadata"].get("annotations", {})
                print("later:", pod_name, annotations.get(REASON), annotations.get(ZONE))
                assert annotations.get(REASON) == "recorded", (pod_name, annotations)
                assert annotations.get(ZONE) == "zone-c", (pod_name, annotations)
                assert not gated(pod), pod_name
            wait_bound(cluster, ns, [p["metadata"]["name"] for p in later], timeout=60)


@needs("trainingoperator")
def test_two_pytorchjobs_competing_for_one_zone_run_in_turn(
    operator_cluster: LocalCluster, operator_pool: OperatorPool, holding_podium: Podium
) -> None:
    """Each job (6 × 8 GPUs) fits zone-c alone, not both: one is released whole, the other waits
    whole (nothing bound) and runs once the first one's pods go. No deadlock, no partial gang."""
    operator_pool.ensure(("trainingoperator",))
    cluster = operator_cluster
    with opted_in_namespace(cluster, "hold-two") as ns:
        for job_name in ("left", "right"):
            submit(cluster, ns, pytorchjob(job_name, workers=5))
        job_label = "training.kubeflow.org/job-name"

        def by_job() -> dict[str, list[str]]:
            found: dict[str, list[str]] = {"left": [], "right": []}
            for p in _live_pods(cluster, ns):
                found[p["metadata"]["labels"][job_label]].append(p["metadata"]["name"])
            return found

        cluster.wait_for(
            "the operator to create 12 pods",
            lambda: all(len(v) == 6 for v in by_job().values()),
            timeout=120,
        )
        members = by_job()

        def released() -> list[str]:
            return [
                job_name
                for job_name, names in members.items()
                if not any(gated(p) for p in pods_of(cluster, ns, names))
            ]

        cluster.wait_for("one job to be released", lambda: len(released()) == 1, timeout=60)
        (first,) = released()
        (second,) = set(members) - {first}
        assert set(wait_bound(cluster, ns, members[first]).values()) == {"zone-c"}
        assert_held(cluster, ns, members[second])
        room_free = time.monotonic()
        cluster.request(
            "DELETE",
            api_path("kubeflow.org/v1", "PyTorchJob", ns, first),
            {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Foreground"},
        )
        zones = wait_bound(cluster, ns, members[second], timeout=120)
        took = time.monotonic() - room_free
        assert set(zones.values()) == {"zone-c"}, zones
        print(f"two gangs: {first} ran first, then {second} in zone-c {took:.1f}s after {first}")

"""``zone-chooser: hold`` beside the real operators (issue 20, item 9).

The operator creates the pods; podium admits each one behind its gate and the releaser lets the
gang go whole into one zone once there is room. The operator cluster's zones hold 8, 16 and 64
GPUs; "other work" is plain pods (no training job: podium leaves them alone) filling zone-c (and
zone-b, for a job small enough to fit there), so the job fits nowhere until zone-c's go. While it
waits: no pod of the job has a node (0 GPUs held, read from the apiserver), every pod shows
SchedulingGated, and the job has a ``GangHeld`` Event saying why. Once zone-c is free again all
its pods bind there, and the apiserver's resourceVersions show each gang's record and policy were
written before any of its pods was ungated.

Staged and elastic starts (``release.needed``): an MPIJob with ``WaitForWorkersReady`` is held
with its workers alone (the launcher comes once they run); an LWS with ``LeaderReady`` with its
two leaders (each group is a gang of its own: ``adapters.lws``), the workers following; an elastic
PyTorchJob (``minReplicas`` 2) with its 2 workers, scaled to 4 once it runs. The pods created
after the release follow the recorded zone at admission, ungated (reason ``recorded``).

Each run prints a ``TABLE`` row (framework, operator, bound while held, zone, seconds from room
free to all bound, the resourceVersion order). Opt-in like the other operator tests:
``PODIUM_E2E_OPERATORS=trainingoperator,mpioperator,jobset,trainer,lws`` (or ``all``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from testbed.controlplane import ApiError, LocalCluster
from testbed.observe import api_path
from testbed.operators import OperatorPool
from testbed.operators.frameworks import FRAMEWORKS
from testbed.podium import Podium, opted_in_namespace, serving

from ..test_hold import Ungatings, assert_held, delete_pods, gated, pods_of
from ..test_podium import container, create_concurrently, listed, wait_bound
from .conftest import needs, ready_for_podium

pytestmark = pytest.mark.e2e

GPUS = 8
REASON = "podium.dev/reason"
ZONE = "podium.dev/zone"
JOB = "podium.dev/job"


def _template(gpus: int, *, name: str = "main", **spec: Any) -> dict[str, Any]:
    """A pod template of one container asking for ``gpus``, named as the operator wants."""
    return {"spec": {"containers": [{**container(gpus), "name": name}], **spec}}


def pytorchjob(name: str, *, workers: int = 3, gpus: int = GPUS) -> dict[str, Any]:
    """A PyTorchJob of ``gpus``-GPU pods: one master and ``workers`` (4 × 8 GPUs by default)."""
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {
            "pytorchReplicaSpecs": {
                role: {
                    "replicas": replicas,
                    "restartPolicy": "OnFailure",
                    "template": _template(gpus, name="pytorch"),
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


def trainjob(name: str) -> dict[str, Any]:
    """A TrainJob (Trainer v2) of 4 nodes × 8 GPUs on the ``torch-distributed`` runtime: Trainer
    makes it a JobSet."""
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {
            "runtimeRef": {
                "apiGroup": "trainer.kubeflow.org",
                "kind": "ClusterTrainingRuntime",
                "name": "torch-distributed",
            },
            "trainer": {"numNodes": 4, "resourcesPerNode": {"limits": {"nvidia.com/gpu": GPUS}}},
        },
    }


def leaderworkerset(name: str) -> dict[str, Any]:
    """An LWS of two groups of 3 × 8 GPUs whose workers LWS creates only once the group's leader
    is ready (``LeaderReady``): each group is a gang, held with its leader alone."""
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": 2,
            "startupPolicy": "LeaderReady",
            "leaderWorkerTemplate": {"size": 3, "workerTemplate": _template(GPUS)},
        },
    }


def elastic_pytorchjob(name: str, gpus: int = GPUS) -> dict[str, Any]:
    """An elastic PyTorchJob: 2 workers of ``gpus`` GPUs, ``minReplicas`` 2, ``maxReplicas`` 4."""
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {
            "elasticPolicy": {"rdzvBackend": "c10d", "minReplicas": 2, "maxReplicas": 4},
            "pytorchReplicaSpecs": {
                "Worker": {
                    "replicas": 2,
                    "restartPolicy": "OnFailure",
                    "template": _template(gpus, name="pytorch"),
                }
            },
        },
    }


def scale_to_4(cluster: LocalCluster, ns: str, job: dict[str, Any]) -> None:
    """Scale the elastic PyTorchJob's workers 2 → 4 (what an HPA would write)."""
    cluster.request(
        "PATCH",
        api_path(job["apiVersion"], job["kind"], ns, job["metadata"]["name"]),
        {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 4}}}},
        content_type="application/merge-patch+json",
    )


def torch_runtime(cluster: LocalCluster, pool: OperatorPool) -> None:
    """Trainer's ``torch-distributed`` ClusterTrainingRuntime, from its build, once."""
    runtime = FRAMEWORKS["trainjob"].make(pool.builds)[0]
    with contextlib.suppress(ApiError):  # there already
        cluster.request("POST", api_path(runtime["apiVersion"], runtime["kind"], None), runtime)


@dataclass(frozen=True)
class Case:
    operators: tuple[str, ...]
    make: Callable[[str], dict[str, Any]]
    #: the operator that creates the pods (the table's column)
    operator: str
    #: pods holding GPUs that exist before the gang is released (its first stage)
    gpu_pods: int = 4
    #: pods the operator creates only once the gang runs (MPI's launcher, LWS's workers) or is
    #: scaled (``scale``)
    later: int = 0
    #: gangs in the job (LWS: one per group)
    gangs: int = 1
    #: zones filled with other work while the job is submitted (only zone-c is freed)
    full: tuple[str, ...] = ("zone-c",)
    #: what to do once the gang runs (scale an elastic job)
    scale: Callable[[LocalCluster, str, dict[str, Any]], None] | None = None
    #: what the operator needs first (a runtime)
    setup: Callable[[LocalCluster, OperatorPool], None] | None = None


CASES = {
    "pytorchjob": Case(("trainingoperator",), pytorchjob, "training-operator v1.9.4"),
    "jobset": Case(("jobset",), jobset, "JobSet v0.12.0"),
    "mpijob": Case(("mpioperator",), mpijob, "mpi-operator v0.8.0", later=1),
    "trainjob": Case(
        ("jobset", "trainer"), trainjob, "Trainer v2.3.0 + JobSet v0.12.0", setup=torch_runtime
    ),
    "leaderworkerset": Case(("lws",), leaderworkerset, "LWS v0.9.0", gpu_pods=2, later=4, gangs=2),
    "pytorchjob-elastic": Case(
        ("trainingoperator",),
        elastic_pytorchjob,
        "training-operator v1.9.4",
        gpu_pods=2,
        later=2,
        full=("zone-b", "zone-c"),
        scale=scale_to_4,
    ),
}


def _params() -> list[Any]:
    return [pytest.param(n, id=n, marks=needs(*c.operators)) for n, c in CASES.items()]


@pytest.fixture(scope="module")
def holding_podium(
    operator_cluster: LocalCluster,
    operator_pool: OperatorPool,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Podium]:
    """podium with ``zone-chooser: hold`` (release every second) for ``operator_cluster``, which
    is made ready for it first (``ready_for_podium``)."""
    ready_for_podium(operator_cluster, operator_pool)
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


def _gpus(pod: dict[str, Any]) -> int:
    return sum(
        int(((c.get("resources") or {}).get("limits") or {}).get("nvidia.com/gpu", 0))
        for c in pod["spec"]["containers"]
    )


def _requests_gpu(pod: dict[str, Any]) -> bool:
    return _gpus(pod) > 0


def fill(cluster: LocalCluster, ns: str, zone: str) -> list[str]:
    """Other work (plain pods) on every GPU of ``zone``; their names."""
    nodes = [
        n
        for n in cluster.request("GET", "/api/v1/nodes")["items"]
        if n["metadata"]["labels"].get("topology.kubernetes.io/zone") == zone
    ]
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"other-{zone}-{i}", "namespace": ns},
            "spec": {
                "containers": [container(GPUS)],
                "nodeSelector": {"topology.kubernetes.io/zone": zone},
            },
        }
        for i in range(len(nodes))
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


def revisions_per_gang(
    cluster: LocalCluster, ns: str, pods: list[dict[str, Any]], ungated: dict[str, int]
) -> dict[str, tuple[int, int, int]]:
    """Per gang (podium's job label on its released pods): the resourceVersions of its decision
    record, of its policy and of the first write that ungated one of its pods, as the apiserver
    has them (etcd revisions order every write)."""

    def by_gang(api_version: str, kind: str) -> dict[str, int]:
        return {
            o["metadata"]["labels"][JOB]: int(o["metadata"]["resourceVersion"])
            for o in listed(cluster, api_version, kind, ns)
            if JOB in o["metadata"].get("labels", {})
        }

    records, policies = by_gang("v1", "ConfigMap"), by_gang("cilium.io/v2", "CiliumNetworkPolicy")
    out = {}
    for key in {p["metadata"]["labels"][JOB] for p in pods}:
        members = [p["metadata"]["name"] for p in pods if p["metadata"]["labels"][JOB] == key]
        out[key] = (records[key], policies[key], min(ungated[n] for n in members))
    return out


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
    if case.setup is not None:
        case.setup(cluster, operator_pool)
    with opted_in_namespace(cluster, f"hold-{name}") as ns:
        others = {zone: fill(cluster, ns, zone) for zone in case.full}
        other = [n for names in others.values() for n in names]
        job = submit(cluster, ns, case.make(f"wide-{name}"))

        def gang() -> list[dict[str, Any]]:
            return [p for p in _live_pods(cluster, ns) if p["metadata"]["name"] not in other]

        cluster.wait_for(
            f"the operator to create {case.gpu_pods} GPU pods",
            lambda: len([p for p in gang() if _requests_gpu(p)]) >= case.gpu_pods,
            timeout=120,
        )
        time.sleep(3)  # whatever else the operator creates before the gang runs (none, if held)
        names = sorted(p["metadata"]["name"] for p in gang())
        created = pods_of(cluster, ns, names)
        print("held:", [(p["metadata"]["name"], _gpus(p)) for p in created])
        assert len(created) == case.gpu_pods, names  # the first stage alone, nothing later
        reasons = {p["metadata"]["annotations"].get(REASON) for p in created}
        assert reasons == {"held"}, [p["metadata"].get("annotations") for p in created]
        assert_held(cluster, ns, names)
        bound_while_held = [p for p in gang() if p["spec"].get("nodeName")]
        assert not bound_while_held, [p["metadata"]["name"] for p in bound_while_held]
        cluster.wait_for(
            "a GangHeld event", lambda: bool(gang_held_events(cluster, ns)), timeout=30
        )
        for event in gang_held_events(cluster, ns):
            involved = event["involvedObject"]
            print("GangHeld on", involved.get("kind"), involved.get("name"), ":", event["message"])
            # On the object people submitted (a TrainJob, not the JobSet it runs as).
            assert (involved.get("kind"), involved.get("name")) == (
                job["kind"],
                job["metadata"]["name"],
            ), involved

        ungatings = Ungatings(cluster, ns)
        try:
            room_free = time.monotonic()
            delete_pods(cluster, ns, others["zone-c"])
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
        released = pods_of(cluster, ns, names)
        revisions = revisions_per_gang(cluster, ns, released, ungatings.seen)
        assert len(revisions) == case.gangs, revisions
        for key, (record_rv, policy_rv, first_release) in revisions.items():
            assert record_rv < policy_rv < first_release, (key, revisions, ungatings.seen)
        evidence = "; ".join(f"{r} < {p} < {u}" for r, p, u in revisions.values())
        print(
            f"hold with {name}: held {len(names)} pods, 0 bound; room free → all bound in "
            f"{sorted(set(zones.values()))} in {took:.1f}s; record rv < policy rv < first "
            f"ungating rv: {evidence}"
        )
        later = _later_pods(cluster, ns, case, job, names + other) if case.later else []
        print(
            f"TABLE | {name} | {case.operator} | 0 of {len(names)} pods, 0 GPUs | "
            f"{'/'.join(sorted(set(zones.values())))} | {took:.1f} | "
            f"record < policy < first ungating (rv): {evidence} | later: {later}"
        )


def _later_pods(
    cluster: LocalCluster, ns: str, case: Case, job: dict[str, Any], known: list[str]
) -> str:
    """The pods the operator creates once the gang runs (or is scaled): each follows the
    recorded zone at admission, ungated (``recorded``), and binds there — or, when podium's view
    has not yet seen the gang's released pods as the new one is admitted (a loaded machine), is
    held a moment and released into the same zone by the releaser (``completed``)."""
    if case.scale is not None:
        case.scale(cluster, ns, job)

    def later() -> list[dict[str, Any]]:
        return [p for p in _live_pods(cluster, ns) if p["metadata"]["name"] not in known]

    cluster.wait_for(
        "the operator's later pods, ungated",
        lambda: len(pods := later()) >= case.later and not any(gated(p) for p in pods),
        timeout=120,
    )
    pods = later()
    for pod in pods:
        pod_name = pod["metadata"]["name"]
        annotations = pod["metadata"].get("annotations", {})
        print("later:", pod_name, annotations.get(REASON), annotations.get(ZONE))
        assert annotations.get(REASON) in ("recorded", "completed"), (pod_name, annotations)
        assert annotations.get(ZONE) == "zone-c", (pod_name, annotations)
        assert not gated(pod), pod_name
    zones = wait_bound(cluster, ns, [p["metadata"]["name"] for p in pods], timeout=60)
    assert set(zones.values()) == {"zone-c"}, zones
    return f"{len(pods)} recorded, ungated, bound in zone-c"


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

"""JobSet and Trainer v2 TrainJob: input pod + view → the whole gang."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import JobBuilder, template
from tests.core.adapters import (
    JS,
    NS,
    SAMPLES,
    child_job,
    cpu_template,
    cpus,
    gpus,
    jobset,
    jobset_pod,
    trainjob,
    uid,
    view,
    without_controller,
    without_owners,
)
from webhook.core.adapters.base import Gang, OwnerRef, PodGroup
from webhook.core.adapters.jobset import JobSetAdapter

ADAPTER = JobSetAdapter()

JS_SWEEP = jobset(
    "sweep",
    [("driver", 1, 1, cpu_template()), ("workers", 2, 4, template(8))],
    uid=uid(1),
    annotations={"team": "search"},
)
JS_NEWER = jobset("sweep", [("workers", 9, 1, template(8))], uid=uid(2))
JS_CHOSEN = jobset(
    "chosen",
    [("driver", 1, 1, cpu_template()), ("workers", 2, 4, template(8))],
    uid=uid(3),
    coordinator={"replicatedJob": "workers", "jobIndex": 1, "podIndex": 0},
)
DRIVER_0 = child_job(JS_SWEEP, "driver", 0, uid=uid(11))
WORKERS_0 = child_job(JS_SWEEP, "workers", 0, uid=uid(12))
WORKERS_1 = child_job(JS_SWEEP, "workers", 1, uid=uid(13))
WORKERS_0_OLDER = JobBuilder("batch/v1", "Job", "sweep-workers-0", NS).uid(uid(19)).obj()
CHOSEN_W1 = child_job(JS_CHOSEN, "workers", 1, uid=uid(14))
CHOSEN_D0 = child_job(JS_CHOSEN, "driver", 0, uid=uid(15))

TJ = trainjob("tune", uid=uid(21))
TJS = jobset(
    "tune",
    [
        ("dataset-initializer", 1, 1, cpu_template()),
        ("model-initializer", 1, 1, cpu_template()),
        ("node", 1, 4, template(8)),
    ],
    uid=uid(22),
    owner=TJ,
)
TJ_NODE = child_job(TJS, "node", 0, uid=uid(23))
TJ_DATA = child_job(TJS, "dataset-initializer", 0, uid=uid(24))
MASTER_ADDR = "tune-node-0-0.tune"

SWEEP = (PodGroup(1, cpus(1)), PodGroup(8, gpus(8)))
TUNE = (PodGroup(1, cpus(1)), PodGroup(1, cpus(1)), PodGroup(4, gpus(8)))
NOTED = {"job_annotations": {"team": "search"}}


def gang(
    js: dict[str, Any],
    role: str,
    coordinator: bool,
    demand: Any,
    source: Any,
    framework: str = "jobset",
    **kw: Any,
) -> Gang:
    meta = js["metadata"]
    return Gang(
        framework=framework,
        owner=OwnerRef("jobset.x-k8s.io/v1alpha2", "JobSet", meta["name"], meta["uid"]),
        key=meta["uid"],
        role=role,
        coordinator=coordinator,
        demand=demand,
        demand_source=source,
        member_labels={JS + "jobset-name": meta["name"]},
        **kw,
    )


def by_labels(n: int) -> tuple[tuple[PodGroup, ...], str]:
    """``global-replicas`` (child Jobs) times this pod."""
    return (PodGroup(n, gpus(8)),), "labels"


#: A TrainJob's gang is its JobSet's; its Events regard the TrainJob people look at.
SHOWN = OwnerRef(TJ["apiVersion"], "TrainJob", TJ["metadata"]["name"], TJ["metadata"]["uid"])

CASES = [
    # The JobSet in the view: its spec decides demand and coordinator.
    pytest.param(
        jobset_pod(JS_SWEEP, DRIVER_0, "driver", 0, 0),
        [JS_SWEEP, DRIVER_0],
        gang(JS_SWEEP, "driver", True, SWEEP, "job", **NOTED),
        id="first-replicated-job-0-0-coordinates",
    ),
    pytest.param(
        jobset_pod(JS_SWEEP, WORKERS_0, "workers", 0, 0),
        [JS_SWEEP, WORKERS_0],
        gang(JS_SWEEP, "workers", False, SWEEP, "job", **NOTED),
        id="other-replicated-job-0-0-does-not",
    ),
    pytest.param(
        jobset_pod(JS_SWEEP, WORKERS_1, "workers", 1, 3),
        [JS_SWEEP, WORKERS_1],
        gang(JS_SWEEP, "workers", False, SWEEP, "job", **NOTED),
        id="worker",
    ),
    pytest.param(
        jobset_pod(JS_CHOSEN, CHOSEN_W1, "workers", 1, 0),
        [JS_CHOSEN, CHOSEN_W1],
        gang(JS_CHOSEN, "workers", True, SWEEP, "job"),
        id="spec-coordinator-chosen",
    ),
    pytest.param(
        jobset_pod(JS_CHOSEN, CHOSEN_D0, "driver", 0, 0),
        [JS_CHOSEN, CHOSEN_D0],
        gang(JS_CHOSEN, "driver", False, SWEEP, "job"),
        id="spec-coordinator-not-first-job",
    ),
    pytest.param(
        jobset_pod(JS_SWEEP, DRIVER_0, "driver", 0, 0),
        [JS_SWEEP],
        gang(JS_SWEEP, "driver", True, SWEEP, "job", **NOTED),
        id="batch-job-not-in-view-labels-confirmed-by-jobset",
    ),
    pytest.param(
        jobset_pod(JS_SWEEP, WORKERS_0, "workers", 0, 0),
        [JS_SWEEP, WORKERS_0_OLDER],
        gang(JS_SWEEP, "workers", False, SWEEP, "job", **NOTED),
        id="older-batch-job-same-name-ignored",
    ),
    # Without the JobSet: global-replicas for demand, the pod alone for the coordinator.
    pytest.param(
        jobset_pod(JS_SWEEP, WORKERS_0, "workers", 0, 0),
        [WORKERS_0],
        gang(JS_SWEEP, "workers", False, *by_labels(3)),
        id="jobset-not-in-view",
    ),
    pytest.param(
        jobset_pod(JS_SWEEP, DRIVER_0, "driver", 0, 0),
        [],
        gang(JS_SWEEP, "driver", True, *by_labels(3)),
        id="nothing-in-view-driver-0-0",
    ),
    pytest.param(
        jobset_pod(JS_SWEEP, WORKERS_0, "workers", 0, 0),
        [JS_NEWER, WORKERS_0],
        gang(JS_SWEEP, "workers", False, *by_labels(3)),
        id="newer-jobset-same-name-ignored",
    ),
    pytest.param(
        jobset_pod(JS_CHOSEN, CHOSEN_W1, "workers", 1, 0).annotate(
            JS + "coordinator", "chosen-workers-1-0.chosen"
        ),
        [],
        gang(JS_CHOSEN, "workers", True, *by_labels(3)),
        id="coordinator-annotation-names-pod",
    ),
    pytest.param(
        jobset_pod(JS_CHOSEN, CHOSEN_D0, "driver", 0, 0).annotate(
            JS + "coordinator", "chosen-workers-1-0.chosen"
        ),
        [],
        gang(JS_CHOSEN, "driver", False, *by_labels(3)),
        id="coordinator-annotation-names-other",
    ),
    # Trainer v2: the TrainJob's JobSet; the initializers come first but `node` coordinates.
    pytest.param(
        jobset_pod(TJS, TJ_NODE, "node", 0, 0),
        [TJ, TJS, TJ_NODE],
        gang(TJS, "node", True, TUNE, "job", framework="trainjob", shown=SHOWN),
        id="trainjob-node-0-0",
    ),
    pytest.param(
        jobset_pod(TJS, TJ_DATA, "dataset-initializer", 0, 0, gpu=0),
        [TJ, TJS, TJ_DATA],
        gang(TJS, "dataset-initializer", False, TUNE, "job", framework="trainjob", shown=SHOWN),
        id="trainjob-initializer-is-not-coordinator",
    ),
    pytest.param(
        jobset_pod(TJS, TJ_NODE, "node", 0, 0),
        [TJS, TJ_NODE],
        gang(TJS, "node", True, TUNE, "job"),
        id="trainjob-not-in-view-still-node-coordinates",
    ),
    pytest.param(
        jobset_pod(TJS, TJ_NODE, "node", 0, 0).env("PET_MASTER_ADDR", MASTER_ADDR),
        [],
        gang(TJS, "node", True, *by_labels(3)),
        id="master-addr-names-this-pod",
    ),
    pytest.param(
        jobset_pod(TJS, TJ_NODE, "node", 0, 1).env("PET_MASTER_ADDR", MASTER_ADDR),
        [],
        gang(TJS, "node", False, *by_labels(3)),
        id="master-addr-names-another-pod",
    ),
    pytest.param(
        jobset_pod(TJS, TJ_NODE, "node", 0, 2).env("PET_NNODES", "4"),
        [],
        gang(TJS, "node", False, (PodGroup(4, gpus(8)),), "env"),
        id="nnodes-env-larger-than-global-replicas",
    ),
]


@pytest.mark.parametrize(("pod", "objects", "expected"), CASES)
def test_recognise(pod: Any, objects: list[Any], expected: Gang) -> None:
    assert ADAPTER.recognise(pod.obj(), NS, view(*objects)) == expected


def pod_of(child: dict[str, Any], **labels: str) -> dict[str, Any]:
    pod = jobset_pod(JS_SWEEP, child, "workers", 0, 0).obj()
    pod["metadata"]["labels"].update(labels)
    return pod


@pytest.mark.parametrize(
    ("pod", "objects"),
    [
        pytest.param(without_owners(pod_of(WORKERS_0)), [JS_SWEEP], id="labels-no-owner"),
        pytest.param(without_controller(pod_of(WORKERS_0)), [JS_SWEEP], id="not-controller"),
        pytest.param(
            pod_of(JobBuilder("batch/v1", "Job", "nightly-0", NS).uid(uid(31)).obj()),
            [JS_SWEEP],
            id="batch-job-name-does-not-fit-labels",
        ),
        pytest.param(
            pod_of(WORKERS_0, **{JS + "jobset-uid": ""}), [JS_SWEEP], id="labels-without-uid"
        ),
        pytest.param(
            pod_of(WORKERS_0),
            [
                JobBuilder("batch/v1", "Job", "sweep-workers-0", NS)
                .uid(uid(12))
                .owned_by(JobBuilder("batch/v1", "CronJob", "sweep", NS).uid(uid(32)).obj())
                .obj()
            ],
            id="batch-job-controlled-by-a-cronjob",
        ),
    ],
)
def test_not_ours(pod: Any, objects: list[Any]) -> None:
    assert ADAPTER.recognise(pod, NS, view(*objects)) is None


def test_one_gang_for_every_pod_of_the_jobset() -> None:
    snapshot = view(JS_SWEEP, DRIVER_0, WORKERS_0, WORKERS_1)
    pods = [jobset_pod(JS_SWEEP, DRIVER_0, "driver", 0, 0)] + [
        jobset_pod(JS_SWEEP, child, "workers", i, p)
        for i, child in enumerate((WORKERS_0, WORKERS_1))
        for p in range(4)
    ]
    gangs = [ADAPTER.recognise(p.obj(), NS, snapshot) for p in pods]
    assert {g.key for g in gangs if g} == {JS_SWEEP["metadata"]["uid"]}
    assert [g.coordinator for g in gangs if g] == [True] + [False] * 8


@pytest.mark.parametrize(
    ("framework", "pod", "objects"),
    [pytest.param(f, p, o, id=i) for f, i, p, o in SAMPLES if f != ADAPTER.name],
)
def test_other_frameworks_pods_are_not_ours(framework: str, pod: Any, objects: Any) -> None:
    assert ADAPTER.recognise(pod, NS, view(*objects)) is None

"""Volcano Jobs: input pod + view → the whole gang."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import template
from tests.core.adapters import (
    NS,
    SAMPLES,
    VC,
    cpu_template,
    cpus,
    gpus,
    uid,
    view,
    volcano_job,
    volcano_pod,
    without_controller,
    without_owners,
)
from webhook.core.adapters.base import Gang, OwnerRef, PodGroup
from webhook.core.adapters.volcano import VolcanoAdapter

ADAPTER = VolcanoAdapter()

MNIST = volcano_job(
    "mnist",
    [("worker", 3, template(8)), ("master", 1, template(8))],
    uid=uid(1),
    annotations={"podium.dev/skip": "true"},
)
MNIST_NEWER = volcano_job("mnist", [("worker", 9, template(8))], uid=uid(2))
PS = volcano_job("tf", [("ps", 2, cpu_template("2")), ("worker", 4, template(8))], uid=uid(3))
MNIST_DEMAND = (PodGroup(3, gpus(8)), PodGroup(1, gpus(8)))
PS_DEMAND = (PodGroup(2, cpus(2)), PodGroup(4, gpus(8)))
SKIP = {"podium.dev/skip": "true"}


def gang(
    task: str,
    coordinator: bool,
    demand: Any,
    source: Any,
    *,
    vcjob: dict[str, Any] = MNIST,
    **kw: Any,
) -> Gang:
    meta = vcjob["metadata"]
    return Gang(
        framework="volcanojob",
        owner=OwnerRef("batch.volcano.sh/v1alpha1", "Job", meta["name"], meta["uid"]),
        key=meta["uid"],
        role=task,
        coordinator=coordinator,
        demand=demand,
        demand_source=source,
        member_labels={VC + "job-name": meta["name"]},
        **kw,
    )


ALONE = (PodGroup(1, gpus(8)),)

CASES = [
    pytest.param(
        volcano_pod(MNIST, "master", 0),
        [MNIST],
        gang("master", True, MNIST_DEMAND, "job", job_annotations=SKIP),
        id="master-0-preferred-over-first-task",
    ),
    pytest.param(
        volcano_pod(MNIST, "worker", 0),
        [MNIST],
        gang("worker", False, MNIST_DEMAND, "job", job_annotations=SKIP),
        id="worker-0",
    ),
    pytest.param(
        volcano_pod(PS, "ps", 0),
        [PS],
        gang("ps", True, PS_DEMAND, "job", vcjob=PS),
        id="no-conventional-task-first-task-0-coordinates",
    ),
    pytest.param(
        volcano_pod(PS, "ps", 1),
        [PS],
        gang("ps", False, PS_DEMAND, "job", vcjob=PS),
        id="first-task-1",
    ),
    pytest.param(
        volcano_pod(MNIST, "master", 0),
        [],
        gang("master", True, ALONE, "pod"),
        id="job-not-in-view-master-0",
    ),
    pytest.param(
        volcano_pod(PS, "ps", 0),
        [],
        gang("ps", False, ALONE, "pod", vcjob=PS),
        id="job-not-in-view-unconventional-task",
    ),
    pytest.param(
        volcano_pod(MNIST, "master", 0),
        [MNIST_NEWER],
        gang("master", True, ALONE, "pod"),
        id="newer-job-same-name-ignored",
    ),
    pytest.param(
        volcano_pod(MNIST, "master", 0, index_label=False, task_label=False),
        [MNIST],
        gang("master", True, MNIST_DEMAND, "job", job_annotations=SKIP),
        id="older-volcano-task-annotation-index-from-name",
    ),
    pytest.param(
        volcano_pod(MNIST, "master", 1, index_label=False),
        [MNIST],
        gang("master", False, MNIST_DEMAND, "job", job_annotations=SKIP),
        id="index-1-from-name",
    ),
    pytest.param(
        volcano_pod(MNIST, "worker", 2).env("WORLD_SIZE", "4"),
        [],
        gang("worker", False, (PodGroup(4, gpus(8)),), "env"),
        id="world-size-env",
    ),
]


@pytest.mark.parametrize(("pod", "objects", "expected"), CASES)
def test_recognise(pod: Any, objects: list[Any], expected: Gang) -> None:
    assert ADAPTER.recognise(pod.obj(), NS, view(*objects)) == expected


def test_pod_with_generate_name_only_keeps_its_index_labels() -> None:
    pod = volcano_pod(MNIST, "master", 0).obj()
    del pod["metadata"]["name"]
    pod["metadata"]["generateName"] = "mnist-master-"
    expected = gang("master", True, MNIST_DEMAND, "job", job_annotations=SKIP)
    assert ADAPTER.recognise(pod, NS, view(MNIST)) == expected


@pytest.mark.parametrize(
    "pod",
    [
        pytest.param(without_owners(volcano_pod(MNIST, "master", 0).obj()), id="labels-no-owner"),
        pytest.param(
            without_controller(volcano_pod(MNIST, "master", 0).obj()), id="not-controller"
        ),
    ],
)
@pytest.mark.parametrize("in_view", [True, False])
def test_not_ours(pod: Any, in_view: bool) -> None:
    assert ADAPTER.recognise(pod, NS, view(*([MNIST] if in_view else []))) is None


@pytest.mark.parametrize(
    ("framework", "pod", "objects"),
    [pytest.param(f, p, o, id=i) for f, i, p, o in SAMPLES if f != ADAPTER.name],
)
def test_other_frameworks_pods_are_not_ours(framework: str, pod: Any, objects: Any) -> None:
    assert ADAPTER.recognise(pod, NS, view(*objects)) is None

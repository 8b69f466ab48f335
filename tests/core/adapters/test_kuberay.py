"""KubeRay RayClusters: input pod + view → the whole gang."""

from __future__ import annotations

from typing import Any

import pytest

from tests.core.adapters import (
    NS,
    RAY,
    SAMPLES,
    cpus,
    gpus,
    ray_pod,
    raycluster,
    uid,
    view,
    without_controller,
    without_owners,
)
from webhook.core.adapters.base import Gang, OwnerRef, PodGroup
from webhook.core.adapters.kuberay import KubeRayAdapter

ADAPTER = KubeRayAdapter()

RC = raycluster(
    "ray",
    [{"groupName": "gpu", "replicas": 2, "minReplicas": 1, "maxReplicas": 4, "numOfHosts": 2}],
    uid=uid(1),
)
RC_NEWER = raycluster("ray", [{"groupName": "gpu", "replicas": 8}], uid=uid(2))
HEAD = PodGroup(1, cpus(4))


def gang(role: str, demand: Any, source: Any = "job", *, rc: dict[str, Any] = RC) -> Gang:
    meta = rc["metadata"]
    return Gang(
        framework="raycluster",
        owner=OwnerRef("ray.io/v1", "RayCluster", meta["name"], meta["uid"]),
        key=meta["uid"],
        role=role,
        coordinator=role == "head",
        demand=demand,
        demand_source=source,
        member_labels={RAY + "cluster": meta["name"]},
    )


def with_groups(*groups: dict[str, Any]) -> dict[str, Any]:
    return raycluster(
        "ray", [{"groupName": f"g{i}", **g} for i, g in enumerate(groups)], uid=uid(1)
    )


CASES = [
    pytest.param(ray_pod(RC), [RC], gang("head", (HEAD, PodGroup(4, gpus(8)))), id="head"),
    pytest.param(
        ray_pod(RC, "gpu"), [RC], gang("worker", (HEAD, PodGroup(4, gpus(8)))), id="worker"
    ),
    pytest.param(ray_pod(RC), [], gang("head", (HEAD,), "pod"), id="cluster-not-in-view"),
    pytest.param(
        ray_pod(RC, "gpu"),
        [RC_NEWER],
        gang("worker", (PodGroup(1, gpus(8)),), "pod"),
        id="newer-cluster-same-name-ignored",
    ),
    pytest.param(
        ray_pod(RC, "g0"),
        [with_groups({"minReplicas": 3})],
        gang("worker", (HEAD, PodGroup(3, gpus(8)))),
        id="replicas-unset-min-replicas",
    ),
    pytest.param(
        ray_pod(RC, "g0"),
        [with_groups({"replicas": 9, "minReplicas": 0, "maxReplicas": 5})],
        gang("worker", (HEAD, PodGroup(5, gpus(8)))),
        id="replicas-above-max",
    ),
    pytest.param(
        ray_pod(RC, "g0"),
        [with_groups({"replicas": 1, "minReplicas": 6, "maxReplicas": 4})],
        gang("worker", (HEAD, PodGroup(4, gpus(8)))),
        id="min-above-max-uses-max",
    ),
    pytest.param(
        ray_pod(RC, "g0"),
        [with_groups({"replicas": 2, "suspend": True}, {"replicas": 1})],
        gang("worker", (HEAD, PodGroup(1, gpus(8)))),
        id="suspended-group-counts-zero",
    ),
    pytest.param(
        ray_pod(RC, "g0"),
        [with_groups({"replicas": "two"}, {"replicas": 1})],
        gang("worker", (HEAD, PodGroup(1, gpus(8)))),
        id="unusable-group-skipped",
    ),
]


@pytest.mark.parametrize(("pod", "objects", "expected"), CASES)
def test_recognise(pod: Any, objects: list[Any], expected: Gang) -> None:
    """KubeRay pods have generateName only, so every case is also a generateName case."""
    obj = pod.obj()
    assert "name" not in obj["metadata"]
    assert ADAPTER.recognise(obj, NS, view(*objects)) == expected


@pytest.mark.parametrize(
    "pod",
    [
        pytest.param(without_owners(ray_pod(RC).obj()), id="labels-no-owner"),
        pytest.param(without_controller(ray_pod(RC).obj()), id="not-controller"),
    ],
)
@pytest.mark.parametrize("in_view", [True, False])
def test_not_ours(pod: Any, in_view: bool) -> None:
    assert ADAPTER.recognise(pod, NS, view(*([RC] if in_view else []))) is None


@pytest.mark.parametrize(
    ("framework", "pod", "objects"),
    [pytest.param(f, p, o, id=i) for f, i, p, o in SAMPLES if f != ADAPTER.name],
)
def test_other_frameworks_pods_are_not_ours(framework: str, pod: Any, objects: Any) -> None:
    assert ADAPTER.recognise(pod, NS, view(*objects)) is None

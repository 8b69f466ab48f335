"""kube-scheduler's own gang and topology placement, switched on in the local control plane.

With ``LocalCluster(feature_gates=SCHEDULER_GANG_GATES,
runtime_config=SCHEDULER_GANG_RUNTIME_CONFIG)`` — GenericWorkload and
TopologyAwareWorkloadScheduling on kube-apiserver, kube-controller-manager and kube-scheduler,
scheduling.k8s.io/v1beta1 served — a PodGroup with ``gang.minCount`` and a zone topology
constraint makes the scheduler place its pods all at once in one zone, or not at all. Without them
(the suite's usual cluster) the PodGroup API is not served and a pod's ``spec.schedulingGroup`` is
dropped. The API shape is written down in docs/benchmarks/placement.md.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from testbed.controlplane import (
    PODGROUP_PROTECTION_CONTROLLER,
    SCHEDULER_GANG_GATES,
    SCHEDULER_GANG_RUNTIME_CONFIG,
    ApiError,
    LocalCluster,
)

from .conftest import controlplane_or_skip

pytestmark = pytest.mark.e2e

ZONE = "topology.kubernetes.io/zone"
#: 16, 8 and 8 GPUs: a 12-GPU gang fits only zone-a.
GANG_ZONES = {"zone-a": [8, 8], "zone-b": [8], "zone-c": [8]}
PODGROUPS = "/apis/scheduling.k8s.io/v1beta1/namespaces/{ns}/podgroups"


@pytest.fixture(scope="module")
def gang_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(
        controlplane_or_skip(),
        tmp_path_factory.mktemp("gang-controlplane"),
        feature_gates=SCHEDULER_GANG_GATES,
        runtime_config=SCHEDULER_GANG_RUNTIME_CONFIG,
    ) as cluster:
        cluster.create_fake_nodes(GANG_ZONES)
        yield cluster


@pytest.fixture
def gang_ns(gang_cluster: LocalCluster) -> Iterator[str]:
    name = f"gang-{uuid.uuid4().hex[:6]}"
    gang_cluster.create_namespace(name)
    yield name
    gang_cluster.delete_namespace(name, gone=False)


def podgroup(name: str, min_count: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": min_count}},
            "schedulingConstraints": {"topology": [{"key": ZONE}]},
        },
    }


def gang_pod(name: str, group: str | None, gpus: int) -> dict[str, Any]:
    res = {"nvidia.com/gpu": str(gpus)}
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {"name": "main", "image": "trainer:1", "resources": {"requests": res, "limits": res}}
        ],
    }
    if group:
        spec["schedulingGroup"] = {"podGroupName": group}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def create_pod(cluster: LocalCluster, ns: str, pod: dict[str, Any]) -> dict[str, Any]:
    created: dict[str, Any] = cluster.request("POST", f"/api/v1/namespaces/{ns}/pods", pod)
    return created


def pods(cluster: LocalCluster, ns: str, prefix: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"]
    return [p for p in items if p["metadata"]["name"].startswith(prefix)]


def zones_of(cluster: LocalCluster, bound: list[dict[str, Any]]) -> set[str]:
    nodes = {
        n["metadata"]["name"]: n["metadata"]["labels"][ZONE]
        for n in cluster.request("GET", "/api/v1/nodes")["items"]
    }
    return {nodes[p["spec"]["nodeName"]] for p in bound}


def all_bound(cluster: LocalCluster, ns: str, prefix: str, n: int) -> bool:
    found = pods(cluster, ns, prefix)
    return len(found) == n and all(p["spec"].get("nodeName") for p in found)


def none_bound_for(cluster: LocalCluster, ns: str, prefix: str, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if any(p["spec"].get("nodeName") for p in pods(cluster, ns, prefix)):
            return False
        time.sleep(0.25)
    return True


def scheduled_condition(cluster: LocalCluster, ns: str, name: str) -> dict[str, Any] | None:
    group = cluster.request("GET", f"{PODGROUPS.format(ns=ns)}/{name}")
    for condition in (group.get("status") or {}).get("conditions") or []:
        if condition["type"] == "PodGroupInitiallyScheduled":
            return dict(condition)
    return None


# -- gates off: the suite's usual cluster --------------------------------------------------------


def test_without_the_gates_the_podgroup_api_is_not_served(
    local_cluster: LocalCluster, namespace: str
) -> None:
    with pytest.raises(ApiError) as missing:
        local_cluster.request("GET", "/apis/scheduling.k8s.io/v1beta1")
    assert missing.value.status == 404
    with pytest.raises(ApiError) as refused:
        local_cluster.request("POST", PODGROUPS.format(ns=namespace), podgroup("g", 2))
    assert refused.value.status == 404
    # The gated pod field is dropped, silently: nothing would gang-schedule the pod.
    created = create_pod(local_cluster, namespace, gang_pod("lone", "g", 0))
    assert "schedulingGroup" not in created["spec"]


# -- gates on ------------------------------------------------------------------------------------


def test_with_the_gates_the_podgroup_api_is_served_with_its_defaults(
    gang_cluster: LocalCluster, gang_ns: str
) -> None:
    assert PODGROUP_PROTECTION_CONTROLLER in gang_cluster.controllers
    resources = gang_cluster.request("GET", "/apis/scheduling.k8s.io/v1beta1")["resources"]
    assert {"podgroups", "workloads"} <= {r["name"] for r in resources}
    stored = gang_cluster.request("POST", PODGROUPS.format(ns=gang_ns), podgroup("g", 3))
    assert stored["spec"] == {
        "schedulingPolicy": {"gang": {"minCount": 3}},
        "schedulingConstraints": {"topology": [{"key": ZONE}]},
        "disruptionMode": {"single": {}},
        "priority": 0,
    }
    assert stored["metadata"]["finalizers"] == ["scheduling.k8s.io/podgroup-protection"]
    # minCount may change; the topology constraint and a pod's group may not.
    path = f"{PODGROUPS.format(ns=gang_ns)}/g"
    patch = {"spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}}
    gang_cluster.request("PATCH", path, patch, content_type="application/merge-patch+json")
    with pytest.raises(ApiError) as immutable:
        gang_cluster.request(
            "PATCH",
            path,
            {"spec": {"schedulingConstraints": {"topology": [{"key": "kubernetes.io/hostname"}]}}},
            content_type="application/merge-patch+json",
        )
    assert immutable.value.status == 422
    # No pod uses it: the protection controller lets it go.
    gang_cluster.request("DELETE", path)
    gang_cluster.wait_for(
        "the PodGroup to be deleted",
        lambda: (
            not any(
                g["metadata"]["name"] == "g"
                for g in gang_cluster.request("GET", PODGROUPS.format(ns=gang_ns))["items"]
            )
        ),
        timeout=30,
    )


def test_a_gang_waits_for_min_count_then_lands_whole_in_the_one_zone_that_fits(
    gang_cluster: LocalCluster, gang_ns: str
) -> None:
    gang_cluster.request("POST", PODGROUPS.format(ns=gang_ns), podgroup("train", 3))
    for i in range(2):
        create_pod(gang_cluster, gang_ns, gang_pod(f"train-{i}", "train", 4))
    # Two of three: the gang waits, nothing is bound (no GPU is held by half a job).
    assert none_bound_for(gang_cluster, gang_ns, "train-", 3.0)
    created = create_pod(gang_cluster, gang_ns, gang_pod("train-2", "train", 4))
    assert created["spec"]["schedulingGroup"] == {"podGroupName": "train"}
    gang_cluster.wait_for(
        "the gang to be bound", lambda: all_bound(gang_cluster, gang_ns, "train-", 3)
    )
    # 12 GPUs fit only zone-a (16); the default scheduler would have spread them.
    assert zones_of(gang_cluster, pods(gang_cluster, gang_ns, "train-")) == {"zone-a"}
    condition = scheduled_condition(gang_cluster, gang_ns, "train")
    assert condition is not None
    assert (condition["status"], condition["reason"]) == ("True", "Scheduled")


def test_a_gang_no_zone_fits_waits_unbound_until_a_zone_frees(
    gang_cluster: LocalCluster, gang_ns: str
) -> None:
    # 12 GPUs of zone-a taken by a first gang: then 4 + 8 + 8 free, 20 in all, no zone with 12.
    gang_cluster.request("POST", PODGROUPS.format(ns=gang_ns), podgroup("first", 3))
    for i in range(3):
        create_pod(gang_cluster, gang_ns, gang_pod(f"first-{i}", "first", 4))
    gang_cluster.wait_for(
        "the first gang to be bound", lambda: all_bound(gang_cluster, gang_ns, "first-", 3)
    )
    # The second gang's pods come first, its PodGroup later (a pod may name one not yet made).
    for i in range(3):
        create_pod(gang_cluster, gang_ns, gang_pod(f"second-{i}", "second", 4))
    gang_cluster.request("POST", PODGROUPS.format(ns=gang_ns), podgroup("second", 3))
    assert none_bound_for(gang_cluster, gang_ns, "second-", 4.0)
    gang_cluster.wait_for(
        "the second gang to be found unschedulable",
        lambda: (
            (scheduled_condition(gang_cluster, gang_ns, "second") or {}).get("reason")
            == "Unschedulable"
        ),
    )
    for i in range(3):
        gang_cluster.request(
            "DELETE",
            f"/api/v1/namespaces/{gang_ns}/pods/first-{i}",
            query={"gracePeriodSeconds": "0"},
        )
    gang_cluster.wait_for(
        "the second gang to be bound", lambda: all_bound(gang_cluster, gang_ns, "second-", 3)
    )
    assert zones_of(gang_cluster, pods(gang_cluster, gang_ns, "second-")) == {"zone-a"}

"""Kueue's Topology Aware Scheduling on the local control plane: the ``kueue-tas`` arm of the
placement study runs on exactly this (testbed/operators/kueue.py, docs/operators.md).

Opt-in like the operator tests, since Kueue is built from the Go module proxy:
``PODIUM_E2E_OPERATORS=kueue`` (or ``all``, which ``make test`` sets).

One plain-pod group of 4 pods × 4 GPUs with a required zone topology, on nodes where only zone-a
has 16 GPUs: Kueue gates the pods at creation, builds one Workload, admits it, removes its gates,
and all 4 bind in zone-a.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed.controlplane import LocalCluster
from testbed.operators import kueue
from testbed.operators.runner import Build

from .conftest import controlplane_or_skip

pytestmark = pytest.mark.e2e

ENV = "PODIUM_E2E_OPERATORS"
ENABLED = os.environ.get(ENV, "").strip() in ("all", "1") or "kueue" in {
    v.strip() for v in os.environ.get(ENV, "").split(",")
}
#: zone-a alone has room for 16 GPUs.
NODES = {"zone-a": [8, 8], "zone-b": [8], "zone-c": [8]}
GANG, GPUS = 4, 4


@pytest.fixture(scope="module")
def kueue_build() -> Build:
    if not ENABLED:
        pytest.skip(f"set {ENV}=kueue")
    return kueue.build_kueue()


@pytest.fixture(scope="module")
def kueue_cluster(
    kueue_build: Build, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalCluster]:
    """A control plane of its own: Kueue's pod webhook sees every namespace but two."""
    work = tmp_path_factory.mktemp("kueue")
    with LocalCluster(controlplane_or_skip(), work / "controlplane") as cluster:
        cluster.create_fake_nodes(NODES)
        manager = kueue.Kueue(cluster, kueue_build, work / "kueue")
        manager.start()
        try:
            yield cluster
        finally:
            manager.stop()


def _pod(name: str, namespace: str) -> dict[str, Any]:
    gpus = {"nvidia.com/gpu": str(GPUS)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "trainer",
                    "image": "trainer:1",
                    "resources": {"requests": gpus, "limits": gpus},
                }
            ],
        },
    }


def _pods(cluster: LocalCluster, namespace: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.request("GET", f"/api/v1/namespaces/{namespace}/pods")[
        "items"
    ]
    return items


def _zones(cluster: LocalCluster, pods: list[dict[str, Any]]) -> set[str]:
    nodes = {
        n["metadata"]["name"]: n["metadata"]["labels"]["topology.kubernetes.io/zone"]
        for n in cluster.request("GET", "/api/v1/nodes")["items"]
    }
    return {nodes[p["spec"]["nodeName"]] for p in pods}


def test_a_plain_pod_group_with_a_zone_topology_is_admitted_and_binds_in_one_zone(
    kueue_cluster: LocalCluster, tmp_path: Path
) -> None:
    cluster = kueue_cluster
    namespace = f"kueue-{uuid.uuid4().hex[:6]}"
    cluster.create_namespace(namespace)
    for obj in kueue.tas_objects(
        gpus=8 * 4, node_labels={"type": "kwok"}, queue="gpus", namespace=namespace
    ):
        cluster.apply(obj)
    created = [
        cluster.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/pods",
            kueue.pod_group(_pod(f"gang-{i}", namespace), group="gang", size=GANG, queue="gpus"),
        )
        for i in range(GANG)
    ]
    # Kueue's webhook gated every pod at creation: admission, then topology.
    assert all(
        {g["name"] for g in p["spec"]["schedulingGates"]}
        == {"kueue.x-k8s.io/admission", "kueue.x-k8s.io/topology"}
        for p in created
    )

    def bound() -> bool:
        return all(p["spec"].get("nodeName") for p in _pods(cluster, namespace))

    cluster.wait_for("the group's 4 pods to be bound", bound, timeout=120)
    pods = _pods(cluster, namespace)
    assert len(pods) == GANG
    assert _zones(cluster, pods) == {"zone-a"}
    assert all(not p["spec"].get("schedulingGates") for p in pods)
    # TAS pinned each pod to the node it assigned.
    assert all(
        p["spec"]["nodeSelector"].get("kubernetes.io/hostname") == p["spec"]["nodeName"]
        for p in pods
    )
    [workload] = cluster.request(
        "GET", f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{namespace}/workloads"
    )["items"]
    conditions = {c["type"]: c["status"] for c in workload["status"]["conditions"]}
    assert conditions["QuotaReserved"] == conditions["Admitted"] == "True"
    [podset] = workload["status"]["admission"]["podSetAssignments"]
    assert podset["count"] == GANG

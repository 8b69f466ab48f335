"""The local control plane itself: what the podium e2e tests rely on actually works."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from testbed.controlplane import ZONES, ApiError, ControlPlaneError, LocalCluster, crd_files

pytestmark = pytest.mark.e2e


def _names(items: list[dict[str, Any]]) -> set[str]:
    return {item["metadata"]["name"] for item in items}


def test_cluster_is_up(local_cluster: LocalCluster) -> None:
    assert local_cluster.request("GET", "/readyz", parse=False) == "ok"
    version = local_cluster.request("GET", "/version")
    assert version["gitVersion"].startswith("v1.")
    assert local_cluster.server.startswith("https://127.0.0.1:")
    assert local_cluster.kubeconfig.is_file()
    assert local_cluster.ca_file.is_file()

    result = local_cluster.kubectl("get", "namespaces", "-o", "name")
    assert "namespace/default" in result.stdout.split()


def test_kubernetes_client_works_with_the_kubeconfig(local_cluster: LocalCluster) -> None:
    with local_cluster.api_client() as api:
        nodes = client.CoreV1Api(api).list_node(label_selector="type=kwok")
    assert len(nodes.items) == sum(len(counts) for counts in ZONES.values())


def test_fake_nodes_are_ready_with_zones_and_gpus(local_cluster: LocalCluster) -> None:
    nodes = local_cluster.request("GET", "/api/v1/nodes", query={"labelSelector": "type=kwok"})
    gpus_by_zone: dict[str, int] = {}
    for node in nodes["items"]:
        labels = node["metadata"]["labels"]
        assert labels["kubernetes.io/hostname"] == node["metadata"]["name"]
        assert labels["topology.kubernetes.io/region"] == "local"
        assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
        assert not node["spec"].get("taints")
        status = node["status"]
        assert status["allocatable"]["cpu"] == "64"
        assert status["allocatable"]["memory"] == "512Gi"
        assert status["allocatable"]["pods"] == "110"
        assert status["capacity"] == status["allocatable"]
        ready = [c for c in status["conditions"] if c["type"] == "Ready"]
        assert ready and ready[0]["status"] == "True"
        zone = labels["topology.kubernetes.io/zone"]
        gpus_by_zone[zone] = gpus_by_zone.get(zone, 0) + int(
            status["allocatable"]["nvidia.com/gpu"]
        )
    assert gpus_by_zone == {"zone-a": 8, "zone-b": 16, "zone-c": 64}


def test_pod_is_scheduled_onto_a_kwok_node_and_runs(
    local_cluster: LocalCluster, namespace: str
) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "plain-", "namespace": namespace},
        "spec": {
            "nodeSelector": {"topology.kubernetes.io/zone": "zone-b"},
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/trainer:1",
                    "resources": {"limits": {"nvidia.com/gpu": "8"}},
                }
            ],
        },
    }
    created = local_cluster.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod)
    name = created["metadata"]["name"]
    assert name.startswith("plain-")
    path = f"/api/v1/namespaces/{namespace}/pods/{name}"

    local_cluster.wait_for(
        f"pod {name} to run",
        lambda: local_cluster.request("GET", path)["status"].get("phase") == "Running",
    )
    running = local_cluster.request("GET", path)
    assert running["spec"]["nodeName"] in {"kwok-zone-b-0", "kwok-zone-b-1"}
    assert running["status"]["podIP"]


def test_crds_are_established(local_cluster: LocalCluster) -> None:
    crds = local_cluster.request("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
    installed = _names(crds["items"])
    expected = {
        "ciliumnetworkpolicies.cilium.io",
        "ciliumclusterwidenetworkpolicies.cilium.io",
        "pytorchjobs.kubeflow.org",
        "mpijobs.kubeflow.org",
        "jobsets.jobset.x-k8s.io",
        "leaderworkersets.leaderworkerset.x-k8s.io",
        "trainjobs.trainer.kubeflow.org",
    }
    assert expected <= installed
    assert len(crd_files()) == len(installed)
    assert all(local_cluster.crd_established(name) for name in installed)
    mpijob = local_cluster.request(
        "GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/mpijobs.kubeflow.org"
    )
    assert [v["name"] for v in mpijob["spec"]["versions"]] == ["v2beta1"]


def _network_policy(namespace: str, enable_default_deny: dict[str, Any]) -> dict[str, Any]:
    job = {"training.kubeflow.org/job-name": "demo"}
    return {
        "apiVersion": "cilium.io/v2",
        "kind": "CiliumNetworkPolicy",
        "metadata": {"generateName": "podium-", "namespace": namespace},
        "spec": {
            "endpointSelector": {"matchLabels": job},
            "enableDefaultDeny": enable_default_deny,
            "ingress": [{"fromEndpoints": [{"matchLabels": job}]}],
            "egress": [{"toEndpoints": [{"matchLabels": job}]}],
        },
    }


def test_cilium_network_policy_is_accepted_by_the_real_schema(
    local_cluster: LocalCluster, namespace: str
) -> None:
    path = f"/apis/cilium.io/v2/namespaces/{namespace}/ciliumnetworkpolicies"
    created = local_cluster.request(
        "POST", path, _network_policy(namespace, {"ingress": False, "egress": False})
    )
    assert created["spec"]["enableDefaultDeny"] == {"ingress": False, "egress": False}

    # The schema is enforced: a string where a boolean belongs is refused.
    with pytest.raises(ApiError) as refused:
        local_cluster.request(
            "POST", path, _network_policy(namespace, {"ingress": "no", "egress": False})
        )
    assert refused.value.status == 422


def _config_map(namespace: str, name: str, owner: dict[str, Any] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if owner is not None:
        metadata["ownerReferences"] = [
            {
                "apiVersion": owner["apiVersion"],
                "kind": owner["kind"],
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
            }
        ]
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": {"k": "v"}}


def _pytorch_job(namespace: str, name: str) -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "pytorch", "image": "registry.invalid/t:1"}]}}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template}}},
    }


@pytest.mark.parametrize(
    ("owner_collection", "make_owner"),
    [
        ("/api/v1/namespaces/{ns}/configmaps", _config_map),
        ("/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs", _pytorch_job),
    ],
    ids=["configmap-owner", "pytorchjob-owner"],
)
def test_garbage_collector_deletes_dependents(
    local_cluster: LocalCluster, namespace: str, owner_collection: str, make_owner: Any
) -> None:
    collection = owner_collection.format(ns=namespace)
    owner = local_cluster.request("POST", collection, make_owner(namespace, "owner"))
    configmaps = f"/api/v1/namespaces/{namespace}/configmaps"
    local_cluster.request("POST", configmaps, _config_map(namespace, "dependent", owner))

    local_cluster.request("DELETE", f"{collection}/owner", {"propagationPolicy": "Background"})
    local_cluster.wait_for(
        "the garbage collector to delete the dependent",
        lambda: "dependent" not in _names(local_cluster.request("GET", configmaps)["items"]),
    )


def test_audit_log_records_requests(local_cluster: LocalCluster, namespace: str) -> None:
    configmaps = f"/api/v1/namespaces/{namespace}/configmaps"
    local_cluster.request("POST", configmaps, _config_map(namespace, "audited"))

    def audited() -> bool:
        return any(
            event.get("verb") == "create"
            and event.get("objectRef", {}).get("name") == "audited"
            and event.get("objectRef", {}).get("namespace") == namespace
            for event in local_cluster.audit_events()
        )

    local_cluster.wait_for("the audit event of the ConfigMap", audited, timeout=30)
    lines = local_cluster.audit_log.read_text().splitlines()
    assert all(json.loads(line)["kind"] == "Event" for line in lines)


def test_failed_start_raises_with_the_log_and_leaves_no_process(
    local_cluster: LocalCluster, tmp_path: Path
) -> None:
    broken = LocalCluster(
        local_cluster.bin_dir, tmp_path, extra_apiserver_args=["--no-such-flag=1"]
    )
    with pytest.raises(ControlPlaneError) as failed, broken:
        pytest.fail("a cluster with a bad apiserver flag started")
    message = str(failed.value)
    assert message.startswith("kube-apiserver: exited with code")
    assert "no-such-flag" in message  # the tail of the apiserver's log
    assert set(broken.processes) == {"etcd", "kube-apiserver"}
    assert all(p.returncode is not None for p in broken.processes.values())

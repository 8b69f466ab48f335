"""``podium doctor`` against the real control plane, with seeded broken jobs: a job split across
zones (pods bound with nodeName, annotated podium.dev/skip), a job whose policy was deleted, a
CCNP with egressDeny selecting a job, a hostNetwork job, a job whose pods were created while
podium was stopped — it finds every one, and reports nothing on a healthy job."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from testbed.controlplane import ApiError, LocalCluster
from testbed.podium import PIN, Podium, run_doctor

from .test_podium import (
    create,
    create_concurrently,
    podium_objects,
    pytorch_pods,
    pytorchjob,
    serving,
)

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def podium(
    local_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Podium]:
    with contextlib.suppress(ApiError):
        local_cluster.request(
            "POST",
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "podium-system"}},
        )
    config = PIN + "reconcile-interval-seconds: 3600\n"  # a deleted policy stays deleted
    work = tmp_path_factory.mktemp("doctor-podium")
    with serving(Podium(local_cluster, work, config=config)) as server:
        yield server


def job_with_pods(
    cluster: LocalCluster, ns: str, name: str, **pod_changes: Any
) -> list[dict[str, Any]]:
    job = pytorchjob(cluster, ns, name, workers=1, gpus=0)
    pods = pytorch_pods(job, workers=1, gpus=0)
    for p in pods:
        for key, value in pod_changes.items():
            if key == "annotations":
                p["metadata"]["annotations"] = value
            else:
                p["spec"][key] = value
    return create_concurrently(cluster, pods)


def test_doctor_finds_every_seeded_problem(local_cluster: LocalCluster, podium: Podium) -> None:
    ns = f"doc-{uuid.uuid4().hex[:6]}"
    local_cluster.request(
        "POST",
        "/api/v1/namespaces",
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": ns, "labels": {"podium.dev/enabled": "true"}},
        },
    )
    job_with_pods(local_cluster, ns, "healthy")
    # Split: the user bypassed podium and bound the pods directly, in two zones.
    split = pytorchjob(local_cluster, ns, "split", workers=1, gpus=0)
    for p, node in zip(
        pytorch_pods(split, workers=1, gpus=0), ("kwok-zone-a-0", "kwok-zone-c-0"), strict=True
    ):
        p["metadata"]["annotations"] = {"podium.dev/skip": "true"}
        p["spec"]["nodeName"] = node
        create(local_cluster, p)
    # No policy: admitted, then its policy deleted (the reconciler is slowed down in this module).
    job_with_pods(local_cluster, ns, "nopolicy")
    _, policies = podium_objects(local_cluster, ns)
    (gone,) = [p for p in policies if "nopolicy" in p["metadata"]["name"]]
    local_cluster.request(
        "DELETE",
        f"/apis/cilium.io/v2/namespaces/{ns}/ciliumnetworkpolicies/{gone['metadata']['name']}",
    )
    # A cluster-wide deny rule that selects one job and drops its pods' traffic to their own
    # namespace, peers included (an egress deny to `world` alone would not touch the job's own
    # traffic: doctor judges as Cilium does, tests/cilium/test_doctor_agrees.py).
    job_with_pods(local_cluster, ns, "denied")
    ccnp = f"deny-{ns}"
    create_ccnp = {
        "apiVersion": "cilium.io/v2",
        "kind": "CiliumClusterwideNetworkPolicy",
        "metadata": {"name": ccnp},
        "spec": {
            "endpointSelector": {
                "matchLabels": {
                    "k8s:io.kubernetes.pod.namespace": ns,
                    "training.kubeflow.org/job-name": "denied",
                }
            },
            "egressDeny": [
                {"toEndpoints": [{"matchLabels": {"k8s:io.kubernetes.pod.namespace": ns}}]}
            ],
        },
    }
    local_cluster.request(
        "POST", "/apis/cilium.io/v2/ciliumclusterwidenetworkpolicies", create_ccnp
    )
    job_with_pods(local_cluster, ns, "hostnet", hostNetwork=True)
    # Pods created while podium is down: the apiserver admits them unchanged (failurePolicy Ignore).
    # Bound to one node, so that the scheduler cannot also make them a split job.
    podium.stop()
    try:
        job_with_pods(local_cluster, ns, "downtime", nodeName="kwok-zone-b-0")
    finally:
        podium.start()
    try:
        code, report = run_doctor(local_cluster, ns)
    finally:
        local_cluster.request(
            "DELETE", f"/apis/cilium.io/v2/ciliumclusterwidenetworkpolicies/{ccnp}"
        )
        # later modules count free GPUs: leave none of these pods behind
        local_cluster.request("DELETE", f"/api/v1/namespaces/{ns}")
    assert code == 1
    by_job = {j["job"]: j for j in report["jobs"]}
    found = {name: sorted(f["check"] for f in j["findings"]) for name, j in by_job.items()}
    assert found == {
        "PyTorchJob/healthy": [],
        "PyTorchJob/split": ["split-zones"],
        "PyTorchJob/nopolicy": ["no-policy"],
        "PyTorchJob/denied": ["deny-rule"],
        "PyTorchJob/hostnet": ["host-network"],
        "PyTorchJob/downtime": ["not-pinned"],
    }
    assert by_job["PyTorchJob/healthy"]["verdict"] == "ok"
    assert all(f["fix"] for f in report["findings"])

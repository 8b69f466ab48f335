"""A finished job gives its zone back at once (issue 20), and a job pinned where it cannot run is
reported by ``podium doctor`` — through the real apiserver, scheduler and kwok.

The cluster's zones hold 8, 16 and 64 GPUs (8-GPU nodes). kwok completes a Running pod owned by a
batch Job (its ``pod-complete`` stage), as it completes the demo's JobSet ``mnist-tj``: a
JobSet's pods finish, a PyTorchJob's keep running.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from testbed.controlplane import LocalCluster
from testbed.podium import PIN, Podium, opted_in_namespace, run_doctor
from tests.builders import owner_ref

from .test_podium import (
    REASON,
    ZONE,
    container,
    create,
    create_concurrently,
    pod,
    pytorch_pods,
    pytorchjob,
    serving,
    until_podium_would,
    wait_bound,
    wait_until_no_gpu_is_taken,
)

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def podium(
    local_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Podium]:
    """podium pinning at admission, otherwise with its default settings: ``reservation-seconds:
    600``."""
    with serving(
        Podium(local_cluster, tmp_path_factory.mktemp("reservations"), config=PIN)
    ) as server:
        yield server


def jobset_pods(
    cluster: LocalCluster, ns: str, name: str, *, replicas: int, gpus: int
) -> list[dict[str, Any]]:
    """A JobSet of ``replicas`` one-pod batch Jobs (created, suspended, as the JobSet controller
    would), and its pods to create: owned by the batch Jobs, so kwok completes them."""
    spec = {"restartPolicy": "Never", "containers": [container(gpus)]}
    jobset = create(
        cluster,
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "node",
                        "replicas": replicas,
                        "template": {
                            "spec": {"parallelism": 1, "completions": 1, "template": {"spec": spec}}
                        },
                    }
                ]
            },
        },
    )
    pods = []
    for i in range(replicas):
        batch_job = create(
            cluster,
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {
                    "name": f"{name}-node-{i}",
                    "namespace": ns,
                    "ownerReferences": [owner_ref(jobset)],
                },
                "spec": {"suspend": True, "template": {"spec": spec}},
            },
        )
        labels = {
            "jobset.sigs.k8s.io/jobset-name": name,
            "jobset.sigs.k8s.io/jobset-uid": jobset["metadata"]["uid"],
            "jobset.sigs.k8s.io/replicatedjob-name": "node",
            "jobset.sigs.k8s.io/replicatedjob-replicas": str(replicas),
            "jobset.sigs.k8s.io/job-index": str(i),
            "jobset.sigs.k8s.io/global-replicas": str(replicas),
        }
        pods.append(
            pod(
                ns,
                generate_name=f"{name}-node-{i}-0-",
                gpus=gpus,
                owners=[owner_ref(batch_job)],
                labels=labels,
                annotations={"batch.kubernetes.io/job-completion-index": "0"},
            )
        )
    time.sleep(1)  # podium's watch sees the batch Jobs
    return pods


def get_pod(cluster: LocalCluster, ns: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = cluster.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
    return found


def unschedulable(found: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
        for c in found.get("status", {}).get("conditions", [])
    )


def test_a_finished_jobs_zone_takes_the_next_gang_at_once_and_doctor_flags_a_stuck_one(
    local_cluster: LocalCluster, podium: Podium
) -> None:
    wait_until_no_gpu_is_taken(local_cluster)
    with opted_in_namespace(local_cluster, "resv", seen_by=podium) as ns:
        # A JobSet of 8 × 8 GPUs: only zone-c (64) holds it. Its pods run, then complete.
        finished = create_concurrently(
            local_cluster, jobset_pods(local_cluster, ns, "mnist-tj", replicas=8, gpus=8)
        )
        names = [p["metadata"]["name"] for p in finished]
        assert {p["metadata"]["annotations"][ZONE] for p in finished} == {"zone-c"}
        local_cluster.wait_for(
            "the JobSet's pods to complete",
            lambda: all(
                get_pod(local_cluster, ns, n)["status"].get("phase") == "Succeeded" for n in names
            ),
            timeout=90,
        )
        # Well within reservation-seconds (600), a PyTorchJob of 8 × 8 GPUs, which only zone-c
        # can hold: its finished pods need no room, so zone-c fits, and best.
        job = pytorchjob(local_cluster, ns, "next", workers=7)
        pods = pytorch_pods(job, workers=7)
        # Until podium's watch has the JobSet's pods finished, zone-c looks full: ask (a
        # server-side dry run, which creates nothing) until podium sees the room.
        until_podium_would(
            local_cluster,
            pods[0],
            "podium's watch to see the JobSet's pods finished",
            lambda got: got["metadata"]["annotations"][ZONE] == "zone-c",
        )
        placed = create_concurrently(local_cluster, pods)
        assert {p["metadata"]["annotations"][ZONE] for p in placed} == {"zone-c"}
        reasons = {p["metadata"]["annotations"][REASON] for p in placed}
        assert "best-fit" in reasons and reasons <= {"best-fit", "recorded"}, reasons
        zones = wait_bound(local_cluster, ns, [p["metadata"]["name"] for p in placed])
        assert set(zones.values()) == {"zone-c"}

        # Now no zone has room for 3 × 8 GPUs (8, 16 and 0 free): pinned to the roomiest, zone-b,
        # two pods bind and the third waits, unschedulable. doctor says so, and why.
        late = pytorchjob(local_cluster, ns, "late", workers=2)
        stuck = create_concurrently(local_cluster, pytorch_pods(late, workers=2))
        assert {p["metadata"]["annotations"][ZONE] for p in stuck} == {"zone-b"}
        assert "no-fit-most-free" in {p["metadata"]["annotations"][REASON] for p in stuck}
        stuck_names = [p["metadata"]["name"] for p in stuck]
        local_cluster.wait_for(
            "the scheduler to report a pod of the late job unschedulable",
            lambda: any(unschedulable(get_pod(local_cluster, ns, n)) for n in stuck_names),
            timeout=90,
        )
        code, report = run_doctor(local_cluster, ns)
    assert code == 1
    by_job = {j["job"]: j for j in report["jobs"]}
    assert by_job["PyTorchJob/next"]["verdict"] == "ok"
    (finding,) = by_job["PyTorchJob/late"]["findings"]
    assert finding["check"] == "unschedulable"
    assert "pinned to zone-b cannot be scheduled there" in finding["detail"]
    assert "Insufficient nvidia.com/gpu" in finding["detail"]  # the scheduler's own words
    assert "2 of its 3 pod(s) are bound" in finding["detail"]
    assert finding["fix"].startswith("zone-b has no room for them")

"""``zone-chooser: hold`` on the real apiserver, scheduler and kwok (issue 20, phase 1).

The cluster's zones hold 8, 16 and 64 GPUs (8-GPU nodes). "Other work" is plain pods (no
training job: podium leaves them alone) pinned to zone-c by a node selector; when they go, zone-c
has room again. A gang held by podium's gate binds nothing while it waits, and is released whole
into one zone once there is room; its policy exists, as the apiserver's own resourceVersion
order shows, before any of its pods was ungated.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import watch

from testbed.controlplane import LocalCluster
from testbed.podium import Podium, opted_in_namespace

from .test_podium import (
    ZONE,
    container,
    create_concurrently,
    listed,
    pytorch_pods,
    pytorchjob,
    serving,
    wait_bound,
    wait_until_no_gpu_is_taken,
)
from .test_reconciler import ensure_namespace

pytestmark = pytest.mark.e2e

HOLD_GATE = "podium.dev/hold"


@pytest.fixture(scope="module")
def podium(
    local_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Podium]:
    """podium with ``zone-chooser: hold`` (and a short release interval)."""
    ensure_namespace(local_cluster, "podium-system")  # for the leader's Lease
    config = "zone-chooser: hold\nrelease-interval-seconds: 1\n"
    server = Podium(local_cluster, tmp_path_factory.mktemp("hold"), config=config)
    with serving(server) as started:
        yield started


@pytest.fixture
def ns(local_cluster: LocalCluster, podium: Podium) -> Iterator[str]:
    wait_until_no_gpu_is_taken(local_cluster)
    with opted_in_namespace(local_cluster, "hold", seen_by=podium) as name:
        yield name


def fill_zone_c(cluster: LocalCluster, ns: str) -> list[str]:
    """Other work on all of zone-c's 64 GPUs; its pod names."""
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"other-{i}", "namespace": ns},
            "spec": {
                "containers": [container(8)],
                "nodeSelector": {"topology.kubernetes.io/zone": "zone-c"},
            },
        }
        for i in range(8)
    ]
    names = [p["metadata"]["name"] for p in create_concurrently(cluster, pods)]
    wait_bound(cluster, ns, names)
    return names


def delete_pods(cluster: LocalCluster, ns: str, names: list[str]) -> None:
    for name in names:
        cluster.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{name}", {"gracePeriodSeconds": 0})
    cluster.wait_for(
        "the pods to go",
        lambda: not {p["metadata"]["name"] for p in listed(cluster, "v1", "Pod", ns)} & set(names),
        timeout=60,
    )


def pods_of(cluster: LocalCluster, ns: str, names: list[str]) -> list[dict[str, Any]]:
    return [cluster.request("GET", f"/api/v1/namespaces/{ns}/pods/{n}") for n in names]


def gated(found: dict[str, Any]) -> bool:
    return {"name": HOLD_GATE} in (found["spec"].get("schedulingGates") or [])


def scheduling_gated(found: dict[str, Any]) -> bool:
    """``kubectl get pods`` shows SchedulingGated: condition PodScheduled=False, that reason."""
    return any(
        c.get("type") == "PodScheduled" and c.get("reason") == "SchedulingGated"
        for c in (found.get("status") or {}).get("conditions") or []
    )


def assert_held(cluster: LocalCluster, ns: str, names: list[str], seconds: float = 4) -> None:
    """For ``seconds``, every named pod stays gated and unbound (so it holds no GPU)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for found in pods_of(cluster, ns, names):
            assert gated(found) and not found["spec"].get("nodeName"), found["metadata"]["name"]
        time.sleep(0.5)
    cluster.wait_for(
        "the held pods to show SchedulingGated",
        lambda: all(scheduling_gated(p) for p in pods_of(cluster, ns, names)),
        timeout=30,
    )


class Ungatings:
    """Watches the namespace's pods and records the resourceVersion of the write that took
    podium's gate off each one: etcd revisions order every write of the apiserver."""

    def __init__(self, cluster: LocalCluster, ns: str) -> None:
        self.core = k8s.CoreV1Api(cluster.api_client())
        self.ns = ns
        listing = self.core.list_namespaced_pod(ns)
        self.since = listing.metadata.resource_version
        self.seen: dict[str, int] = {}
        self._watch = watch.Watch()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        stream = self._watch.stream(
            self.core.list_namespaced_pod,
            self.ns,
            resource_version=self.since,
            timeout_seconds=300,
        )
        # ``stop`` ends the stream by closing its connection: whatever that raises is the end.
        with contextlib.suppress(Exception):
            for event in stream:
                raw = event["raw_object"]
                name = raw["metadata"]["name"]
                if not gated(raw) and name not in self.seen:
                    self.seen[name] = int(raw["metadata"]["resourceVersion"])

    def stop(self) -> None:
        self._watch.stop()


def policy_and_record_revisions(cluster: LocalCluster, ns: str, job: str) -> tuple[int, int]:
    (policy,) = [
        p
        for p in listed(cluster, "cilium.io/v2", "CiliumNetworkPolicy", ns)
        if job in p["metadata"]["name"]
    ]
    (record,) = [
        c
        for c in listed(cluster, "v1", "ConfigMap", ns)
        if job in c["metadata"]["name"]
        and c["metadata"].get("labels", {}).get("podium.dev/component") == "decision"
    ]
    return int(policy["metadata"]["resourceVersion"]), int(record["metadata"]["resourceVersion"])


def test_a_gang_waits_gated_then_is_released_whole_with_its_policy_first(
    local_cluster: LocalCluster, ns: str
) -> None:
    other = fill_zone_c(local_cluster, ns)
    # 4 × 8 GPUs: zone-a (8) and zone-b (16) are too small, zone-c is full.
    job = pytorchjob(local_cluster, ns, "wide", workers=3)
    created = create_concurrently(local_cluster, pytorch_pods(job, workers=3))
    names = [p["metadata"]["name"] for p in created]
    assert all(gated(p) for p in created)
    assert {p["metadata"]["annotations"]["podium.dev/reason"] for p in created} == {"held"}
    assert all(ZONE not in p["metadata"]["annotations"] for p in created)
    assert_held(local_cluster, ns, names)
    records = [
        c
        for c in listed(local_cluster, "v1", "ConfigMap", ns)
        if c["metadata"].get("labels", {}).get("podium.dev/component") == "decision"
    ]
    assert records == [], "admission of a held pod writes nothing"

    ungatings = Ungatings(local_cluster, ns)
    try:
        room_free = time.monotonic()
        delete_pods(local_cluster, ns, other)
        zones = wait_bound(local_cluster, ns, names)
        took = time.monotonic() - room_free
        local_cluster.wait_for("the watch to see every release", lambda: len(ungatings.seen) >= 4)
    finally:
        ungatings.stop()
    assert set(zones.values()) == {"zone-c"}
    policy_rv, record_rv = policy_and_record_revisions(local_cluster, ns, "wide")
    first_release = min(ungatings.seen[n] for n in names)
    assert record_rv < policy_rv < first_release, (record_rv, policy_rv, ungatings.seen)
    print(f"hold e2e: room free → all 4 bound in zone-c in {took:.1f}s")


def test_two_gangs_competing_for_one_zone_run_in_turn(local_cluster: LocalCluster, ns: str) -> None:
    """Each gang (6 × 8 GPUs) fits zone-c alone, not both: one is released whole, the other
    waits whole, and runs once the first one's pods go. No deadlock, no partial gang."""
    jobs = [pytorchjob(local_cluster, ns, name, workers=5) for name in ("left", "right")]
    pods = [p for j in jobs for p in pytorch_pods(j, workers=5)]
    create_concurrently(local_cluster, pods)
    by_job = {
        j["metadata"]["name"]: [
            p["metadata"]["name"]
            for p in pods
            if p["metadata"]["labels"]["training.kubeflow.org/job-name"] == j["metadata"]["name"]
        ]
        for j in jobs
    }

    def released() -> list[str]:
        return [
            name
            for name, members in by_job.items()
            if not any(gated(p) for p in pods_of(local_cluster, ns, members))
        ]

    local_cluster.wait_for("one gang to be released", lambda: len(released()) == 1, timeout=60)
    (first,) = released()
    (second,) = set(by_job) - {first}
    assert set(wait_bound(local_cluster, ns, by_job[first]).values()) == {"zone-c"}
    assert_held(local_cluster, ns, by_job[second])
    delete_pods(local_cluster, ns, by_job[first])
    assert set(wait_bound(local_cluster, ns, by_job[second]).values()) == {"zone-c"}


def test_a_gang_held_while_podium_is_down_is_released_when_it_is_back(
    local_cluster: LocalCluster, podium: Podium, ns: str
) -> None:
    other = fill_zone_c(local_cluster, ns)
    job = pytorchjob(local_cluster, ns, "patient", workers=3)
    names = [
        p["metadata"]["name"]
        for p in create_concurrently(local_cluster, pytorch_pods(job, workers=3))
    ]
    assert_held(local_cluster, ns, names, seconds=2)
    podium.stop()
    try:
        delete_pods(local_cluster, ns, other)
        # Room exists, but nobody else removes podium's gate: the gang waits for podium.
        assert_held(local_cluster, ns, names, seconds=4)
    finally:
        podium.start()
    assert set(wait_bound(local_cluster, ns, names).values()) == {"zone-c"}
    assert not any(gated(p) for p in pods_of(local_cluster, ns, names))

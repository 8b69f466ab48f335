"""``zone-chooser: hold`` under faults, on the real apiserver, scheduler and kwok (issue 20,
items 5 and 6).

* hold-timeout: a gang that never fits is released after ``hold-timeout-seconds``, pinned to the
  roomiest zone (``no-fit: pin-most-free``) or unpinned (``no-fit: unpinned``), its record and
  policy written before any pod is ungated; the audit and the job's Event say it timed out.
  ``hold-timeout-seconds: 0`` holds for ever.
* the leader SIGKILLed half-way through a release (its apiserver link slowed by a FaultProxy so
  that it dies after the first pod is ungated and before the second): the other replica takes the
  lease over and completes the release, every pod into the same zone, one record, one policy.
* the release PATCHes failing (a validating webhook answering 500 or 429, or not answering in
  time) after the first pod: the gang stays half released while the fault lasts and is completed
  once it stops.
* the job, or its pods, deleted while held: no gate, record or policy left; ``podium_gangs_held``
  back to 0.
* podium down: pods created meanwhile get no gate (the webhook fails open) and are handled as
  today; held pods wait, and ``podium doctor`` says that they wait for podium.

Each test starts its own podium (the settings differ), registered and unregistered around it.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import watch

from testbed.controlplane import LocalCluster
from testbed.faultproxy import FaultProxy
from testbed.faultwebhook import FaultWebhook
from testbed.podium import Podium, opted_in_namespace, run_doctor, serving

from .test_faults import ClusterAs, kubeconfig_copy
from .test_hold import (
    HOLD_GATE,
    Ungatings,
    assert_held,
    delete_pods,
    fill_zone_c,
    gated,
    pods_of,
    policy_and_record_revisions,
)
from .test_podium import (
    ZONE,
    create_concurrently,
    listed,
    pytorch_pods,
    pytorchjob,
    wait_bound,
    wait_until_no_gpu_is_taken,
)
from .test_reconciler import ensure_namespace

pytestmark = pytest.mark.e2e

HOLD = "zone-chooser: hold\nrelease-interval-seconds: 1\n"
LEASE = "/apis/coordination.k8s.io/v1/namespaces/podium-system/leases/podium-reconciler"


@pytest.fixture
def ns(local_cluster: LocalCluster) -> Iterator[str]:
    ensure_namespace(local_cluster, "podium-system")  # for the leader's Lease
    wait_until_no_gpu_is_taken(local_cluster)
    with opted_in_namespace(local_cluster, "holdfault") as name:
        yield name


@contextlib.contextmanager
def podium_with(cluster: LocalCluster, work_dir: Path, config: str) -> Iterator[Podium]:
    with serving(Podium(cluster, work_dir, config=config), unregister=True) as server:
        yield server


def held_job(cluster: LocalCluster, ns: str, name: str, workers: int = 3) -> list[str]:
    """A PyTorchJob of 1 + ``workers`` pods × 8 GPUs, its pods created (held); their names."""
    job = pytorchjob(cluster, ns, name, workers=workers)
    created = create_concurrently(cluster, pytorch_pods(job, workers=workers))
    assert all(gated(p) for p in created), [p["metadata"]["name"] for p in created]
    return [p["metadata"]["name"] for p in created]


def decisions(cluster: LocalCluster, ns: str) -> list[dict[str, Any]]:
    return [
        c
        for c in listed(cluster, "v1", "ConfigMap", ns)
        if c["metadata"].get("labels", {}).get("podium.dev/component") == "decision"
    ]


def cilium_policies(cluster: LocalCluster, ns: str) -> list[dict[str, Any]]:
    return listed(cluster, "cilium.io/v2", "CiliumNetworkPolicy", ns)


def remains(cluster: LocalCluster, ns: str, names: list[str]) -> dict[str, int]:
    """What a fault run leaves: pods gated / released (live), records, policies."""
    live = [p for p in listed(cluster, "v1", "Pod", ns) if p["metadata"]["name"] in names]
    return {
        "gated": sum(1 for p in live if gated(p)),
        "released": sum(1 for p in live if not gated(p)),
        "records": len(decisions(cluster, ns)),
        "policies": len(cilium_policies(cluster, ns)),
    }


def metric(server: Podium, name: str) -> float:
    found = re.search(rf"^{name} (\S+)$", server.get("/metrics"), re.MULTILINE)
    assert found, f"{name} not in /metrics"
    return float(found.group(1))


def events(cluster: LocalCluster, ns: str, job: str) -> list[dict[str, Any]]:
    found = cluster.request("GET", f"/apis/events.k8s.io/v1/namespaces/{ns}/events")["items"]
    return [e for e in found if (e.get("regarding") or {}).get("name") == job]


def released_entries(server: Podium, ns: str) -> list[dict[str, Any]]:
    return [
        r
        for r in server.audit_records()
        if r.get("namespace") == ns and r.get("outcome") == "released"
    ]


def zone_terms(pod: dict[str, Any]) -> list[list[str]]:
    """The zones each required nodeSelectorTerm of the pod allows (empty: no zone requirement)."""
    affinity = ((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    return [
        [v for e in t.get("matchExpressions") or [] if e["key"] == ZONE_KEY for v in e["values"]]
        for t in affinity.get("nodeSelectorTerms") or []
    ]


ZONE_KEY = "topology.kubernetes.io/zone"


# -- hold-timeout ------------------------------------------------------------------------------


TIMEOUT = 6


@pytest.mark.parametrize("no_fit", ["pin-most-free", "unpinned"])
def test_a_gang_that_never_fits_is_released_at_hold_timeout(
    local_cluster: LocalCluster, ns: str, tmp_path: Path, no_fit: str
) -> None:
    """zone-c full, zone-a (8) and zone-b (16) too small for 4 × 8 GPUs: the gang waits, then at
    hold-timeout-seconds it is released into zone-b (the most free) or into no zone."""
    config = f"{HOLD}hold-timeout-seconds: {TIMEOUT}\nno-fit: {no_fit}\n"
    fill_zone_c(local_cluster, ns)
    with podium_with(local_cluster, tmp_path, config) as server:
        ungatings = Ungatings(local_cluster, ns)
        try:
            started = time.monotonic()
            names = held_job(local_cluster, ns, "late")
            assert_held(local_cluster, ns, names, seconds=TIMEOUT / 2)
            local_cluster.wait_for(
                "the watch to see the timed-out release",
                lambda: len(ungatings.seen) == len(names),
                timeout=60,
            )
            took = time.monotonic() - started
        finally:
            ungatings.stop()
        # The releaser counts from the oldest held pod's creationTimestamp, which the apiserver
        # keeps to the second: up to 1 s before the pod really came.
        assert took >= TIMEOUT - 1, took
        pods = pods_of(local_cluster, ns, names)
        if no_fit == "pin-most-free":
            assert {p["metadata"]["labels"][ZONE] for p in pods} == {"zone-b"}
            assert all(zone_terms(p) and all(t == ["zone-b"] for t in zone_terms(p)) for p in pods)
        else:
            assert all(not any(zone_terms(p)) for p in pods), [zone_terms(p) for p in pods]
            assert all(not p["metadata"]["labels"].get(ZONE) for p in pods)
        assert {p["metadata"]["annotations"]["podium.dev/reason"] for p in pods} == {"hold-timeout"}
        policy_rv, record_rv = policy_and_record_revisions(local_cluster, ns, "late")
        assert record_rv < policy_rv < min(ungatings.seen.values()), (record_rv, policy_rv)
        local_cluster.wait_for("the release audited", lambda: released_entries(server, ns))
        (entry,) = released_entries(server, ns)
        assert entry["reason"] == "hold-timeout" and not entry.get("error"), entry
        assert f"hold-timeout-seconds {TIMEOUT}" in entry["detail"], entry["detail"]
        local_cluster.wait_for(
            "the GangReleased event",
            lambda: any(
                e["reason"] == "GangReleased" and "hold-timeout" in e["note"]
                for e in events(local_cluster, ns, "late")
            ),
            timeout=30,
        )
    print(f"hold-timeout {TIMEOUT}s, no-fit {no_fit}: released after {took:.1f}s")


def test_hold_timeout_zero_holds_for_ever(
    local_cluster: LocalCluster, ns: str, tmp_path: Path
) -> None:
    fill_zone_c(local_cluster, ns)
    config = f"{HOLD}hold-timeout-seconds: 0\n"
    with podium_with(local_cluster, tmp_path, config) as server:
        names = held_job(local_cluster, ns, "patient")
        assert_held(local_cluster, ns, names, seconds=2 * TIMEOUT)
        assert released_entries(server, ns) == []
        assert remains(local_cluster, ns, names) == {
            "gated": 4,
            "released": 0,
            "records": 0,
            "policies": 0,
        }


# -- the leader killed half-way through a release ----------------------------------------------


class KillOnPod:
    """Watches the namespace's pods; at the first event ``fires`` says yes to, SIGKILLs ``pid``
    (once), notes the moment and calls ``killed`` with that event."""

    def __init__(self, cluster: LocalCluster, ns: str, pid: int) -> None:
        self.core = k8s.CoreV1Api(cluster.api_client())
        self.ns, self.pid = ns, pid
        self.killed_at: float | None = None
        since = self.core.list_namespaced_pod(ns).metadata.resource_version
        self._watch = watch.Watch()
        self._thread = threading.Thread(target=self._run, args=(since,), daemon=True)
        self._thread.start()

    def fires(self, event: dict[str, Any]) -> bool:
        raise NotImplementedError

    def killed(self, event: dict[str, Any]) -> None:
        """What to note at the kill."""

    def _run(self, since: str) -> None:
        stream = self._watch.stream(
            self.core.list_namespaced_pod, self.ns, resource_version=since, timeout_seconds=300
        )
        with contextlib.suppress(Exception):  # ``stop`` closes the connection
            for event in stream:
                if self.fires(event) and self.killed_at is None:
                    os.kill(self.pid, signal.SIGKILL)
                    self.killed_at = time.monotonic()
                    self.killed(event)

    def stop(self) -> None:
        self._watch.stop()


class KillOnFirstUngate(KillOnPod):
    """The moment one of ``names`` is seen without podium's gate, SIGKILLs ``pid`` and notes
    the names released by then."""

    def __init__(self, cluster: LocalCluster, ns: str, names: list[str], pid: int) -> None:
        self.names = set(names)
        self.released: set[str] = set()
        #: ``released`` at the moment of the kill.
        self.at_kill: frozenset[str] = frozenset()
        super().__init__(cluster, ns, pid)

    def fires(self, event: dict[str, Any]) -> bool:
        raw = event["raw_object"]
        if raw["metadata"]["name"] not in self.names or gated(raw):
            return False
        self.released.add(raw["metadata"]["name"])
        return True

    def killed(self, event: dict[str, Any]) -> None:
        self.at_kill = frozenset(self.released)


def lease_holder(cluster: LocalCluster) -> str:
    holder: str = cluster.request("GET", LEASE)["spec"].get("holderIdentity") or ""
    return holder


def test_the_leader_killed_half_way_through_a_release_is_completed_by_the_next(
    local_cluster: LocalCluster, ns: str, tmp_path: Path
) -> None:
    """Replica A leads, talking to the apiserver through a FaultProxy that holds each of its
    requests 1 s; replica B serves admissions. A gang of 4 × 8 GPUs fits zone-c: A writes the
    record and the policy, ungates the first pod, and is SIGKILLed as the watch sees that pod
    ungated. B takes the lease over and releases the other three into zone-c."""
    with FaultProxy(local_cluster.apiserver_port) as proxy:
        kubeconfig = kubeconfig_copy(local_cluster, tmp_path / "slow.kubeconfig", server=proxy.url)
        leader = Podium(
            ClusterAs(local_cluster, kubeconfig),  # type: ignore[arg-type]
            tmp_path / "a",
            config=HOLD,
        )
        leader.start()
        try:
            assert leader.process is not None
            pid = leader.process.pid
            local_cluster.wait_for(
                "replica A to lead",
                lambda: lease_holder(local_cluster).endswith(f"-{pid}"),
                timeout=60,
            )
            follower = Podium(local_cluster, tmp_path / "b", config=HOLD)
            with serving(follower, unregister=True):
                proxy.delay = 1.0
                killer = KillOnFirstUngate(local_cluster, ns, [], pid)
                job = pytorchjob(local_cluster, ns, "crash", workers=3)
                pods = pytorch_pods(job, workers=3)
                killer.names = {p["metadata"]["name"] for p in pods}
                names = [p["metadata"]["name"] for p in create_concurrently(local_cluster, pods)]
                try:
                    local_cluster.wait_for(
                        "A to release a first pod (and be killed)",
                        lambda: killer.killed_at is not None,
                        timeout=90,
                    )
                    leader.process.wait(timeout=10)
                    after_kill = remains(local_cluster, ns, names)
                    at_kill = len(killer.at_kill)
                    zones = wait_bound(local_cluster, ns, names, timeout=120)
                    assert killer.killed_at is not None
                    recovered = time.monotonic() - killer.killed_at
                finally:
                    killer.stop()
                # podium writes its audit from a background thread: the pods can be bound
                # before the completing pass's entry is in the file.
                local_cluster.wait_for(
                    "the next leader's completing release entry",
                    lambda: any(r["reason"] == "completed" for r in released_entries(follower, ns)),
                    timeout=30,
                )
                completions = [
                    r for r in released_entries(follower, ns) if r["reason"] == "completed"
                ]
        finally:
            leader.stop()
    assert 1 <= at_kill < len(names), killer.at_kill
    assert after_kill["released"] < len(names) and after_kill["records"] == 1, after_kill
    assert set(zones.values()) == {"zone-c"}, zones
    pods_now = pods_of(local_cluster, ns, names)
    assert not any(gated(p) for p in pods_now)
    assert {p["metadata"]["labels"][ZONE] for p in pods_now} == {"zone-c"}
    assert remains(local_cluster, ns, names) == {
        "gated": 0,
        "released": 4,
        "records": 1,
        "policies": 1,
    }
    assert completions, "the next leader did not complete the gang"
    assert sorted(completions[0]["pods"]) == sorted(set(names) - killer.at_kill), completions
    print(
        f"leader killed after {at_kill} of {len(names)} pods ungated (left: {after_kill}); "
        f"next leader completed it, all bound in zone-c {recovered:.1f}s after the kill"
    )


# -- the apiserver failing the release ---------------------------------------------------------


#: Release PATCHes the fault denies before it stops: the first failure and two retries.
FAILED_ATTEMPTS = 3


@pytest.mark.parametrize("code", [500, 429, 0], ids=["500", "429", "timeout"])
def test_release_patches_failing_half_way_complete_once_the_fault_stops(
    local_cluster: LocalCluster, ns: str, tmp_path: Path, code: int
) -> None:
    """A validating webhook lets the first release PATCH through and fails every later one
    (``code``; 0: no answer within its timeoutSeconds) until it has denied FAILED_ATTEMPTS: the
    gang stays with one pod out while the fault lasts, however often the releaser tries, and is
    completed into the same zone once it stops.

    The audit trail is judged once it holds every ungated pod, not as it stands when the pods
    are bound: the releaser writes a pass's entry after that pass's last PATCH, through the audit
    writer's thread, while the scheduler may bind the pods at once. A PATCH that was in flight
    when the fault stopped may still fail (the webhook had already decided to deny it): its
    entry rightly carries that error and says the next pass completes the gang; the entry of the
    pass that ungated the last pods comes after it and carries none."""
    other = fill_zone_c(local_cluster, ns)
    fault = FaultWebhook(local_cluster, tmp_path)
    fault.code, fault.allow_first, fault.failing = code, 1, True
    hook = {
        "rules": [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["UPDATE"],
                "resources": ["pods"],
            }
        ],
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
        "matchConditions": [
            {
                "name": "podium-release",
                # The release: podium's gate taken off (not the releaser's podium.dev/held
                # annotation patches, which keep it).
                "expression": "has(oldObject.spec.schedulingGates) && "
                f"oldObject.spec.schedulingGates.exists(g, g.name == '{HOLD_GATE}') && "
                "!(has(object.spec.schedulingGates) && "
                f"object.spec.schedulingGates.exists(g, g.name == '{HOLD_GATE}'))",
            }
        ],
    }
    with (
        podium_with(local_cluster, tmp_path / "podium", HOLD) as server,
        fault.registered(f"release-faults-{ns}", hook),
    ):
        names = held_job(local_cluster, ns, "flaky")
        assert_held(local_cluster, ns, names, seconds=2)
        delete_pods(local_cluster, ns, other)
        local_cluster.wait_for(
            f"{FAILED_ATTEMPTS} release PATCHes to fail",
            lambda: fault.denied >= FAILED_ATTEMPTS,
            timeout=90,
        )
        during = remains(local_cluster, ns, names)
        fault.failing = False
        denied = fault.denied
        stopped = time.monotonic()
        zones = wait_bound(local_cluster, ns, names, timeout=120)
        took = time.monotonic() - stopped

        def audited_pods() -> list[str]:
            return sorted(p for e in released_entries(server, ns) for p in e["pods"])

        local_cluster.wait_for(
            "every ungated pod in the release entries",
            lambda: audited_pods() == sorted(names),
            timeout=30,
        )
        entries = released_entries(server, ns)
    assert during["released"] == 1 and during["gated"] == 3, during
    assert during["records"] == 1 and during["policies"] == 1, during
    assert set(zones.values()) == {"zone-c"}
    assert remains(local_cluster, ns, names) == {
        "gated": 0,
        "released": 4,
        "records": 1,
        "policies": 1,
    }
    failed = [e for e in entries if e.get("error")]
    assert failed and all(str(code or "") in e["error"] for e in failed), failed
    assert all("the next pass completes it" in e["detail"] for e in failed), failed
    assert entries[-1]["reason"] == "completed" and not entries[-1].get("error"), entries[-1]
    assert entries[-1]["pods"], entries[-1]
    print(
        f"release PATCHes failing ({code or 'timeout'}) {denied}×: left {during} meanwhile; "
        f"all bound in zone-c {took:.1f}s after the fault stopped; "
        f"{len(failed)} of {len(entries)} release entries failed"
    )


# -- a held gang's job or pods deleted ---------------------------------------------------------


@pytest.mark.parametrize("what", ["job", "pods"])
def test_deleting_a_held_gang_leaves_nothing_behind(
    local_cluster: LocalCluster, ns: str, tmp_path: Path, what: str
) -> None:
    """The job (its pods garbage-collected) or the held pods deleted while the gang waits: no pod
    keeps the gate, no record or policy appears, podium_gangs_held is back to 0 — and stays so
    once room frees."""
    other = fill_zone_c(local_cluster, ns)
    with podium_with(local_cluster, tmp_path, HOLD) as server:
        names = held_job(local_cluster, ns, "doomed")
        assert_held(local_cluster, ns, names, seconds=2)
        local_cluster.wait_for(
            "podium_gangs_held to count it", lambda: metric(server, "podium_gangs_held") == 1
        )
        started = time.monotonic()
        if what == "job":
            local_cluster.request(
                "DELETE",
                f"/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs/doomed",
                {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"},
            )
            local_cluster.wait_for(
                "the garbage collector to delete the pods",
                lambda: (
                    not {p["metadata"]["name"] for p in listed(local_cluster, "v1", "Pod", ns)}
                    & set(names)
                ),
                timeout=90,
            )
        else:
            delete_pods(local_cluster, ns, names)
        local_cluster.wait_for(
            "podium_gangs_held back to 0",
            lambda: metric(server, "podium_gangs_held") == 0,
            timeout=30,
        )
        took = time.monotonic() - started
        delete_pods(local_cluster, ns, other)  # room now: still nothing to release
        time.sleep(3)
        left = remains(local_cluster, ns, names)
        assert left == {"gated": 0, "released": 0, "records": 0, "policies": 0}, left
        assert released_entries(server, ns) == []
        assert metric(server, "podium_gangs_held") == 0
    print(f"{what} deleted while held: gauge 0 after {took:.1f}s; left {left}")


# -- podium down -------------------------------------------------------------------------------


def test_podium_down_fails_open_and_held_pods_wait_for_it(
    local_cluster: LocalCluster, ns: str, tmp_path: Path
) -> None:
    """A gang held, then podium stopped: doctor says its pods wait for podium (no replica leads);
    a job created meanwhile gets no gate (fail open, not-pinned as today). Back up, the held
    gang is released once there is room."""
    other = fill_zone_c(local_cluster, ns)
    server = Podium(local_cluster, tmp_path, config=HOLD)
    with serving(server, unregister=True):
        names = held_job(local_cluster, ns, "waiting")
        assert_held(local_cluster, ns, names, seconds=2)
        server.stop()
        late = pytorchjob(local_cluster, ns, "late", workers=0)
        (created,) = create_concurrently(local_cluster, pytorch_pods(late, workers=0))
        assert not gated(created) and ZONE not in created["metadata"].get("annotations", {})
        _, report = run_doctor(local_cluster, ns)
        by_job = {j["job"]: j for j in report["jobs"]}
        waiting = by_job["PyTorchJob/waiting"]
        assert any(
            f["check"] == "no-leader" and "wait" in f["detail"] for f in waiting["findings"]
        ), waiting
        assert any(f["check"] == "not-pinned" for f in by_job["PyTorchJob/late"]["findings"]), (
            by_job["PyTorchJob/late"]
        )
        delete_pods(local_cluster, ns, [*other, created["metadata"]["name"]])
        assert_held(local_cluster, ns, names, seconds=3)  # room, but nobody removes the gate
        server.start()
        zones = wait_bound(local_cluster, ns, names)
    assert set(zones.values()) == {"zone-c"}
    print(f"podium down: doctor said {[f['detail'] for f in waiting['findings']]}")

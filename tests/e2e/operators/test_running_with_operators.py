"""Gangs that already run, with the real training-operator (issue 29, item 3).

A gang with members bound before podium saw them — a PyTorchJob started in a namespace that opts
in afterwards, or pods created while podium was down — is never held for pods that will never be
gated: podium pins its new pods at admission, ungated, to the zone its running pods are in, and
its releaser releases any pod it held into that zone at once (``webhook.core.running``).

The operator cluster's zones hold 8, 16 and 64 GPUs. Each job (4 pods × 4 GPUs, 16 GPUs) is
started while zone-a and zone-c are full of other work, so it runs in zone-b; then the other work
goes, and zone-c's 64 free GPUs are where kube-scheduler's spreading would put an unpinned pod.

* **Opted in while it runs.** The namespace is labelled ``podium.dev/enabled=true`` once the job
  runs; a worker deleted then is re-created by the operator, pinned by podium to zone-b
  (``coordinator-placed``), never gated, and bound there within seconds. ``podium doctor``
  reports the three pods that ran before podium as what they are, with no advice to delete them.
* **Elastic scale-up.** An elastic PyTorchJob (``minReplicas`` 2) running 2 workers before the
  opt-in is scaled to 4: the 2 new workers follow the running ones into zone-b, ungated.
* **podium killed mid-creation.** podium is SIGKILLed the moment the operator's first pod of a
  job appears: the pods it admitted before are held, those created while it is down are admitted
  unchanged (``failurePolicy: Ignore``) and bind in zone-b. Restarted, podium releases the held
  pods into zone-b at once instead of waiting for pods that will never be gated.

Each run prints a ``RUNNING`` line (pods, zones, seconds). Opt-in like the other operator
tests: ``PODIUM_E2E_OPERATORS=trainingoperator`` (or ``all``).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from testbed.controlplane import LocalCluster
from testbed.faultproxy import FaultProxy
from testbed.operators import OperatorPool
from testbed.podium import Podium, run_doctor, serving
from webhook.core import labels

from ..test_hold import delete_pods, gated, pods_of
from ..test_hold_faults import KillOnPod
from ..test_podium import listed, wait_bound
from .conftest import needs, ready_for_podium
from .test_hold_with_operators import _live_pods, fill, scale_to_4, submit
from .test_hold_with_operators import elastic_pytorchjob as hold_elastic_pytorchjob
from .test_hold_with_operators import pytorchjob as hold_pytorchjob

pytestmark = [pytest.mark.e2e, needs("trainingoperator")]

GPUS = 4
REASON = "podium.dev/reason"
ZONE = "podium.dev/zone"
JOB = "podium.dev/job"
HOLD_CONFIG = "zone-chooser: hold\nrelease-interval-seconds: 1\nreconcile-interval-seconds: 2\n"
WEBHOOKS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"


def pytorchjob(name: str) -> dict[str, Any]:
    """1 master + 3 workers of 4 GPUs: 16 GPUs, zone-b's whole."""
    return hold_pytorchjob(name, workers=3, gpus=GPUS)


def elastic_pytorchjob(name: str) -> dict[str, Any]:
    """2 workers of 4 GPUs, ``minReplicas`` 2, ``maxReplicas`` 4."""
    return hold_elastic_pytorchjob(name, GPUS)


@pytest.fixture(scope="module")
def podium(
    operator_cluster: LocalCluster,
    operator_pool: OperatorPool,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Podium]:
    """podium with ``zone-chooser: hold`` (its default) and a 1 s release interval."""
    ready_for_podium(operator_cluster, operator_pool)
    operator_pool.ensure(("trainingoperator",))
    server = Podium(operator_cluster, tmp_path_factory.mktemp("running"), config=HOLD_CONFIG)
    with serving(server, unregister=True):
        yield server


@contextlib.contextmanager
def namespace(cluster: LocalCluster, prefix: str, *, enabled: bool) -> Iterator[str]:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    cluster.create_namespace(name, {"podium.dev/enabled": "true"} if enabled else None)
    try:
        yield name
    finally:
        cluster.delete_namespace(name, gone=False)


def opt_in(cluster: LocalCluster, server: Podium, ns: str) -> None:
    """Label the namespace ``podium.dev/enabled=true`` and wait until podium acts in it: a
    dry-run pod there is audited as something other than ``namespace-not-enabled`` (both the
    apiserver's webhook selector and podium's own view have seen the label)."""
    cluster.request(
        "PATCH",
        f"/api/v1/namespaces/{ns}",
        {"metadata": {"labels": {"podium.dev/enabled": "true"}}},
        content_type="application/merge-patch+json",
    )
    probe = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "probe-",
            "namespace": ns,
            "ownerReferences": [
                {
                    "apiVersion": "probe.podium.dev/v1",
                    "kind": "Probe",
                    "name": "probe",
                    "uid": "00000000-0000-4000-8000-000000000001",
                    "controller": True,
                }
            ],
        },
        "spec": {"containers": [{"name": "main", "image": "probe:1"}]},
    }

    def acting() -> bool:
        cluster.request("POST", f"/api/v1/namespaces/{ns}/pods", probe, query={"dryRun": "All"})
        return any(
            r.get("namespace") == ns and r.get("reason") != "namespace-not-enabled"
            for r in server.audit_records()
        )

    cluster.wait_for(f"podium to act in {ns}", acting, timeout=60)


def run_in_zone_b(cluster: LocalCluster, ns: str, job: dict[str, Any], pods: int) -> list[str]:
    """Fill zone-a and zone-c with other work, submit ``job``, wait until its ``pods`` pods are
    bound (all in zone-b: nowhere else has room), then free zone-a and zone-c again. Returns the
    job's pod names."""
    others = [*fill(cluster, ns, "zone-a"), *fill(cluster, ns, "zone-c")]
    submit(cluster, ns, job)

    def mine() -> list[str]:
        return sorted(
            p["metadata"]["name"]
            for p in _live_pods(cluster, ns)
            if p["metadata"]["name"] not in others
        )

    cluster.wait_for(f"the operator to create {pods} pods", lambda: len(mine()) >= pods)
    names = mine()
    zones = wait_bound(cluster, ns, names, timeout=120)
    assert set(zones.values()) == {"zone-b"}, zones
    delete_pods(cluster, ns, others)
    return names


def new_pods(cluster: LocalCluster, ns: str, known: set[str], count: int) -> list[dict[str, Any]]:
    def fresh() -> list[dict[str, Any]]:
        return [p for p in _live_pods(cluster, ns) if p["metadata"]["name"] not in known]

    cluster.wait_for(f"the operator to create {count} new pod(s)", lambda: len(fresh()) >= count)
    return fresh()


def followed(pod: dict[str, Any]) -> tuple[str | None, str | None, bool]:
    annotations = pod["metadata"].get("annotations") or {}
    return annotations.get(ZONE), annotations.get(REASON), gated(pod)


def test_a_worker_recreated_after_the_namespace_opts_in_runs_in_the_jobs_zone(
    operator_cluster: LocalCluster, podium: Podium
) -> None:
    cluster = operator_cluster
    with namespace(cluster, "running", enabled=False) as ns:
        names = run_in_zone_b(cluster, ns, pytorchjob("brown"), 4)
        opt_in(cluster, podium, ns)
        victim = next(n for n in names if "worker" in n)
        (before,) = pods_of(cluster, ns, [victim])
        deleted = time.monotonic()
        cluster.request(
            "DELETE", f"/api/v1/namespaces/{ns}/pods/{victim}", {"gracePeriodSeconds": 0}
        )

        def recreated() -> bool:
            return any(
                p["metadata"]["name"] == victim
                and p["metadata"]["uid"] != before["metadata"]["uid"]
                for p in _live_pods(cluster, ns)
            )

        cluster.wait_for("the operator to re-create the worker", recreated, timeout=60)
        (again,) = pods_of(cluster, ns, [victim])
        assert followed(again) == ("zone-b", "coordinator-placed", False), again["metadata"]
        zones = wait_bound(cluster, ns, [victim], timeout=60)
        took = time.monotonic() - deleted
        assert zones == {victim: "zone-b"}
        (record,) = [
            c
            for c in cluster.request("GET", f"/api/v1/namespaces/{ns}/configmaps")["items"]
            if (c["metadata"].get("labels") or {}).get(labels.COMPONENT) == "decision"
        ]
        assert (record["data"]["zone"], record["data"]["reason"]) == (
            "zone-b",
            "coordinator-placed",
        )
        # The reconciler adopts the three pods that ran before podium (Cilium mode): labelled
        # as the job's, with their zone, so the job's zone-b policy selects all four.
        running = sorted(set(names) - {victim})
        adopting = time.monotonic()
        key = again["metadata"]["labels"][JOB]

        def adopted() -> bool:
            return all(
                (p["metadata"]["labels"].get(JOB), p["metadata"]["labels"].get(ZONE))
                == (key, "zone-b")
                for p in pods_of(cluster, ns, running)
            )

        cluster.wait_for("the reconciler to adopt the running pods", adopted, timeout=60)
        adopt_took = time.monotonic() - adopting
        (policy,) = listed(cluster, "cilium.io/v2", "CiliumNetworkPolicy", ns)
        selector = policy["spec"]["endpointSelector"]["matchLabels"]
        assert selector == {JOB: key, ZONE: "zone-b"}, selector
        assert [p["metadata"]["name"] for p in pods_of(cluster, ns, names)] == names
        _, report = run_doctor(cluster, ns)
        (job,) = [j for j in report["jobs"] if j["job"] == "PyTorchJob/brown"]
        said = [f for f in job["findings"] if f["check"] == "not-pinned"]
        assert len(said) == 1 and sorted(said[0]["pods"]) == sorted(set(names) - {victim}), job
        assert "run without podium's admission (zone-b: 3)" in said[0]["detail"], said
        assert "Do not delete a running pod" in said[0]["fix"], said
        assert "podium has labelled them as the job's" in said[0]["detail"], said
        print(f"doctor: {said[0]['detail']} — fix: {said[0]['fix']}")
        print(
            f"RUNNING | opted in while running | {ns} | pods {names} in zone-b before opt-in | "
            f"{victim} deleted → re-created, pinned zone-b (coordinator-placed), ungated, bound "
            f"in {zones[victim]} {took:.1f}s after the delete | record zone "
            f"{record['data']['zone']} | {running} adopted (job + zone label) "
            f"{adopt_took:.1f}s later; policy selects {selector}"
        )


def test_an_elastic_scale_up_after_the_namespace_opts_in_follows_the_running_workers(
    operator_cluster: LocalCluster, podium: Podium
) -> None:
    cluster = operator_cluster
    with namespace(cluster, "elastic", enabled=False) as ns:
        job = elastic_pytorchjob("stretch")
        names = run_in_zone_b(cluster, ns, job, 2)
        opt_in(cluster, podium, ns)
        scaled = time.monotonic()
        scale_to_4(cluster, ns, job)
        pods = new_pods(cluster, ns, set(names), 2)
        later = sorted(p["metadata"]["name"] for p in pods)
        for pod in pods:
            zone, reason, is_gated = followed(pod)
            assert (zone, is_gated) == ("zone-b", False), pod["metadata"]
            assert reason in ("coordinator-placed", "members-placed", "recorded"), reason
        zones = wait_bound(cluster, ns, later, timeout=60)
        took = time.monotonic() - scaled
        assert set(zones.values()) == {"zone-b"}, zones
        reasons = sorted({followed(p)[1] or "" for p in pods})
        print(
            f"RUNNING | elastic scale-up 2 → 4 after opt-in | {ns} | {names} in zone-b before | "
            f"{later} pinned zone-b ({', '.join(reasons)}), ungated, bound in zone-b "
            f"{took:.1f}s after the scale"
        )


class KillOnFirstPod(KillOnPod):
    """The moment the namespace's first pod appears, SIGKILLs ``pid``."""

    def __init__(self, cluster: LocalCluster, ns: str, pid: int) -> None:
        self.first: str | None = None
        super().__init__(cluster, ns, pid)

    def fires(self, event: dict[str, Any]) -> bool:
        return bool(event["type"] == "ADDED")

    def killed(self, event: dict[str, Any]) -> None:
        self.first = event["raw_object"]["metadata"]["name"]


def through(proxy: FaultProxy, server: Podium) -> None:
    """Point the apiserver's calls to podium through ``proxy`` and wait until they arrive."""
    config = server.webhook_configuration()
    for hook in config["webhooks"]:
        hook["clientConfig"]["url"] = f"{proxy.url}/mutate"
    name = config["metadata"]["name"]
    server.cluster.request("DELETE", f"{WEBHOOKS}/{name}")
    server.cluster.request("POST", WEBHOOKS, config)
    server.wait_until_called()


def test_podium_killed_between_the_operators_first_and_last_pod_creation(
    operator_cluster: LocalCluster, podium: Podium
) -> None:
    """The apiserver reaches podium through a FaultProxy that holds each request 0.3 s, so the
    operator's four creations (one after another) span more than a second and the kill lands
    between its first and its last. podium (the module's only replica, so its leader) is then
    started again."""
    cluster, server = operator_cluster, podium
    with (
        FaultProxy(server.port) as proxy,
        namespace(cluster, "killed", enabled=True) as ns,
        contextlib.ExitStack() as restore,
    ):
        restore.callback(server.register)  # straight to podium again, for whatever comes next
        through(proxy, server)
        others = [*fill(cluster, ns, "zone-a"), *fill(cluster, ns, "zone-c")]
        assert server.process is not None
        killer = KillOnFirstPod(cluster, ns, server.process.pid)

        def mine() -> list[dict[str, Any]]:
            return [p for p in _live_pods(cluster, ns) if p["metadata"]["name"] not in others]

        try:
            proxy.delay = 0.3
            submit(cluster, ns, pytorchjob("crash"))
            cluster.wait_for("the first pod (and the kill)", lambda: killer.killed_at is not None)
            cluster.wait_for("the operator to create all 4 pods", lambda: len(mine()) >= 4)
        finally:
            killer.stop()
            proxy.delay = 0.0
        pods = mine()
        names = sorted(p["metadata"]["name"] for p in pods)
        admitted = {p["metadata"]["name"]: gated(p) for p in pods if JOB in p["metadata"]["labels"]}
        down = sorted(set(names) - set(admitted))
        held = sorted(n for n, is_gated in admitted.items() if is_gated)
        # The kill landed between the first creation and the last: podium admitted the first
        # pod(s), the apiserver admitted the rest unchanged (failurePolicy: Ignore).
        assert killer.first in admitted and down, (killer.first, admitted, down)
        down_zones = wait_bound(cluster, ns, down, timeout=60)
        assert set(down_zones.values()) == {"zone-b"}, down_zones
        assert all(gated(p) for p in pods_of(cluster, ns, held))  # nobody removes the gate
        server.stop()  # reap the killed process
        restarted = time.monotonic()
        server.start()
        zones = wait_bound(cluster, ns, names, timeout=120)
        took = time.monotonic() - restarted
        assert set(zones.values()) == {"zone-b"}, zones
        after = {p["metadata"]["name"]: p for p in pods_of(cluster, ns, names)}
        assert not any(gated(p) for p in after.values())
        released = {n: after[n]["metadata"]["annotations"].get(REASON) for n in held}
        assert set(released.values()) <= {"coordinator-placed", "members-placed"}, released
        print(
            f"RUNNING | podium SIGKILLed at the operator's first pod ({killer.first}) | {ns} | "
            f"admitted before the kill: {sorted(admitted)} (held: {held}); created while down, "
            f"unchanged: {down}, bound in {sorted(set(down_zones.values()))} | podium restarted "
            f"→ held released {released}; all {len(names)} bound in "
            f"{sorted(set(zones.values()))} {took:.1f}s after the restart (leader lease of the "
            "killed replica: 15 s)"
        )

"""Faults during admission.

Unit-level (no control plane; the API twin injects the fault): the apiserver unreachable, slow,
429, 5xx or 403 while podium creates a job's record — every admission is answered within the time
budget, allowed unchanged, and its audit record says why.

Live (``-m e2e``): two podium processes, both talking to the real apiserver, get the same job's
AdmissionReviews concurrently over HTTPS — one record, one zone for every pod. And podium behind
a TCP proxy (testbed/faultproxy.py) that stalls, then refuses, the apiserver mid-admission: each
pod is created unpinned within the budget and the audit record says why; then podium recovers.
podium running as a user RBAC lets read but not write: fail open, the record says 403 Forbidden.
The only replica SIGKILLed in the middle of a 500-pod burst and restarted: every pod exists, each
either pinned to the job's one zone or reported by `podium doctor` as not-pinned. Last, the
CiliumNetworkPolicy CRD deleted live: the pod is pinned with a warning; the CRD is re-installed.

Covered elsewhere: the policy CRD missing (tests/serve/test_admission.py,
InMemoryApi(missing_kinds)); the certificate rotated under load
(tests/serve/test_tls.py::test_rotation_under_load_fails_no_request, uvicorn on a real socket,
no failed request).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import ssl
import subprocess
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.controlplane import CRD_DIR, ApiError, LocalCluster
from testbed.faultproxy import FaultProxy
from testbed.podium import PIN, WEBHOOK_MANIFEST, Podium, opted_in_namespace, run_doctor
from tests.builders import pinning
from tests.scenarios import base_cluster, pytorch_pod, pytorchjob
from webhook.core import adapters, reviews
from webhook.core.view import ClusterView
from webhook.kube import errors, twins
from webhook.ops import auditview
from webhook.serve import admission, audit

from .test_podium import create as live_create
from .test_podium import pytorch_pods, serving
from .test_podium import pytorchjob as live_pytorchjob

BUDGET = 0.5

FAULTS: list[tuple[str, errors.ApiError | None, float, str]] = [
    (
        "unreachable",
        errors.ApiError("POST /api/v1/...: connection refused"),
        0.0,
        "connection refused",
    ),
    ("slow", None, 5.0, "did not answer within 0.5s"),
    ("429", errors.ApiError("429: too many requests", status=429), 0.0, "429"),
    ("500", errors.ApiError("500: etcdserver: request timed out", status=500), 0.0, "500"),
    ("503", errors.ApiError("503: service unavailable", status=503), 0.0, "503"),
    (
        "403",
        errors.ApiError('403: configmaps is forbidden: User "podium"', status=403),
        0.0,
        "403",
    ),
]


@pytest.mark.parametrize(("fault", "error", "delay", "why"), FAULTS, ids=[f[0] for f in FAULTS])
async def test_an_api_fault_fails_open_in_time_and_says_why(
    fault: str, error: errors.ApiError | None, delay: float, why: str
) -> None:
    pj = pytorchjob()
    settings = pinning(time_budget_seconds=BUDGET)
    view = ClusterView.from_objects(
        base_cluster(pj), zone_label=settings.zone_label, kept=adapters.KEPT
    )
    api = twins.InMemoryApi(delay=delay)
    api.fail = lambda _op, _m: error
    sink = audit.MemorySink()
    admitter = admission.Admitter(view=lambda: view, api=api, settings=settings, sink=sink)
    bodies = [
        json.dumps(reviews.review_for_pod(pytorch_pod(pj, "worker", i).obj(), uid=f"u{i}")).encode()
        for i in range(4)
    ]
    started = time.perf_counter()
    answers = await asyncio.gather(*(admitter.admit(b) for b in bodies))
    elapsed = time.perf_counter() - started
    assert elapsed < BUDGET + 0.4, f"{fault}: {elapsed:.2f}s"
    for answer in answers:
        resp = answer.body["response"]
        assert answer.status == 200 and resp["allowed"] is True
        assert "patch" not in resp  # admitted unchanged
        assert any("could not finish" in w and why in w for w in resp["warnings"])
    assert [r["outcome"] for r in sink.entries] == ["fail-open"] * 4
    assert all(why in r["error"] for r in sink.entries)


async def test_two_replicas_racing_on_one_job_make_one_decision() -> None:
    """Two admitters (two replicas) share only the API; the job's pods arrive at both at once."""
    pj = pytorchjob(workers=7)
    settings = pinning()
    api = twins.InMemoryApi(delay=0.01)
    replicas = [
        admission.Admitter(
            view=lambda: ClusterView.from_objects(
                base_cluster(pj), zone_label=settings.zone_label, kept=adapters.KEPT
            ),
            api=api,
            settings=settings,
            sink=audit.MemorySink(),
        )
        for _ in range(2)
    ]
    pods = [pytorch_pod(pj, "master").obj()] + [
        pytorch_pod(pj, "worker", i).obj() for i in range(7)
    ]
    answers = await asyncio.gather(
        *(
            replicas[i % 2].admit(json.dumps(reviews.review_for_pod(p, uid=f"u{i}")).encode())
            for i, p in enumerate(pods)
        )
    )
    zones = {a.body["response"]["auditAnnotations"]["zone"] for a in answers}
    assert len(zones) == 1
    assert sum(1 for k in api.objects if k[1] == "ConfigMap") == 1


# -- live --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_processes(
    local_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[Podium]]:
    servers: list[Podium] = []
    try:
        for name in ("one", "two"):
            server = Podium(local_cluster, tmp_path_factory.mktemp(f"race-{name}"), config=PIN)
            server.launch()
            servers.append(server)
        for server in servers:
            server.wait_ready()
        yield servers
    finally:
        for server in servers:
            server.stop()


def post_review(server: Podium, review: dict[str, Any]) -> dict[str, Any]:
    context = ssl.create_default_context(cafile=str(server.cluster.ca_file))
    request = urllib.request.Request(
        f"{server.url}/mutate",
        data=json.dumps(review).encode(),
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(request, context=context, timeout=10) as resp:
        answer: dict[str, Any] = json.loads(resp.read())
    return answer


@pytest.mark.e2e
def test_two_live_replicas_racing_on_one_job_make_one_decision(
    local_cluster: LocalCluster, two_processes: list[Podium]
) -> None:
    ns = f"race-{uuid.uuid4().hex[:6]}"
    create_ns = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": ns, "labels": {"podium.dev/enabled": "true"}},
    }
    local_cluster.request("POST", "/api/v1/namespaces", create_ns)
    job = live_pytorchjob(local_cluster, ns, "race", workers=7, gpus=0)
    pods = pytorch_pods(job, workers=7, gpus=0)
    probe = reviews.review_for_pod(pods[0], uid="probe")
    probe["request"]["dryRun"] = True  # creates nothing
    for server in two_processes:  # both caches must know the namespace and the job first
        local_cluster.wait_for(
            "the replica to see the job",
            lambda s=server: (
                post_review(s, probe)["response"]["auditAnnotations"]["outcome"] == "pinned"
            ),
            timeout=30,
        )
    with ThreadPoolExecutor(max_workers=len(pods)) as pool:
        answers = list(
            pool.map(
                lambda ip: post_review(
                    two_processes[ip[0] % 2], reviews.review_for_pod(ip[1], uid=f"race-{ip[0]}")
                ),
                enumerate(pods),
            )
        )
    zones = {a["response"]["auditAnnotations"].get("zone") for a in answers}
    outcomes = {a["response"]["auditAnnotations"]["outcome"] for a in answers}
    assert outcomes == {"pinned"}, answers
    assert len(zones) == 1
    records = [
        c
        for c in local_cluster.request("GET", f"/api/v1/namespaces/{ns}/configmaps")["items"]
        if c["metadata"].get("labels", {}).get("podium.dev/component") == "decision"
    ]
    assert len(records) == 1
    assert records[0]["data"]["zone"] in zones


# -- live faults between podium and the apiserver ----------------------------------------------

ZONE = "podium.dev/zone"


class ClusterAs:
    """The local cluster as seen through another kubeconfig (another server URL or user).

    `Podium` passes ``cluster.kubeconfig`` to ``podium serve``; everything else (the CA, issuing
    certificates, admin requests for the test itself) goes to the real cluster.
    """

    def __init__(self, cluster: LocalCluster, kubeconfig: Path) -> None:
        self._cluster = cluster
        self.kubeconfig = kubeconfig

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cluster, name)


@pytest.mark.e2e
def test_a_stdout_nobody_reads_does_not_stall_admissions(
    local_cluster: LocalCluster, tmp_path: Path
) -> None:
    """Audit lines go to stdout, a pipe the container runtime drains. Here nobody reads it: it
    fills at 64 KiB (about a hundred records), and every admission must still be answered at
    once; the records wait in the writer's backlog and all arrive once the pipe is read."""
    server = Podium(local_cluster, tmp_path, stdout=subprocess.PIPE, config=PIN)
    server.start()
    try:
        assert server.process is not None and server.process.stdout is not None
        pod = pytorch_pod(pytorchjob()).obj()
        uids = [f"stdout-{i}" for i in range(400)]
        for uid in uids:  # each waits at most 10 s: a blocked event loop fails the test here
            answer = post_review(server, reviews.review_for_pod(pod, uid=uid))
            assert answer["response"]["allowed"] is True
        stdout = server.process.stdout
        answered: list[str] = []

        def read_admissions() -> None:
            # The leader's reconciler and the CRD guard write entries of their own to the same
            # stdout (e.g. for objects other tests left in the cluster): count only these reviews.
            entries = auditview.read(line.decode() for line in stdout)
            for entry in entries:
                if str(entry.get("requestUID") or "").startswith("stdout-"):
                    answered.append(str(entry["requestUID"]))
                    if len(answered) == len(uids):
                        return

        reader = threading.Thread(target=read_admissions, daemon=True)
        reader.start()
        reader.join(30)
        assert answered == uids
    finally:
        server.stop()


def kubeconfig_copy(
    cluster: LocalCluster,
    path: Path,
    *,
    server: str | None = None,
    cert: Path | None = None,
    key: Path | None = None,
) -> Path:
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    if server is not None:
        config["clusters"][0]["cluster"]["server"] = server
    if cert is not None and key is not None:
        config["users"][0]["user"] = {"client-certificate": str(cert), "client-key": str(key)}
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def unregister(cluster: LocalCluster) -> None:
    """Leave no webhook configuration pointing at a podium that is gone."""
    name = yaml.safe_load(WEBHOOK_MANIFEST.read_text())["metadata"]["name"]
    with contextlib.suppress(ApiError):
        cluster.request(
            "DELETE", f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{name}"
        )


def wait_until_podium_knows(server: Podium, pod: dict[str, Any], timeout: float = 30) -> None:
    """A dry-run review straight to podium: pinned once its watch cache has the job."""
    probe = reviews.review_for_pod(pod, uid=f"probe-{uuid.uuid4().hex[:6]}")
    probe["request"]["dryRun"] = True

    def pinned() -> bool:
        try:
            answer = post_review(server, probe)
        except OSError:
            return False
        return bool(answer["response"]["auditAnnotations"].get("outcome") == "pinned")

    server.cluster.wait_for("podium to see the job", pinned, timeout=timeout)


def audit_record(server: Podium, ns: str, pod: str, timeout: float = 10) -> dict[str, Any]:
    found: list[dict[str, Any]] = []

    def written() -> bool:
        found[:] = [
            r
            for r in server.audit_records()
            if r["namespace"] == ns and r["pod"] == pod and not r["dryRun"]
        ]
        return bool(found)

    server.cluster.wait_for(f"the audit record of {ns}/{pod}", written, timeout=timeout)
    return found[-1]


def timed_create(cluster: LocalCluster, obj: dict[str, Any]) -> tuple[dict[str, Any], float]:
    started = time.perf_counter()
    created = live_create(cluster, obj)
    return created, time.perf_counter() - started


LIVE_BUDGET = 1.0


@pytest.mark.e2e
def test_apiserver_stalled_or_unreachable_during_admission_fails_open_in_time(
    local_cluster: LocalCluster, tmp_path: Path
) -> None:
    """podium talks to the apiserver through a proxy that stalls, then refuses: each new job's
    first pod is created unpinned within the budget, its audit record says why; then podium
    recovers and pins the next job."""
    faults = [
        ("stall", rf"did not answer within {LIVE_BUDGET:g}s"),
        # A pooled connection is reset, a new one refused: either way a connection error.
        ("refuse", r"Connection (refused|reset|aborted)|RemoteDisconnected|NewConnectionError"),
    ]
    seen: dict[str, tuple[float, str]] = {}
    with (
        FaultProxy(local_cluster.apiserver_port) as proxy,
        opted_in_namespace(local_cluster, "fault") as ns,
    ):
        kubeconfig = kubeconfig_copy(
            local_cluster, tmp_path / "proxied.kubeconfig", server=proxy.url
        )
        server = Podium(
            ClusterAs(local_cluster, kubeconfig),  # type: ignore[arg-type]
            tmp_path / "podium",
            config=PIN + f"time-budget-seconds: {LIVE_BUDGET:g}\n",
        )
        try:
            with serving(server):
                for mode, why in faults:
                    job = live_pytorchjob(local_cluster, ns, f"job-{mode}", workers=1, gpus=0)
                    first = pytorch_pods(job, workers=1, gpus=0)[0]
                    wait_until_podium_knows(server, first)
                    proxy.set_mode(mode)
                    try:
                        created, elapsed = timed_create(local_cluster, first)
                    finally:
                        proxy.set_mode("pass")
                    name = created["metadata"]["name"]
                    assert ZONE not in (created["metadata"].get("annotations") or {}), mode
                    assert elapsed < LIVE_BUDGET + 1.5, f"{mode}: {elapsed:.2f}s"
                    record = audit_record(server, ns, name)
                    assert record["outcome"] == "fail-open", (mode, record)
                    assert re.search(why, record["error"]), (mode, record["error"])
                    seen[mode] = (elapsed, record["error"])
                # Recovered: the watch reconnects through the proxy, the next job is pinned.
                job = live_pytorchjob(local_cluster, ns, "job-after", workers=1, gpus=0)
                first = pytorch_pods(job, workers=1, gpus=0)[0]
                wait_until_podium_knows(server, first, timeout=60)
                created, elapsed = timed_create(local_cluster, first)
                assert ZONE in created["metadata"]["annotations"], created["metadata"]
                assert audit_record(server, ns, first["metadata"]["name"])["outcome"] == "pinned"
        finally:
            unregister(local_cluster)
    print(f"faults seen: {seen}; recovered admission {elapsed:.2f}s")


READ_ONLY_USER = "podium-read-only"


@contextlib.contextmanager
def read_only_user(cluster: LocalCluster, directory: Path) -> Iterator[Path]:
    """A kubeconfig for a user RBAC lets get/list/watch everything and write nothing."""
    cert, key = cluster.issue_certificate(
        READ_ONLY_USER, common_name=READ_ONLY_USER, client=True, directory=directory
    )
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": READ_ONLY_USER},
        "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list", "watch"]}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": READ_ONLY_USER},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": READ_ONLY_USER,
        },
        "subjects": [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": READ_ONLY_USER}
        ],
    }
    cluster.request("POST", f"{rbac}/clusterroles", role)
    try:
        cluster.request("POST", f"{rbac}/clusterrolebindings", binding)
        try:
            yield kubeconfig_copy(cluster, directory / "read-only.kubeconfig", cert=cert, key=key)
        finally:
            cluster.request("DELETE", f"{rbac}/clusterrolebindings/{READ_ONLY_USER}")
    finally:
        cluster.request("DELETE", f"{rbac}/clusterroles/{READ_ONLY_USER}")


@pytest.mark.e2e
def test_podium_forbidden_to_write_fails_open_and_says_403(
    local_cluster: LocalCluster, tmp_path: Path
) -> None:
    """podium may read (its cache syncs) but not create its record or policy: each new job's pod
    is created unpinned, in time, and the audit record says Forbidden."""
    with (
        read_only_user(local_cluster, tmp_path) as kubeconfig,
        opted_in_namespace(local_cluster, "forbidden") as ns,
    ):
        server = Podium(
            ClusterAs(local_cluster, kubeconfig),  # type: ignore[arg-type]
            tmp_path / "podium",
            config=PIN + f"time-budget-seconds: {LIVE_BUDGET:g}\n",
            chart_rbac=None,  # the read-only user itself, not the chart's ServiceAccount
        )
        try:
            with serving(server):
                for i in range(2):
                    job = live_pytorchjob(local_cluster, ns, f"job-{i}", workers=1, gpus=0)
                    first = pytorch_pods(job, workers=1, gpus=0)[0]
                    wait_until_podium_knows(server, first)
                    created, elapsed = timed_create(local_cluster, first)
                    assert ZONE not in (created["metadata"].get("annotations") or {})
                    assert elapsed < LIVE_BUDGET + 1.5, f"{elapsed:.2f}s"
                    record = audit_record(server, ns, created["metadata"]["name"])
                    assert record["outcome"] == "fail-open", record
                    assert "403" in record["error"] and "forbidden" in record["error"], record
                    assert READ_ONLY_USER in record["error"], record
                    print(f"403: {elapsed:.2f}s {record['error']}")
        finally:
            unregister(local_cluster)


BURST = 500  # pods of one job: 1 master + BURST - 1 workers
KILL_AFTER = 100  # creations before the replica is SIGKILLed


def doctor_not_pinned(cluster: LocalCluster, ns: str) -> set[str]:
    """The pods ``podium doctor`` reports as not-pinned in the namespace."""
    code, report = run_doctor(cluster, ns)
    assert code == (0 if report["ok"] else 1)
    return {p for f in report["findings"] if f["check"] == "not-pinned" for p in f["pods"]}


@pytest.mark.e2e
def test_a_replica_killed_in_a_burst_leaves_every_pod_pinned_or_reported(
    local_cluster: LocalCluster, tmp_path: Path
) -> None:
    """The only replica is SIGKILLed after KILL_AFTER of a job's BURST pods and restarted at once:
    the apiserver admits what it cannot send (failurePolicy Ignore). Every pod exists; each is
    pinned to the one zone or `podium doctor` reports it not-pinned — exactly those."""
    with opted_in_namespace(local_cluster, "burst") as ns:
        server = Podium(local_cluster, tmp_path / "podium", config=PIN)
        lock = threading.Lock()
        created_count = 0
        restarted: list[BaseException | None] = []
        restarter: threading.Thread | None = None

        def restart() -> None:
            try:
                server.stop()  # reaps the killed process and closes its log
                server.start()
                restarted.append(None)
            except BaseException as err:  # reported by the test thread
                restarted.append(err)

        def create_one(obj: dict[str, Any]) -> dict[str, Any]:
            nonlocal created_count, restarter
            created = live_create(local_cluster, obj)
            with lock:
                created_count += 1
                if created_count == KILL_AFTER:
                    assert server.process is not None
                    server.process.kill()
                    server.process.wait(timeout=10)
                    restarter = threading.Thread(target=restart)
                    restarter.start()
            return created

        try:
            with serving(server):
                job = live_pytorchjob(local_cluster, ns, "burst", workers=BURST - 1, gpus=0)
                pods = pytorch_pods(job, workers=BURST - 1, gpus=0)
                wait_until_podium_knows(server, pods[0])
                started = time.perf_counter()
                with ThreadPoolExecutor(max_workers=16) as pool:
                    answers = list(pool.map(create_one, pods))
                took = time.perf_counter() - started
                assert restarter is not None
                restarter.join(timeout=90)
                assert restarted == [None], restarted
        finally:
            unregister(local_cluster)
        assert len(answers) == BURST
        live = {
            p["metadata"]["name"]: p
            for p in local_cluster.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"]
        }
        assert set(live) == {p["metadata"]["name"] for p in pods}
        pinned = {n for n, p in live.items() if ZONE in (p["metadata"].get("annotations") or {})}
        zones = {live[n]["metadata"]["annotations"][ZONE] for n in pinned}
        assert len(zones) <= 1, zones
        assert pinned, "the replica pinned nothing before it was killed"
        assert doctor_not_pinned(local_cluster, ns) == set(live) - pinned
        print(
            f"burst of {BURST} in {took:.1f}s, killed after {KILL_AFTER}: "
            f"{len(pinned)} pinned to {zones}, {BURST - len(pinned)} not pinned (doctor agrees)"
        )


CNP_CRD = "ciliumnetworkpolicies.cilium.io"


def gone(cluster: LocalCluster, path: str) -> bool:
    try:
        cluster.request("GET", path)
    except ApiError as err:
        return err.status == 404
    return False


def not_terminating(cluster: LocalCluster, path: str) -> bool:
    try:
        obj = cluster.request("GET", path)
    except ApiError as err:
        return err.status == 404
    return "deletionTimestamp" not in obj["metadata"]


@pytest.mark.e2e
def test_policy_crd_missing_live_pins_and_warns(
    local_cluster: LocalCluster, tmp_path: Path
) -> None:
    """Last in the module: the CiliumNetworkPolicy CRD is deleted; a new job's pod is still pinned,
    its audit record warns that no policy exists. The CRD is re-installed (Established) after."""
    crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    try:
        with opted_in_namespace(local_cluster, "nocrd") as ns:
            server = Podium(local_cluster, tmp_path / "podium", config=PIN)
            try:
                with serving(server):
                    local_cluster.request("DELETE", f"{crds}/{CNP_CRD}")
                    local_cluster.wait_for(
                        "the CNP CRD to be gone",
                        lambda: (
                            gone(local_cluster, f"{crds}/{CNP_CRD}")
                            and gone(local_cluster, "/apis/cilium.io/v2/ciliumnetworkpolicies")
                        ),
                        timeout=60,
                    )
                    job = live_pytorchjob(local_cluster, ns, "nocrd", workers=1, gpus=0)
                    first = pytorch_pods(job, workers=1, gpus=0)[0]
                    wait_until_podium_knows(server, first)
                    created = live_create(local_cluster, first)
                    assert ZONE in created["metadata"]["annotations"], created["metadata"]
                    record = audit_record(server, ns, first["metadata"]["name"])
                    assert record["outcome"] == "pinned", record
                    assert [
                        e["outcome"]
                        for e in record["effects"]
                        if e["kind"] == "CiliumNetworkPolicy"
                    ] == ["skipped-crd-missing"], record["effects"]
                    assert any("no allow policy exists" in w for w in record["warnings"]), record
                    print(f"CRD missing: pinned to {record['zone']}, warnings {record['warnings']}")
            finally:
                unregister(local_cluster)
    finally:  # a CRD still terminating cannot be re-created: wait until it is gone first
        local_cluster.wait_for(
            "the CNP CRD to finish terminating",
            lambda: not_terminating(local_cluster, f"{crds}/{CNP_CRD}"),
            timeout=60,
        )
        local_cluster.install_crds([CRD_DIR / "cilium.io_ciliumnetworkpolicies.yaml"])
        assert local_cluster.crd_established(CNP_CRD)
        local_cluster.wait_for(  # served again, for the modules after this one
            "CiliumNetworkPolicies to be listable",
            lambda: not gone(local_cluster, "/apis/cilium.io/v2/ciliumnetworkpolicies"),
            timeout=30,
        )

"""The reconciler inside ``podium serve``, on the real control plane: a deleted policy comes back,
so do a record and a policy deleted together, an edited policy is patched back, an orphan is
marked and then deleted, and of two podium processes only the Lease holder acts. The grace period
is 3 s and a pass runs every 0.5 s, so this runs in seconds, not minutes."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import pytest

from testbed.controlplane import ApiError, LocalCluster
from testbed.podium import PIN, Podium
from tests.builders import owner_ref

from .test_podium import (
    REASON,
    ZONE,
    collection,
    create,
    create_concurrently,
    podium_objects,
    pytorch_pods,
    pytorchjob,
    until_podium_would,
    wait_bound,
)

pytestmark = pytest.mark.e2e

ORPHAN_SINCE = "podium.dev/orphan-since"
GRACE = 3.0
CNP = "cilium.io/v2"


def ensure_namespace(
    cluster: LocalCluster, name: str, labels: dict[str, str] | None = None
) -> None:
    with contextlib.suppress(ApiError):
        cluster.request(
            "POST",
            "/api/v1/namespaces",
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": name, "labels": labels or {}},
            },
        )


@pytest.fixture(scope="module")
def pair(
    local_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[Podium]]:
    """Two podium processes (the same Deployment's replicas); the webhook calls the first."""
    ensure_namespace(local_cluster, "podium-system")
    servers: list[Podium] = []
    config = (
        PIN + f"orphan-grace-seconds: {GRACE}\nreconcile-interval-seconds: 0.5\nno-fit: unpinned\n"
    )
    try:
        for name in ("a", "b"):
            server = Podium(local_cluster, tmp_path_factory.mktemp(f"podium-{name}"), config=config)
            server.launch()
            servers.append(server)
        for server in servers:
            server.wait_ready()
        servers[0].register()
        servers[0].wait_until_called()
        yield servers
    finally:
        for server in servers:
            server.stop()


@pytest.fixture
def ns(local_cluster: LocalCluster, pair: list[Podium]) -> Iterator[str]:
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    ensure_namespace(local_cluster, name, {"podium.dev/enabled": "true"})
    yield name
    local_cluster.request("DELETE", f"/api/v1/namespaces/{name}")


def reconciles(servers: list[Podium]) -> list[tuple[int, dict[str, Any]]]:
    """(index of the process, record) for every reconcile audit record."""
    return [
        (i, r)
        for i, s in enumerate(servers)
        for r in s.audit_records()
        if r.get("outcome") == "reconcile"
    ]


def audited(
    cluster: LocalCluster,
    servers: list[Podium],
    ns: str,
    until: Callable[[list[dict[str, Any]]], bool],
) -> list[dict[str, Any]]:
    """The reconcile audit records of ``ns`` once ``until`` holds for them: podium's writer thread
    writes them to the audit file a moment after the action they record."""

    def records() -> list[dict[str, Any]]:
        return [r for _, r in reconciles(servers) if r["namespace"] == ns]

    cluster.wait_for("the reconciler's audit records", lambda: until(records()), timeout=10)
    return records()


def admitted_job(
    cluster: LocalCluster, ns: str, name: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A PyTorchJob whose pods podium admitted; its policy."""
    job = pytorchjob(cluster, ns, name, workers=1, gpus=0)
    create_concurrently(cluster, pytorch_pods(job, workers=1, gpus=0))
    _, found = podium_objects(cluster, ns)
    (policy,) = found
    return job, policy


def policy_path(ns: str, name: str) -> str:
    return f"{collection(CNP, 'CiliumNetworkPolicy', ns)}/{name}"


def test_a_deleted_policy_is_recreated(
    local_cluster: LocalCluster, ns: str, pair: list[Podium]
) -> None:
    _, policy = admitted_job(local_cluster, ns, "deleted")
    name = policy["metadata"]["name"]
    local_cluster.request("DELETE", policy_path(ns, name))

    def back() -> bool:
        try:
            got = local_cluster.request("GET", policy_path(ns, name))
        except ApiError:
            return False
        return bool(got["metadata"]["uid"] != policy["metadata"]["uid"])

    local_cluster.wait_for("the reconciler to re-create the policy", back, timeout=30)
    again = local_cluster.request("GET", policy_path(ns, name))
    assert again["spec"] == policy["spec"]
    assert again["metadata"]["ownerReferences"] == policy["metadata"]["ownerReferences"]
    records = audited(local_cluster, pair, ns, lambda rs: any(r["action"] == "create" for r in rs))
    created = [r for r in records if (r["action"], r["reason"]) == ("create", "missing-policy")]
    assert [r["result"] for r in created] == ["created"]


def test_a_gang_whose_record_and_policy_were_both_deleted_is_rebuilt_from_its_pods(
    local_cluster: LocalCluster, ns: str, pair: list[Podium]
) -> None:
    _, policy = admitted_job(local_cluster, ns, "both")
    name = policy["metadata"]["name"]
    record_path = f"/api/v1/namespaces/{ns}/configmaps/{name}"
    record = local_cluster.request("GET", record_path)
    local_cluster.request("DELETE", policy_path(ns, name))
    local_cluster.request("DELETE", record_path)

    def rebuilt() -> bool:
        try:
            again = [local_cluster.request("GET", p) for p in (record_path, policy_path(ns, name))]
        except ApiError:
            return False
        return all(
            got["metadata"]["uid"] != old["metadata"]["uid"]
            for got, old in zip(again, (record, policy), strict=True)
        )

    local_cluster.wait_for("the reconciler to rebuild record and policy", rebuilt, timeout=30)
    new_record = local_cluster.request("GET", record_path)
    assert new_record["data"]["zone"] == record["data"]["zone"]
    assert new_record["data"]["gang"] == record["data"]["gang"]
    assert local_cluster.request("GET", policy_path(ns, name))["spec"] == policy["spec"]
    records = audited(
        local_cluster, pair, ns, lambda rs: sum(r["action"] == "create" for r in rs) >= 2
    )
    created = {r["reason"]: r["result"] for r in records if r["action"] == "create"}
    assert created == {"missing-record": "created", "missing-policy": "created"}


def test_an_edited_selector_is_patched_back(
    local_cluster: LocalCluster, ns: str, pair: list[Podium]
) -> None:
    _, policy = admitted_job(local_cluster, ns, "edited")
    name = policy["metadata"]["name"]
    local_cluster.request(
        "PATCH",
        policy_path(ns, name),
        {
            "spec": {
                "endpointSelector": {"matchLabels": {"app": "anything"}},
                "ingressDeny": [{"fromEntities": ["world"]}],
            }
        },
        content_type="application/merge-patch+json",
    )

    def repaired() -> bool:
        return bool(local_cluster.request("GET", policy_path(ns, name))["spec"] == policy["spec"])

    local_cluster.wait_for("the reconciler to patch the policy back", repaired, timeout=30)
    records = audited(local_cluster, pair, ns, bool)
    actions = [(r["action"], r["result"]) for r in records]
    assert actions == [("repair", "repaired")]  # once: what it writes is what it expects


def test_an_unpinned_pod_gets_its_nodes_zone_once_bound_and_the_zone_its_policy(
    local_cluster: LocalCluster, ns: str, pair: list[Podium]
) -> None:
    """No zone has room for the gang (no-fit: unpinned): podium admits its pods without a zone,
    so no zone-scoped policy covers them. Once the scheduler binds them, the reconciler labels
    each with its node's zone — a patch by podium's own user, which podium's UPDATE guard lets
    through for exactly that value — and creates each zone's policy."""
    job = pytorchjob(local_cluster, ns, "unpinned", workers=20)  # 168 GPUs: no zone fits
    sent = pytorch_pods(job, workers=1, gpus=0)
    # The gang's size comes from the job: a podium that has not seen it yet (nor read it in its
    # time budget, on a loaded machine) sizes the gang by these CPU pods, and pins them. Ask (a
    # server-side dry run, which creates nothing) until podium answers as it does knowing the
    # job — no zone, for no-fit — and not merely without a zone: a podium that has not seen the
    # namespace opt in yet, or that failed open, answers without one too.
    until_podium_would(
        local_cluster,
        sent[0],
        "podium to know the job's size",
        lambda got: (got["metadata"].get("annotations") or {}).get(REASON) == "no-fit-unpinned",
    )
    # Both pods are decided before either can bind: created at once, a master bound within
    # milliseconds makes its worker follow it into its zone (the pin's coordinator rule), as the
    # cold clean-clone run once saw. The test's own gate keeps them unscheduled until then.
    for pod in sent:
        pod["spec"]["schedulingGates"] = [{"name": "e2e.podium.dev/both-decided"}]
    pods = create_concurrently(local_cluster, sent)
    assert all(ZONE not in p["metadata"]["labels"] for p in pods)
    for p in pods:
        local_cluster.request(
            "PATCH",
            f"/api/v1/namespaces/{ns}/pods/{p['metadata']['name']}",
            {"spec": {"schedulingGates": None}},
            content_type="application/merge-patch+json",
        )
    zones = wait_bound(local_cluster, ns, [p["metadata"]["name"] for p in pods])

    def labelled() -> bool:
        got = [
            local_cluster.request("GET", f"/api/v1/namespaces/{ns}/pods/{p}")["metadata"][
                "labels"
            ].get(ZONE)
            for p in zones
        ]
        return got == list(zones.values())

    local_cluster.wait_for("the reconciler to label the pods with their zone", labelled, timeout=30)
    local_cluster.wait_for(
        "a policy for every zone",
        lambda: (
            {
                p["spec"]["endpointSelector"]["matchLabels"].get(ZONE)
                for p in podium_objects(local_cluster, ns)[1]
            }
            == set(zones.values())
        ),
        timeout=30,
    )
    records = audited(
        local_cluster, pair, ns, lambda rs: sum(r["action"] == "label" for r in rs) >= len(pods)
    )
    assert {(r["action"], r["reason"], r["result"]) for r in records if r["action"] == "label"} == {
        ("label", "zone-known", "labelled")
    }


def test_an_orphan_is_marked_then_deleted_after_the_grace(
    local_cluster: LocalCluster, ns: str, pair: list[Podium]
) -> None:
    """A record and policy for a job none of whose pods was ever persisted (as when a later
    webhook rejected them all)."""
    job = pytorchjob(local_cluster, ns, "never-ran", workers=1, gpus=0)
    uid = job["metadata"]["uid"]
    labels = {"app.kubernetes.io/managed-by": "podium", "podium.dev/job": uid}
    meta = {
        "name": "podium-pytorchjob-never-ran-0000",
        "namespace": ns,
        "ownerReferences": [owner_ref(job, controller=False)],
    }
    record = create(
        local_cluster,
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {**meta, "labels": {**labels, "podium.dev/component": "decision"}},
            "data": {
                "zone": "zone-a",
                "gang": uid,
                "jobUID": uid,
                "decidedAt": "2026-01-01T00:00:00+00:00",
            },
        },
    )
    policy = create(
        local_cluster,
        {
            "apiVersion": CNP,
            "kind": "CiliumNetworkPolicy",
            "metadata": {**meta, "labels": {**labels, "podium.dev/component": "policy"}},
            "spec": {
                "endpointSelector": {"matchLabels": {"podium.dev/job": uid}},
                "ingress": [{"fromEndpoints": [{"matchLabels": {"podium.dev/job": uid}}]}],
            },
        },
    )
    paths = [
        f"{collection('v1', 'ConfigMap', ns)}/{record['metadata']['name']}",
        policy_path(ns, policy["metadata"]["name"]),
    ]

    def annotations(path: str) -> dict[str, str] | None:
        try:
            got: dict[str, str] = (
                local_cluster.request("GET", path)["metadata"].get("annotations") or {}
            )
        except ApiError as err:
            if err.status == 404:
                return None
            raise
        return got

    local_cluster.wait_for(
        "both objects to be marked",
        lambda: all(ORPHAN_SINCE in (annotations(p) or {}) for p in paths),
        timeout=30,
    )
    local_cluster.wait_for(
        "both objects to be deleted", lambda: all(annotations(p) is None for p in paths), timeout=30
    )
    records = audited(local_cluster, pair, ns, lambda rs: len(rs) >= 4)
    steps = [(r["action"], r["reason"], r["result"]) for r in records]
    assert sorted(steps) == sorted(
        [("mark", "no-pods", "marked")] * 2 + [("delete", "no-pods", "deleted")] * 2
    )
    marked_at = min(r["time"] for r in records if r["action"] == "mark")
    deleted_at = max(r["time"] for r in records if r["action"] == "delete")
    waited = (
        datetime.fromisoformat(deleted_at) - datetime.fromisoformat(marked_at)
    ).total_seconds()
    assert waited >= GRACE - 1  # the mark is written with second precision


def test_only_the_lease_holder_acts_and_the_other_takes_over(
    local_cluster: LocalCluster, ns: str, pair: list[Podium]
) -> None:
    acting = {i for i, _ in reconciles(pair)}
    assert len(acting) == 1, "both processes reconciled"
    (leader,) = acting
    lease = local_cluster.request(
        "GET", "/apis/coordination.k8s.io/v1/namespaces/podium-system/leases/podium-reconciler"
    )
    process = pair[leader].process
    assert process is not None
    assert lease["spec"]["holderIdentity"].endswith(f"-{process.pid}")
    assert lease["spec"]["leaseDurationSeconds"] == 15

    # The leader goes away (SIGTERM releases the lease): the other replica acts from now on.
    _, policy = admitted_job(local_cluster, ns, "handover")
    pair[leader].stop()
    other = pair[1 - leader]
    local_cluster.request("DELETE", policy_path(ns, policy["metadata"]["name"]))

    def recreated_by_other() -> bool:
        return any(
            i == 1 - leader and r["namespace"] == ns and r["action"] == "create"
            for i, r in reconciles(pair)
        )

    local_cluster.wait_for("the other replica to take over", recreated_by_other, timeout=30)
    assert other.process is not None
    lease = local_cluster.request(
        "GET", "/apis/coordination.k8s.io/v1/namespaces/podium-system/leases/podium-reconciler"
    )
    assert lease["spec"]["holderIdentity"].endswith(f"-{other.process.pid}")

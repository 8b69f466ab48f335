"""podium under the chart's ``rbac.scope: namespaced`` (issue 22, item 5): its writes are bound
only in the namespaces of ``rbac.namespaces``. In a listed namespace a job is pinned and gets its
record and policy; in a namespace that opted in (the label) but is not listed, the apiserver
refuses podium's write (403) and podium fails open, saying what to bind; in kube-system the
apiserver refuses podium's token outright."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from testbed.controlplane import ApiError, LocalCluster
from testbed.controlplane.api import Api
from testbed.podium import Podium, opted_in_namespace, serving
from webhook.core.labels import ZONE as ZONE_LABEL

from .test_podium import (
    ZONE,
    create_concurrently,
    podium_objects,
    pytorch_pods,
    pytorchjob,
)

pytestmark = pytest.mark.e2e


def configmap(namespace: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "podium-probe", "namespace": namespace},
    }


@pytest.fixture(scope="module")
def listed_ns(local_cluster: LocalCluster) -> Iterator[str]:
    """The one namespace podium may write in (opted in, and in rbac.namespaces)."""
    name = f"listed-{uuid.uuid4().hex[:6]}"
    local_cluster.create_namespace(name, {"podium.dev/enabled": "true"})
    yield name
    local_cluster.delete_namespace(name)


@pytest.fixture(scope="module")
def podium(
    local_cluster: LocalCluster, listed_ns: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Podium]:
    values = ("rbac.scope=namespaced", f"rbac.namespaces={{{listed_ns}}}")
    # The settings the chart renders for these values: podium holds pods only where it may write.
    config = f"writable-namespaces: [{listed_ns}]\n"
    server = Podium(
        local_cluster, tmp_path_factory.mktemp("namespaced"), config=config, chart_rbac=values
    )
    with serving(server, unregister=True) as started:
        yield started


@pytest.fixture
def as_podium(podium: Podium) -> Api:
    """The apiserver, with podium's token."""
    return Api.from_kubeconfig(podium.kubeconfig)


def test_the_apiserver_refuses_podiums_writes_outside_the_listed_namespaces(
    as_podium: Api, listed_ns: str
) -> None:
    for namespace in ("kube-system", "default"):
        with pytest.raises(ApiError) as refused:
            as_podium.request(
                "POST",
                f"/api/v1/namespaces/{namespace}/configmaps",
                configmap(namespace),
                query={"dryRun": "All"},
            )
        assert refused.value.status == 403, refused.value
        assert "system:serviceaccount:podium-system:podium" in str(refused.value)
    written = as_podium.request(
        "POST",
        f"/api/v1/namespaces/{listed_ns}/configmaps",
        configmap(listed_ns),
        query={"dryRun": "All"},
    )
    assert written["metadata"]["namespace"] == listed_ns


def test_podium_reads_configmaps_and_policies_only_in_the_listed_namespaces(
    as_podium: Api, listed_ns: str
) -> None:
    """Its own objects are readable where it writes them and nowhere else: neither across all
    namespaces nor in another one (podium watches them per listed namespace; it became ready,
    so those watches synced)."""
    kinds = ("/api/v1/{}configmaps", "/apis/networking.k8s.io/v1/{}networkpolicies")
    for kind in kinds:
        for where in ("", "namespaces/default/", "namespaces/kube-system/"):
            with pytest.raises(ApiError) as refused:
                as_podium.request("GET", kind.format(where))
            assert refused.value.status == 403, (kind, where, refused.value)
        listed = as_podium.request("GET", kind.format(f"namespaces/{listed_ns}/"))
        assert isinstance(listed["items"], list)


def test_a_job_in_a_listed_namespace_is_released_with_its_record_and_policy(
    local_cluster: LocalCluster, listed_ns: str, podium: Podium
) -> None:
    """Held at admission (the default ``zone-chooser: hold``), then released whole into one zone
    by the releaser, whose record, policy and pod patches the namespace's RoleBinding allows."""
    job = pytorchjob(local_cluster, listed_ns, "allowed", workers=1, gpus=1)
    created = create_concurrently(local_cluster, pytorch_pods(job, workers=1, gpus=1))
    names = {p["metadata"]["name"] for p in created}

    def zones() -> set[str] | None:
        pods = local_cluster.request("GET", f"/api/v1/namespaces/{listed_ns}/pods")["items"]
        mine = [p for p in pods if p["metadata"]["name"] in names]
        if len(mine) < len(names) or any(p["spec"].get("schedulingGates") for p in mine):
            return None
        return {(p["metadata"].get("labels") or {}).get(ZONE_LABEL, "") for p in mine}

    local_cluster.wait_for("the gang released", lambda: zones() is not None, timeout=60)
    released = zones()
    assert released is not None and len(released) == 1 and "" not in released, released
    records, policies = podium_objects(local_cluster, listed_ns)
    assert len(records) == 1 and len(policies) == 1


def test_an_opted_in_namespace_that_is_not_listed_fails_open_with_the_403(
    local_cluster: LocalCluster, podium: Podium
) -> None:
    with opted_in_namespace(local_cluster, "unlisted") as namespace:
        job = pytorchjob(local_cluster, namespace, "refused", workers=1, gpus=0)
        created = create_concurrently(local_cluster, pytorch_pods(job, workers=1, gpus=0))
        # Admitted unchanged: no zone, nothing written.
        assert not any(ZONE in (p["metadata"].get("annotations") or {}) for p in created)
        assert podium_objects(local_cluster, namespace) == ([], [])
        names = {p["metadata"]["name"] for p in created}
        local_cluster.wait_for(
            "the fail-open audit records",
            lambda: (
                {r.get("pod") for r in podium.audit_records() if r.get("namespace") == namespace}
                >= names
            ),
            timeout=15,
        )
        records = [r for r in podium.audit_records() if r.get("namespace") == namespace]
    for record in records:
        assert record["outcome"] == "fail-open", record
        assert "403" in record["error"] and "forbidden" in record["error"], record["error"]
        assert f"may not write in namespace {namespace}" in record["error"], record["error"]

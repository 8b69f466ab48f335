"""podium's objects and patched pods against the real schemas (upstream CRDs, Kubernetes API)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.builders import PodBuilder
from tests.scenarios import NS, base_cluster, pytorch_pod, pytorchjob
from tests.schemas import cilium_policy_errors, kubernetes_errors
from webhook.core import engine, labels, policies, records, reviews
from webhook.core.adapters.base import Gang, OwnerRef, PodGroup
from webhook.core.settings import PolicyMode, Settings
from webhook.core.view import ClusterView


def decide(
    pod: dict[str, Any], objects: list[dict[str, Any]], now: datetime, mode: PolicyMode
) -> engine.Decision:
    settings = Settings(policy_mode=mode)
    view = ClusterView.from_objects(objects, zone_label=settings.zone_label)
    return engine.decide(
        reviews.from_document(reviews.review_for_pod(pod)), view, settings, now=now
    )


def gang(
    kind: str = "PyTorchJob", name: str = "llama", key: str = "2c1d9a7e-0000-4000-8000-000000000001"
) -> Gang:
    return Gang(
        framework=kind.lower(),
        owner=OwnerRef("kubeflow.org/v1", kind, name, key[:36]),
        key=key,
        role="worker",
        coordinator=False,
        demand=(PodGroup(2, {"nvidia.com/gpu": 8, "pods": 1}),),
        demand_source="job",
        member_labels={},
    )


def test_cilium_policy_whole() -> None:
    g = gang()
    policy = policies.build_policy(gang=g, namespace=NS, mode=PolicyMode.CILIUM)
    peers = {"matchLabels": {labels.JOB: g.key}}
    assert policy == {
        "apiVersion": "cilium.io/v2",
        "kind": "CiliumNetworkPolicy",
        "metadata": {
            "name": labels.object_name("PyTorchJob", "llama", g.key),
            "namespace": NS,
            "labels": {labels.MANAGED_BY: "podium", labels.COMPONENT: "policy", labels.JOB: g.key},
            "ownerReferences": [g.owner.as_owner_reference()],
        },
        "spec": {
            "description": "podium: traffic between the pods of PyTorchJob/llama",
            "endpointSelector": peers,
            "enableDefaultDeny": {"ingress": False, "egress": False},
            "ingress": [{"fromEndpoints": [peers]}],
            "egress": [{"toEndpoints": [peers]}],
        },
    }
    # No toPorts anywhere: NCCL uses ephemeral ports, a port list would break it.
    assert "toPorts" not in str(policy)


@pytest.mark.parametrize("mode", [PolicyMode.CILIUM, PolicyMode.KUBERNETES])
def test_decided_objects_and_pods_pass_the_real_schemas(mode: PolicyMode, now: datetime) -> None:
    pj = pytorchjob()
    for pod in (
        pytorch_pod(pj, "master").obj(),
        pytorch_pod(pj, "worker", 2)
        .affinity_terms(
            {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]},
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["c-1"]}]},
        )
        .obj(),
    ):
        decision = decide(pod, base_cluster(pj), now, mode)
        assert (
            decision.patched is not None
            and decision.record is not None
            and decision.policy is not None
        )
        assert kubernetes_errors(dict(decision.patched)) == []
        assert kubernetes_errors(decision.record) == []
        if mode is PolicyMode.CILIUM:
            assert cilium_policy_errors(decision.policy) == []
        else:
            assert kubernetes_errors(decision.policy) == []


def test_generate_name_pod_patch_passes_the_pod_schema(now: datetime) -> None:
    pj = pytorchjob()
    pod = pytorch_pod(pj).obj()
    pod["metadata"].pop("name")
    pod["metadata"]["generateName"] = "llama-worker-"
    decision = decide(pod, base_cluster(pj), now, PolicyMode.CILIUM)
    assert decision.patched is not None and kubernetes_errors(dict(decision.patched)) == []


def test_schema_validator_is_not_vacuous() -> None:
    policy = policies.build_policy(gang=gang(), namespace=NS, mode=PolicyMode.CILIUM)
    assert policy is not None
    broken = {
        **policy,
        "spec": {**policy["spec"], "egress": [{"toEndpoints": "everyone"}], "typo": 1},
    }
    assert len(cilium_policy_errors(broken)) >= 1
    assert kubernetes_errors(
        {**PodBuilder().obj(), "spec": {"containers": [{"name": "x", "bogus": 1}]}}
    )


label_values = st.from_regex(r"\A[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?\Z")
names = st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,200}[a-z0-9])?\Z")


@given(
    kind=st.sampled_from(["PyTorchJob", "JobSet", "LeaderWorkerSet", "RayCluster"]),
    name=names,
    key=label_values,
)
def test_any_gang_gives_a_valid_policy_and_record(kind: str, name: str, key: str) -> None:
    g = gang(kind, name, key)
    policy = policies.build_policy(gang=g, namespace=NS, mode=PolicyMode.CILIUM)
    assert policy is not None and cilium_policy_errors(policy) == []
    object_name = policy["metadata"]["name"]
    assert len(object_name) <= 253 and object_name == object_name.lower().strip("-.")
    record = policies.build_record(
        gang=g, namespace=NS, zone="z", reason="best-fit", detail="d", decided_at="t"
    )
    assert kubernetes_errors(record) == []
    assert records.read_record(record, key) is not None
    k8s = policies.build_policy(gang=g, namespace=NS, mode=PolicyMode.KUBERNETES)
    assert k8s is not None and kubernetes_errors(k8s) == []

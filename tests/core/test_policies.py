"""podium's objects and patched pods against the real schemas (upstream CRDs, Kubernetes API)."""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from tests.builders import PIN, PodBuilder, pinning
from tests.scenarios import NS, base_cluster, pytorch_pod, pytorchjob
from tests.schemas import CRDS, cilium_policy_errors, kubernetes_errors
from webhook.core import adapters, engine, labels, policies, records, reviews
from webhook.core.adapters.base import Gang, OwnerRef, PodGroup
from webhook.core.settings import OldCilium, PolicyMode, PolicyScope
from webhook.core.view import ClusterView

ZONE, JOB = PolicyScope.ZONE, PolicyScope.JOB


def decide(
    pod: dict[str, Any], objects: list[dict[str, Any]], now: datetime, mode: PolicyMode
) -> engine.Decision:
    settings = pinning(policy_mode=mode)
    view = ClusterView.from_objects(objects, zone_label=settings.zone_label, kept=adapters.KEPT)
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
    policy = policies.build_policy(
        gang=g,
        namespace=NS,
        mode=PolicyMode.CILIUM,
        scope=ZONE,
        zone="zone-a",
        record_zone="zone-a",
    )
    peers = {"matchLabels": {labels.JOB: g.key, labels.ZONE: "zone-a"}}
    assert policy == {
        "apiVersion": "cilium.io/v2",
        "kind": "CiliumNetworkPolicy",
        "metadata": {
            "name": labels.object_name("PyTorchJob", "llama", g.key),
            "namespace": NS,
            "labels": {
                labels.MANAGED_BY: "podium",
                labels.COMPONENT: "policy",
                labels.JOB: g.key,
                labels.ZONE: "zone-a",
            },
            "ownerReferences": [g.owner.as_owner_reference()],
        },
        "spec": {
            "description": "podium: traffic between the pods of PyTorchJob/llama in zone-a",
            "endpointSelector": peers,
            "enableDefaultDeny": {"ingress": False, "egress": False},
            "ingress": [{"fromEndpoints": [peers]}],
            "egress": [{"toEndpoints": [peers]}],
        },
    }
    # No toPorts anywhere: NCCL uses ephemeral ports, a port list would break it.
    assert "toPorts" not in str(policy)


def test_job_scope_is_the_job_wide_policy() -> None:
    g = gang()
    policy = policies.build_policy(
        gang=g, namespace=NS, mode=PolicyMode.CILIUM, scope=JOB, zone="zone-a"
    )
    assert policy is not None
    peers = {"matchLabels": {labels.JOB: g.key}}
    assert policy["metadata"]["name"] == labels.object_name("PyTorchJob", "llama", g.key)
    assert labels.ZONE not in policy["metadata"]["labels"]
    assert (policy["spec"]["endpointSelector"], policy["spec"]["ingress"]) == (
        peers,
        [{"fromEndpoints": [peers]}],
    )
    assert policies.policy_zone(policy) is None


@pytest.mark.parametrize("mode", [PolicyMode.CILIUM, PolicyMode.KUBERNETES])
def test_one_policy_per_zone_named_like_the_record_for_the_records_zone(mode: PolicyMode) -> None:
    g = gang()
    built = policies.build_policies(
        gang=g,
        namespace=NS,
        mode=mode,
        scope=ZONE,
        zones=["zone-b", "zone-a", "zone-b"],
        record_zone="zone-b",
    )
    names = [p["metadata"]["name"] for p in built]
    assert [policies.policy_zone(p) for p in built] == ["zone-a", "zone-b"]
    assert names[1] == labels.object_name("PyTorchJob", "llama", g.key)
    assert names[0].startswith("podium-pytorchjob-llama-zone-a-") and names[0] != names[1]
    assert names[0] == policies.policy_name(g, "zone-a", record_zone="zone-b")
    # Without a record zone (unpinned, or chosen by the scheduler) every zone's name says it.
    assert policies.policy_name(g, "zone-b") != names[1]
    assert policies.build_policies(gang=g, namespace=NS, mode=mode, scope=ZONE, zones=[]) == []
    assert policies.build_policy(gang=g, namespace=NS, mode=mode, scope=ZONE, zone=None) is None
    assert (
        policies.build_policies(
            gang=g, namespace=NS, mode=PolicyMode.NONE, scope=ZONE, zones=["zone-a"]
        )
        == []
    )


def cilium_crd(*, default_deny: bool) -> dict[str, Any]:
    """The real ciliumnetworkpolicies CRD (testbed/crds), or the same without
    ``spec.enableDefaultDeny`` in every version, as a Cilium < 1.16 installs it."""
    crd = yaml.safe_load((CRDS / "cilium.io_ciliumnetworkpolicies.yaml").read_text())
    if not default_deny:
        for version in crd["spec"]["versions"]:
            spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
            spec["properties"].pop("enableDefaultDeny", None)
    return crd


@pytest.mark.parametrize("default_deny", [True, False])
def test_the_crd_tells_whether_cilium_knows_enable_default_deny(default_deny: bool) -> None:
    crd = cilium_crd(default_deny=default_deny)
    slim = policies.slim_crd(crd)
    assert policies.knows_default_deny(crd) is default_deny
    assert policies.knows_default_deny(slim) is default_deny
    assert len(json.dumps(slim)) < 1000 < len(json.dumps(crd)) // 100
    assert slim["metadata"]["name"] == policies.CILIUM_CRD
    settings = PIN
    assert (policies.withheld(settings, slim) is None) == default_deny
    assert policies.withheld(settings, None) is None  # not seen: the create tells
    forced = pinning(old_cilium=OldCilium.CREATE_POLICY)
    assert policies.withheld(forced, slim) is None
    assert policies.withheld(pinning(policy_mode=PolicyMode.KUBERNETES), slim) is None


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
    policy = policies.build_policy(
        gang=gang(), namespace=NS, mode=PolicyMode.CILIUM, scope=ZONE, zone="zone-a"
    )
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
    zone=label_values,
    scope=st.sampled_from(list(PolicyScope)),
    records_zone=st.booleans(),
)
def test_any_gang_gives_a_valid_policy_and_record(
    kind: str, name: str, key: str, zone: str, scope: PolicyScope, records_zone: bool
) -> None:
    g = gang(kind, name, key)
    where = {"scope": scope, "zone": zone, "record_zone": zone if records_zone else None}
    policy = policies.build_policy(gang=g, namespace=NS, mode=PolicyMode.CILIUM, **where)
    assert policy is not None and cilium_policy_errors(policy) == []
    object_name = policy["metadata"]["name"]
    assert len(object_name) <= 253 and object_name == object_name.lower().strip("-.")
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", object_name)
    record = policies.build_record(
        gang=g, namespace=NS, zone="z", reason="best-fit", detail="d", decided_at="t"
    )
    assert kubernetes_errors(record) == []
    assert records.read_record(record, key) is not None
    k8s = policies.build_policy(gang=g, namespace=NS, mode=PolicyMode.KUBERNETES, **where)
    assert k8s is not None and kubernetes_errors(k8s) == []
    assert (
        policies.policy_zone(k8s)
        == policies.policy_zone(policy)
        == (zone if scope is PolicyScope.ZONE else None)
    )

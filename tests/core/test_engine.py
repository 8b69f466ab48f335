"""The pure decision: guards, each zone branch (a)–(e), the mutation and the objects it asks for."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.builders import PIN, NodeBuilder, PodBuilder, namespace, pinning
from tests.scenarios import NS, base_cluster, pytorch_pod, pytorchjob
from webhook.core import adapters, engine, labels, policies, records, reviews
from webhook.core.settings import NoFit, OldCilium, Placement, PolicyMode, PolicyScope, Settings
from webhook.core.view import ClusterView

SETTINGS = PIN


def request_for(pod: dict[str, Any], **overrides: Any) -> reviews.Request:
    doc = reviews.review_for_pod(pod)
    doc["request"]["namespace"] = pod["metadata"]["namespace"]
    doc["request"].update(overrides)
    return reviews.from_document(doc)


def decide(
    pod: dict[str, Any],
    objects: list[dict[str, Any]],
    now: datetime,
    settings: Settings = SETTINGS,
    **overrides: Any,
) -> engine.Decision:
    view = ClusterView.from_objects(objects, zone_label=settings.zone_label, kept=adapters.KEPT)
    return engine.decide(request_for(pod, **overrides), view, settings, now=now)


def zone_terms(pod: Any) -> list[Any]:
    return pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]


def zone_expr(zone: str) -> dict[str, Any]:
    return {"key": labels.ZONE_LABEL, "operator": "In", "values": [zone]}


# -- guards ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"operation": "UPDATE"}, "not-a-pod-creation"),
        ({"operation": "DELETE"}, "not-a-pod-creation"),
        ({"subResource": "binding"}, "not-a-pod-creation"),
        ({"kind": {"group": "", "version": "v1", "kind": "ConfigMap"}}, "not-a-pod-creation"),
        ({"namespace": "kube-system"}, "excluded-namespace"),
        ({"namespace": "podium-system"}, "excluded-namespace"),
        ({"namespace": "sandbox"}, "namespace-not-enabled"),
        ({"namespace": "unknown-ns"}, "namespace-not-enabled"),
    ],
)
def test_guards_leave_pod_alone(overrides: dict[str, Any], reason: str, now: datetime) -> None:
    pj = pytorchjob()
    decision = decide(pytorch_pod(pj).obj(), base_cluster(pj), now, **overrides)
    assert (decision.outcome, decision.reason, decision.patch, decision.to_create) == (
        "skipped",
        reason,
        [],
        (),
    )


@pytest.mark.parametrize(
    ("annotation", "reason"),
    [(labels.MIRROR_POD, "mirror-pod"), (labels.SKIP, "skip-annotation")],
)
def test_pod_annotations_skip(annotation: str, reason: str, now: datetime) -> None:
    pj = pytorchjob()
    pod = pytorch_pod(pj).annotate(annotation, "true").obj()
    decision = decide(pod, base_cluster(pj), now)
    assert (decision.outcome, decision.reason, decision.patch) == ("skipped", reason, [])


def test_job_skip_annotation(now: datetime) -> None:
    pj = pytorchjob(skip=True)
    decision = decide(pytorch_pod(pj).obj(), base_cluster(pj), now)
    assert (decision.outcome, decision.reason, decision.patch) == (
        "skipped",
        "job-skip-annotation",
        [],
    )


def test_non_training_pod_is_untouched(now: datetime) -> None:
    pod = PodBuilder(NS, generate_name="web-").obj()
    decision = decide(pod, base_cluster(), now)
    assert (decision.outcome, decision.reason, decision.patch) == (
        "skipped",
        "not-a-training-pod",
        [],
    )


def test_non_training_pod_loses_a_forged_job_label(now: datetime) -> None:
    pod = PodBuilder(NS, generate_name="web-").label(labels.JOB, "someone-elses-job").obj()
    decision = decide(pod, base_cluster(), now)
    assert decision.patch == [{"op": "remove", "path": "/metadata/labels/podium.dev~1job"}]
    assert decision.warnings


# -- (a) recorded ----------------------------------------------------------------------------


def test_a_recorded_zone_wins_over_capacity(now: datetime) -> None:
    pj = pytorchjob()
    first = decide(pytorch_pod(pj).obj(), base_cluster(pj), now)
    assert first.zone == "zone-c" and first.record is not None
    # Capacity changed meanwhile: zone-c is now full. The record still decides.
    busy = [PodBuilder("other", name=f"hog-{i}").gpus(8).bound(f"c-{i}").obj() for i in range(8)]
    later = decide(
        pytorch_pod(pj, "worker", 2).obj(), [*base_cluster(pj), *busy, first.record], now
    )
    assert (later.zone, later.reason) == ("zone-c", "recorded")
    assert later.record is None  # it exists already


def test_a_record_of_another_gang_is_ignored(now: datetime) -> None:
    pj = pytorchjob()
    first = decide(pytorch_pod(pj).obj(), base_cluster(pj), now)
    assert first.record is not None
    forged = {**first.record, "data": {**first.record["data"], "gang": "other", "zone": "zone-a"}}
    decision = decide(pytorch_pod(pj).obj(), [*base_cluster(pj), forged], now)
    assert decision.reason == "best-fit"


# -- (b) placed members ----------------------------------------------------------------------


def test_b_coordinator_zone_wins(now: datetime) -> None:
    pj = pytorchjob()
    master = pytorch_pod(pj, "master").bound("b-1").obj()
    worker = pytorch_pod(pj, "worker", 1).bound("c-1").obj()
    decision = decide(pytorch_pod(pj, "worker", 2).obj(), base_cluster(pj, master, worker), now)
    assert (decision.zone, decision.reason) == ("zone-b", "coordinator-placed")
    assert decision.warnings == (
        "pods of this job already run in several zones (zone-b: 1, zone-c: 1)",
    )


def test_b_members_zone_without_coordinator(now: datetime) -> None:
    pj = pytorchjob()
    w1 = pytorch_pod(pj, "worker", 1).bound("a-1").obj()
    decision = decide(pytorch_pod(pj, "master").obj(), base_cluster(pj, w1), now)
    assert (decision.zone, decision.reason) == ("zone-a", "members-placed")


def test_b_ignores_pods_of_an_older_job_with_the_same_name(now: datetime) -> None:
    old = pytorchjob()
    new = pytorchjob()  # same name, new UID
    stale = pytorch_pod(old, "master").bound("a-1").obj()
    decision = decide(pytorch_pod(new).obj(), base_cluster(new, stale), now)
    assert decision.reason == "best-fit"


def test_b_ignores_finished_members(now: datetime) -> None:
    pj = pytorchjob()
    done = pytorch_pod(pj, "master").bound("a-1", phase="Succeeded").obj()
    decision = decide(pytorch_pod(pj).obj(), base_cluster(pj, done), now)
    assert decision.reason == "best-fit"


# -- (c) the pod's own constraint ------------------------------------------------------------


@pytest.mark.parametrize(
    "constrain",
    [
        lambda b: b.node_selector(labels.ZONE_LABEL, "zone-a"),
        lambda b: b.affinity_terms({"matchExpressions": [zone_expr("zone-a")]}),
    ],
    ids=["nodeSelector", "affinity"],
)
def test_c_single_zone_constraint_is_adopted(constrain: Any, now: datetime) -> None:
    pj = pytorchjob()
    decision = decide(constrain(pytorch_pod(pj)).obj(), base_cluster(pj), now)
    assert (decision.zone, decision.reason) == ("zone-a", "pod-constraint")


def test_c_multi_zone_constraint_narrows_capacity_choice(now: datetime) -> None:
    pj = pytorchjob(workers=0)  # 8 GPUs fit anywhere
    pod = pytorch_pod(pj).affinity_terms(
        {
            "matchExpressions": [
                {"key": labels.ZONE_LABEL, "operator": "In", "values": ["zone-b", "zone-c"]}
            ]
        }
    )
    decision = decide(pod.obj(), base_cluster(pj), now)
    assert (decision.zone, decision.reason) == ("zone-b", "best-fit")


# -- (d) capacity ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("workers", "placement", "zone"),
    [
        (0, Placement.BEST_FIT, "zone-a"),  # 8 GPUs: tightest is the 8-GPU zone
        (1, Placement.BEST_FIT, "zone-b"),  # 16
        (3, Placement.BEST_FIT, "zone-c"),  # 32: only the 64-GPU zone
        (0, Placement.MOST_FREE, "zone-c"),
    ],
)
def test_d_whole_gang_fits(workers: int, placement: Placement, zone: str, now: datetime) -> None:
    pj = pytorchjob(workers=workers)
    settings = dataclasses.replace(SETTINGS, placement=placement)
    decision = decide(pytorch_pod(pj).obj(), base_cluster(pj), now, settings)
    assert (decision.zone, decision.reason) == (zone, str(placement))
    assert [c.fits for c in decision.capacity] == [workers == 0, workers <= 1, True]


def test_d_ties_break_by_zone_name(now: datetime) -> None:
    pj = pytorchjob(workers=0)
    cluster = [
        namespace(NS),
        pj,
        NodeBuilder("y-1").zone("zone-y").obj(),
        NodeBuilder("x-1").zone("zone-x").obj(),
    ]
    assert decide(pytorch_pod(pj).obj(), cluster, now).zone == "zone-x"


def test_d_counts_only_nodes_the_pod_may_use(now: datetime) -> None:
    pj = pytorchjob(workers=1)  # 16 GPUs
    cluster = [
        namespace(NS),
        pj,
        NodeBuilder("a-1").zone("zone-a").obj(),
        NodeBuilder("a-2").zone("zone-a").unschedulable().obj(),
        NodeBuilder("b-1").zone("zone-b").obj(),
        NodeBuilder("b-2").zone("zone-b").not_ready().obj(),
        NodeBuilder("c-1").zone("zone-c").obj(),
        NodeBuilder("c-2").zone("zone-c").taint("gpu").obj(),
        NodeBuilder("d-1").zone("zone-d").obj(),
        NodeBuilder("d-2").zone("zone-d").label("pool", "other").obj(),
        NodeBuilder("e-1").zone("zone-e").obj(),
        NodeBuilder("e-2").zone("zone-e").taint("gpu").obj(),
    ]
    pod = pytorch_pod(pj).spec(tolerations=[{"key": "gpu", "operator": "Exists"}])
    pod.affinity_terms(
        {"matchExpressions": [{"key": "pool", "operator": "NotIn", "values": ["other"]}]}
    )
    decision = decide(pod.obj(), cluster, now)
    fits = {c.zone: c.fits for c in decision.capacity}
    assert fits == {
        "zone-a": False,
        "zone-b": False,
        "zone-c": True,
        "zone-d": False,
        "zone-e": True,
    }
    assert decision.zone == "zone-c"


def test_d_subtracts_running_pods_and_packs_per_node(now: datetime) -> None:
    pj = pytorchjob(workers=1)  # two 8-GPU pods
    # zone-b has 16 GPUs free in total but only as 4+4+4+4: no node holds an 8-GPU pod.
    cluster = [
        namespace(NS),
        pj,
        *[NodeBuilder(f"b-{i}").zone("zone-b").obj() for i in range(4)],
        NodeBuilder("c-1").zone("zone-c").gpus(16).obj(),
    ]
    hogs = [PodBuilder("other", name=f"h{i}").gpus(4).bound(f"b-{i}").obj() for i in range(4)]
    done = PodBuilder("other", name="done").gpus(16).bound("c-1", phase="Succeeded").obj()
    decision = decide(pytorch_pod(pj).obj(), [*cluster, *hogs, done], now)
    assert [(c.zone, c.free["nvidia.com/gpu"], c.fits) for c in decision.capacity] == [
        ("zone-b", 16, False),
        ("zone-c", 16, True),
    ]


def test_d_reservations_of_recent_decisions_count_as_taken(now: datetime) -> None:
    first_job, second_job = pytorchjob("first", workers=1), pytorchjob("second", workers=1)
    first = decide(pytorch_pod(first_job).obj(), base_cluster(first_job, second_job), now)
    assert first.zone == "zone-b" and first.record is not None
    # The first job's pods are not bound yet: its 16 GPUs in zone-b are reserved.
    second = decide(
        pytorch_pod(second_job).obj(), base_cluster(first_job, second_job, first.record), now
    )
    assert second.zone == "zone-c"
    # Long after, an unbound old decision no longer reserves anything.
    later = now + timedelta(seconds=SETTINGS.reservation_seconds + 1)
    third = decide(
        pytorch_pod(second_job).obj(), base_cluster(first_job, second_job, first.record), later
    )
    assert third.zone == "zone-b"


def test_d_a_finished_jobs_zone_is_free_again_at_once(now: datetime) -> None:
    """The reported case: a job decided into zone-b ran and finished well within the reservation
    window; a job of the same size fits zone-b again, best, and must get it."""
    first_job, second_job = pytorchjob("first", workers=1), pytorchjob("second", workers=1)
    first = decide(pytorch_pod(first_job).obj(), base_cluster(first_job, second_job), now)
    assert first.zone == "zone-b" and first.record is not None
    gang = first.record["data"]["gang"]

    def first_pods(phase: str) -> list[dict[str, Any]]:
        return [
            pytorch_pod(first_job, rtype).label(labels.JOB, gang).bound(node, phase=phase).obj()
            for rtype, node in (("master", "b-1"), ("worker", "b-2"))
        ]

    cluster = base_cluster(first_job, second_job, first.record)
    running = decide(pytorch_pod(second_job).obj(), [*cluster, *first_pods("Running")], now)
    assert running.zone == "zone-c"
    done = decide(pytorch_pod(second_job).obj(), [*cluster, *first_pods("Succeeded")], now)
    assert (done.zone, done.reason) == ("zone-b", "best-fit")


def test_d_demand_falls_back_to_world_size(now: datetime) -> None:
    pj = pytorchjob(workers=3)
    pod = pytorch_pod(pj).env("WORLD_SIZE", "4").obj()
    decision = decide(pod, base_cluster(), now)  # the job object is not in the view
    assert decision.gang is not None and decision.gang.demand_source == "env"
    assert decision.zone == "zone-c"


# -- (e) no zone fits ------------------------------------------------------------------------


def test_e_no_fit_pins_to_most_free_and_warns(now: datetime) -> None:
    pj = pytorchjob(workers=15)  # 128 GPUs
    decision = decide(pytorch_pod(pj).obj(), base_cluster(pj), now)
    assert (decision.outcome, decision.zone, decision.reason) == (
        "pinned",
        "zone-c",
        "no-fit-most-free",
    )
    assert (
        "no zone has room for the whole job (128 nvidia.com/gpu for 16 pod(s))"
        in decision.warnings[0]
    )


def test_e_no_fit_unpinned_when_configured(now: datetime) -> None:
    pj = pytorchjob(workers=15)
    settings = dataclasses.replace(SETTINGS, no_fit=NoFit.UNPINNED)
    decision = decide(pytorch_pod(pj).obj(), base_cluster(pj), now, settings)
    assert (decision.outcome, decision.zone, decision.reason) == (
        "unpinned",
        None,
        "no-fit-unpinned",
    )
    after = decision.patched
    assert after is not None and "affinity" not in after["spec"]
    assert after["metadata"]["labels"][labels.JOB] == pj["metadata"]["uid"]  # still in its policy


def test_no_usable_zone_at_all(now: datetime) -> None:
    pj = pytorchjob()
    decision = decide(pytorch_pod(pj).obj(), [namespace(NS), pj, NodeBuilder("n").obj()], now)
    assert (decision.outcome, decision.reason) == ("unpinned", "no-zones")


# -- the mutation and objects ----------------------------------------------------------------


def test_pinned_pod_whole(now: datetime) -> None:
    pj = pytorchjob()
    pod = pytorch_pod(pj, "master").label(labels.JOB, "forged").obj()
    decision = decide(pod, base_cluster(pj), now)
    name = labels.object_name("PyTorchJob", "llama", pj["metadata"]["uid"])
    expected = {
        **pod,
        "metadata": {
            **pod["metadata"],
            "labels": {
                **pod["metadata"]["labels"],
                labels.JOB: pj["metadata"]["uid"],
                labels.ZONE: "zone-c",
            },
            "annotations": {labels.ZONE: "zone-c", labels.REASON: "best-fit", labels.POLICY: name},
        },
        "spec": {
            **pod["spec"],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [zone_expr("zone-c")]}]
                    }
                }
            },
        },
    }
    assert decision.patched == expected
    assert [m["kind"] for m in decision.to_create] == ["ConfigMap", "CiliumNetworkPolicy"]
    assert decision.audit_annotations() == {
        "outcome": "pinned",
        "reason": "best-fit",
        "zone": "zone-c",
        "job": "PyTorchJob/llama",
        "policy": name,
    }


def test_zone_is_added_to_every_term(now: datetime) -> None:
    pj = pytorchjob(workers=0)
    pod = pytorch_pod(pj).affinity_terms(
        {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a-1"]}]},
    )
    cluster = [namespace(NS), pj, NodeBuilder("a-1").zone("zone-a").label("gpu", "a100").obj()]
    decision = decide(pod.obj(), cluster, now)
    assert decision.patched is not None
    assert zone_terms(decision.patched) == [
        {
            "matchExpressions": [
                {"key": "gpu", "operator": "In", "values": ["a100"]},
                zone_expr("zone-a"),
            ]
        },
        {
            "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a-1"]}],
            "matchExpressions": [zone_expr("zone-a")],
        },
    ]


def test_reinvocation_yields_an_empty_patch(now: datetime) -> None:
    pj = pytorchjob()
    first = decide(pytorch_pod(pj).obj(), base_cluster(pj), now)
    assert first.patched is not None and first.record is not None
    again = decide(first.patched, [*base_cluster(pj), first.record], now)
    assert again.patch == []


@pytest.mark.parametrize(
    ("mode", "kind"),
    [
        (PolicyMode.CILIUM, "CiliumNetworkPolicy"),
        (PolicyMode.KUBERNETES, "NetworkPolicy"),
        (PolicyMode.NONE, None),
    ],
)
def test_policy_mode(mode: PolicyMode, kind: str | None, now: datetime) -> None:
    pj = pytorchjob()
    decision = decide(pytorch_pod(pj).obj(), base_cluster(pj), now, pinning(policy_mode=mode))
    assert (decision.policy or {}).get("kind") == kind
    assert decision.patched is not None
    assert (labels.POLICY in decision.patched["metadata"]["annotations"]) == (kind is not None)


def test_existing_policy_is_not_asked_for_again(now: datetime) -> None:
    pj = pytorchjob()
    first = decide(pytorch_pod(pj).obj(), base_cluster(pj), now)
    assert first.policy is not None and first.record is not None
    again = decide(
        pytorch_pod(pj, "worker", 1).obj(), [*base_cluster(pj), first.record, first.policy], now
    )
    assert again.to_create == ()


def test_host_network_pods_get_a_warning(now: datetime) -> None:
    pj = pytorchjob()
    decision = decide(pytorch_pod(pj).host_network().obj(), base_cluster(pj), now)
    assert engine.HOST_NETWORK_WARNING in decision.warnings
    assert decision.outcome == "pinned"


def test_record_carries_the_decision(now: datetime) -> None:
    pj = pytorchjob()
    decision = decide(pytorch_pod(pj).obj(), base_cluster(pj), now)
    record = records.read_record(decision.record, pj["metadata"]["uid"])
    assert record == records.Record(
        zone="zone-c",
        reason="best-fit",
        gang=pj["metadata"]["uid"],
        decided_at="2026-11-29T12:00:00+00:00",
        demand={"nvidia.com/gpu": 32, "pods": 4},
    )
    assert decision.record is not None
    assert decision.record["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "name": "llama",
            "uid": pj["metadata"]["uid"],
            "controller": False,
            "blockOwnerDeletion": False,
        }
    ]


# -- the policy: scoped to job and zone, withheld on an old Cilium (issue 13) ----------------


def cnp_crd(*, default_deny: bool) -> dict[str, Any]:
    """The ciliumnetworkpolicies CRD as podium keeps it (``policies.slim_crd``): with
    ``spec.enableDefaultDeny`` (Cilium ≥ 1.16) or without (older)."""
    spec = {"properties": {"enableDefaultDeny": {"type": "object"}}} if default_deny else {}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "ciliumnetworkpolicies.cilium.io"},
        "spec": {
            "group": "cilium.io",
            "versions": [
                {"name": "v2", "schema": {"openAPIV3Schema": {"properties": {"spec": spec}}}}
            ],
        },
    }


@pytest.mark.parametrize("mode", [PolicyMode.CILIUM, PolicyMode.KUBERNETES])
def test_the_policy_is_scoped_to_the_job_and_its_zone(mode: PolicyMode, now: datetime) -> None:
    pj = pytorchjob()
    decision = decide(pytorch_pod(pj).obj(), base_cluster(pj), now, pinning(policy_mode=mode))
    policy, uid = decision.policy, pj["metadata"]["uid"]
    assert policy is not None and decision.patched is not None
    peers = {"matchLabels": {labels.JOB: uid, labels.ZONE: "zone-c"}}
    spec = policy["spec"]
    if mode is PolicyMode.CILIUM:
        assert (spec["endpointSelector"], spec["ingress"], spec["egress"]) == (
            peers,
            [{"fromEndpoints": [peers]}],
            [{"toEndpoints": [peers]}],
        )
    else:
        assert (spec["podSelector"], spec["ingress"], spec["egress"]) == (
            peers,
            [{"from": [{"podSelector": peers}]}],
            [{"to": [{"podSelector": peers}]}],
        )
    # The record's zone: the policy is named like the record, and the pod carries what it selects.
    assert policy["metadata"]["name"] == decision.policy_name == decision.record["metadata"]["name"]  # type: ignore[index]
    assert peers["matchLabels"].items() <= decision.patched["metadata"]["labels"].items()


def test_job_scope_keeps_one_policy_for_the_whole_job(now: datetime) -> None:
    pj = pytorchjob()
    settings = pinning(policy_scope=PolicyScope.JOB)
    decision = decide(pytorch_pod(pj).obj(), base_cluster(pj), now, settings)
    assert decision.policy is not None
    assert decision.policy["spec"]["endpointSelector"] == {
        "matchLabels": {labels.JOB: pj["metadata"]["uid"]}
    }


@pytest.mark.parametrize("scope", list(PolicyScope))
def test_an_unpinned_pod_is_in_no_zone_scoped_policy(scope: PolicyScope, now: datetime) -> None:
    """No zone yet: nothing to scope a policy to. The reconciler labels the pod with its node's
    zone once it is bound, and creates that zone's policy."""
    pj = pytorchjob(workers=15)
    settings = pinning(no_fit=NoFit.UNPINNED, policy_scope=scope)
    decision = decide(
        pytorch_pod(pj).label(labels.ZONE, "zone-a").obj(), base_cluster(pj), now, settings
    )
    assert decision.outcome == "unpinned" and decision.patched is not None
    assert labels.ZONE not in decision.patched["metadata"]["labels"]  # podium's word only
    assert (decision.policy is not None) == (scope is PolicyScope.JOB)
    assert (labels.POLICY in decision.patched["metadata"]["annotations"]) == (
        scope is PolicyScope.JOB
    )


@pytest.mark.parametrize(
    ("crd", "old_cilium", "written"),
    [
        (None, OldCilium.SKIP_POLICY, True),  # not seen (yet): the create tells
        (cnp_crd(default_deny=True), OldCilium.SKIP_POLICY, True),
        (cnp_crd(default_deny=False), OldCilium.SKIP_POLICY, False),
        (cnp_crd(default_deny=False), OldCilium.CREATE_POLICY, True),
    ],
)
def test_no_cilium_policy_where_the_crd_has_no_enable_default_deny(
    crd: dict[str, Any] | None, old_cilium: OldCilium, written: bool, now: datetime
) -> None:
    pj = pytorchjob()
    settings = pinning(old_cilium=old_cilium)
    objects = base_cluster(pj, *([crd] if crd else []))
    decision = decide(pytorch_pod(pj).obj(), objects, now, settings)
    assert decision.outcome == "pinned" and decision.record is not None
    assert (decision.policy is not None) == written
    assert (policies.OLD_CILIUM_WARNING in decision.warnings) == (not written)
    # kubernetes mode does not depend on Cilium's CRD
    k8s = decide(
        pytorch_pod(pj).obj(),
        objects,
        now,
        dataclasses.replace(settings, policy_mode=PolicyMode.KUBERNETES),
    )
    assert k8s.policy is not None

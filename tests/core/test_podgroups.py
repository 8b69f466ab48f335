"""kube-scheduler's gang placement (webhook/core/podgroups.py) and the engine in scheduler mode:
the PodGroup manifest, the pod's ``spec.schedulingGroup`` patch, which gangs stay with podium,
and the gang's first decision winning over the setting."""

from __future__ import annotations

import copy
from datetime import datetime
from typing import Any

import jsonpatch
import pytest

from tests.builders import PIN, JobBuilder, PodBuilder, template
from tests.scenarios import NS, base_cluster, pytorch_pod, pytorchjob
from webhook.core import adapters, engine, labels, podgroups, records, reviews
from webhook.core.adapters.base import Gang, OwnerRef, PodGroup
from webhook.core.settings import Settings, ZoneChooser
from webhook.core.view import ClusterView

SCHEDULER = Settings(zone_chooser=ZoneChooser.SCHEDULER)
AUTO = Settings(zone_chooser=ZoneChooser.AUTO)


def gang(
    source: str = "job", framework: str = "pytorchjob", counts: tuple[int, ...] = (1, 3)
) -> Gang:
    return Gang(
        framework=framework,
        owner=OwnerRef("kubeflow.org/v1", "PyTorchJob", "llama", "uid-1"),
        key="uid-1",
        role="worker",
        coordinator=False,
        demand=tuple(PodGroup(n, {"nvidia.com/gpu": 8}) for n in counts),
        demand_source=source,  # type: ignore[arg-type]
        member_labels={},
    )


def decide(
    pod: dict[str, Any],
    objects: list[dict[str, Any]],
    now: datetime,
    settings: Settings = SCHEDULER,
    *,
    scheduler: bool = False,
    recorded: records.Record | None = None,
) -> engine.Decision:
    view = ClusterView.from_objects(objects, zone_label=settings.zone_label, kept=adapters.KEPT)
    request = reviews.from_document(reviews.review_for_pod(pod))
    return engine.decide(request, view, settings, now=now, scheduler=scheduler, recorded=recorded)


# -- the manifest and the patch ------------------------------------------------------------------


def test_the_podgroup_gangs_every_pod_in_one_zone_and_is_owned_by_the_job() -> None:
    manifest = podgroups.build_podgroup(
        gang=gang(), namespace=NS, zone_label="topology.kubernetes.io/zone"
    )
    assert manifest["apiVersion"] == "scheduling.k8s.io/v1beta1" and manifest["kind"] == "PodGroup"
    assert manifest["spec"] == {
        "schedulingPolicy": {"gang": {"minCount": 4}},
        "schedulingConstraints": {"topology": [{"key": "topology.kubernetes.io/zone"}]},
    }
    meta = manifest["metadata"]
    assert meta["name"] == labels.object_name("PyTorchJob", "llama", "uid-1")
    assert meta["namespace"] == NS
    assert meta["labels"][labels.MANAGED_BY] == labels.MANAGER
    assert meta["labels"][labels.JOB] == "uid-1"
    assert meta["ownerReferences"] == [gang().owner.as_owner_reference()]


@pytest.mark.parametrize(
    "pod",
    [
        {"metadata": {"name": "p"}, "spec": {"containers": []}},
        {"metadata": {"name": "p"}},
        {"metadata": {"name": "p"}, "spec": {"schedulingGroup": {"podGroupName": "theirs"}}},
    ],
)
def test_join_names_the_podgroup_and_its_patch_gives_that_pod(pod: dict[str, Any]) -> None:
    before = copy.deepcopy(pod)
    after, patch = podgroups.join(pod, "pg")
    assert pod == before  # not changed in place
    assert after["spec"]["schedulingGroup"] == {"podGroupName": "pg"}
    assert jsonpatch.apply_patch(pod, patch) == after
    assert podgroups.join(after, "pg") == (after, [])  # reinvoked: nothing to do


def test_keeps_topology_reads_what_the_apiserver_returned() -> None:
    probe = podgroups.probe("podium-system", "topology.kubernetes.io/zone")
    assert podgroups.keeps_topology(probe)
    dropped = {**probe, "spec": {"schedulingPolicy": {"gang": {"minCount": 1}}}}
    assert not podgroups.keeps_topology(dropped)


# -- which gangs the scheduler may hold ----------------------------------------------------------


def job(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"uid": "uid-1"},
        "spec": spec,
    }


@pytest.mark.parametrize(
    ("the_gang", "pod", "the_job", "why"),
    [
        (gang(), {}, job(), None),
        (gang(), {}, None, None),
        (gang(source="env"), {}, job(), "guessed from the env"),
        (gang(source="pod"), {}, job(), "guessed from the pod"),
        (gang(), {"spec": {"schedulerName": "volcano"}}, job(), "scheduled by volcano"),
        (gang(), {"spec": {"schedulingGroup": {"podGroupName": "x"}}}, job(), "already names"),
        (gang(), {}, job(elasticPolicy={"minReplicas": 1, "maxReplicas": 4}), "elastic"),
        (gang(), {}, job(elasticPolicy={"minReplicas": 4, "maxReplicas": 4}), None),
        (
            gang(framework="mpijob"),
            {},
            job(launcherCreationPolicy="WaitForWorkersReady"),
            "launcher",
        ),
        (
            gang(framework="jobset"),
            {},
            job(startupPolicy={"startupPolicyOrder": "InOrder"}),
            "in order",
        ),
        (
            gang(framework="leaderworkerset"),
            {},
            job(startupPolicy="LeaderReady"),
            "leader is ready",
        ),
        (gang(framework="leaderworkerset"), {}, job(startupPolicy="LeaderCreated"), None),
        (gang(framework="raycluster"), {}, job(enableInTreeAutoscaling=True), "autoscales"),
        (gang(framework="volcanojob"), {}, job(), "Volcano"),
    ],
)
def test_unfit(
    the_gang: Gang, pod: dict[str, Any], the_job: dict[str, Any] | None, why: str | None
) -> None:
    got = podgroups.unfit(the_gang, pod, the_job)
    assert (got is None) if why is None else (got is not None and why in got)


# -- the engine in scheduler mode --------------------------------------------------------------


def test_scheduler_mode_names_the_podgroup_and_pins_nothing(now: datetime) -> None:
    pj = pytorchjob(workers=3)
    pod = pytorch_pod(pj, "worker", 1).obj()
    decision = decide(pod, base_cluster(pj), now)
    name = labels.object_name("PyTorchJob", "llama", pj["metadata"]["uid"])
    assert decision.outcome == "grouped" and decision.reason == podgroups.REASON
    assert decision.zone is None
    assert decision.patched is not None
    spec = decision.patched["spec"]
    assert spec["schedulingGroup"] == {"podGroupName": name}
    assert "affinity" not in spec
    assert not any("affinity" in op["path"] for op in decision.patch)
    assert jsonpatch.apply_patch(pod, decision.patch) == decision.patched
    meta = decision.patched["metadata"]
    assert meta["labels"][labels.JOB] == pj["metadata"]["uid"]
    assert meta["annotations"][labels.REASON] == podgroups.REASON
    # The record first (kube-scheduler chooses, no zone yet), then the PodGroup, then the policy.
    assert [m["kind"] for m in decision.to_create] == [
        "ConfigMap",
        "PodGroup",
        "CiliumNetworkPolicy",
    ]
    assert decision.record is not None and decision.podgroup is not None
    assert decision.record["data"]["zoneChooser"] == "scheduler"
    assert decision.record["data"]["zone"] == ""
    assert decision.podgroup["spec"]["schedulingPolicy"]["gang"]["minCount"] == 4
    assert decision.policy is not None and decision.policy["kind"] == "CiliumNetworkPolicy"
    parsed = records.parse_record(decision.record)
    assert parsed is not None and parsed.chooser == "scheduler"


def test_reinvoked_on_a_grouped_pod_the_patch_is_empty(now: datetime) -> None:
    pj = pytorchjob()
    first = decide(pytorch_pod(pj).obj(), base_cluster(pj), now)
    assert first.patched is not None and first.record is not None
    record = records.parse_record(first.record)
    again = decide(first.patched, base_cluster(pj), now, recorded=record)
    assert again.outcome == "grouped" and again.patch == []
    assert [m["kind"] for m in again.to_create] == ["PodGroup", "CiliumNetworkPolicy"]


def test_auto_without_the_schedulers_support_holds(now: datetime) -> None:
    pj = pytorchjob()
    assert decide(pytorch_pod(pj).obj(), base_cluster(pj), now, AUTO).outcome == "held"
    grouped = decide(pytorch_pod(pj).obj(), base_cluster(pj), now, AUTO, scheduler=True)
    assert grouped.outcome == "grouped"


def test_the_gangs_record_wins_over_the_setting(now: datetime) -> None:
    pj = pytorchjob()
    pod = pytorch_pod(pj).obj()
    pinned = decide(pod, base_cluster(pj), now, PIN)
    assert pinned.record is not None
    podium_record = records.parse_record(pinned.record)
    followed = decide(pod, base_cluster(pj), now, SCHEDULER, recorded=podium_record)
    assert followed.outcome == "pinned" and followed.zone == pinned.zone
    grouped = decide(pod, base_cluster(pj), now, SCHEDULER)
    assert grouped.record is not None
    scheduler_record = records.parse_record(grouped.record)
    assert decide(pod, base_cluster(pj), now, PIN, recorded=scheduler_record).outcome == "grouped"


def test_a_gang_whose_size_is_guessed_stays_with_podium(now: datetime) -> None:
    # No PyTorchJob in the view: the size comes from WORLD_SIZE, a guess.
    pj = pytorchjob()
    pod = pytorch_pod(pj).env("WORLD_SIZE", "4").obj()
    decision = decide(pod, base_cluster(), now)
    assert decision.outcome == "pinned" and decision.podgroup is None
    assert "podium chose the zone, not kube-scheduler" in decision.detail
    assert "schedulingGroup" not in (decision.patched or {}).get("spec", {})


def test_an_elastic_job_stays_with_podium(now: datetime) -> None:
    elastic = (
        JobBuilder("kubeflow.org/v1", "PyTorchJob", "elastic", NS)
        .spec(
            elasticPolicy={"minReplicas": 2, "maxReplicas": 4},
            pytorchReplicaSpecs={"Worker": {"replicas": 2, "template": template(8)}},
        )
        .obj()
    )
    pod = pytorch_pod(elastic).obj()
    decision = decide(pod, base_cluster(elastic), now)
    assert decision.outcome == "pinned" and "elastic" in decision.detail


def test_update_leaves_the_scheduling_group_alone(now: datetime) -> None:
    pj = pytorchjob()
    pod = PodBuilder(NS, name="p").obj()
    decision = decide(pod, base_cluster(pj), now)
    assert decision.outcome == "skipped"  # not a training pod: nothing at all
    grouped = decide(pytorch_pod(pj).obj(), base_cluster(pj), now)
    assert grouped.patched is not None
    view = ClusterView.from_objects(
        base_cluster(pj), zone_label=SCHEDULER.zone_label, kept=adapters.KEPT
    )
    doc = reviews.review_for_pod(grouped.patched)
    doc["request"]["operation"] = "UPDATE"
    doc["request"]["oldObject"] = grouped.patched
    update = engine.decide(reviews.from_document(doc), view, SCHEDULER, now=now)
    assert update.patch == [] and update.to_create == ()

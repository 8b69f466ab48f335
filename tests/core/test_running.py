"""Gangs that already run (``core.running``): a gang with members bound to a node that podium
never held — created before the namespace opted in, while podium was down, placed by someone
else — is never held for pods that will never be gated. At admission its new pods are pinned to
the running members' zone, ungated; in the releaser, its held pods are released into it at once;
a gang split across zones is reported and never spread further."""

from __future__ import annotations

import copy
import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.builders import PodBuilder
from tests.core.test_engine import decide
from tests.core.test_release import cluster, held_job, plan
from tests.scenarios import base_cluster, pytorch_pod, pytorchjob
from webhook.core import adapters, engine, labels, mutation, reconcile, reviews, running
from webhook.core.settings import PolicyMode, PolicyScope, Settings, ZoneChooser
from webhook.core.view import ClusterView

HOLD = Settings(zone_chooser=ZoneChooser.HOLD, own_user="podium")


def view_of(objects: list[dict[str, Any]]) -> ClusterView:
    return ClusterView.from_objects(objects, zone_label=HOLD.zone_label, kept=adapters.KEPT)


# -- admission -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("members", "zone", "reason"),
    [
        ([("master", 0, "b-1")], "zone-b", "coordinator-placed"),
        ([("worker", 1, "a-1")], "zone-a", "members-placed"),
        (
            [("worker", 1, "c-1"), ("worker", 2, "c-2"), ("master", 0, None)],
            "zone-c",
            "members-placed",
        ),
        # Running in a zone with no room left for the new pod: followed all the same.
        ([("master", 0, "a-1")], "zone-a", "coordinator-placed"),
    ],
    ids=["master-runs", "a-worker-runs", "workers-run-master-pending", "into-a-full-zone"],
)
def test_a_new_pod_of_a_gang_that_runs_follows_it_ungated(
    members: list[tuple[str, int, str | None]], zone: str, reason: str, now: datetime
) -> None:
    pj = pytorchjob()
    others = []
    for rtype, index, node in members:
        pod = pytorch_pod(pj, rtype, index)
        others.append((pod.bound(node) if node else pod).obj())
    decision = decide(pytorch_pod(pj, "worker", 0).obj(), base_cluster(pj, *others), now, HOLD)
    assert (decision.outcome, decision.zone, decision.reason) == ("pinned", zone, reason)
    assert decision.patched is not None
    assert labels.HOLD_GATE not in str(decision.patched["spec"].get("schedulingGates"))
    assert decision.patched["metadata"]["labels"][labels.ZONE] == zone
    assert decision.warnings == ()
    # The record says the truth: the zone the running members are in, and why.
    assert decision.record is not None
    assert (decision.record["data"]["zone"], decision.record["data"]["reason"]) == (zone, reason)
    assert "without podium's gate" in decision.record["data"]["detail"]
    assert decision.policy is not None and decision.policy_name is not None


def test_pending_or_finished_members_do_not_count(now: datetime) -> None:
    """Only members bound to a node and not finished run: a pending one has no zone yet, a
    finished one commits nothing. The gang is held as before."""
    pj = pytorchjob()
    pending = pytorch_pod(pj, "master").obj()
    done = pytorch_pod(pj, "worker", 1).bound("b-1", phase="Succeeded").obj()
    gone = pytorch_pod(pj, "worker", 2).bound("b-2", phase="Failed").obj()
    decision = decide(pytorch_pod(pj).obj(), base_cluster(pj, pending, done, gone), now, HOLD)
    assert decision.outcome == "held"


def test_pods_of_another_job_or_an_older_job_of_the_same_name_are_not_followed(
    now: datetime,
) -> None:
    pj = pytorchjob()
    older = pytorchjob()  # same name, another UID: a job deleted and created again
    stale = pytorch_pod(older, "master").bound("a-1").obj()
    other = pytorch_pod(pytorchjob("other"), "master").bound("a-1").obj()
    decision = decide(pytorch_pod(pj).obj(), base_cluster(pj, stale, other), now, HOLD)
    assert decision.outcome == "held"


def test_a_split_running_gang_is_reported_and_not_spread_further(now: datetime) -> None:
    pj = pytorchjob()
    master = pytorch_pod(pj, "master").bound("b-1").obj()
    worker = pytorch_pod(pj, "worker", 1).bound("c-1").obj()
    decision = decide(
        pytorch_pod(pj, "worker", 2).obj(), base_cluster(pj, master, worker), now, HOLD
    )
    assert (decision.outcome, decision.zone, decision.reason) == (
        "pinned",
        "zone-b",
        "coordinator-placed",
    )
    assert decision.warnings == (
        "pods of this job already run in several zones (zone-b: 1, zone-c: 1)",
    )
    assert "split across 2 zones and podium adds none" in decision.detail


def test_a_gang_recorded_as_spread_is_not_pinned_by_its_running_pods(now: datetime) -> None:
    """A gang released across zones (``too-big: spread``) has a record with no zone: its pods
    run in several zones on purpose, and a new pod is not pinned into one of them."""
    pj = pytorchjob()
    first = decide(pytorch_pod(pj).obj(), base_cluster(pj), now)
    assert first.record is not None
    spread = {**first.record, "data": {**first.record["data"], "zone": ""}}
    master = pytorch_pod(pj, "master").bound("b-1").obj()
    decision = decide(pytorch_pod(pj).obj(), [*base_cluster(pj, master), spread], now, HOLD)
    assert decision.outcome != "pinned" or decision.zone != "zone-b"
    assert decision.outcome == "held"


def test_a_stale_record_naming_another_zone_holds_and_the_releaser_follows(now: datetime) -> None:
    """A record from an earlier decision names zone-c (no pod released), but the master runs in
    zone-b: admission cannot replace the record, so it holds the pod and the releaser releases it
    into zone-b at once, replacing the record."""
    pj = pytorchjob()
    first = decide(pytorch_pod(pj).obj(), base_cluster(pj), now)
    assert first.record is not None
    stale = {**first.record, "data": {**first.record["data"], "zone": "zone-c"}}
    master = pytorch_pod(pj, "master").bound("b-1").obj()
    objects = [*base_cluster(pj, master), stale]
    decision = decide(pytorch_pod(pj).obj(), objects, now, HOLD)
    assert decision.outcome == "held" and decision.patched is not None
    held = {**decision.patched, "metadata": {**decision.patched["metadata"], "uid": "w0"}}
    p = plan([*objects, held], now)
    (r,) = p.releases
    assert (r.zone, r.reason, r.replace) == ("zone-b", "coordinator-placed", True)
    assert r.record is not None and r.record["data"]["zone"] == "zone-b"


def test_shadow_mode_says_it_would_follow_and_changes_nothing(now: datetime) -> None:
    pj = pytorchjob()
    master = pytorch_pod(pj, "master").bound("b-1").obj()
    objects = base_cluster(pj, master)
    objects[0]["metadata"]["labels"][HOLD.namespace_label] = HOLD.namespace_shadow_value
    decision = decide(pytorch_pod(pj).obj(), objects, now, HOLD)
    assert decision.shadow and decision.patch == [] and decision.to_create == ()
    assert decision.shadow_of is not None
    assert (decision.shadow_of.outcome, decision.shadow_of.zone) == ("pinned", "zone-b")


def test_the_policy_names_the_running_zone_in_either_scope(now: datetime) -> None:
    pj = pytorchjob()
    master = pytorch_pod(pj, "master").bound("b-1").obj()
    for scope in PolicyScope:
        settings = dataclasses.replace(HOLD, policy_scope=scope)
        decision = decide(pytorch_pod(pj).obj(), base_cluster(pj, master), now, settings)
        assert decision.policy is not None
        selector = decision.policy["spec"]["endpointSelector"]["matchLabels"]
        assert selector[labels.JOB] == pj["metadata"]["uid"]
        assert selector.get(labels.ZONE) == ("zone-b" if scope is PolicyScope.ZONE else None)


# -- the releaser ----------------------------------------------------------------------------


def test_a_held_gang_whose_other_pods_run_is_released_into_their_zone_at_once(
    now: datetime,
) -> None:
    """The case of issue 29: the master runs in zone-a (started before the namespace opted in,
    or while podium was down), the worker recreated since is held. Today's rules would say
    ``waiting for its pods: 1 of 4 exist`` for ever."""
    objects = [*cluster(), *held_job("llama", 4, now, present=1)]
    pj = objects[len(cluster())]
    # held_job's one pod is the master: make it the worker, and the master a running pod.
    held = objects[-1]
    held["metadata"]["name"] = "llama-worker-0"
    held["metadata"]["labels"]["training.kubeflow.org/replica-type"] = "worker"
    held["metadata"]["labels"].pop("training.kubeflow.org/job-role", None)
    master = pytorch_pod(pj, "master").bound("a-0").obj()
    workers = [pytorch_pod(pj, "worker", i).bound("a-0").obj() for i in (1, 2)]
    before = plan([*objects], now)
    assert before.releases == () and before.waits[0].why.startswith("waiting for its pods: 1 of")
    p = plan([*objects, master, *workers], now + timedelta(seconds=83))
    assert p.waits == ()
    (r,) = p.releases
    assert (r.zone, r.reason) == ("zone-a", "coordinator-placed")
    assert [ref.name for ref in r.pods] == ["llama-worker-0"]
    assert r.record is not None and r.record["data"]["zone"] == "zone-a"
    assert "released after 83s held" in r.detail and "3 pod(s)" in r.detail
    assert r.policy_name is not None


def test_the_releaser_follows_before_any_fit_and_counts_the_pods_heading_there(
    now: datetime,
) -> None:
    """Following needs no room (the job already runs there); a gang after it in line sees the
    followed pods as heading into the zone."""
    objects = [*cluster(a=1, b=0, c=0), *held_job("llama", 4, now, present=1)]
    pj = objects[len(cluster(a=1, b=0, c=0))]
    master = pytorch_pod(pj, "master").bound("a-0").obj()
    objects[-1]["metadata"]["name"] = "llama-worker-0"
    small = held_job("small", 1, now + timedelta(seconds=1))
    p = plan([*objects, master, *small], now)
    assert [(r.held.gang.owner.name, r.zone) for r in p.releases] == [("llama", "zone-a")]
    assert [w.held.gang.owner.name for w in p.waits] == ["small"]


def test_a_gang_podium_held_whole_is_not_followed(now: datetime) -> None:
    """Nothing runs: the rules of the hold apply unchanged."""
    p = plan([*cluster(), *held_job("llama", 4, now, present=3)], now)
    assert p.releases == ()


# -- placed members through the bound-pod index -----------------------------------------------


def test_placed_members_reads_only_bound_members_of_the_gang(now: datetime) -> None:
    pj = pytorchjob()
    gang_key = pj["metadata"]["uid"]
    master = pytorch_pod(pj, "master").bound("b-1").obj()
    released = pytorch_pod(pj, "worker", 1).label(labels.JOB, gang_key).bound("b-2").obj()
    pending = pytorch_pod(pj, "worker", 2).obj()
    gated = mutation.hold(pytorch_pod(pj, "worker", 0).obj(), gang_key=gang_key).pod
    stranger = PodBuilder(name="x").label(labels.JOB, gang_key).bound("c-1").obj()
    view = view_of(base_cluster(pj, master, released, pending, gated, stranger))
    gang = adapters.recognise(pytorch_pod(pj).obj(), "team-a", view)
    assert gang is not None
    placed = running.placed_members(gang, "team-a", view)
    assert sorted((p.zone, p.coordinator) for p in placed) == [
        ("zone-b", False),
        ("zone-b", True),
    ]


# -- adoption: the policy selects the whole job ------------------------------------------------


def _followed(now: datetime, settings: Settings = HOLD) -> tuple[list[dict[str, Any]], Any]:
    """A PyTorchJob whose master runs in zone-b without podium, and worker-0 admitted since
    (followed into zone-b) and bound there: the objects, with its record and policy."""
    pj = pytorchjob(workers=1)
    master = pytorch_pod(pj, "master").bound("b-1").obj()
    decision = decide(pytorch_pod(pj).uid().obj(), base_cluster(pj, master), now, settings)
    assert decision.outcome == "pinned" and decision.patched is not None
    worker = {**decision.patched, "spec": {**decision.patched["spec"], "nodeName": "b-2"}}
    worker["status"] = {"phase": "Running"}
    assert decision.record is not None
    created = [decision.record, *([decision.policy] if decision.policy else [])]
    return [*base_cluster(pj, master, worker)], (pj, master, created)


def _plan(objects: list[dict[str, Any]], created: list[dict[str, Any]], settings: Settings) -> Any:
    owned = reconcile.Owned(
        decisions=[o for o in created if o["kind"] == "ConfigMap"],
        policies=[o for o in created if o["kind"] != "ConfigMap"],
    )
    return reconcile.plan(
        view_of([*objects, *created]), settings, owned=owned, now=now_(), tuning=reconcile.Tuning()
    )


def now_() -> datetime:
    return datetime(2026, 12, 4, 12, 0, 0, tzinfo=UTC)


def test_the_reconciler_adopts_the_running_members_so_the_policy_selects_the_whole_job(
    now: datetime,
) -> None:
    objects, (pj, master, created) = _followed(now)
    actions = [a for a in _plan(objects, created, HOLD) if a.reason == "adopted-running"]
    (adopt,) = actions
    assert (adopt.verb, adopt.target) == ("label", ("Pod", "team-a", master["metadata"]["name"]))
    assert adopt.patch == {
        "metadata": {
            "uid": master["metadata"]["uid"],
            "labels": {labels.JOB: pj["metadata"]["uid"], labels.ZONE: "zone-b"},
        }
    }
    # The patch, sent by podium's own user, passes the UPDATE guard; by anyone else it does not.
    after = jsonpatch_merge(master, adopt.patch)
    by_podium = _judged(master, after, "podium", objects)
    assert (by_podium.outcome, by_podium.reason) == ("skipped", "own-adoption")
    assert _judged(master, after, "mallory", objects).outcome == "denied"
    # Once labelled, nothing more to adopt, and the zone-b policy selects it.
    adopted = [*[o for o in objects if o is not master], after]
    assert not [a for a in _plan(adopted, created, HOLD) if a.reason == "adopted-running"]
    policy = next(o for o in created if o["kind"] == "CiliumNetworkPolicy")
    selector = policy["spec"]["endpointSelector"]["matchLabels"]
    assert all(after["metadata"]["labels"].get(k) == v for k, v in selector.items())


@pytest.mark.parametrize(
    "change",
    ["kubernetes-mode", "shadow-namespace", "spread-record"],
)
def test_no_adoption_where_it_would_isolate_or_podium_does_not_enforce(
    change: str, now: datetime
) -> None:
    settings = HOLD
    if change == "kubernetes-mode":
        settings = dataclasses.replace(HOLD, policy_mode=PolicyMode.KUBERNETES)
    objects, (_, _, created) = _followed(now, settings)
    if change == "shadow-namespace":
        objects[0]["metadata"]["labels"][HOLD.namespace_label] = HOLD.namespace_shadow_value
    if change == "spread-record":
        record = created[0]
        created[0] = {**record, "data": {**record["data"], "zone": ""}}
    assert not [a for a in _plan(objects, created, settings) if a.reason == "adopted-running"]


@pytest.mark.parametrize(
    ("how", "allowed"),
    [
        ("as-planned", True),
        ("another-gang", False),
        ("another-zone", False),
        ("not-bound", False),
        ("finished", False),
        ("job-label-only", True),
    ],
)
def test_the_guard_lets_podium_adopt_only_its_gangs_running_members(
    how: str, allowed: bool, now: datetime
) -> None:
    objects, (pj, master, _) = _followed(now)
    old = dict(master)
    key = pj["metadata"]["uid"]
    new_labels = {labels.JOB: key, labels.ZONE: "zone-b"}
    if how == "another-gang":
        new_labels[labels.JOB] = "someone-else"
    if how == "another-zone":
        new_labels[labels.ZONE] = "zone-c"
    if how == "not-bound":
        old = {**old, "spec": {k: v for k, v in old["spec"].items() if k != "nodeName"}}
    if how == "finished":
        old = {**old, "status": {"phase": "Succeeded"}}
    if how == "job-label-only":
        del new_labels[labels.ZONE]
    new = jsonpatch_merge(old, {"metadata": {"labels": new_labels}})
    decision = _judged(old, new, "podium", objects)
    assert (decision.outcome != "denied") is allowed, decision.detail


def jsonpatch_merge(obj: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"]["labels"].update(patch["metadata"]["labels"])
    return out


def _judged(
    old: dict[str, Any], new: dict[str, Any], user: str, objects: list[dict[str, Any]] | None = None
) -> engine.Decision:
    doc = reviews.review_for_pod(new)
    doc["request"].update(operation="UPDATE", oldObject=old, userInfo={"username": user})
    doc["request"]["namespace"] = "team-a"
    view = view_of(objects if objects is not None else [*base_cluster(), old])
    return engine.decide(reviews.from_document(doc), view, HOLD, now=now_())

"""``zone-chooser: hold`` at admission: a new gang's pods are held behind podium's gate with no
zone and no effects; pods of a released gang follow its zone; pods another system holds or places
are pinned as today. The UPDATE guard for podium's own release is in test_updates.py."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from tests.builders import PodBuilder
from tests.core.test_engine import decide, request_for
from tests.scenarios import NS, base_cluster, pytorch_pod, pytorchjob
from webhook.core import adapters, audit, engine, labels, policies
from webhook.core.settings import Settings, SettingsError, TooBig, ZoneChooser
from webhook.core.view import ClusterView

HOLD = Settings(zone_chooser=ZoneChooser.HOLD, own_user="podium")


def record_for(pj: dict[str, Any], zone: str, now: datetime) -> dict[str, Any]:
    first = decide(pytorch_pod(pj).obj(), base_cluster(pj), now)
    assert first.record is not None
    return {**first.record, "data": {**first.record["data"], "zone": zone}}


# -- settings --------------------------------------------------------------------------------


def test_settings_of_the_hold() -> None:
    loaded = Settings.from_mapping(
        {"zone-chooser": "hold", "hold-timeout-seconds": 0, "too-big": "spread"}
    )
    assert (loaded.zone_chooser, loaded.hold_timeout_seconds, loaded.too_big) == (
        ZoneChooser.HOLD,
        0.0,
        TooBig.SPREAD,
    )
    assert Settings.from_mapping({"zone-chooser": "podium"}).zone_chooser is ZoneChooser.PIN
    assert (Settings().hold_timeout_seconds, Settings().too_big) == (0.0, TooBig.HOLD)
    for bad in ({"hold-timeout-seconds": -1}, {"too-big": "split"}, {"zone-chooser": "wait"}):
        with pytest.raises(SettingsError):
            Settings.from_mapping(bad)


# -- admission -------------------------------------------------------------------------------


def test_a_new_gangs_pod_is_held_with_no_zone_and_no_effects(now: datetime) -> None:
    pj = pytorchjob()
    decision = decide(pytorch_pod(pj).obj(), base_cluster(pj), now, HOLD)
    assert (decision.outcome, decision.reason, decision.zone) == ("held", "held", None)
    assert decision.to_create == () and decision.policy_name is None
    assert decision.patched is not None
    meta, spec = decision.patched["metadata"], decision.patched["spec"]
    assert spec["schedulingGates"] == [{"name": labels.HOLD_GATE}]
    assert meta["labels"][labels.JOB] == pj["metadata"]["uid"]
    assert labels.ZONE not in meta["labels"]
    assert meta["annotations"] == {labels.REASON: labels.HELD}
    assert "affinity" not in spec and "nodeSelector" not in spec


def test_a_reinvoked_held_pod_gets_an_empty_patch(now: datetime) -> None:
    pj = pytorchjob()
    held = decide(pytorch_pod(pj).obj(), base_cluster(pj), now, HOLD).patched
    assert held is not None
    assert decide(held, base_cluster(pj), now, HOLD).patch == []


@pytest.mark.parametrize(
    ("released", "outcome"),
    [
        (None, "held"),  # a record but no pod released: still held (it may be decided again)
        ("gated", "held"),  # the gang's other pods are still gated
        ("finished", "held"),  # a finished pod commits nothing
        ("running", "pinned"),  # some pod was released: follow the recorded zone
        ("pending", "pinned"),  # released, not bound yet: the gang is committed all the same
    ],
)
def test_a_released_gang_is_followed(released: str | None, outcome: str, now: datetime) -> None:
    pj = pytorchjob()
    others = []
    if released is not None:
        other = pytorch_pod(pj, "worker", 1).label(labels.JOB, pj["metadata"]["uid"])
        if released == "gated":
            other.gate()
        elif released == "finished":
            other.bound("a-1", phase="Succeeded")
        elif released == "running":
            other.bound("a-1")
        others.append(other.obj())
    objects = [*base_cluster(pj), record_for(pj, "zone-a", now), *others]
    decision = decide(pytorch_pod(pj, "worker", 2).obj(), objects, now, HOLD)
    assert decision.outcome == outcome
    if outcome == "pinned":
        assert (decision.zone, decision.reason) == ("zone-a", "recorded")
        assert "schedulingGates" not in (decision.patched or {})["spec"]


@pytest.mark.parametrize(
    "change",
    [
        lambda b: b.gate("kueue.x-k8s.io/admission"),
        lambda b: b.label("kueue.x-k8s.io/queue-name", "q"),
        lambda b: b.label("kueue.x-k8s.io/pod-group-name", "g"),
        lambda b: b.spec(schedulingGroup={"podGroupName": "g"}),
        lambda b: b.spec(schedulerName="volcano"),
        lambda b: b.spec(nodeName="a-1"),
    ],
    ids=["other-gate", "kueue-queue", "kueue-group", "podgroup", "volcano", "node-name"],
)
def test_pods_another_system_places_are_pinned_as_today(change: Any, now: datetime) -> None:
    pj = pytorchjob()
    decision = decide(change(pytorch_pod(pj)).obj(), base_cluster(pj), now, HOLD)
    assert decision.outcome == "pinned" and decision.record is not None
    assert {"name": labels.HOLD_GATE} not in (decision.patched or {})["spec"].get(
        "schedulingGates", []
    )


def test_the_default_scheduler_named_explicitly_is_held(now: datetime) -> None:
    pj = pytorchjob()
    pod = pytorch_pod(pj).spec(schedulerName="default-scheduler").obj()
    assert decide(pod, base_cluster(pj), now, HOLD).outcome == "held"


def test_podium_mode_never_holds(now: datetime) -> None:
    pj = pytorchjob()
    for chooser in ("podium", "pin"):
        settings = Settings.from_mapping({"zone-chooser": chooser})
        assert decide(pytorch_pod(pj).obj(), base_cluster(pj), now, settings).outcome == "pinned"


@pytest.mark.parametrize(
    ("writable", "outcome"), [((), "held"), ((NS,), "held"), (("other",), "pinned")]
)
def test_a_pod_is_never_held_where_podium_may_not_write(
    writable: tuple[str, ...], outcome: str, now: datetime
) -> None:
    """``writable-namespaces`` (``rbac.scope: namespaced``): elsewhere podium could not release
    the pod, so it decides as ``pin`` there (its writes then fail open on the 403)."""
    pj = pytorchjob()
    settings = Settings.from_mapping(
        {"zone-chooser": "hold", "writable-namespaces": list(writable)}
    )
    assert decide(pytorch_pod(pj).obj(), base_cluster(pj), now, settings).outcome == outcome


def test_non_training_and_opted_out_pods_are_never_held(now: datetime) -> None:
    pod = PodBuilder(NS, generate_name="web-").obj()
    assert decide(pod, base_cluster(), now, HOLD).outcome == "skipped"
    skipped = PodBuilder("sandbox", generate_name="web-").obj()
    assert decide(skipped, base_cluster(), now, HOLD).outcome == "skipped"


def test_the_held_outcome_reaches_the_audit_entry(now: datetime) -> None:
    pj = pytorchjob()
    pod = pytorch_pod(pj).obj()
    view = ClusterView.from_objects(
        base_cluster(pj), zone_label=HOLD.zone_label, kept=adapters.KEPT
    )
    decision = engine.decide(request_for(pod), view, HOLD, now=now)
    entry = audit.build(request=request_for(pod), decision=decision, time=now, latency_ms=1.0)
    assert (entry["outcome"], entry["reason"], entry["zone"], entry["effects"]) == (
        "held",
        "held",
        None,
        [],
    )
    assert (entry["job"] or {}).get("gang") == pj["metadata"]["uid"]


def test_the_view_knows_which_pods_are_held() -> None:
    pj = pytorchjob()
    held = pytorch_pod(pj).gate().obj()
    free = pytorch_pod(pj, "worker", 1).obj()
    view = ClusterView.from_objects([held, free], zone_label=HOLD.zone_label, kept=adapters.KEPT)
    assert [p.gated for p in view.pod_summaries(NS)] == [True, False]
    assert view.get("v1", "Pod", NS, held["metadata"]["name"])["spec"]["schedulingGates"] == [
        {"name": labels.HOLD_GATE}
    ]


def test_no_record_of_a_held_gang_is_asked_for(now: datetime) -> None:
    pj = pytorchjob()
    for i in range(3):
        decision = decide(pytorch_pod(pj, "worker", i).obj(), base_cluster(pj), now, HOLD)
        assert not [m for m in decision.to_create if m["kind"] == policies.RECORD_KIND]

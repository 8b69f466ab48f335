"""Shadow mode in the pure decision: the same decision as enforce mode, kept in ``shadow_of``,
answered with the pod unchanged and nothing to create; how a namespace's mode is read."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.builders import PIN, PodBuilder, namespace
from tests.scenarios import NS, pytorch_pod, pytorchjob, zones_8_16_64
from webhook.core import adapters, engine, labels, reviews
from webhook.core.settings import Mode, Settings, SettingsError, ZoneChooser
from webhook.core.view import ClusterView

ENFORCE = Settings()


def cluster(ns_value: str, *extra: dict[str, Any]) -> list[dict[str, Any]]:
    ns = namespace(NS, enabled=False, **{labels.ENABLED: ns_value})
    return [ns, *zones_8_16_64(), *extra]


def decide(
    pod: dict[str, Any],
    objects: list[dict[str, Any]],
    now: datetime,
    settings: Settings = ENFORCE,
    *,
    scheduler: bool = False,
    **request: Any,
) -> engine.Decision:
    doc = reviews.review_for_pod(pod)
    doc["request"].update(request)
    view = ClusterView.from_objects(objects, zone_label=settings.zone_label, kept=adapters.KEPT)
    return engine.decide(reviews.from_document(doc), view, settings, now=now, scheduler=scheduler)


@pytest.mark.parametrize("chooser", [ZoneChooser.PODIUM, ZoneChooser.SCHEDULER])
@pytest.mark.parametrize(
    ("ns_value", "settings_mode"),
    [("shadow", Mode.ENFORCE), ("true", Mode.SHADOW), ("shadow", Mode.SHADOW)],
)
def test_shadow_keeps_the_enforce_decision_and_applies_none_of_it(
    chooser: ZoneChooser, ns_value: str, settings_mode: Mode, now: datetime
) -> None:
    pj = pytorchjob(workers=3)  # 32 GPUs: only zone-c fits
    pod = pytorch_pod(pj, "master").obj()
    settings = Settings(zone_chooser=chooser)
    enforced = decide(pod, cluster("true", pj), now, settings, scheduler=True)
    assert enforced.patch and enforced.to_create  # enforce mode would change and create
    shadow = decide(
        pod,
        cluster(ns_value, pj),
        now,
        dataclasses.replace(settings, mode=settings_mode),
        scheduler=True,
    )
    assert shadow.shadow_of == enforced
    assert shadow == dataclasses.replace(
        enforced,
        patched=pod,
        patch=[],
        record=None,
        podgroup=None,
        policy=None,
        warnings=(),
        shadow_of=enforced,
    )
    assert shadow.audit_annotations() == {**enforced.audit_annotations(), "shadow": "true"}


def test_shadow_records_the_zone_a_held_gang_would_be_released_into(now: datetime) -> None:
    pj = pytorchjob(workers=3)
    pod = pytorch_pod(pj, "master").obj()
    hold = Settings(zone_chooser=ZoneChooser.HOLD)
    enforced = decide(pod, cluster("true", pj), now, hold)
    assert enforced.outcome == "held" and enforced.zone is None and enforced.patch
    shadow = decide(pod, cluster("shadow", pj), now, hold)
    assert shadow.shadow_of == enforced
    assert (shadow.outcome, shadow.zone, shadow.patch, shadow.to_create) == (
        "held",
        "zone-c",
        [],
        (),
    )
    assert shadow.patched == pod
    assert "into zone zone-c" in shadow.detail
    assert [c.zone for c in shadow.capacity if c.fits] == ["zone-c"]


def test_no_fit_warnings_go_to_the_audit_not_to_the_pods_creator(now: datetime) -> None:
    pj = pytorchjob(workers=9)  # 80 GPUs: no zone fits
    pod = pytorch_pod(pj, "master").obj()
    shadow = decide(pod, cluster("shadow", pj), now, PIN)  # pinned with a no-fit warning
    assert shadow.warnings == ()
    assert shadow.shadow_of is not None and shadow.shadow_of.warnings


@pytest.mark.parametrize("ns_value", ["shadow", "true"])
def test_trusted_label_guards_stay_in_force_in_shadow(ns_value: str, now: datetime) -> None:
    """An UPDATE that moves a pod into another job's policy is refused, a copied label on a pod
    podium does not admit is stripped: shadow mode only stops podium's placement."""
    settings = Settings(mode=Mode.SHADOW)
    old = PodBuilder(NS, name="p").label("app", "x").obj()
    new = PodBuilder(NS, name="p").label("app", "x").label(labels.JOB, "job-b").obj()
    denied = decide(new, cluster(ns_value), now, settings, operation="UPDATE", oldObject=old)
    assert (denied.outcome, denied.denial is not None, denied.shadow) == ("denied", True, False)
    copied = decide(new, cluster(ns_value), now, settings)
    assert copied.outcome == "skipped" and not copied.shadow
    assert copied.patch == [{"op": "remove", "path": "/metadata/labels/podium.dev~1job"}]


def test_a_namespace_neither_enforced_nor_shadowed_is_left_alone(now: datetime) -> None:
    pj = pytorchjob()
    decision = decide(pytorch_pod(pj).obj(), cluster("false", pj), now, Settings(mode=Mode.SHADOW))
    assert (decision.outcome, decision.reason, decision.shadow) == (
        "skipped",
        "namespace-not-enabled",
        False,
    )
    assert "(or =shadow)" in decision.detail


@given(st.one_of(st.none(), st.text(max_size=8)), st.sampled_from(Mode))
def test_namespace_mode_follows_the_label_value_then_the_setting(
    value: str | None, mode: Mode
) -> None:
    settings = Settings(mode=mode)
    found = {} if value is None else {labels.ENABLED: value}
    expected = {"shadow": Mode.SHADOW, "true": mode}.get(value or "")
    assert settings.namespace_mode("team-a", found) is expected
    assert settings.namespace_mode("kube-system", found) is None  # excluded whatever it says
    assert settings.enforces("team-a", found) is (expected is Mode.ENFORCE)
    assert not settings.enforces("kube-system", found)


def test_mode_settings_are_read_and_checked() -> None:
    assert Settings.from_mapping({"mode": "shadow"}).mode is Mode.SHADOW
    assert (
        Settings.from_mapping({"namespace-shadow-value": "observe"}).namespace_mode(
            "ns", {labels.ENABLED: "observe"}
        )
        is Mode.SHADOW
    )
    with pytest.raises(SettingsError, match=r"one of: enforce, shadow"):
        Settings.from_mapping({"mode": "audit"})
    with pytest.raises(SettingsError, match="could not say which mode"):
        Settings.from_mapping({"namespace-shadow-value": "true"})

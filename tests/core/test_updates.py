"""A pod's UPDATE (``webhook/core/updates.py``), as ``engine.decide`` answers it: podium's trusted
labels (``podium.dev/job``, ``podium.dev/zone``) are podium's. Any change is refused except
podium's own: its releaser's ungate patch (``mutation.release``, recognised by
``mutation.is_release``), its reconciler's removal of a disowned job label and its labelling of a
bound pod with its node's zone."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.builders import PodBuilder
from tests.core.test_engine import SETTINGS
from tests.core.test_hold import HOLD
from tests.scenarios import NS, base_cluster, pytorch_pod, pytorchjob
from webhook.core import adapters, engine, labels, mutation, reviews
from webhook.core.view import ClusterView

# -- updates: podium's label is podium's ---------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "denied"),
    [
        (None, "job-b", True),  # added afterwards: would walk into job-b's policy
        ("job-a", "job-b", True),  # moved into another job's policy
        ("job-a", None, True),  # removed: would leave its own job's policy
        ("job-a", "job-a", False),
        (None, None, False),
    ],
)
def test_update_of_the_trusted_label_is_denied(
    old: str | None, new: str | None, denied: bool, now: datetime
) -> None:
    def with_label(value: str | None) -> dict[str, Any]:
        builder = PodBuilder(NS, name="p").label("app", "x")
        if value is not None:
            builder.label(labels.JOB, value)
        return builder.obj()

    doc = reviews.review_for_pod(with_label(new))
    doc["request"].update(operation="UPDATE", oldObject=with_label(old))
    view = ClusterView.from_objects(
        base_cluster(), zone_label=SETTINGS.zone_label, kept=adapters.KEPT
    )
    decision = engine.decide(reviews.from_document(doc), view, SETTINGS, now=now)
    assert (decision.outcome == "denied", decision.denial is not None) == (denied, denied)
    assert decision.patch == [] and decision.to_create == ()
    if denied:
        assert decision.reason == "trusted-label-changed"
        assert f"({old!r} → {new!r})" in (decision.denial or "")


# -- the zone label ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "user", "denied"),
    [
        (None, "zone-b", "someone", True),  # claims a zone: would join that zone's policy
        ("zone-c", "zone-b", "someone", True),
        ("zone-c", None, "someone", True),
        ("zone-c", "zone-c", "someone", False),
        (None, "zone-c", "podium", False),  # podium labels a bound pod with its node's zone
        (None, "zone-b", "podium", True),  # ... and with no other
        ("zone-b", "zone-c", "podium", False),  # ... correcting a wrong one
        ("zone-c", None, "podium", True),
    ],
)
def test_update_of_the_zone_label_is_denied_but_podiums_own(
    old: str | None, new: str | None, user: str, denied: bool, now: datetime
) -> None:
    def with_zone(value: str | None) -> dict[str, Any]:
        builder = PodBuilder(NS, name="p").label(labels.JOB, "job-a").bound("c-1")
        if value is not None:
            builder.label(labels.ZONE, value)
        return builder.obj()

    doc = reviews.review_for_pod(with_zone(new))
    doc["request"].update(operation="UPDATE", oldObject=with_zone(old), userInfo={"username": user})
    view = ClusterView.from_objects(
        base_cluster(), zone_label=SETTINGS.zone_label, kept=adapters.KEPT
    )
    settings = dataclasses.replace(SETTINGS, own_user="podium")
    decision = engine.decide(reviews.from_document(doc), view, settings, now=now)
    assert (decision.outcome == "denied", decision.denial is not None) == (denied, denied)
    if denied:
        assert decision.reason == "trusted-label-changed"
        assert labels.ZONE in (decision.denial or "")


# -- the UPDATE guard: podium's own release, and nothing else --------------------------------


def _release_review(
    *, user: str, gated_before: bool, gated_after: bool, label: str | None, pinned: str | None
) -> reviews.Request:
    pj = pytorchjob()
    old = mutation.hold(pytorch_pod(pj).obj(), gang_key=pj["metadata"]["uid"]).pod
    if not gated_before:
        old = {**old, "spec": {k: v for k, v in old["spec"].items() if k != "schedulingGates"}}
    new = mutation.pin(
        old,
        zone=pinned,
        gang_key=pj["metadata"]["uid"],
        zone_label=labels.ZONE_LABEL,
        annotations={labels.REASON: "best-fit"},
    ).pod
    new["metadata"]["labels"] = {
        k: v for k, v in new["metadata"]["labels"].items() if k != labels.ZONE
    } | ({labels.ZONE: label} if label else {})
    if not gated_after:
        new["spec"] = {k: v for k, v in new["spec"].items() if k != "schedulingGates"}
    doc = reviews.review_for_pod(new)
    doc["request"].update(
        operation="UPDATE", oldObject=old, userInfo={"username": user}, namespace=NS
    )
    return reviews.from_document(doc)


@pytest.mark.parametrize(
    ("user", "gated_before", "gated_after", "label", "pinned", "allowed"),
    [
        ("podium", True, False, "zone-b", "zone-b", True),  # the release patch
        ("podium", True, False, None, None, True),  # released unpinned: no zone label at all
        ("someone", True, False, "zone-b", "zone-b", False),  # not podium
        ("podium", False, False, "zone-b", "zone-b", False),  # was not held
        ("podium", True, True, "zone-b", "zone-b", False),  # still gated: not a release
        ("podium", True, False, "zone-a", "zone-b", False),  # label and placement disagree
        ("podium", True, False, "zone-b", None, False),  # a zone label with no placement
    ],
)
def test_the_guard_lets_podiums_release_through(
    user: str,
    gated_before: bool,
    gated_after: bool,
    label: str | None,
    pinned: str | None,
    allowed: bool,
    now: datetime,
) -> None:
    request = _release_review(
        user=user, gated_before=gated_before, gated_after=gated_after, label=label, pinned=pinned
    )
    view = ClusterView.from_objects(base_cluster(), zone_label=HOLD.zone_label, kept=adapters.KEPT)
    decision = engine.decide(request, view, HOLD, now=now)
    assert (decision.outcome != "denied") == allowed, decision.detail


@given(
    user=st.sampled_from(["podium", "someone", ""]),
    gated_before=st.booleans(),
    gated_after=st.booleans(),
    label=st.sampled_from([None, "zone-a", "zone-b"]),
    pinned=st.sampled_from([None, "zone-a", "zone-b"]),
)
def test_only_podiums_exact_release_sets_a_zone_label_on_an_unbound_pod(
    user: str, gated_before: bool, gated_after: bool, label: str | None, pinned: str | None
) -> None:
    request = _release_review(
        user=user, gated_before=gated_before, gated_after=gated_after, label=label, pinned=pinned
    )
    view = ClusterView.from_objects(base_cluster(), zone_label=HOLD.zone_label, kept=adapters.KEPT)
    decision = engine.decide(request, view, HOLD, now=datetime(2026, 1, 1))
    exact = user == "podium" and gated_before and not gated_after and label == pinned
    assert (decision.outcome != "denied") == (label is None or exact)


# -- what each update that is let through is called (the audit's reason) ---------------------


def _update(old: dict[str, Any], new: dict[str, Any], user: str) -> reviews.Request:
    doc = reviews.review_for_pod(new)
    doc["request"].update(operation="UPDATE", oldObject=old, userInfo={"username": user})
    return reviews.from_document(doc)


def _pod(**trusted: str) -> dict[str, Any]:
    builder = PodBuilder(NS, name="p").label("app", "x").bound("c-1")
    for key, value in trusted.items():
        builder.label(key, value)
    return builder.obj()


def test_each_update_podium_lets_through_says_why(now: datetime) -> None:
    view = ClusterView.from_objects(base_cluster(), zone_label=HOLD.zone_label, kept=adapters.KEPT)
    release = _release_review(
        user="podium", gated_before=True, gated_after=False, label="zone-b", pinned="zone-b"
    )
    copied, zoned = _pod(**{labels.JOB: "job-a"}), _pod(**{labels.ZONE: "zone-c"})
    cases = {
        "own-release": (release, "podium (podium) released a held pod into zone zone-b"),
        "own-zone-label": (
            _update(_pod(), zoned, "podium"),
            "podium (podium) labelled the pod with the zone of its node c-1",
        ),
        "own-label-removal": (
            _update(copied, _pod(), "podium"),
            f"podium (podium) removed a copied {labels.JOB} label: no job in its controller "
            "chain (no controller) has gang job-a",
        ),
        "not-a-pod-creation": (
            _update(zoned, {**zoned, "spec": {**zoned["spec"], "priority": 1}}, "someone"),
            "UPDATE Pod that leaves podium's labels alone",
        ),
    }
    for reason, (request, detail) in cases.items():
        decision = engine.decide(request, view, HOLD, now=now)
        assert (decision.outcome, decision.reason, decision.detail) == ("skipped", reason, detail)
        assert decision.denial is None and decision.patch == [] and decision.to_create == ()

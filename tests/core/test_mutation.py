"""The patch podium writes by hand is exactly the change it makes: for arbitrary pods, applying
it with ``jsonpatch`` (as the apiserver applies it) gives the pod ``mutation`` returns, it touches
nothing else, the pod before is never changed, and a pod already pinned gets an empty patch."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from webhook.core import labels, mutation, selectors

ZONE_KEY = "topology.kubernetes.io/zone"

keys = st.sampled_from(
    ["app", labels.JOB, labels.ZONE, labels.REASON, "a/b", "x~y", "~1", "", "k8s.io/name"]
)
string_maps = st.one_of(st.none(), st.dictionaries(keys, st.text(max_size=5), max_size=4))
expr = st.fixed_dictionaries(
    {
        "key": st.sampled_from([ZONE_KEY, "gpu", "a/b"]),
        "operator": st.sampled_from(["In", "NotIn", "Exists"]),
        "values": st.lists(st.sampled_from(["zone-a", "zone-b", "x"]), max_size=2),
    }
)
term = st.fixed_dictionaries(
    {},
    optional={
        "matchExpressions": st.one_of(st.none(), st.lists(expr, max_size=3)),
        "matchFields": st.lists(expr, max_size=1),
    },
)
node_affinity = st.fixed_dictionaries(
    {},
    optional={
        "requiredDuringSchedulingIgnoredDuringExecution": st.one_of(
            st.none(),
            st.fixed_dictionaries(
                {}, optional={"nodeSelectorTerms": st.one_of(st.none(), st.lists(term, max_size=3))}
            ),
        ),
        "preferredDuringSchedulingIgnoredDuringExecution": st.lists(
            st.fixed_dictionaries({"weight": st.integers(1, 100), "preference": term}), max_size=1
        ),
    },
)
affinity = st.fixed_dictionaries(
    {},
    optional={
        "nodeAffinity": st.one_of(st.none(), node_affinity),
        "podAntiAffinity": st.just({"requiredDuringSchedulingIgnoredDuringExecution": []}),
    },
)
pods = st.fixed_dictionaries(
    {},
    optional={
        "metadata": st.fixed_dictionaries(
            {"name": st.just("p")}, optional={"labels": string_maps, "annotations": string_maps}
        ),
        "spec": st.fixed_dictionaries(
            {"containers": st.just([{"name": "c", "image": "i"}])},
            optional={"affinity": st.one_of(st.none(), affinity)},
        ),
    },
)
annotations = st.dictionaries(
    st.sampled_from([labels.ZONE, labels.REASON, labels.POLICY]), st.text(max_size=4), min_size=1
)
zones = st.one_of(st.none(), st.sampled_from(["zone-a", "zone-b"]))


def _pin(pod: dict[str, Any], zone: str | None, notes: dict[str, str]) -> mutation.Mutation:
    return mutation.pin(pod, zone=zone, gang_key="uid-1", zone_label=ZONE_KEY, annotations=notes)


def _without(doc: dict[str, Any], *paths: tuple[str, ...]) -> dict[str, Any]:
    """``doc`` with the members at ``paths`` dropped, and then every parent on those paths that
    is left empty or null (so a pod without labels compares equal to one with only podium's)."""
    out = copy.deepcopy(doc)
    for path in paths:
        chain = [out]
        for key in path[:-1]:
            chain.append(chain[-1].get(key) if isinstance(chain[-1], dict) else None)
        if isinstance(chain[-1], dict):
            chain[-1].pop(path[-1], None)
        for parent, key in reversed(list(zip(chain[:-1], path[:-1], strict=True))):
            if isinstance(parent, dict) and parent.get(key) in (None, {}):
                parent.pop(key, None)
    return out


def _assert_no_redundant_operation(patch: list[dict[str, Any]]) -> None:
    """No operation writes at or below a path an earlier one already set whole."""
    written: list[str] = []
    for op in patch:
        path = op["path"]
        assert not any(path == w or path.startswith(w + "/") for w in written), patch
        if op["op"] in ("add", "replace"):
            written.append(path)


@settings(max_examples=400)
@given(pods, zones, annotations)
def test_the_patch_applied_gives_the_pinned_pod(
    pod: dict[str, Any], zone: str | None, notes: dict[str, str]
) -> None:
    before = copy.deepcopy(pod)
    after, patch = _pin(pod, zone, notes)
    assert pod == before, "the pod before must not be changed"
    assert jsonpatch.apply_patch(pod, patch) == after
    _assert_no_redundant_operation(patch)
    assert after["metadata"]["labels"][labels.JOB] == "uid-1"
    # The zone label is podium's word on where the pod runs: the pinned zone, or none at all.
    assert after["metadata"]["labels"].get(labels.ZONE) == zone
    assert notes.items() <= after["metadata"]["annotations"].items()
    if zone is not None:
        terms = after["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        wanted = {"key": ZONE_KEY, "operator": "In", "values": [zone]}
        assert terms and all(wanted in t["matchExpressions"] for t in terms)
    # Nothing but podium's labels, its annotations and the affinity changed.
    touched = [
        ("metadata", "labels", labels.JOB),
        ("metadata", "labels", labels.ZONE),
        *(("metadata", "annotations", k) for k in notes),
        ("spec", "affinity"),
    ]
    assert _without(after, *touched) == _without(pod, *touched)


@settings(max_examples=200)
@given(pods, zones, annotations)
def test_a_pinned_pod_pinned_again_gets_an_empty_patch(
    pod: dict[str, Any], zone: str | None, notes: dict[str, str]
) -> None:
    once = _pin(pod, zone, notes).pod
    assert _pin(once, zone, notes).patch == []


@settings(max_examples=200)
@given(pods)
def test_the_trusted_labels_are_removed_and_nothing_else(pod: dict[str, Any]) -> None:
    before = copy.deepcopy(pod)
    after, patch = mutation.without_trusted_label(pod)
    assert pod == before
    assert jsonpatch.apply_patch(pod, patch) == after
    trusted = (labels.JOB, labels.ZONE)
    assert not set(trusted) & set((after.get("metadata") or {}).get("labels") or {})
    paths = [("metadata", "labels", k) for k in trusted]
    assert _without(after, *paths) == _without(pod, *paths)
    brought = (pod.get("metadata") or {}).get("labels") or {}
    assert bool(patch) == any(k in brought for k in trusted)


def test_keys_are_escaped_and_existing_members_replaced() -> None:
    pod = {"metadata": {"labels": {labels.JOB: "forged"}, "annotations": {}}, "spec": {}}
    _, patch = _pin(pod, "zone-a", {labels.ZONE: "zone-a"})
    assert patch == [
        {"op": "replace", "path": "/metadata/labels/podium.dev~1job", "value": "uid-1"},
        {"op": "add", "path": "/metadata/labels/podium.dev~1zone", "value": "zone-a"},
        {"op": "add", "path": "/metadata/annotations/podium.dev~1zone", "value": "zone-a"},
        {
            "op": "add",
            "path": "/spec/affinity",
            "value": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": ZONE_KEY, "operator": "In", "values": ["zone-a"]}
                                ]
                            }
                        ]
                    }
                }
            },
        },
    ]


def test_a_pod_without_metadata_or_spec_gets_one_add_for_each() -> None:
    _, patch = _pin({}, "zone-a", {labels.ZONE: "zone-a"})
    assert [(op["op"], op["path"]) for op in patch] == [("add", "/metadata"), ("add", "/spec")]
    assert patch[0]["value"] == {
        "labels": {labels.JOB: "uid-1", labels.ZONE: "zone-a"},
        "annotations": {labels.ZONE: "zone-a"},
    }


def test_an_unpinned_pod_loses_a_zone_label_it_brought() -> None:
    pod = {"metadata": {"labels": {labels.JOB: "uid-1", labels.ZONE: "zone-b"}}}
    after, patch = _pin(pod, None, {labels.ZONE: ""})
    assert patch == [
        {"op": "remove", "path": "/metadata/labels/podium.dev~1zone"},
        {"op": "add", "path": "/metadata/annotations", "value": {labels.ZONE: ""}},
    ]
    assert after["metadata"]["labels"] == {labels.JOB: "uid-1"}


def test_an_affinity_the_pod_brought_is_extended_not_replaced() -> None:
    expr = {"key": "gpu", "operator": "Exists"}
    pod = {
        "metadata": {"labels": {}},
        "spec": {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [expr]}]
                    }
                },
                "podAntiAffinity": {"x": 1},
            }
        },
    }
    _, patch = _pin(pod, "zone-b", {labels.ZONE: "zone-b"})
    assert patch[-1] == {
        "op": "add",
        "path": "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution"
        "/nodeSelectorTerms/0/matchExpressions/1",
        "value": {"key": ZONE_KEY, "operator": "In", "values": ["zone-b"]},
    }


gates = st.lists(st.sampled_from(["other.io/gate", labels.HOLD_GATE]), max_size=2, unique=True)


@settings(max_examples=200)
@given(pods, gates)
def test_a_held_pod_carries_the_gate_and_no_zone(pod: dict[str, Any], present: list[str]) -> None:
    if present:
        pod = {
            **pod,
            "spec": {**(pod.get("spec") or {}), "schedulingGates": [{"name": g} for g in present]},
        }
    before = copy.deepcopy(pod)
    after, patch = mutation.hold(pod, gang_key="uid-1")
    assert pod == before
    assert jsonpatch.apply_patch(pod, patch) == after
    assert {"name": labels.HOLD_GATE} in after["spec"]["schedulingGates"]
    assert after["metadata"]["labels"][labels.JOB] == "uid-1"
    assert labels.ZONE not in after["metadata"]["labels"]
    assert after["metadata"]["annotations"][labels.REASON] == labels.HELD
    assert mutation.hold(after, gang_key="uid-1").patch == []


@settings(max_examples=200)
@given(pods, zones, st.sampled_from(["other.io/gate", None]))
def test_the_release_patch_ungates_and_pins_in_one_request(
    pod: dict[str, Any], zone: str | None, other: str | None
) -> None:
    held = mutation.hold(pod, gang_key="uid-1").pod
    if other is not None:
        gated = [{"name": other}, *held["spec"]["schedulingGates"]]
        held = {**held, "spec": {**held["spec"], "schedulingGates": gated}}
    held["metadata"]["uid"] = "pod-uid"
    notes = {labels.REASON: "best-fit"}
    after, patch = mutation.release(
        held, zone=zone, gang_key="uid-1", zone_label=ZONE_KEY, annotations=notes
    )
    assert jsonpatch.apply_patch(held, patch) == after
    assert {"name": labels.HOLD_GATE} not in (after["spec"].get("schedulingGates") or [])
    assert [g["name"] for g in after["spec"].get("schedulingGates") or []] == (
        [other] if other else []
    )
    assert after["metadata"]["labels"].get(labels.ZONE) == zone
    # The patch is guarded: against another pod of the same name, or a gate list that moved.
    assert patch[0] == {"op": "test", "path": "/metadata/uid", "value": "pod-uid"}
    recreated = {**held, "metadata": {**held["metadata"], "uid": "another"}}
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(recreated, patch)


# -- the release: built (``release``) and recognised (``is_release``) side by side ------------


def _gated(pod: dict[str, Any], present: list[str]) -> dict[str, Any]:
    """``pod`` carrying exactly the scheduling gates ``present``, in order, and a UID."""
    meta = {**(pod.get("metadata") or {}), "uid": "pod-uid"}
    spec = {**(pod.get("spec") or {}), "schedulingGates": [{"name": g} for g in present]}
    return {**pod, "metadata": meta, "spec": spec}


def _release(pod: dict[str, Any], zone: str) -> mutation.Mutation:
    notes = {labels.ZONE: zone, labels.REASON: "best-fit"}
    return mutation.release(
        pod, zone=zone, gang_key="uid-1", zone_label=ZONE_KEY, annotations=notes
    )


@settings(max_examples=400)
@given(pods, st.sampled_from(["zone-a", "zone-b"]), st.sampled_from(["other.io/gate", None]))
def test_what_release_builds_is_what_is_release_recognises(
    pod: dict[str, Any], zone: str, other: str | None
) -> None:
    held = _gated(
        mutation.hold(pod, gang_key="uid-1").pod, [*([other] if other else []), labels.HOLD_GATE]
    )
    allowed = selectors.pinned_zones(held["spec"], ZONE_KEY)
    # A pod whose own constraint keeps it out of the zone cannot be released into it.
    assume(allowed is None or zone in allowed)
    released = jsonpatch.apply_patch(held, _release(held, zone).patch)
    assert mutation.is_release(held, released, zone_label=ZONE_KEY)


ordinary = st.sampled_from(["pin", "unpinned", "hold", "strip", "relabelled", "ungated-already"])


@settings(max_examples=400)
@given(pods, st.sampled_from(["zone-a", "zone-b"]), gates, ordinary)
def test_no_other_change_podium_makes_is_recognised_as_a_release(
    pod: dict[str, Any], zone: str, present: list[str], how: str
) -> None:
    before = _gated(pod, present)
    notes = {labels.REASON: "best-fit"}
    if how == "pin":
        after = _pin(before, zone, notes).pod  # pinned, gate (if any) left alone
    elif how == "unpinned":
        after = _pin(before, None, notes).pod
    elif how == "hold":
        after = mutation.hold(before, gang_key="uid-1").pod
    elif how == "strip":
        after = mutation.without_trusted_label(before).pod
    elif how == "relabelled":  # released, then the zone label changed to another zone
        after = _release(before, zone).pod
        other = "zone-b" if zone == "zone-a" else "zone-a"
        after["metadata"]["labels"] = {**after["metadata"]["labels"], labels.ZONE: other}
    else:  # released from a pod that no longer carried podium's gate
        before = _gated(pod, [g for g in present if g != labels.HOLD_GATE])
        after = _release(before, zone).pod
    assert not mutation.is_release(before, after, zone_label=ZONE_KEY)

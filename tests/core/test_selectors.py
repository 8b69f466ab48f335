from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webhook.core import selectors

Z = "topology.kubernetes.io/zone"


def terms(*ts: dict[str, Any]) -> dict[str, Any]:
    return {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(ts)}
            }
        }
    }


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": op, "values": list(values)}


@pytest.mark.parametrize(
    ("spec", "labels", "admitted"),
    [
        ({}, {}, True),
        ({"nodeSelector": {"gpu": "a100"}}, {"gpu": "a100"}, True),
        ({"nodeSelector": {"gpu": "a100"}}, {"gpu": "h100"}, False),
        (terms({"matchExpressions": [expr("gpu", "In", "a100", "h100")]}), {"gpu": "h100"}, True),
        (terms({"matchExpressions": [expr("gpu", "NotIn", "a100")]}), {}, True),
        (terms({"matchExpressions": [expr("gpu", "Exists")]}), {}, False),
        (terms({"matchExpressions": [expr("gpu", "DoesNotExist")]}), {}, True),
        (terms({"matchExpressions": [expr("mem", "Gt", "80")]}), {"mem": "81"}, True),
        (terms({"matchExpressions": [expr("mem", "Lt", "80")]}), {"mem": "x"}, False),
        (
            terms(
                {"matchExpressions": [expr("gpu", "In", "a")]},
                {"matchFields": [expr("metadata.name", "In", "n1")]},
            ),
            {},
            True,
        ),
        (terms({}), {}, False),  # an empty term matches nothing
        (terms({"matchExpressions": [expr("gpu", "Bogus")]}), {"gpu": "a"}, False),
    ],
)
def test_admits_labels(spec: dict[str, Any], labels: dict[str, str], admitted: bool) -> None:
    assert selectors.admits_labels(spec, "n1", labels) is admitted


@pytest.mark.parametrize(
    ("tolerations", "taint", "ok"),
    [
        ([], {"key": "gpu", "effect": "NoSchedule"}, False),
        ([], {"key": "gpu", "effect": "PreferNoSchedule"}, True),
        ([{"key": "gpu", "operator": "Exists"}], {"key": "gpu", "effect": "NoExecute"}, True),
        ([{"operator": "Exists"}], {"key": "any", "effect": "NoSchedule"}, True),
        (
            [{"key": "gpu", "value": "x", "effect": "NoSchedule"}],
            {"key": "gpu", "value": "x", "effect": "NoSchedule"},
            True,
        ),
        (
            [{"key": "gpu", "value": "y"}],
            {"key": "gpu", "value": "x", "effect": "NoSchedule"},
            False,
        ),
        (
            [{"key": "gpu", "operator": "Exists", "effect": "NoExecute"}],
            {"key": "gpu", "effect": "NoSchedule"},
            False,
        ),
    ],
)
def test_tolerations(tolerations: list[dict[str, str]], taint: dict[str, str], ok: bool) -> None:
    assert selectors.tolerates_all({"tolerations": tolerations}, [taint]) is ok


@pytest.mark.parametrize(
    ("spec", "zones"),
    [
        ({}, None),
        ({"nodeSelector": {Z: "a"}}, {"a"}),
        (terms({"matchExpressions": [expr(Z, "In", "a", "b")]}), {"a", "b"}),
        (terms({"matchExpressions": [expr(Z, "In", "a", "b"), expr(Z, "In", "b")]}), {"b"}),
        (
            terms(
                {"matchExpressions": [expr(Z, "In", "a")]},
                {"matchExpressions": [expr(Z, "In", "b")]},
            ),
            {"a", "b"},
        ),
        (
            terms(
                {"matchExpressions": [expr(Z, "In", "a")]},
                {"matchExpressions": [expr("gpu", "Exists")]},
            ),
            None,
        ),
        (
            {"nodeSelector": {Z: "a"}, **terms({"matchExpressions": [expr(Z, "In", "a", "b")]})},
            {"a"},
        ),
        (terms({"matchExpressions": [expr(Z, "NotIn", "a")]}), None),
    ],
)
def test_pinned_zones(spec: dict[str, Any], zones: set[str] | None) -> None:
    result = selectors.pinned_zones(spec, Z)
    assert (None if result is None else set(result)) == zones


@given(
    term=st.dictionaries(
        st.sampled_from(["matchExpressions", "matchFields"]),
        st.lists(
            st.dictionaries(
                st.sampled_from(["key", "operator", "values"]),
                st.text(max_size=4) | st.lists(st.text(max_size=4), max_size=2),
            ),
            max_size=3,
        ),
    ),
    labels=st.dictionaries(st.text(max_size=4), st.text(max_size=4)),
)
def test_term_matching_never_raises(term: dict[str, Any], labels: dict[str, str]) -> None:
    assert selectors.term_matches(term, "n", labels) in (True, False)


@pytest.mark.parametrize(
    ("operator", "value", "matches"),
    [
        ("In", "a", True),
        ("In", "c", False),
        ("In", None, False),
        ("NotIn", "c", True),
        ("NotIn", "a", False),
        ("NotIn", None, True),  # an absent label is in no set (pkg/labels/selector.go)
        ("Exists", "", True),
        ("Exists", None, False),
        ("DoesNotExist", None, True),
        ("DoesNotExist", "a", False),
        ("Gt", "5", False),  # numeric operators belong to node selectors only
        ("in", "a", False),
        (None, "a", False),
    ],
)
def test_label_selector_requirements(operator: Any, value: str | None, matches: bool) -> None:
    assert selectors.matches_requirement(operator, value, ["a", "b"]) is matches

"""JSON merge patch (RFC 7386, ``webhook.core.mergepatch``): the one ``apply`` and ``diff``
behind the reconciler's repairs and the API twin's merge patches."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webhook.core import mergepatch

KEYS = st.sampled_from(["a", "b", "c", "spec", "labels", "x"])
NOT_NULL = st.booleans() | st.integers(-3, 3) | st.text(max_size=3)


def documents(*, null_members: bool) -> st.SearchStrategy[Any]:
    """JSON documents. Without ``null_members`` no object holds a ``null`` (a merge patch cannot
    say one: it reads as "remove"); a list may hold one either way."""
    leaves = NOT_NULL | st.none() if null_members else NOT_NULL
    return st.recursive(
        leaves,
        lambda inner: (
            st.lists(inner | st.none(), max_size=3) | st.dictionaries(KEYS, inner, max_size=4)
        ),
        max_leaves=12,
    )


OBJECTS = st.dictionaries(KEYS, documents(null_members=True), max_size=5)
TARGETS = st.dictionaries(KEYS, documents(null_members=False), max_size=5)


@given(before=OBJECTS, after=TARGETS)
def test_applying_the_diff_gives_the_after(before: dict[str, Any], after: dict[str, Any]) -> None:
    kept = copy.deepcopy((before, after))
    patch = mergepatch.diff(before, after)
    assert mergepatch.apply(before, patch) == after
    assert (before, after) == kept  # neither changed


@given(before=OBJECTS)
def test_the_diff_of_a_document_with_itself_is_empty(before: dict[str, Any]) -> None:
    assert mergepatch.diff(before, before) == {}


@given(target=OBJECTS, patch=OBJECTS)
def test_the_result_shares_nothing_with_the_patch(
    target: dict[str, Any], patch: dict[str, Any]
) -> None:
    kept = copy.deepcopy(patch)
    result = mergepatch.apply(target, patch)
    for value in result.values():
        if isinstance(value, (dict, list)):
            value.clear()
    assert patch == kept


@pytest.mark.parametrize(
    ("before", "after", "patch"),
    [
        ({"a": 1}, {"a": 1}, {}),
        ({"a": 1, "b": 2}, {"a": 1}, {"b": None}),
        ({"a": {"x": 1, "y": 2}}, {"a": {"x": 1}}, {"a": {"y": None}}),
        ({"a": [1, 2]}, {"a": [1]}, {"a": [1]}),
        ({}, {"a": {"b": 1}}, {"a": {"b": 1}}),
        ({"a": 1}, {"a": {"b": 1}}, {"a": {"b": 1}}),
    ],
)
def test_merge_diff_round_trips(before: Any, after: Any, patch: Any) -> None:
    assert mergepatch.diff(before, after) == patch
    assert mergepatch.apply(before, patch) == after


def test_removed_keys_come_first_in_the_order_they_had() -> None:
    patch = mergepatch.diff({"z": 1, "a": 2, "k": 3}, {"k": 4, "n": 5})
    assert list(patch.items()) == [("z", None), ("a", None), ("k", 4), ("n", 5)]


def test_the_rfc_examples() -> None:
    """RFC 7386, appendix A."""
    cases = [
        ({"a": "b"}, {"a": "c"}, {"a": "c"}),
        ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
        ({"a": "b"}, {"a": None}, {}),
        ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
        ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
        ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
        ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
        ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
        (["a", "b"], ["c", "d"], ["c", "d"]),
        ({"a": "b"}, ["c"], ["c"]),
        ({"a": "foo"}, None, None),
        ({"a": "foo"}, "bar", "bar"),
        ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
        ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
        ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
    ]
    for target, patch, result in cases:
        assert mergepatch.apply(target, patch) == result

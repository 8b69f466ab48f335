"""The object helpers every layer reads objects with. Field names and meanings are those of
k8s.io/apimachinery ``pkg/apis/meta/v1/types.go`` (ObjectMeta, OwnerReference)."""

from __future__ import annotations

import types
from collections import OrderedDict
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.builders import PodBuilder
from webhook.core import objects


@pytest.mark.parametrize(
    ("api_version", "group"),
    [("v1", ""), ("batch/v1", "batch"), ("kubeflow.org/v2beta1", "kubeflow.org"), ("", "")],
)
def test_group_of(api_version: str, group: str) -> None:
    assert objects.group_of(api_version) == group


def test_key_of_names_group_kind_namespace_and_name() -> None:
    pod = PodBuilder("team-a", name="p").obj()
    assert objects.key_of(pod) == ("", "Pod", "team-a", "p")
    assert objects.key_of({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}}) == (
        "",
        "Node",
        "",
        "n",
    )


@pytest.mark.parametrize(
    "value", [{}, {"a": 1}, OrderedDict(a=1), types.MappingProxyType({"a": 1})]
)
def test_mappings_are_mappings(value: Any) -> None:
    assert objects.is_mapping(value)
    assert objects.as_mapping(value) is value


@pytest.mark.parametrize("value", [None, [], [("a", 1)], "a", 1, ("a",)])
def test_anything_else_reads_as_an_empty_mapping(value: Any) -> None:
    assert not objects.is_mapping(value)
    assert objects.as_mapping(value) == {}


def test_as_list_takes_lists_and_tuples_only() -> None:
    assert objects.as_list([1]) == [1]
    assert objects.as_list((1,)) == (1,)
    assert objects.as_list({"a": 1}) == ()
    assert objects.as_list("ab") == ()


def ref(kind: str, controller: bool | None) -> dict[str, Any]:
    out: dict[str, Any] = {"apiVersion": "v1", "kind": kind, "name": kind.lower(), "uid": "u"}
    if controller is not None:
        out["controller"] = controller
    return out


def test_the_controller_is_the_reference_marked_controller_true() -> None:
    pod = PodBuilder(name="p").obj()
    refs = [ref("A", None), "junk", ref("B", False), ref("C", True)]
    pod["metadata"]["ownerReferences"] = refs
    assert list(objects.owner_references(pod)) == [refs[0], refs[2], refs[3]]
    assert objects.controller_ref(pod) == refs[3]


@pytest.mark.parametrize(
    "metadata",
    [
        {},
        {"ownerReferences": None},
        {"ownerReferences": "junk"},
        {"ownerReferences": [ref("A", False)]},
        {"ownerReferences": [{"controller": "true"}]},  # only the boolean counts
    ],
)
def test_no_controller(metadata: Any) -> None:
    assert objects.controller_ref({"metadata": metadata}) is None
    assert objects.controller_ref(None) is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-03-01T12:00:00Z", datetime(2026, 3, 1, 12, tzinfo=UTC)),
        ("2026-03-01T12:00:00+00:00", datetime(2026, 3, 1, 12, tzinfo=UTC)),
        ("2026-03-01T12:00:00", datetime(2026, 3, 1, 12, tzinfo=UTC)),  # naive means UTC
        (
            "2026-03-01T14:00:00.123456+02:00",
            datetime(2026, 3, 1, 14, 0, 0, 123456, tzinfo=timezone(timedelta(hours=2))),
        ),
        ("yesterday", None),
        (None, None),
        (1234, None),
    ],
)
def test_parse_time(value: object, expected: datetime | None) -> None:
    assert objects.parse_time(value) == expected


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=12,
)


@given(
    metadata=_JSON
    | st.fixed_dictionaries(
        {},
        optional={
            "name": _JSON,
            "namespace": _JSON,
            "uid": _JSON,
            "labels": _JSON,
            "annotations": _JSON,
        },
    )
)
def test_metadata_readers_tolerate_any_json(metadata: Any) -> None:
    """Whatever a file or a creator put in ``metadata``, the readers answer and never raise:
    names as strings, labels and annotations as string-to-string mappings."""
    obj = {"metadata": metadata}
    meta = objects.metadata_of(obj)
    assert meta == (metadata if isinstance(metadata, dict) else {})
    assert isinstance(objects.name_of(obj), str)
    assert isinstance(objects.namespace_of(obj), str)
    uid = objects.uid_of(obj)
    assert uid is None or (isinstance(uid, str) and uid)
    for read in (objects.labels_of, objects.annotations_of):
        assert all(type(k) is str and type(v) is str for k, v in read(obj).items())


def test_metadata_readers_read_what_is_there() -> None:
    pod = PodBuilder("team-a", name="p").obj()
    pod["metadata"].update(uid="u-1", labels={"a": "1", "n": 2}, annotations={"x": "y"})
    assert (objects.name_of(pod), objects.namespace_of(pod), objects.uid_of(pod)) == (
        "p",
        "team-a",
        "u-1",
    )
    assert objects.labels_of(pod) == {"a": "1"}  # 2 is no label value
    assert objects.annotations_of(pod) == {"x": "y"}
    assert objects.metadata_of(None) == {} == objects.metadata_of({"metadata": [1]})

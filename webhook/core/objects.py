"""Kubernetes objects as podium reads them: plain camelCase mappings, and the few helpers every
layer needs to name one (its API group, its key) or read one of its fields.

Objects come from anyone who can create a pod (and, offline, from any file handed to ``podium
review``): the readers here tolerate missing and ill-typed fields rather than raise.
"""

from __future__ import annotations

import types
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal, TypeGuard

Obj = Mapping[str, Any]
EventType = Literal["ADDED", "MODIFIED", "DELETED"]
ObjectKey = tuple[str, str, str, str]  # (api group, kind, namespace, name)

_EMPTY: Mapping[str, Any] = types.MappingProxyType({})


def group_of(api_version: str) -> str:
    """The API group of ``group/version`` (``""`` for the core group's ``v1``)."""
    return api_version.split("/", 1)[0] if "/" in api_version else ""


def key_of(obj: Obj) -> ObjectKey:
    meta = metadata_of(obj)
    return (
        group_of(str(obj.get("apiVersion", ""))),
        str(obj.get("kind", "")),
        str(meta.get("namespace") or ""),
        str(meta.get("name") or ""),
    )


def is_mapping(value: object) -> TypeGuard[Mapping[str, Any]]:
    """``isinstance(value, Mapping)``, with parsed JSON's plain dicts checked first (an ABC
    instance check costs ten times a type comparison, and a decision makes dozens)."""
    return type(value) is dict or isinstance(value, Mapping)


def as_mapping(value: object) -> Mapping[str, Any]:
    """``value`` if it is a mapping, else an empty one."""
    return value if is_mapping(value) else _EMPTY


def as_list(value: object) -> Sequence[Any]:
    """``value`` if it is a list (or tuple), else an empty one."""
    return value if isinstance(value, list | tuple) else ()


def metadata_of(obj: object) -> Mapping[str, Any]:
    """The object's ``metadata``: an empty mapping when it is missing or not a mapping. (Read at
    every admission several times: parsed JSON's plain dicts take the short way.)"""
    meta = obj.get("metadata") if type(obj) is dict else as_mapping(obj).get("metadata")
    return meta if type(meta) is dict else as_mapping(meta)


def _strings(value: object) -> Mapping[str, str]:
    values = as_mapping(value)
    for k, v in values.items():  # a loop, not all(genexpr): this runs at every admission
        if type(k) is not str or type(v) is not str:
            return {k: v for k, v in values.items() if isinstance(k, str) and isinstance(v, str)}
    return values


def name_of(obj: object) -> str:
    return str(metadata_of(obj).get("name") or "")


def namespace_of(obj: object) -> str:
    return str(metadata_of(obj).get("namespace") or "")


def labels_of(obj: object) -> Mapping[str, str]:
    """The object's labels; entries whose key or value is not a string are left out."""
    return _strings(metadata_of(obj).get("labels"))


def annotations_of(obj: object) -> Mapping[str, str]:
    """The object's annotations; entries whose key or value is not a string are left out."""
    return _strings(metadata_of(obj).get("annotations"))


def uid_of(obj: object) -> str | None:
    uid = metadata_of(obj).get("uid")
    return uid if isinstance(uid, str) and uid else None


def owner_references(obj: object) -> Iterator[Mapping[str, Any]]:
    """The object's ownerReferences, in order, skipping any that is not a mapping."""
    for ref in as_list(metadata_of(obj).get("ownerReferences")):
        if is_mapping(ref):
            yield ref


def controller_ref(obj: object) -> Mapping[str, Any] | None:
    """The ownerReference marked ``controller: true`` (there is at most one), as it is: callers
    check the fields they use."""
    for ref in owner_references(obj):
        if ref.get("controller") is True:
            return ref
    return None


def parse_time(value: object) -> datetime | None:
    """An RFC 3339 / ISO 8601 timestamp (naive means UTC); None if unreadable."""
    try:
        when = datetime.fromisoformat(str(value))
    except ValueError:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)

"""Kubernetes objects as podium reads them: plain camelCase mappings, and the few helpers every
layer needs to name one (its API group, its key) or read one of its fields."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal

Obj = Mapping[str, Any]
EventType = Literal["ADDED", "MODIFIED", "DELETED"]
ObjectKey = tuple[str, str, str, str]  # (api group, kind, namespace, name)


def group_of(api_version: str) -> str:
    """The API group of ``group/version`` (``""`` for the core group's ``v1``)."""
    return api_version.split("/", 1)[0] if "/" in api_version else ""


def key_of(obj: Obj) -> ObjectKey:
    meta = obj.get("metadata") or {}
    return (
        group_of(str(obj.get("apiVersion", ""))),
        str(obj.get("kind", "")),
        str(meta.get("namespace") or ""),
        str(meta.get("name") or ""),
    )


def parse_time(value: object) -> float | None:
    """An RFC 3339 / ISO 8601 timestamp as POSIX seconds (naive means UTC); None if unreadable."""
    try:
        when = datetime.fromisoformat(str(value))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()

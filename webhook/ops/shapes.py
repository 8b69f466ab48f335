"""Is a hand-written object shaped as the apiserver would send it? One plain line if not.

The apiserver decodes every object into its Go type before a webhook sees it, so podium's
decisions may rely on a pod's field types (``spec.containers`` a list of objects, an env name a
string). A file given to ``podium review`` has had no such decoding. `problem` checks a value
against the Kubernetes type the official client generates from the API's OpenAPI document
(`webhook.ops.podtypes`, copied from ``kubernetes.client.models``, which ``podium review`` does
not load): wrong JSON types are named with their path. Unknown fields pass, as the apiserver
drops them; a null field passes, as the apiserver reads it as unset, but not a null item of a
list or map, which the apiserver would send as an empty value. Quantities (``resources.limits``,
``overhead``, ``sizeLimit``) may be numbers, as the apiserver takes them; a timestamp may be
YAML's own (a datetime).
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Mapping
from typing import Any

from webhook.ops.podtypes import TYPES

__all__ = ["problem", "without_nulls"]

_LIST = re.compile(r"List\[(.+)\]")
_DICT = re.compile(r"Dict\[str, (.+)\]")
#: A map key shown as is in a path; any other is JSON-quoted in brackets.
_PLAIN = re.compile(r"[A-Za-z0-9_-]+")
#: JSON keys whose values are ``resource.Quantity``: a string or a number.
_QUANTITIES = frozenset({"limits", "requests", "overhead", "sizeLimit"})
_JSON_NAMES = {
    bool: "a boolean",
    int: "a number",
    float: "a number",
    str: "a string",
    list: "a list",
    dict: "an object",
}


def problem(value: Any, type_name: str, path: str) -> str | None:
    """The first place where ``value`` is not of the Kubernetes type ``type_name`` (e.g.
    ``"V1Pod"``), as ``"<path>.spec.containers must be a list, not a number"``; None if none."""
    return _check(value, type_name, path, quantity=False)


def without_nulls(value: Any) -> Any:
    """``value`` with every null field dropped, as the apiserver's decoding and encoding drop
    them (``affinity: null`` from a Helm template is no affinity); null list items stay, for
    `problem` to name."""
    if isinstance(value, Mapping):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value


def _check(value: Any, type_name: str, path: str, *, quantity: bool) -> str | None:
    if value is None or type_name == "object":
        return None
    if match := _LIST.fullmatch(type_name):
        if not isinstance(value, list):
            return _wrong(path, "a list", value)
        for index, item in enumerate(value):
            found = _item(item, match[1], f"{path}[{index}]", quantity=quantity)
            if found:
                return found
        return None
    if match := _DICT.fullmatch(type_name):
        if not isinstance(value, Mapping):
            return _wrong(path, "an object", value)
        for key, item in value.items():
            if found := _item(item, match[1], _entry(path, key), quantity=quantity):
                return found
        return None
    if type_name in ("datetime", "date") and isinstance(value, datetime.date):
        return None  # YAML's own timestamp (``creationTimestamp: 2026-12-01T12:00:00Z``)
    if type_name in ("str", "datetime", "date", "bytes"):
        if isinstance(value, str) or (quantity and _is_number(value)):
            return None
        return _wrong(path, "a string or a number" if quantity else "a string", value)
    if type_name == "int":
        return (
            None
            if isinstance(value, int) and not isinstance(value, bool)
            else (_wrong(path, "an integer", value))
        )
    if type_name == "float":
        return None if _is_number(value) else _wrong(path, "a number", value)
    if type_name == "bool":
        return None if isinstance(value, bool) else _wrong(path, "a boolean", value)
    fields = _fields(type_name)
    if fields is None:  # a type this client does not know: nothing to check against
        return None
    if not isinstance(value, Mapping):
        return _wrong(path, "an object", value)
    for key, item in value.items():
        field_type = fields.get(key)
        if field_type is not None and (
            found := _check(item, field_type, _join(path, key), quantity=key in _QUANTITIES)
        ):
            return found
    return None


def _item(value: Any, type_name: str, path: str, *, quantity: bool) -> str | None:
    if value is None and type_name != "object":
        return f"{path} must not be null"
    return _check(value, type_name, path, quantity=quantity)


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def _entry(path: str, key: Any) -> str:
    """A map's entry as ``path.key``, or ``path["key"]`` (JSON-quoted) when the key is not a plain
    name: a label key holds dots and slashes, and any key may hold a newline that would break the
    one-line error."""
    key = str(key)
    return _join(path, key) if _PLAIN.fullmatch(key) else f"{path}[{json.dumps(key)}]"


def _fields(type_name: str) -> dict[str, str] | None:
    """JSON field name -> type name of one model type; None for a type not in the table."""
    return TYPES.get(type_name)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _wrong(path: str, expected: str, value: Any) -> str:
    found = next((name for kind, name in _JSON_NAMES.items() if isinstance(value, kind)), None)
    return f"{path} must be {expected}, not {found or type(value).__name__}"

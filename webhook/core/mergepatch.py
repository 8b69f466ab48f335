"""JSON merge patch (RFC 7386): ``apply`` one, or ``diff`` two documents into one.

The reconciler repairs podium's objects with the patch ``diff`` makes; the in-memory API twin
(``webhook.kube.twins``) applies merge patches with ``apply``, as the apiserver does. A patch's
keys replace the target's, ``null`` removes one, an object merges into an object, anything else
(a list, a scalar) replaces what was there whole. A ``null`` inside ``after`` cannot be said in
a merge patch (it reads as "remove"): ``apply(a, diff(a, b)) == b`` holds for every ``b``
whose objects hold no ``null``.

Libraries were weighed (``json-merge-patch`` on PyPI): it changes its target in place, shares
the patch's values with the result, carries no types, and orders removed keys by a ``set``;
these two functions are the whole of the RFC.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any


def apply(target: Any, patch: Any) -> Any:
    """``target`` with ``patch`` applied; neither is changed, and the result shares nothing
    with ``patch``."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = apply(out.get(key), value)
    return out


def diff(before: Any, after: Any) -> Any:
    """The merge patch that turns ``before`` into ``after``: the keys ``before`` has and
    ``after`` lacks as ``null`` (first, in ``before``'s order), then what ``after`` adds or
    changes (in its order); ``{}`` when nothing changed."""
    if not isinstance(before, Mapping) or not isinstance(after, Mapping):
        return after
    out: dict[str, Any] = {k: None for k in before if k not in after}
    for key, value in after.items():
        if key not in before:
            out[key] = value
        elif before[key] != value:
            out[key] = diff(before[key], value)
    return out

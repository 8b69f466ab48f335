"""Any JSON at any path of a document: the hypothesis strategy for "no input makes it crash".

`changed(base, paths)` draws a copy of ``base`` with one or two of its values (or a new key under
one of its objects) replaced by arbitrary JSON; `json_values` leans towards the strings and
numbers Kubernetes objects hold, so the changes reach past the first type check.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from typing import Any

from hypothesis import strategies as st

Path = tuple[Any, ...]
NEW_KEY = "podium-new-key"

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | st.sampled_from(["", "8", "1Gi", "zone-a", "Always", "In", "CREATE", "v1", "Pod"]),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=8,
)


def paths(value: Any, prefix: Path = ()) -> Iterator[Path]:
    """Every path in ``value`` (the root too), and a new key under every object."""
    yield prefix
    if isinstance(value, dict):
        yield (*prefix, NEW_KEY)
        for key, child in value.items():
            yield from paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from paths(child, (*prefix, index))


def put(doc: Any, path: Path, value: Any) -> Any:
    """``doc`` with ``value`` at ``path`` (in place; the root path returns ``value``)."""
    if not path:
        return value
    parent = doc
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = value
    return doc


@st.composite
def changed(draw: st.DrawFn, base: Any, where: Sequence[Path]) -> tuple[Any, list[Path]]:
    """A deep copy of ``base`` with any JSON at one or two of ``where``; and the paths changed."""
    doc = copy.deepcopy(base)
    done: list[Path] = []
    for _ in range(draw(st.integers(min_value=1, max_value=2))):
        path = draw(st.sampled_from(where))
        try:
            doc = put(doc, path, draw(json_values))
        except (KeyError, IndexError, TypeError):  # the first change removed the path
            continue
        done.append(path)
    return doc, done

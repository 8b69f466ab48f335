from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webhook.core import resources


@pytest.mark.parametrize(
    ("resource", "quantity", "units"),
    [
        ("cpu", "500m", 500),
        ("cpu", "2", 2000),
        ("cpu", 1.5, 1500),
        ("memory", "1Gi", 2**30),
        ("memory", "1k", 1000),
        ("nvidia.com/gpu", "8", 8),
        ("cpu", "1u", 1),
    ],
)
def test_to_units(resource: str, quantity: Any, units: int) -> None:
    assert resources.to_units(resource, quantity) == units


def container(
    requests: dict[str, str] | None = None, limits: dict[str, str] | None = None, **extra: Any
) -> dict[str, Any]:
    res: dict[str, Any] = {}
    if requests:
        res["requests"] = requests
    if limits:
        res["limits"] = limits
    return {"name": "c", "image": "i", "resources": res, **extra}


def test_pod_requests_follow_the_scheduler() -> None:
    spec = {
        "containers": [
            container({"cpu": "1"}, {"nvidia.com/gpu": "8"}),
            container({"cpu": "2", "memory": "1Gi"}),
        ],
        "initContainers": [
            container({"cpu": "8"}),  # a big init runs alone
            container({"cpu": "500m"}, restartPolicy="Always"),  # a sidecar runs alongside
        ],
        "overhead": {"cpu": "100m"},
    }
    # containers 3 cpu + sidecar 0.5 = 3.5; init peak 8 (before the sidecar started); + overhead 0.1
    assert resources.pod_requests(spec) == {
        "cpu": 8100,
        "memory": 2**30,
        "nvidia.com/gpu": 8,
        "pods": 1,
    }


def test_unparsable_quantities_are_ignored() -> None:
    spec = {"containers": [container({"cpu": "lots", "memory": "1Gi"})]}
    assert resources.pod_requests(spec) == {"memory": 2**30, "pods": 1}


junk = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)


@given(
    st.dictionaries(
        st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "x"]), junk | st.text(max_size=12)
    )
)
def test_parse_resource_list_never_raises(values: dict[str, Any]) -> None:
    assert all(isinstance(v, int) for v in resources.parse_resource_list(values).values())

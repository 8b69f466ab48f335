"""Quantities are checked against their grammar in k8s.io/apimachinery
``pkg/api/resource/quantity.go`` (``ParseQuantity``, ``UnmarshalJSON``) and ``suffix.go``, and
against the Python client's ``kubernetes/utils/quantity.py`` wherever that grammar holds."""

from __future__ import annotations

import decimal
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from kubernetes.utils import parse_quantity as client_parse_quantity

from webhook.core import resources

SUFFIXES = ["", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
digits = st.text("0123456789", max_size=24)


@st.composite
def quantities(draw: st.DrawFn) -> str:
    """Any string of ``<signedNumber><suffix>`` (quantity.go's grammar)."""
    sign = draw(st.sampled_from(["", "+", "-"]))
    whole, fraction = draw(digits), draw(digits)
    point = draw(st.booleans())
    if not (whole or (point and fraction)):
        whole = "0"
    number = whole + ("." + fraction if point else "")
    exponent = draw(st.integers(-40, 40))
    suffix = draw(
        st.sampled_from(SUFFIXES)
        | st.sampled_from(["e", "E"]).map(lambda e: f"{e}{exponent:+d}")
        | st.sampled_from(["e", "E"]).map(lambda e: f"{e}{abs(exponent)}")
    )
    return sign + number + suffix


@given(quantities())
@example("1E")  # exa, not an exponent
@example("1.")
@example(".5Ki")
@example("-0")
def test_quantities_parse_as_the_kubernetes_client_parses_them(text: str) -> None:
    with decimal.localcontext(prec=1000):  # the client multiplies in the current context
        expected = client_parse_quantity(text)
    assert resources.parse_quantity(text) == expected


@given(st.text("0123456789.+-eEKMGTPEinumk", max_size=12))
def test_what_parses_is_what_the_client_reads_too(text: str) -> None:
    """The client also takes what the apiserver refuses (``1K``); never the other way round."""
    try:
        ours = resources.parse_quantity(text)
    except ValueError:
        return
    with decimal.localcontext(prec=1000):
        assert ours == client_parse_quantity(text)


@pytest.mark.parametrize(
    ("quantity", "value"),
    [
        ("500m", Decimal("0.5")),
        ("1.5Gi", Decimal(3 * 2**29)),
        ("2e3", Decimal(2000)),
        ("1E", Decimal(10**18)),
        ("1e-3", Decimal("0.001")),
        (".5", Decimal("0.5")),
        ("5.", Decimal(5)),
        ("+1k", Decimal(1000)),
        ("-1Mi", Decimal(-(2**20))),
        (" 1Ki\n", Decimal(1024)),  # UnmarshalJSON trims spaces
        (8, Decimal(8)),
        (0.1, Decimal("0.1")),  # a JSON number is parsed from its text, not its binary value
        (1e20, Decimal(10**20)),
        ("1" * 40 + "Ei", Decimal(int("1" * 40) * 2**60)),  # exact however long
    ],
)
def test_parse_quantity(quantity: Any, value: Decimal) -> None:
    assert resources.parse_quantity(quantity) == value


@pytest.mark.parametrize(
    "quantity",
    [
        *["", ".", "+", "1K", "1ki", "1mi", "1e", "1e3.5", "1.1.1", "1Kii", "1 Ki", "0x10"],
        *["1_000", "inf", "nan", float("inf"), float("nan"), "\u0661"],  # ١: Arabic-Indic one
    ],
)
def test_what_the_apiserver_refuses_is_refused(quantity: Any) -> None:
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        resources.parse_quantity(quantity)


@pytest.mark.parametrize("quantity", [None, True, [1], {"a": 1}, Decimal(1)])
def test_a_quantity_is_a_string_or_a_number(quantity: Any) -> None:
    with pytest.raises(TypeError):
        resources.parse_quantity(quantity)


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
        ("memory", "1.0000000000000000000000000000001", 2),  # no 28-digit rounding
        ("cpu", "1e-999999999", 1),  # rounds up, and quickly
        ("cpu", "-1e-999999999", 0),
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


@pytest.mark.parametrize("quantity", ["1e31", "1e999999999", "9" * 5000])
def test_quantities_no_node_has_are_refused(quantity: str) -> None:
    with pytest.raises(ValueError):
        resources.to_units("memory", quantity)


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


@pytest.mark.parametrize(
    ("resource", "units", "said"),
    [
        ("cpu", 128_000, "128 cpu"),  # millicores, said in cores
        ("cpu", 1_500, "1500m cpu"),
        ("memory", 64 << 30, "64Gi memory"),
        ("memory", 3 << 29, "1.5Gi memory"),
        ("memory", 512 << 20, "512Mi memory"),
        ("memory", 1_000, "1000 memory"),
        ("nvidia.com/gpu", 32, "32 nvidia.com/gpu"),
        ("pods", 4, "4 pods"),
    ],
)
def test_amounts_as_people_read_them(resource: str, units: int, said: str) -> None:
    assert resources.amount(resource, units) == said


def test_several_amounts_put_the_primary_ones_first() -> None:
    amounts = {"memory": 1 << 30, "cpu": 2_000, "nvidia.com/gpu": 8}
    assert resources.describe(amounts) == "8 nvidia.com/gpu, 2 cpu, 1Gi memory"
    assert resources.describe(amounts, like={"cpu": 1}) == "2 cpu"

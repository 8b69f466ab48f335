"""Resource quantities and pod requests, in integer base units.

CPU is counted in millicores, everything else (memory bytes, GPUs, pods) in whole units, so that
capacity arithmetic is exact and cheap.
"""

from __future__ import annotations

import decimal
import math
import re
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

#: Resource name → amount, in base units (cpu: millicores).
Resources = dict[str, int]

PODS = "pods"
MAX_EXPONENT = 30
CPU = "cpu"


#: ``resource.Quantity``'s grammar (k8s.io/apimachinery ``pkg/api/resource/quantity.go``): a
#: signed decimal number, then a binary SI suffix, a decimal SI suffix or a decimal exponent.
_QUANTITY = re.compile(
    r"(?P<sign>[+-]?)(?P<whole>[0-9]*)(?:\.(?P<fraction>[0-9]*))?"
    r"(?:(?P<suffix>[KMGTPE]i|[numkMGTPE])|[eE](?P<exponent>[+-]?[0-9]+))?"
)
#: Suffix → power of 1024 (binary SI) or of 10 (decimal SI), as ``suffix.go`` there lists them.
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
#: Arithmetic that never rounds (the default context keeps 28 digits).
_EXACT = decimal.Context(prec=decimal.MAX_PREC, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)


def parse_quantity(quantity: str | int | float) -> Decimal:
    """A Kubernetes quantity (``"500m"``, ``"1.5Gi"``, ``"2e3"``, ``8``) as its exact value.

    Takes what the apiserver takes from JSON (``Quantity.UnmarshalJSON``: a string or a number,
    surrounding spaces trimmed); raises ValueError for anything else, as ``ParseQuantity`` does.
    The apiserver then rounds up to 1n, which ``to_units`` rounding up to whole units subsumes.
    Unlike ``kubernetes.utils.parse_quantity`` this refuses what the apiserver refuses (``1K``,
    ``inf``, ``1_000``) and never rounds, however many digits a quantity has.
    """
    if isinstance(quantity, bool) or not isinstance(quantity, str | int | float):
        raise TypeError(f"a quantity is a string or a number, not {type(quantity).__name__}")
    text = quantity.strip() if isinstance(quantity, str) else repr(quantity)
    match = _QUANTITY.fullmatch(text)
    if match is None or not (match["whole"] or match["fraction"]):
        raise ValueError(f"{text[:40]!r} is not a Kubernetes quantity")
    fraction = match["fraction"] or ""
    mantissa = int(match["whole"] + fraction or "0")
    exponent = int(match["exponent"] or 0) - len(fraction)
    suffix = match["suffix"]
    if suffix in _BINARY:
        mantissa *= 1024 ** _BINARY[suffix]
    elif suffix:
        exponent += _DECIMAL[suffix]
    # From a string, a Decimal is exact: no context precision rounds it.
    return Decimal(f"{match['sign']}{mantissa}E{exponent}")


def to_units(resource: str, quantity: Any) -> int:
    """Parse a Kubernetes quantity (``"500m"``, ``"1Gi"``, ``8``) into base units, rounding up
    (as ``Quantity.Value`` and ``MilliValue`` do)."""
    amount = parse_quantity(quantity)
    if amount.adjusted() > MAX_EXPONENT:
        # "1e999999999" parses, but rounding it would take forever; no node has that much.
        raise ValueError(f"quantity {str(quantity)[:40]!r} is out of range")
    if resource == CPU:
        amount = amount.scaleb(3, _EXACT)
    return math.ceil(amount)


#: Binary suffixes for byte amounts, largest first.
_BYTES = (("Ei", 60), ("Pi", 50), ("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10))


def amount(resource: str, units: int) -> str:
    """One amount in base units as a person reads it, with its name: ``8 nvidia.com/gpu``,
    ``128 cpu`` (cores), ``1500m cpu``, ``64Gi memory``, ``1.5Gi memory``, ``4 pods``. Bytes take
    the largest binary suffix that leaves at least 1, rounded to one decimal when not exact."""
    if resource == CPU:
        value = f"{units // 1000}" if units % 1000 == 0 else f"{units}m"
    elif resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
        value = str(units)
        for suffix, shift in _BYTES:
            if abs(units) >= 1 << shift:
                exact = units % (1 << shift) == 0
                value = f"{units >> shift if exact else round(units / (1 << shift), 1)}{suffix}"
                break
    else:
        value = str(units)
    return f"{value} {resource}"


def describe(amounts: Mapping[str, Any], *, like: Mapping[str, Any] | None = None) -> str:
    """Several amounts, the primary ones (not cpu, memory, pods) first; only the resources of
    ``like`` when given."""
    names = [n for n in amounts if like is None or n in like]
    names.sort(key=lambda n: (n in (CPU, "memory", PODS), n))
    return ", ".join(amount(n, int(amounts[n])) for n in names)


def parse_resource_list(values: Mapping[str, Any] | None) -> Resources:
    """Parse a ResourceList; an unparsable entry is ignored rather than failing the admission."""
    out: Resources = {}
    for name, quantity in (values or {}).items():
        try:
            out[name] = to_units(name, quantity)
        except (ValueError, TypeError, ArithmeticError):
            continue
    return out


def add(a: Mapping[str, int], b: Mapping[str, int], sign: int = 1) -> Resources:
    out = dict(a)
    for name, amount in b.items():
        out[name] = out.get(name, 0) + sign * amount
    return out


def fits(need: Mapping[str, int], free: Mapping[str, int]) -> bool:
    return all(amount <= free.get(name, 0) for name, amount in need.items() if amount > 0)


def _container_requests(container: Mapping[str, Any]) -> Resources:
    # The apiserver defaults requests from limits; at admission time that has already happened for
    # persisted pods but not always for the object in a review, so do the same here.
    res = container.get("resources") or {}
    requests = parse_resource_list(res.get("limits"))
    requests.update(parse_resource_list(res.get("requests")))
    return requests


def pod_requests(spec: Mapping[str, Any]) -> Resources:
    """What the scheduler reserves for a pod: containers and sidecars, the largest init, overhead.

    Mirrors ``k8s.io/component-helpers/resource.PodRequests`` closely enough for zone sizing:
    regular init containers run one at a time (their max counts), restartable (sidecar) init
    containers keep running alongside everything started after them. Always counts one pod slot.
    """
    total: Resources = {}
    for container in spec.get("containers") or []:
        total = add(total, _container_requests(container))
    init_peak: Resources = {}
    sidecars: Resources = {}
    for container in spec.get("initContainers") or []:
        req = _container_requests(container)
        if container.get("restartPolicy") == "Always":
            sidecars = add(sidecars, req)
            total = add(total, req)
        else:
            running = add(req, sidecars)
            for name, amount in running.items():
                init_peak[name] = max(init_peak.get(name, 0), amount)
    for name, amount in init_peak.items():
        total[name] = max(total.get(name, 0), amount)
    total = add(total, parse_resource_list(spec.get("overhead")))
    total[PODS] = 1
    return total


def requests_shape(spec: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """A hashable summary of everything ``pod_requests`` reads from a pod spec, or None when the
    spec is not shaped like one. Hashing it raises TypeError for an unhashable quantity."""
    parts: list[Any] = []
    for field in ("containers", "initContainers"):
        containers = spec.get(field) or []
        if not isinstance(containers, list):
            return None
        for container in containers:
            if not isinstance(container, Mapping):
                return None
            res = container.get("resources") or {}
            if not isinstance(res, Mapping):
                return None
            limits, requests = res.get("limits") or {}, res.get("requests") or {}
            if not isinstance(limits, Mapping) or not isinstance(requests, Mapping):
                return None
            parts.append(
                (field, container.get("restartPolicy"), *limits.items(), None, *requests.items())
            )
    overhead = spec.get("overhead") or {}
    if not isinstance(overhead, Mapping):
        return None
    parts.append(tuple(overhead.items()))
    return tuple(parts)


class ByShape:
    """``compute(spec)`` once per distinct ``requests_shape``: thousands of pods (and every
    admission of a job's pods) share a handful of shapes, and parsing quantities is slow.

    The results are shared between callers and must not be changed. At most ``max_size`` shapes
    are kept; the memo starts afresh when it is full."""

    def __init__(
        self, compute: Callable[[Mapping[str, Any]], Resources], max_size: int = 4096
    ) -> None:
        self._compute = compute
        self._max_size = max_size
        self._known: dict[tuple[Any, ...], Resources] = {}

    def __call__(self, spec: Mapping[str, Any]) -> Resources:
        try:
            key = requests_shape(spec)
            known = self._known.get(key) if key is not None else None
        except TypeError:  # an unhashable quantity
            key = known = None
        if known is not None:
            return known
        parsed = self._compute(spec)
        if key is not None:
            if len(self._known) >= self._max_size:
                self._known.clear()
            self._known[key] = parsed
        return parsed

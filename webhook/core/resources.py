"""Resource quantities and pod requests, in integer base units.

CPU is counted in millicores, everything else (memory bytes, GPUs, pods) in whole units, so that
capacity arithmetic is exact and cheap.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

from kubernetes.utils import parse_quantity

#: Resource name → amount, in base units (cpu: millicores).
Resources = dict[str, int]

PODS = "pods"
MAX_EXPONENT = 30
CPU = "cpu"


def to_units(resource: str, quantity: Any) -> int:
    """Parse a Kubernetes quantity (``"500m"``, ``"1Gi"``, ``8``) into base units, rounding up."""
    amount: Decimal = parse_quantity(quantity)  # type: ignore[no-untyped-call]
    if not amount.is_finite() or amount.adjusted() > MAX_EXPONENT:
        # "1e999999999" parses, but rounding it would take forever; no node has that much.
        raise ValueError(f"quantity {quantity!r} is out of range")
    if resource == CPU:
        amount *= 1000
    return math.ceil(amount)


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

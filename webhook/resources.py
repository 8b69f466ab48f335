"""Resource quantities and pod requests, in integer base units.

CPU is counted in millicores, everything else (memory bytes, GPUs, pods) in whole units, so that
capacity arithmetic is exact and cheap.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
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


def scale(a: Mapping[str, int], factor: int) -> Resources:
    return {name: amount * factor for name, amount in a.items()}


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


def sum_resources(items: Iterable[Mapping[str, int]]) -> Resources:
    total: Resources = {}
    for item in items:
        total = add(total, item)
    return total

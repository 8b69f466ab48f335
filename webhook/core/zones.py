"""Choose one zone for a gang, with the reason, from a cluster view. Pure.

Order (first that applies wins): (a) the zone already recorded for the gang; (b) the zone of
its pods already bound to nodes, the coordinator's first; (c) the single zone the pod's own
constraint allows; (d) among zones with room for the *whole* gang, the best fit; (e) no zone has
room: the zone with the most free capacity (and a warning), or no zone, as configured.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from enum import StrEnum

from webhook.core import resources, selectors
from webhook.core.adapters.base import PodGroup, total_of
from webhook.core.objects import Obj
from webhook.core.settings import NoFit, Placement, Settings
from webhook.core.view import View


class Reason(StrEnum):
    RECORDED = "recorded"
    COORDINATOR_PLACED = "coordinator-placed"
    MEMBERS_PLACED = "members-placed"
    POD_CONSTRAINT = "pod-constraint"
    BEST_FIT = "best-fit"
    MOST_FREE = "most-free"
    NO_FIT_MOST_FREE = "no-fit-most-free"
    NO_FIT_UNPINNED = "no-fit-unpinned"
    NO_ZONES = "no-zones"


@dataclasses.dataclass(frozen=True, slots=True)
class ZoneCapacity:
    """What one zone offered this gang: free capacity (after reservations) and whether it fits."""

    zone: str
    nodes: int
    free: resources.Resources
    fits: bool

    def as_dict(self) -> dict[str, object]:
        return {"zone": self.zone, "nodes": self.nodes, "free": self.free, "fits": self.fits}


@dataclasses.dataclass(frozen=True, slots=True)
class Placed:
    """A member of the gang already bound to a node in ``zone``."""

    zone: str
    coordinator: bool


@dataclasses.dataclass(frozen=True, slots=True)
class ZoneChoice:
    zone: str | None
    reason: Reason
    detail: str
    capacity: tuple[ZoneCapacity, ...] = ()
    warnings: tuple[str, ...] = ()


def choose_zone(
    *,
    pod_spec: Obj,
    demand: Sequence[PodGroup],
    recorded_zone: str | None,
    placed: Sequence[Placed],
    view: View,
    settings: Settings,
    reserved: Callable[[], Mapping[str, resources.Resources]],
) -> ZoneChoice:
    """``reserved`` is called only when capacity decides: reading the recent decisions is the
    costliest part, and most admissions (every pod after a job's first) never need it."""
    if recorded_zone:
        return ZoneChoice(
            recorded_zone, Reason.RECORDED, f"zone {recorded_zone} recorded for the job"
        )
    if placed:
        return _from_placed(placed)
    allowed = selectors.pinned_zones(pod_spec, settings.zone_label)
    if allowed is not None and len(allowed) == 1:
        (zone,) = allowed
        return ZoneChoice(zone, Reason.POD_CONSTRAINT, f"the pod already requires zone {zone}")
    return _by_capacity(pod_spec, demand, view, settings, allowed, reserved())


def _from_placed(placed: Sequence[Placed]) -> ZoneChoice:
    zones = Counter(p.zone for p in placed)
    warnings: tuple[str, ...] = ()
    if len(zones) > 1:
        spread = ", ".join(f"{z}: {n}" for z, n in sorted(zones.items()))
        warnings = (f"pods of this job already run in several zones ({spread})",)
    coordinator = sorted(p.zone for p in placed if p.coordinator)
    if coordinator:
        zone = coordinator[0]
        return ZoneChoice(
            zone, Reason.COORDINATOR_PLACED, f"the coordinator runs in {zone}", warnings=warnings
        )
    zone = min(zones, key=lambda z: (-zones[z], z))
    return ZoneChoice(
        zone,
        Reason.MEMBERS_PLACED,
        f"{zones[zone]} pod(s) of the job run in {zone}",
        warnings=warnings,
    )


def _primary(total: Mapping[str, int], settings: Settings) -> str:
    return settings.primary_resource if total.get(settings.primary_resource) else resources.CPU


def _by_capacity(
    pod_spec: Obj,
    demand: Sequence[PodGroup],
    view: View,
    settings: Settings,
    allowed: frozenset[str] | None,
    reserved: Mapping[str, resources.Resources],
) -> ZoneChoice:
    by_zone = {
        zone: nodes
        for zone, nodes in view.candidate_zones(pod_spec).items()
        if allowed is None or zone in allowed
    }
    if not by_zone:
        return ZoneChoice(
            None,
            Reason.NO_ZONES,
            "no Ready, schedulable node in any zone admits the pod",
            warnings=("podium found no zone for this pod; it is left unpinned",),
        )
    total = total_of(demand)
    primary = _primary(total, settings)
    capacity = []
    for zone in sorted(by_zone):
        nodes = by_zone[zone]
        zone_free = resources.add(nodes.free(), reserved.get(zone, {}), sign=-1)
        fits = resources.fits(total, zone_free) and _packs(demand, nodes.frees(), primary)
        capacity.append(ZoneCapacity(zone, len(nodes.nodes), zone_free, fits))
    summary = f"{total.get(primary, 0)} {primary} for {sum(g.count for g in demand)} pod(s)"
    if any(c.fits for c in capacity):
        return _fitting(
            tuple(capacity),
            need=total.get(primary, 0),
            primary=primary,
            summary=summary,
            placement=settings.placement,
        )
    return _no_fit(tuple(capacity), primary=primary, summary=summary, no_fit=settings.no_fit)


def _fitting(
    capacity: tuple[ZoneCapacity, ...],
    *,
    need: int,
    primary: str,
    summary: str,
    placement: Placement,
) -> ZoneChoice:
    """Of the zones the whole job fits in, the tightest (best-fit) or the roomiest."""
    fitting = [c for c in capacity if c.fits]
    if placement is Placement.BEST_FIT:
        best = min(fitting, key=lambda c: (c.free.get(primary, 0) - need, c.zone))
        return ZoneChoice(
            best.zone,
            Reason.BEST_FIT,
            f"{best.zone} fits the whole job ({summary}) most tightly",
            capacity,
        )
    best = min(fitting, key=lambda c: (-c.free.get(primary, 0), c.zone))
    return ZoneChoice(
        best.zone,
        Reason.MOST_FREE,
        f"{best.zone} fits the whole job ({summary}) with the most room",
        capacity,
    )


def _no_fit(
    capacity: tuple[ZoneCapacity, ...], *, primary: str, summary: str, no_fit: NoFit
) -> ZoneChoice:
    """No zone fits the whole job: the roomiest zone, or none (``no-fit``)."""
    roomiest = min(capacity, key=lambda c: (-c.free.get(primary, 0), c.zone))
    if no_fit is NoFit.PIN_MOST_FREE:
        return ZoneChoice(
            roomiest.zone,
            Reason.NO_FIT_MOST_FREE,
            f"no zone has room for the whole job ({summary}); {roomiest.zone} has the most",
            capacity,
            (
                f"no zone has room for the whole job ({summary}); pinned to {roomiest.zone}, "
                "which has the most free capacity, so some pods may stay Pending",
            ),
        )
    return ZoneChoice(
        None,
        Reason.NO_FIT_UNPINNED,
        f"no zone has room for the whole job ({summary})",
        capacity,
        (
            f"no zone has room for the whole job ({summary}); the pod is left unpinned and the job "
            "may be split across zones",
        ),
    )


def _packs(demand: Iterable[PodGroup], frees: Iterable[resources.Resources], primary: str) -> bool:
    """Can every pod of the gang be placed on some node? Largest pods first, whole groups at a time.

    First-fit decreasing on the primary resource: cheap (groups × nodes), and it catches the case
    an aggregate check misses — 16 free GPUs spread as 2 per node do not hold two 8-GPU pods.
    Nodes are read from ``frees`` only as far as packing gets: a gang that fits early in a big
    zone costs a few nodes, not the zone.
    """
    source = iter(frees)
    free: list[resources.Resources] = []
    for group in sorted(demand, key=lambda g: g.requests.get(primary, 0), reverse=True):
        left = group.count
        need = {k: v for k, v in group.requests.items() if v > 0}
        at = 0
        while left:
            if at == len(free):
                more = next(source, None)
                if more is None:
                    break
                free.append(dict(more))
            node_free = free[at]
            at += 1
            take = _how_many(node_free, need, left)
            for k, v in need.items():
                node_free[k] = node_free.get(k, 0) - v * take
            left -= take
        if left:
            return False
    return True


def _how_many(node_free: resources.Resources, need: Mapping[str, int], most: int) -> int:
    """How many pods that each need ``need`` (all positive) fit on a node with ``node_free``,
    at most ``most``; stops at the first resource that allows none (most nodes, in a busy zone)."""
    for k, v in need.items():
        room = node_free.get(k, 0) // v
        if room < most:
            if room <= 0:
                return 0
            most = room
    return most


def pack_into(demand: Iterable[PodGroup], free: list[resources.Resources], primary: str) -> bool:
    """``_packs`` on nodes whose free capacity is held in ``free`` (one mutable map per node),
    taking from it what the pods that fit use; True when every pod found a node. The releaser
    packs first the pods already heading for a zone, then the gang it is deciding for."""
    ok = True
    for group in sorted(demand, key=lambda g: g.requests.get(primary, 0), reverse=True):
        left = group.count
        need = {k: v for k, v in group.requests.items() if v > 0}
        for node_free in free:
            if not left:
                break
            take = _how_many(node_free, need, left)
            for k, v in need.items():
                node_free[k] = node_free.get(k, 0) - v * take
            left -= take
        ok = ok and not left
    return ok


#: ``spread_into`` places at most this many pods one by one; any beyond (only a malformed job
#: asks for so many) are packed first-fit, so a pass stays bounded whatever a job spec says.
SPREAD_LIMIT = 10_000


def spread_into(demand: Iterable[PodGroup], free: list[resources.Resources], primary: str) -> bool:
    """Like ``pack_into``, but each pod goes to the node with the most of the primary resource
    free among those that can take it: the way kube-scheduler's default scoring
    (``LeastAllocated``) spreads pods that are on their way to a zone. The releaser counts the
    pods it released that have not bound yet this way. Packed first-fit they would leave whole
    nodes free that the scheduler in fact takes apart, and a gang of whole-node pods would be
    released into room that is not there. Largest pods first; True when every pod found a node."""
    heap = [(-node.get(primary, 0), i) for i, node in enumerate(free)]
    heapq.heapify(heap)
    budget, ok = SPREAD_LIMIT, True
    for group in sorted(demand, key=lambda g: g.requests.get(primary, 0), reverse=True):
        need = {k: v for k, v in group.requests.items() if v > 0}
        left = group.count if need else 0  # a pod that asks for nothing takes no room
        while left and budget:
            budget -= 1
            if not _take_most_free(heap, free, need, primary):
                ok, left = False, 0  # no node takes one more: none takes the rest
                break
            left -= 1
        if left:
            ok = pack_into([PodGroup(left, group.requests)], free, primary) and ok
    return ok


def _take_most_free(
    heap: list[tuple[int, int]],
    free: list[resources.Resources],
    need: Mapping[str, int],
    primary: str,
) -> bool:
    """Take ``need`` from the node with the most ``primary`` free that has all of it; ``heap``
    orders ``free``'s nodes by that, as (-free primary, index), and is kept so."""
    passed = []
    taken = False
    while heap and not taken:
        item = heapq.heappop(heap)
        node = free[item[1]]
        if taken := all(node.get(k, 0) >= v for k, v in need.items()):
            for k, v in need.items():
                node[k] = node.get(k, 0) - v
            item = (-node.get(primary, 0), item[1])
        passed.append(item)
    for item in passed:
        heapq.heappush(heap, item)
    return taken


def primary_of(total: Mapping[str, int], settings: Settings) -> str:
    """The resource that ranks zones for a gang: ``primary-resource`` if it asks for any."""
    return _primary(total, settings)

"""How a held gang fits each zone its pods may use, node by node, the pods heading there counted.
Pure.

``Fit.of`` asks, for each zone of the nodes the gang's pods may use (``constraint_of``), whether
it packs into the room ``Heading`` leaves there (``zones.pack_into``) and whether the zone could
hold it were it empty; ``place`` chooses among the zones where it fits (``placement``).
``Heading`` counts the pods that will take room though the view does not count them yet: those
released and not bound, those of a released gang not created yet (``_unborn``), and the gangs
this pass releases.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import datetime

from webhook.core import adapters, labels, neverfits, policies, records, resources, topology, zones
from webhook.core.adapters.base import PodGroup, job_of_gang, total_of
from webhook.core.objects import Obj, parse_time
from webhook.core.release.gangs import HeldGang
from webhook.core.settings import Placement, Settings
from webhook.core.view import TERMINAL_PHASES, ClusterView, PodSummary, ZoneNodes


@dataclasses.dataclass(frozen=True, slots=True)
class ZoneFit:
    fits: bool
    #: Free primary resource left for the gang once the pods heading there are counted.
    free: int
    #: The zone's whole allocatable could hold the gang (were it empty).
    could_hold: bool
    #: ``free`` node by node (``neverfits.per_node`` says it).
    per_node: tuple[int, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class Fit:
    primary: str
    need: int
    zones: Mapping[str, ZoneFit]

    @property
    def could_hold(self) -> bool:
        return any(z.could_hold for z in self.zones.values())

    @property
    def closest(self) -> str | None:
        """The zone the gang comes closest to fitting in: the most free among those that could
        hold it."""
        able = [(-z.free, name) for name, z in self.zones.items() if z.could_hold]
        return min(able)[1] if able else None

    @property
    def roomiest(self) -> tuple[str | None, int]:
        if not self.zones:
            return None, 0
        free, name = min((-z.free, name) for name, z in self.zones.items())
        return name, -free

    @classmethod
    def of(
        cls,
        held: HeldGang,
        view: ClusterView,
        settings: Settings,
        heading: Heading,
    ) -> Fit:
        gang = held.gang
        primary = zones.primary_of(gang.total, settings)
        constraint = constraint_of(held)
        out = {}
        for zone, nodes in sorted(view.candidate_zones(constraint).items()):
            out[zone] = _zone_fit(heading.room(zone, nodes, primary), nodes, gang.demand, primary)
        return cls(primary, gang.total.get(primary, 0), out)


def constraint_of(held: HeldGang) -> Obj:
    """Where the gang's pods may go: the constraint of its held pod that asks most of the
    primary resource (the workers, not a CPU-only launcher)."""
    widest = max(held.held, key=lambda p: sum(p.requests.values()))
    return widest.constraint or {}


def _zone_fit(
    room: Sequence[resources.Resources],
    nodes: ZoneNodes,
    demand: Sequence[PodGroup],
    primary: str,
) -> ZoneFit:
    """How the gang fits the zone's ``room`` (``Heading.room``), and whether it could fit the
    zone empty. Packing is node by node; the sums rule out first what cannot fit at all."""
    per_node = tuple(max(0, f.get(primary, 0)) for f in room)
    left = sum(per_node)
    need = total_of(demand).get(primary, 0)
    fits = need <= left and zones.pack_into(demand, [dict(f) for f in room], primary)
    total = nodes.allocatable.get(primary, 0)
    could_hold = fits or neverfits.could_hold(
        demand, [dict(n.allocatable) for n in nodes.nodes.values()], primary, total=total
    )
    return ZoneFit(fits, left, could_hold, per_node)


class Heading:
    """Per zone, the pods that will take room there though the view does not count them yet:
    those released into it that are not bound yet, those of a gang released into it that are not
    created yet (``_unborn``), and the gangs this pass releases. ``room`` spreads them over a
    zone's nodes once per pass and node set, not once per held gang."""

    def __init__(self, view: ClusterView, settings: Settings, now: datetime) -> None:
        self._view = view
        self._groups: dict[str, list[PodGroup]] = {}
        #: ``topology-levels``: per zone, the groups heading into a domain of it, and the rest.
        self._bound: dict[str, list[tuple[topology.Domain, Sequence[PodGroup]]]] = {}
        self._loose: dict[str, list[PodGroup]] = {}
        #: (a zone's candidate nodes, how many groups head there) → the room per node.
        self._rooms: dict[tuple[ZoneNodes, int], list[resources.Resources]] = {}
        for namespace, key in set(view.gangs()):
            pods = list(view.pod_summaries(namespace, {labels.JOB: key}))
            for pod in pods:
                zone = pod.labels.get(labels.ZONE)
                if zone and pod.pending and not pod.gated:
                    domain = topology.parse(pod.annotations.get(labels.TOPOLOGY) or "")
                    self.add(zone, (PodGroup(1, pod.requests),), domain)
            for zone, (domain, groups) in _unborn(
                view, settings, now, namespace, key, pods
            ).items():
                self.add(zone, groups, domain)

    def add(self, zone: str, groups: Sequence[PodGroup], domain: topology.Domain = ()) -> None:
        self._groups.setdefault(zone, []).extend(groups)
        if domain:
            self._bound.setdefault(zone, []).append((domain, groups))
        else:
            self._loose.setdefault(zone, []).extend(groups)

    def _domain_room(self, zone: str, nodes: ZoneNodes, primary: str) -> list[resources.Resources]:
        """``room`` for ``topology``: the pods heading into a domain of the zone spread over
        that domain's nodes (their node selection keeps them there), the rest over the zone."""
        infos = list(nodes.nodes.values())
        room = [dict(self._view.free_on(n)) for n in infos]
        for domain, groups in self._bound.get(zone, ()):
            selected = topology.selects(domain)
            inside = [room[i] for i, n in enumerate(infos) if selected(n.labels)]
            zones.spread_into(groups, inside, primary)
        zones.spread_into(self._loose.get(zone, ()), room, primary)
        return room

    def groups(self, zone: str) -> Sequence[PodGroup]:
        return self._groups.get(zone, ())

    def room(self, zone: str, nodes: ZoneNodes, primary: str) -> list[resources.Resources]:
        """Free capacity per node of ``nodes`` (in ``zone``) once the pods heading there take
        theirs, each on the node with the most free (``zones.spread_into``): where they land is
        not known until they bind; those released into a domain below the zone inside that
        domain (``_domain_room``). Shared: do not change it."""
        heading = self.groups(zone)
        key = (nodes, len(heading))  # ZoneNodes hash by identity; the list only grows
        room = self._rooms.get(key)
        if room is None and self._bound.get(zone):  # some head into a domain: kept inside it
            room = self._rooms[key] = self._domain_room(zone, nodes, primary)
        if room is None:
            room = [dict(self._view.free_on(n)) for n in nodes.nodes.values()]
            zones.spread_into(heading, room, primary)
            self._rooms[key] = room
        return room


def _unborn(
    view: ClusterView,
    settings: Settings,
    now: datetime,
    namespace: str,
    key: str,
    pods: Sequence[PodSummary],
) -> dict[str, tuple[topology.Domain, list[PodGroup]]]:
    """The pods of a released gang that its operator has not created yet — the later stages
    of a staged start (MPI's launcher, LWS's workers, JobSet's later replicated jobs) — in the
    zone it was released into, and inside the domain below it its record names (they will follow
    it): room kept for them until they come and bind. Only while some pod
    of the gang runs or waits there (a gang all of whose pods finished or went keeps nothing)
    and for ``reservation-seconds`` after the decision, like admission's reservations
    (``ClusterView.reserved``). Pods of any phase count as created."""
    alive = [p for p in pods if not p.gated and p.phase not in TERMINAL_PHASES]
    zone = next((z for p in alive if (z := p.labels.get(labels.ZONE))), None)
    owner = job_of_gang(key, view) if zone else {}
    if not zone or not owner:
        return {}
    name = labels.object_name(str(owner["kind"]), str(owner["name"]), key)
    obj = view.get(policies.RECORD_API_VERSION, policies.RECORD_KIND, namespace, name)
    record = records.read_record(obj, key)
    decided = parse_time(record.decided_at) if record is not None else None
    if record is None or record.zone != zone or decided is None:
        return {}
    if (now - decided).total_seconds() > settings.reservation_seconds:
        return {}
    created: resources.Resources = {}
    for pod in pods:
        created = resources.add(created, pod.requests)
    if all(created.get(k, 0) >= v for k, v in record.demand.items()):
        return {}  # every pod the record stands for exists: nothing to keep room for
    gang = adapters.recognise(alive[0].as_object(), namespace, view)
    if gang is None or gang.key != key:
        return {}
    return {zone: (topology.parse(record.domain), _missing(gang.demand, pods))}


def _missing(demand: Sequence[PodGroup], pods: Sequence[PodSummary]) -> list[PodGroup]:
    """The groups of ``demand`` less one pod per pod present with the same requests."""
    present = [p.requests for p in pods]
    out = []
    for group in demand:
        count = group.count
        while count and group.requests in present:
            present.remove(group.requests)
            count -= 1
        if count:
            out.append(PodGroup(count, group.requests))
    return out


def place(fitting: Mapping[str, ZoneFit], fit: Fit, settings: Settings) -> tuple[str, str]:
    if settings.placement is Placement.BEST_FIT:
        return min(fitting, key=lambda z: (fitting[z].free - fit.need, z)), "best-fit"
    return min(fitting, key=lambda z: (-fitting[z].free, z)), "most-free"

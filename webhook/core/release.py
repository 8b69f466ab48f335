"""Which held gangs to release now, into which zone, and why the others wait. Pure.

``zone-chooser: hold`` admits a new gang's pods behind podium's scheduling gate
(``labels.HOLD_GATE``, ``mutation.hold``). ``plan(view, settings, now=...)`` reads the view and
answers, per held gang, either ``Release`` (the zone, the record and policy to write first, the
pods to ungate) or ``Wait`` (why, and its place in line). ``webhook.serve.releaser`` carries a
plan out. The rules, in the order they apply:

* **Completion.** A gang with a record naming a zone and some pod already released is committed
  to that zone: every pod still gated is released into it at once, without a fit check (a leader
  that died half-way through a release leaves exactly this, and the next pass finishes it).
* **Following.** A gang with members bound to a node that podium never held (``core.running``:
  created before its namespace opted in, while podium was down, or placed by someone else) is
  released at once into the zone they run in (the coordinator's first), without a fit check:
  those pods are never gated, so the gang would never be ready.
* **Ready.** A gang is decided only when the pods it needs exist (held + released, not
  finished; ``needed``): its size read from the job, or — for an elastic job or a staged start
  (``adapters.first_stage``) — the pods its operator creates first: an elastic PyTorchJob's
  ``elasticPolicy.minReplicas`` workers, MPI's workers under ``WaitForWorkersReady`` (the
  launcher comes once they are ready), JobSet's first replicated job under ``InOrder`` or those
  without ``dependsOn``, an LWS group's leader under ``LeaderReady``. Its whole demand is still
  what must fit, and once released the pods still to come keep their room in its zone
  (``_unborn``) until they are created and bind. Where the job cannot tell (a guessed size, an
  autoscaled RayCluster, a Volcano job: ``podgroups.unfit``), or a gang decided before has no
  pod left running (its first stage finished), the pods present are taken once their count has
  not changed since the previous pass (``stable``).
* **Fit, node by node.** On the nodes of a zone the gang's pods may use (``candidate_zones`` of
  one held pod's constraint), minus bound pods (the view), first the pods already heading there
  (released, not yet bound: they reserve room until they bind, finish or go) and the gangs this
  pass released there are placed as kube-scheduler's default scoring spreads them, each on the
  node with the most free (``zones.spread_into``: where they will land is not known until they
  bind, and first-fit would leave whole nodes free that the scheduler takes apart), then the
  gang is packed (first-fit decreasing on the primary resource, ``zones.pack_into``). Among
  zones where the whole gang fits, ``placement`` chooses.
* **Order.** Held gangs are walked oldest first (the creationTimestamp of their oldest held pod;
  ties by gang key). With ``hold-order: oldest-first`` (the default) the first ready gang that
  fits nowhere becomes the **head**: it reserves the zone where it comes closest (the most free
  primary resource among zones whose whole allocatable could hold it), and later gangs may
  backfill only into other zones. Small gangs thus use room a big one cannot use yet, never the
  zone it waits for; one head per pass. With ``fit-first`` there is no head: every gang that
  fits somewhere goes.
* **Buffers** (``capacity-buffers: on``, ``buffers``). A ready gang that fits no zone, before the
  rules below, gets a CapacityBuffer in the zone where the fewest new nodes make it fit: it waits
  for the autoscaler as the head (that zone kept for it), and neither the too-big wait nor the
  timeout applies while its buffer asks. A gang over a cap, or whose buffer was stopped at its
  deadline, goes on to the rules below, its why saying so.
* **Too big.** A gang no zone could hold even empty (``neverfits``: every node its pods may use
  free) waits, said at once — before its last pod exists when the job tells its size — with the
  ways out, until an admin acts (``too-big: hold``), or is released unpinned with a job-wide
  policy once ready (``too-big: spread``).
* **Timeout.** A gang held longer than ``hold-timeout-seconds`` that still fits nowhere is
  released as ``no-fit`` says: pinned to the roomiest zone (so an autoscaler, which never scales
  up for gated pods, scales that zone) or unpinned.
* **Re-decision.** A gang with a record but no pod released is decided like a new one; its record
  is replaced with the new zone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta

from webhook.core import (
    adapters,
    buffers,
    labels,
    mutation,
    neverfits,
    podgroups,
    policies,
    records,
    resources,
    running,
    topology,
    zones,
)
from webhook.core.adapters.base import Gang, PodGroup, Stage, job_of_gang, total_of
from webhook.core.objects import Obj, parse_time, uid_of
from webhook.core.policies import Manifest
from webhook.core.records import Record
from webhook.core.settings import CapacityBuffers, HoldOrder, NoFit, Placement, Settings, TooBig
from webhook.core.view import (
    TERMINAL_PHASES,
    ClusterView,
    NodeInfo,
    PodSummary,
    ZoneNodes,
    has_gate,
)

#: Reasons a gang is released (``podium_releases_total{reason}``), beside ``placement``'s own.
COMPLETED = "completed"
TIMEOUT = "hold-timeout"
TOO_BIG_SPREAD = "too-big-spread"
ADMIN = "admin"


@dataclasses.dataclass(frozen=True, slots=True)
class PodRef:
    namespace: str
    name: str
    uid: str


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class HeldGang:
    """A gang with at least one pod behind podium's gate."""

    namespace: str
    gang: Gang
    held: tuple[PodSummary, ...]
    released: tuple[PodSummary, ...]
    record: Record | None
    #: The oldest held pod's creationTimestamp (its place in line, and how long it has waited).
    since: datetime | None

    @property
    def key(self) -> str:
        return self.gang.key

    @property
    def record_name(self) -> str:
        owner = self.gang.owner
        return labels.object_name(owner.kind, owner.name, self.gang.key)

    def waited(self, now: datetime) -> float:
        return max(0.0, (now - self.since).total_seconds()) if self.since else 0.0


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Release:
    held: HeldGang
    zone: str | None
    reason: str
    detail: str
    #: The record to write before any pod is ungated (None: it exists, completion); ``replace``:
    #: it exists with another decision (a re-decision) and is overwritten.
    record: Manifest | None
    replace: bool
    policies: tuple[Manifest, ...]
    policy_name: str | None
    pods: tuple[PodRef, ...]
    waited_seconds: float
    #: Who asked for an admin release (``podium release``); empty for the releaser's own.
    by: str = ""
    #: ``topology-levels``: the domain below the zone the pods are released into
    #: (``topology.describe``; empty: the zone alone), and why that one (or why none).
    domain: str = ""
    topology: str = ""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Wait:
    held: HeldGang
    why: str
    #: Place in line among the ready gangs that wait (1 = the head); 0 when not ready yet.
    position: int
    too_big: bool = False
    best_zone: str | None = None
    best_free: int = 0
    #: Why no zone could ever hold it (``too_big``): the numbers behind ``why``.
    never: neverfits.NeverFits | None = None
    #: ``topology-levels``: why the level it requires has no domain with room (else empty).
    topology: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class Plan:
    releases: tuple[Release, ...]
    waits: tuple[Wait, ...]
    #: Held pods per gang key this pass, for the next pass's ``stable``.
    counts: Mapping[str, int]
    #: ``capacity-buffers: on``: the buffer each held gang that fits nowhere should have
    #: (``buffers.Grower``), and podium's buffers no gang wants any more (to delete).
    grow: tuple[buffers.Want, ...] = ()
    unwanted: tuple[buffers.Existing, ...] = ()


def held_gangs(view: ClusterView, settings: Settings) -> list[HeldGang]:
    """Every gang with a pod behind podium's gate in a namespace that opted in, oldest first."""
    out = []
    for namespace, key in view.held_gangs():
        if settings.skips_namespace(namespace):
            continue
        members = [
            p
            for p in view.pod_summaries(namespace, {labels.JOB: key})
            if p.phase not in TERMINAL_PHASES
        ]
        held = tuple(p for p in members if p.gated)
        if not held:
            continue
        gang = adapters.recognise(held[0].as_object(), namespace, view)
        if gang is None or gang.key != key or view.by_uid(gang.owner.uid) is None:
            continue  # not a gang any more, or its job is gone (its pods go with it)
        obj = view.get(
            policies.RECORD_API_VERSION,
            policies.RECORD_KIND,
            namespace,
            labels.object_name(gang.owner.kind, gang.owner.name, key),
        )
        times = [t for p in held if (t := parse_time(p.created)) is not None]
        out.append(
            HeldGang(
                namespace=namespace,
                gang=gang,
                held=held,
                released=tuple(p for p in members if not p.gated),
                record=records.read_record(obj, key),
                since=min(times) if times else None,
            )
        )
    far = datetime.max.replace(tzinfo=UTC)
    return sorted(out, key=lambda h: (h.since or far, h.key))


def plan(
    view: ClusterView,
    settings: Settings,
    *,
    now: datetime,
    stable: Mapping[str, int] | None = None,
    only: Collection[str] | None = None,
) -> Plan:
    """What to release now and why the rest waits (the module's rules). ``stable``: the held
    pod counts of the previous pass; ``only``: decide for these gang keys alone (``podium
    release``)."""
    gangs = [h for h in held_gangs(view, settings) if only is None or h.key in only]
    grower = buffers.Grower(view, settings, now)
    if not gangs:
        return Plan((), (), {}, unwanted=tuple(grower.unwanted()) if only is None else ())
    heading = _Heading(view, settings, now)
    releases: list[Release] = []
    waits: list[Wait] = []
    head: str | None = None
    for held in gangs:
        if held.record is not None and held.record.zone and held.released:
            releases.append(_complete(held, view, settings, now))
            continue
        if (asked := held.gang.job_annotations.get(labels.RELEASE)) is not None:
            admin = _admin(held, view, settings, now, heading, unpinned=asked == "unpinned")
            releases.append(admin)
            if admin.zone is not None:
                heading.add(admin.zone, held.gang.demand)
            continue
        if (followed := _follow(held, view, settings, now)) is not None:
            releases.append(followed)
            heading.add(str(followed.zone), [PodGroup(1, p.requests) for p in held.held])
            continue
        if not _ready(held, need := needed(held, view), stable or {}):
            waits.append(_unready(held, need, view, settings))
            continue
        fit = _Fit.of(held, view, settings, heading)
        if fitting := {z: c for z, c in fit.zones.items() if c.fits and z != head}:
            kept = _fitting(held, view, settings, now, fit, fitting, heading, releases, waits)
            head = head or kept
            continue
        grown = _grow(grower, held, view, fit, heading)
        if isinstance(grown, buffers.Want) and grown.zone is not None:
            head = head if head or settings.hold_order is HoldOrder.FIT_FIRST else grown.zone
            waits.append(_waiting_for_buffer(held, fit, grown, _in_line(waits), settings))
            continue
        if not fit.could_hold:
            if settings.too_big is TooBig.SPREAD:
                releases.append(_spread(held, view, settings, now, fit))
            else:
                waits.append(
                    _noted(_too_big(held, _never_fits(held, view, fit.primary), view, fit), grown)
                )
            continue
        if _timed_out(held, settings, now):
            releases.append(_timeout(held, view, settings, now, fit))
            continue
        if head is None and settings.hold_order is HoldOrder.OLDEST_FIRST:
            head = fit.closest
        waits.append(_noted(_waiting(held, fit, _in_line(waits), head_zone=head), grown))
    counts = {h.key: len(h.held) for h in gangs}
    unwanted = tuple(grower.unwanted()) if only is None else ()
    return Plan(tuple(releases), tuple(waits), counts, tuple(grower.wants), unwanted)


def may_release(event: str, obj: Obj) -> bool:
    """Whether a watch event can let a held gang go before the next periodic pass: a pod that
    ends or goes (its room frees), a new pod behind podium's gate (its gang may now be whole), a
    new node, or a change to a node that is usable now (Ready and schedulable: a node registered
    before it was ready turns Ready, or loses its not-ready taint — the event has no old object,
    so every change of a usable node counts). The releaser then passes at once instead of up to
    ``release-interval-seconds`` later, as kube-scheduler and Kueue react to the same events
    (``bench.latency.room`` measured a node turning Ready at ~2 s without it)."""
    kind = obj.get("kind")
    if kind == "Node":
        return event == "ADDED" or (
            event == "MODIFIED" and NodeInfo.from_object(obj, labels.ZONE_LABEL).usable
        )
    if kind != "Pod":
        return False
    if event == "DELETED":
        return True
    if (obj.get("status") or {}).get("phase") in TERMINAL_PHASES:
        return True
    return event == "ADDED" and has_gate(obj.get("spec") or {})


# -- readiness -------------------------------------------------------------------------------


def size_of(gang: Gang) -> int:
    return sum(g.count for g in gang.demand)


def needed(held: HeldGang, view: ClusterView) -> Stage | None:
    """The pods that must exist before the gang's zone is decided: all of them (its size read
    from the job), or the first stage its operator creates before the rest
    (``adapters.first_stage``: an elastic job's minimum, a staged start's first pods). None when
    the job cannot tell: its size guessed, the job not in the view, or a job whose pods come and
    go (an autoscaled RayCluster, a Volcano job: ``podgroups.unfit``)."""
    gang = held.gang
    job = view.get(gang.owner.api_version, gang.owner.kind, held.namespace, gang.owner.name)
    if job is None or uid_of(job) != gang.owner.uid or gang.demand_source != "job":
        return None
    size = size_of(gang)
    if (stage := adapters.first_stage(job)) is not None:
        return Stage(min(stage.pods, size), stage.why)
    if podgroups.unfit(gang, held.held[0].as_object(), job) is not None:
        return None
    return Stage(size, "")


def _ready(held: HeldGang, need: Stage | None, stable: Mapping[str, int]) -> bool:
    """The pods the gang needs exist (``needed``). Where the job cannot tell how many that is, or
    the gang was decided before and none of its pods runs any more (a first stage that finished:
    its later pods are held again), the pods present once their count held for a pass."""
    present = len(held.held) + len(held.released)
    if present >= (need.pods if need is not None else size_of(held.gang)):
        return True
    still = stable.get(held.key) == len(held.held)
    return still and (need is None or held.record is not None)


def _not_ready(held: HeldGang, need: Stage | None) -> Wait:
    present = len(held.held) + len(held.released)
    why = f"waiting for its pods: {present} of {need.pods if need else size_of(held.gang)} exist"
    if need is not None and need.why:
        why += f" ({need.why})"
    return Wait(held=held, why=why, position=0)


# -- fit -------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class _ZoneFit:
    fits: bool
    #: Free primary resource left for the gang once the pods heading there are counted.
    free: int
    #: The zone's whole allocatable could hold the gang (were it empty).
    could_hold: bool
    #: ``free`` node by node (``neverfits.per_node`` says it).
    per_node: tuple[int, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class _Fit:
    primary: str
    need: int
    zones: Mapping[str, _ZoneFit]

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
        heading: _Heading,
    ) -> _Fit:
        gang = held.gang
        primary = zones.primary_of(gang.total, settings)
        constraint = _constraint(held)
        out = {}
        for zone, nodes in sorted(view.candidate_zones(constraint).items()):
            out[zone] = _zone_fit(heading.room(zone, nodes, primary), nodes, gang.demand, primary)
        return cls(primary, gang.total.get(primary, 0), out)


def _constraint(held: HeldGang) -> Obj:
    """Where the gang's pods may go: the constraint of its held pod that asks most of the
    primary resource (the workers, not a CPU-only launcher)."""
    widest = max(held.held, key=lambda p: sum(p.requests.values()))
    return widest.constraint or {}


def _zone_fit(
    room: Sequence[resources.Resources],
    nodes: ZoneNodes,
    demand: Sequence[PodGroup],
    primary: str,
) -> _ZoneFit:
    """How the gang fits the zone's ``room`` (``_Heading.room``), and whether it could fit the
    zone empty. Packing is node by node; the sums rule out first what cannot fit at all."""
    per_node = tuple(max(0, f.get(primary, 0)) for f in room)
    left = sum(per_node)
    need = total_of(demand).get(primary, 0)
    fits = need <= left and zones.pack_into(demand, [dict(f) for f in room], primary)
    total = nodes.allocatable.get(primary, 0)
    could_hold = fits or neverfits.could_hold(
        demand, [dict(n.allocatable) for n in nodes.nodes.values()], primary, total=total
    )
    return _ZoneFit(fits, left, could_hold, per_node)


class _Heading:
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
            inside = [
                room[i] for i, n in enumerate(infos) if all(n.labels.get(k) == v for k, v in domain)
            ]
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


def _place(fitting: Mapping[str, _ZoneFit], fit: _Fit, settings: Settings) -> tuple[str, str]:
    if settings.placement is Placement.BEST_FIT:
        return min(fitting, key=lambda z: (fitting[z].free - fit.need, z)), "best-fit"
    return min(fitting, key=lambda z: (-fitting[z].free, z)), "most-free"


# -- outcomes --------------------------------------------------------------------------------


def _complete(held: HeldGang, view: ClusterView, settings: Settings, now: datetime) -> Release:
    assert held.record is not None and held.record.zone
    zone = held.record.zone
    name, policy = policies.gang_policy(held.gang, held.namespace, view, settings, zone=zone)
    return Release(
        held=held,
        zone=zone,
        reason=COMPLETED,
        detail=(
            f"{len(held.released)} pod(s) of {held.gang.display} were released into {zone} "
            f"already: the {len(held.held)} still held follow"
            + (f" (into {held.record.domain})" if held.record.domain else "")
        ),
        domain=held.record.domain,
        topology="its record's domain" if held.record.domain else "",
        record=None,
        replace=False,
        policies=tuple(policy),
        policy_name=name,
        pods=_refs(held.held),
        waited_seconds=held.waited(now),
    )


def _release(
    held: HeldGang,
    view: ClusterView,
    settings: Settings,
    now: datetime,
    *,
    zone: str | None,
    reason: str,
    fit: _Fit,
    detail: str = "",
    below: topology.Choice | None = None,
) -> Release:
    gang = held.gang
    if zone is not None:
        again = held.record is not None  # decided before: its policy may name the old zone
        name, policy = policies.gang_policy(
            gang, held.namespace, view, settings, zone=zone, fresh=again
        )
    else:
        name, policy = policies.job_wide_policy(gang, held.namespace, view, settings)
    detail = detail or (
        f"{zone} has room for all of {gang.display} ({_needs(gang, fit.primary)}), "
        f"after {held.waited(now):.0f}s held"
    )
    domain = topology.describe(below.domain) if below is not None and zone else ""
    why = below.why if below is not None and zone else ""
    if why:
        detail += f"; into {domain}: {why}" if domain else f"; below the zone: {why}"
    record = policies.build_record(
        gang=gang,
        namespace=held.namespace,
        zone=zone,
        reason=reason,
        detail=detail,
        decided_at=now.astimezone(UTC).isoformat(timespec="seconds"),
        domain=domain,
    )
    return Release(
        held=held,
        zone=zone,
        reason=reason,
        detail=detail,
        domain=domain,
        topology=why,
        record=record,
        replace=held.record is not None,
        policies=tuple(policy),
        policy_name=name,
        pods=_refs(held.held),
        waited_seconds=held.waited(now),
    )


def _admin(
    held: HeldGang,
    view: ClusterView,
    settings: Settings,
    now: datetime,
    heading: _Heading,
    *,
    unpinned: bool,
) -> Release:
    """An admin asked (``podium release``): the pods present go now, into the best zone that
    fits, else the roomiest, or into none; out of turn and whatever the head keeps."""
    fit = _Fit.of(held, view, settings, heading)
    fitting = {z: c for z, c in fit.zones.items() if c.fits}
    zone = None if unpinned else _place(fitting, fit, settings)[0] if fitting else fit.roomiest[0]
    by = held.gang.job_annotations.get(labels.RELEASED_BY) or "an admin"
    where = f"into {zone}" + ("" if zone in fitting else ", which has no room for all of it")
    detail = f"released by {by} {where if zone else 'unpinned'} after {held.waited(now):.0f}s held"
    released = _release(held, view, settings, now, zone=zone, reason=ADMIN, fit=fit, detail=detail)
    return dataclasses.replace(released, by=by)


def _follow(held: HeldGang, view: ClusterView, settings: Settings, now: datetime) -> Release | None:
    """A held gang with members running already that podium never held (``core.running``:
    created before the namespace opted in, while podium was down, or placed by someone else):
    released at once into the zone they run in, whatever the fit — they will never be gated, so
    counting them out would keep the gang waiting for ever. None when no member runs, or when
    the gang was released across zones before (its record names no zone)."""
    if held.record is not None and not held.record.zone:
        return None
    choice = running.follow(running.placed_members(held.gang, held.namespace, view), view, settings)
    if choice is None or choice.zone is None:
        return None
    detail = f"{choice.detail}; released after {held.waited(now):.0f}s held"
    fit = _Fit(zones.primary_of(held.gang.total, settings), 0, {})
    record = held.record
    below = None
    if record is not None and record.domain and record.zone == choice.zone:
        below = topology.Choice(topology.parse(record.domain), "its record's domain")
    return _release(
        held,
        view,
        settings,
        now,
        zone=choice.zone,
        reason=str(choice.reason),
        fit=fit,
        detail=detail,
        below=below,
    )


def _spread(
    held: HeldGang, view: ClusterView, settings: Settings, now: datetime, fit: _Fit
) -> Release:
    detail = (
        f"no zone could hold all of {held.gang.display} ({_needs(held.gang, fit.primary)}) even "
        "empty; released across zones with one job-wide policy (too-big: spread)"
    )
    return _release(
        held, view, settings, now, zone=None, reason=TOO_BIG_SPREAD, fit=fit, detail=detail
    )


def _timeout(
    held: HeldGang, view: ClusterView, settings: Settings, now: datetime, fit: _Fit
) -> Release:
    roomiest, free = fit.roomiest
    zone = roomiest if settings.no_fit is NoFit.PIN_MOST_FREE else None
    most = resources.amount(fit.primary, free)
    if zone and len(split := fit.zones[zone].per_node) > 1:
        most += f", {neverfits.per_node(split, fit.primary)}"
    where = f"pinned to {zone}, which has the most free ({most})" if zone else "left unpinned"
    detail = (
        f"held {held.waited(now):.0f}s (hold-timeout-seconds "
        f"{settings.hold_timeout_seconds:g}) and still no zone has room for "
        f"{_needs(held.gang, fit.primary)}; {where}, so some pods may stay Pending"
    )
    return _release(held, view, settings, now, zone=zone, reason=TIMEOUT, fit=fit, detail=detail)


def _timed_out(held: HeldGang, settings: Settings, now: datetime) -> bool:
    return bool(settings.hold_timeout_seconds) and held.waited(now) >= settings.hold_timeout_seconds


def _never_fits(
    held: HeldGang, view: ClusterView, primary: str, pod: Obj | None = None
) -> neverfits.NeverFits | None:
    """Whether no zone could hold the gang even with every node free (``neverfits``), on the
    nodes its pods may use (the constraint of ``pod``, else ``_constraint``)."""
    constraint = pod if pod is not None else _constraint(held)
    return neverfits.never_fits_on(held.gang.demand, primary, view.candidate_zones(constraint))


def _in_line(waits: Sequence[Wait]) -> int:
    """The place in line of the next gang that waits for room: after those already waiting."""
    return sum(1 for w in waits if w.position) + 1


def _unready(held: HeldGang, need: Stage | None, view: ClusterView, settings: Settings) -> Wait:
    """Why a gang whose pods do not all exist yet waits: too big already, said at once
    (``_never_fits_early``, with ``too-big: hold``), else for its pods."""
    early = _never_fits_early(held, view, settings)
    if early is not None and settings.too_big is TooBig.HOLD:
        return _too_big(held, early, view)
    return _not_ready(held, need)


def _never_fits_early(
    held: HeldGang, view: ClusterView, settings: Settings
) -> neverfits.NeverFits | None:
    """A gang not ready yet (``_ready``) that can never fit is said to be so at once, not once
    its last pod exists: when its demand is read from the job and a pod asking for its largest
    share of the primary resource is here (its constraint says where such pods may go; a
    CPU-only launcher's would not). Not with ``capacity-buffers: on``: once ready, the gang gets
    a buffer in a zone the autoscaler may grow, and only a gang no buffer can be made for is too
    big (``_grow``)."""
    gang = held.gang
    if gang.demand_source != "job" or settings.capacity_buffers is CapacityBuffers.ON:
        return None
    primary = zones.primary_of(gang.total, settings)
    size = max((g.requests.get(primary, 0) for g in gang.demand if g.count), default=0)
    widest = next((p for p in held.held if size and p.requests.get(primary, 0) >= size), None)
    if widest is None:
        return None
    return _never_fits(held, view, primary, widest.constraint or {})


def _too_big(
    held: HeldGang,
    never: neverfits.NeverFits | None,
    view: ClusterView,
    fit: _Fit | None = None,
) -> Wait:
    """A gang no zone could hold even empty: why, and the ways out."""
    gang = held.gang
    primary = never.primary if never is not None else fit.primary if fit is not None else ""
    owner = gang.owner
    command = f"podium release {owner.kind.lower()}/{owner.name} -n {held.namespace}"
    why = f"needs {_needs(gang, primary)} in one zone, more than any zone holds even empty"
    if never is not None:
        why += f" ({never.describe()}); held until an admin acts: {never.ways_out(command)}"
    else:
        why += f"; held until an admin acts ({command}, or too-big: spread)"
    if fit is not None:
        zone, free = fit.roomiest
    else:
        zone = never.best if never is not None else None
        nodes = view.candidate_zones(_constraint(held)).get(zone) if zone else None
        free = max(0, nodes.free().get(primary, 0)) if nodes is not None else 0
    return Wait(
        held=held, why=why, position=0, too_big=True, best_zone=zone, best_free=free, never=never
    )


def _waiting(held: HeldGang, fit: _Fit, position: int, *, head_zone: str | None) -> Wait:
    zone, free = fit.roomiest
    roomiest = (
        f"the roomiest zone, {zone}, has {resources.amount(fit.primary, free)} free"
        if zone
        else "no zone admits its pods"
    )
    if zone and len(split := fit.zones[zone].per_node) > 1:
        roomiest += f" ({neverfits.per_node(split, fit.primary)})"
    needs = _needs(held.gang, fit.primary)
    why = f"needs {needs} in one zone; {roomiest}; {_ordinal(position)} in line"
    if position == 1 and head_zone:
        why += f" (first: {head_zone} is kept for it)"
    return Wait(held=held, why=why, position=position, best_zone=zone, best_free=free)


# -- below the zone (``topology``) ------------------------------------------------------------


def _fitting(
    held: HeldGang,
    view: ClusterView,
    settings: Settings,
    now: datetime,
    fit: _Fit,
    fitting: Mapping[str, _ZoneFit],
    heading: _Heading,
    releases: list[Release],
    waits: list[Wait],
) -> str | None:
    """A gang that fits ``fitting`` released into the zone ``_place`` chooses and, with
    ``topology-levels``, the tightest domain of it that fits (``_below``); or, when it requires
    a level no domain of which has room, its wait (``_short``): then the zone it would keep as
    the head (``hold-order: oldest-first``), as a gang that fits no zone does."""
    zone, reason = _place(fitting, fit, settings)
    below = None
    if settings.topology_levels:
        below, zone, reason, short = _below(held, view, settings, heading, fit, fitting)
        if short is not None:
            out = _short(held, view, settings, now, fit, short, waits, heading)
            if isinstance(out, Release):
                releases.append(out)
                return None
            waits.append(out)
            return out.best_zone if settings.hold_order is HoldOrder.OLDEST_FIRST else None
    release = _release(held, view, settings, now, zone=zone, reason=reason, fit=fit, below=below)
    releases.append(release)
    heading.add(zone, held.gang.demand, below.domain if below else ())
    return None


def _below(
    held: HeldGang,
    view: ClusterView,
    settings: Settings,
    heading: _Heading,
    fit: _Fit,
    fitting: Mapping[str, _ZoneFit],
) -> tuple[topology.Choice | None, str, str, Wait | None]:
    """The domain below the zone for a gang that fits ``fitting`` (``topology.choose``), the
    zone (and reason) it goes to, or — when it requires a level no domain of which has room in
    any zone it fits — the wait that says so (its ``best_zone``: the zone of the roomiest
    domain, kept for it as a head's is). A gang that does not require a level goes to the zone
    ``_place`` chose among those where its domain is the finest (a block beats a zone alone:
    the zone fit alone would send a gang to the tightest zone even where only another zone has a
    block with room for it); one that requires a level, to the best zone among those with a
    domain of it that fits."""
    widest = max(held.held, key=lambda p: sum(p.requests.values()))
    ask = topology.ask_of(widest.annotations, settings.topology_levels)
    zone, reason = _place(fitting, fit, settings)
    if ask.level is None:
        return topology.Choice((), ask.note), zone, reason, None
    nodes = view.candidate_zones(_constraint(held))
    choices = {
        z: _choose(held, heading, z, nodes[z], fit.primary, ask, settings) for z in sorted(fitting)
    }
    finest = max((len(c.domain) for c in choices.values() if not c.wait), default=None)
    if finest is not None:
        able = {z: fitting[z] for z, c in choices.items() if not c.wait and len(c.domain) == finest}
        zone, reason = _place(able, fit, settings)
        return choices[zone], zone, reason, None
    neg, best = min((-(c.roomiest.free if c.roomiest else -1), z) for z, c in choices.items())
    free = -neg
    wait = Wait(
        held=held,
        why=choices[best].why + f" (in {best}, where the zone has room for it)",
        position=0,
        best_zone=best,
        best_free=max(0, free),
        topology=choices[best].why,
    )
    return None, zone, reason, wait


def _choose(
    held: HeldGang,
    heading: _Heading,
    zone: str,
    nodes: ZoneNodes,
    primary: str,
    ask: topology.Ask,
    settings: Settings,
) -> topology.Choice:
    room = heading.room(zone, nodes, primary)  # read only: shared with the zone fit
    slots = [
        topology.Slot(n.labels, r, n.allocatable)
        for n, r in zip(nodes.nodes.values(), room, strict=True)
    ]
    return topology.choose(slots, held.gang.demand, primary, settings.topology_levels, ask)


def _short(
    held: HeldGang,
    view: ClusterView,
    settings: Settings,
    now: datetime,
    fit: _Fit,
    short: Wait,
    waits: Sequence[Wait],
    heading: _Heading,
) -> Release | Wait:
    """A gang that requires a level no domain of which has room waits in line as a gang that
    fits no zone does (the head keeps the zone of its roomiest domain); once it has waited
    ``hold-timeout-seconds`` it is released into that zone, the zone alone."""
    if not _timed_out(held, settings, now):
        position = _in_line(waits)
        why = f"{short.why}; {_ordinal(position)} in line"
        return dataclasses.replace(short, why=why, position=position)
    zone = short.best_zone
    assert zone is not None
    heading.add(zone, held.gang.demand)
    detail = (
        f"held {held.waited(now):.0f}s (hold-timeout-seconds {settings.hold_timeout_seconds:g}): "
        f"{short.why}; released into {zone} alone"
    )
    return _release(held, view, settings, now, zone=zone, reason=TIMEOUT, fit=fit, detail=detail)


# -- capacity buffers (``buffers``) -----------------------------------------------------------


def _grow(
    grower: buffers.Grower, held: HeldGang, view: ClusterView, fit: _Fit, heading: _Heading
) -> buffers.Want | buffers.Refused | None:
    """The buffer a ready gang that fits no zone should have (``buffers.Grower.ask``), from
    the room per node of each zone its pods may use, the pods heading there counted."""
    if not grower.on:
        return None
    constraint = _constraint(held)
    rooms = {
        zone: heading.room(zone, nodes, fit.primary)
        for zone, nodes in view.candidate_zones(constraint).items()
    }
    return grower.ask(
        namespace=held.namespace,
        name=held.record_name,
        gang=held.gang,
        held=held.held,
        primary=fit.primary,
        rooms=rooms,
    )


def _waiting_for_buffer(
    held: HeldGang, fit: _Fit, want: buffers.Want, position: int, settings: Settings
) -> Wait:
    """A gang that waits for the autoscaler to grow the zone its buffer asks."""
    assert want.zone is not None
    until = want.since + timedelta(seconds=settings.buffer_deadline_seconds)
    why = (
        f"needs {_needs(held.gang, fit.primary)} in one zone and no zone has room; "
        f"{want.detail}: {buffers.provisioning_note(want.existing)}; asked until "
        f"{until.astimezone(UTC).isoformat(timespec='seconds')}; {_ordinal(position)} in line"
    )
    zone, free = want.zone, fit.zones[want.zone].free if want.zone in fit.zones else 0
    return Wait(held=held, why=why, position=position, best_zone=zone, best_free=free)


def _noted(wait: Wait, grown: buffers.Want | buffers.Refused | None) -> Wait:
    """``wait`` with what became of its buffer (refused, stopped) said after its why."""
    note = grown.why if isinstance(grown, buffers.Refused) else grown.detail if grown else ""
    return dataclasses.replace(wait, why=f"{wait.why}; {note}") if note else wait


def _needs(gang: Gang, primary: str) -> str:
    """What the gang needs of ``primary``, counting the pods that ask for it (an MPIJob's
    CPU-only launcher is not one of its 4 × 8-GPU workers), in units people read."""
    asking = [g for g in gang.demand if g.count and g.requests.get(primary, 0)]
    pods = sum(g.count for g in asking)
    sizes = {g.requests[primary] for g in asking}
    if len(sizes) == 1:
        return f"{pods} × {resources.amount(primary, sizes.pop())}"
    return f"{resources.amount(primary, gang.total.get(primary, 0))} over {pods} pods"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _refs(pods: Iterable[PodSummary]) -> tuple[PodRef, ...]:
    return tuple(PodRef(p.namespace, p.name, p.uid) for p in pods)


def release_patch(pod: Obj, release: Release, settings: Settings) -> list[dict[str, object]]:
    """The one JSON Patch that releases ``pod`` (as just read from the apiserver): pinned to the
    release's zone with podium's labels and annotations, gate removed behind a ``test``."""
    annotations = {labels.ZONE: release.zone or "", labels.REASON: release.reason}
    if release.policy_name is not None:
        annotations[labels.POLICY] = release.policy_name
    domain = topology.parse(release.domain) if release.zone else ()
    if domain:
        annotations[labels.TOPOLOGY] = release.domain
    return mutation.release(
        pod,
        zone=release.zone,
        gang_key=release.held.key,
        zone_label=settings.zone_label,
        annotations=annotations,
        below=topology.requirements(domain),
    ).patch

"""The held gangs a plan decides for, what it answers about each, and when a gang is ready. Pure.

``held_gangs`` reads from the view every gang with a pod behind podium's gate (``HeldGang``),
oldest first; ``plan`` answers each with a ``Release`` or a ``Wait`` in a ``Plan``. A gang is
decided only once the pods it needs exist (``needed``, ``ready``). ``may_release`` says which
watch events may let a held gang go before the next periodic pass.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import UTC, datetime

from webhook.core import adapters, buffers, labels, neverfits, podgroups, policies, records
from webhook.core.adapters.base import Gang, Stage
from webhook.core.objects import Obj, parse_time, uid_of
from webhook.core.policies import Manifest
from webhook.core.records import Record
from webhook.core.settings import Settings
from webhook.core.view import TERMINAL_PHASES, ClusterView, NodeInfo, PodSummary, has_gate

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


def ready(held: HeldGang, need: Stage | None, stable: Mapping[str, int]) -> bool:
    """The pods the gang needs exist (``needed``). Where the job cannot tell how many that is, or
    the gang was decided before and none of its pods runs any more (a first stage that finished:
    its later pods are held again), the pods present once their count held for a pass."""
    present = len(held.held) + len(held.released)
    if present >= (need.pods if need is not None else size_of(held.gang)):
        return True
    still = stable.get(held.key) == len(held.held)
    return still and (need is None or held.record is not None)

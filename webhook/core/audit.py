"""The audit entry: one JSON object per admission, release, wait, reconciler action or guard
report, and one pure builder per source.

* ``build`` — an admission: a decision plus what happened (its effects, warnings, an error);
* ``released`` and ``held`` — the releaser: a gang released (or stopped half-way), a gang that
  waits and why;
* ``reconciled`` — one reconciler action and how it went;
* ``guarded`` — the Cilium CRD guard: what the installed CRD means for podium's policies.

Every entry has the same keys in the same order (the admission's); the others add theirs at the
end. What podium's writer did to an object is one of ``EffectOutcome`` — the one vocabulary of
the admission, the releaser and the reconciler. Where entries go (stdout, a file, a writer
thread) is ``webhook.serve.audit``; reading them back for people is ``webhook.ops.auditview``.
Metrics and Events read the same typed entry.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, NotRequired, TypedDict

from webhook.core.adapters.base import Gang
from webhook.core.engine import Decision
from webhook.core.objects import metadata_of
from webhook.core.reviews import Request


class Outcome(enum.StrEnum):
    """Every ``outcome`` an entry can carry: the one list ``podium audit --outcome`` offers, and
    a test holds every ``outcome=`` that builds an entry to it."""

    PINNED = "pinned"
    UNPINNED = "unpinned"
    GROUPED = "grouped"
    HELD = "held"
    RELEASED = "released"
    SKIPPED = "skipped"
    DENIED = "denied"
    FAIL_OPEN = "fail-open"
    RECONCILE = "reconcile"
    #: The releaser's CapacityBuffers (``capacity-buffers: on``): asked, moved, stopped, deleted.
    BUFFER = "buffer"
    #: The policy guard's own entries: the Cilium CRD changed, policies withheld or resumed.
    GUARD = "guard"
    #: ``build`` without a decision and without an outcome given.
    ERROR = "error"


class JobRef(TypedDict, total=False):
    """The job an entry is about. Admissions fill every key; the reconciler only kind, name,
    uid and gang."""

    framework: str
    apiVersion: str
    kind: str
    name: str
    uid: str
    gang: str
    demand: dict[str, int]
    demandSource: str
    #: The object people look at for the job when it is not the owner above (a TrainJob over
    #: its JobSet): apiVersion, kind, name, uid. Events regard it.
    shown: dict[str, str]


class EffectOutcome(enum.StrEnum):
    """What podium's writer (``webhook.serve.writer``) did to one object: the ``outcome`` of an
    entry's effects, and the ``result`` of a reconciler's entry. The values are the words on the
    wire (audit lines, Events, metrics)."""

    CREATED = "created"
    #: Created by someone else first, and as this write would have it (or not compared).
    EXISTS = "exists"
    #: The decision record existed with another zone (or zone chooser) than this admission
    #: chose; the admission adopted the recorded one.
    FOLLOWED = "followed"
    #: Overwritten (a re-decision), guarded by the resourceVersion read.
    REPLACED = "replaced"
    #: The apiserver does not serve the object's kind: a CRD (or an API) is not installed. The
    #: reconciler's entries spell it ``resource-missing`` (``RECONCILE_KIND_MISSING``).
    KIND_MISSING = "skipped-crd-missing"
    #: Not written: the admission was a dry run, or shadow mode.
    DRY_RUN = "dry-run"
    SHADOW = "shadow"
    #: The reconciler's merge patches: a policy repaired, an orphan mark set or removed, a
    #: pod's job label removed or its zone label set.
    REPAIRED = "repaired"
    MARKED = "marked"
    UNMARKED = "unmarked"
    UNLABELLED = "unlabelled"
    LABELLED = "labelled"
    DELETED = "deleted"
    #: Not deleted: the apiserver still has the job the view had lost.
    KEPT = "kept: the job exists"
    #: Gone before the write reached it (NotFound on a patch or delete).
    GONE = "gone"
    #: Changed since it was read (a resourceVersion precondition failed).
    CONFLICT = "conflict"
    #: Any other API error; spelled ``failed: <error>``.
    FAILED = "failed"


#: The reconciler's word for ``EffectOutcome.KIND_MISSING``, as its entries have always said it
#: (``result`` and the effect's ``outcome``).
RECONCILE_KIND_MISSING = "resource-missing"


def failed(error: str) -> str:
    """How a failure reads in ``result`` (and a reconciler effect's ``outcome``)."""
    return f"{EffectOutcome.FAILED}: {error}"


class EffectEntry(TypedDict, total=False):
    """An object podium created or changed: its ``outcome`` is an ``EffectOutcome`` word."""

    kind: str
    name: str
    namespace: str
    outcome: str


class PatchSummary(TypedDict):
    ops: int
    paths: list[str]


class AuditEntry(TypedDict):
    """One admission (or reconciler action), as written: one JSON object per line."""

    audit: str
    time: str
    requestUID: str
    operation: str
    namespace: str
    pod: str
    user: str
    outcome: str
    reason: str
    detail: str
    job: JobRef | None
    role: str | None
    coordinator: bool | None
    zone: str | None
    capacity: list[dict[str, Any]]
    patch: PatchSummary
    effects: list[EffectEntry]
    warnings: list[str]
    dryRun: bool
    latencyMs: float
    error: NotRequired[str]
    #: Owners read from the apiserver before deciding, because the watch had not delivered them
    #: yet (``Kind/name``); absent when the view had them all.
    read: NotRequired[list[str]]
    #: Reconciler entries: what it did (``create``, ``patch``, ``delete``, …) and how it went.
    action: NotRequired[str]
    result: NotRequired[str]
    #: Releaser entries (``released``, ``held``): the pods released (or still held), and how
    #: long the gang had been held.
    pods: NotRequired[list[str]]
    waitedSeconds: NotRequired[float]
    #: Shadow mode: the decision was made and recorded, not applied — the pod was admitted
    #: unchanged; ``patch``, ``effects`` (outcome ``shadow``) and ``warnings`` say what enforce
    #: mode would have done.
    shadow: NotRequired[bool]
    #: ``topology-levels``: the domain below the zone a gang was released into
    #: (``key=value,…``, coarse to fine) and why that one, or why a required level waits
    #: (``topology``); absent when the levels are not set or say nothing.
    domain: NotRequired[str]
    topology: NotRequired[str]


#: Marks podium's lines among other log lines (e.g. in ``kubectl logs``).
MARKER = "podium.audit/v1"


def build(
    *,
    request: Request,
    decision: Decision | None,
    time: datetime,
    latency_ms: float,
    outcome: str | None = None,
    reason: str | None = None,
    detail: str | None = None,
    effects: Sequence[EffectEntry] = (),
    warnings: Sequence[str] = (),
    error: str | None = None,
    read: Sequence[str] = (),
) -> AuditEntry:
    """An admission's entry. ``outcome``/``reason`` override the decision's (e.g. fail-open);
    without a decision (it failed before one) the outcome is ``error``."""
    meta: Mapping[str, Any] = metadata_of(request.object)
    gang = decision.gang if decision else None
    entry = _entry(
        time=time,
        request_uid=request.uid,
        operation=request.operation,
        namespace=(decision.namespace if decision else "") or request.namespace,
        pod=meta.get("name") or meta.get("generateName") or request.name,
        user=request.user.get("username", ""),
        outcome=outcome or (decision.outcome if decision else Outcome.ERROR.value),
        reason=reason or (decision.reason if decision else "error"),
        detail=detail if detail is not None else (decision.detail if decision else ""),
        zone=decision.zone if decision and not outcome else None,
        capacity=(c.as_dict() for c in decision.capacity) if decision else (),
        patch=decision.patch if decision and not outcome else (),
        effects=effects,
        warnings=warnings,
        dry_run=bool(request.dry_run),
        latency_ms=latency_ms,
    )
    if gang is not None:
        entry["job"] = job_ref(gang)
        entry["role"] = gang.role
        entry["coordinator"] = gang.coordinator
    if decision is not None and decision.shadow_of is not None and not outcome:
        entry["shadow"] = True
        entry["patch"] = _patch_summary(decision.shadow_of.patch)
        entry["warnings"] = [*warnings, *decision.shadow_of.warnings]
    if error:
        entry["error"] = error
    if read:
        entry["read"] = list(read)
    return entry


def released(
    *,
    time: datetime,
    namespace: str,
    job: JobRef,
    zone: str | None,
    user: str,
    reason: str,
    detail: str,
    effects: Sequence[EffectEntry],
    pods: Sequence[str],
    waited_seconds: float,
    latency_ms: float,
    error: str | None,
    domain: str = "",
    topology: str = "",
) -> AuditEntry:
    """A gang the releaser released into ``zone`` (``pods`` ungated, the objects it wrote in
    ``effects``), or stopped releasing at ``error``: ``result`` is ``released`` or
    ``failed: <error>``; ``domain``/``topology``: the domain below the zone and why."""
    entry = _entry(
        time=time,
        namespace=namespace,
        user=user,
        outcome="released",
        reason=reason,
        detail=detail,
        job=job,
        zone=zone,
        effects=effects,
        latency_ms=latency_ms,
        error=error,
    )
    result = "released" if error is None else failed(error)
    return _below(_releaser_step(entry, "release", result, pods, waited_seconds), domain, topology)


def held(
    *,
    time: datetime,
    namespace: str,
    job: JobRef,
    reason: str,
    detail: str,
    result: str,
    pods: Sequence[str],
    waited_seconds: float,
    topology: str = "",
) -> AuditEntry:
    """A gang that waits (``detail``: why); ``result`` says where it stands in line;
    ``topology``: why a level it requires has no domain with room."""
    entry = _entry(
        time=time,
        namespace=namespace,
        outcome="held",
        reason=reason,
        detail=detail,
        job=job,
    )
    return _below(_releaser_step(entry, "wait", result, pods, waited_seconds), "", topology)


def _below(entry: AuditEntry, domain: str, topology: str) -> AuditEntry:
    """The topology keys of a releaser entry, only when there is something to say (an entry
    without ``topology-levels`` is as before)."""
    if domain:
        entry["domain"] = domain
    if topology:
        entry["topology"] = topology
    return entry


def buffered(
    *,
    time: datetime,
    namespace: str,
    job: JobRef,
    zone: str | None,
    user: str,
    action: str,
    reason: str,
    detail: str,
    effects: Sequence[EffectEntry],
    error: str | None = None,
) -> AuditEntry:
    """What the releaser did to a held gang's CapacityBuffer: ``action`` ``buffer`` (asked a
    zone, moved to another, or stopped: ``reason``) or ``unbuffer`` (deleted: the gang was
    released, fits, or went); ``result`` is what the writer did to the buffer, or
    ``failed: <error>``."""
    entry = _entry(
        time=time,
        namespace=namespace,
        user=user,
        outcome="buffer",
        reason=reason,
        detail=detail,
        job=job,
        zone=zone,
        effects=effects,
        error=error,
    )
    entry["action"] = action
    buffer = [e for e in effects if e.get("kind") == "CapacityBuffer"] or effects
    done = buffer[-1]["outcome"] if buffer else ""
    entry["result"] = failed(error) if error is not None else str(done)
    return entry


def _releaser_step(
    entry: AuditEntry, action: str, result: str, pods: Sequence[str], waited_seconds: float
) -> AuditEntry:
    """The keys a releaser entry adds, in their order: what it did to the gang, how that went,
    the gang's pods, and how long the gang had been held."""
    entry["action"] = action
    entry["result"] = result
    entry["pods"] = list(pods)
    entry["waitedSeconds"] = round(waited_seconds, 1)
    return entry


def reconciled(
    *,
    time: datetime,
    latency_ms: float,
    action: str,
    reason: str,
    detail: str,
    target: tuple[str, str, str],
    job: JobRef,
    outcome: EffectOutcome,
    error: str | None = None,
) -> AuditEntry:
    """One reconciler ``action`` on ``target`` (kind, namespace, name) and how it went: the
    entry's ``result``, and its one effect's ``outcome`` — ``failed: <error>`` for a failure,
    ``resource-missing`` for a kind not served."""
    kind, namespace, name = target
    if outcome is EffectOutcome.FAILED:
        result = failed(error or "")
    elif outcome is EffectOutcome.KIND_MISSING:
        result = RECONCILE_KIND_MISSING
    else:
        result = outcome.value
    entry = _entry(
        time=time,
        namespace=namespace,
        pod=name if kind == "Pod" else "",
        outcome="reconcile",
        reason=reason,
        detail=detail,
        job=job,
        effects=[{"kind": kind, "name": name, "namespace": namespace, "outcome": result}],
        latency_ms=latency_ms,
        error=error if outcome is EffectOutcome.FAILED else None,
    )
    entry["action"] = action
    entry["result"] = result
    return entry


def guarded(*, time: datetime, reason: str, detail: str, warnings: Sequence[str]) -> AuditEntry:
    """What the installed Cilium CRD means for podium's policies, said when it changes."""
    return _entry(time=time, outcome="guard", reason=reason, detail=detail, warnings=warnings)


def _entry(
    *,
    time: datetime,
    outcome: str,
    reason: str,
    detail: str,
    request_uid: str = "",
    operation: str = "",
    namespace: str = "",
    pod: str = "",
    user: str = "",
    job: JobRef | None = None,
    zone: str | None = None,
    capacity: Iterable[dict[str, Any]] = (),
    patch: Sequence[Mapping[str, Any]] = (),
    effects: Sequence[EffectEntry] = (),
    warnings: Sequence[str] = (),
    dry_run: bool = False,
    latency_ms: float = 0.0,
    error: str | None = None,
) -> AuditEntry:
    """The keys every entry has, in their order; ``error`` only when there is one."""
    entry: AuditEntry = {
        "audit": MARKER,
        "time": time.isoformat(timespec="milliseconds"),
        "requestUID": request_uid,
        "operation": operation,
        "namespace": namespace,
        "pod": pod,
        "user": user,
        "outcome": outcome,
        "reason": reason,
        "detail": detail,
        "job": job,
        "role": None,
        "coordinator": None,
        "zone": zone,
        "capacity": list(capacity),
        "patch": _patch_summary(patch),
        "effects": list(effects),
        "warnings": list(warnings),
        "dryRun": dry_run,
        "latencyMs": round(latency_ms, 3),
    }
    if error:
        entry["error"] = error
    return entry


def job_ref(gang: Gang) -> JobRef:
    """The job an entry about ``gang`` names."""
    ref: JobRef = {
        "framework": gang.framework,
        "apiVersion": gang.owner.api_version,
        "kind": gang.owner.kind,
        "name": gang.owner.name,
        "uid": gang.owner.uid,
        "gang": gang.key,
        "demand": gang.total,
        "demandSource": gang.demand_source,
    }
    if gang.shown is not None:
        shown = gang.shown
        ref["shown"] = {
            "apiVersion": shown.api_version,
            "kind": shown.kind,
            "name": shown.name,
            "uid": shown.uid,
        }
    return ref


def _patch_summary(patch: Sequence[Mapping[str, Any]]) -> PatchSummary:
    return {"ops": len(patch), "paths": sorted({str(op.get("path", "")) for op in patch})}

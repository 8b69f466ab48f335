"""The audit entry: one JSON object per admission (or reconciler action), and its pure ``build``.

A decision plus what happened → an ``AuditEntry``. Where entries go (stdout, a file, a writer
thread) is ``webhook.serve.audit``; reading them back for people is ``webhook.ops.auditview``.
Metrics and Events read the same typed entry.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, NotRequired, TypedDict

from webhook.core.adapters.base import Gang
from webhook.core.engine import Decision
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


class EffectEntry(TypedDict, total=False):
    """An object podium created or changed (``effects.EffectResult.as_dict``)."""

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


#: Marks podium's lines among other log lines (e.g. in ``kubectl logs``).
MARKER = "podium.audit/v1"


def build(
    *,
    request: Request | None,
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
    """One admission's entry. ``outcome``/``reason`` override the decision's (e.g. fail-open)."""
    pod = (request.object if request else None) or {}
    meta: Mapping[str, Any] = pod.get("metadata") or {}
    gang = decision.gang if decision else None
    entry: AuditEntry = {
        "audit": MARKER,
        "time": time.isoformat(timespec="milliseconds"),
        "requestUID": request.uid if request else "",
        "operation": request.operation if request else "",
        "namespace": (decision.namespace if decision else "")
        or (request.namespace if request else ""),
        "pod": meta.get("name") or meta.get("generateName") or (request.name if request else ""),
        "user": (request.user.get("username", "") if request else ""),
        "outcome": outcome or (decision.outcome if decision else Outcome.ERROR.value),
        "reason": reason or (decision.reason if decision else "error"),
        "detail": detail if detail is not None else (decision.detail if decision else ""),
        "job": None,
        "role": None,
        "coordinator": None,
        "zone": decision.zone if decision and not outcome else None,
        "capacity": [c.as_dict() for c in decision.capacity] if decision else [],
        "patch": _patch_summary(decision.patch if decision and not outcome else []),
        "effects": list(effects),
        "warnings": list(warnings),
        "dryRun": bool(request and request.dry_run),
        "latencyMs": round(latency_ms, 3),
    }
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

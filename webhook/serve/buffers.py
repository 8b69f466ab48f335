"""The releaser's CapacityBuffers (``capacity-buffers: on``): writes what ``core.buffers`` and
the release plan decided, through the one writer.

A pass first deletes the buffers no gang wants any more (`remove`) — the gangs it is about to
release among them, so that no buffer refills the room their pods take — then releases, then
writes the buffers that changed (`write`): the PodTemplate first (the buffer names it), then the
CapacityBuffer, each created or overwritten. A cluster without the CapacityBuffer CRD makes
each write ``skipped-crd-missing``; nothing else changes. Every step is one audit entry
(``audit.buffered``), which also makes the job's Event.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from datetime import datetime

from webhook.core import audit, buffers
from webhook.core.audit import EffectEntry, EffectOutcome
from webhook.core.objects import Obj
from webhook.core.release import Plan
from webhook.core.settings import Settings
from webhook.kube import errors
from webhook.kube.protocols import Objects
from webhook.serve import writer

log = logging.getLogger("podium.buffers")

#: How long after the apiserver said it serves no CapacityBuffers podium asks again.
MISSING_RETRY_SECONDS = 300.0
#: ``reason`` of a buffer entry.
ASKED = "buffer-asked"
MOVED = "buffer-moved"
STOPPED = "buffer-stopped"
DELETED = "buffer-deleted"


async def remove(api: Objects, plan: Plan, *, now: datetime, user: str) -> list[audit.AuditEntry]:
    """Delete the buffers (and their templates) the plan wants for no gang."""
    entries = []
    released = {(r.held.namespace, r.held.record_name): r for r in plan.releases}
    for old in plan.unwanted:
        effects: list[EffectEntry] = []
        error = None
        try:
            effects.append((await writer.delete(api, old.target())).effect())
            effects.append((await writer.delete(api, old.template_target())).effect())
        except errors.ApiError as err:
            error = str(err)
            log.warning("cannot delete CapacityBuffer %s/%s: %s", old.namespace, old.name, err)
        release = released.get((old.namespace, old.name))
        why = (
            f"{release.zone or 'a zone'} has room for the gang: released"
            if release is not None
            else "no held gang of this job needs it any more"
        )
        job = audit.job_ref(release.held.gang) if release is not None else _job_of(old)
        entries.append(
            audit.buffered(
                time=now,
                namespace=old.namespace,
                job=job,
                zone=old.zone or None,
                user=user,
                action="unbuffer",
                reason=DELETED,
                detail=f"CapacityBuffer {old.name} deleted: {why}",
                effects=effects,
                error=error,
            )
        )
    return entries


@dataclasses.dataclass(slots=True)
class KindMissing:
    """Until when (``time.monotonic()``) no buffer is written: the apiserver said it does not
    serve CapacityBuffers (no CRD). Without it every pass would write and audit the same
    refusal again."""

    until: float = 0.0


async def write(
    api: Objects,
    plan: Plan,
    *,
    now: datetime,
    user: str,
    settings: Settings,
    missing: KindMissing | None = None,
) -> list[audit.AuditEntry]:
    """Create or overwrite the buffers whose wanted state differs from the view's. Where the
    CapacityBuffer kind is missing, the template just written is deleted again and no buffer is
    written for ``MISSING_RETRY_SECONDS`` (one audit entry per gang and period)."""
    entries = []
    for want in plan.grow:
        if not want.changed or (missing is not None and time.monotonic() < missing.until):
            continue
        template, buffer = want.manifests()
        effects: list[EffectEntry] = []
        error = None
        try:
            if want.live:
                same = _same_template(template)
                written = await writer.create_or_replace(api, template, same=same)
                effects.append(written.effect())
            written = await writer.create_or_replace(api, buffer, optional=True)
            effects.append(written.effect())
            if written.outcome is EffectOutcome.KIND_MISSING:
                if missing is not None:
                    missing.until = time.monotonic() + MISSING_RETRY_SECONDS
                if want.live:
                    effects.append((await writer.delete(api, _target(template))).effect())
            elif not want.live:
                effects.append((await writer.delete(api, _target(template))).effect())
        except errors.ApiError as err:
            error = str(err)
            log.warning("cannot write CapacityBuffer %s/%s: %s", want.namespace, want.name, err)
        entries.append(
            audit.buffered(
                time=now,
                namespace=want.namespace,
                job=audit.job_ref(want.gang),
                zone=want.zone,
                user=user,
                action="buffer",
                reason=_reason(want),
                detail=want.detail,
                effects=effects,
                error=error,
            )
        )
    return entries


def _job_of(old: buffers.Existing) -> audit.JobRef:
    """The job a buffer no gang wants belongs to, from its ownerReference (its Events regard
    the job)."""
    ref: audit.JobRef = {"gang": old.gang_key}
    if old.owner is not None:
        api_version, kind, name, uid = old.owner
        ref.update({"apiVersion": api_version, "kind": kind, "name": name, "uid": uid})
    return ref


def _reason(want: buffers.Want) -> str:
    if not want.live:
        return STOPPED
    old = want.existing
    return MOVED if old is not None and old.zone and old.zone != want.zone else ASKED


def _same_template(template: Obj) -> Callable[[Obj], bool]:
    def same(existing: Obj) -> bool:
        return bool(existing.get("template") == template.get("template"))

    return same


def _target(manifest: Obj) -> dict[str, object]:
    meta = manifest["metadata"]
    return {
        "apiVersion": manifest["apiVersion"],
        "kind": manifest["kind"],
        "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
    }

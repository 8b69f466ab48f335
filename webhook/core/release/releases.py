"""Every way a held gang is released: a ``Release`` with the record and policy to write first and
the pods to ungate. Pure.

``release`` makes one for the zone (and the domain below it) a gang goes to; ``complete``
finishes a release a leader left half-done; ``admin`` carries out ``podium release``; ``follow``
sends a gang after its members that already run; ``spread`` releases a gang no zone could hold
across zones (``too-big: spread``); ``timeout`` releases a gang held past
``hold-timeout-seconds``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from datetime import UTC, datetime

from webhook.core import labels, neverfits, policies, resources, running, topology, zones
from webhook.core.release.gangs import (
    ADMIN,
    COMPLETED,
    TIMEOUT,
    TOO_BIG_SPREAD,
    HeldGang,
    PodRef,
    Release,
)
from webhook.core.release.room import Fit, Heading, place
from webhook.core.release.waits import needs
from webhook.core.settings import NoFit, Settings
from webhook.core.view import ClusterView, PodSummary


def complete(held: HeldGang, view: ClusterView, settings: Settings, now: datetime) -> Release:
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


def release(
    held: HeldGang,
    view: ClusterView,
    settings: Settings,
    now: datetime,
    *,
    zone: str | None,
    reason: str,
    fit: Fit,
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
        f"{zone} has room for all of {gang.display} ({needs(gang, fit.primary)}), "
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


def admin(
    held: HeldGang,
    view: ClusterView,
    settings: Settings,
    now: datetime,
    heading: Heading,
    *,
    unpinned: bool,
) -> Release:
    """An admin asked (``podium release``): the pods present go now, into the best zone that
    fits, else the roomiest, or into none; out of turn and whatever the head keeps."""
    fit = Fit.of(held, view, settings, heading)
    fitting = {z: c for z, c in fit.zones.items() if c.fits}
    zone = None if unpinned else place(fitting, fit, settings)[0] if fitting else fit.roomiest[0]
    by = held.gang.job_annotations.get(labels.RELEASED_BY) or "an admin"
    where = f"into {zone}" + ("" if zone in fitting else ", which has no room for all of it")
    detail = f"released by {by} {where if zone else 'unpinned'} after {held.waited(now):.0f}s held"
    released = release(held, view, settings, now, zone=zone, reason=ADMIN, fit=fit, detail=detail)
    return dataclasses.replace(released, by=by)


def follow(held: HeldGang, view: ClusterView, settings: Settings, now: datetime) -> Release | None:
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
    fit = Fit(zones.primary_of(held.gang.total, settings), 0, {})
    record = held.record
    below = None
    if record is not None and record.domain and record.zone == choice.zone:
        below = topology.Choice(topology.parse(record.domain), "its record's domain")
    return release(
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


def spread(
    held: HeldGang, view: ClusterView, settings: Settings, now: datetime, fit: Fit
) -> Release:
    detail = (
        f"no zone could hold all of {held.gang.display} ({needs(held.gang, fit.primary)}) even "
        "empty; released across zones with one job-wide policy (too-big: spread)"
    )
    return release(
        held, view, settings, now, zone=None, reason=TOO_BIG_SPREAD, fit=fit, detail=detail
    )


def timeout(
    held: HeldGang, view: ClusterView, settings: Settings, now: datetime, fit: Fit
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
        f"{needs(held.gang, fit.primary)}; {where}, so some pods may stay Pending"
    )
    return release(held, view, settings, now, zone=zone, reason=TIMEOUT, fit=fit, detail=detail)


def _refs(pods: Iterable[PodSummary]) -> tuple[PodRef, ...]:
    return tuple(PodRef(p.namespace, p.name, p.uid) for p in pods)

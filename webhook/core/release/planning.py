"""``plan``: the rules of ``webhook.core.release`` in the order they apply, the held gangs walked
oldest first. Pure.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import datetime

from webhook.core import buffers, labels
from webhook.core.adapters.base import PodGroup
from webhook.core.release.below import choose_below, when_short
from webhook.core.release.gangs import HeldGang, Plan, Release, Wait, held_gangs, needed, ready
from webhook.core.release.releases import admin, complete, follow, release, spread, timeout
from webhook.core.release.room import Fit, Heading, ZoneFit, place
from webhook.core.release.waits import (
    grow,
    in_line,
    never_fits,
    noted,
    timed_out,
    too_big,
    unready,
    waiting,
    waiting_for_buffer,
)
from webhook.core.settings import HoldOrder, Settings, TooBig
from webhook.core.view import ClusterView


def plan(
    view: ClusterView,
    settings: Settings,
    *,
    now: datetime,
    stable: Mapping[str, int] | None = None,
    only: Collection[str] | None = None,
) -> Plan:
    """What to release now and why the rest waits (the package's rules). ``stable``: the held
    pod counts of the previous pass; ``only``: decide for these gang keys alone (``podium
    release``)."""
    gangs = [h for h in held_gangs(view, settings) if only is None or h.key in only]
    grower = buffers.Grower(view, settings, now)
    if not gangs:
        return Plan((), (), {}, unwanted=tuple(grower.unwanted()) if only is None else ())
    heading = Heading(view, settings, now)
    releases: list[Release] = []
    waits: list[Wait] = []
    head: str | None = None
    for held in gangs:
        if (going := _at_once(held, view, settings, now, heading)) is not None:
            releases.append(going)
            continue
        if not ready(held, need := needed(held, view), stable or {}):
            waits.append(unready(held, need, view, settings))
            continue
        fit = Fit.of(held, view, settings, heading)
        if fitting := {z: c for z, c in fit.zones.items() if c.fits and z != head}:
            kept = _fitting(held, view, settings, now, fit, fitting, heading, releases, waits)
            head = head or kept
            continue
        grown = grow(grower, held, view, fit, heading)
        if isinstance(grown, buffers.Want) and grown.zone is not None:
            head = head if head or settings.hold_order is HoldOrder.FIT_FIRST else grown.zone
            waits.append(waiting_for_buffer(held, fit, grown, in_line(waits), settings))
            continue
        if not fit.could_hold:
            if settings.too_big is TooBig.SPREAD:
                releases.append(spread(held, view, settings, now, fit))
            else:
                waits.append(
                    noted(too_big(held, never_fits(held, view, fit.primary), view, fit), grown)
                )
            continue
        if timed_out(held, settings, now):
            releases.append(timeout(held, view, settings, now, fit))
            continue
        if head is None and settings.hold_order is HoldOrder.OLDEST_FIRST:
            head = fit.closest
        waits.append(noted(waiting(held, fit, in_line(waits), head_zone=head), grown))
    counts = {h.key: len(h.held) for h in gangs}
    unwanted = tuple(grower.unwanted()) if only is None else ()
    return Plan(tuple(releases), tuple(waits), counts, tuple(grower.wants), unwanted)


def _at_once(
    held: HeldGang, view: ClusterView, settings: Settings, now: datetime, heading: Heading
) -> Release | None:
    """A gang released before any other rule asks whether it is ready, fits or waits its turn:
    one whose release a leader left half-done (completion), one an admin asked for (``podium
    release``), one with members that run already (following); its pods then head into the zone
    it goes to, as ``heading`` counts them. None: the rules after these decide."""
    if held.record is not None and held.record.zone and held.released:
        return complete(held, view, settings, now)
    if (asked := held.gang.job_annotations.get(labels.RELEASE)) is not None:
        admitted = admin(held, view, settings, now, heading, unpinned=asked == "unpinned")
        if admitted.zone is not None:
            heading.add(admitted.zone, held.gang.demand)
        return admitted
    if (followed := follow(held, view, settings, now)) is not None:
        heading.add(str(followed.zone), [PodGroup(1, p.requests) for p in held.held])
    return followed


def _fitting(
    held: HeldGang,
    view: ClusterView,
    settings: Settings,
    now: datetime,
    fit: Fit,
    fitting: Mapping[str, ZoneFit],
    heading: Heading,
    releases: list[Release],
    waits: list[Wait],
) -> str | None:
    """A gang that fits ``fitting`` released into the zone ``place`` chooses and, with
    ``topology-levels``, the tightest domain of it that fits (``choose_below``); or, when it
    requires a level no domain of which has room, its wait (``when_short``): then the zone it
    would keep as the head (``hold-order: oldest-first``), as a gang that fits no zone does."""
    zone, reason = place(fitting, fit, settings)
    below = None
    if settings.topology_levels:
        below, zone, reason, short = choose_below(held, view, settings, heading, fit, fitting)
        if short is not None:
            out = when_short(held, view, settings, now, fit, short, waits, heading)
            if isinstance(out, Release):
                releases.append(out)
                return None
            waits.append(out)
            return out.best_zone if settings.hold_order is HoldOrder.OLDEST_FIRST else None
    released = release(held, view, settings, now, zone=zone, reason=reason, fit=fit, below=below)
    releases.append(released)
    heading.add(zone, held.gang.demand, below.domain if below else ())
    return None

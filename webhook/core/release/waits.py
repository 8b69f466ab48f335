"""Why a held gang waits, in words people read. Pure.

Its pods do not all exist yet (``unready``); no zone could hold it even empty (``too_big``,
``never_fits``); no zone has room now (``waiting``); or it waits for the autoscaler to grow the
zone its CapacityBuffer asks (``grow``, ``waiting_for_buffer``, ``noted``: ``capacity-buffers:
on``). With its place in line (``in_line``) and whether it has waited past
``hold-timeout-seconds`` (``timed_out``); ``needs`` says what a gang needs, as the releases'
details say it too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from webhook.core import buffers, neverfits, resources, zones
from webhook.core.adapters.base import Gang, Stage
from webhook.core.objects import Obj
from webhook.core.release.gangs import HeldGang, Wait, size_of
from webhook.core.release.room import Fit, Heading, constraint_of
from webhook.core.settings import CapacityBuffers, Settings, TooBig
from webhook.core.view import ClusterView


def unready(held: HeldGang, need: Stage | None, view: ClusterView, settings: Settings) -> Wait:
    """Why a gang whose pods do not all exist yet waits: too big already, said at once
    (``_never_fits_early``, with ``too-big: hold``), else for its pods."""
    early = _never_fits_early(held, view, settings)
    if early is not None and settings.too_big is TooBig.HOLD:
        return too_big(held, early, view)
    return _not_ready(held, need)


def _not_ready(held: HeldGang, need: Stage | None) -> Wait:
    present = len(held.held) + len(held.released)
    why = f"waiting for its pods: {present} of {need.pods if need else size_of(held.gang)} exist"
    if need is not None and need.why:
        why += f" ({need.why})"
    return Wait(held=held, why=why, position=0)


def never_fits(
    held: HeldGang, view: ClusterView, primary: str, pod: Obj | None = None
) -> neverfits.NeverFits | None:
    """Whether no zone could hold the gang even with every node free (``neverfits``), on the
    nodes its pods may use (the constraint of ``pod``, else ``constraint_of``)."""
    constraint = pod if pod is not None else constraint_of(held)
    return neverfits.never_fits_on(held.gang.demand, primary, view.candidate_zones(constraint))


def _never_fits_early(
    held: HeldGang, view: ClusterView, settings: Settings
) -> neverfits.NeverFits | None:
    """A gang not ready yet (``ready``) that can never fit is said to be so at once, not once
    its last pod exists: when its demand is read from the job and a pod asking for its largest
    share of the primary resource is here (its constraint says where such pods may go; a
    CPU-only launcher's would not). Not with ``capacity-buffers: on``: once ready, the gang gets
    a buffer in a zone the autoscaler may grow, and only a gang no buffer can be made for is too
    big (``grow``)."""
    gang = held.gang
    if gang.demand_source != "job" or settings.capacity_buffers is CapacityBuffers.ON:
        return None
    primary = zones.primary_of(gang.total, settings)
    size = max((g.requests.get(primary, 0) for g in gang.demand if g.count), default=0)
    widest = next((p for p in held.held if size and p.requests.get(primary, 0) >= size), None)
    if widest is None:
        return None
    return never_fits(held, view, primary, widest.constraint or {})


def too_big(
    held: HeldGang,
    never: neverfits.NeverFits | None,
    view: ClusterView,
    fit: Fit | None = None,
) -> Wait:
    """A gang no zone could hold even empty: why, and the ways out."""
    gang = held.gang
    primary = never.primary if never is not None else fit.primary if fit is not None else ""
    owner = gang.owner
    command = f"podium release {owner.kind.lower()}/{owner.name} -n {held.namespace}"
    why = f"needs {needs(gang, primary)} in one zone, more than any zone holds even empty"
    if never is not None:
        why += f" ({never.describe()}); held until an admin acts: {never.ways_out(command)}"
    else:
        why += f"; held until an admin acts ({command}, or too-big: spread)"
    if fit is not None:
        zone, free = fit.roomiest
    else:
        zone = never.best if never is not None else None
        nodes = view.candidate_zones(constraint_of(held)).get(zone) if zone else None
        free = max(0, nodes.free().get(primary, 0)) if nodes is not None else 0
    return Wait(
        held=held, why=why, position=0, too_big=True, best_zone=zone, best_free=free, never=never
    )


def waiting(held: HeldGang, fit: Fit, position: int, *, head_zone: str | None) -> Wait:
    zone, free = fit.roomiest
    roomiest = (
        f"the roomiest zone, {zone}, has {resources.amount(fit.primary, free)} free"
        if zone
        else "no zone admits its pods"
    )
    if zone and len(split := fit.zones[zone].per_node) > 1:
        roomiest += f" ({neverfits.per_node(split, fit.primary)})"
    need = needs(held.gang, fit.primary)
    why = f"needs {need} in one zone; {roomiest}; {ordinal(position)} in line"
    if position == 1 and head_zone:
        why += f" (first: {head_zone} is kept for it)"
    return Wait(held=held, why=why, position=position, best_zone=zone, best_free=free)


def in_line(waits: Sequence[Wait]) -> int:
    """The place in line of the next gang that waits for room: after those already waiting."""
    return sum(1 for w in waits if w.position) + 1


def timed_out(held: HeldGang, settings: Settings, now: datetime) -> bool:
    return bool(settings.hold_timeout_seconds) and held.waited(now) >= settings.hold_timeout_seconds


# -- capacity buffers (``buffers``) -----------------------------------------------------------


def grow(
    grower: buffers.Grower, held: HeldGang, view: ClusterView, fit: Fit, heading: Heading
) -> buffers.Want | buffers.Refused | None:
    """The buffer a ready gang that fits no zone should have (``buffers.Grower.ask``), from
    the room per node of each zone its pods may use, the pods heading there counted."""
    if not grower.on:
        return None
    constraint = constraint_of(held)
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


def waiting_for_buffer(
    held: HeldGang, fit: Fit, want: buffers.Want, position: int, settings: Settings
) -> Wait:
    """A gang that waits for the autoscaler to grow the zone its buffer asks."""
    assert want.zone is not None
    until = want.since + timedelta(seconds=settings.buffer_deadline_seconds)
    why = (
        f"needs {needs(held.gang, fit.primary)} in one zone and no zone has room; "
        f"{want.detail}: {buffers.provisioning_note(want.existing)}; asked until "
        f"{until.astimezone(UTC).isoformat(timespec='seconds')}; {ordinal(position)} in line"
    )
    zone, free = want.zone, fit.zones[want.zone].free if want.zone in fit.zones else 0
    return Wait(held=held, why=why, position=position, best_zone=zone, best_free=free)


def noted(wait: Wait, grown: buffers.Want | buffers.Refused | None) -> Wait:
    """``wait`` with what became of its buffer (refused, stopped) said after its why."""
    note = grown.why if isinstance(grown, buffers.Refused) else grown.detail if grown else ""
    return dataclasses.replace(wait, why=f"{wait.why}; {note}") if note else wait


def needs(gang: Gang, primary: str) -> str:
    """What the gang needs of ``primary``, counting the pods that ask for it (an MPIJob's
    CPU-only launcher is not one of its 4 × 8-GPU workers), in units people read."""
    asking = [g for g in gang.demand if g.count and g.requests.get(primary, 0)]
    pods = sum(g.count for g in asking)
    sizes = {g.requests[primary] for g in asking}
    if len(sizes) == 1:
        return f"{pods} × {resources.amount(primary, sizes.pop())}"
    return f"{resources.amount(primary, gang.total.get(primary, 0))} over {pods} pods"


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"

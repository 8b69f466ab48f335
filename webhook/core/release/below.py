"""The domain below the zone a gang that fits goes into (``topology-levels``). Pure.

``choose_below`` asks ``topology.choose`` in each zone where the gang fits, on the room
``Heading`` leaves, and sends the gang to a zone where its domain is the finest; a gang that
requires a level no domain of which has room waits in line, and once held past
``hold-timeout-seconds`` goes into the zone alone (``when_short``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import datetime

from webhook.core import topology
from webhook.core.release.gangs import TIMEOUT, HeldGang, Release, Wait
from webhook.core.release.releases import release
from webhook.core.release.room import Fit, Heading, ZoneFit, constraint_of, place
from webhook.core.release.waits import in_line, ordinal, timed_out
from webhook.core.settings import Settings
from webhook.core.view import ClusterView, ZoneNodes


def choose_below(
    held: HeldGang,
    view: ClusterView,
    settings: Settings,
    heading: Heading,
    fit: Fit,
    fitting: Mapping[str, ZoneFit],
) -> tuple[topology.Choice | None, str, str, Wait | None]:
    """The domain below the zone for a gang that fits ``fitting`` (``topology.choose``), the
    zone (and reason) it goes to, or — when it requires a level no domain of which has room in
    any zone it fits — the wait that says so (its ``best_zone``: the zone of the roomiest
    domain, kept for it as a head's is). A gang that does not require a level goes to the zone
    ``place`` chose among those where its domain is the finest (``topology.rank``: a block beats
    two blocks, two blocks the zone alone: the zone fit alone would send a gang to the tightest
    zone even where only another zone has a block with room for it); one that requires a level,
    to the best zone among those with a domain of it that fits."""
    widest = max(held.held, key=lambda p: sum(p.requests.values()))
    ask = topology.ask_of(widest.annotations, settings.topology_levels)
    zone, reason = place(fitting, fit, settings)
    if ask.level is None:
        return topology.Choice((), ask.note), zone, reason, None
    nodes = view.candidate_zones(constraint_of(held))
    choices = {
        z: _choose(held, heading, z, nodes[z], fit.primary, ask, settings) for z in sorted(fitting)
    }
    ranks = {z: topology.rank(c.domain) for z, c in choices.items() if not c.wait}
    if ranks:
        finest = max(ranks.values())
        zone, reason = place(
            {z: fitting[z] for z, r in ranks.items() if r == finest}, fit, settings
        )
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
    heading: Heading,
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


def when_short(
    held: HeldGang,
    view: ClusterView,
    settings: Settings,
    now: datetime,
    fit: Fit,
    short: Wait,
    waits: Sequence[Wait],
    heading: Heading,
) -> Release | Wait:
    """A gang that requires a level no domain of which has room waits in line as a gang that
    fits no zone does (the head keeps the zone of its roomiest domain); once it has waited
    ``hold-timeout-seconds`` it is released into that zone, the zone alone."""
    if not timed_out(held, settings, now):
        position = in_line(waits)
        why = f"{short.why}; {ordinal(position)} in line"
        return dataclasses.replace(short, why=why, position=position)
    zone = short.best_zone
    assert zone is not None
    heading.add(zone, held.gang.demand)
    detail = (
        f"held {held.waited(now):.0f}s (hold-timeout-seconds {settings.hold_timeout_seconds:g}): "
        f"{short.why}; released into {zone} alone"
    )
    return release(held, view, settings, now, zone=zone, reason=TIMEOUT, fit=fit, detail=detail)

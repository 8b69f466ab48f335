"""Whether a gang can ever fit one zone, and how free room is split over a zone's nodes. Pure.

A held gang (``zone-chooser: hold``) waits for one zone with room for all of it. A gang bigger
than every zone *even with every node free* would wait for ever: ``never_fits`` says so, from the
allocatable of the nodes its pods may use in each zone (``capacity_of``: schedulable, Ready,
admitted by the pods' own node selection and tolerations), node by node — a 16-GPU pod never fits
a zone of 8-GPU nodes, whatever their sum. The releaser then says it at once (the held
annotation, a Warning Event, the audit trail, ``podium_gangs_too_big``, ``podium doctor``'s
``too-big``) and names the ways out: run it across zones (``podium release … --unpinned`` for
this job, ``too-big: spread`` for every such gang) or make it smaller (``NeverFits.at_most``
pods of its largest size fit the roomiest zone).

The capacity is a plain mapping of zone → the allocatable of each node, so that a caller may add
what a zone could still grow by (nodes an autoscaler may add) before asking; ``never_fits_on``,
what the releaser asks, takes a view's candidate zones and that growth (``more``) and packs the
largest zone first.

``per_node`` says how a zone's free room is split over its nodes, in a bounded number of
characters: "21 nvidia.com/gpu free" as 6/5/5/5 per node holds no 8-GPU pod, as 21 on one node
two of them.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from webhook.core import resources, zones
from webhook.core.adapters.base import PodGroup, total_of
from webhook.core.view import ZoneNodes

#: ``per_node`` lists each node's free amount up to this many nodes, then groups equal amounts.
LISTED_NODES = 8
#: ``per_node`` names at most this many distinct amounts when it groups them.
GROUPS = 4


@dataclasses.dataclass(frozen=True, slots=True)
class NeverFits:
    """A gang no zone could hold even with every node free, and the numbers that say so."""

    primary: str
    #: What the gang needs of the primary resource in all.
    need: int
    #: The largest request of the primary resource among its pods.
    pod_size: int
    #: Per zone: the allocatable primary resource of the nodes its pods may use.
    zones: Mapping[str, int]
    #: The zone that could hold the most pods of ``pod_size`` (None: no zone admits its pods).
    best: str | None
    #: How many pods of ``pod_size`` fit ``best`` with every node free.
    at_most: int

    def describe(self) -> str:
        """Where the gang could go at best, with every node free."""
        if self.best is None:
            return "no Ready node its pods may use is in a zone"
        size = resources.amount(self.primary, self.pod_size)
        whole = resources.amount(self.primary, self.zones[self.best])
        return (
            f"the largest zone for it, {self.best}, has {whole} on the nodes its pods may use: "
            f"room for {self.at_most} pod(s) of {size} at most"
        )

    def ways_out(self, release: str) -> str:
        """What an admin can do, ``release`` being the command that releases this job
        (``podium release KIND/NAME -n NS``)."""
        if self.best is None:
            return "check its pods' node selector, affinity and tolerations, or add such nodes"
        size = resources.amount(self.primary, self.pod_size)
        if self.at_most == 0:
            return f"no node its pods may use holds one pod of {size}: make its pods smaller"
        return (
            f"run it across zones ({release} --unpinned for this job, or the setting "
            f"too-big: spread for every such gang), or shrink it to at most {self.at_most} "
            f"pod(s) of {size}"
        )


def capacity_of(nodes: ZoneNodes) -> list[resources.Resources]:
    """The allocatable of each candidate node of a zone: the zone with every node free."""
    return [n.allocatable for n in nodes.nodes.values()]


def could_hold(
    demand: Sequence[PodGroup],
    free: list[resources.Resources],
    primary: str,
    *,
    total: int | None = None,
) -> bool:
    """Whether ``demand`` packs onto nodes with ``free`` (one mutable map per node, used up:
    ``zones.pack_into``, node by node); the sums rule out first what cannot fit at all
    (``total``: the sum of ``primary`` over ``free``, when the caller has it already)."""
    need = total_of(demand).get(primary, 0)
    if total is None:
        total = sum(max(0, c.get(primary, 0)) for c in free)
    return need <= total and zones.pack_into(demand, free, primary)


def never_fits(
    demand: Sequence[PodGroup],
    primary: str,
    capacity: Mapping[str, Sequence[resources.Resources]],
) -> NeverFits | None:
    """None when some zone of ``capacity`` (zone → the allocatable of each node the gang's pods
    may use there) could hold the whole of ``demand``; else why not."""
    if any(could_hold(demand, [dict(c) for c in nodes], primary) for nodes in capacity.values()):
        return None
    asking = [g for g in demand if g.count and g.requests.get(primary, 0) > 0]
    largest = max(asking, key=lambda g: g.requests[primary]) if asking else None
    pod_size = largest.requests[primary] if largest else 0
    need = {k: v for k, v in largest.requests.items() if v > 0} if largest else {}
    best, at_most = None, -1
    for zone, nodes in sorted(capacity.items()):
        if not nodes:
            continue
        fit = sum(_pods_on(node, need) for node in nodes)
        if fit > at_most:
            best, at_most = zone, fit
    return NeverFits(
        primary=primary,
        need=total_of(demand).get(primary, 0),
        pod_size=pod_size,
        zones={z: sum(max(0, c.get(primary, 0)) for c in n) for z, n in sorted(capacity.items())},
        best=best,
        at_most=max(at_most, 0),
    )


def never_fits_on(
    demand: Sequence[PodGroup],
    primary: str,
    candidates: Mapping[str, ZoneNodes],
    more: Mapping[str, Sequence[resources.Resources]] | None = None,
) -> NeverFits | None:
    """``never_fits`` on each zone's candidate nodes (``View.candidate_zones``) and, per zone,
    the allocatable of ``more`` nodes it may still get (what an autoscaler may add), the cheap
    way first: zones by their summed allocatable, largest first, each packed only when its sum
    suffices, so a gang that fits one (the common case) costs one packing."""
    grow = more or {}

    def capacity(zone: str) -> list[resources.Resources]:
        nodes = candidates.get(zone)
        return [*(capacity_of(nodes) if nodes is not None else ()), *grow.get(zone, ())]

    def whole(zone: str) -> int:
        nodes = candidates.get(zone)
        extra = sum(max(0, c.get(primary, 0)) for c in grow.get(zone, ()))
        return (nodes.allocatable.get(primary, 0) if nodes is not None else 0) + extra

    names = sorted({*candidates, *grow})
    for zone in sorted(names, key=lambda z: -whole(z)):
        if could_hold(demand, [dict(c) for c in capacity(zone)], primary, total=whole(zone)):
            return None
    return never_fits(demand, primary, {z: capacity(z) for z in names})


def _pods_on(node: resources.Resources, need: Mapping[str, int]) -> int:
    """How many pods that each need ``need`` fit on an empty node with ``node`` allocatable."""
    if not need:
        return 0
    return max(0, min(node.get(k, 0) // v for k, v in need.items()))


def per_node(free: Iterable[int], resource: str = "") -> str:
    """``_per_node`` of ``free`` as a tuple: every held gang of a pass that waits for the same
    roomiest zone shares its answer."""
    return _per_node(tuple(free), resource)


@functools.lru_cache(maxsize=256)
def _per_node(free: tuple[int, ...], resource: str) -> str:
    """How free room is split over a zone's nodes, most first and bounded in length: each node's
    amount while at most ``LISTED_NODES`` have some (``6/5/5/5 per node``), else the amounts
    grouped, largest first (``6 on 1 node, 5 on 3, less on 7``: at most ``GROUPS`` of them);
    then the nodes with none (``none on 5 others``). Amounts in ``resource``'s units
    (``resources.amount``: cores, Gi) when given."""

    def show(n: int) -> str:
        return resources.amount(resource, n).partition(" ")[0] if resource else str(n)

    amounts = sorted((max(0, f) for f in free), reverse=True)
    some = [a for a in amounts if a]
    none = len(amounts) - len(some)
    if not some:
        return "none on any node" if amounts else "no node"
    if len(some) == 1:
        text = f"{show(some[0])} on one node"
    elif len(some) <= LISTED_NODES:
        text = "/".join(map(show, some)) + " per node"
    else:
        counts = sorted(Counter(some).items(), reverse=True)
        shown = [
            f"{show(amount)} on {n}" + ((" node" if n == 1 else " nodes") if i == 0 else "")
            for i, (amount, n) in enumerate(counts[:GROUPS])
        ]
        rest = sum(n for _, n in counts[GROUPS:])
        text = ", ".join(shown) + (f", less on {rest}" if rest else "")
    if none:
        text += f", none on {none} other" + ("s" if none > 1 else "")
    return text

"""Which network domain below the zone a gang is released into (``topology-levels``). Pure.

The zone keeps a gang's NCCL traffic from being dropped; where in the zone its pods land decides
how fast that traffic is. ``topology-levels`` lists node label keys below the zone, coarse to fine
(EKS ``topology.k8s.aws/network-node-layer-1..3``, GKE ``cloud.google.com/gce-topology-block`` /
``-subblock`` / ``-host``, …: docs/topology.md). A **domain** of level *i* is the nodes that share
the values of levels 0..*i* (as Kueue's TAS names them); a node lacking one of those labels is in
no domain of that level, so it is never chosen for it.

Once the releaser has decided a gang's zone, ``choose`` picks, on that zone's nodes with the room
the releaser's model gives them (``release.room.Heading``: released-but-unbound pods counted as the
scheduler spreads them), the tightest domain that fits the whole gang by per-node fit
(``zones.pack_into``): Kueue's BestFit, the domain left with the least free primary resource once
the gang is in (ties: the domain's values). What the gang asks for (``ask_of``, from its pods'
annotations):

* ``podium.dev/required-topology: <level key>``: one domain of that level or wait
  (``Choice.wait``, saying the roomiest domain's room).
* ``podium.dev/preferred-topology: <level key>``: the finest level that fits, starting at that
  level and climbing towards the zone; then, below the domain it climbed to (or the zone, when no
  domain of any level fits), the **fewest** domains of each finer level down to the asked one
  that together fit it (``fewest``: Kueue's BestFit over several domains, the roomiest first and
  the tightest that completes the gang last). The zone alone only when even that cannot be
  said exactly by node selection or needs nodes that lack a level's label.
* neither: preferred at the finest configured level.
* a key that is not one of ``topology-levels``: the zone alone, said in ``Ask.note``.

The release then requires ``<level key> In [<values>]`` for every level down to the chosen one.
A domain is a tuple of (key, value) pairs, coarse to fine; a level spread over several domains
repeats its key once per value (``describe`` writes them ``key=v1,v2``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import NamedTuple

from webhook.core import labels, resources, zones
from webhook.core.adapters.base import PodGroup, is_label_value, total_of

#: A domain: (level label key, value) for every level down to its own, coarse to fine.
#: Empty: the zone alone.
Domain = tuple[tuple[str, str], ...]


class Slot(NamedTuple):
    """One node of the zone as ``choose`` sees it: its labels, its room (free once the pods
    heading there are counted) and its allocatable."""

    labels: Mapping[str, str]
    free: resources.Resources
    allocatable: resources.Resources


@dataclasses.dataclass(frozen=True, slots=True)
class Ask:
    """What a gang asks for: the index of the level to start at in ``topology-levels`` (None:
    the zone alone), and whether that level is required."""

    level: int | None
    required: bool = False
    #: Why the ask is not what the annotation said (an unknown level key), in words.
    note: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class Candidate:
    """How a gang fits one domain."""

    domain: Domain
    fits: bool
    #: Free primary resource of the domain's nodes (each counted from 0 up), before the gang.
    free: int
    #: The domain's summed allocatable of the primary resource.
    allocatable: int
    nodes: int


@dataclasses.dataclass(frozen=True, slots=True)
class Choice:
    """Where in its zone the gang goes: ``domain`` (empty: the zone alone) and why; ``wait``: it
    required a level no domain of which fits it now (``roomiest`` says the closest)."""

    domain: Domain
    why: str
    wait: bool = False
    #: The required (or asked) level's key, when the gang asked for one.
    level: str = ""
    roomiest: Candidate | None = None


def ask_of(annotations: Mapping[str, str], levels: Sequence[str]) -> Ask:
    """The gang's ask from one of its pods' annotations (the pod template's, as Kueue reads
    ``kueue.x-k8s.io/podset-required-topology``)."""
    if not levels:
        return Ask(None)
    for key, required in ((labels.REQUIRED_TOPOLOGY, True), (labels.PREFERRED_TOPOLOGY, False)):
        if (asked := annotations.get(key)) is None:
            continue
        if asked in levels:
            return Ask(list(levels).index(asked), required)
        note = (
            f"{key}: {asked!r} is not one of topology-levels ({', '.join(levels)}); "
            "released into the zone alone"
        )
        return Ask(None, note=note)
    return Ask(len(levels) - 1)


def domains(slots: Sequence[Slot], levels: Sequence[str], level: int) -> dict[Domain, list[int]]:
    """The domains of level ``level`` among ``slots``: each domain's slot indexes, in order.
    A slot lacking a label of levels 0..``level`` is in none."""
    keys = levels[: level + 1]
    out: dict[Domain, list[int]] = {}
    for i, slot in enumerate(slots):
        values = [slot.labels.get(k) or "" for k in keys]
        if all(values):
            out.setdefault(tuple(zip(keys, values, strict=True)), []).append(i)
    return out


def candidates(
    slots: Sequence[Slot],
    levels: Sequence[str],
    level: int,
    demand: Sequence[PodGroup],
    primary: str,
) -> list[Candidate]:
    """How the gang fits each domain of ``level``, by name."""
    need = total_of(demand).get(primary, 0)
    out = []
    for domain, members in sorted(domains(slots, levels, level).items()):
        free = sum(max(0, slots[i].free.get(primary, 0)) for i in members)
        fits = need <= free and zones.pack_into(
            demand, [dict(slots[i].free) for i in members], primary
        )
        allocatable = sum(slots[i].allocatable.get(primary, 0) for i in members)
        out.append(Candidate(domain, fits, free, allocatable, len(members)))
    return out


def tightest(fitting: Iterable[Candidate], need: int) -> Candidate | None:
    """BestFit: the domain left with the least free primary resource once the gang is in;
    ties by the domain's values."""
    return min(fitting, key=lambda c: (c.free - need, c.domain), default=None)


def choose(
    slots: Sequence[Slot],
    demand: Sequence[PodGroup],
    primary: str,
    levels: Sequence[str],
    ask: Ask,
) -> Choice:
    """The tightest domain of the zone (``slots``) that fits the whole gang, at the asked level
    or — preferred — the first coarser one that has such a domain, and below it the fewest
    domains of each finer level down to the asked one (module docstring)."""
    if ask.level is None:
        return Choice((), ask.note)
    need = total_of(demand).get(primary, 0)
    asked = levels[ask.level]
    roomiest: Candidate | None = None
    lowest = ask.level if ask.required else 0
    for level in range(ask.level, lowest - 1, -1):
        found = candidates(slots, levels, level, demand, primary)
        if level == ask.level:
            roomiest = min(found, key=lambda c: (-c.free, c.domain), default=None)
        best = tightest((c for c in found if c.fits), need)
        if best is None:
            continue
        fitting = sum(1 for c in found if c.fits)
        why = (
            f"the tightest of {fitting} {levels[level]} domain(s) with room for all of it "
            f"({resources.amount(primary, best.free - need)} left there)"
        )
        if level == ask.level:
            return Choice(best.domain, why, level=asked, roomiest=roomiest)
        why += f"; no {asked} domain has room"
        domain, below = _descend(
            slots, levels, level + 1, ask.level, demand, primary, best.domain, "below it"
        )
        return Choice(domain, why + below, level=asked, roomiest=roomiest)
    if ask.required:
        return Choice((), _short(asked, roomiest, primary, need), wait=True, level=asked)
    none = f"no domain of {', '.join(levels[: ask.level + 1])} has room for all of it"
    domain, below = _descend(slots, levels, 0, ask.level, demand, primary, (), "in the zone")
    why = none + (below or ": the zone alone")
    return Choice(domain, why, level=asked, roomiest=roomiest)


def _descend(
    slots: Sequence[Slot],
    levels: Sequence[str],
    first: int,
    last: int,
    demand: Sequence[PodGroup],
    primary: str,
    within: Domain,
    where: str,
) -> tuple[Domain, str]:
    """Below ``within``, the fewest domains of each level ``first``..``last`` that together fit
    the gang (``fewest``), each level inside the one before, and what it says of the finest;
    ``within`` itself (and nothing said) when a level has no such set; a level whose set
    takes every node already chosen narrows nothing and is not named."""
    domain, said = within, ""
    for level in range(first, last + 1):
        found = fewest(slots, levels, level, demand, primary, domain)
        if found is None:
            break
        narrower, picked, left = found
        if _count(slots, narrower) == _count(slots, domain):
            continue  # every domain of the level it is in: no narrower than before
        domain = narrower
        said = (
            f"; {where} the fewest {levels[level]} domains with room for all of it together: "
            f"{picked} ({resources.amount(primary, left)} left there)"
        )
    return domain, said


def fewest(
    slots: Sequence[Slot],
    levels: Sequence[str],
    level: int,
    demand: Sequence[PodGroup],
    primary: str,
    within: Domain = (),
) -> tuple[Domain, int, int] | None:
    """The fewest domains of ``level`` inside ``within`` whose nodes together fit the whole
    gang by per-node fit, as one domain (the values of every level down to ``level``), with
    how many it took and the primary resource left there: Kueue's BestFit across domains —
    the domains that take most of the gang's widest pods first, and for the last pick the
    tightest that completes it. A set is only taken if node selection by each level's values
    takes no node outside it (a value repeated under another parent would); None when no set
    fits so."""
    selected = selects(within)
    inside = [s for s in slots if selected(s.labels)]
    members = domains(inside, levels, level)
    widest = max((g.requests.get(primary, 0) for g in demand), default=0) or 1
    free = {d: [max(0, inside[i].free.get(primary, 0)) for i in m] for d, m in members.items()}
    total = {d: sum(f) for d, f in free.items()}
    order = sorted(members, key=lambda d: (-sum(f // widest for f in free[d]), -total[d], d))
    need = total_of(demand).get(primary, 0)
    keys = levels[: level + 1]

    def spread(picked: Sequence[Domain]) -> Domain:
        return tuple((k, v) for i, k in enumerate(keys) for v in sorted({d[i][1] for d in picked}))

    def completes(picked: Sequence[Domain]) -> bool:
        nodes = [i for d in picked for i in members[d]]
        if not zones.pack_into(demand, [dict(inside[i].free) for i in nodes], primary):
            return False
        return _count(slots, spread(picked)) == len(nodes)  # node selection takes just these

    taken = 0
    for first in range(len(order)):
        chosen, rest = order[:first], order[first:]
        for last in sorted(rest, key=lambda d: (total[d], d)):  # the tightest that completes
            if taken + total[last] >= need and completes([*chosen, last]):
                picked = [*chosen, last]
                return spread(picked), len(picked), taken + total[last] - need
        taken += total[order[first]]
    return None


def _count(slots: Sequence[Slot], domain: Domain) -> int:
    """How many of ``slots`` node selection by ``domain`` takes."""
    inside = selects(domain)
    return sum(inside(s.labels) for s in slots)


def _short(level: str, roomiest: Candidate | None, primary: str, need: int) -> str:
    """Why a gang that requires ``level`` waits: the roomiest domain's room, in words."""
    wants = f"requires one {level} domain with {resources.amount(primary, need)} free"
    if roomiest is None:
        return f"{wants}; no node of its zone carries {level}"
    return (
        f"{wants}; the roomiest, {roomiest.domain[-1][1]}, has "
        f"{resources.amount(primary, roomiest.free)} free of "
        f"{resources.amount(primary, roomiest.allocatable)} on {roomiest.nodes} node(s)"
    )


def values(domain: Domain) -> dict[str, list[str]]:
    """Each level of ``domain`` with its values, coarse to fine (one value unless spread)."""
    out: dict[str, list[str]] = {}
    for key, value in domain:
        out.setdefault(key, []).append(value)
    return out


def selects(domain: Domain) -> Callable[[Mapping[str, str]], bool]:
    """Whether a node (by its labels) is in ``domain`` — its label for every level one of the
    domain's values for that level — the domain read once for many nodes (the releaser asks it
    for every node of a zone and every domain pods head into, each pass)."""
    wanted = [(key, frozenset(vs)) for key, vs in values(domain).items()]
    return lambda node_labels: all(node_labels.get(key) in vs for key, vs in wanted)


def rank(domain: Domain) -> tuple[int, int]:
    """How tight ``domain`` is, larger tighter: the levels it names, then the fewer values at
    its finest level (one block beats two blocks of the same level; the zone alone ranks last)."""
    levels = values(domain)
    return len(levels), -len(next(reversed(levels.values()), ()))


def describe(domain: Domain) -> str:
    """A domain as annotations, records and people read it: ``key=value,key=value``, a spread
    level's values after its key (``key=v1,v2``)."""
    return ",".join(f"{k}={','.join(vs)}" for k, vs in values(domain).items())


def parse(text: str) -> Domain:
    """``describe`` read back (a part without ``=`` is one more value of the level before it);
    anything malformed — a value that is no label value included — reads as the zone alone (an
    old record, a hand edit)."""
    out: list[tuple[str, str]] = []
    for part in text.split(",") if text else ():
        key, sep, value = part.partition("=")
        if not sep and out:
            key, value = out[-1][0], part
        if not key or not is_label_value(value):
            return ()
        out.append((key, value))
    return tuple(out)


def requirements(domain: Domain) -> list[dict[str, object]]:
    """The node selector requirements that keep a pod in ``domain``, coarse to fine."""
    return [{"key": k, "operator": "In", "values": vs} for k, vs in values(domain).items()]


def outside(domain: Domain, node_labels: Mapping[str, Mapping[str, str]]) -> list[str]:
    """The nodes (by name, of ``node_labels``) that are not in ``domain``."""
    inside = selects(domain)
    return sorted(name for name, seen in node_labels.items() if not inside(seen))

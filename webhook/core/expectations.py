"""The releaser's memory between passes, as a value: what it ungated and awaits the watch to show,
what it last reported and wrote on held pods, and the held pod counts ``release.plan`` compares.

Pure: every method returns a new ``Expectations`` (or says what to do) and changes nothing, so a
pass is ``memory in → (what to do, memory out)`` and each rule is a table. The releaser
(``webhook.serve.releaser``) holds one and passes it through; the I/O stays there.

* **ungated, awaiting the watch** (``ungate``, ``catch_up``): a pod this replica ungated counts
  as free room in the view until the watch delivers its release, so no pass plans until the
  view shows each one released, gone or recreated — for at most ``patience`` seconds a pod (a
  watch that lags for good is a fault of its own; the apiserver's own check keeps a released
  gang where it is). Kueue's ungater keeps the same kind of store (``pkg/util/expectations``:
  UIDs expected per workload, observed by the pod event handler, no reconcile until satisfied).
* **reported** (``report``): the why last audited per waiting gang; a gang is audited again only
  when its why changes, and forgotten once it no longer waits.
* **said** (``to_say``, ``said_to``): the why last written on each held pod (by UID) as
  ``podium.dev/held``, so that a view that has not shown the write yet causes no second one; a
  write that failed is remembered as not made.
* **counts** (``counted``): held pods per gang at the previous periodic pass (``release.plan``'s
  ``stable``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import NamedTuple, Protocol, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class PodKey(NamedTuple):
    """A pod as ungated: its name and the UID it had (a pod recreated under the name is another)."""

    namespace: str
    name: str
    uid: str


class ShownPod(Protocol):
    """What the view shows of a pod: enough to tell whether a release has been seen."""

    @property
    def uid(self) -> str: ...

    @property
    def gated(self) -> bool: ...


class Shows(Protocol):
    """The view, read-only, as far as the store needs it (``ClusterView`` is one)."""

    def pod(self, namespace: str, name: str) -> ShownPod | None: ...


class HeldPod(NamedTuple):
    """A held pod, what its ``podium.dev/held`` annotation shows now, and the why to say."""

    namespace: str
    name: str
    uid: str
    shown: str | None
    why: str


@dataclasses.dataclass(frozen=True, slots=True)
class CatchUp:
    """``Expectations.catch_up``'s answer."""

    #: The memory without the pods the view shows released (or gone, or given up on).
    store: Expectations
    #: Ungated pods the view still shows gated, within ``patience``: the pass must wait.
    waiting: tuple[PodKey, ...]
    #: Ungated pods the view still shows gated past ``patience``, with the seconds since their
    #: release: forgotten, and the pass goes on (the caller says so in its log).
    overdue: tuple[tuple[PodKey, float], ...]

    @property
    def caught_up(self) -> bool:
        return not self.waiting


def _frozen(items: Mapping[K, V] | Iterable[tuple[K, V]]) -> Mapping[K, V]:
    return MappingProxyType(dict(items))


@dataclasses.dataclass(frozen=True, slots=True)
class Expectations:
    """The releaser's memory; empty at start (a new leader remembers nothing and needs nothing:
    what an earlier leader released, the apiserver and the records say)."""

    #: Held pods per gang key at the previous periodic pass.
    counts: Mapping[str, int] = dataclasses.field(default_factory=lambda: _frozen({}))
    #: The why last audited per waiting gang key.
    reported: Mapping[str, str] = dataclasses.field(default_factory=lambda: _frozen({}))
    #: The why last written on each held pod, by UID ("" when a write failed).
    said: Mapping[str, str] = dataclasses.field(default_factory=lambda: _frozen({}))
    #: Pods this replica ungated that the view has not shown released yet, with the monotonic
    #: time of their release.
    ungated: Mapping[PodKey, float] = dataclasses.field(default_factory=lambda: _frozen({}))

    # -- ungated, awaiting the watch --------------------------------------------------------

    def ungate(self, pods: Iterable[PodKey], *, at: float) -> Expectations:
        """These pods were ungated at ``at`` (monotonic seconds): expect the watch to show it."""
        return dataclasses.replace(
            self, ungated=_frozen({**self.ungated, **dict.fromkeys(pods, at)})
        )

    def catch_up(self, view: Shows, *, now: float, patience: float) -> CatchUp:
        """Which ungated pods ``view`` still shows gated (same name, same UID): those within
        ``patience`` seconds of their release keep the pass waiting, older ones are given up
        on. Pods shown released, gone or recreated are forgotten."""
        kept: dict[PodKey, float] = {}
        overdue: list[tuple[PodKey, float]] = []
        for key, at in self.ungated.items():
            pod = view.pod(key.namespace, key.name)
            if pod is None or pod.uid != key.uid or not pod.gated:
                continue
            if now - at > patience:
                overdue.append((key, now - at))
                continue
            kept[key] = at
        store = dataclasses.replace(self, ungated=_frozen(kept))
        return CatchUp(store, tuple(kept), tuple(overdue))

    # -- what a periodic pass says ----------------------------------------------------------

    def counted(self, counts: Mapping[str, int]) -> Expectations:
        """This pass's held pod counts, for the next pass's ``stable``."""
        return dataclasses.replace(self, counts=_frozen(counts))

    def report(self, waiting: Sequence[tuple[str, str]]) -> tuple[Expectations, tuple[str, ...]]:
        """``waiting``: (gang key, why) for every gang that waits this pass. The keys whose why
        is new or changed (to audit), in that order; the memory keeps exactly these gangs."""
        changed = tuple(key for key, why in waiting if self.reported.get(key) != why)
        return dataclasses.replace(self, reported=_frozen(waiting)), changed

    def to_say(self, held: Iterable[HeldPod]) -> tuple[HeldPod, ...]:
        """The held pods to annotate: those whose annotation shows another why than theirs and
        to which that why was not written already (a view that lags shows the old one)."""
        return tuple(p for p in held if p.why not in (p.shown, self.said.get(p.uid)))

    def said_to(self, held: Iterable[HeldPod], *, failed: Collection[str] = ()) -> Expectations:
        """The memory after annotating: every held pod's why, but for the UIDs whose write
        ``failed``, what was said before (so the next pass tries again). Pods no longer held
        are forgotten."""
        said = {p.uid: self.said.get(p.uid, "") if p.uid in failed else p.why for p in held}
        return dataclasses.replace(self, said=_frozen(said))

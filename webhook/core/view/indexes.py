"""The view's small indexes, each answering one question and kept current by its own ``on_*``
method, which the store (``store.ClusterView``) calls directly with the old and new version of
what an event changed (None for absent). Each is checked against a scan of the store's objects
after random event sequences (``tests/core/test_view_indexes.py``).

* ``Owners``: which pod, node or object carries a UID (``by_uid``);
* ``PodLabels``: which pods carry a value of a label that names a gang's members;
* ``BoundLabels``: the same, for the pods bound to a node and not finished (a gang's running
  members, whatever admitted them);
* ``GangCounts``: how many pods of a gang are held behind podium's gate, how many released;
* ``GangUsage``: what a gang's bound, running pods request;
* ``Derived``: what was computed from an object the view holds, while it holds it.

The bigger two live beside: ``capacity.Capacity`` (room per node, candidate nodes per zone) and
``reservations`` (decision records in the order decided, and what they still reserve)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from webhook.core import labels, resources
from webhook.core.objects import Obj, ObjectKey, key_of, uid_of
from webhook.core.view.summaries import TERMINAL_PHASES, NodeInfo, PodSummary

_T = TypeVar("_T")
_NO_PODS: Mapping[str, PodSummary] = {}


class Owners:
    """Which pod, node or other object carries a UID: what an owner reference names."""

    __slots__ = ("keys", "pods")

    def __init__(self) -> None:
        #: UID → key of a node (``("", "Node", "", name)``) or of an object the store holds.
        self.keys: dict[str, ObjectKey] = {}
        self.pods: dict[str, PodSummary] = {}

    def on_pod(self, old: PodSummary | None, new: PodSummary | None) -> None:
        if old is not None and old.uid and self.pods.get(old.uid) is old:
            del self.pods[old.uid]
        if new is not None and new.uid:
            self.pods[new.uid] = new

    def on_node(self, name: str, old: NodeInfo | None, new: NodeInfo | None) -> None:
        key = ("", "Node", "", name)
        if old is not None and old.uid and self.keys.get(old.uid) == key:
            del self.keys[old.uid]
        if new is not None and new.uid:
            self.keys[new.uid] = key

    def on_object(self, key: ObjectKey, old: Obj | None, new: Obj | None) -> None:
        if old is not None and (uid := uid_of(old)) and self.keys.get(uid) == key:
            del self.keys[uid]
        if new is not None and (uid := uid_of(new)):
            self.keys[uid] = key


class PodLabels:
    """Pods by ``(namespace, label key, value)`` for the labels that name a gang's members
    (``Kept.indexed_labels``), each entry by pod name in the order the pods last changed."""

    __slots__ = ("indexed", "pods")

    def __init__(self, indexed: frozenset[str]) -> None:
        self.indexed = indexed
        self.pods: dict[tuple[str, str, str], dict[str, PodSummary]] = {}

    def on_pod(self, old: PodSummary | None, new: PodSummary | None) -> None:
        indexed = self.indexed
        if old is not None:
            for key, value in old.labels.items():
                if key in indexed:
                    index_key = (old.namespace, key, value)
                    members = self.pods.get(index_key)
                    if members is not None and members.get(old.name) is old:
                        del members[old.name]
                        if not members:
                            del self.pods[index_key]
        if new is not None:
            for key, value in new.labels.items():
                if key in indexed:
                    self.pods.setdefault((new.namespace, key, value), {})[new.name] = new

    def members(self, namespace: str, key: str, value: str) -> Mapping[str, PodSummary]:
        return self.pods.get((namespace, key, value), _NO_PODS)


class BoundLabels(PodLabels):
    """``PodLabels`` for the pods that are bound to a node and not finished: a gang's members
    that run (or are about to), whether podium admitted them or not — those created before
    their namespace opted in, while podium was down, or placed by someone else. A gang that has
    any is never held for pods that will never be gated (``core.running``)."""

    __slots__ = ()

    def on_pod(self, old: PodSummary | None, new: PodSummary | None) -> None:
        super().on_pod(
            old if old is not None and old.bound else None,
            new if new is not None and new.bound else None,
        )


def _gang_member(pod: PodSummary) -> tuple[str, str] | None:
    """The pod's ``(namespace, gang)`` while it is its gang's and not finished, else None; the
    pod counts as held or released (``GangCounts``) by whether it is gated."""
    gang = pod.labels.get(labels.JOB) if pod.phase not in TERMINAL_PHASES else None
    return (pod.namespace, gang) if gang else None


class GangCounts:
    """Per ``(namespace, gang)``, how many of the gang's unfinished pods are behind podium's
    gate (``held``: the releaser's work list) and how many are not (``released``: a gang with any
    is committed to its zone)."""

    __slots__ = ("held", "released")

    def __init__(self) -> None:
        self.held: Counter[tuple[str, str]] = Counter()
        self.released: Counter[tuple[str, str]] = Counter()

    def on_pod(self, old: PodSummary | None, new: PodSummary | None) -> None:
        if old is not None and (member := _gang_member(old)):
            counts = self.held if old.gated else self.released
            counts[member] -= 1
            if not counts[member]:
                del counts[member]
        if new is not None and (member := _gang_member(new)):
            (self.held if new.gated else self.released)[member] += 1


class GangUsage:
    """Per value of podium's job label, what its bound, running pods request."""

    __slots__ = ("used",)

    def __init__(self) -> None:
        self.used: dict[str, resources.Resources] = defaultdict(dict)

    def on_pod(self, old: PodSummary | None, new: PodSummary | None) -> None:
        old_gang = old.labels.get(labels.JOB) if old is not None and old.bound else None
        new_gang = new.labels.get(labels.JOB) if new is not None and new.bound else None
        if old_gang:
            assert old is not None
            left = resources.add(self.used[old_gang], old.requests, sign=-1)
            if any(left.values()):
                self.used[old_gang] = left
            else:
                del self.used[old_gang]
        if new_gang:
            assert new is not None
            self.used[new_gang] = resources.add(self.used[new_gang], new.requests)


class Derived:
    """``compute(obj)`` per object the store holds, kept until an event replaces or deletes it."""

    __slots__ = ("_objects", "memo")

    def __init__(self, objects: Mapping[ObjectKey, Obj]) -> None:
        self._objects = objects
        #: id(object) → (the object, {function: its result}).
        self.memo: dict[int, tuple[Obj, dict[Callable[[Obj], Any], Any]]] = {}

    def on_object(self, old: Obj | None) -> None:
        if old is not None:
            self.memo.pop(id(old), None)

    def get(self, obj: Obj, compute: Callable[[Obj], _T]) -> _T:
        memo = self.memo.get(id(obj))
        if memo is not None and memo[0] is obj and compute in memo[1]:
            value: _T = memo[1][compute]
            return value
        value = compute(obj)
        try:
            held = self._objects.get(key_of(obj)) is obj
        except (AttributeError, TypeError):  # not shaped like an object: nothing to keep
            held = False
        if held:
            if memo is None or memo[0] is not obj:
                memo = self.memo[id(obj)] = (obj, {})
            memo[1][compute] = value
        return value

"""``ClusterView``: the store of what the view holds (objects by key, nodes as ``NodeInfo``, pods
as ``PodSummary``), which applies each watch event to itself and hands the old and new version to
each index with a direct call, and the reads decisions make (``protocol.View``)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import TypeVar

from webhook.core import labels, records, resources
from webhook.core.objects import EventType, Obj, ObjectKey, group_of, key_of
from webhook.core.view.capacity import Capacity, ZoneNodes
from webhook.core.view.indexes import (
    BoundLabels,
    Derived,
    GangCounts,
    GangUsage,
    Owners,
    PodLabels,
)
from webhook.core.view.reservations import Records, Reservations
from webhook.core.view.summaries import Kept, NodeInfo, PodSummary, summarise_pod

_T = TypeVar("_T")


class ClusterView:
    """Objects by kind and name, plus the free capacity of every node, updated per event."""

    def __init__(self, *, zone_label: str, kept: Kept) -> None:
        self.zone_label = zone_label
        #: What is kept of pods: the adapters' reads (``adapters.KEPT``) plus podium's own.
        self.kept = kept.with_podium()
        # -- the store
        #: Every object that is neither a pod nor a node, as it came.
        self._objects: dict[ObjectKey, Obj] = {}
        self._pods: dict[str, dict[str, PodSummary]] = defaultdict(dict)
        self._nodes: dict[str, NodeInfo] = {}
        #: ``resources.pod_requests``, parsed once per distinct shape and shared by its pods.
        self._requests = resources.ByShape(resources.pod_requests)
        # -- the indexes, one question each
        self._owners = Owners()
        self._labels = PodLabels(self.kept.indexed_labels)
        self._bound = BoundLabels(self.kept.indexed_labels)
        self._gangs = GangCounts()
        self._gang_usage = GangUsage()
        self._capacity = Capacity(self._nodes)
        self._derive = Derived(self._objects)
        self._records = Records()
        self._reservations = Reservations(self._records, self._parse_record, self._pods)
        #: The candidate cache and the derived memo, by the names tests and benches know.
        self._candidates = self._capacity.candidates
        self._derived = self._derive.memo

    @classmethod
    def from_objects(cls, objects: Iterable[Obj], *, zone_label: str, kept: Kept) -> ClusterView:
        snap = cls(zone_label=zone_label, kept=kept)
        for obj in objects:
            snap.apply("ADDED", obj)
        return snap

    def _parse_record(self, obj: Obj) -> records.Record | None:
        return self._derive.get(obj, records.parse_record)

    # -- updates -----------------------------------------------------------------------------

    def apply(self, event: EventType, obj: Obj) -> None:
        key = key_of(obj)
        group, kind, namespace, name = key
        if group:
            self._apply_object(event, key, obj)
        elif kind == "Pod":
            self._apply_pod(event, namespace, name, obj)
        elif kind == "Node":
            self._apply_node(event, name, obj)
        else:
            self._apply_object(event, key, obj)

    def _apply_pod(self, event: EventType, namespace: str, name: str, obj: Obj) -> None:
        in_namespace = self._pods[namespace]
        old = in_namespace.pop(name, None)
        new = None
        if event != "DELETED":
            new = in_namespace[name] = summarise_pod(
                self.kept, self._requests, namespace, name, obj
            )
        elif not in_namespace:
            del self._pods[namespace]
        self._owners.on_pod(old, new)
        self._labels.on_pod(old, new)
        self._bound.on_pod(old, new)
        self._gangs.on_pod(old, new)
        self._gang_usage.on_pod(old, new)
        self._capacity.on_pod(old, new)
        self._reservations.on_pod(old, new)

    def _apply_node(self, event: EventType, name: str, obj: Obj) -> None:
        old = self._nodes.get(name)
        new = NodeInfo.from_object(obj, self.zone_label) if event != "DELETED" else None
        if new == old:
            return  # a status heartbeat: nothing a decision reads has changed
        if new is None:
            self._nodes.pop(name, None)
        else:
            if old is not None:
                del self._nodes[name]  # a changed node goes to the end, as a re-added one would
            self._nodes[name] = new
        self._owners.on_node(name, old, new)
        self._capacity.on_node(name, new)

    def _apply_object(self, event: EventType, key: ObjectKey, obj: Obj) -> None:
        old = self._objects.pop(key, None)
        new = None
        if event != "DELETED":
            new = self._objects[key] = obj
        self._derive.on_object(old)
        self._owners.on_object(key, old, new)
        if key[1] == "ConfigMap" and not key[0]:
            self._records.on_object(key, old, new)
            self._reservations.on_object(key, old, new)

    # -- reads (``protocol.View``) -----------------------------------------------------------

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> Obj | None:
        group = group_of(api_version)
        if (group, kind) == ("", "Pod"):
            pod = self._pods.get(namespace, {}).get(name)
            return pod.as_object() if pod is not None else None
        if (group, kind) == ("", "Node"):
            node = self._nodes.get(name)
            return node.as_object() if node is not None else None
        return self._objects.get((group, kind, namespace, name))

    def derived(self, obj: Obj, compute: Callable[[Obj], _T]) -> _T:
        """``compute(obj)``, kept while the view holds this very object (until a watch event
        replaces or deletes it) so that what is derived from a job is not derived again at each
        admission of its pods. For an object the view does not hold, computed every time.
        ``compute`` must be a pure function of ``obj``; it is also the memo's key."""
        return self._derive.get(obj, compute)

    def by_uid(self, uid: str) -> Obj | None:
        pod = self._owners.pods.get(uid)
        if pod is not None:
            return pod.as_object()
        key = self._owners.keys.get(uid)
        if key is None:
            return None
        if key[:2] == ("", "Node"):
            node = self._nodes.get(key[3])
            return node.as_object() if node is not None else None
        return self._objects.get(key)

    def namespace(self, name: str) -> Obj | None:
        return self._objects.get(("", "Namespace", "", name))

    def pod(self, namespace: str, name: str) -> PodSummary | None:
        return self._pods.get(namespace, {}).get(name)

    def pod_summaries(
        self, namespace: str, labels: Mapping[str, str] | None = None
    ) -> Iterator[PodSummary]:
        """Pods of ``namespace`` that carry every one of ``labels``; through the label index
        when one of them is indexed, else by a scan of the namespace."""
        indexed_labels = self._labels.indexed
        if labels is not None and len(labels) == 1:
            # The common ask, one indexed label (a gang's pods): its index entry is the answer.
            ((key, value),) = labels.items()
            if key in indexed_labels:
                yield from self._labels.members(namespace, key, value).values()
                return
        wanted = dict(labels or {})
        indexed = [(k, v) for k, v in wanted.items() if k in indexed_labels]
        if indexed:
            pools = [self._labels.members(namespace, k, v) for k, v in indexed]
            pool: Iterable[PodSummary] = min(pools, key=len).values()
        else:
            pool = self._pods.get(namespace, {}).values()
        for pod in pool:
            if all(pod.labels.get(k) == v for k, v in wanted.items()):
                yield pod

    def bound_pods(self, namespace: str, labels: Mapping[str, str]) -> Iterator[PodSummary]:
        """Pods of ``namespace`` bound to a node and not finished that carry every one of
        ``labels``, at least one of them indexed (``Kept.indexed_labels``; else none): through
        the bound-pod label index, so a gang none of whose pods is bound costs nothing."""
        pool: Mapping[str, PodSummary] | None = None
        for key, value in labels.items():
            if key in self._bound.indexed:
                members = self._bound.members(namespace, key, value)
                if not members:
                    return  # the common answer: no pod of the gang is bound
                if pool is None or len(members) < len(pool):
                    pool = members
        if pool is None:
            return
        for pod in pool.values():
            if all(pod.labels.get(k) == v for k, v in labels.items()):
                yield pod

    def pods_in(self, namespace: str, labels: Mapping[str, str] | None = None) -> Iterator[Obj]:
        """Pods of ``namespace`` (carrying every one of ``labels``) as the view holds them.

        Every label a pod filter can name is kept (``Kept.prefixes``); other labels are not, so
        filtering on them finds nothing."""
        for pod in self.pod_summaries(namespace, labels):
            yield pod.as_object()

    def gangs(self) -> Iterator[tuple[str, str]]:
        """``(namespace, gang key)`` for every value of podium's job label on a pod the view
        holds: the gangs podium admitted pods into, whether or not their objects still exist."""
        for namespace, key, value in self._labels.pods:
            if key == labels.JOB:
                yield namespace, value

    def holds_any(self) -> bool:
        """Some gang has a pod behind podium's gate (``held_gangs`` without building the list)."""
        return bool(self._gangs.held)

    def released(self, namespace: str, gang_key: str) -> int:
        """How many pods of the gang carry its label, are not behind podium's gate and have not
        finished: a gang with any is committed to its recorded zone."""
        return self._gangs.released.get((namespace, gang_key), 0)

    def held_gangs(self) -> list[tuple[str, str]]:
        """``(namespace, gang key)`` of every gang with a pod behind podium's gate that has not
        finished (``zone-chooser: hold``), sorted."""
        return sorted(self._gangs.held)

    def node(self, name: str) -> NodeInfo | None:
        return self._nodes.get(name)

    def nodes(self) -> Iterator[NodeInfo]:
        yield from self._nodes.values()

    def free_on(self, node: NodeInfo) -> resources.Resources:
        return self._capacity.free_on(node)

    def candidate_zones(self, pod_spec: Obj) -> Mapping[str, ZoneNodes]:
        """Usable nodes in some zone that the pod's own selector, affinity and tolerations admit,
        by zone, with each zone's free capacity (``capacity.Capacity``): no scan of all nodes
        once a constraint has been seen."""
        return self._capacity.candidate_zones(pod_spec)

    def reserved(self, *, since: datetime, exclude: str = "") -> dict[str, resources.Resources]:
        """Per zone, what the gangs decided at or after ``since`` (but ``exclude``) still need
        room for, so that a burst of new jobs does not all pick the same free space: the demand
        of their pods not yet created and of those pending, never of pods that are bound (their
        nodes count them), finished or deleted (``Reservations.share_of``). A gang all of whose
        pods bound, finished or went reserves nothing from that moment; ``since`` only bounds how
        long a gang whose remaining pods never come keeps its reservation.

        A running sum that every record, every pod event that changes a gang's pending or seen
        pods and every move of the window updates by one share: a query costs the same however
        many gangs were decided recently."""
        return self._reservations.since(since, exclude)

    def gang_usage(self, gang_key: str) -> resources.Resources:
        """What the bound, running pods carrying podium's label for this gang request."""
        return self._gang_usage.used.get(gang_key, {})

    def objects_of(self, api_version: str, kind: str) -> Iterator[Obj]:
        """The objects of one kind the view holds (not pods or nodes): a scan of the few
        non-pod objects, for kinds with no index of their own (podium's CapacityBuffers)."""
        group = group_of(api_version)
        for key, obj in self._objects.items():
            if key[0] == group and key[1] == kind:
                yield obj

    def objects(self) -> Iterator[Obj]:
        yield from self._objects.values()
        for node in self._nodes.values():
            yield node.as_object()
        for pods in self._pods.values():
            for pod in pods.values():
                yield pod.as_object()

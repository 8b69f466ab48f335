"""A point-in-time view of the cluster that decisions read; never the live client.

The same class serves the offline ``podium review`` (built from a list of objects) and the server
(kept current by the watch cache, one event at a time). It holds only what decisions read, so that
a cluster at the official scale limits (5,000 nodes, 150,000 pods) fits in well under 200 MiB:

* a node as a ``NodeInfo`` (zone, labels, allocatable, usable, taints), not the node object;
* a pod as a ``PodSummary``: identity, node, phase, requests, controller reference, and only the
  labels, annotations and env values podium's adapters read from *other* pods (``Kept``). The
  pod object podium admits comes from the review, never from here;
* everything else (namespaces, job objects, batch Jobs, StatefulSets, podium's records and
  policies) as the object itself: there are few of them.

Everything a decision asks is answered without a scan of all pods or all nodes: per-node and
per-gang usage are kept incrementally on every pod event; pods are indexed by the labels that
name a gang's members (``Kept.indexed_labels``); candidate nodes are cached per scheduling
constraint, grouped by zone, with each zone's summed free capacity kept current as pods and
nodes change; decision records are kept in the order they were decided.

What to keep of pods is handed in (``Kept``, made by the adapters registry as ``adapters.KEPT``)
rather than read from the registry: every adapter reads the view, so the view imports no adapter.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import sys
from collections import Counter, OrderedDict, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any, TypeVar

import orjson

from webhook.core import labels, records, resources, selectors
from webhook.core.objects import (
    EventType,
    Obj,
    ObjectKey,
    controller_ref,
    group_of,
    key_of,
    parse_time,
)

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})

#: How many distinct scheduling constraints keep a cached set of candidate nodes.
CANDIDATE_CACHE_SIZE = 16
_EMPTY: Mapping[str, str] = {}
_EMPTY_RESOURCES: resources.Resources = {}
_T = TypeVar("_T")


def _intern(value: object) -> str:
    return sys.intern(value) if isinstance(value, str) else sys.intern(str(value))


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Kept:
    """What the view keeps of every pod besides its identity, node, phase and requests: the
    labels and annotations under ``prefixes`` or named in ``keys``, the literal values of the
    ``env`` variables, and an index of pods by ``indexed_labels`` (those that name a gang's
    members). The adapters registry makes the one podium uses (``adapters.KEPT``) from every
    adapter's ``base.Reads``; ``with_podium`` adds podium's own."""

    prefixes: tuple[str, ...] = ()
    keys: frozenset[str] = frozenset()
    env: frozenset[str] = frozenset()
    indexed_labels: frozenset[str] = frozenset()

    def with_podium(self) -> Kept:
        """These plus podium's own labels (kept) and its trusted label (indexed)."""
        return dataclasses.replace(
            self,
            prefixes=tuple(dict.fromkeys((labels.PREFIX, *self.prefixes))),
            indexed_labels=self.indexed_labels | {labels.JOB},
        )

    def is_kept(self, key: str) -> bool:
        return key.startswith(self.prefixes) or key in self.keys

    def strings(self, values: object) -> Mapping[str, str]:
        """The kept entries of a label or annotation map, interned."""
        if not isinstance(values, Mapping) or not values:
            return _EMPTY
        out = {
            _intern(k): _intern(v) if len(v) <= 64 else v
            for k, v in values.items()
            if isinstance(k, str) and isinstance(v, str) and self.is_kept(k)
        }
        return out or _EMPTY

    def env_of(self, spec: Mapping[str, Any]) -> tuple[tuple[tuple[str, str], ...], ...]:
        """Per container that sets any, the kept env variables' literal values, in order."""
        containers = spec.get("containers")
        if not isinstance(containers, list):
            return ()
        out = []
        for container in containers:
            env = container.get("env") if isinstance(container, Mapping) else None
            if not isinstance(env, list):
                continue
            kept = tuple(
                (_intern(e["name"]), e["value"])
                for e in env
                if isinstance(e, Mapping)
                and e.get("name") in self.env
                and isinstance(e.get("value"), str)
            )
            if kept:
                out.append(kept)
        return tuple(out)


@dataclasses.dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    zone: str | None
    labels: Mapping[str, str]
    allocatable: resources.Resources
    usable: bool  # schedulable and Ready
    taints: tuple[Obj, ...]
    uid: str = ""

    @classmethod
    def from_object(cls, node: Obj, zone_label: str) -> NodeInfo:
        meta = node.get("metadata") or {}
        spec = node.get("spec") or {}
        status = node.get("status") or {}
        node_labels = {_intern(k): _intern(v) for k, v in (meta.get("labels") or {}).items()}
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions") or []
        )
        return cls(
            name=_intern(meta.get("name") or ""),
            zone=node_labels.get(zone_label),
            labels=node_labels,
            allocatable=resources.parse_resource_list(status.get("allocatable")),
            usable=ready and not spec.get("unschedulable", False),
            taints=tuple(spec.get("taints") or ()),
            uid=str(meta.get("uid") or ""),
        )

    def as_object(self) -> dict[str, Any]:
        """The node as the view holds it: allocatable in base units, ``usable`` as Ready."""
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "uid": self.uid, "labels": dict(self.labels)},
            "spec": {"taints": [dict(t) for t in self.taints]} if self.taints else {},
            "status": {
                "allocatable": {
                    k: f"{v}m" if k == resources.CPU else str(v)
                    for k, v in self.allocatable.items()
                },
                "conditions": [{"type": "Ready", "status": "True" if self.usable else "False"}],
            },
        }


class PodSummary:
    """What the view keeps of a pod: ~0.5 KiB instead of the ~20 KiB of the pod object."""

    __slots__ = (
        "annotations",
        "constraint",
        "controller",
        "created",
        "env",
        "gated",
        "labels",
        "name",
        "namespace",
        "node",
        "phase",
        "ready",
        "requests",
        "uid",
    )

    def __init__(
        self,
        *,
        namespace: str,
        name: str,
        uid: str,
        node: str | None,
        phase: str | None,
        ready: str | None,
        requests: resources.Resources,
        controller: tuple[str, str, str, str] | None,
        labels: Mapping[str, str],
        annotations: Mapping[str, str],
        env: tuple[tuple[tuple[str, str], ...], ...],
        gated: bool = False,
        constraint: Obj | None = None,
        created: str = "",
    ) -> None:
        self.namespace = namespace
        self.name = name
        self.uid = uid
        self.node = node
        self.phase = phase
        #: The status of the pod's Ready condition ("True", "False"), None without one.
        self.ready = ready
        #: Shared between pods with the same requests: never mutate it.
        self.requests = requests
        #: The controller ownerReference as (apiVersion, kind, name, uid).
        self.controller = controller
        self.labels = labels
        self.annotations = annotations
        #: Per container that sets any, the ``Kept.env`` literal values, in order.
        self.env = env
        #: The pod carries podium's scheduling gate (``labels.HOLD_GATE``): held, not released.
        self.gated = gated
        #: Kept only while gated, for the releaser: the pod's node selector, required node
        #: affinity and tolerations (what ``candidate_zones`` reads), and its creationTimestamp.
        self.constraint = constraint
        self.created = created

    @property
    def bound(self) -> bool:
        """On a node and not finished: its requests count against the node."""
        return bool(self.node) and self.phase not in TERMINAL_PHASES

    @property
    def pending(self) -> bool:
        """Neither on a node nor finished: it still needs room somewhere."""
        return not self.node and self.phase not in TERMINAL_PHASES

    def as_object(self) -> dict[str, Any]:
        """A pod object carrying exactly the kept fields, for code that reads pods as dicts."""
        meta: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if self.uid:
            meta["uid"] = self.uid
        meta["labels"] = dict(self.labels)
        meta["annotations"] = dict(self.annotations)
        if self.controller is not None:
            api_version, kind, name, uid = self.controller
            ref = {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid}
            meta["ownerReferences"] = [{**ref, "controller": True}]
        spec: dict[str, Any] = {}
        if self.node:
            spec["nodeName"] = self.node
        if self.gated:
            spec["schedulingGates"] = [{"name": labels.HOLD_GATE}]
        if self.env:
            spec["containers"] = [
                {"env": [{"name": n, "value": v} for n, v in env]} for env in self.env
            ]
        obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
        status: dict[str, Any] = {}
        if self.phase is not None:
            status["phase"] = self.phase
        if self.ready is not None:
            status["conditions"] = [{"type": "Ready", "status": self.ready}]
        if status:
            obj["status"] = status
        return obj


def has_gate(spec: Mapping[str, Any], name: str = labels.HOLD_GATE) -> bool:
    """The pod spec carries the scheduling gate ``name`` (podium's, by default)."""
    gates = spec.get("schedulingGates")
    return isinstance(gates, list) and any(
        isinstance(g, Mapping) and g.get("name") == name for g in gates
    )


def _gang_key(pod: PodSummary) -> tuple[str, str] | None:
    """The pod's ``(namespace, gang)`` while it is its gang's and not finished, else None; the
    pod counts as held (``_held``) or released (``_released``) by whether it is gated."""
    gang = pod.labels.get(labels.JOB) if pod.phase not in TERMINAL_PHASES else None
    return (pod.namespace, gang) if gang else None


def _held_fields(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> dict[str, Any]:
    """What the view keeps of a pod behind podium's gate besides the rest: where it may go, and
    since when it waits. Nothing for any other pod."""
    if not has_gate(spec):
        return {}
    constraint = {
        "nodeSelector": spec.get("nodeSelector") or {},
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": selectors.required_terms(spec)
                }
            }
        },
        "tolerations": spec.get("tolerations") or [],
    }
    return {
        "gated": True,
        "constraint": constraint,
        "created": str(meta.get("creationTimestamp") or ""),
    }


def _controller_tuple(pod: Obj) -> tuple[str, str, str, str] | None:
    ref = controller_ref(pod) or {}
    api_version, kind, name, uid = (ref.get(f) for f in ("apiVersion", "kind", "name", "uid"))
    if not (
        isinstance(api_version, str)
        and isinstance(kind, str)
        and isinstance(name, str)
        and isinstance(uid, str)
    ):
        return None
    return _intern(api_version), _intern(kind), _intern(name), _intern(uid)


def _ready(conditions: object) -> str | None:
    for condition in conditions if isinstance(conditions, list) else ():
        if isinstance(condition, Mapping) and condition.get("type") == "Ready":
            value = condition.get("status")
            return _intern(value) if isinstance(value, str) else None
    return None


def _is_record(obj: Obj) -> bool:
    obj_labels = (obj.get("metadata") or {}).get("labels") or {}
    return (
        obj_labels.get(labels.MANAGED_BY) == labels.MANAGER
        and obj_labels.get(labels.COMPONENT) == "decision"
    )


class ZoneNodes:
    """The candidate nodes of one zone for one scheduling constraint, in the view's node order,
    and their summed allocatable and usage (kept current by the snapshot)."""

    __slots__ = ("_view", "allocatable", "nodes", "used", "zone")

    def __init__(self, zone: str, view: ClusterView) -> None:
        self.zone = zone
        self._view = view
        self.nodes: dict[str, NodeInfo] = {}
        self.allocatable: resources.Resources = {}
        self.used: resources.Resources = {}

    def free(self) -> resources.Resources:
        """The zone's free capacity: what ``free_on`` of every node would sum to."""
        out = dict(self.allocatable)
        for name, amount in self.used.items():
            if amount or name in out:
                out[name] = out.get(name, 0) - amount
        return out

    def frees(self) -> Iterator[resources.Resources]:
        """``free_on`` of each node, computed as it is read (packing stops when the gang fits)."""
        for node in self.nodes.values():
            yield self._view.free_on(node)


class _Candidates:
    """Nodes one scheduling constraint admits, by zone."""

    __slots__ = ("constraint", "node_zone", "zones")

    def __init__(self, constraint: Obj) -> None:
        self.constraint = constraint
        self.zones: dict[str, ZoneNodes] = {}
        self.node_zone: dict[str, str] = {}


class ClusterView:
    """Objects by kind and name, plus the free capacity of every node, updated per event."""

    def __init__(self, *, zone_label: str, kept: Kept) -> None:
        self.zone_label = zone_label
        #: What is kept of pods: the adapters' reads (``adapters.KEPT``) plus podium's own.
        self.kept = kept.with_podium()
        #: Every object that is neither a pod nor a node, as it came.
        self._objects: dict[ObjectKey, Obj] = {}
        self._by_uid: dict[str, ObjectKey] = {}
        self._pods: dict[str, dict[str, PodSummary]] = defaultdict(dict)
        self._pod_by_uid: dict[str, PodSummary] = {}
        #: (namespace, label key, value) → pods by name, for ``kept.indexed_labels``.
        self._pod_index: dict[tuple[str, str, str], dict[str, PodSummary]] = {}
        self._nodes: dict[str, NodeInfo] = {}
        self._used: dict[str, resources.Resources] = defaultdict(dict)
        #: Requests of bound, running pods per podium gang label value.
        self._gang_used: dict[str, resources.Resources] = defaultdict(dict)
        #: Pods behind podium's gate, not finished, per (namespace, gang label value): the
        #: releaser's work list, so a pass costs nothing while no gang is held.
        self._held: Counter[tuple[str, str]] = Counter()
        #: Pods of a gang neither gated nor finished, per (namespace, gang label value): a gang
        #: with any is committed to its zone (``released``, asked at every admission).
        self._released: Counter[tuple[str, str]] = Counter()
        #: Per gang label value: requests of its pods that are neither bound nor finished (they
        #: still need room), and of every pod seen with the label, by (namespace, name), kept
        #: after the pod is deleted while the gang has a reservable record (what is gone no
        #: longer needs room, and the pods not yet created are the demand none of these cover).
        self._gang_pending: dict[str, resources.Resources] = {}
        self._gang_seen: dict[str, dict[tuple[str, str], resources.Resources]] = {}
        self._gang_seen_total: dict[str, resources.Resources] = {}
        #: podium's decision records (ConfigMaps it manages), by key, and ordered by decidedAt.
        self._records: dict[ObjectKey, Obj] = {}
        self._record_order: list[tuple[float, ObjectKey]] = []
        self._record_time: dict[ObjectKey, float] = {}
        #: Reservations (``reserved``): records with a zone and a decision time, by key and by
        #: gang; the share of each one decided since ``_window`` that still needs room
        #: (``_share_of``); their sum per zone.
        self._reservable: dict[ObjectKey, records.Record] = {}
        self._gang_records: dict[str, set[ObjectKey]] = {}
        self._window = -math.inf
        self._shares: dict[ObjectKey, tuple[str, resources.Resources]] = {}
        self._reserved: dict[str, resources.Resources] = {}
        self._candidates: OrderedDict[bytes, _Candidates] = OrderedDict()
        #: id(object) → (the object, {function: its result}), for objects the view holds.
        self._derived: dict[int, tuple[Obj, dict[Callable[[Obj], Any], Any]]] = {}
        #: ``resources.pod_requests``, parsed once per distinct shape and shared by its pods.
        self._requests = resources.ByShape(resources.pod_requests)

    @classmethod
    def from_objects(cls, objects: Iterable[Obj], *, zone_label: str, kept: Kept) -> ClusterView:
        snap = cls(zone_label=zone_label, kept=kept)
        for obj in objects:
            snap.apply("ADDED", obj)
        return snap

    # -- updates -----------------------------------------------------------------------------

    def apply(self, event: EventType, obj: Obj) -> None:
        key = key_of(obj)
        group, kind, namespace, name = key
        if (group, kind) == ("", "Pod"):
            self._apply_pod(event, namespace, name, obj)
        elif (group, kind) == ("", "Node"):
            self._apply_node(event, name, obj)
        else:
            old = self._objects.pop(key, None)
            unrecorded = self._forget(key, old) if old is not None else None
            if event != "DELETED":
                self._remember(key, obj)
            if unrecorded is not None and unrecorded not in self._gang_records:
                self._forget_gone(unrecorded)

    def _remember(self, key: ObjectKey, obj: Obj) -> None:
        self._objects[key] = obj
        uid = (obj.get("metadata") or {}).get("uid")
        if uid:
            self._by_uid[str(uid)] = key
        if key[:2] == ("", "ConfigMap") and _is_record(obj):
            self._records[key] = obj
            decided_at = parse_time((obj.get("data") or {}).get("decidedAt"))
            if decided_at is not None:
                decided = decided_at.timestamp()
                self._record_time[key] = decided
                bisect.insort(self._record_order, (decided, key))
                record = self.derived(obj, records.parse_record)
                if record is not None and record.zone:
                    self._reservable[key] = record
                    self._gang_records.setdefault(record.gang, set()).add(key)
                    if decided >= self._window:
                        self._add_share(key)

    def _forget(self, key: ObjectKey, obj: Obj) -> str | None:
        """Drop what the view derived from ``obj``; the gang whose last reservable record this
        was, if it was one (its deleted pods are forgotten unless a new version replaces it)."""
        self._derived.pop(id(obj), None)
        uid = (obj.get("metadata") or {}).get("uid")
        if uid and self._by_uid.get(str(uid)) == key:
            del self._by_uid[str(uid)]
        gang = None
        if self._records.pop(key, None) is not None:
            self._drop_share(key)
            record = self._reservable.pop(key, None)
            if record is not None:
                keys = self._gang_records[record.gang]
                keys.discard(key)
                if not keys:
                    del self._gang_records[record.gang]
                    gang = record.gang
            decided = self._record_time.pop(key, None)
            if decided is not None:
                at = bisect.bisect_left(self._record_order, (decided, key))
                del self._record_order[at]
        return gang

    # -- pods

    def _summarise_pod(self, namespace: str, name: str, pod: Obj) -> PodSummary:
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        status = pod.get("status") or {}
        node, phase = spec.get("nodeName"), status.get("phase")
        return PodSummary(
            namespace=_intern(namespace),
            name=name,
            uid=str(meta.get("uid") or ""),
            node=_intern(node) if node else None,
            phase=_intern(phase) if isinstance(phase, str) else None,
            ready=_ready(status.get("conditions")),
            requests=self._requests(spec),
            controller=_controller_tuple(pod),
            labels=self.kept.strings(meta.get("labels")),
            annotations=self.kept.strings(meta.get("annotations")),
            env=self.kept.env_of(spec),
            **_held_fields(meta, spec),
        )

    def _apply_pod(self, event: EventType, namespace: str, name: str, obj: Obj) -> None:
        in_namespace = self._pods[namespace]
        old = in_namespace.pop(name, None)
        new = None
        if old is not None:
            self._unindex_pod(old)
        if event != "DELETED":
            new = in_namespace[name] = self._summarise_pod(namespace, name, obj)
            self._index_pod(new)
        elif not in_namespace:
            del self._pods[namespace]
        self._account_gang_pod(old, new)

    def _index_pod(self, pod: PodSummary) -> None:
        if pod.uid:
            self._pod_by_uid[pod.uid] = pod
        for key, value in pod.labels.items():
            if key in self.kept.indexed_labels:
                self._pod_index.setdefault((pod.namespace, key, value), {})[pod.name] = pod
        if member := _gang_key(pod):
            (self._held if pod.gated else self._released)[member] += 1
        if pod.bound:
            assert pod.node is not None
            self._use(pod.node, pod.requests, 1)
            gang = pod.labels.get(labels.JOB)
            if gang:
                self._gang_used[gang] = resources.add(self._gang_used[gang], pod.requests)

    def _unindex_pod(self, pod: PodSummary) -> None:
        if pod.uid and self._pod_by_uid.get(pod.uid) is pod:
            del self._pod_by_uid[pod.uid]
        for key, value in pod.labels.items():
            if key in self.kept.indexed_labels:
                index_key = (pod.namespace, key, value)
                members = self._pod_index.get(index_key)
                if members is not None and members.get(pod.name) is pod:
                    del members[pod.name]
                    if not members:
                        del self._pod_index[index_key]
        if member := _gang_key(pod):
            counts = self._held if pod.gated else self._released
            counts[member] -= 1
            if not counts[member]:
                del counts[member]
        if pod.bound:
            assert pod.node is not None
            self._use(pod.node, pod.requests, -1)
            gang = pod.labels.get(labels.JOB)
            if gang:
                left = resources.add(self._gang_used[gang], pod.requests, sign=-1)
                if any(left.values()):
                    self._gang_used[gang] = left
                else:
                    del self._gang_used[gang]

    # -- reservations: per zone, what recently decided gangs still need room for

    def _account_gang_pod(self, old: PodSummary | None, new: PodSummary | None) -> None:
        """Keep the gang's pending and seen requests (``_share_of``) current for one pod event;
        reshare only when they changed (most pod events are status updates that change neither)."""
        old_gang = old.labels.get(labels.JOB) if old is not None else None
        new_gang = new.labels.get(labels.JOB) if new is not None else None
        if (
            old is not None
            and new is not None
            and (old_gang, old.pending, old.requests) == (new_gang, new.pending, new.requests)
        ):
            return
        if old is not None and old_gang:
            if old.pending:
                self._add_pending(old_gang, old.requests, -1)
            if new is not None or old_gang not in self._gang_records:
                # Relabelled (never the gang's own) or replaced below; or deleted from a gang that
                # reserves nothing. A pod deleted from a reserving gang stays seen: it is gone.
                self._unsee(old_gang, (old.namespace, old.name))
        if new is not None and new_gang:
            if new.pending:
                self._add_pending(new_gang, new.requests, 1)
            self._see(new_gang, (new.namespace, new.name), new.requests)
        for gang in {old_gang, new_gang}:
            if gang:
                self._reshare(gang)

    def _add_pending(self, gang: str, requests: resources.Resources, sign: int) -> None:
        left = resources.add(self._gang_pending.get(gang, {}), requests, sign=sign)
        if any(left.values()):
            self._gang_pending[gang] = left
        else:
            self._gang_pending.pop(gang, None)

    def _see(self, gang: str, pod: tuple[str, str], requests: resources.Resources) -> None:
        self._unsee(gang, pod)
        self._gang_seen.setdefault(gang, {})[pod] = requests
        self._gang_seen_total[gang] = resources.add(self._gang_seen_total.get(gang, {}), requests)

    def _unsee(self, gang: str, pod: tuple[str, str]) -> None:
        seen = self._gang_seen.get(gang)
        requests = seen.pop(pod, None) if seen is not None else None
        if requests is None:
            return
        if seen:
            left = resources.add(self._gang_seen_total[gang], requests, sign=-1)
            self._gang_seen_total[gang] = left
        else:
            del self._gang_seen[gang]
            del self._gang_seen_total[gang]

    def _forget_gone(self, gang: str) -> None:
        """The gang's last reservable record is gone: so is the memory of its deleted pods."""
        for namespace, name in list(self._gang_seen.get(gang, ())):
            pod = self._pods.get(namespace, {}).get(name)
            if pod is None or pod.labels.get(labels.JOB) != gang:
                self._unsee(gang, (namespace, name))

    def _share_of(self, record: records.Record) -> resources.Resources:
        """What the gang of ``record`` still needs room for, per resource: its pods that exist but
        are neither bound nor finished, plus the demand no pod seen yet stands for (pods not yet
        created), never more than the recorded demand. Pods that bound (their node counts them),
        finished or were deleted need nothing, so a gang all of whose pods did reserves nothing."""
        pending = self._gang_pending.get(record.gang, _EMPTY_RESOURCES)
        seen = self._gang_seen_total.get(record.gang, _EMPTY_RESOURCES)
        share = {}
        for name, demand in record.demand.items():
            amount = min(demand, pending.get(name, 0) + max(0, demand - seen.get(name, 0)))
            if amount > 0:
                share[name] = amount
        return share

    def _add_share(self, key: ObjectKey) -> None:
        record = self._reservable[key]
        assert record.zone is not None
        share = self._share_of(record)
        self._shares[key] = (record.zone, share)
        self._reserved[record.zone] = resources.add(self._reserved.get(record.zone, {}), share)

    def _drop_share(self, key: ObjectKey) -> None:
        held = self._shares.pop(key, None)
        if held is None:
            return
        zone, share = held
        left = resources.add(self._reserved.get(zone, {}), share, sign=-1)
        left = {name: amount for name, amount in left.items() if amount}
        if left:
            self._reserved[zone] = left
        else:
            self._reserved.pop(zone, None)

    def _reshare(self, gang: str) -> None:
        """The gang's pending or seen pods changed: its records' shares change with it."""
        for key in self._gang_records.get(gang, ()):
            if key in self._shares:
                self._drop_share(key)
                self._add_share(key)

    def _use(self, node: str, requests: resources.Resources, sign: int) -> None:
        self._used[node] = resources.add(self._used[node], requests, sign=sign)
        for candidates in self._candidates.values():
            zone = candidates.node_zone.get(node)
            if zone is not None:
                zone_nodes = candidates.zones[zone]
                zone_nodes.used = resources.add(zone_nodes.used, requests, sign=sign)

    # -- nodes

    def _apply_node(self, event: EventType, name: str, obj: Obj) -> None:
        old = self._nodes.get(name)
        new = NodeInfo.from_object(obj, self.zone_label) if event != "DELETED" else None
        if new == old:
            return  # a status heartbeat: nothing a decision reads has changed
        if old is not None and old.uid and self._by_uid.get(old.uid) == ("", "Node", "", name):
            del self._by_uid[old.uid]
        if new is None:
            self._nodes.pop(name, None)
        else:
            if old is not None:
                del self._nodes[name]  # a changed node goes to the end, as a re-added one would
            self._nodes[name] = new
            if new.uid:
                self._by_uid[new.uid] = ("", "Node", "", name)
        for candidates in self._candidates.values():
            self._uncandidate(candidates, name)
            if new is not None:
                self._candidate(candidates, new)

    def _admits(self, constraint: Obj, node: NodeInfo) -> bool:
        return bool(
            node.usable
            and node.zone
            and selectors.admits_labels(constraint, node.name, node.labels)
            and selectors.tolerates_all(constraint, node.taints)
        )

    def _candidate(self, candidates: _Candidates, node: NodeInfo) -> None:
        if not self._admits(candidates.constraint, node):
            return
        assert node.zone is not None
        zone_nodes = candidates.zones.get(node.zone)
        if zone_nodes is None:
            zone_nodes = candidates.zones[node.zone] = ZoneNodes(node.zone, self)
        zone_nodes.nodes[node.name] = node
        zone_nodes.allocatable = resources.add(zone_nodes.allocatable, node.allocatable)
        zone_nodes.used = resources.add(zone_nodes.used, self._used.get(node.name, {}))
        candidates.node_zone[node.name] = node.zone

    def _uncandidate(self, candidates: _Candidates, name: str) -> None:
        zone = candidates.node_zone.pop(name, None)
        if zone is None:
            return
        zone_nodes = candidates.zones[zone]
        node = zone_nodes.nodes.pop(name)
        if not zone_nodes.nodes:
            del candidates.zones[zone]
            return
        zone_nodes.allocatable = resources.add(zone_nodes.allocatable, node.allocatable, sign=-1)
        zone_nodes.used = resources.add(zone_nodes.used, self._used.get(name, {}), sign=-1)

    # -- reads -------------------------------------------------------------------------------

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
        memo = self._derived.get(id(obj))
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
                memo = self._derived[id(obj)] = (obj, {})
            memo[1][compute] = value
        return value

    def by_uid(self, uid: str) -> Obj | None:
        pod = self._pod_by_uid.get(uid)
        if pod is not None:
            return pod.as_object()
        key = self._by_uid.get(uid)
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
        if labels is not None and len(labels) == 1:
            # The common ask, one indexed label (a gang's pods): its index entry is the answer.
            ((key, value),) = labels.items()
            if key in self.kept.indexed_labels:
                yield from self._pod_index.get((namespace, key, value), {}).values()
                return
        wanted = dict(labels or {})
        indexed = [(k, v) for k, v in wanted.items() if k in self.kept.indexed_labels]
        if indexed:
            pools = [self._pod_index.get((namespace, k, v), {}) for k, v in indexed]
            pool: Iterable[PodSummary] = min(pools, key=len).values()
        else:
            pool = self._pods.get(namespace, {}).values()
        for pod in pool:
            if all(pod.labels.get(k) == v for k, v in wanted.items()):
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
        for namespace, key, value in self._pod_index:
            if key == labels.JOB:
                yield namespace, value

    def holds_any(self) -> bool:
        """Some gang has a pod behind podium's gate (``held_gangs`` without building the list)."""
        return bool(self._held)

    def released(self, namespace: str, gang_key: str) -> int:
        """How many pods of the gang carry its label, are not behind podium's gate and have not
        finished: a gang with any is committed to its recorded zone."""
        return self._released.get((namespace, gang_key), 0)

    def held_gangs(self) -> list[tuple[str, str]]:
        """``(namespace, gang key)`` of every gang with a pod behind podium's gate that has not
        finished (``zone-chooser: hold``), sorted."""
        return sorted(self._held)

    def node(self, name: str) -> NodeInfo | None:
        return self._nodes.get(name)

    def nodes(self) -> Iterator[NodeInfo]:
        yield from self._nodes.values()

    def free_on(self, node: NodeInfo) -> resources.Resources:
        return resources.add(node.allocatable, self._used.get(node.name, {}), sign=-1)

    def candidate_zones(self, pod_spec: Obj) -> Mapping[str, ZoneNodes]:
        """Usable nodes in some zone that the pod's own selector, affinity and tolerations admit,
        by zone, with each zone's free capacity, from a cache per distinct constraint (node
        selector, required node affinity, tolerations) that pod and node events keep current:
        no scan of all nodes once a constraint has been seen."""
        constraint = {
            "nodeSelector": pod_spec.get("nodeSelector") or {},
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": selectors.required_terms(pod_spec)
                    }
                }
            },
            "tolerations": pod_spec.get("tolerations") or [],
        }
        try:
            key = orjson.dumps(constraint, option=orjson.OPT_SORT_KEYS)
        except TypeError:  # not JSON (an offline YAML oddity): decide without the cache
            return self._scan_candidates(constraint).zones
        candidates = self._candidates.get(key)
        if candidates is None:
            # A private copy: the cache outlives the request the constraint came from.
            candidates = self._scan_candidates(orjson.loads(key))
            self._candidates[key] = candidates
            if len(self._candidates) > CANDIDATE_CACHE_SIZE:
                self._candidates.popitem(last=False)
        else:
            self._candidates.move_to_end(key)
        return candidates.zones

    def _scan_candidates(self, constraint: Obj) -> _Candidates:
        candidates = _Candidates(constraint)
        for node in self._nodes.values():
            self._candidate(candidates, node)
        return candidates

    def reserved(self, *, since: datetime, exclude: str = "") -> dict[str, resources.Resources]:
        """Per zone, what the gangs decided at or after ``since`` (but ``exclude``) still need
        room for, so that a burst of new jobs does not all pick the same free space: the demand
        of their pods not yet created and of those pending, never of pods that are bound (their
        nodes count them), finished or deleted (``_share_of``). A gang all of whose pods bound,
        finished or went reserves nothing from that moment; ``since`` only bounds how long a gang
        whose remaining pods never come keeps its reservation.

        A running sum that every record, every pod event that changes a gang's pending or seen
        pods and every move of the window updates by one share: a query costs the same however
        many gangs were decided recently. The window moves forward with ``since``; a query for an
        earlier ``since`` (a clock set back) rebuilds it from the records decided since then."""
        start = since.timestamp()
        if start < self._window:
            self._shares.clear()
            self._reserved.clear()
            at = bisect.bisect_left(self._record_order, (start,))
            for _, key in self._record_order[at:]:
                if key in self._reservable:
                    self._add_share(key)
        elif start > self._window:
            low = bisect.bisect_left(self._record_order, (self._window,))
            high = bisect.bisect_left(self._record_order, (start,))
            for _, key in self._record_order[low:high]:
                self._drop_share(key)
        self._window = start
        out = dict(self._reserved)
        for key in self._gang_records.get(exclude, ()):
            if key in self._shares:
                zone, share = self._shares[key]
                out[zone] = resources.add(out.get(zone, {}), share, sign=-1)
        return out

    def gang_usage(self, gang_key: str) -> resources.Resources:
        """What the bound, running pods carrying podium's label for this gang request."""
        return self._gang_used.get(gang_key, {})

    def objects(self) -> Iterator[Obj]:
        yield from self._objects.values()
        for node in self._nodes.values():
            yield node.as_object()
        for pods in self._pods.values():
            for pod in pods.values():
                yield pod.as_object()

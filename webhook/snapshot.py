"""A point-in-time view of the cluster that decisions read; never the live client.

The same class serves the offline ``podium review`` (built from a list of objects) and the server
(kept current by the watch cache, one event at a time). Per-node usage is maintained
incrementally on every pod event, so a decision never scans all pods to learn free capacity.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Literal

from webhook import labels, resources, selectors

Obj = Mapping[str, Any]
EventType = Literal["ADDED", "MODIFIED", "DELETED"]
ObjectKey = tuple[str, str, str, str]  # (api group, kind, namespace, name)

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


def group_of(api_version: str) -> str:
    return api_version.split("/", 1)[0] if "/" in api_version else ""


def key_of(obj: Obj) -> ObjectKey:
    meta = obj.get("metadata") or {}
    return (
        group_of(str(obj.get("apiVersion", ""))),
        str(obj.get("kind", "")),
        str(meta.get("namespace") or ""),
        str(meta.get("name") or ""),
    )


def controller_of(obj: Obj) -> Obj | None:
    """The ownerReference with ``controller: true``, if any."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref  # type: ignore[no-any-return]
    return None


@dataclasses.dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    zone: str | None
    labels: Mapping[str, str]
    allocatable: resources.Resources
    usable: bool  # schedulable and Ready
    taints: tuple[Obj, ...]

    @classmethod
    def from_object(cls, node: Obj, zone_label: str) -> NodeInfo:
        meta = node.get("metadata") or {}
        spec = node.get("spec") or {}
        status = node.get("status") or {}
        labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions") or []
        )
        return cls(
            name=str(meta.get("name") or ""),
            zone=labels.get(zone_label),
            labels=labels,
            allocatable=resources.parse_resource_list(status.get("allocatable")),
            usable=ready and not spec.get("unschedulable", False),
            taints=tuple(spec.get("taints") or ()),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class _PodUsage:
    node: str
    requests: resources.Resources


def _usage_of(pod: Obj) -> _PodUsage | None:
    node = (pod.get("spec") or {}).get("nodeName")
    if not node or (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
        return None
    return _PodUsage(str(node), resources.pod_requests(pod.get("spec") or {}))


def _gang_of(pod: Obj) -> str | None:
    value = ((pod.get("metadata") or {}).get("labels") or {}).get(labels.JOB)
    return str(value) if value else None


def _is_record(obj: Obj) -> bool:
    obj_labels = (obj.get("metadata") or {}).get("labels") or {}
    return (
        obj_labels.get(labels.MANAGED_BY) == labels.MANAGER
        and obj_labels.get(labels.COMPONENT) == "decision"
    )


class Snapshot:
    """Objects by kind and name, plus the free capacity of every node, updated per event."""

    def __init__(self, *, zone_label: str) -> None:
        self.zone_label = zone_label
        self._objects: dict[ObjectKey, Obj] = {}
        self._by_uid: dict[str, ObjectKey] = {}
        self._pods_by_namespace: dict[str, dict[str, Obj]] = defaultdict(dict)
        self._nodes: dict[str, NodeInfo] = {}
        self._usage: dict[ObjectKey, _PodUsage] = {}
        self._used: dict[str, resources.Resources] = defaultdict(dict)
        #: Requests of bound, running pods per podium gang label value.
        self._gang_used: dict[str, resources.Resources] = defaultdict(dict)
        #: podium's decision records (ConfigMaps it manages), by key.
        self._records: dict[ObjectKey, Obj] = {}

    @classmethod
    def from_objects(cls, objects: Iterable[Obj], *, zone_label: str) -> Snapshot:
        snap = cls(zone_label=zone_label)
        for obj in objects:
            snap.apply("ADDED", obj)
        return snap

    # -- updates -----------------------------------------------------------------------------

    def apply(self, event: EventType, obj: Obj) -> None:
        key = key_of(obj)
        old = self._objects.pop(key, None)
        if old is not None:
            self._forget(key, old)
        if event != "DELETED":
            self._remember(key, obj)

    def _remember(self, key: ObjectKey, obj: Obj) -> None:
        self._objects[key] = obj
        uid = (obj.get("metadata") or {}).get("uid")
        if uid:
            self._by_uid[str(uid)] = key
        group, kind, namespace, name = key
        if (group, kind) == ("", "Node"):
            self._nodes[name] = NodeInfo.from_object(obj, self.zone_label)
        elif (group, kind) == ("", "Pod"):
            self._pods_by_namespace[namespace][name] = obj
            usage = _usage_of(obj)
            if usage is not None:
                self._usage[key] = usage
                self._used[usage.node] = resources.add(self._used[usage.node], usage.requests)
                gang = _gang_of(obj)
                if gang:
                    self._gang_used[gang] = resources.add(self._gang_used[gang], usage.requests)
        elif (group, kind) == ("", "ConfigMap") and _is_record(obj):
            self._records[key] = obj

    def _forget(self, key: ObjectKey, obj: Obj) -> None:
        uid = (obj.get("metadata") or {}).get("uid")
        if uid and self._by_uid.get(str(uid)) == key:
            del self._by_uid[str(uid)]
        group, kind, namespace, name = key
        if (group, kind) == ("", "Node"):
            self._nodes.pop(name, None)
        elif (group, kind) == ("", "Pod"):
            self._pods_by_namespace[namespace].pop(name, None)
            usage = self._usage.pop(key, None)
            if usage is not None:
                self._used[usage.node] = resources.add(
                    self._used[usage.node], usage.requests, sign=-1
                )
                gang = _gang_of(obj)
                if gang:
                    self._gang_used[gang] = resources.add(
                        self._gang_used[gang], usage.requests, sign=-1
                    )
        elif (group, kind) == ("", "ConfigMap"):
            self._records.pop(key, None)

    # -- reads -------------------------------------------------------------------------------

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> Obj | None:
        return self._objects.get((group_of(api_version), kind, namespace, name))

    def by_uid(self, uid: str) -> Obj | None:
        key = self._by_uid.get(uid)
        return self._objects.get(key) if key else None

    def namespace(self, name: str) -> Obj | None:
        return self._objects.get(("", "Namespace", "", name))

    def pods_in(self, namespace: str) -> Iterator[Obj]:
        yield from self._pods_by_namespace.get(namespace, {}).values()

    def node(self, name: str) -> NodeInfo | None:
        return self._nodes.get(name)

    def nodes(self) -> Iterator[NodeInfo]:
        yield from self._nodes.values()

    def free_on(self, node: NodeInfo) -> resources.Resources:
        return resources.add(node.allocatable, self._used.get(node.name, {}), sign=-1)

    def candidate_nodes(self, pod_spec: Obj) -> Iterator[NodeInfo]:
        """Usable nodes in some zone that the pod's own selector, affinity and tolerations admit."""
        for node in self._nodes.values():
            if (
                node.usable
                and node.zone
                and selectors.admits_labels(pod_spec, node.name, node.labels)
                and selectors.tolerates_all(pod_spec, node.taints)
            ):
                yield node

    def records(self) -> Iterator[Obj]:
        """podium's decision records in every namespace."""
        yield from self._records.values()

    def gang_usage(self, gang_key: str) -> resources.Resources:
        """What the bound, running pods carrying podium's label for this gang request."""
        return self._gang_used.get(gang_key, {})

    def objects(self) -> Iterator[Obj]:
        yield from self._objects.values()

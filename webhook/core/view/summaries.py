"""What the view keeps of a node (``NodeInfo``) and of a pod (``PodSummary``, by ``Kept``), and
how a pod object becomes its summary: the only code that reads a pod or node object's fields."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from typing import Any

from webhook.core import labels, resources, selectors
from webhook.core.objects import Obj, controller_ref, metadata_of

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})

_EMPTY: Mapping[str, str] = {}


def intern(value: object) -> str:
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
            intern(k): intern(v) if len(v) <= 64 else v
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
                (intern(e["name"]), e["value"])
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
        meta = metadata_of(node)
        spec = node.get("spec") or {}
        status = node.get("status") or {}
        node_labels = {intern(k): intern(v) for k, v in (meta.get("labels") or {}).items()}
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions") or []
        )
        return cls(
            name=intern(meta.get("name") or ""),
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


def scheduling_constraint(spec: Mapping[str, Any]) -> dict[str, Any]:
    """What of a pod spec decides which nodes may take it: its node selector, required node
    affinity and tolerations (``ClusterView.candidate_zones`` keys its cache by this)."""
    return {
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


def _held_fields(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> dict[str, Any]:
    """What the view keeps of a pod behind podium's gate besides the rest: where it may go, and
    since when it waits. Nothing for any other pod."""
    if not has_gate(spec):
        return {}
    return {
        "gated": True,
        "constraint": scheduling_constraint(spec),
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
    return intern(api_version), intern(kind), intern(name), intern(uid)


def _ready(conditions: object) -> str | None:
    for condition in conditions if isinstance(conditions, list) else ():
        if isinstance(condition, Mapping) and condition.get("type") == "Ready":
            value = condition.get("status")
            return intern(value) if isinstance(value, str) else None
    return None


def summarise_pod(
    kept: Kept,
    requests: resources.ByShape,
    namespace: str,
    name: str,
    pod: Obj,
) -> PodSummary:
    """The pod as the view keeps it: ``kept`` says which labels, annotations and env values,
    ``requests`` parses (and shares) its requests by shape."""
    meta = metadata_of(pod)
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    node, phase = spec.get("nodeName"), status.get("phase")
    return PodSummary(
        namespace=intern(namespace),
        name=name,
        uid=str(meta.get("uid") or ""),
        node=intern(node) if node else None,
        phase=intern(phase) if isinstance(phase, str) else None,
        ready=_ready(status.get("conditions")),
        requests=requests(spec),
        controller=_controller_tuple(pod),
        labels=kept.strings(meta.get("labels")),
        annotations=kept.strings(meta.get("annotations")),
        env=kept.env_of(spec),
        **_held_fields(meta, spec),
    )

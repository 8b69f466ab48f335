"""Fluent builders for the objects tests feed podium, in the style of Kueue's
``pkg/util/testingjobs`` wrappers: "this object, plus these changes", then ``.obj()``::

    PodBuilder("team-a", name="p").label(...).gpus(8).obj()
    NodeBuilder("a-1").zone("zone-a").gpus(8).obj()
    JobBuilder("kubeflow.org/v1", "PyTorchJob", "llama").uid(...).spec(...).obj()
"""

from __future__ import annotations

import copy
import uuid
from typing import Any, Self

from webhook.core.settings import Settings, ZoneChooser

ZONE = "topology.kubernetes.io/zone"


def pinning(**fields: Any) -> Settings:
    """Settings for tests of the immediate pin at admission (``zone-chooser: pin``; the default
    is ``hold``), with ``fields`` changed."""
    return Settings(zone_chooser=ZoneChooser.PIN, **fields)


#: ``pinning()``: the settings of tests about pinning at admission.
PIN = pinning()


def new_uid() -> str:
    return str(uuid.uuid4())


class PodBuilder:
    def __init__(
        self, namespace: str = "team-a", name: str | None = None, generate_name: str | None = None
    ) -> None:
        meta: dict[str, Any] = {"namespace": namespace, "labels": {}, "annotations": {}}
        if name:
            meta["name"] = name
        if generate_name or not name:
            meta["generateName"] = generate_name or "pod-"
        self._pod: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": meta,
            "spec": {"containers": [{"name": "main", "image": "trainer:1", "resources": {}}]},
        }

    def label(self, key: str, value: str) -> Self:
        self._pod["metadata"]["labels"][key] = value
        return self

    def annotate(self, key: str, value: str) -> Self:
        self._pod["metadata"]["annotations"][key] = value
        return self

    def owner(
        self, api_version: str, kind: str, name: str, uid: str, controller: bool = True
    ) -> Self:
        self._pod["metadata"].setdefault("ownerReferences", []).append(
            {
                "apiVersion": api_version,
                "kind": kind,
                "name": name,
                "uid": uid,
                "controller": controller,
                "blockOwnerDeletion": True,
            }
        )
        return self

    def uid(self, uid: str | None = None) -> Self:
        self._pod["metadata"]["uid"] = uid or new_uid()
        return self

    def gpus(self, n: int) -> Self:
        res = self._pod["spec"]["containers"][0]["resources"]
        res.setdefault("limits", {})["nvidia.com/gpu"] = str(n)
        res.setdefault("requests", {})["nvidia.com/gpu"] = str(n)
        return self

    def requests(self, **amounts: str) -> Self:
        res = self._pod["spec"]["containers"][0]["resources"]
        res.setdefault("requests", {}).update({k.replace("_", "."): v for k, v in amounts.items()})
        return self

    def env(self, name: str, value: str) -> Self:
        self._pod["spec"]["containers"][0].setdefault("env", []).append(
            {"name": name, "value": value}
        )
        return self

    def node_selector(self, key: str, value: str) -> Self:
        self._pod["spec"].setdefault("nodeSelector", {})[key] = value
        return self

    def affinity_terms(self, *terms: dict[str, Any]) -> Self:
        self._pod["spec"]["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
            }
        }
        return self

    def bound(self, node: str, phase: str = "Running") -> Self:
        self._pod["spec"]["nodeName"] = node
        self._pod["status"] = {"phase": phase}
        if "name" not in self._pod["metadata"]:
            self._pod["metadata"]["name"] = self._pod["metadata"]["generateName"] + new_uid()[:5]
        self._pod["metadata"].setdefault("uid", new_uid())
        return self

    def gate(self, name: str = "podium.dev/hold") -> Self:
        self._pod["spec"].setdefault("schedulingGates", []).append({"name": name})
        return self

    def host_network(self) -> Self:
        self._pod["spec"]["hostNetwork"] = True
        return self

    def spec(self, **fields: Any) -> Self:
        self._pod["spec"].update(fields)
        return self

    def obj(self) -> dict[str, Any]:
        return copy.deepcopy(self._pod)


class NodeBuilder:
    """A Ready, schedulable node with 64 CPUs, 512Gi, 110 pods and 8 GPUs, in no zone."""

    def __init__(self, name: str) -> None:
        alloc = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"}
        self._node: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "uid": new_uid(),
                "labels": {"kubernetes.io/hostname": name},
            },
            "spec": {},
            "status": {
                "allocatable": alloc,
                "capacity": dict(alloc),
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }

    def zone(self, zone: str | None) -> Self:
        if zone is None:
            self._node["metadata"]["labels"].pop(ZONE, None)
        else:
            self._node["metadata"]["labels"][ZONE] = zone
        return self

    def label(self, key: str, value: str) -> Self:
        self._node["metadata"]["labels"][key] = value
        return self

    def allocatable(self, **amounts: str) -> Self:
        """``cpu="32"``, ``memory="1Ti"``; ``nvidia_com_gpu`` names ``nvidia.com/gpu``."""
        named = {k.replace("nvidia_com_", "nvidia.com/"): v for k, v in amounts.items()}
        self._node["status"]["allocatable"].update(named)
        self._node["status"]["capacity"].update(named)
        return self

    def gpus(self, n: int) -> Self:
        return self.allocatable(nvidia_com_gpu=str(n))

    def taint(self, key: str, effect: str = "NoSchedule", value: str | None = None) -> Self:
        taint = {"key": key, "effect": effect} | ({"value": value} if value is not None else {})
        self._node["spec"].setdefault("taints", []).append(taint)
        return self

    def not_ready(self) -> Self:
        self._node["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
        return self

    def unschedulable(self) -> Self:
        self._node["spec"]["unschedulable"] = True
        return self

    def obj(self) -> dict[str, Any]:
        return copy.deepcopy(self._node)


def node(
    name: str,
    zone: str | None,
    gpus: int = 8,
    *,
    cpu: str = "64",
    memory: str = "512Gi",
    ready: bool = True,
    unschedulable: bool = False,
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    """``NodeBuilder`` in one call, for the tests outside tests/core that still use it."""
    built = NodeBuilder(name).zone(zone).gpus(gpus).allocatable(cpu=cpu, memory=memory)
    for key, value in (labels or {}).items():
        built.label(key, value)
    for taint in taints or []:
        built.taint(taint["key"], taint.get("effect", "NoSchedule"), taint.get("value"))
    if not ready:
        built.not_ready()
    if unschedulable:
        built.unschedulable()
    return built.obj()


def namespace(name: str, enabled: bool = True, **labels: str) -> dict[str, Any]:
    all_labels = {"kubernetes.io/metadata.name": name, **labels}
    if enabled:
        all_labels["podium.dev/enabled"] = "true"
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "uid": new_uid(), "labels": all_labels},
    }


class JobBuilder:
    """Any namespaced object a framework adapter reads: a job, a batch Job, a StatefulSet, …"""

    def __init__(self, api_version: str, kind: str, name: str, namespace: str = "team-a") -> None:
        self._job: dict[str, Any] = {
            "apiVersion": api_version,
            "kind": kind,
            "metadata": {"name": name, "namespace": namespace, "uid": new_uid()},
            "spec": {},
        }

    def uid(self, uid: str) -> Self:
        self._job["metadata"]["uid"] = uid
        return self

    def spec(self, **fields: Any) -> Self:
        self._job["spec"].update(fields)
        return self

    def annotate(self, key: str, value: str) -> Self:
        self._job["metadata"].setdefault("annotations", {})[key] = value
        return self

    def owned_by(self, owner: dict[str, Any], controller: bool = True) -> Self:
        """``owner`` becomes the object's (controller) ownerReference."""
        self._job["metadata"].setdefault("ownerReferences", []).append(
            owner_ref(owner, controller=controller)
        )
        return self

    def owner(self, ref: dict[str, Any]) -> Self:
        """An ownerReference as given, for owners that are not objects of their own."""
        self._job["metadata"].setdefault("ownerReferences", []).append(ref)
        return self

    def obj(self) -> dict[str, Any]:
        return copy.deepcopy(self._job)


def job(
    api_version: str,
    kind: str,
    name: str,
    namespace: str = "team-a",
    *,
    spec: dict[str, Any] | None = None,
    uid: str | None = None,
    annotations: dict[str, str] | None = None,
    owner: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``JobBuilder`` in one call, for the tests outside tests/core that still use it."""
    built = JobBuilder(api_version, kind, name, namespace).spec(**(spec or {}))
    if uid:
        built.uid(uid)
    for key, value in (annotations or {}).items():
        built.annotate(key, value)
    if owner:
        built.owner(owner)
    return built.obj()


def template(gpus: int = 8, cpu: str | None = None) -> dict[str, Any]:
    requests: dict[str, str] = {"nvidia.com/gpu": str(gpus)}
    if cpu:
        requests["cpu"] = cpu
    return {
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "trainer:1",
                    "resources": {"limits": dict(requests), "requests": requests},
                }
            ]
        }
    }


def owner_ref(obj: dict[str, Any], controller: bool = True) -> dict[str, Any]:
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": controller,
        "blockOwnerDeletion": True,
    }

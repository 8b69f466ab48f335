"""Fluent builders for the objects tests feed podium: ``PodBuilder("ns").label(...).obj()``."""

from __future__ import annotations

import copy
import uuid
from typing import Any, Self

ZONE = "topology.kubernetes.io/zone"


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

    def host_network(self) -> Self:
        self._pod["spec"]["hostNetwork"] = True
        return self

    def spec(self, **fields: Any) -> Self:
        self._pod["spec"].update(fields)
        return self

    def obj(self) -> dict[str, Any]:
        return copy.deepcopy(self._pod)


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
    all_labels = {"kubernetes.io/hostname": name, **(labels or {})}
    if zone is not None:
        all_labels[ZONE] = zone
    alloc = {"cpu": cpu, "memory": memory, "pods": "110", "nvidia.com/gpu": str(gpus)}
    spec: dict[str, Any] = {}
    if unschedulable:
        spec["unschedulable"] = True
    if taints:
        spec["taints"] = taints
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": new_uid(), "labels": all_labels},
        "spec": spec,
        "status": {
            "allocatable": alloc,
            "capacity": alloc,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def namespace(name: str, enabled: bool = True, **labels: str) -> dict[str, Any]:
    all_labels = {"kubernetes.io/metadata.name": name, **labels}
    if enabled:
        all_labels["podium.dev/enabled"] = "true"
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "uid": new_uid(), "labels": all_labels},
    }


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
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid or new_uid()}
    if annotations:
        meta["annotations"] = annotations
    if owner:
        meta["ownerReferences"] = [owner]
    return {"apiVersion": api_version, "kind": kind, "metadata": meta, "spec": spec or {}}


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

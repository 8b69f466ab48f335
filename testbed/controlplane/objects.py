"""Objects every test cluster needs: namespaces, fake KWOK nodes, CRDs, and the audit log."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from testbed.controlplane.api import Api, ApiError, ControlPlaneError
from testbed.controlplane.flags import FAKE_NODE_ANNOTATION

__all__ = [
    "Wait",
    "audit_events",
    "crd_established",
    "create_fake_nodes",
    "create_namespace",
    "delete_namespace",
    "delete_namespaces",
    "fake_node",
    "install_crds",
    "node_ready",
]

#: ``wait(what, predicate, timeout=...)``: poll until true, raise on timeout.
Wait = Callable[..., None]
_CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
_FORCE = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}


def create_namespace(
    api: Api, wait: Wait, name: str, labels: Mapping[str, str] | None = None
) -> None:
    """Create a namespace and wait until pods can be made in it (its "default"
    ServiceAccount exists)."""
    metadata: dict[str, Any] = {"name": name}
    if labels:
        metadata["labels"] = dict(labels)
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}
    api.request("POST", "/api/v1/namespaces", namespace)
    wait(
        f"the default ServiceAccount of namespace {name}",
        lambda: api.exists(f"/api/v1/namespaces/{name}/serviceaccounts/default"),
    )


def delete_namespace(api: Api, wait: Wait, name: str, *, timeout: float = 120.0) -> None:
    """Delete a namespace (one already gone is fine) and wait until it is gone, so what its
    pods held (fake GPUs, PodGroup finalizers) is free again for the next test."""
    delete_namespaces(api, wait, [name], timeout=timeout)


def delete_namespaces(
    api: Api, wait: Wait, names: Sequence[str], *, timeout: float = 120.0
) -> None:
    """Delete namespaces (those already gone are fine) and wait until all are gone.

    Their pods are deleted right after the namespaces, with grace period 0 (as ``kubectl delete
    --force`` does; a terminating namespace takes no new pods): the namespace controller, finding
    a pod that is not finished, looks again only after half its termination grace period (16 s
    for the default 30 s), though there is no kubelet here to wait for. The controller's own 5 s
    before its first look remain."""
    paths = [f"/api/v1/namespaces/{name}" for name in names]
    for path in paths:
        for doomed, options in ((path, None), (f"{path}/pods", _FORCE)):
            try:
                api.request("DELETE", doomed, options)
            except ApiError as error:
                if error.status != 404:
                    raise
    wait(
        f"namespaces {list(names)} to be deleted",
        lambda: not any(api.exists(path) for path in paths),
        timeout=timeout,
    )


def fake_node(name: str, zone: str, gpus: int) -> dict[str, Any]:
    """A Node kwok plays: zone/region/hostname labels, ``type=kwok``, the annotation kwok
    manages, no taints, cpu 64, memory 512Gi, pods 110 and ``gpus`` ``nvidia.com/gpu``."""
    key, value = FAKE_NODE_ANNOTATION
    resources = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "topology.kubernetes.io/zone": zone,
                "topology.kubernetes.io/region": "local",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
            },
            "annotations": {key: value},
        },
        "spec": {},
        "status": {"capacity": resources, "allocatable": resources},
    }


def create_fake_nodes(
    api: Api,
    wait: Wait,
    zones: Mapping[str, Sequence[int]],
    *,
    wait_ready: bool = True,
    timeout: float = 120.0,
) -> list[str]:
    """One `fake_node` per GPU count, per zone, named ``kwok-<zone>-<index>``; return their
    names. With ``wait_ready``, wait until kwok marks them Ready."""
    names: list[str] = []
    for zone, gpu_counts in zones.items():
        for index, gpus in enumerate(gpu_counts):
            node = fake_node(f"kwok-{zone}-{index}", zone, gpus)
            # Create with the status in one step (kept on create): kwok initialises the
            # node's conditions and keeps capacity and allocatable as they are.
            try:
                api.request("POST", "/api/v1/nodes", node)
            except ApiError as error:
                if error.status != 409:
                    raise
                api.apply(node)
                api.apply(node, subresource="status")
            names.append(node["metadata"]["name"])
    if wait_ready:
        wait(
            f"nodes {names} to be Ready",
            lambda: all(node_ready(api, n) for n in names),
            timeout=timeout,
        )
    return names


def node_ready(api: Api, name: str) -> bool:
    """Ready per kwok and schedulable: the not-ready taint is gone."""
    node = api.request("GET", f"/api/v1/nodes/{name}")
    conditions = node.get("status", {}).get("conditions") or []
    taints = node.get("spec", {}).get("taints") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions) and not any(
        t["key"] == "node.kubernetes.io/not-ready" for t in taints
    )


def install_crds(
    api: Api, wait: Wait, paths: Iterable[Path | str], *, timeout: float = 180.0
) -> list[str]:
    """Create (or server-side apply) the CRDs in the YAML files; wait until Established.
    Returns the CRD names."""
    names: list[str] = []
    for path in paths:
        for document in yaml.safe_load_all(Path(path).read_text()):
            if not document:
                continue
            if document.get("kind") != "CustomResourceDefinition":
                raise ControlPlaneError(f"{path}: not a CustomResourceDefinition")
            # Create (fast); server-side apply, which costs seconds on these big schemas,
            # only to update one that exists.
            try:
                api.request("POST", _CRDS, document)
            except ApiError as error:
                if error.status != 409:
                    raise
                api.apply(document)
            names.append(document["metadata"]["name"])
    # Each GET returns a whole (big) CRD: ask only about those not yet Established.
    pending = set(names)

    def established() -> bool:
        pending.difference_update([n for n in sorted(pending) if crd_established(api, n)])
        return not pending

    wait(f"CRDs {names} to be Established", established, timeout=timeout)
    return names


def crd_established(api: Api, name: str) -> bool:
    crd = api.request("GET", f"{_CRDS}/{name}")
    conditions = crd.get("status", {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


def audit_events(audit_log: Path) -> list[dict[str, Any]]:
    """The audit log so far, one dict per event."""
    if not audit_log.exists():
        return []
    events: list[dict[str, Any]] = []
    for line in audit_log.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            events.append(json.loads(line))
    return events
